"""The fetcher framework's pure core (kcore.replica.fetch_state): requests, outputs, states.

Properties (hypothesis drives random sequences of responses and shell reports against a model):
a partition is in a request only while FETCHING; the fetch offset moves back only by an
explicit truncation or restart; a stale response (the partition changed since the request) is
ignored; the backoff after consecutive errors doubles up to its cap; every output names a
partition of the request.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.protocol.errors import ErrorCode
from kcore.replica.fetch_state import (
    AppendRecords,
    FetcherConfig,
    FetcherCore,
    FetchStatus,
    HandleOutOfRange,
    PartitionError,
    PartitionResponse,
    TruncateOnDivergence,
)

TID = uuid.UUID(int=7)
TP = ("t", 0)
RECORDS = b"\x00" * 70  # the core never looks inside


def _core(**config) -> FetcherCore:
    core = FetcherCore(FetcherConfig(backoff_s=0.1, backoff_max_s=0.8, **config))
    core.add_partition(TP, TID, 10, 3, 2)
    return core


def test_fetch_state_request_carries_offset_epochs_and_sizes():
    core = _core(partition_max_bytes=4096, isolation_level=1)
    plan = core.build_fetch(0.0)
    (req,) = plan.partitions
    assert (req.topic, req.partition, req.topic_id) == ("t", 0, TID)
    assert (req.fetch_offset, req.current_leader_epoch, req.last_fetched_epoch) == (10, 3, 2)
    assert req.partition_max_bytes == 4096 and plan.isolation_level == 1


def test_fetch_state_without_last_fetched_epoch_support_sends_none():
    # M-28: a leader without Fetch v12 gets no LastFetchedEpoch.
    core = _core(use_last_fetched_epoch=False)
    assert core.build_fetch(0.0).partitions[0].last_fetched_epoch == -1


def test_fetch_state_records_become_an_append_then_fetching_from_the_next_offset():
    core = _core()
    plan = core.build_fetch(0.0)
    resp = PartitionResponse(high_watermark=20, last_stable_offset=18, records=RECORDS)
    (out,) = core.handle_response(plan, {TP: resp}, 0.0)
    assert out == AppendRecords(TP, 10, RECORDS, 20, 18, -1)
    assert core.partitions[TP].status is FetchStatus.PENDING
    assert core.build_fetch(0.0) is None  # not fetched again before the append is done
    core.appended(TP, 15, 4)
    req = core.build_fetch(0.0).partitions[0]
    assert (req.fetch_offset, req.last_fetched_epoch) == (15, 4)


def test_fetch_state_diverging_epoch_asks_for_a_truncation():
    core = _core()
    plan = core.build_fetch(0.0)
    resp = PartitionResponse(diverging_epoch=(1, 7), records=RECORDS)
    assert core.handle_response(plan, {TP: resp}, 0.0) == [TruncateOnDivergence(TP, 1, 7)]
    assert core.partitions[TP].status is FetchStatus.TRUNCATING
    core.truncated(TP, 7, 1)
    req = core.build_fetch(0.0).partitions[0]
    assert (req.fetch_offset, req.last_fetched_epoch) == (7, 1)


def test_fetch_state_out_of_range_is_resolved_by_the_shell():
    core = _core()
    plan = core.build_fetch(0.0)
    resp = PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    assert core.handle_response(plan, {TP: resp}, 0.0) == [HandleOutOfRange(TP, 10)]
    core.restart_at(TP, 100)
    req = core.build_fetch(0.0).partitions[0]
    assert (req.fetch_offset, req.last_fetched_epoch) == (100, -1)


def test_fetch_state_leader_errors_back_off_and_ask_for_the_leader():
    core = _core()
    plan = core.build_fetch(0.0)
    resp = PartitionResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, current_leader=(2, 5))
    (out,) = core.handle_response(plan, {TP: resp}, 1.0)
    assert isinstance(out, PartitionError) and out.leader_change and out.current_leader == (2, 5)
    assert out.retry_at == pytest.approx(1.1)
    assert core.build_fetch(1.05) is None
    assert core.next_wakeup(1.05) == pytest.approx(1.1)
    assert core.build_fetch(1.1) is not None


def test_fetch_state_stale_response_is_ignored():
    core = _core()
    plan = core.build_fetch(0.0)
    core.add_partition(TP, TID, 50, 4, 3)  # re-added meanwhile
    resp = PartitionResponse(records=RECORDS)
    assert core.handle_response(plan, {TP: resp}, 0.0) == []
    assert core.partitions[TP].fetch_offset == 50


def test_fetch_state_response_to_a_fetch_made_before_a_remove_and_add_is_ignored():
    # Removed and added back (a leadership that ended and began again) while a fetch was out:
    # its answer belongs to the old partition state, not to the new one (no ABA on versions).
    core = _core()
    plan = core.build_fetch(0.0)
    core.remove_partition(TP)
    core.add_partition(TP, TID, 50, 4, 3)
    assert core.handle_response(plan, {TP: PartitionResponse(records=RECORDS)}, 0.0) == []
    assert core.partitions[TP].fetch_offset == 50


def test_fetch_state_hold_stops_fetching_until_resumed():
    core = _core()
    core.hold(TP)
    assert core.build_fetch(0.0) is None and core.next_wakeup(0.0) is None
    core.resume(TP)
    assert core.build_fetch(0.0) is not None


def test_fetch_state_append_cannot_move_the_offset_back():
    core = _core()
    with pytest.raises(ValueError, match="truncate instead"):
        core.appended(TP, 9, 3)


# -- properties -----------------------------------------------------------------------------

_RESPONSES = st.one_of(
    st.builds(lambda: PartitionResponse(records=RECORDS)),
    st.builds(lambda: PartitionResponse()),
    st.builds(
        lambda e, o: PartitionResponse(diverging_epoch=(e, o)),
        st.integers(0, 5),
        st.integers(0, 100),
    ),
    st.sampled_from(
        [
            PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE),
            PartitionResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER),
            PartitionResponse(error_code=ErrorCode.FENCED_LEADER_EPOCH),
            PartitionResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR),
            PartitionResponse(error_code=ErrorCode.KAFKA_STORAGE_ERROR),
        ]
    ),
)
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "respond", "stale", "report", "wait"]),
        _RESPONSES,
        st.integers(0, 50),
        st.floats(0, 2),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_STEPS)
def test_fetch_state_random_sequences_keep_the_invariants(steps):
    core = FetcherCore(FetcherConfig(backoff_s=0.1, backoff_max_s=0.8))
    tps = [("t", 0), ("t", 1), ("u", 0)]
    for i, tp in enumerate(tps):
        core.add_partition(tp, TID, 10 * i, 0, None)
    now = 0.0
    plan = None
    waiting: dict = {}  # tp -> the output the shell has yet to report on
    for action, resp, amount, dt in steps:
        if action == "wait":
            now += dt
        elif action == "fetch":
            plan = core.build_fetch(now)
            if plan is not None:
                for req in plan.partitions:
                    assert (
                        core.partitions[(req.topic, req.partition)].status is FetchStatus.FETCHING
                    )
        elif action in ("respond", "stale") and plan is not None:
            before = {tp: (s.fetch_offset, s.status) for tp, s in core.partitions.items()}
            if action == "stale":
                tp = (plan.partitions[0].topic, plan.partitions[0].partition)
                core.update_leader_epoch(tp, core.partitions[tp].current_leader_epoch + 1)
            outs = core.handle_response(
                plan, {(r.topic, r.partition): resp for r in plan.partitions}, now
            )
            asked = {(r.topic, r.partition) for r in plan.partitions}
            for out in outs:
                assert out.tp in asked
                assert before[out.tp][1] is FetchStatus.FETCHING
                state = core.partitions[out.tp]
                assert state.fetch_offset == before[out.tp][0]  # only the shell moves it
                if isinstance(out, PartitionError):
                    backoff = state.delayed_until - now
                    expected = min(0.1 * 2 ** (state.failures - 1), 0.8)
                    assert backoff == pytest.approx(expected)
            if action == "stale":
                assert all(o.tp != tp for o in outs)
            for out in outs:
                if isinstance(out, PartitionError):
                    assert core.partitions[out.tp].status is FetchStatus.DELAYED
                else:  # the shell owes a report on it before the partition fetches again
                    assert core.partitions[out.tp].status in (
                        FetchStatus.PENDING,
                        FetchStatus.TRUNCATING,
                    )
                    waiting[out.tp] = out
            plan = None
        elif action == "report" and waiting:
            out = waiting.pop(sorted(waiting)[amount % len(waiting)])
            state = core.partitions[out.tp]
            old = state.fetch_offset
            if isinstance(out, AppendRecords):
                core.appended(out.tp, old + amount, 1)
                assert core.partitions[out.tp].fetch_offset >= old
            elif isinstance(out, TruncateOnDivergence):
                core.truncated(out.tp, min(old, out.end_offset), out.epoch)
            elif isinstance(out, HandleOutOfRange):
                core.restart_at(out.tp, amount)
            assert core.partitions[out.tp].status is FetchStatus.FETCHING
        # Always: a DELAYED partition has a deadline; PENDING/TRUNCATING are never requested.
        for state in core.partitions.values():
            if state.status is FetchStatus.DELAYED:
                assert state.delayed_until > 0
