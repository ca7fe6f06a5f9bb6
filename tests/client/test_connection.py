"""BrokerConnection against a fake broker on 127.0.0.1: pipelining, negotiation, timeouts, loss."""

import random

import pytest
import trio

from kcore.client import (
    BrokerConnection,
    ConnectionFailed,
    ConnectionLost,
    ConnectTimeout,
    ProtocolError,
    RequestTimeout,
    UnsupportedVersionError,
)
from kcore.protocol import APIS
from kcore.protocol import messages as m
from kcore.protocol.api import encode_response_bytes

from .fake_broker import Drop, FakeBroker, free_port, running, trio_test

CODEC_MAX = {k: a.max_version for k, a in APIS.items()}


def _topics(*names):
    return m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=n) for n in names])


async def _echo_cluster_id(broker, conn, req):
    """Metadata answered with cluster_id = the requested topic name, after a random delay."""
    await trio.sleep(random.random() * 0.002)
    return m.MetadataResponse(cluster_id=req.body.topics[0].name)


async def _connect(broker, **kw):
    return await BrokerConnection.connect("127.0.0.1", broker.port, client_id="test", **kw)


@trio_test
async def test_connection_negotiates_at_the_codec_max_and_keeps_broker_ranges():
    broker = FakeBroker(api_ranges={18: (0, 4), 3: (0, 5), 1: (4, 30)})
    async with running(broker), await _connect(broker) as conn:
        assert conn.api_versions_version == CODEC_MAX[18]
        assert conn.api_versions == {18: (0, 4), 3: (0, 5), 1: (4, 30)}
        assert conn.version_for(3) == 5  # broker max below codec max
        assert conn.version_for(1) == CODEC_MAX[1]  # codec max below broker max
        await conn.request(_topics("a"))
        assert broker.requests[-1].version == 5
        await conn.request(_topics("a"), 2)  # an explicit version is sent as is
        assert broker.requests[-1].version == 2
        assert broker.requests[0].client_id == "test"
        assert broker.requests[0].body.client_software_name == "kcore"


@trio_test
async def test_connection_api_versions_unsupported_version_falls_back_to_the_offered_max():
    broker = FakeBroker(api_versions_max=2, fallback_range=(0, 2))
    async with running(broker), await _connect(broker) as conn:
        assert [r.version for r in broker.requests_for(18)] == [CODEC_MAX[18], 2]
        assert conn.api_versions_version == 2
        assert conn.api_versions[3] == (APIS[3].min_version, APIS[3].max_version)


@trio_test
async def test_connection_api_versions_fallback_without_a_range_retries_at_v0():
    broker = FakeBroker(api_versions_max=0)
    broker.fallback_range = None
    async with running(broker), await _connect(broker) as conn:
        assert [r.version for r in broker.requests_for(18)] == [CODEC_MAX[18], 0]
        assert conn.api_versions_version == 0


@trio_test
async def test_connection_api_versions_fallback_that_offers_no_lower_version_fails_connect():
    # A broker that refuses every version but claims to support them: no loop, a clear error.
    broker = FakeBroker(api_versions_max=-1, fallback_range=(0, 4))
    async with running(broker):
        with pytest.raises(ConnectionFailed, match="no version in common"):
            await _connect(broker)
        assert len(broker.requests_for(18)) == 1


@trio_test
async def test_connection_request_for_an_api_the_broker_lacks_raises_unsupported_version():
    broker = FakeBroker(api_ranges={18: (0, 4), 3: (0, 12)})
    async with running(broker), await _connect(broker) as conn:
        with pytest.raises(UnsupportedVersionError, match="does not support Fetch"):
            await conn.request(m.FetchRequest())
        broker.api_ranges = {}
        conn.api_versions[1] = (30, 40)  # ranges that do not overlap the codec's
        with pytest.raises(UnsupportedVersionError, match="Fetch"):
            conn.version_for(1)
        with pytest.raises(UnsupportedVersionError):
            await conn.request(_topics("a"), 99)
        assert not conn.closed


@trio_test
async def test_connection_pipelines_100_concurrent_requests_each_gets_its_own_response():
    broker = FakeBroker(handlers={3: _echo_cluster_id})
    results = {}
    async with running(broker), await _connect(broker) as conn:

        async def one(i):
            results[i] = (await conn.request(_topics(f"t{i}"))).cluster_id

        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(one, i)
        assert results == {i: f"t{i}" for i in range(100)}
        assert len(broker.connections) == 1
        assert conn.in_flight == 0
        # one connection, one correlation id each, sent in order
        ids = [r.correlation_id for r in broker.requests_for(3)]
        assert sorted(ids) == ids and len(set(ids)) == 100


@trio_test
async def test_connection_pipelined_requests_are_in_flight_together():
    release = trio.Event()

    async def held(broker, conn, req):
        await release.wait()
        return m.MetadataResponse(cluster_id=req.body.topics[0].name)

    broker = FakeBroker(handlers={3: held})
    async with running(broker), await _connect(broker) as conn:
        got = []
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(lambda i=i: _append(got, conn, i))
            with trio.fail_after(2):
                while conn.in_flight < 10:
                    await trio.sleep(0.001)
            release.set()
        assert sorted(got) == [f"t{i}" for i in range(10)]


async def _append(out, conn, i):
    out.append((await conn.request(_topics(f"t{i}"))).cluster_id)


@trio_test
async def test_connection_request_timeout_raises_and_the_late_response_is_dropped():
    async def slow_then_fast(broker, conn, req):
        if req.body.topics[0].name == "slow":
            await trio.sleep(0.3)
        return m.MetadataResponse(cluster_id=req.body.topics[0].name)

    broker = FakeBroker(handlers={3: slow_then_fast})
    async with running(broker), await _connect(broker, request_timeout=5) as conn:
        with pytest.raises(RequestTimeout, match="Metadata"):
            await conn.request(_topics("slow"), timeout=0.05)
        assert not conn.closed and conn.in_flight == 1
        # The next answer comes after the dropped one; it must not be mistaken for it.
        assert (await conn.request(_topics("next"))).cluster_id == "next"
        assert conn.in_flight == 0


@trio_test
async def test_connection_request_timeout_is_a_trio_too_slow_error():
    async def never(broker, conn, req):
        await trio.sleep_forever()

    broker = FakeBroker(handlers={3: never})
    async with running(broker), await _connect(broker, request_timeout=0.05) as conn:
        with pytest.raises(trio.TooSlowError):
            await conn.request(_topics("x"))


@trio_test
async def test_connection_caller_cancellation_passes_the_reader_role_on():
    # The first caller becomes the reader and is cancelled; the others must still get answers.
    gate = trio.Event()

    async def gated(broker, conn, req):
        await gate.wait()
        return m.MetadataResponse(cluster_id=req.body.topics[0].name)

    broker = FakeBroker(handlers={3: gated})
    async with running(broker), await _connect(broker) as conn:
        got = []
        async with trio.open_nursery() as nursery:
            first = trio.CancelScope()
            nursery.start_soon(_cancellable, first, conn)
            while conn.in_flight < 1:  # the first caller is now the reader
                await trio.sleep(0.001)
            for i in range(5):
                nursery.start_soon(_append, got, conn, i)
            while conn.in_flight < 6:
                await trio.sleep(0.001)
            first.cancel()
            await trio.sleep(0.01)
            gate.set()
        assert sorted(got) == [f"t{i}" for i in range(5)]


async def _cancellable(scope, conn):
    with scope:
        await conn.request(_topics("cancelled"))


@trio_test
async def test_connection_loss_fails_every_in_flight_request_without_hanging():
    async def drop_at_five(broker, conn, req):
        if conn.handled == 5:
            await trio.sleep(0.01)
            raise Drop
        return m.MetadataResponse(cluster_id=req.body.topics[0].name)

    broker = FakeBroker(handlers={3: drop_at_five})
    outcomes = {}
    async with running(broker), await _connect(broker) as conn:

        async def one(i):
            try:
                outcomes[i] = (await conn.request(_topics(f"t{i}"))).cluster_id
            except ConnectionLost as e:
                outcomes[i] = e

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(one, i)
                await trio.sleep(0)  # start them in order
        answered = [i for i, v in outcomes.items() if isinstance(v, str)]
        lost = [i for i, v in outcomes.items() if isinstance(v, ConnectionLost)]
        assert len(outcomes) == 20 and len(answered) == 4 and len(lost) == 16
        assert conn.closed
        with pytest.raises(ConnectionLost):
            await conn.request(_topics("after"))


@trio_test
async def test_connection_broker_closing_an_idle_connection_fails_the_next_request():
    broker = FakeBroker()
    async with running(broker), await _connect(broker) as conn:
        await broker.connections[0].stream.aclose()
        with pytest.raises(ConnectionLost):
            await conn.request(_topics("x"))
        assert conn.closed


@trio_test
async def test_connection_aclose_fails_in_flight_requests():
    async def never(broker, conn, req):
        await trio.sleep_forever()

    broker = FakeBroker(handlers={3: never})
    errors = []
    async with running(broker):
        conn = await _connect(broker)

        async def one():
            try:
                await conn.request(_topics("x"))
            except ConnectionLost as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
            while conn.in_flight < 3:
                await trio.sleep(0.001)
            await conn.aclose()
        assert len(errors) == 3 and conn.closed
        assert "closed by the client" in str(errors[0])


@trio_test
async def test_connection_garbage_from_the_broker_is_a_protocol_error_for_all_in_flight():
    async def garbage(broker, conn, req):
        return b"\0\0\0\x08" + b"\x7f\xff\xff\xff" + b"junk"

    broker = FakeBroker(handlers={3: garbage})
    async with running(broker), await _connect(broker) as conn:
        with pytest.raises(ProtocolError, match="unknown correlation id"):
            await conn.request(_topics("x"))
        assert conn.closed
        with pytest.raises(ProtocolError):
            await conn.request(_topics("x"))


@trio_test
async def test_connection_out_of_order_answer_is_a_protocol_error():
    async def answer_the_next_one(broker, conn, req):
        await trio.sleep(0.05)  # by now the client has sent the second request too
        body = m.MetadataResponse()
        return encode_response_bytes(3, req.version, req.correlation_id + 1, body)

    broker = FakeBroker(handlers={3: answer_the_next_one})
    errors = []
    async with running(broker), await _connect(broker) as conn:

        async def one(name):
            with pytest.raises(ProtocolError) as info:
                await conn.request(_topics(name))
            errors.append(info.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "a")
            nursery.start_soon(one, "b")
    assert len(errors) == 2 and "out-of-order" in str(errors[0])


@trio_test
async def test_connection_oversized_frame_is_a_protocol_error():
    async def huge(broker, conn, req):
        return (10_000_000).to_bytes(4, "big") + b"\0" * 16

    broker = FakeBroker(handlers={3: huge})
    async with running(broker), await _connect(broker, max_frame_bytes=1_000_000) as conn:
        with pytest.raises(ProtocolError, match="exceeds"):
            await conn.request(_topics("x"))


@trio_test
async def test_connection_produce_acks_0_expects_no_response():
    async def produce(broker, conn, req):
        if req.body.acks == 0:
            return None
        return m.ProduceResponse()

    broker = FakeBroker(handlers={0: produce})
    async with running(broker), await _connect(broker) as conn:
        assert await conn.request(m.ProduceRequest(acks=0, timeout_ms=100)) is None
        assert conn.in_flight == 0
        # the stream stays in step: the next request gets its own answer
        assert (await conn.request(m.ProduceRequest(acks=1, timeout_ms=100))).responses == []
        assert [r.body.acks for r in broker.requests_for(0)] == [0, 1]


@trio_test
async def test_connection_refused_raises_connection_failed():
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        await BrokerConnection.connect("127.0.0.1", free_port(), connect_timeout=2)


@trio_test
async def test_connection_connect_timeout_when_api_versions_never_answers():
    async def never(broker, conn, req):
        await trio.sleep_forever()

    broker = FakeBroker(handlers={18: never})
    async with running(broker):
        with pytest.raises(ConnectTimeout):
            await _connect(broker, connect_timeout=0.1)


@trio_test
async def test_connection_dropped_during_api_versions_raises_connection_failed():
    async def drop(broker, conn, req):
        raise Drop

    broker = FakeBroker(handlers={18: drop})
    async with running(broker):
        with pytest.raises(ConnectionFailed, match="ApiVersions") as info:
            await _connect(broker)
        assert isinstance(info.value.__cause__, ConnectionLost)
