"""The RaftLog contract, on the memory log and on the disk log alike; then what only a disk does:
reopening, and recovering after a crash cut the unflushed tail."""

from __future__ import annotations

import os
import random

import pytest

from kcore.raft.disk_log import METADATA_LOG_DIR_NAME, DiskRaftLog, metadata_log_config
from kcore.raft.log import LogEntry, MemoryRaftLog, OffsetAndEpoch, RaftLog, RaftRecord
from kcore.raft.records import LEADER_CHANGE

KINDS = ["memory", "disk"]


@pytest.fixture(params=KINDS)
def make_log(request, tmp_path):
    opened = []

    def make(**kwargs):
        if request.param == "memory":
            return MemoryRaftLog()
        log = DiskRaftLog.open(tmp_path / METADATA_LOG_DIR_NAME, segment_bytes=512, **kwargs)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def data(*values: str) -> list[RaftRecord]:
    return [RaftRecord(v.encode()) for v in values]


def fill(log, runs: list[tuple[int, int]]) -> None:
    """Append ``count`` entries in ``epoch`` for each (epoch, count), one append per entry."""
    for epoch, count in runs:
        for _ in range(count):
            log.append(data(f"e{epoch}-{log.end_offset}"), epoch)


# -- the contract ---------------------------------------------------------------------------------


def test_raft_log_is_the_protocol_and_starts_empty(make_log):
    log = make_log()
    assert isinstance(log, RaftLog)
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (0, 0, 0)
    assert log.read(0, 100) == []
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(0, 0)


def test_raft_log_append_gives_offsets_and_reads_back_entries_with_epochs(make_log):
    log = make_log()
    assert log.append([RaftRecord(b"lc", LEADER_CHANGE)], 1) == range(0, 1)
    assert log.append(data("a", "b", "c"), 1) == range(1, 4)
    assert log.append([], 2) == range(4, 4)
    assert log.append(data("d"), 2) == range(4, 5)
    log.flush()
    assert log.read(0, 1 << 20) == [
        LogEntry(0, 1, b"lc", LEADER_CHANGE),
        LogEntry(1, 1, b"a"),
        LogEntry(2, 1, b"b"),
        LogEntry(3, 1, b"c"),
        LogEntry(4, 2, b"d"),
    ]
    assert log.last_fetched_epoch == 2
    assert (log.start_offset, log.end_offset) == (0, 5)


def test_raft_log_refuses_an_epoch_below_the_last(make_log):
    log = make_log()
    log.append(data("a"), 3)
    with pytest.raises(ValueError):
        log.append(data("b"), 2)


def test_raft_log_read_starts_exactly_at_the_offset_even_inside_a_batch(make_log):
    log = make_log()
    log.append(data("a", "b", "c", "d"), 1)
    assert [e.value for e in log.read(2, 1 << 20)] == [b"c", b"d"]
    assert log.read(4, 10) == []
    first = log.read(1, 1)
    assert first and first[0] == LogEntry(1, 1, b"b")
    for bad in (-1, 5):
        with pytest.raises(ValueError):
            log.read(bad, 10)


def test_raft_log_read_bounds_its_answer_by_max_bytes_but_returns_one_entry(make_log):
    log = make_log()
    for i in range(40):
        log.append(data(f"value-{i:03d}" * 4), 1)
    small = log.read(0, 1)
    assert len(small) >= 1 and small[0].offset == 0
    assert len(log.read(0, 200)) < 40
    assert len(log.read(0, 1 << 20)) >= 1


def test_raft_log_truncate_to_cuts_at_the_exact_offset_inside_a_batch(make_log):
    log = make_log()
    log.append(data("a", "b"), 1)
    log.append(data("c", "d", "e"), 2)
    log.truncate_to(3)
    log.flush()
    assert [(e.offset, e.epoch, e.value) for e in log.read(0, 1 << 20)] == [
        (0, 1, b"a"),
        (1, 1, b"b"),
        (2, 2, b"c"),
    ]
    assert log.end_offset == 3 and log.last_fetched_epoch == 2
    log.truncate_to(2)
    assert log.end_offset == 2 and log.last_fetched_epoch == 1
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    log.truncate_to(9)  # past the end: nothing
    assert log.end_offset == 2
    assert log.append(data("x"), 4) == range(2, 3)
    assert log.read(2, 100) == [LogEntry(2, 4, b"x")]
    with pytest.raises(ValueError):
        log.truncate_to(-1)


def test_raft_log_end_offset_for_epoch_follows_kafkas_epoch_cache(make_log):
    log = make_log()
    fill(log, [(1, 3), (3, 2), (5, 3)])  # epoch 1 at [0,3), 3 at [3,5), 5 at [5,8)
    expected = {
        7: (8, 5),
        6: (8, 5),
        5: (8, 5),
        4: (5, 3),
        3: (5, 3),
        2: (3, 1),
        1: (3, 1),
        0: (0, 0),
    }
    for epoch, answer in expected.items():
        assert log.end_offset_for_epoch(epoch) == OffsetAndEpoch(*answer), epoch


def test_raft_log_delete_before_cuts_the_head_at_a_snapshot(make_log):
    log = make_log()
    fill(log, [(1, 30), (2, 30)])
    log.delete_before(OffsetAndEpoch(45, 2))
    log.flush()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (45, 60, 2)
    assert log.read(45, 1 << 20)[0] == LogEntry(45, 2, b"e2-45")
    with pytest.raises(ValueError):
        log.read(44, 10)
    # Epoch 1 is gone with the head: asking for it gives its own number at the log start.
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(45, 1)
    log.delete_before(OffsetAndEpoch(10, 1))  # behind the start: nothing
    assert log.start_offset == 45
    log.delete_before(OffsetAndEpoch(60, 2))  # everything
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (60, 60, 2)
    assert log.read(60, 10) == []
    assert log.append(data("z"), 3) == range(60, 61)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(60, 2)
    with pytest.raises(ValueError):
        log.delete_before(OffsetAndEpoch(99, 3))


def test_raft_log_reset_to_snapshot_restarts_it_empty(make_log):
    log = make_log()
    fill(log, [(1, 5)])
    log.reset_to_snapshot(OffsetAndEpoch(100, 4))
    log.flush()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (100, 100, 4)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(100, 4)
    assert log.append(data("after"), 5) == range(100, 101)
    assert log.read(100, 10) == [LogEntry(100, 5, b"after")]
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(100, 4)


def test_disk_log_behaves_as_the_memory_log_under_random_operations(tmp_path):
    """A differential test: the same random operations on both logs, compared after each."""
    rng = random.Random(7)
    mem = MemoryRaftLog()
    disk = DiskRaftLog.open(tmp_path / METADATA_LOG_DIR_NAME, segment_bytes=300)
    epoch = 1
    try:
        for step in range(400):
            op = rng.random()
            if op < 0.55:
                n = rng.randint(1, 6)
                if rng.random() < 0.2:
                    epoch += rng.randint(1, 2)
                if rng.random() < 0.1:
                    records = [RaftRecord(b"leader-%d" % step, LEADER_CHANGE)]
                else:
                    records = [RaftRecord(b"s%d-%d" % (step, i)) for i in range(n)]
                assert mem.append(records, epoch) == disk.append(records, epoch)
            elif op < 0.75 and mem.end_offset > mem.start_offset:
                to = rng.randint(mem.start_offset, mem.end_offset)
                mem.truncate_to(to)
                disk.truncate_to(to)
            elif op < 0.85 and mem.end_offset > mem.start_offset:
                cut = rng.randint(mem.start_offset + 1, mem.end_offset)
                sid = OffsetAndEpoch(cut, mem.read(cut - 1, 1)[0].epoch)
                mem.delete_before(sid)
                disk.delete_before(sid)
            elif op < 0.88:
                sid = OffsetAndEpoch(mem.end_offset + rng.randint(0, 5), epoch)
                mem.reset_to_snapshot(sid)
                disk.reset_to_snapshot(sid)
            disk.flush()
            assert (disk.start_offset, disk.end_offset, disk.last_fetched_epoch) == (
                mem.start_offset,
                mem.end_offset,
                mem.last_fetched_epoch,
            ), step
            assert disk.entries() == mem.entries(), step
            for e in range(0, epoch + 2):
                assert disk.end_offset_for_epoch(e) == mem.end_offset_for_epoch(e), (step, e)
            if mem.end_offset > mem.start_offset:
                frm = rng.randint(mem.start_offset, mem.end_offset)
                assert disk.read(frm, 1 << 20)[:1] == mem.read(frm, 1 << 20)[:1]
    finally:
        disk.close()


# -- what a disk adds ------------------------------------------------------------------------------


def _segment_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def test_disk_log_files_are_a_partition_folder_with_epochs_checkpointed(tmp_path):
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d)
    log.append([RaftRecord(b"lc", LEADER_CHANGE)], 3)
    log.flush()
    assert _segment_files(d) == ["00000000000000000000.log"]
    # The epoch checkpoint is written at the partition log's durable points (close here); the
    # Raft log never trusts it anyway: it rebuilds its epochs from the batches at every open.
    log.close()
    assert (d / "leader-epoch-checkpoint").read_text().split("\n")[:3] == ["0", "1", "3 0"]


def test_disk_log_reopens_with_its_entries_and_epochs(tmp_path):
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d, segment_bytes=400)
    fill(log, [(1, 10), (2, 10), (4, 5)])
    log.flush()
    before = log.entries()
    log.close()
    again = DiskRaftLog.open(d, segment_bytes=400)
    assert again.entries() == before
    assert len(_segment_files(d)) > 1
    assert again.epoch_cache() == [(0, 1), (10, 2), (20, 4)]
    assert again.last_fetched_epoch == 4
    assert again.append(data("next"), 4) == range(25, 26)
    again.close()


def test_disk_log_reopens_at_the_snapshot_and_deletes_segments_below_it(tmp_path):
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d, segment_bytes=300)
    fill(log, [(1, 40), (2, 20)])
    segments = len(_segment_files(d))
    sid = OffsetAndEpoch(50, 2)
    log.delete_before(sid)
    log.flush()
    assert len(_segment_files(d)) < segments
    log.close()
    again = DiskRaftLog.open(d, latest_snapshot=sid, segment_bytes=300)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch) == (50, 60, 2)
    assert again.read(50, 100)[0] == LogEntry(50, 2, b"e2-50")
    assert again.end_offset_for_epoch(1) == OffsetAndEpoch(50, 1)
    again.close()


def test_disk_log_behind_its_snapshot_restarts_at_the_snapshot(tmp_path):
    """A follower crashed after installing a fetched snapshot, before resetting its log."""
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d)
    fill(log, [(1, 5)])
    log.flush()
    log.close()
    again = DiskRaftLog.open(d, latest_snapshot=OffsetAndEpoch(30, 3))
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch) == (30, 30, 3)
    again.close()


def test_disk_log_recovers_after_a_crash_cut_the_unflushed_tail(tmp_path):
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d)
    fill(log, [(1, 5), (2, 3)])
    log.flush()
    durable = log.entries()
    segment = d / _segment_files(d)[0]
    flushed_size = segment.stat().st_size
    fill(log, [(3, 4)])  # never flushed: lost in the crash
    # The crash: the page cache is gone (the tail past the last fsync vanishes, here with half
    # of its first batch left torn), and the process never closed anything.
    with open(segment, "r+b") as f:
        f.truncate(flushed_size + 30)
    del log
    again = DiskRaftLog.open(d)
    assert again.entries() == durable
    assert again.last_fetched_epoch == 2
    assert again.epoch_cache() == [(0, 1), (5, 2)]
    assert again.end_offset_for_epoch(3) == OffsetAndEpoch(8, 2)
    assert again.append(data("after"), 3) == range(8, 9)
    again.flush()
    again.close()
    third = DiskRaftLog.open(d)
    assert third.entries()[-1] == LogEntry(8, 3, b"after")
    third.close()


def test_disk_log_crash_with_a_stale_epoch_checkpoint_trusts_the_batches(tmp_path):
    d = tmp_path / METADATA_LOG_DIR_NAME
    log = DiskRaftLog.open(d)
    fill(log, [(1, 3)])
    log.flush()
    size = (d / _segment_files(d)[0]).stat().st_size
    fill(log, [(5, 3)])  # epoch 5 reaches the checkpoint (written at once), not the disk
    with open(d / _segment_files(d)[0], "r+b") as f:
        f.truncate(size)
    del log
    again = DiskRaftLog.open(d)
    assert again.epoch_cache() == [(0, 1)]
    assert again.last_fetched_epoch == 1
    again.close()


def test_metadata_log_config_has_no_retention_and_small_segments_for_tests():
    config = metadata_log_config()
    assert config.segment_size == 1 << 30
    assert config.retention_ms == -1 and config.retention_bytes == -1
    assert metadata_log_config(4096).segment_size == 4096


def test_raft_log_truncate_inside_a_batch_that_straddles_the_log_start(make_log):
    log = make_log()
    log.append(data("a", "b", "c", "d", "e"), 2)  # one batch [0, 5)
    log.delete_before(OffsetAndEpoch(2, 2))
    log.truncate_to(4)
    log.flush()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (2, 4, 2)
    assert [e.value for e in log.read(2, 1 << 20)] == [b"c", b"d"]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.append(data("f"), 3) == range(4, 5)
