"""KIP-368 on kcore's client: a connection whose broker gave the SASL session a lifetime logs in
again on the same connection before it ends, without losing a request in flight.

A fake broker on 127.0.0.1 answers PLAIN with a 10 s session and, as Kafka's SocketServer,
closes the connection at the first request other than SaslHandshake/SaslAuthenticate that comes
after the session's end. Time is Trio's MockClock, moved by hand (``clock.jump``): the sockets
are real, the lifetimes are not waited for.
"""

from __future__ import annotations

import trio
import trio.testing

from kcore.client import BrokerConnection
from kcore.protocol import messages as m
from kcore.security.sasl_client import SaslClientSettings, reauthentication_delay_ms

from .fake_broker import Drop, FakeBroker, running

LIFETIME_MS = 10_000
PLAIN = SaslClientSettings("PLAIN", "alice", "alice-secret")


class SessionBroker(FakeBroker):
    """A FakeBroker whose connections' SASL sessions last :data:`LIFETIME_MS`."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.expires: dict[int, float] = {}  # connection index -> trio time
        self.release = trio.Event()  # a "slow" Metadata waits for it
        self.handlers.update({17: _handshake, 36: _authenticate, 3: _metadata})


async def _handshake(broker, conn, req):
    return m.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])


async def _authenticate(broker, conn, req):
    broker.expires[conn.index] = trio.current_time() + LIFETIME_MS / 1000
    return m.SaslAuthenticateResponse(error_code=0, auth_bytes=b"", session_lifetime_ms=LIFETIME_MS)


async def _metadata(broker, conn, req):
    if trio.current_time() >= broker.expires.get(conn.index, 0):
        raise Drop  # the session expired: Kafka closes the connection
    topics = req.body.topics or []
    if topics and topics[0].name == "slow":
        await broker.release.wait()
    return m.MetadataResponse(cluster_id=topics[0].name if topics else None)


def _topic(name: str):
    return m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=name)])


def _run(test):
    clock = trio.testing.MockClock()  # rate 0: time moves only by jump()
    trio.run(test, clock, clock=clock)


def test_reauthentication_delay_is_85_to_95_percent_of_the_lifetime():
    import random

    rng = random.Random(7)
    delays = [reauthentication_delay_ms(LIFETIME_MS, rng) for _ in range(1000)]
    assert min(delays) >= 8500 and max(delays) <= 9500
    assert max(delays) - min(delays) > 800  # spread, so clients do not all log in at once
    assert reauthentication_delay_ms(0) is None


def test_connection_reauthenticates_on_the_same_connection_across_lifetimes():
    async def test(clock):
        broker = SessionBroker()
        async with running(broker):
            conn = await BrokerConnection.connect("127.0.0.1", broker.port, sasl=PLAIN)
            async with conn:
                assert 8.5 <= conn.reauthenticate_at <= 9.5
                for lifetime in range(4):
                    clock.jump(5.0)  # mid-session: no login
                    assert (await conn.request(_topic(f"a{lifetime}"))).cluster_id == f"a{lifetime}"
                    clock.jump(4.6)  # past 95 %, before the end
                    assert (await conn.request(_topic(f"b{lifetime}"))).cluster_id == f"b{lifetime}"
                assert conn.reauthentications == 4
        assert len(broker.connections) == 1  # never reconnected
        keys = [r.api_key for r in broker.requests if r.api_key in (17, 36, 3)]
        assert keys == [17, 36] + [3, 17, 36, 3] * 4

    _run(test)


def test_connection_keeps_requests_in_flight_across_a_reauthentication():
    async def test(clock):
        broker = SessionBroker()
        async with running(broker):
            conn = await BrokerConnection.connect("127.0.0.1", broker.port, sasl=PLAIN)
            got = {}

            async def ask(name):
                got[name] = (await conn.request(_topic(name))).cluster_id

            async with conn, trio.open_nursery() as nursery:
                clock.jump(8.0)  # before any re-authentication is due
                nursery.start_soon(ask, "slow")
                await trio.testing.wait_all_tasks_blocked()
                clock.jump(1.6)  # due now; the slow request is still in flight
                nursery.start_soon(ask, "after")
                await trio.testing.wait_all_tasks_blocked()
                assert conn.in_flight >= 1
                broker.release.set()
            assert got == {"slow": "slow", "after": "after"}
            assert conn.reauthentications == 1
        keys = [r.api_key for r in broker.requests if r.api_key in (17, 36, 3)]
        assert keys == [17, 36, 3, 17, 36, 3]  # the slow one answered first, then the login
        assert len(broker.connections) == 1

    _run(test)
