"""LogManager: formatting, startup checks, partition folders, clean and unclean restarts,
deletion, and the periodic work of ``tick`` (retention, flushes, checkpoints) with injected time.

A "crash" here is a process that stops without ``shutdown()``: the files keep what was written
(the page cache survives a killed process), nothing is trimmed, snapshotted or checkpointed.
``tests/log/test_log_crash.py`` does the same with real SIGKILLed processes.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from kcore.log.checkpoint import OffsetCheckpointFile
from kcore.log.cleaner_round import CleaningRound
from kcore.log.config import LogConfig
from kcore.log.errors import LogError
from kcore.log.log_dirs import MetaProperties, read_partition_metadata
from kcore.log.log_manager import LogManager
from kcore.log.log_reads import FetchIsolation
from kcore.log.segment import LogSegment
from kcore.record import RecordBatch, RecordBatchBuilder, iter_batches

T0 = 1_700_000_000_000
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
TOPIC_ID = uuid.UUID("0d1e2f30-4152-4637-8899-aabbccddeeff")


def config(**overrides) -> LogConfig:
    return LogConfig.from_layers({k: str(v) for k, v in overrides.items()})


def small_segments(**overrides) -> LogConfig:
    return config(**{"internal.segment.bytes": 1000, "file.delete.delay.ms": 0, **overrides})


def batch(n: int = 2, size: int = 150, ts: int = T0) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(timestamp=ts + i, key=b"k%d" % i, value=b"v" * size)
    return bytes(b.build())


def fill(plog, batches: int, *, now_ms: int = T0, ts: int = T0) -> None:
    for _ in range(batches):
        plog.append_as_leader(batch(ts=ts), leader_epoch=0, now_ms=now_ms)


def all_batches(plog) -> list[RecordBatch]:
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20, FetchIsolation.LOG_END)
        data = b"".join(s.read() for s in info.records)
        got = [RecordBatch(bytes(b.buffer)) for b in iter_batches(data)]
        out += got
        assert got and got[-1].last_offset >= offset, f"no progress at {offset}"
        offset = got[-1].last_offset + 1
    return out


def crash(manager: LogManager) -> None:
    """Stop like a killed process: release descriptors and mappings, write nothing."""
    for plog in manager.logs.values():
        for seg in plog.segments:
            seg.log.close()
            seg.offset_index.close_handler()  # unmap without trimming the preallocation
            seg.time_index.close_handler()
            seg.txn_index.close()
    manager.logs.clear()


@pytest.fixture
def recover_calls(monkeypatch):
    """Counts LogSegment.recover calls (the real method still runs)."""
    calls: list[str] = []
    original = LogSegment.recover

    def counting(self, *args, **kwargs):
        calls.append(self.log.path.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", counting)
    return calls


def formatted(tmp_path, cfg=None, dirs=("logs",), **kwargs) -> LogManager:
    manager = LogManager(
        [tmp_path / d for d in dirs], lambda topic: cfg or small_segments(), **kwargs
    )
    manager.format(CLUSTER, 1)
    return manager


def restart(tmp_path, cfg=None, dirs=("logs",), now_ms: int = T0, **kwargs) -> LogManager:
    manager = LogManager(
        [tmp_path / d for d in dirs], lambda topic: cfg or small_segments(), **kwargs
    )
    manager.startup(now_ms)
    return manager


# -- format and startup ----------------------------------------------------------------------


def test_log_manager_startup_refuses_an_unformatted_directory(tmp_path):
    (tmp_path / "logs").mkdir()
    manager = LogManager([tmp_path / "logs"], lambda topic: config())
    with pytest.raises(LogError, match="not formatted.*kcore format"):
        manager.startup(T0)


def test_log_manager_startup_refuses_directories_of_different_clusters(tmp_path):
    LogManager([tmp_path / "a"], lambda t: config()).format(CLUSTER, 1)
    LogManager([tmp_path / "b"], lambda t: config()).format("other-cluster-id-00000", 1)
    manager = LogManager([tmp_path / "a", tmp_path / "b"], lambda t: config())
    with pytest.raises(LogError, match="different clusters") as e:
        manager.startup(T0)
    assert CLUSTER in str(e.value) and "other-cluster-id-00000" in str(e.value)


def test_log_manager_startup_refuses_directories_of_different_nodes(tmp_path):
    LogManager([tmp_path / "a"], lambda t: config()).format(CLUSTER, 1)
    LogManager([tmp_path / "b"], lambda t: config()).format(CLUSTER, 2)
    with pytest.raises(LogError, match="different clusters or nodes"):
        LogManager([tmp_path / "a", tmp_path / "b"], lambda t: config()).startup(T0)


def test_log_manager_format_refuses_a_directory_of_another_cluster(tmp_path):
    LogManager([tmp_path / "a"], lambda t: config()).format(CLUSTER, 1)
    with pytest.raises(LogError, match="formatted for cluster"):
        LogManager([tmp_path / "a"], lambda t: config()).format("another-cluster-000000", 1)


def test_log_manager_format_gives_every_directory_its_own_id(tmp_path):
    manager = formatted(tmp_path, dirs=("a", "b"))
    a, b = (MetaProperties.read(d) for d in manager.log_dirs)
    assert (a.cluster_id, a.node_id, a.version) == (CLUSTER, 1, 1)
    assert a.directory_id != b.directory_id
    manager.startup(T0)
    assert manager.meta.cluster_id == CLUSTER


def test_log_manager_startup_of_an_empty_formatted_directory_is_unclean_and_loads_nothing(
    tmp_path,
):
    manager = formatted(tmp_path)
    manager.startup(T0)
    assert manager.logs == {} and not manager.had_clean_shutdown


# -- partitions ------------------------------------------------------------------------------


def test_log_manager_get_or_create_log_writes_partition_metadata_with_the_topic_id(tmp_path):
    manager = formatted(tmp_path)
    manager.startup(T0)
    plog = manager.get_or_create_log("orders", 3, TOPIC_ID, T0)
    folder = tmp_path / "logs" / "orders-3"
    assert plog.dir == folder and folder.is_dir()
    assert read_partition_metadata(folder) == TOPIC_ID
    assert (folder / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    assert manager.get_or_create_log("orders", 3, TOPIC_ID, T0) is plog
    assert manager.get_log("orders", 3) is plog and manager.get_log("orders", 4) is None
    assert manager.topic_ids == {"orders": TOPIC_ID}


def test_log_manager_new_logs_go_to_the_least_loaded_directory(tmp_path):
    manager = formatted(tmp_path, dirs=("a", "b"))
    manager.startup(T0)
    dirs = [manager.get_or_create_log("t", p, TOPIC_ID, T0).dir.parent.name for p in range(4)]
    assert sorted(dirs) == ["a", "a", "b", "b"]


def test_log_manager_delete_log_removes_the_folder_and_a_restart_does_not_bring_it_back(
    tmp_path,
):
    manager = formatted(tmp_path)
    manager.startup(T0)
    fill(manager.get_or_create_log("gone", 0, TOPIC_ID, T0), 10)
    manager.get_or_create_log("kept", 0, uuid.uuid4(), T0)
    manager.delete_log("gone", 0)
    assert sorted(os.listdir(tmp_path / "logs")) == ["kept-0", "meta.properties"]
    assert manager.get_log("gone", 0) is None and "gone" not in manager.topic_ids
    manager.delete_log("gone", 0)  # deleting twice is harmless
    manager.shutdown()
    again = restart(tmp_path)
    assert list(again.logs) == [("kept", 0)]


def test_log_manager_startup_finishes_a_deletion_interrupted_by_a_crash(tmp_path):
    manager = formatted(tmp_path)
    manager.startup(T0)
    fill(manager.get_or_create_log("gone", 0, TOPIC_ID, T0), 3)
    manager.shutdown()
    os.rename(tmp_path / "logs" / "gone-0", tmp_path / "logs" / "gone-0.abc123-delete")
    again = restart(tmp_path)
    assert again.logs == {}
    assert not (tmp_path / "logs" / "gone-0.abc123-delete").exists()


# -- clean and unclean restarts --------------------------------------------------------------


def test_log_manager_shutdown_writes_checkpoints_and_the_clean_shutdown_marker(tmp_path):
    manager = formatted(tmp_path)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    plog.update_high_watermark(12)
    manager.shutdown(broker_epoch=7)
    logs = tmp_path / "logs"
    assert OffsetCheckpointFile(logs / "recovery-point-offset-checkpoint").read() == {("t", 0): 20}
    assert OffsetCheckpointFile(logs / "replication-offset-checkpoint").read() == {("t", 0): 12}
    assert (logs / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":7}'
    assert manager.logs == {}


def test_log_manager_restart_after_a_clean_shutdown_scans_no_segment(tmp_path, recover_calls):
    manager = formatted(tmp_path)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 20)
    segments = len(plog.segments)
    assert segments > 3
    manager.shutdown()

    again = restart(tmp_path)
    assert again.had_clean_shutdown
    assert recover_calls == []  # not one segment rescanned
    # The marker is consumed: a crash from now on must be detected at the next startup.
    assert not (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    plog = again.get_log("t", 0)
    assert plog.log_end_offset == 40 and len(plog.segments) == segments
    assert [b.base_offset for b in all_batches(plog)] == list(range(0, 40, 2))
    assert again.get_or_create_log("t", 0, TOPIC_ID, T0) is plog
    assert again.topic_ids == {"t": TOPIC_ID}


def test_log_manager_restart_after_a_crash_recovers_and_cuts_a_torn_tail(tmp_path, recover_calls):
    manager = formatted(tmp_path)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 20)
    active = plog.active_segment.log.path
    crash(manager)
    with open(active, "r+b") as f:  # the last batch was being written when the power went
        f.truncate(os.path.getsize(active) - 10)

    again = restart(tmp_path)
    assert not again.had_clean_shutdown
    assert active.name in recover_calls
    plog = again.get_log("t", 0)
    assert plog.log_end_offset == 38
    assert [b.base_offset for b in all_batches(plog)] == list(range(0, 38, 2))
    for seg in plog.segments:
        seg.sanity_check()
    fill(plog, 1)
    assert plog.log_end_offset == 40  # the next append continues right after the cut


def test_log_manager_unclean_restart_rescans_only_from_the_recovery_point(tmp_path, recover_calls):
    cfg = small_segments(**{"flush.ms": 1000})
    manager = formatted(tmp_path, cfg, checkpoint_interval_ms=1000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    manager.tick(T0 + 1000)  # flush.ms passed: fsync, recovery point = LEO, then checkpoint
    assert plog.recovery_point == 20
    checkpoint = OffsetCheckpointFile(tmp_path / "logs" / "recovery-point-offset-checkpoint")
    assert checkpoint.read() == {("t", 0): 20}
    fill(plog, 10)
    first_unflushed = plog.segments[plog._segment_index(20)].base_offset
    expected = [s.log.path.name for s in plog.segments if s.base_offset >= first_unflushed]
    assert len(expected) < len(plog.segments)
    crash(manager)

    again = restart(tmp_path, cfg)
    assert recover_calls == expected
    assert again.get_log("t", 0).log_end_offset == 40


def test_log_manager_restart_restores_the_checkpointed_log_start_offset(tmp_path):
    manager = formatted(tmp_path)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    plog.update_high_watermark(20)
    plog.increment_log_start_offset(7)
    manager.shutdown()
    starts = OffsetCheckpointFile(tmp_path / "logs" / "log-start-offset-checkpoint")
    assert starts.read() == {("t", 0): 7}
    plog = restart(tmp_path).get_log("t", 0)
    assert plog.log_start_offset == 7
    assert all_batches(plog)[0].last_offset >= 7


# -- tick --------------------------------------------------------------------------------------


def test_log_manager_tick_applies_retention_only_at_its_interval(tmp_path):
    cfg = small_segments(**{"retention.ms": 60_000})
    manager = formatted(tmp_path, cfg, retention_check_interval_ms=10_000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10, ts=T0)  # records stamped T0 and T0 + 1: all expired after T0 + 60_001
    plog.update_high_watermark(plog.log_end_offset)
    segments = len(plog.segments)

    manager.tick(T0 + 9_999)  # before the retention check interval
    assert len(plog.segments) == segments and plog.log_start_offset == 0
    manager.tick(T0 + 55_000)  # a check, but nothing has expired yet
    assert len(plog.segments) == segments
    manager.tick(T0 + 61_000)  # expired, but the next check is only due at T0 + 65_000
    assert len(plog.segments) == segments and plog.log_start_offset == 0
    manager.tick(T0 + 65_000)
    assert plog.log_start_offset == 20 and plog.log_end_offset == 20
    assert plog.size_in_bytes() == 0  # the active segment was rolled and every old one removed
    manager.tick(T0 + 65_001)  # file.delete.delay.ms = 0: the .deleted files go
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".deleted")]


def test_log_manager_tick_applies_retention_bytes(tmp_path):
    cfg = small_segments(**{"retention.bytes": 2000})
    manager = formatted(tmp_path, cfg, retention_check_interval_ms=1000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 20)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0 + 1000)
    inactive = plog.segments[:-1]
    assert sum(s.size for s in plog.segments) - 2000 < plog.segments[0].size
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    assert inactive  # retention never removes the active segment by size
    assert [b.base_offset for b in all_batches(plog)][-1] == 38


def test_log_manager_tick_writes_checkpoints_only_at_their_interval(tmp_path):
    cfg = small_segments(**{"retention.bytes": 2000})
    manager = formatted(
        tmp_path, cfg, retention_check_interval_ms=1000, checkpoint_interval_ms=5000
    )
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 20)
    plog.update_high_watermark(plog.log_end_offset)
    logs = tmp_path / "logs"
    starts = OffsetCheckpointFile(logs / "log-start-offset-checkpoint")
    hws = OffsetCheckpointFile(logs / "replication-offset-checkpoint")

    manager.tick(T0 + 1000)  # retention moved the log start offset ...
    assert plog.log_start_offset > 0
    assert not starts.path.exists() and not hws.path.exists()  # ... not yet checkpointed
    manager.tick(T0 + 4999)
    assert not starts.path.exists()
    manager.tick(T0 + 5000)
    assert starts.read() == {("t", 0): plog.log_start_offset}
    assert hws.read() == {("t", 0): 40}
    fill(plog, 1)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0 + 9999)
    assert hws.read() == {("t", 0): 40}
    manager.tick(T0 + 10_000)
    assert hws.read() == {("t", 0): 42}


def test_log_manager_tick_flushes_at_flush_ms_and_advances_the_recovery_point(tmp_path):
    cfg = small_segments(**{"flush.ms": 3000})
    manager = formatted(tmp_path, cfg)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 5)
    manager.tick(T0 + 2999)
    assert plog.recovery_point == 0
    manager.tick(T0 + 3000)
    assert plog.recovery_point == 10
    fill(plog, 5)
    manager.tick(T0 + 5999)
    assert plog.recovery_point == 10
    manager.tick(T0 + 6000)
    assert plog.recovery_point == 20


def test_log_manager_maintain_returns_the_checkpoints_for_another_thread(tmp_path):
    manager = formatted(tmp_path, config(), checkpoint_interval_ms=5000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 3)
    plog.update_high_watermark(plog.log_end_offset)
    hws = OffsetCheckpointFile(tmp_path / "logs" / "replication-offset-checkpoint")
    assert manager.maintain(T0 + 4999) is None
    job = manager.maintain(T0 + 5000)
    assert job is not None and not hws.path.exists()  # the snapshot only: nothing written yet
    fill(plog, 1)
    plog.update_high_watermark(plog.log_end_offset)  # after the snapshot: not in this write
    worker = threading.Thread(target=job.write)
    worker.start()
    worker.join()
    assert hws.read() == {("t", 0): 6}


def test_log_manager_checkpoint_write_never_goes_back_to_an_older_snapshot(tmp_path):
    manager = formatted(tmp_path, config())
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 2)
    plog.update_high_watermark(plog.log_end_offset)
    older = manager.checkpoint_snapshot()
    fill(plog, 2)
    plog.update_high_watermark(plog.log_end_offset)
    manager.checkpoint()  # e.g. shutdown's checkpoint overtaking a slow write in a worker
    hws = OffsetCheckpointFile(tmp_path / "logs" / "replication-offset-checkpoint")
    assert hws.read() == {("t", 0): 8}
    assert older.write() is False  # skipped: a newer snapshot is on disk
    assert hws.read() == {("t", 0): 8}


def test_log_manager_checkpoint_writes_are_serialised(tmp_path, monkeypatch):
    manager = formatted(tmp_path, config())
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 2)
    inside, overlap = [0], []
    real_fsync = os.fsync

    def slow_fsync(fd):
        inside[0] += 1
        overlap.append(inside[0])
        time.sleep(0.002)
        real_fsync(fd)
        inside[0] -= 1

    monkeypatch.setattr(os, "fsync", slow_fsync)
    jobs = [manager.checkpoint_snapshot() for _ in range(4)]
    threads = [threading.Thread(target=j.write) for j in reversed(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlap) == 1  # never two checkpoint writes (hence fsyncs) at once
    assert not list((tmp_path / "logs").glob("*.tmp"))


def test_log_manager_checkpoint_skips_files_whose_offsets_did_not_change(tmp_path, monkeypatch):
    manager = formatted(tmp_path, config())
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 2)
    plog.update_high_watermark(plog.log_end_offset)
    manager.checkpoint()
    written = []
    real_write = OffsetCheckpointFile.write

    def spy(self, entries):
        written.append(self.path.name)
        real_write(self, entries)

    monkeypatch.setattr(OffsetCheckpointFile, "write", spy)
    manager.checkpoint()  # nothing moved: nothing written, nothing fsynced
    assert written == []
    fill(plog, 1)
    plog.update_high_watermark(plog.log_end_offset)
    manager.checkpoint()  # only the high watermark moved (no flush: the recovery point stays)
    assert written == ["replication-offset-checkpoint"]
    hws = OffsetCheckpointFile(tmp_path / "logs" / "replication-offset-checkpoint")
    assert hws.read() == {("t", 0): plog.log_end_offset}


def test_log_manager_maintenance_period_is_the_shortest_period_maintain_serves(tmp_path):
    configs = {"slow": config(), "fast": config(**{"flush.ms": 250})}
    manager = LogManager(
        [tmp_path / "logs"],
        lambda topic: configs[topic],
        checkpoint_interval_ms=60_000,
        retention_check_interval_ms=300_000,
    )
    manager.format(CLUSTER, 1)
    manager.startup(T0)
    assert manager.maintenance_period_ms() == 60_000  # no logs: the checkpoints
    manager.get_or_create_log("slow", 0, TOPIC_ID, T0)
    assert manager.maintenance_period_ms() == 60_000  # Kafka's file.delete.delay.ms, 60 s
    manager.get_or_create_log("fast", 0, uuid.uuid4(), T0)
    assert manager.maintenance_period_ms() == 250


# -- the log cleaner -------------------------------------------------------------------------


def _compacted(**overrides) -> LogConfig:
    return small_segments(
        **{
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": 0.01,
            "file.delete.delay.ms": 60_000,
            **overrides,
        }
    )


def _keys(plog) -> list[bytes]:
    return [r.key for b in all_batches(plog) for r in b.records()]


def test_log_manager_cleaner_compacts_a_due_log_and_then_backs_off(tmp_path):
    manager = formatted(tmp_path, _compacted(), cleaner_backoff_ms=15_000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)  # keys k0, k1 ten times over, in several segments
    plog.update_high_watermark(plog.log_end_offset)
    assert manager.cleaner_wait_ms(T0) == 0
    assert manager.maintain(T0) is None  # maintain does not clean: begin_cleaning does
    assert ("t", 0) not in manager.cleaner.checkpoints

    manager.tick(T0)
    dirty = manager.cleaner.checkpoints[("t", 0)]
    assert dirty == plog.active_segment.base_offset  # cleaned up to the active segment
    assert _keys(plog).count(b"k0") < 10
    fill(plog, 10)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0 + 1)  # the last round cleaned: the cleaner looks again at once
    manager.tick(T0 + 2)  # nothing was due at T0 + 1: the cleaner waits for its backoff
    assert manager.cleaner_wait_ms(T0 + 2) == 15_000
    before = manager.cleaner.checkpoints[("t", 0)]
    fill(plog, 10)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0 + 14_000)
    assert manager.cleaner.checkpoints[("t", 0)] == before
    manager.tick(T0 + 16_000)
    assert manager.cleaner.checkpoints[("t", 0)] > before


def test_log_manager_cleaner_checkpoint_survives_a_restart(tmp_path):
    manager = formatted(tmp_path, _compacted(), cleaner_backoff_ms=1000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0)
    dirty = manager.cleaner.checkpoints[("t", 0)]
    assert dirty > 0
    manager.shutdown()
    logs = tmp_path / "logs"
    assert OffsetCheckpointFile(logs / "cleaner-offset-checkpoint").read() == {("t", 0): dirty}
    again = restart(tmp_path, _compacted(), cleaner_backoff_ms=1000)
    assert again.cleaner.checkpoints == {("t", 0): dirty}


def test_log_manager_without_cleaner_leaves_compacted_logs_alone(tmp_path):
    manager = formatted(tmp_path, _compacted())
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    plog.update_high_watermark(plog.log_end_offset)
    manager.tick(T0 + 3_600_000)
    assert _keys(plog).count(b"k0") == 10


def test_log_manager_cleaner_marks_a_failing_log_uncleanable(tmp_path, monkeypatch, caplog):
    manager = formatted(tmp_path, _compacted(), cleaner_backoff_ms=1000)
    manager.startup(T0)
    plog = manager.get_or_create_log("t", 0, TOPIC_ID, T0)
    fill(plog, 10)
    plog.update_high_watermark(plog.log_end_offset)
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise LogError("unreadable segment")

    monkeypatch.setattr(CleaningRound, "_build_offset_map", broken)
    manager.tick(T0)
    manager.tick(T0 + 5_000)
    assert len(calls) == 1  # not tried again
    assert "uncleanable" in caplog.text
    assert _keys(plog).count(b"k0") == 10  # the data is untouched and readable


def test_log_manager_update_configs_rereads_only_the_topics_named_or_all(tmp_path):
    retention = {"a": 1000, "b": 2000}
    manager = LogManager(
        [tmp_path / "logs"], lambda topic: config(**{"retention.ms": retention[topic]})
    )
    manager.format(CLUSTER, 1)
    manager.startup(T0)
    for tp in (("a", 0), ("a", 1), ("b", 0)):
        manager.get_or_create_log(*tp, uuid.uuid4(), T0)
    retention.update(a=5000, b=6000)
    manager.update_configs(["a"])
    assert [manager.get_log(*tp).config.retention_ms for tp in (("a", 0), ("a", 1), ("b", 0))] == [
        5000,
        5000,
        2000,
    ]
    manager.update_configs()  # a broker default changed: every topic
    assert manager.get_log("b", 0).config.retention_ms == 6000
    manager.shutdown()
