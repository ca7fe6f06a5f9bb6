"""The leader's follower and ISR state (kcore.replica.isr): Kafka's rules, and properties over
random runs of appends, follower fetches, lag checks and controller answers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.replica.isr import LeaderIsrState

LAG_MS = 10_000


def leader_state(isr=(1, 2, 3), *, start=0, now=0) -> LeaderIsrState:
    return LeaderIsrState(
        1, (1, 2, 3), isr, leader_epoch=5, partition_epoch=7, epoch_start_offset=start, now_ms=now
    )


def test_high_watermark_is_the_smallest_log_end_offset_of_the_isr():
    s = leader_state()
    assert s.high_watermark(10) == -1  # the followers have not fetched in this epoch yet
    s.follower_fetched(2, 10, 10, now_ms=1)
    assert s.high_watermark(10) == -1
    s.follower_fetched(3, 4, 10, now_ms=1)
    assert s.high_watermark(10) == 4
    s.follower_fetched(3, 10, 10, now_ms=2)
    assert s.high_watermark(12) == 10


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark_back():
    s = leader_state(isr=(1, 2))
    s.follower_fetched(2, 8, 8, now_ms=1)
    s.follower_fetched(3, 0, 8, now_ms=1)
    assert s.high_watermark(8) == 8


def test_a_truncation_is_had_by_every_isr_member_fetching_at_the_new_log_end():
    # M-38's wait (the cluster mirror's LOG_TRUNCATION): the leader cut its log to 6.
    s = leader_state()
    assert "[2, 3]" in s.missing_truncation(6, -1, all_replicas=False, min_isr=2)
    s.follower_fetched(2, 6, 6, now_ms=1)
    s.follower_fetched(3, 9, 6, now_ms=1)  # still above the cut (answered with divergence)
    assert "[3]" in s.missing_truncation(6, -1, all_replicas=False, min_isr=2)
    s.follower_fetched(3, 6, 6, now_ms=2)
    assert s.missing_truncation(6, -1, all_replicas=False, min_isr=2) is None
    # After a full truncation only fetches after it count.
    assert "[2]" in s.missing_truncation(6, 1, all_replicas=False, min_isr=2)


def test_a_truncation_waits_for_min_isr_and_for_all_replicas_under_unclean_election():
    s = leader_state(isr=(1, 2))
    s.follower_fetched(2, 6, 6, now_ms=1)
    assert s.missing_truncation(6, -1, all_replicas=False, min_isr=2) is None
    # mirror.support.unclean.leader.election: the replica outside the ISR too.
    assert "[3]" in s.missing_truncation(6, -1, all_replicas=True, min_isr=2)
    s.follower_fetched(3, 6, 6, now_ms=1)
    assert s.missing_truncation(6, -1, all_replicas=True, min_isr=2) is None
    # Fewer in sync than min.insync.replicas: refused, whatever the followers have.
    why = s.missing_truncation(6, -1, all_replicas=False, min_isr=3)
    assert "fewer than min.insync.replicas (3)" in why
    # A partition with fewer replicas than min.insync.replicas needs all of them.
    alone = LeaderIsrState(1, (1,), (1,), leader_epoch=0, partition_epoch=0,
                           epoch_start_offset=0, now_ms=0)  # fmt: skip
    assert alone.missing_truncation(0, -1, all_replicas=False, min_isr=2) is None


def test_a_follower_that_stops_fetching_is_shrunk_after_the_lag_time():
    s = leader_state()
    s.follower_fetched(2, 5, 5, now_ms=0)
    s.follower_fetched(3, 5, 5, now_ms=0)
    assert s.maybe_shrink(5, now_ms=LAG_MS, lag_ms=LAG_MS) is None  # not yet
    s.follower_fetched(2, 9, 9, now_ms=LAG_MS)
    change = s.maybe_shrink(9, now_ms=LAG_MS + 1, lag_ms=LAG_MS)
    assert change is not None and change.new_isr == (1, 2)
    assert (change.leader_epoch, change.partition_epoch) == (5, 7)
    # While the change is in flight the leaving follower still counts for the HW.
    assert s.maximal_isr == (1, 2, 3)
    assert s.high_watermark(9) == 5
    s.committed((1, 2), partition_epoch=8)
    assert s.isr == (1, 2) and s.pending is None
    assert s.high_watermark(9) == 9


def test_a_follower_fetching_but_never_reaching_the_end_falls_out():
    s = leader_state(isr=(1, 2))
    leo = 100
    for t in range(0, 3 * LAG_MS, 1000):
        leo += 50
        s.follower_fetched(2, leo - 200, leo, now_ms=t)  # always 200 behind a growing log
    assert s.maybe_shrink(leo, now_ms=3 * LAG_MS, lag_ms=LAG_MS).new_isr == (1,)


def test_a_follower_that_reaches_the_end_it_saw_last_time_stays_caught_up():
    s = leader_state(isr=(1, 2))
    leo = 100
    for t in range(0, 3 * LAG_MS, 1000):
        s.follower_fetched(2, leo, leo + 10, now_ms=t)  # it has what the leader had before
        leo += 10
    assert s.maybe_shrink(leo, now_ms=3 * LAG_MS, lag_ms=LAG_MS) is None


def test_expansion_needs_the_high_watermark_and_the_epoch_start_offset():
    s = leader_state(isr=(1, 2), start=50)
    s.follower_fetched(2, 60, 60, now_ms=0)
    s.follower_fetched(3, 40, 60, now_ms=0)
    assert s.maybe_expand(3, high_watermark=60) is None
    s.follower_fetched(3, 55, 60, now_ms=1)
    assert s.maybe_expand(3, high_watermark=55) is not None  # at the HW and past 50
    s.failed(s.pending)
    s.follower_fetched(3, 45, 60, now_ms=2)
    assert s.maybe_expand(3, high_watermark=45) is None  # below this epoch's start
    s.follower_fetched(3, 60, 60, now_ms=3)
    change = s.maybe_expand(3, high_watermark=60)
    assert change.new_isr == (1, 2, 3) and s.maximal_isr == (1, 2, 3)


def test_one_change_in_flight_and_stale_answers_ignored():
    s = leader_state(isr=(1, 2))
    s.follower_fetched(3, 0, 0, now_ms=0)
    change = s.maybe_expand(3, high_watermark=0)
    assert change is not None
    assert s.maybe_expand(3, high_watermark=0) is None
    assert s.maybe_shrink(0, now_ms=10 * LAG_MS, lag_ms=LAG_MS) is None
    s.committed((1, 2, 3), partition_epoch=8)
    s.committed((1, 2), partition_epoch=7)  # a late answer of an older state
    assert s.isr == (1, 2, 3) and s.partition_epoch == 8


def test_metadata_at_the_epoch_a_change_was_proposed_at_keeps_it_in_flight():
    """The controller answered a shrink (partition epoch 8), the leader proposed an expansion
    on it, and then the metadata of epoch 8 arrived (it travels apart from the answer): the
    expansion is still in flight, so the joining follower still holds the HW back. Dropping
    it there let the HW pass the follower, which the controller then added to the ISR
    without the records below the HW (found by tests/replica/test_replication_simulation.py)."""
    s = leader_state(isr=(1, 2))
    s.follower_fetched(2, 10, 10, now_ms=0)
    s.follower_fetched(3, 10, 10, now_ms=0)
    change = s.maybe_expand(3, high_watermark=10)
    s.committed((1, 2), partition_epoch=7)  # the metadata of the state it was built on
    assert s.pending is change and s.maximal_isr == (1, 2, 3)
    s.follower_fetched(2, 14, 14, now_ms=1)  # the leader appended to 14; 3 has not fetched
    assert s.high_watermark(14) == 10
    s.committed((1, 2), partition_epoch=8)  # a newer state (the controller moved on): dropped
    assert s.pending is None and s.high_watermark(14) == 14


def test_the_leader_is_never_proposed_out_of_the_isr():
    s = leader_state()
    change = s.maybe_shrink(0, now_ms=2 * LAG_MS, lag_ms=LAG_MS)
    assert change.new_isr == (1,)
    s.committed((2,), partition_epoch=9)  # even a committed state names the leader
    assert 1 in s.isr


# -- properties ------------------------------------------------------------------------------

step = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 20)),
    st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.integers(0, 30)),
    st.tuples(st.just("tick"), st.integers(0, LAG_MS)),
    st.tuples(st.just("shrink")),
    st.tuples(st.just("answer"), st.booleans()),
    st.tuples(st.just("metadata")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=80))
def test_high_watermark_never_decreases_nor_passes_an_isr_member(steps):
    """A leader's run: appends, follower fetches (each follower's position only moves up and
    never past the leader's end), time, lag checks and the controller's answers (accepted or
    refused, in the order proposed: the controller accepts a change only at its own partition
    epoch) and the metadata, which repeats the controller's state apart from the answers. The
    HW kept as the partition keeps it (never moved back) never decreases, is never above the
    log end offset of any member of the ISR (committed or maximal, the leader's or the
    controller's), and the leader is in every ISR, proposed or committed."""
    s = leader_state(start=0)
    leo, hw, now, epoch = 0, 0, 0, 7
    positions = {2: 0, 3: 0}
    controller_isr = (1, 2, 3)
    inflight = []  # the changes sent, as the controller will see them
    for op in steps:
        kind = op[0]
        if kind == "append":
            leo += op[1]
        elif kind == "fetch":
            replica = op[1]
            positions[replica] = min(leo, positions[replica] + op[2])
            s.follower_fetched(replica, positions[replica], leo, now_ms=now)
            s.maybe_expand(replica, hw)
        elif kind == "tick":
            now += op[1]
        elif kind == "shrink":
            s.maybe_shrink(leo, now_ms=now, lag_ms=LAG_MS)
        elif kind == "metadata":
            s.committed(controller_isr, epoch)
        elif inflight:
            change = inflight.pop(0)
            if op[1] and change.partition_epoch == epoch:
                epoch += 1
                controller_isr = change.new_isr
                s.committed(change.new_isr, epoch)
            else:
                s.failed(change)
        if s.pending is not None and s.pending not in inflight:
            inflight.append(s.pending)
        new_hw = max(hw, s.high_watermark(leo))
        assert new_hw >= hw
        hw = new_hw
        ends = {1: leo, **positions}
        assert 1 in s.isr and 1 in s.maximal_isr
        if s.pending is not None:
            assert 1 in s.pending.new_isr
        for member in {*s.maximal_isr, *controller_isr}:
            assert hw <= ends[member], (member, hw, ends)
