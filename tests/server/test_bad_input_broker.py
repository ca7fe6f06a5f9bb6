"""Bad input against a full embedded broker: every misbehaving connection gets an error answer
or is closed, and a well-behaved client keeps being served throughout (checked between every
step, on a long-lived connection and on a fresh one, with kcore's client and confluent-kafka)."""

from __future__ import annotations

import struct
import time

import pytest
import trio
from confluent_kafka import Producer

from kcore.client.connection import BrokerConnection
from kcore.protocol import decode_response, encode_request
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import RecordBatchBuilder
from kcore.testing import EmbeddedCluster

from .batches import produce_raw

pytestmark = pytest.mark.timeout(120)

MAX_FRAME = 100_000
IDLE_MS = 3000
CONFIG = {
    "socket.request.max.bytes": str(MAX_FRAME),
    "connections.max.idle.ms": str(IDLE_MS),
}
P = m.ProduceRequest


def _api_versions(correlation_id: int, version: int = 3) -> bytes:
    body = m.ApiVersionsRequest(client_software_name="bad-input", client_software_version="1")
    return encode_request(18, version, correlation_id, "bad-input", body)


async def _read_frame(stream, buffer: bytearray) -> bytes | None:
    """One response frame, or None at EOF / reset."""
    while len(buffer) < 4 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
        try:
            chunk = await stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        if not chunk:
            return None
        buffer += chunk
    size = struct.unpack_from(">i", buffer)[0]
    frame = bytes(buffer[4 : 4 + size])
    del buffer[: 4 + size]
    return frame


async def _send_and_expect_close(port: int, data: bytes, timeout: float = 5.0) -> list[bytes]:
    """Send ``data``; the broker must close the connection within ``timeout``. Returns the
    frames it answered before closing."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    frames = []
    async with stream:
        try:
            await stream.send_all(data)
        except trio.BrokenResourceError:
            return frames
        buffer = bytearray()
        with trio.fail_after(timeout):
            while (frame := await _read_frame(stream, buffer)) is not None:
                frames.append(frame)
    return frames


class Health:
    """A well-behaved client: a long-lived connection, a fresh one each time, and (sometimes)
    confluent-kafka in a thread."""

    def __init__(self, cluster, conn):
        self.cluster = cluster
        self.conn = conn
        self.checks = 0

    async def check(self, *, confluent: bool = False) -> None:
        with trio.fail_after(15):
            r = await self.conn.request(m.MetadataRequest(topics=None), 12)
            assert r.brokers and r.brokers[0].node_id == 1
            fresh = await BrokerConnection.connect("127.0.0.1", self.cluster.port)
            async with fresh:
                r = await fresh.request(m.MetadataRequest(topics=None), 12)
                assert r.brokers
        if confluent:
            assert await trio.to_thread.run_sync(self._confluent_produce)
        self.checks += 1

    def _confluent_produce(self) -> bool:
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all"})
        delivered = []
        producer.produce(
            "healthy", value=b"still here", on_delivery=lambda e, msg: delivered.append(e)
        )
        producer.flush(10)
        return delivered == [None]


def _run(body):
    async def main():
        with trio.fail_after(100):
            async with EmbeddedCluster(config=CONFIG) as c:
                await c.acreate_topic("healthy")
                conn = await BrokerConnection.connect("127.0.0.1", c.port)
                async with conn:
                    health = Health(c, conn)
                    await health.check(confluent=True)
                    await body(c, health)
                    await health.check(confluent=True)

    trio.run(main)


def test_malformed_frames_unknown_apis_and_versions_close_the_connection():
    async def body(c, health):
        port = c.port
        header = struct.pack(">hhi", 3, 12, 7)  # Metadata v12, correlation id 7
        cases = {
            "garbage": struct.pack(">i", 10) + b"\xff" * 10,
            "short header": struct.pack(">i", 3) + b"\x00\x03\x00",
            "truncated body": struct.pack(">i", len(header) + 3) + header + b"\x00\x05\xff",
            "negative size": struct.pack(">i", -5) + b"\x00" * 8,
            "unknown api key": struct.pack(">ihhih", 10, 999, 0, 1, -1),
            "unknown Metadata version": encode_request(
                3, 12, 9, "x", m.MetadataRequest(topics=None)
            )[:4]
            + struct.pack(">hh", 3, 99)
            + encode_request(3, 12, 9, "x", m.MetadataRequest(topics=None))[8:],
            # an API the codec knows but the broker does not serve on client listeners
            "controller-only API": encode_request(52, 0, 3, "x", m.VoteRequest()),
        }
        for name, data in cases.items():
            frames = await _send_and_expect_close(port, data)
            assert frames == [], f"{name}: answered {frames!r}"
            await health.check()

        # good requests before a bad one are answered, in order, then the connection closes
        frames = await _send_and_expect_close(
            port, _api_versions(1) + _api_versions(2) + struct.pack(">i", 10) + b"\xee" * 10
        )
        assert [decode_response(18, 3, f)[0] for f in frames] == [1, 2]

        # ApiVersions at a version the broker does not know: the v0 fallback, connection kept
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            bad = bytearray(_api_versions(11))
            bad[6:8] = struct.pack(">h", 99)
            await stream.send_all(bytes(bad))
            buffer = bytearray()
            cid, fallback = decode_response(18, 0, await _read_frame(stream, buffer))
            assert cid == 11 and fallback.error_code == ErrorCode.UNSUPPORTED_VERSION
            assert any(k.api_key == 18 for k in fallback.api_keys)
            await stream.send_all(_api_versions(12))
            cid, ok = decode_response(18, 3, await _read_frame(stream, buffer))
            assert cid == 12 and ok.error_code == 0
        await health.check(confluent=True)

    _run(body)


def test_oversize_frames_are_refused_from_their_size_prefix():
    async def body(c, health):
        # only the size prefix and a few bytes are sent: the broker must not wait for the rest
        start = time.monotonic()
        frames = await _send_and_expect_close(c.port, struct.pack(">i", MAX_FRAME + 1) + b"\0" * 8)
        assert frames == [] and time.monotonic() - start < 2.0
        frames = await _send_and_expect_close(c.port, struct.pack(">i", 2**31 - 1))
        assert frames == []
        await health.check()
        # a frame just under the limit is fine (a Produce with a large record)
        builder = RecordBatchBuilder()
        builder.append(int(time.time() * 1000), key=None, value=b"z" * (MAX_FRAME - 1000))
        r = await health.conn.request(
            P(
                acks=1,
                timeout_ms=5000,
                topic_data=[
                    P.TopicProduceData(
                        name="healthy",
                        partition_data=[P.PartitionProduceData(index=0, records=builder.build())],
                    )
                ],
            ),
            9,
        )
        assert r.responses[0].partition_responses[0].error_code == 0
        await health.check()

    _run(body)


def test_half_a_frame_then_stall_does_not_block_others_and_times_out():
    async def body(c, health):
        stalled = []
        for i in range(3):
            stream = await trio.open_tcp_stream("127.0.0.1", c.port)
            frame = _api_versions(100 + i)
            await stream.send_all(frame[: len(frame) // 2])
            stalled.append(stream)
        opened = time.monotonic()
        for _ in range(5):  # the stalled ones block nobody
            await health.check()
            await trio.sleep(0.1)
        # connections.max.idle.ms closes them, with no answer
        for stream in stalled:
            async with stream:
                buffer = bytearray()
                with trio.fail_after(IDLE_MS / 1000 + 10):
                    assert await _read_frame(stream, buffer) is None
        closed_after = time.monotonic() - opened
        assert closed_after >= IDLE_MS / 1000 - 1.0, closed_after
        await health.check()

    _run(body)


def test_a_flood_of_connections_is_served_or_closed():
    async def body(c, health):
        answered = 0
        closed = 0

        async def client(i: int, streams: list) -> None:
            nonlocal answered, closed
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", c.port)
            except OSError:
                closed += 1
                return
            streams.append(stream)
            buffer = bytearray()
            try:
                await stream.send_all(_api_versions(i))
            except trio.BrokenResourceError:
                closed += 1
                return
            frame = await _read_frame(stream, buffer)
            if frame is None:
                closed += 1
                return
            cid, response = decode_response(18, 3, frame)
            assert cid == i and response.error_code == 0
            answered += 1

        streams: list = []
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(client, i, streams)
                if i % 40 == 39:
                    nursery.start_soon(health.check)
        assert answered + closed == 200
        assert answered > 0
        # all 200 are still open; the broker keeps serving the well-behaved client
        await health.check(confluent=True)
        for s in streams:
            await s.aclose()
        await health.check()

    _run(body)


def _batch(count: int, prefix: bytes = b"k", base_offset: int = 0) -> bytes:
    builder = RecordBatchBuilder(base_offset)
    for i in range(count):
        builder.append(int(time.time() * 1000), key=prefix + b"%d" % i, value=b"v%d" % i)
    return bytes(builder.build())


def test_produce_with_a_corrupt_batch_gets_corrupt_message_and_stores_nothing():
    async def body(c, health):
        await c.acreate_topic("corrupt", partitions=2)
        good = _batch(5)
        bad = bytearray(good)
        bad[-1] ^= 0xFF  # a record byte: the CRC no longer matches
        by_index = await produce_raw(health.conn, "corrupt", {0: bytes(bad), 1: good})
        assert by_index[0].error_code == ErrorCode.CORRUPT_MESSAGE
        assert by_index[1].error_code == 0 and by_index[1].base_offset == 0
        logs = c.broker.log_manager.logs
        assert logs[("corrupt", 0)].log_end_offset == 0
        assert logs[("corrupt", 0)].size_in_bytes() == 0
        assert logs[("corrupt", 1)].log_end_offset == 5
        L = m.ListOffsetsRequest
        r = await health.conn.request(
            L(
                replica_id=-1,
                topics=[
                    L.ListOffsetsTopic(
                        name="corrupt",
                        partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                    )
                ],
            ),
            7,
        )
        assert r.topics[0].partitions[0].offset == 0
        await health.check()

    _run(body)


def test_produce_with_more_or_less_than_one_batch_per_partition_is_invalid_record():
    """Kafka's ProduceRequest.validateRecords: from v3 on, exactly one batch per partition."""

    async def body(c, health):
        await c.acreate_topic("batches", partitions=4)
        records = {
            0: _batch(3, b"a") + _batch(3, b"b", 3),  # two whole batches
            1: b"",  # none
            2: _batch(3, b"c") + b"\x00" * 5,  # one, and stray bytes after it
            3: _batch(3, b"d"),  # exactly one: written
        }
        by_index = await produce_raw(health.conn, "batches", records, version=9)
        for i in (0, 1, 2):
            assert by_index[i].error_code == ErrorCode.INVALID_RECORD, i
            assert by_index[i].base_offset == -1
        assert by_index[0].error_message == (
            "Produce requests with version 9 are only allowed to contain exactly one record "
            "batch per partition (got 2)"
        )
        assert by_index[1].error_message == (
            "Produce requests with version 9 must have at least one record batch per partition"
        )
        assert "5 bytes after the record batch" in by_index[2].error_message
        assert by_index[3].error_code == 0 and by_index[3].base_offset == 0
        logs = c.broker.log_manager.logs
        for i in (0, 1, 2):
            assert logs[("batches", i)].log_end_offset == 0
            assert logs[("batches", i)].size_in_bytes() == 0
        assert logs[("batches", 3)].log_end_offset == 3
        await health.check()

    _run(body)
