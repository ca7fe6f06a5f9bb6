"""The connection layer over real sockets: ordering, pipelining, negotiation, bad input."""

import struct

import trio

from kcore.protocol import decode_response, encode_request
from kcore.protocol import messages as m
from kcore.server.handlers import api_versions
from kcore.server.network import ConnectionLimits, KafkaServer, ListenerSpec
from kcore.server.registry import BROKER, HandlerRegistry


def _registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    api_versions.register(registry)
    return registry


async def _start(nursery, limits=None):
    server = KafkaServer(_registry(), server_state=None, limits=limits)
    bound = await nursery.start(server.serve, [ListenerSpec("PLAINTEXT", "127.0.0.1", 0, BROKER)])
    return server, bound["PLAINTEXT"][1]


async def _read_frame(stream) -> bytes | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    size = struct.unpack_from(">i", data)[0]
    assert len(data) == 4 + size, "one response at a time in these helpers"
    return data[4:]


def _api_versions_request(version: int, correlation_id: int) -> bytes:
    body = m.ApiVersionsRequest(client_software_name="kcore-test", client_software_version="1.0")
    return encode_request(18, version, correlation_id, "test", body)


def _run(fn):
    async def main():
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                server, port = await _start(nursery, getattr(fn, "limits", None))
                await fn(server, port)
                nursery.cancel_scope.cancel()

    trio.run(main)


async def _assert_serving(port: int) -> None:
    """A fresh, well-behaved client is answered."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(_api_versions_request(3, 77))
        cid, body = decode_response(18, 3, await _read_frame(stream))
    assert cid == 77 and body.error_code == 0


def test_network_api_versions_lists_the_registry():
    async def check(server, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(_api_versions_request(3, 5))
            cid, body = decode_response(18, 3, await _read_frame(stream))
        assert cid == 5 and body.error_code == 0
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]

    _run(check)


def test_network_pipelined_requests_are_answered_in_order():
    async def check(server, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        versions = [i % 5 for i in range(60)]
        async with stream:
            await stream.send_all(
                b"".join(_api_versions_request(v, 1000 + i) for i, v in enumerate(versions))
            )
            buffer = b""
            answers = []
            while len(answers) < len(versions):
                buffer += await stream.receive_some(65536)
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                    size = struct.unpack_from(">i", buffer)[0]
                    v = versions[len(answers)]
                    answers.append(decode_response(18, v, buffer[4 : 4 + size])[0])
                    buffer = buffer[4 + size :]
        assert answers == [1000 + i for i in range(len(versions))]

    _run(check)


def test_network_a_large_frame_sent_in_pieces_is_received_whole_and_in_order():
    """A frame above LARGE_FRAME_BYTES is received in place: sent in uneven pieces with a small
    request right behind it, both are answered, in order."""

    async def check(server, port):
        name = "a" * 300_000  # a valid software name, making a 300 kB request
        body = m.ApiVersionsRequest(client_software_name=name, client_software_version="1.0")
        stream_bytes = encode_request(18, 3, 1, "test", body) + _api_versions_request(3, 2)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            pos = 0
            for i, piece in enumerate([3, 5000, 70_001, 1, 160_000, 10**9]):
                await stream.send_all(stream_bytes[pos : pos + piece])
                pos += piece
                if i % 2:
                    await trio.sleep(0.01)  # let the server read a partial frame
            buffer, answers = b"", []
            while len(answers) < 2:
                buffer += await stream.receive_some(65536)
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                    size = struct.unpack_from(">i", buffer)[0]
                    cid, answer = decode_response(18, 3, buffer[4 : 4 + size])
                    answers.append((cid, answer.error_code))
                    buffer = buffer[4 + size :]
        assert answers == [(1, 0), (2, 0)]

    _run(check)


def test_network_unknown_api_versions_version_gets_the_v0_fallback():
    async def check(server, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            frame = struct.pack(">hhih", 18, 9, 42, 1) + b"x" + b"\x00\x00\x00"
            await stream.send_all(struct.pack(">i", len(frame)) + frame)
            cid, body = decode_response(18, 0, await _read_frame(stream))
            assert cid == 42 and body.error_code == 35
            assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
                (18, 0, 4)
            ]
            # The client retries lower on the same connection, as librdkafka does.
            await stream.send_all(_api_versions_request(3, 43))
            assert decode_response(18, 3, await _read_frame(stream))[0] == 43

    _run(check)


def test_network_malformed_frames_close_only_their_connection():
    bad_inputs = [
        struct.pack(">i", 4) + b"\x00\x12\x00\x03",  # a header shorter than 8 bytes
        struct.pack(">i", 10) + struct.pack(">hhih", 9999, 0, 1, -1),  # unknown API key
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1),  # unknown Metadata version
        struct.pack(">i", 12) + struct.pack(">hhih", 18, 3, 1, 500) + b"ab",  # length past end
        struct.pack(">i", -5),  # negative frame size
    ]

    async def check(server, port):
        for data in bad_inputs:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(data)
                with trio.fail_after(5):
                    assert await _read_frame(stream) is None  # closed, no answer
            await _assert_serving(port)

    _run(check)


def test_network_oversize_frame_is_refused_from_its_prefix():
    async def check(server, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(struct.pack(">i", 2_000_000))  # over the 1 MB limit set below
            with trio.fail_after(5):
                assert await _read_frame(stream) is None
        await _assert_serving(port)

    check.limits = ConnectionLimits(max_frame_bytes=1_000_000)
    _run(check)


def test_network_half_a_frame_stalls_only_its_connection_until_idle_timeout():
    async def check(server, port):
        stalled = await trio.open_tcp_stream("127.0.0.1", port)
        async with stalled:
            frame = _api_versions_request(3, 1)
            await stalled.send_all(frame[: len(frame) // 2])
            for _ in range(3):
                await _assert_serving(port)
            with trio.fail_after(5):
                assert await _read_frame(stalled) is None  # closed by the idle timeout

    check.limits = ConnectionLimits(idle_timeout_s=0.5)
    _run(check)


def test_network_many_connections_at_once_are_all_served():
    async def check(server, port):
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(_assert_serving, port)

    _run(check)


def test_network_a_client_that_never_reads_does_not_block_others():
    async def check(server, port):
        hog = await trio.open_tcp_stream("127.0.0.1", port)
        async with hog:
            request = _api_versions_request(3, 1)
            with trio.move_on_after(1):  # write until the kernel and the broker push back
                while True:
                    await hog.send_all(request * 200)
            await _assert_serving(port)
        assert server.connections >= 0

    _run(check)
