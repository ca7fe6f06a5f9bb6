"""The preferred read replica of KIP-392, one of Kafka's rules at a time (pure, no broker)."""

from __future__ import annotations

import pytest

from kcore.log.config import InvalidConfigError
from kcore.replica.isr import FollowerState, LeaderIsrState
from kcore.replica.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_REPLICA_SELECTOR,
    LeaderSelector,
    RackAwareReplicaSelector,
    build_replica_selector,
    preferred_read_replica,
    read_replica_candidates,
)

NOW = 100_000
RACKS = {1: "a", 2: "b", 3: "c", 4: "b"}


def follower(leo: int, *, start: int = 0, caught_up_ago: int = 0) -> FollowerState:
    return FollowerState(
        log_end_offset=leo, log_start_offset=start, last_caught_up_time_ms=NOW - caught_up_ago
    )


def choose(
    client_rack: str,
    followers: dict[int, FollowerState],
    *,
    isr=(1, 2, 3, 4),
    racks=RACKS,
    fetch_offset: int = 10,
    leader_leo: int = 20,
    selector=None,
) -> int | None:
    """The preferred read replica for a consumer in ``client_rack`` of a partition led by 1."""
    candidates, leader = read_replica_candidates(
        leader=1,
        leader_log_end_offset=leader_leo,
        isr=isr,
        followers=followers,
        racks=racks,
        fetch_offset=fetch_offset,
        now_ms=NOW,
    )
    chosen = RackAwareReplicaSelector() if selector is None else selector
    return preferred_read_replica(chosen, client_rack, candidates, leader)


def test_replica_selector_none_configured_means_the_leader_serves():
    candidates, leader = read_replica_candidates(
        leader=1,
        leader_log_end_offset=20,
        isr=(1, 2),
        followers={2: follower(20)},
        racks=RACKS,
        fetch_offset=10,
        now_ms=NOW,
    )
    assert preferred_read_replica(None, "b", candidates, leader) is None


def test_replica_selector_rack_aware_sends_a_consumer_to_the_follower_in_its_rack():
    assert choose("b", {2: follower(20), 3: follower(20)}) == 2
    assert choose("c", {2: follower(20), 3: follower(20)}) == 3


def test_replica_selector_rack_aware_keeps_a_consumer_without_a_rack_on_the_leader():
    assert choose("", {2: follower(20), 3: follower(20)}) is None


def test_replica_selector_rack_aware_keeps_the_leader_when_no_replica_is_in_the_rack():
    assert choose("z", {2: follower(20), 3: follower(20)}) is None


def test_replica_selector_rack_aware_prefers_the_leader_when_it_is_in_the_rack():
    # Node 4 shares rack a with the leader and has as much: the leader still wins.
    racks = {1: "a", 2: "b", 4: "a"}
    assert choose("a", {2: follower(20), 4: follower(20)}, racks=racks) is None


def test_replica_selector_rack_aware_picks_the_highest_log_end_offset_in_the_rack():
    assert choose("b", {2: follower(15), 4: follower(18)}) == 4
    assert choose("b", {2: follower(18), 4: follower(15)}) == 2


def test_replica_selector_rack_aware_breaks_a_tie_by_the_most_recently_caught_up():
    f = {2: follower(18, caught_up_ago=50), 4: follower(18, caught_up_ago=900)}
    assert choose("b", f) == 2
    f = {2: follower(18, caught_up_ago=900), 4: follower(18, caught_up_ago=50)}
    assert choose("b", f) == 4


def test_replica_selector_rack_aware_breaks_a_full_tie_by_the_highest_broker_id():
    assert choose("b", {2: follower(18), 4: follower(18)}) == 4


def test_replica_candidates_leave_out_followers_outside_the_isr():
    assert choose("b", {2: follower(20), 3: follower(20)}, isr=(1, 3)) is None


def test_replica_candidates_leave_out_followers_without_the_fetch_offset():
    # Its last fetch was at 9: it does not have offset 10 yet.
    assert choose("b", {2: follower(9)}, fetch_offset=10) is None
    assert choose("b", {2: follower(10)}, fetch_offset=10) == 2  # at its end: it has it


def test_replica_candidates_leave_out_followers_whose_log_starts_after_the_fetch_offset():
    assert choose("b", {2: follower(20, start=11)}, fetch_offset=10) is None
    assert choose("b", {2: follower(20, start=10)}, fetch_offset=10) == 2


def test_replica_candidates_leave_out_brokers_the_consumer_cannot_reach():
    # Not in ``racks``: fenced, or no endpoint on the consumer's listener.
    assert choose("b", {2: follower(20)}, racks={1: "a", 3: "c"}) is None


def test_replica_selector_leader_selector_always_answers_the_leader():
    assert choose("b", {2: follower(20)}, selector=LeaderSelector()) is None


def test_replica_selector_class_accepts_kafkas_selectors_and_unset():
    assert build_replica_selector(None) is None
    assert build_replica_selector("") is None
    assert isinstance(build_replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    assert isinstance(build_replica_selector(LEADER_SELECTOR), LeaderSelector)


def test_replica_selector_class_refuses_any_other_class():
    with pytest.raises(
        InvalidConfigError, match="replica.selector.class.*no such replica selector"
    ):
        build_replica_selector("com.example.ClosestReplicaSelector")


def test_isr_state_remembers_each_followers_log_start_offset():
    state = LeaderIsrState(1, (1, 2), (1, 2), leader_epoch=0, partition_epoch=0,
                           epoch_start_offset=0, now_ms=0)  # fmt: skip
    state.follower_fetched(2, 30, 30, now_ms=5, log_start_offset=7)
    assert state.followers[2].log_start_offset == 7
    assert state.followers[2].log_end_offset == 30
