"""PartitionLog: appends as leader and follower, reads by isolation, transactions, truncation,
rolling, retention, and reopening."""

import os

import pytest

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import (
    RecordBatch,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    build_mirror_pid_reset_batch,
    iter_batches,
)

NOW = 1_700_000_000_000
HW = FetchIsolation.HIGH_WATERMARK
COMMITTED = FetchIsolation.TXN_COMMITTED
LOG_END = FetchIsolation.LOG_END


def config(**overrides):
    return LogConfig.from_layers({k: str(v) for k, v in overrides.items()})


def batch(
    n=3,
    *,
    base_offset=0,
    pid=-1,
    epoch=-1,
    seq=-1,
    txn=False,
    ts=NOW,
    key=b"k",
    size=10,
    leader_epoch=-1,
):
    b = RecordBatchBuilder(
        base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=leader_epoch,
    )
    for i in range(n):
        b.append(timestamp=ts + i, key=key + b"%d" % i, value=b"v" * size)
    return bytes(b.build())


def marker(pid, epoch, *, commit, base_offset=0, coordinator_epoch=0, leader_epoch=-1):
    return bytes(
        build_end_txn_marker_batch(
            producer_id=pid,
            producer_epoch=epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            base_offset=base_offset,
            partition_leader_epoch=leader_epoch,
            timestamp=NOW,
        )
    )


def read_batches(plog, offset=0, isolation=LOG_END, max_bytes=1 << 30):
    info = plog.read(offset, max_bytes, isolation)
    data = b"".join(s.read() for s in info.records)
    return [RecordBatch(bytes(b.buffer)) for b in iter_batches(data)], info


@pytest.fixture
def plog(tmp_path):
    log = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    yield log
    log.close()


def test_partition_log_leader_append_assigns_offsets_and_stamps_epoch(plog):
    a = plog.append_as_leader(batch(3), leader_epoch=5, now_ms=NOW)
    b = plog.append_as_leader(batch(2), leader_epoch=5, now_ms=NOW)
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 2, 3, 4)
    assert plog.log_end_offset == 5
    batches, _ = read_batches(plog)
    assert [(x.base_offset, x.partition_leader_epoch) for x in batches] == [(0, 5), (3, 5)]
    assert all(x.is_valid_crc() for x in batches)
    original = batch(2)
    assert bytes(batches[1].buffer)[21:] == original[21:]  # only offset and epoch were patched
    assert plog.end_offset_for_epoch(5) == (5, 5)


def test_partition_log_reads_stop_at_the_high_watermark(plog):
    plog.append_as_leader(batch(3), 0, now_ms=NOW)
    plog.append_as_leader(batch(3), 0, now_ms=NOW)
    assert read_batches(plog, 0, HW)[0] == []
    plog.update_high_watermark(3)
    got, _ = read_batches(plog, 0, HW)
    assert [b.base_offset for b in got] == [0]
    assert [b.base_offset for b in read_batches(plog, 0, LOG_END)[0]] == [0, 3]


def test_partition_log_fetch_outside_the_log_is_out_of_range(plog):
    plog.append_as_leader(batch(3), 0, now_ms=NOW)
    with pytest.raises(KafkaError) as e:
        plog.read(4, 100, LOG_END)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert plog.read(3, 100, LOG_END).records == []  # at the end: empty, not an error


def test_partition_log_idempotent_retry_returns_the_original_offsets(plog):
    first = plog.append_as_leader(batch(3, pid=9, epoch=0, seq=0), 0, now_ms=NOW)
    retry = plog.append_as_leader(batch(3, pid=9, epoch=0, seq=0), 0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert not first.duplicate
    assert plog.log_end_offset == 3


def test_partition_log_out_of_order_sequence_is_refused_and_nothing_written(plog):
    plog.append_as_leader(batch(3, pid=9, epoch=0, seq=0), 0, now_ms=NOW)
    size = plog.size_in_bytes()
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch(1, pid=9, epoch=0, seq=5), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.size_in_bytes() == size and plog.log_end_offset == 3


@pytest.mark.parametrize(
    "mutate, code",
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.INVALID_RECORD),  # magic v1
        (lambda b: b[:-5], ErrorCode.CORRUPT_MESSAGE),  # torn batch
    ],
)
def test_partition_log_bad_batches_are_refused(plog, mutate, code):
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(mutate(batch(2)), 0, now_ms=NOW)
    assert e.value.code == code
    assert plog.log_end_offset == 0 and plog.size_in_bytes() == 0


def test_partition_log_batch_over_max_message_bytes_is_too_large(tmp_path):
    plog = create_log(tmp_path / "t-0", config(**{"max.message.bytes": 500}), now_ms=NOW)
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch(3, size=300), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert plog.log_end_offset == 0


def test_partition_log_clients_may_not_write_control_batches(plog):
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(marker(1, 0, commit=True), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.INVALID_RECORD


def test_partition_log_timestamps_outside_the_configured_window_are_refused(tmp_path):
    plog = create_log(
        tmp_path / "t-0", config(**{"message.timestamp.after.max.ms": 1000}), now_ms=NOW
    )
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch(1, ts=NOW + 60_000), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP


def test_partition_log_log_append_time_restamps_the_batch(tmp_path):
    plog = create_log(
        tmp_path / "t-0", config(**{"message.timestamp.type": "LogAppendTime"}), now_ms=NOW
    )
    info = plog.append_as_leader(batch(2, ts=5), 0, now_ms=NOW + 7)
    assert info.log_append_time == NOW + 7
    (b,), _ = read_batches(plog)
    assert b.max_timestamp == NOW + 7 and b.is_valid_crc()
    assert [r.timestamp for r in b.records()] == [NOW + 7, NOW + 7]


def test_partition_log_compacted_topic_requires_keys(tmp_path):
    plog = create_log(tmp_path / "t-0", config(**{"cleanup.policy": "compact"}), now_ms=NOW)
    keyless = RecordBatchBuilder()
    keyless.append(timestamp=NOW, key=None, value=b"v")
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(bytes(keyless.build()), 0, now_ms=NOW)
    assert e.value.code == ErrorCode.INVALID_RECORD


def test_partition_log_transactions_set_lso_and_aborted_list(plog):
    plog.append_as_leader(batch(2), 0, now_ms=NOW)  # 0-1
    plog.append_as_leader(batch(2, pid=7, epoch=0, seq=0, txn=True), 0, now_ms=NOW)  # 2-3
    plog.append_as_leader(batch(1, pid=8, epoch=0, seq=0, txn=True), 0, now_ms=NOW)  # 4
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 2
    got, _ = read_batches(plog, 0, COMMITTED)
    assert [b.base_offset for b in got] == [0]
    plog.append_as_leader(
        marker(7, 0, commit=False), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR
    )  # 5
    plog.append_as_leader(
        marker(8, 0, commit=True), 0, now_ms=NOW, origin=AppendOrigin.COORDINATOR
    )  # 6
    # The markers are not yet below the high watermark: both transactions still count as
    # unstable, so the LSO stays at the first one's first offset.
    assert plog.last_stable_offset == 2
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 7
    got, info = read_batches(plog, 0, COMMITTED)
    assert [b.base_offset for b in got] == [0, 2, 4, 5, 6]
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions] == [(7, 2)]
    assert read_batches(plog, 0, HW)[1].aborted_transactions is None


def test_partition_log_follower_append_keeps_offsets_epochs_and_negative_producers(plog):
    data = batch(2, base_offset=0, leader_epoch=3, pid=-12, epoch=1, seq=0)
    data += batch(1, base_offset=5, leader_epoch=4)  # a gap, as after compaction on the source
    plog.append_as_follower(data, now_ms=NOW)
    assert plog.log_end_offset == 6
    assert plog.epoch_cache.epoch_entries() == [(3, 0), (4, 5)]
    assert plog.end_offset_for_epoch(3) == (3, 5)
    assert plog.producer_state.last_entry(-12).last_seq == 1
    got, _ = read_batches(plog)
    assert b"".join(bytes(b.buffer) for b in got) == data  # byte for byte
    with pytest.raises(KafkaError):
        plog.append_as_follower(batch(1, base_offset=4, leader_epoch=4), now_ms=NOW)


def test_partition_log_mirror_pid_reset_expires_producers(plog):
    plog.append_as_follower(batch(1, pid=-9, epoch=0, seq=0, leader_epoch=1), now_ms=NOW)
    reset = build_mirror_pid_reset_batch(
        source_cluster_id="src", base_offset=1, partition_leader_epoch=2, timestamp=NOW
    )
    plog.append_as_leader(bytes(reset), 2, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    assert plog.producer_state.last_entry(-9) is None
    assert plog.log_end_offset == 2


def test_partition_log_rolls_by_segment_bytes_and_reads_across_segments(tmp_path):
    plog = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 2000}), now_ms=NOW)
    for _ in range(20):
        plog.append_as_leader(batch(2, size=200), 0, now_ms=NOW)
    assert len(plog.segments) > 3
    assert all(s.size <= 2000 for s in plog.segments)
    offsets = []
    offset = 0
    while offset < plog.log_end_offset:
        got, _ = read_batches(plog, offset, LOG_END)
        offsets += [b.base_offset for b in got]
        offset = got[-1].last_offset + 1
    assert offsets == list(range(0, 40, 2))
    # Fetching from inside a batch returns the whole batch that holds the offset.
    got, _ = read_batches(plog, 5, LOG_END, max_bytes=1)
    assert [b.base_offset for b in got] == [4]


def test_partition_log_offset_for_timestamp_finds_the_first_later_record(plog):
    for i in range(5):
        plog.append_as_leader(batch(2, ts=NOW + 100 * i), 0, now_ms=NOW + 1000)
    assert plog.offset_for_timestamp(NOW + 150) == 4
    assert plog.offset_for_timestamp(NOW + 10_000) is None
    assert plog.max_timestamp_and_offset()[0] == NOW + 401


def test_partition_log_truncate_to_restores_offsets_epochs_and_producers(tmp_path):
    plog = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 1000}), now_ms=NOW)
    for i in range(10):
        plog.append_as_leader(batch(2, pid=3, epoch=0, seq=2 * i, size=150), i, now_ms=NOW)
    assert plog.truncate_to(7)
    assert plog.log_end_offset == 8  # a batch is never split: 6-7 stays
    assert plog.latest_epoch == 3
    assert plog.producer_state.last_entry(3).last_seq == 7
    info = plog.append_as_leader(batch(2, pid=3, epoch=0, seq=8), 9, now_ms=NOW)
    assert info.first_offset == 8


def test_partition_log_truncate_fully_and_start_at_restarts_empty(plog):
    plog.append_as_leader(batch(3), 0, now_ms=NOW)
    plog.truncate_fully_and_start_at(1000)
    assert (plog.log_start_offset, plog.log_end_offset) == (1000, 1000)
    plog.append_as_follower(batch(1, base_offset=1000, leader_epoch=2), now_ms=NOW)
    assert plog.log_end_offset == 1001


def test_partition_log_truncate_fully_at_its_own_start_of_an_empty_log_writes_nothing(
    plog, monkeypatch
):
    plog.truncate_fully_and_start_at(0)  # the empty log of a new partition, already at 0
    fsyncs = []
    monkeypatch.setattr("os.fsync", lambda fd: fsyncs.append(fd))
    segment = plog.segments[0]
    plog.truncate_fully_and_start_at(0)
    assert not fsyncs and plog.segments == [segment]
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (0, 0, 0)
    plog.truncate_fully_and_start_at(7)  # elsewhere: a new segment at the new offset
    assert [s.base_offset for s in plog.segments] == [7] and plog.log_end_offset == 7
    plog.append_as_follower(batch(2, base_offset=7, leader_epoch=1), now_ms=NOW)
    assert plog.log_end_offset == 9 and plog.latest_epoch == 1


def test_partition_log_retention_by_bytes_and_time_and_delete_records(tmp_path):
    cfg = config(
        **{"internal.segment.bytes": 1000, "retention.bytes": 2500, "file.delete.delay.ms": 0}
    )
    plog = create_log(tmp_path / "t-0", cfg, now_ms=NOW)
    for _ in range(20):
        plog.append_as_leader(batch(2, size=150), 0, now_ms=NOW)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments(NOW) > 0
    assert plog.size_in_bytes() <= 2500 + 1000
    start = plog.log_start_offset
    assert start > 0 and start == plog.segments[0].base_offset
    with pytest.raises(KafkaError) as e:
        plog.read(0, 100, HW)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    plog.increment_log_start_offset(start + 3)
    assert plog.read(start + 3, 100, HW).records
    plog.delete_pending_segments(NOW)
    names = os.listdir(plog.dir)
    assert not [n for n in names if n.endswith(".deleted")]


def test_partition_log_clean_reopen_keeps_everything_and_scans_nothing(tmp_path):
    plog = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 1000}), now_ms=NOW)
    for i in range(10):
        plog.append_as_leader(batch(2, pid=4, epoch=0, seq=2 * i, size=150), 1, now_ms=NOW)
    plog.close()
    again = load_log(
        tmp_path / "t-0",
        config(**{"internal.segment.bytes": 1000}),
        had_clean_shutdown=True,
        recovery_point=20,
        now_ms=NOW,
    )
    assert again.log_end_offset == 20 and len(again.segments) == len(plog.segments)
    retry = again.append_as_leader(batch(2, pid=4, epoch=0, seq=18, size=150), 1, now_ms=NOW)
    assert retry.duplicate and retry.first_offset == 18  # producer state survived the restart
    again.close()


def test_partition_log_close_of_an_empty_clean_log_writes_no_checkpoint_or_snapshot(
    tmp_path, monkeypatch
):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    plog.truncate_fully_and_start_at(40)  # as a mirror starts a new partition (D-16)
    atomic = []
    for module in ("kcore.log.checkpoint", "kcore.log.producer_snapshot"):
        monkeypatch.setattr(f"{module}.atomic_write_bytes", lambda p, data: atomic.append(p))
    plog.close()
    assert atomic == []
    again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=True, recovery_point=40)
    assert (again.log_start_offset, again.log_end_offset) == (40, 40)
    assert not again.producer_state.producers and again.latest_epoch is None
    again.close()


def test_partition_log_close_snapshots_producers_even_of_an_emptied_log(tmp_path):
    """Records deleted, producers kept (Kafka keeps them until they expire): a snapshot."""
    plog = create_log(tmp_path / "t-0", config(**{"file.delete.delay.ms": 0}), now_ms=NOW)
    plog.append_as_leader(batch(2, pid=9, epoch=0, seq=0), 1, now_ms=NOW)
    plog.update_high_watermark(2)
    plog.increment_log_start_offset(2)
    plog.close()
    again = load_log(
        tmp_path / "t-0", config(), had_clean_shutdown=True, recovery_point=2, log_start_offset=2
    )
    assert again.log_start_offset == again.log_end_offset == 2
    assert again.producer_state.last_entry(9).last_seq == 1
    again.close()


def test_partition_log_unclean_reopen_cuts_a_torn_tail(tmp_path):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    for _ in range(5):
        plog.append_as_leader(batch(2), 0, now_ms=NOW)
    path = plog.active_segment.log.path
    size = plog.active_segment.size
    for seg in plog.segments:
        seg.log.close()
    with open(path, "r+b") as f:
        f.truncate(size - 7)  # the last batch was only half written
    again = load_log(tmp_path / "t-0", config(), had_clean_shutdown=False, now_ms=NOW)
    assert again.log_end_offset == 8
    assert [b.base_offset for b in read_batches(again)[0]] == [0, 2, 4, 6]


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy", "uncompressed"])
def test_partition_log_topic_compression_type_recompresses_batches(tmp_path, codec):
    from kcore.record import CompressionType

    plog = create_log(tmp_path / "t-0", config(**{"compression.type": codec}), now_ms=NOW)
    producer = RecordBatchBuilder(compression=CompressionType.GZIP if codec != "gzip" else 0)
    for i in range(4):
        producer.append(timestamp=NOW + i, key=b"k%d" % i, value=b"value-%d" % i)
    info = plog.append_as_leader(bytes(producer.build()), 0, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, 3)
    (b,), _ = read_batches(plog)
    expected = CompressionType.NONE if codec == "uncompressed" else CompressionType[codec.upper()]
    assert b.compression_type == expected and b.is_valid_crc()
    assert [(r.offset, r.key, r.value) for r in b.records()] == [
        (i, b"k%d" % i, b"value-%d" % i) for i in range(4)
    ]


# -- several batches in one leader append (the mirror's and the coordinators' way in) ---------


def index_entries(plog) -> list[tuple[int, int]]:
    index = plog.active_segment.offset_index
    return [tuple(index.entry(n)) for n in range(index.entries)]


def test_partition_log_leader_append_of_several_batches_hands_out_consecutive_offsets(tmp_path):
    # index.interval.bytes=1: every batch after the first of the segment gets an index entry.
    plog = create_log(tmp_path / "t-0", config(**{"index.interval.bytes": 1}), now_ms=NOW)
    plog.append_as_leader(batch(2), leader_epoch=4, now_ms=NOW)  # 0-1
    parts = [
        batch(3, pid=9, epoch=0, seq=0),
        batch(2, pid=9, epoch=0, seq=3, ts=NOW + 50),
        batch(4, pid=9, epoch=0, seq=5),
    ]
    info = plog.append_as_leader(b"".join(parts), leader_epoch=6, now_ms=NOW)

    assert (info.first_offset, info.last_offset) == (2, 10)
    assert (info.record_count, info.valid_bytes) == (9, sum(map(len, parts)))
    # Kafka's shallow offset of the max timestamp: the last offset of the batch carrying it.
    assert (info.max_timestamp, info.offset_of_max_timestamp) == (NOW + 51, 6)
    assert plog.log_end_offset == 11
    got, _ = read_batches(plog)
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in got] == [
        (0, 1, 4),
        (2, 4, 6),
        (5, 6, 6),
        (7, 10, 6),
    ]
    for stored, sent in zip(got[1:], parts, strict=True):
        assert stored.is_valid_crc()
        raw = bytes(stored.buffer)
        assert raw[8:12] == sent[8:12] and raw[16:] == sent[16:]  # only offset and epoch patched
    # One epoch entry where epoch 6 begins, not one per batch.
    assert plog.epoch_cache.epoch_entries() == [(4, 0), (6, 2)]
    assert plog.end_offset_for_epoch(4) == (4, 2)
    assert plog.end_offset_for_epoch(6) == (6, 11)
    # An index entry at each batch of the append (Kafka's LogSegment.append: the batch's last
    # offset and its position), not one for the whole append.
    positions = [0]
    for b in got[:-1]:
        positions.append(positions[-1] + b.size_in_bytes)
    assert index_entries(plog) == [(4, positions[1]), (6, positions[2]), (10, positions[3])]
    assert [b.base_offset for b in read_batches(plog, 6)[0]] == [5, 7]
    # Producer state: the last sequence, and every batch of the append is a known retry.
    assert plog.producer_state.last_entry(9).last_seq == 8
    for sent, offsets in zip(parts, [(2, 4), (5, 6), (7, 10)], strict=True):
        retry = plog.append_as_leader(sent, leader_epoch=6, now_ms=NOW)
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == offsets
    assert plog.log_end_offset == 11
    nxt = plog.append_as_leader(batch(1, pid=9, epoch=0, seq=9), leader_epoch=6, now_ms=NOW)
    assert (nxt.first_offset, nxt.last_offset) == (11, 11)
    plog.close()


def test_partition_log_several_batches_index_as_recovery_rebuilds_them(tmp_path):
    cfg = config(**{"index.interval.bytes": 300})
    plog = create_log(tmp_path / "t-0", cfg, now_ms=NOW)
    for n in (1, 3, 2, 5):
        parts = [batch(k, size=60) for k in range(1, n + 1)]
        plog.append_as_leader(b"".join(parts), leader_epoch=1, now_ms=NOW)
    before = index_entries(plog)
    assert len(before) > 4  # more entries than appends
    for seg in plog.segments:
        seg.log.close()
        seg.offset_index.close_handler()
        seg.time_index.close_handler()
        seg.txn_index.close()
    again = load_log(tmp_path / "t-0", cfg, had_clean_shutdown=False, recovery_point=0, now_ms=NOW)
    assert index_entries(again) == before
    again.close()


@pytest.mark.parametrize(
    "second, code",
    [
        (batch(2, pid=9, epoch=0, seq=7), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (batch(2, ts=NOW - 10 * 365 * 86_400_000), ErrorCode.INVALID_TIMESTAMP),
        (b"\x00" * 8 + batch(2)[8:-1] + b"\xff", ErrorCode.CORRUPT_MESSAGE),
    ],
    ids=["sequence-gap", "timestamp", "crc"],
)
def test_partition_log_several_batches_are_written_all_or_none(tmp_path, second, code):
    cfg = config(**{"message.timestamp.before.max.ms": 3_600_000})
    plog = create_log(tmp_path / "t-0", cfg, now_ms=NOW)
    plog.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    size = plog.size_in_bytes()
    with pytest.raises(KafkaError) as e:
        plog.append_as_leader(batch(3, pid=9, epoch=0, seq=0) + second, 1, now_ms=NOW)
    assert e.value.code == code
    assert (plog.log_end_offset, plog.size_in_bytes()) == (1, size)
    assert plog.producer_state.last_entry(9) is None
    assert plog.epoch_cache.epoch_entries() == [(0, 0)]
    plog.close()


def test_partition_log_timestamp_lookups_across_segments(tmp_path):
    # Mutation testing: a segment whose max timestamp equals the target was skipped, a search
    # that stopped at the first too-old segment, and ties for the max timestamp all passed.
    plog = create_log(tmp_path / "t-0", config(**{"internal.segment.bytes": 600}), now_ms=NOW)
    assert plog.max_timestamp_and_offset() == (-1, -1)  # empty: Kafka's (-1, -1)
    stamps = [NOW, NOW + 100, NOW + 100, NOW + 50, NOW + 300]
    for ts in stamps:  # one record of ~200 bytes per batch: about two batches per segment
        plog.append_as_leader(batch(1, ts=ts, size=200), 0, now_ms=NOW)
    assert len(plog.segments) >= 3
    assert plog.offset_for_timestamp(NOW) == 0
    assert plog.offset_for_timestamp(NOW + 100) == 1  # exactly a segment's max timestamp
    assert plog.offset_for_timestamp(NOW + 101) == 4  # past the first segments
    assert plog.offset_for_timestamp(NOW + 301) is None
    plog.truncate_to(4)
    # Two batches carry the max timestamp (offsets 1 and 2): the first one counts.
    assert plog.max_timestamp_and_offset() == (NOW + 100, 1)
    plog.close()
