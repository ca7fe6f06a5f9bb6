"""Offset- and time-index entries are Kafka's: the batch's last offset, not its base offset.

Kafka's ``LogSegment`` writes ``offsetIndex.append(batch.lastOffset, position)`` and time-index
entries ``(maxTimestampSoFar, lastOffset of the batch that carried it)``, the max timestamp
moving before the entry is written; ``kafka-dump-log.sh --verify-index-only`` checks each
offset entry against the last offset of the batch at its position. The expected entries here
come from that rule, applied by :func:`kafka_index_entries` to the batch headers of the ``.log``
(parsed with ``struct`` from the record-batch v2 layout, not with kcore's reader).
"""

from __future__ import annotations

import struct
import uuid

import pytest
from confluent_kafka import Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.record import RecordBatchBuilder
from kcore.testing import EmbeddedCluster

T = 1_700_000_000_000
NOW = T + 1_000_000
BASE = "00000000000000000000"

# Record batch v2 header (kafka-protocol/docs/implementation.html §5.3.1): baseOffset int64,
# batchLength int32, partitionLeaderEpoch int32, magic int8, crc int32, attributes int16,
# lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, ...
_HEADER = struct.Struct(">qiibIhiqq")


def batch_headers(log_bytes: bytes) -> list[tuple[int, int, int, int]]:
    """``(position, last offset, max timestamp, size)`` of every batch in a ``.log`` file."""
    out, position = [], 0
    while position < len(log_bytes):
        base, length, _epoch, magic, _crc, _attrs, last_delta, _base_ts, max_ts = (
            _HEADER.unpack_from(log_bytes, position)
        )
        assert magic == 2
        out.append((position, base + last_delta, max_ts, 12 + length))
        position += 12 + length
    return out


def kafka_index_entries(log_bytes: bytes, interval: int, segment_base: int = 0):
    """The ``.index`` and ``.timeindex`` bytes Kafka's rule gives for a closed segment."""
    index, time_index = [], []
    since, max_ts, offset_of_max = 0, -1, -1
    for position, last, ts, size in batch_headers(log_bytes):
        if ts > max_ts:
            max_ts, offset_of_max = ts, last
        if since > interval:
            index.append((last, position))
            if not time_index or max_ts > time_index[-1][0]:
                time_index.append((max_ts, offset_of_max))
            since = 0
        since += size
    # A closed segment always ends with the largest timestamp it holds.
    if max_ts >= 0 and (not time_index or max_ts > time_index[-1][0]):
        time_index.append((max_ts, offset_of_max))
    return (
        b"".join(struct.pack(">ii", o - segment_base, p) for o, p in index),
        b"".join(struct.pack(">qi", t, o - segment_base) for t, o in time_index),
    )


def _batch(records: list[int], *, base_offset: int = 0, epoch: int = -1) -> bytes:
    """A batch of ``len(records)`` records with the given timestamps and 20-byte values."""
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i, ts in enumerate(records):
        b.append(timestamp=ts, key=b"k%d" % i, value=bytes(20))
    return bytes(b.build())


def _files(directory):
    return (
        (directory / f"{BASE}.log").read_bytes(),
        (directory / f"{BASE}.index").read_bytes(),
        (directory / f"{BASE}.timeindex").read_bytes(),
    )


def test_index_entries_name_the_last_offset_of_multi_record_batches(tmp_path):
    # Worked out by hand from Kafka's rule (index.interval.bytes = 0: every batch but the first
    # gets an entry). X = offsets 0-2 at T..T+2, Y = 3-4 at T+5..T+6 (leader appends);
    # Z = 5-8 at T+3 (a follower append, max timestamp below Y's).
    directory = tmp_path / "t-0"
    plog = create_log(directory, LogConfig.from_layers({"index.interval.bytes": "0"}), now_ms=NOW)
    x, y = _batch([T, T + 1, T + 2]), _batch([T + 5, T + 6])
    z = _batch([T + 3] * 4, base_offset=5, epoch=4)
    assert plog.append_as_leader(x, leader_epoch=4, now_ms=NOW).last_offset == 2
    assert plog.append_as_leader(y, leader_epoch=4, now_ms=NOW).last_offset == 4
    assert plog.append_as_follower(z, now_ms=NOW).last_offset == 8
    plog.close()

    position_y, position_z = len(x), len(x) + len(y)
    log_bytes, index, time_index = _files(directory)
    assert index == struct.pack(">iiii", 4, position_y, 8, position_z)
    assert time_index == struct.pack(">qi", T + 6, 4)  # Z's T+3 does not grow the max


def test_index_entries_of_one_follower_append_of_many_batches_are_per_batch(tmp_path):
    # One append call of three batches (the mirror's and a follower's case): each batch is
    # indexed at its own position with its own last offset, as recovery and Kafka's
    # --verify-index-only expect.
    directory = tmp_path / "t-0"
    plog = create_log(directory, LogConfig.from_layers({"index.interval.bytes": "0"}), now_ms=NOW)
    a = _batch([T, T + 1], base_offset=0, epoch=2)
    b = _batch([T + 9, T + 8, T + 7], base_offset=2, epoch=2)
    c = _batch([T + 20], base_offset=5, epoch=3)
    assert plog.append_as_follower(a + b + c, now_ms=NOW).last_offset == 5
    plog.close()

    log_bytes, index, time_index = _files(directory)
    assert index == struct.pack(">iiii", 4, len(a), 5, len(a) + len(b))
    assert time_index == struct.pack(">qiqi", T + 9, 4, T + 20, 5)
    assert (index, time_index) == kafka_index_entries(log_bytes, 0)


appends = st.lists(
    st.tuples(
        st.booleans(),  # leader (one batch) or follower (several batches in one call)
        st.lists(
            st.lists(st.integers(0, 50), min_size=1, max_size=6),  # record timestamps - T
            min_size=1,
            max_size=4,
        ),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(appends=appends, interval=st.sampled_from([0, 100, 300, 4096]))
def test_index_entries_equal_kafkas_rule_when_written_and_when_rebuilt(
    tmp_path_factory, appends, interval
):
    directory = tmp_path_factory.mktemp("idx") / "t-0"
    config = LogConfig.from_layers({"index.interval.bytes": str(interval)})
    plog = create_log(directory, config, now_ms=NOW)
    for as_leader, batches in appends:
        if as_leader:
            for records in batches:
                plog.append_as_leader(_batch([T + t for t in records]), leader_epoch=1, now_ms=NOW)
        else:
            data, offset = b"", plog.log_end_offset
            for records in batches:
                data += _batch([T + t for t in records], base_offset=offset, epoch=1)
                offset += len(records)
            plog.append_as_follower(data, now_ms=NOW)
    plog.close()
    log_bytes, index, time_index = _files(directory)
    assert (index, time_index) == kafka_index_entries(log_bytes, interval)

    # Rebuilt after a crash (indexes gone): the same entries.
    (directory / f"{BASE}.index").unlink()
    (directory / f"{BASE}.timeindex").unlink()
    reloaded = load_log(directory, config, had_clean_shutdown=False, now_ms=NOW)
    reloaded.close()
    assert _files(directory)[1:] == (index, time_index)


def test_index_entries_written_with_base_offsets_still_serve_every_lookup(tmp_path):
    # Segments written by kcore before it followed Kafka's rule hold base offsets. They are
    # read as they are: every offset's fetch and every timestamp lookup stays right.
    directory = tmp_path / "t-0"
    config = LogConfig.from_layers({"index.interval.bytes": "0"})
    plog = create_log(directory, config, now_ms=NOW)
    expected_batch_of = {}
    for n in range(12):
        size = 1 + n % 4
        first = plog.log_end_offset
        plog.append_as_leader(_batch([T + 10 * n + i for i in range(size)]), 1, now_ms=NOW)
        for o in range(first, first + size):
            expected_batch_of[o] = first
    plog.close()
    log_bytes = (directory / f"{BASE}.log").read_bytes()
    headers = batch_headers(log_bytes)
    old_form = b"".join(
        struct.pack(">ii", struct.unpack_from(">q", log_bytes, position)[0], position)
        for position, _, _, _ in headers[1:]
    )
    assert old_form != (directory / f"{BASE}.index").read_bytes()
    (directory / f"{BASE}.index").write_bytes(old_form)

    reloaded = load_log(directory, config, had_clean_shutdown=True, now_ms=NOW)
    try:
        assert (directory / f"{BASE}.index").read_bytes()[: len(old_form)] == old_form
        for offset, batch_base in expected_batch_of.items():
            data = reloaded.read(offset, 1, FetchIsolation.LOG_END).records[0].read()
            assert struct.unpack_from(">q", data)[0] == batch_base
        for n in range(12):
            assert reloaded.offset_for_timestamp(T + 10 * n) == expected_batch_of_first(
                expected_batch_of, n
            )
    finally:
        reloaded.close()


def expected_batch_of_first(batch_of: dict[int, int], n: int) -> int:
    """The base offset of the n-th batch (batch n's first record has timestamp T + 10n)."""
    return sorted(set(batch_of.values()))[n]


@pytest.mark.timeout(120)
def test_index_entries_of_confluent_kafka_batches_equal_kafkas(tmp_path):
    # librdkafka sends batches of many records; the broker's files must hold what Kafka's
    # LogSegment writes for them.
    topic = f"idx-{uuid.uuid4().hex[:8]}"
    cluster = EmbeddedCluster(data_dir=tmp_path)
    cluster.start()
    try:
        cluster.create_topic(topic, config={"index.interval.bytes": "1"})
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "linger.ms": 20,
                "batch.num.messages": 7,
            }
        )
        for i in range(300):
            producer.produce(topic, key=b"k%d" % (i % 13), value=b"v" * (i % 50))
            if i % 40 == 39:
                producer.flush(30)
        assert producer.flush(30) == 0
    finally:
        cluster.stop()  # a clean shutdown trims the indexes to their entries

    directory = tmp_path / "logs" / f"{topic}-0"
    log_bytes = (directory / f"{BASE}.log").read_bytes()
    headers = batch_headers(log_bytes)
    assert headers[-1][1] == 299
    # The test means something only if librdkafka put several records in a batch.
    assert any(b[1] - a[1] > 1 for a, b in zip(headers, headers[1:]))
    index, time_index = kafka_index_entries(log_bytes, 1)
    assert len(index) == 8 * (len(headers) - 1)
    assert (directory / f"{BASE}.index").read_bytes() == index
    assert (directory / f"{BASE}.timeindex").read_bytes() == time_index
