"""The mirror partition machine's smaller rules, one at a time and with exact outputs: the
write guard per mode and leadership, retries and their backoffs (state reads, writes, epoch
bumps, fetcher removal), the reasons FAILED records, the events it ignores, and its config.
The D-14/D-15/D-11/D-13 sequences themselves are in test_machine.py."""

from __future__ import annotations

import pytest

from kcore.mirror import events as ev
from kcore.mirror import outputs as o
from kcore.mirror.machine import MachineConfig, MirrorPartitionMachine
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol.errors import ErrorCode

from .simulation import Batch, SimLog
from .test_machine import NOW, Driver, mirroring

S = MirrorPartitionState
A = o.WriteAccess


def kinds(outputs):
    return [type(x).__name__ for x in outputs if not isinstance(x, o.Transitioned)]


def test_machine_config_allows_zero_but_not_a_zero_request_timeout():
    MachineConfig(
        failed_retry_backoff_ms=0,
        failed_retry_backoff_max_ms=0,
        failed_max_retries=0,
        retry_backoff_ms=0,
        retry_backoff_max_ms=0,
    )
    with pytest.raises(ValueError, match=r"^request_timeout_ms must be > 0$"):
        MachineConfig(request_timeout_ms=0)


def test_machine_config_backoffs_double_up_to_their_caps():
    c = MachineConfig(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    assert [c.retry_backoff(n) for n in (1, 2, 3, 4, 5, 60)] == [100, 200, 400, 800, 1_000, 1_000]
    f = MachineConfig(failed_retry_backoff_ms=5_000, failed_retry_backoff_max_ms=300_000)
    assert [f.failed_backoff_ms(n) for n in (0, 1, 5, 6, 60)] == [
        5_000,
        10_000,
        160_000,
        300_000,
        300_000,
    ]


# -- the write guard and leadership ------------------------------------------------------------


def test_machine_normal_topic_is_writable_and_reads_no_state():
    m = MirrorPartitionMachine("orders", 0, SimLog(), mirror_name=None, now=NOW)
    m.handle(ev.BecameLeader(3), NOW)
    assert m.poll(NOW).outputs == [o.SetWriteAccess(A.WRITABLE)]
    assert (m.access, m.leader_epoch, m.is_leader) == (A.WRITABLE, 3, True)


@pytest.mark.parametrize(
    "mirror_name, stored, before, after",
    [
        ("dr.stopped", ev.PersistedState(S.STOPPED, S.STOPPING), A.LOADING, A.WRITABLE),
        ("dr", ev.PersistedState(S.PAUSED, S.PAUSING), A.READ_ONLY, A.READ_ONLY),
        ("dr.paused", ev.PersistedState(S.PAUSED, S.PAUSING), A.READ_ONLY, A.READ_ONLY),
    ],
)
def test_machine_write_guard_while_loading_and_once_loaded(mirror_name, stored, before, after):
    m = MirrorPartitionMachine("orders", 0, SimLog(), mirror_name=mirror_name, now=NOW)
    m.handle(ev.BecameLeader(3), NOW)
    out = m.poll(NOW).outputs
    assert kinds(out) == ["SetWriteAccess", "ReadState"] and out[0].access is before
    m.handle(ev.StateLoaded(out[1].op, stored), NOW)
    m.poll(NOW)
    assert m.access is after


def test_machine_config_removed_under_mirroring_stops_and_only_then_is_writable():
    d = mirroring(epoch=3)
    d.send(ev.MirrorNameChanged(None))
    assert d.persisted().state is S.STOPPING
    assert d.machine.access is A.READ_ONLY
    d.ack(o.RemoveFetcher)
    d.ack(o.PersistLastMirrorEpoch)
    d.ack(o.RequestEpochBump)
    d.send(ev.LeaderEpochChanged(4))
    stopped = d.take(o.PersistState)
    assert stopped.record.state is S.STOPPED and d.machine.access is A.READ_ONLY
    d.send(ev.OpCompleted(stopped.op))
    assert d.machine.access is A.WRITABLE


def test_machine_source_topic_deleted_stops_the_partition():
    d = mirroring(epoch=3)
    d.send(ev.SourceTopicDeleted())
    assert d.persisted().state is S.STOPPING


def test_machine_a_repeated_leadership_keeps_the_highest_epoch():
    d = mirroring(epoch=3)
    d.out.clear()
    d.send(ev.BecameLeader(5))
    assert d.machine.leader_epoch == 5 and d.kinds() == []
    d.send(ev.BecameLeader(4))
    assert d.machine.leader_epoch == 5
    assert d.machine.may_append(5) and not d.machine.may_append(6)


def test_machine_losing_leadership_removes_the_fetcher_and_guards_the_log():
    d = mirroring(epoch=3)
    d.out.clear()
    d.send(ev.StoppedBeingLeader())
    assert d.kinds() == ["RemoveFetcher", "SetWriteAccess"]
    assert d.machine.access is A.LOADING and not d.machine.is_leader
    assert not d.machine.may_append(3) and not d.machine.loaded
    d.out.clear()
    d.send(ev.StoppedBeingLeader())  # already not the leader: nothing more
    assert d.kinds() == []


def test_machine_moved_to_another_mirror_reads_that_mirrors_state():
    d = mirroring(epoch=3)
    d.out.clear()
    d.send(ev.MirrorNameChanged("other"))
    assert d.kinds() == ["RemoveFetcher", "SetWriteAccess", "SetWriteAccess", "ReadState"]
    assert (d.machine.mirror, d.machine.loaded, d.machine.access) == ("other", False, A.READ_ONLY)
    d.out.clear()
    d.send(ev.MirrorNameChanged("other.paused"))  # the same mirror: no new read while loading
    assert d.kinds() == []


# -- retries -----------------------------------------------------------------------------------


def test_machine_failed_state_read_is_retried_with_doubling_backoff():
    m = MirrorPartitionMachine("orders", 0, SimLog(), mirror_name="dr", now=NOW)
    m.handle(ev.BecameLeader(3), NOW)
    read = [x for x in m.poll(NOW).outputs if isinstance(x, o.ReadState)][0]
    now = NOW
    for wait in (100, 200):
        m.handle(ev.OpFailed(read.op, ErrorCode.COORDINATOR_NOT_AVAILABLE), now)
        poll = m.poll(now)
        assert kinds(poll.outputs) == [] and poll.deadline == now + wait
        assert kinds(m.poll(now + wait - 1).outputs) == []
        now += wait
        out = m.poll(now).outputs
        assert kinds(out) == ["ReadState"] and out[0].op != read.op
        read = out[0]
    m.handle(ev.StateLoaded(read.op, None), now)
    assert m.loaded


def test_machine_failed_write_is_sent_again_with_doubling_backoff():
    d = Driver(None)
    write = d.take(o.PersistState)
    for wait in (100, 200, 400):
        poll = d.send(ev.OpFailed(write.op, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        assert poll.deadline == d.now + wait and "PersistState" not in d.kinds()
        d.tick(wait - 1)
        assert "PersistState" not in d.kinds()
        d.tick(1)
        again = d.take(o.PersistState)
        assert again.record == write.record and again.op != write.op
        write = again


def test_machine_failed_fetcher_removal_is_tried_again_at_once():
    d = mirroring(epoch=3)
    d.send(ev.MirrorNameChanged("dr.paused"))
    assert d.persisted().state is S.PAUSING
    remove = d.take(o.RemoveFetcher)
    d.send(ev.OpFailed(remove.op, ErrorCode.UNKNOWN_SERVER_ERROR))
    again = d.take(o.RemoveFetcher)
    assert again.op != remove.op
    d.send(ev.OpCompleted(again.op))
    assert d.persisted().state is S.PAUSED


def test_machine_failed_epoch_bump_waits_its_backoff_before_asking_again():
    d = mirroring(epoch=3, config=MachineConfig(retry_backoff_ms=100))
    d.send(ev.MirroredEpochAhead(5))
    d.persisted()
    d.ack(o.RemoveFetcher)
    bump = d.take(o.RequestEpochBump)
    d.send(ev.OpFailed(bump.op, ErrorCode.NOT_CONTROLLER))
    d.tick(99)
    assert "RequestEpochBump" not in d.kinds()
    d.tick(1)
    assert d.take(o.RequestEpochBump).min_leader_epoch == 5


# -- what FAILED records -----------------------------------------------------------------------


def start(**kw) -> Driver:
    """A first start, its LOG_TRUNCATION in effect and the source's LME asked for."""
    d = Driver(None, **kw)
    assert d.persisted().state is S.LOG_TRUNCATION
    return d


@pytest.mark.parametrize(
    "fail, reason",
    [
        (
            lambda d: ev.OpFailed(
                d.take(o.FetchLastMirrorEpoch).op, ErrorCode.NETWORK_EXCEPTION, "down"
            ),
            "reading the last mirror epoch from the source failed: NETWORK_EXCEPTION: down",
        ),
        (
            lambda d: ev.OpFailed(d.take(o.FetchLastMirrorEpoch).op, ErrorCode.NETWORK_EXCEPTION),
            "reading the last mirror epoch from the source failed: NETWORK_EXCEPTION",
        ),
    ],
    ids=["with-message", "without-message"],
)
def test_machine_failed_records_why_the_lme_read_failed(fail, reason):
    d = start()
    d.send(fail(d))
    failed = d.persisted()
    assert (failed.state, failed.previous_state, failed.reason) == (
        S.FAILED,
        S.LOG_TRUNCATION,
        reason,
    )


def test_machine_failed_records_a_failed_truncation():
    d = start()
    lme = d.take(o.FetchLastMirrorEpoch)
    d.send(ev.LastMirrorEpochFetched(lme.op, -1, source_log_start_offset=0))
    cut = d.take(o.TruncateFullyAndStartAt)
    d.send(ev.OpFailed(cut.op, ErrorCode.KAFKA_STORAGE_ERROR, "disk: "))
    assert d.persisted().reason == "truncating the log failed: KAFKA_STORAGE_ERROR: disk"


def test_machine_unanswered_op_fails_as_timed_out():
    d = start(config=MachineConfig(request_timeout_ms=1_000))
    d.take(o.FetchLastMirrorEpoch)
    d.tick(1_000)
    assert d.persisted().reason == (
        "reading the last mirror epoch from the source failed: REQUEST_TIMED_OUT: no answer"
    )


def failed_stop(config=None) -> Driver:
    """A stop whose abort markers failed: FAILED with STOPPING before it, LME 3 recorded."""
    d = mirroring(epoch=3, config=config or MachineConfig(failed_retry_backoff_ms=1_000))
    d.log.append(Batch(d.log.end_offset, 3, d.log.end_offset))
    d.send(ev.MirrorNameChanged("dr.stopped"))
    d.persisted()
    d.ack(o.RemoveFetcher)
    d.ack(o.PersistLastMirrorEpoch)
    d.ack(o.RequestEpochBump)
    d.send(ev.LeaderEpochChanged(4))
    append = d.take(o.AppendAbortMarkers)
    d.send(ev.OpFailed(append.op, ErrorCode.KAFKA_STORAGE_ERROR))
    failed = d.persisted()
    assert (failed.state, failed.previous_state, failed.last_mirror_epoch) == (
        S.FAILED,
        S.STOPPING,
        3,
    )
    assert failed.reason == "appending the STOPPING control records failed: KAFKA_STORAGE_ERROR"
    return d


def test_machine_failed_stop_retries_the_same_stop_after_its_backoff():
    d = failed_stop()
    d.tick(999)
    assert "PersistState" not in d.kinds()
    d.tick(1)
    again = d.persisted()
    assert (again.state, again.retry_attempt, again.last_mirror_epoch) == (S.STOPPING, 1, 3)
    assert again.reason.startswith("appending the STOPPING control records failed")
    d.ack(o.RemoveFetcher)
    assert "PersistLastMirrorEpoch" not in d.kinds()  # the LME of this stop is kept
    assert d.ack(o.RequestEpochBump).min_leader_epoch == 4


def test_machine_failed_stop_operator_stop_resumes_it_with_a_fresh_count():
    d = failed_stop()
    d.send(ev.RecoveryRequested())
    again = d.persisted()
    assert (again.state, again.retry_attempt, again.last_mirror_epoch) == (S.STOPPING, 0, 3)
    assert again.reason is None


def test_machine_failed_mirroring_stopped_by_the_operator_stops_afresh():
    d = mirroring(epoch=3)
    d.send(ev.SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "gone"))
    assert d.persisted().state is S.FAILED
    d.send(ev.MirrorNameChanged("dr.stopped"))
    stop = d.persisted()
    assert (stop.state, stop.retry_attempt, stop.last_mirror_epoch, stop.reason) == (
        S.STOPPING,
        0,
        -1,
        None,
    )


# -- events that change nothing ----------------------------------------------------------------


def test_machine_epoch_ahead_is_only_acted_on_while_mirroring_and_when_really_ahead():
    d = mirroring(epoch=3)
    d.out.clear()
    d.send(ev.MirroredEpochAhead(3))  # covered by the partition's own epoch
    assert d.machine.state is S.MIRRORING and d.kinds() == []
    d.send(ev.MirrorNameChanged("dr.paused"))
    d.persisted()
    d.ack(o.RemoveFetcher)
    assert d.persisted().state is S.PAUSED
    d.out.clear()
    d.send(ev.MirroredEpochAhead(9))  # a late report after the fetcher left
    assert d.machine.state is S.PAUSED and d.kinds() == []


# -- epoch bumps -------------------------------------------------------------------------------


def test_machine_fencing_already_covered_by_a_leader_change_sends_no_bump():
    d = mirroring(epoch=3)
    d.send(ev.MirroredEpochAhead(5))
    assert d.persisted().state is S.EPOCH_FENCING
    d.send(ev.LeaderEpochChanged(5))  # a new leadership reached epoch 5 meanwhile
    d.ack(o.RemoveFetcher)
    assert "RequestEpochBump" not in d.kinds()
    assert d.persisted().state is S.MIRRORING


def test_machine_stop_bump_waits_for_a_newer_epoch_even_when_the_current_one_suffices():
    # D-15: the markers go at a new epoch, even when the current one is above LME + 1.
    d = mirroring(epoch=5)
    d.log.append(Batch(d.log.end_offset, 2, d.log.end_offset))
    d.send(ev.MirrorNameChanged("dr.stopped"))
    d.persisted()
    d.ack(o.RemoveFetcher)
    assert d.ack(o.PersistLastMirrorEpoch).last_mirror_epoch == 2
    assert d.ack(o.RequestEpochBump).min_leader_epoch == 3
    assert "AppendAbortMarkers" not in d.kinds()  # accepted, not yet in the metadata
    d.send(ev.LeaderEpochChanged(5))  # the epoch it already had: not the bump
    assert "AppendAbortMarkers" not in d.kinds()
    d.send(ev.LeaderEpochChanged(6))
    assert d.take(o.AppendAbortMarkers).leader_epoch == 6


# -- more rules the first mutation run found untested ------------------------------------------


def test_machine_normal_topic_made_a_mirror_topic_is_read_only_at_once_then_loads():
    m = MirrorPartitionMachine("orders", 0, SimLog(), mirror_name=None, now=NOW)
    m.handle(ev.BecameLeader(3), NOW)
    m.poll(NOW)
    m.handle(ev.MirrorNameChanged("dr"), NOW)
    out = m.poll(NOW).outputs
    assert kinds(out) == ["SetWriteAccess", "ReadState"] and out[0].access is A.READ_ONLY
    assert m.mirror == "dr"


def test_machine_config_removed_keeps_the_mirror_name_it_had():
    d = mirroring(epoch=3)
    d.send(ev.MirrorNameChanged(None))
    assert d.machine.mirror == "dr"


def test_machine_moved_to_another_mirror_keeps_its_leader_epoch():
    d = mirroring(epoch=3)
    d.send(ev.MirrorNameChanged("other"))
    read = d.take(o.ReadState)
    d.send(ev.StateLoaded(read.op, ev.PersistedState(S.PAUSED, S.PAUSING)))
    assert d.machine.leader_epoch == 3 and d.machine.loaded


def test_machine_truncation_goes_to_mirroring_when_the_source_epoch_is_not_ahead():
    for source_epoch, then in [(3, S.MIRRORING), (4, S.EPOCH_FENCING)]:
        d = start(epoch=3)
        lme = d.take(o.FetchLastMirrorEpoch)
        d.send(ev.LastMirrorEpochFetched(lme.op, -1, 0, source_leader_epoch=source_epoch))
        d.ack(o.TruncateFullyAndStartAt)
        assert d.persisted().state is then, source_epoch


def test_machine_resumed_stop_with_lme_zero_keeps_it():
    log = SimLog()
    log.append(Batch(0, 0, 0))
    d = Driver(ev.PersistedState(S.STOPPING, S.MIRRORING, last_mirror_epoch=0), log=log, epoch=4)
    d.ack(o.RemoveFetcher)
    assert "PersistLastMirrorEpoch" not in d.kinds()
    assert d.ack(o.RequestEpochBump).min_leader_epoch == 1
    d.send(ev.LeaderEpochChanged(5))
    assert d.take(o.AppendAbortMarkers).leader_epoch == 5  # LME 0: the log has batches


def test_machine_recovery_from_failed_mirroring_removes_no_fetcher_twice():
    d = mirroring(epoch=3)
    d.send(ev.SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "gone"))
    assert d.persisted().state is S.FAILED
    assert d.kinds().count("RemoveFetcher") == 1  # the FAILED state's own
    d.out.clear()
    d.send(ev.RecoveryRequested())
    assert d.persisted().state is S.LOG_TRUNCATION
    assert "RemoveFetcher" not in d.kinds()


@pytest.mark.parametrize("healthy_ms, attempt", [(9_999, 2), (10_000, 0)])
def test_machine_retry_count_restarts_after_a_long_enough_healthy_run(healthy_ms, attempt):
    config = MachineConfig(failed_retry_backoff_ms=1_000, failed_retry_backoff_max_ms=10_000)
    d = mirroring(config=config)
    d.send(ev.SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "a"))
    assert d.persisted().retry_attempt == 0
    d.tick(1_000)
    assert d.persisted().state is S.MIRRORING  # retry 1, at this moment
    d.take(o.AddFetcher)
    d.send(ev.SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "b"), after_ms=healthy_ms)
    failed = d.persisted()
    assert (failed.state, failed.retry_attempt) == (S.FAILED, 1 if attempt else 0)
    if attempt:
        d.tick(2_000)  # the second retry waits twice as long
        assert d.persisted().retry_attempt == attempt


def test_machine_ignores_answers_to_ops_it_no_longer_waits_for():
    d = start(config=MachineConfig(request_timeout_ms=1_000))
    lme = d.take(o.FetchLastMirrorEpoch)
    d.tick(1_000)  # timed out: FAILED is being written
    write = d.take(o.PersistState)
    d.send(ev.LastMirrorEpochFetched(lme.op, 2, 0))  # the late answer
    d.send(ev.LastMirrorEpochFetched(write.op, 2, 0))  # an answer naming the write's op
    d.send(ev.StateLoaded(write.op, None))
    assert "TruncateTo" not in d.kinds() and d.machine.state is S.LOG_TRUNCATION
    d.send(ev.OpCompleted(write.op))
    assert d.machine.state is S.FAILED


def test_machine_refuses_what_is_not_an_event():
    d = mirroring()
    with pytest.raises(TypeError, match="^not a mirror partition event: 'x'$"):
        d.machine.handle("x", NOW)


def test_machine_loaded_record_keeps_its_previous_state_and_reason():
    stored = ev.PersistedState(S.FAILED, S.MIRRORING, 2, 5, "MIRROR_SOURCE_UNAVAILABLE: x")
    d = Driver(stored, config=MachineConfig(failed_max_retries=2))
    assert d.machine.record == stored  # what Describe shows (D-13)


def test_machine_loaded_truncation_after_mirroring_resumes_without_asking_the_lme():
    log = SimLog()
    log.append(Batch(0, 0, 0))
    d = Driver(ev.PersistedState(S.LOG_TRUNCATION, S.MIRRORING), log=log, epoch=0)
    assert "FetchLastMirrorEpoch" not in d.kinds()
    assert d.ack(o.TruncateTo).offset == 1
    assert d.persisted().state is S.MIRRORING  # epoch 0 everywhere: nothing to fence


def test_machine_first_start_at_epoch_zero_removes_nothing_and_does_not_fence():
    d = start(epoch=0)
    assert "RemoveFetcher" not in d.kinds()
    lme = d.take(o.FetchLastMirrorEpoch)
    d.send(ev.LastMirrorEpochFetched(lme.op, -1, 0))  # no source epoch known
    d.ack(o.TruncateFullyAndStartAt)
    assert d.persisted().state is S.MIRRORING
    assert d.take(o.AddFetcher).fetch_offset == 0


def test_machine_paused_partition_losing_leadership_has_no_fetcher_to_remove():
    d = mirroring(epoch=3)
    d.send(ev.MirrorNameChanged("dr.paused"))
    d.persisted()
    d.ack(o.RemoveFetcher)
    assert d.persisted().state is S.PAUSED
    d.out.clear()
    d.send(ev.StoppedBeingLeader())
    assert d.kinds() == ["SetWriteAccess"]


def test_machine_stop_during_fencing_forgets_the_fencing_ops():
    d = mirroring(epoch=3)
    d.send(ev.MirroredEpochAhead(5))
    d.persisted()
    old = d.take(o.RemoveFetcher)  # EPOCH_FENCING's removal, not answered yet
    d.send(ev.MirrorNameChanged("dr.stopped"))
    assert d.persisted().state is S.STOPPING
    new = d.take(o.RemoveFetcher)  # STOPPING's own, sent at once
    d.send(ev.OpCompleted(old.op))  # the late answer of the old one: ignored
    assert "PersistLastMirrorEpoch" not in d.kinds()
    d.send(ev.OpCompleted(new.op))
    assert d.take(o.PersistLastMirrorEpoch).last_mirror_epoch == -1
