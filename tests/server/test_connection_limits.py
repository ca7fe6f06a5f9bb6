"""Connection limits over real sockets (Kafka's ConnectionQuotas): max.connections.per.ip and
its overrides close the connection at once after accept, max.connections makes the acceptor
wait, the inter-broker listener is exempt and closes another listener's least recently used
connection. Peers 127.0.0.2 and 127.0.0.3 are loopback addresses of their own (Linux routes
127/8 to lo). The broker-level tests (confluent-kafka, dynamic configs) are in
tests/server/test_connection_limits_broker.py."""

from __future__ import annotations

import struct

import trio
import trio.testing

from kcore.protocol import decode_response, encode_request
from kcore.protocol import messages as m
from kcore.server.connection_quotas import ConnectionLimitsConfig, limits_from_layers
from kcore.server.handlers import api_versions
from kcore.server.network import ConnectionLimits, KafkaServer, ListenerSpec, resolve_host
from kcore.server.registry import BROKER, HandlerRegistry

_BODY = m.ApiVersionsRequest(client_software_name="kcore-test", client_software_version="1.0")


async def connect(port: int, source: str) -> trio.SocketStream:
    """A TCP connection to 127.0.0.1:``port`` from the loopback address ``source``."""
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def answered(stream: trio.SocketStream, correlation_id: int = 1) -> bool:
    """Whether an ApiVersions request on ``stream`` is answered (False: the broker closed)."""
    request = encode_request(18, 3, correlation_id, "limits", _BODY)
    data = b""
    try:
        await stream.send_all(request)
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return False
            data += chunk
    except (trio.BrokenResourceError, ConnectionError):
        return False
    cid, body = decode_response(18, 3, data[4:])
    return cid == correlation_id and body.error_code == 0


async def served_once_freed(port: int, source: str) -> trio.SocketStream:
    """A served connection from ``source``, retried while the broker has not yet seen a close
    that frees a slot (the close is asynchronous to the client)."""
    while True:
        stream = await connect(port, source)
        if await answered(stream):
            return stream
        await stream.aclose()
        await trio.sleep(0.05)


def _registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    api_versions.register(registry)
    return registry


def _run(check, quotas: ConnectionLimitsConfig, listeners=("EXTERNAL",), inter_broker=None):
    async def main():
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                limits = ConnectionLimits(quotas=quotas, inter_broker_listener=inter_broker)
                server = KafkaServer(_registry(), server_state=None, limits=limits)
                specs = [ListenerSpec(name, "127.0.0.1", 0, BROKER) for name in listeners]
                bound = await nursery.start(server.serve, specs)
                await check(server, {name: bound[name][1] for name in listeners})
                nursery.cancel_scope.cancel()

    trio.run(main)


def _nothing_arrived(stream: trio.SocketStream) -> bool:
    try:
        stream.socket._sock.recv(1, 0x40)  # MSG_DONTWAIT
    except BlockingIOError:
        return True
    return False


def test_connection_limits_per_ip_closes_the_next_connection_other_addresses_served():
    async def check(server, ports):
        port = ports["EXTERNAL"]
        first, second = await connect(port, "127.0.0.2"), await connect(port, "127.0.0.2")
        assert await answered(first) and await answered(second)
        third = await connect(port, "127.0.0.2")
        assert not await answered(third)  # accepted by the kernel, closed by the broker
        other = await connect(port, "127.0.0.3")
        assert await answered(other)
        assert server.quotas[BROKER].count("127.0.0.2") == 2
        await first.aclose()  # frees a slot of 127.0.0.2
        again = await served_once_freed(port, "127.0.0.2")
        assert await answered(second, 2) and await answered(again, 3)

    _run(check, ConnectionLimitsConfig(max_connections_per_ip=2))


def test_connection_limits_overrides_by_ip_and_host_name():
    layer = {"max.connections.per.ip": "0",
             "max.connections.per.ip.overrides": "127.0.0.2:1,localhost:3"}  # fmt: skip
    limits = limits_from_layers([layer], ["EXTERNAL"], resolve_host)

    async def check(server, ports):
        port = ports["EXTERNAL"]
        kept = await connect(port, "127.0.0.2")  # (a stream dropped would close)
        assert await answered(kept)
        assert not await answered(await connect(port, "127.0.0.2"))  # its override: 1
        local = [await connect(port, "127.0.0.1") for _ in range(3)]  # localhost: 3
        assert [await answered(s) for s in local] == [True] * 3
        assert not await answered(await connect(port, "127.0.0.1"))
        assert not await answered(await connect(port, "127.0.0.3"))  # the default: 0

    _run(check, limits)


def test_connection_limits_max_connections_makes_the_acceptor_wait_until_one_closes():
    async def check(server, ports):
        port = ports["EXTERNAL"]
        held = [await connect(port, "127.0.0.2"), await connect(port, "127.0.0.3")]
        assert [await answered(s) for s in held] == [True, True]
        waiting = await connect(port, "127.0.0.2")  # the kernel accepts; the broker waits
        await waiting.send_all(encode_request(18, 3, 9, "limits", _BODY))
        await trio.testing.wait_all_tasks_blocked(0.2)
        assert _nothing_arrived(waiting) and server.quotas[BROKER].total == 2
        await held[0].aclose()
        data = await waiting.receive_some(65536)  # now admitted and answered
        assert decode_response(18, 3, data[4:])[0] == 9

    _run(check, ConnectionLimitsConfig(max_connections=2))


def test_connection_limits_listener_max_connections_binds_only_that_listener():
    async def check(server, ports):
        kept = await connect(ports["A"], "127.0.0.2")
        assert await answered(kept)
        waiting = await connect(ports["A"], "127.0.0.2")
        await waiting.send_all(encode_request(18, 3, 9, "limits", _BODY))
        other = await connect(ports["B"], "127.0.0.2")
        assert await answered(other)
        await trio.testing.wait_all_tasks_blocked(0.2)
        assert _nothing_arrived(waiting)

    _run(check, ConnectionLimitsConfig(listener_max_connections={"A": 1}), ("A", "B"))


def test_connection_limits_inter_broker_listener_exempt_closes_the_least_recently_used():
    async def check(server, ports):
        older, newer = await connect(ports["EXTERNAL"], "127.0.0.2"), None
        assert await answered(older)
        newer = await connect(ports["EXTERNAL"], "127.0.0.3")
        assert await answered(newer)
        assert await answered(older, 2)  # older is now the more recently used one
        internal = await connect(ports["INTERNAL"], "127.0.0.2")
        assert await answered(internal)  # past max.connections: allowed there
        assert not await answered(newer, 3)  # the least recently used was closed for it
        assert await answered(older, 4) and await answered(internal, 5)

    _run(
        check,
        ConnectionLimitsConfig(max_connections=2),
        ("EXTERNAL", "INTERNAL"),
        inter_broker="INTERNAL",
    )


def test_connection_limits_dynamic_update_closes_excess_and_wakes_the_acceptor():
    async def check(server, ports):
        port = ports["EXTERNAL"]
        streams = [await connect(port, "127.0.0.2") for _ in range(3)]
        assert [await answered(s) for s in streams] == [True] * 3
        server.update_connection_limits(ConnectionLimitsConfig(max_connections=1))
        alive = [await answered(s, 2) for s in streams]
        assert alive == [False, False, True]  # the two least recently used closed
        waiting = await connect(port, "127.0.0.3")
        await waiting.send_all(encode_request(18, 3, 9, "limits", _BODY))
        await trio.testing.wait_all_tasks_blocked(0.2)
        assert _nothing_arrived(waiting)
        server.update_connection_limits(ConnectionLimitsConfig(max_connections=2))
        data = await waiting.receive_some(65536)
        assert decode_response(18, 3, data[4:])[0] == 9

    _run(check, ConnectionLimitsConfig())
