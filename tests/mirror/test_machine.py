"""The mirror partition machine, driven by hand: the M-46 rule, LME truncation (M-37, D-16),
STOPPING's order and resumption (D-14, D-15), epoch fencing (D-11) and FAILED (D-13).

The seeded simulation (``test_simulation.py``) checks the same machine under faults; these
tests pin the exact output sequences a shell can rely on.
"""

from __future__ import annotations

import pytest

from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log
from kcore.mirror import outputs as o
from kcore.mirror.events import (
    BecameLeader,
    LastMirrorEpochFetched,
    LeaderEpochChanged,
    MirroredEpochAhead,
    MirrorNameChanged,
    OpCompleted,
    OpFailed,
    PersistedState,
    RecoveryRequested,
    SourceFailed,
    StateLoaded,
)
from kcore.mirror.machine import MachineConfig, MirrorPartitionMachine, lme_truncation
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol.errors import ErrorCode
from kcore.record import RecordBatchBuilder

from .simulation import Batch, SimLog

S = MirrorPartitionState
NOW = 1_000_000


class Driver:
    """Feeds one machine and keeps its outputs; answers are given by the test."""

    def __init__(self, stored=None, *, mirror_name="dr", log=None, epoch=3, config=None):
        self.log = log if log is not None else SimLog()
        self.now = NOW
        self.machine = MirrorPartitionMachine(
            "orders", 0, self.log, config or MachineConfig(), mirror_name=mirror_name, now=NOW
        )
        self.out: list = []
        self.send(BecameLeader(epoch))
        read = self.take(o.ReadState)
        self.send(StateLoaded(read.op, stored))

    def send(self, event, *, after_ms: int = 0):
        self.now += after_ms
        self.machine.handle(event, self.now)
        poll = self.machine.poll(self.now)
        self.out += poll.outputs
        return poll

    def tick(self, after_ms: int):
        self.now += after_ms
        poll = self.machine.poll(self.now)
        self.out += poll.outputs
        return poll

    def take(self, kind):
        """The first pending output of ``kind`` (outputs before it are dropped)."""
        for i, out in enumerate(self.out):
            if isinstance(out, kind):
                del self.out[: i + 1]
                return out
        raise AssertionError(f"no {kind.__name__} in {self.out}")

    def ack(self, kind):
        out = self.take(kind)
        self.send(OpCompleted(out.op))
        return out

    def persisted(self):
        return self.ack(o.PersistState).record

    def kinds(self):
        return [type(x).__name__ for x in self.out if not isinstance(x, o.Transitioned)]


def mirroring(**kw) -> Driver:
    d = Driver(PersistedState(S.PAUSED, S.PAUSING), **kw)
    d.send(MirrorNameChanged("dr"))
    assert d.persisted().state is S.MIRRORING
    d.take(o.AddFetcher)
    return d


def test_machine_acts_on_a_state_only_after_its_persist_is_acknowledged():
    d = Driver(None)
    write = d.take(o.PersistState)
    assert (write.record.state, write.record.previous_state) == (S.LOG_TRUNCATION, S.UNKNOWN)
    d.tick(100)
    assert "FetchLastMirrorEpoch" not in d.kinds()  # M-46: not before the ack
    d.send(OpCompleted(write.op))
    assert d.machine.state is S.LOG_TRUNCATION
    lme = d.take(o.FetchLastMirrorEpoch)
    d.send(LastMirrorEpochFetched(lme.op, -1, source_log_start_offset=1200))
    cut = d.take(o.TruncateFullyAndStartAt)
    assert cut.offset == 1200  # D-16: offsets stay the source's
    d.send(OpCompleted(cut.op))
    assert d.persisted().state is S.MIRRORING
    assert d.take(o.AddFetcher).fetch_offset == d.log.end_offset


def test_machine_lost_write_is_sent_again_and_a_late_answer_is_ignored():
    d = Driver(None, config=MachineConfig(request_timeout_ms=1_000, retry_backoff_ms=50))
    first = d.take(o.PersistState)
    d.tick(1_000)  # timed out
    d.tick(50)
    again = d.take(o.PersistState)
    assert again.record == first.record and again.op != first.op
    d.send(OpCompleted(first.op))  # the lost one's answer, late
    assert d.machine.state is S.UNKNOWN
    d.send(OpCompleted(again.op))
    assert d.machine.state is S.LOG_TRUNCATION


def _partition_log(tmp_path, epochs):
    log = create_log(tmp_path / "orders-0", LogConfig.from_layers({}), now_ms=NOW)
    for epoch in epochs:
        b = RecordBatchBuilder(0, partition_leader_epoch=epoch)
        b.append(timestamp=NOW, key=b"k", value=b"v")
        b.append(timestamp=NOW, key=b"k", value=b"v")
        log.append_as_leader(bytes(b.build()), leader_epoch=epoch, now_ms=NOW)
    return log


def test_machine_lme_truncation_cuts_at_the_first_epoch_above_the_lme_of_a_real_log(tmp_path):
    log = _partition_log(tmp_path, [0, 0, 2, 5])  # epoch 0 at 0, 2 at 4, 5 at 6; LEO 8
    try:
        assert lme_truncation(2, 0, log) == o.TruncateTo(0, 6)
        assert lme_truncation(1, 0, log) == o.TruncateTo(0, 4)
        assert lme_truncation(0, 300, log) == o.TruncateTo(0, 4)  # LME 0 is an epoch too
        assert lme_truncation(5, 0, log) == o.TruncateTo(0, 8)  # nothing above: no cut
        assert lme_truncation(9, 0, log) == o.TruncateTo(0, 8)
        assert lme_truncation(-1, 300, log) == o.TruncateFullyAndStartAt(0, 300)
    finally:
        log.close()


def test_machine_failback_start_truncates_by_the_sources_lme():
    log = SimLog()
    for epoch in (1, 1, 4, 6):  # 6: written locally after the other side took over
        log.append(Batch(log.end_offset, epoch, log.end_offset))
    d = Driver(PersistedState(S.STOPPED, S.STOPPING, last_mirror_epoch=1), log=log, epoch=7)
    assert d.persisted().previous_state is S.STOPPED
    lme = d.take(o.FetchLastMirrorEpoch)
    d.send(LastMirrorEpochFetched(lme.op, 4, 0, source_leader_epoch=5))
    assert d.take(o.TruncateTo).offset == 3


def test_machine_resume_after_restart_goes_through_truncation_without_cutting():
    log = SimLog()
    for _ in range(5):
        log.append(Batch(log.end_offset, 2, log.end_offset))
    d = Driver(PersistedState(S.MIRRORING, S.LOG_TRUNCATION), log=log)
    record = d.persisted()
    assert (record.state, record.previous_state) == (S.LOG_TRUNCATION, S.MIRRORING)
    assert "FetchLastMirrorEpoch" not in d.kinds()  # D-14: truncation on fetch does the rest
    d.ack(o.TruncateTo)
    assert d.persisted().state is S.MIRRORING
    assert d.take(o.AddFetcher).fetch_offset == 5


def test_machine_truncation_waits_for_the_isr_again_when_replicas_are_behind():
    # M-38: fewer than min ISR (or a member not caught up): the step is skipped and tried
    # again, a no-op truncation to the log end, never FAILED; the fetcher waits for it.
    log = SimLog()
    for _ in range(4):
        log.append(Batch(log.end_offset, 2, log.end_offset))
    d = Driver(PersistedState(S.MIRRORING, S.LOG_TRUNCATION), log=log)
    assert d.persisted().state is S.LOG_TRUNCATION
    for attempt in range(8):
        cut = d.take(o.TruncateTo)
        assert cut.offset == 4
        d.send(OpFailed(cut.op, ErrorCode.NOT_ENOUGH_REPLICAS, "1 in-sync replica(s)"))
        assert "TruncateTo" not in d.kinds()  # after a backoff
        poll = d.tick(1_000)
        assert poll.deadline is not None
        assert d.machine.state is S.LOG_TRUNCATION, attempt
    d.ack(o.TruncateTo)
    assert d.persisted().state is S.MIRRORING
    assert d.take(o.AddFetcher).fetch_offset == 4
    # Any other truncation failure fails the partition (D-13).
    d = Driver(PersistedState(S.MIRRORING, S.LOG_TRUNCATION), log=log)
    d.persisted()
    cut = d.take(o.TruncateTo)
    d.send(OpFailed(cut.op, ErrorCode.KAFKA_STORAGE_ERROR, "disk"))
    record = d.persisted()
    assert record.state is S.FAILED and "truncating the log failed" in record.reason


def test_machine_epoch_fencing_holds_the_batch_bumps_and_resumes():
    d = mirroring(epoch=3)
    assert d.machine.may_append(3) and not d.machine.may_append(7)
    d.send(MirroredEpochAhead(7))
    assert d.persisted().state is S.EPOCH_FENCING
    d.ack(o.RemoveFetcher)
    bump = d.ack(o.RequestEpochBump)
    assert bump.min_leader_epoch == 7
    assert d.machine.state is S.EPOCH_FENCING  # accepted, but not in the metadata yet
    d.send(LeaderEpochChanged(7))
    assert d.persisted().state is S.MIRRORING
    d.take(o.AddFetcher)
    assert d.machine.may_append(7)


def test_machine_stopping_runs_d15_in_order_and_writable_only_after_stopped_is_stored():
    d = mirroring(epoch=3)
    for epoch in (2, 2, 3):
        d.log.append(Batch(d.log.end_offset, epoch, d.log.end_offset, 5, True))
    d.send(MirrorNameChanged("dr.stopped"))
    stopping = d.persisted()
    assert (stopping.state, stopping.last_mirror_epoch) == (S.STOPPING, -1)
    d.ack(o.RemoveFetcher)
    assert d.ack(o.PersistLastMirrorEpoch).last_mirror_epoch == 3  # D-09: the log's latest
    assert d.ack(o.RequestEpochBump).min_leader_epoch == 4
    d.send(LeaderEpochChanged(4))
    assert d.ack(o.AppendAbortMarkers).leader_epoch == 4
    assert d.ack(o.AppendMirrorPidReset).leader_epoch == 4
    stopped = d.take(o.PersistState)
    assert stopped.record.state is S.STOPPED and stopped.record.last_mirror_epoch == 3
    assert d.machine.access is o.WriteAccess.READ_ONLY
    d.send(OpCompleted(stopped.op))
    assert d.take(o.SetWriteAccess).access is o.WriteAccess.WRITABLE


def test_machine_resumed_stopping_keeps_its_recorded_lme():
    log = SimLog()
    log.append(Batch(0, 3, 0))
    log.append(Batch(1, 9, 1, kind="abort"))  # a marker the crashed run wrote at epoch 9
    d = Driver(PersistedState(S.STOPPING, S.MIRRORING, last_mirror_epoch=3), log=log, epoch=9)
    d.ack(o.RemoveFetcher)
    assert "PersistLastMirrorEpoch" not in d.kinds()
    assert d.ack(o.RequestEpochBump).min_leader_epoch == 4
    d.send(LeaderEpochChanged(10))
    d.ack(o.AppendAbortMarkers)
    d.ack(o.AppendMirrorPidReset)
    assert d.persisted().last_mirror_epoch == 3


def test_machine_stop_of_an_empty_log_appends_nothing():
    d = Driver(None, mirror_name="dr.stopped")
    assert d.machine.access is o.WriteAccess.LOADING or d.machine.access is o.WriteAccess.READ_ONLY
    assert d.persisted().state is S.STOPPING
    d.ack(o.RemoveFetcher)
    assert d.ack(o.PersistLastMirrorEpoch).last_mirror_epoch == -1
    d.ack(o.RequestEpochBump)
    d.send(LeaderEpochChanged(4))
    assert d.persisted().state is S.STOPPED
    assert d.machine.access is o.WriteAccess.WRITABLE


def test_machine_failed_retries_with_doubling_backoff_then_stays_failed():
    config = MachineConfig(failed_retry_backoff_ms=5_000, failed_max_retries=2)
    d = mirroring(config=config)
    waits = []
    for attempt in range(3):
        d.send(SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "cannot connect"))
        failed = d.persisted()
        assert failed.state is S.FAILED and failed.retry_attempt == attempt
        assert failed.reason == "MIRROR_SOURCE_UNAVAILABLE: cannot connect"
        poll = d.tick(0)
        if attempt == 2:
            assert poll.deadline is None  # retries exhausted: FAILED until the operator acts
            break
        waits.append(poll.deadline - d.now)
        d.tick(poll.deadline - d.now)
        retried = d.persisted()
        assert (retried.state, retried.retry_attempt) == (S.MIRRORING, attempt + 1)
        assert retried.reason == failed.reason  # kept through the retry
        d.take(o.AddFetcher)
    assert waits == [5_000, 10_000]
    d.send(RecoveryRequested())  # the operator's Start (D-13)
    record = d.persisted()
    assert (record.state, record.retry_attempt, record.reason) == (S.LOG_TRUNCATION, 0, None)


def test_machine_failed_bumps_move_to_failed_after_the_retries():
    d = mirroring(epoch=3, config=MachineConfig(failed_max_retries=1, retry_backoff_ms=10))
    d.send(MirroredEpochAhead(5))
    d.persisted()
    d.ack(o.RemoveFetcher)
    for _ in range(2):
        bump = d.take(o.RequestEpochBump)
        d.send(OpFailed(bump.op, ErrorCode.NOT_CONTROLLER))
        d.tick(10)
    failed = d.persisted()
    assert (failed.state, failed.previous_state) == (S.FAILED, S.EPOCH_FENCING)
    assert "BumpLeaderEpochs failed 2 times" in failed.reason


def test_machine_start_of_a_stopped_partition_is_read_only_before_its_write():
    d = Driver(PersistedState(S.STOPPED, S.STOPPING), mirror_name="dr.stopped")
    assert d.machine.access is o.WriteAccess.WRITABLE
    d.out.clear()
    d.send(MirrorNameChanged("dr"))
    assert d.kinds()[:2] == ["SetWriteAccess", "PersistState"]
    assert d.machine.access is o.WriteAccess.READ_ONLY


@pytest.mark.parametrize("field", ["failed_max_retries", "request_timeout_ms"])
def test_machine_config_refuses_negative_settings(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 0"):
        MachineConfig(**{field: -1})
