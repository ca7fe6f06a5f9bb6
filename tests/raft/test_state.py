"""The transition table: every legal transition passes, everything else raises."""

from __future__ import annotations

import itertools

import pytest

from kcore.raft.state import (
    OBSERVER_ROLES,
    TRANSITIONS,
    ElectionState,
    EpochRule,
    IllegalTransition,
    QuorumRole,
    check_transition,
    initial_state,
)

R = QuorumRole

# For each rule, an epoch pair it allows and one it forbids (from epoch 5).
ALLOWED = {
    EpochRule.SAME: [5],
    EpochRule.HIGHER: [6, 9],
    EpochRule.SAME_OR_HIGHER: [5, 6],
    EpochRule.NEXT: [6],
}
FORBIDDEN = {
    EpochRule.SAME: [4, 6],
    EpochRule.HIGHER: [4, 5],
    EpochRule.SAME_OR_HIGHER: [4],
    EpochRule.NEXT: [5, 7, 4],
}


@pytest.mark.parametrize("pair", sorted(TRANSITIONS, key=lambda p: (p[0].value, p[1].value)))
def test_state_table_allows_each_listed_transition_with_its_epoch_rule(pair):
    old, new = pair
    row = TRANSITIONS[pair]
    for epoch in ALLOWED[row.epoch]:
        assert check_transition(old, new, 5, epoch, is_voter=True) is row
    for epoch in FORBIDDEN[row.epoch]:
        with pytest.raises(IllegalTransition, match="needs"):
            check_transition(old, new, 5, epoch, is_voter=True)


UNLISTED = [p for p in itertools.product(R, R) if p not in TRANSITIONS]


@pytest.mark.parametrize("pair", UNLISTED, ids=lambda p: f"{p[0].value}->{p[1].value}")
def test_state_table_refuses_every_unlisted_transition(pair):
    old, new = pair
    for epoch in (5, 6):
        with pytest.raises(IllegalTransition, match="no transition"):
            check_transition(old, new, 5, epoch, is_voter=True)


def test_state_table_has_the_kraft_shape():
    # A few rows that carry the protocol's safety, spelled out.
    assert (R.FOLLOWER, R.CANDIDATE) not in TRANSITIONS  # pre-vote always comes first
    assert (R.VOTED, R.VOTED) not in TRANSITIONS  # one vote per epoch
    assert (R.LEADER, R.LEADER) not in TRANSITIONS
    assert (R.RESIGNED, R.LEADER) not in TRANSITIONS
    assert TRANSITIONS[(R.PROSPECTIVE, R.CANDIDATE)].epoch is EpochRule.NEXT
    assert TRANSITIONS[(R.CANDIDATE, R.LEADER)].epoch is EpochRule.SAME
    # Every role can be left for a higher epoch (by learning of it).
    for role in R:
        assert any(
            old is role and row.epoch in (EpochRule.HIGHER, EpochRule.SAME_OR_HIGHER)
            for (old, _new), row in TRANSITIONS.items()
        ), role


@pytest.mark.parametrize("role", sorted(set(R) - OBSERVER_ROLES, key=lambda r: r.value))
def test_state_table_keeps_observers_out_of_voter_roles(role):
    sources = [old for (old, new) in TRANSITIONS if new is role and old in OBSERVER_ROLES]
    for old in sources:
        row = TRANSITIONS[(old, role)]
        epoch = ALLOWED[row.epoch][0]
        with pytest.raises(IllegalTransition, match="observer"):
            check_transition(old, role, 5, epoch, is_voter=False)


def test_state_table_lets_observers_follow_and_wait():
    assert check_transition(R.UNATTACHED, R.FOLLOWER, 5, 5, is_voter=False)
    assert check_transition(R.FOLLOWER, R.FOLLOWER, 5, 6, is_voter=False)
    assert check_transition(R.FOLLOWER, R.UNATTACHED, 5, 6, is_voter=False)


@pytest.mark.parametrize(
    "stored,log_epoch,voter,expected",
    [
        (None, 0, True, (R.UNATTACHED, 0, None, None)),
        (None, 4, True, (R.UNATTACHED, 4, None, None)),
        (ElectionState(3), 0, True, (R.UNATTACHED, 3, None, None)),
        (ElectionState(3, leader_id=2), 3, True, (R.FOLLOWER, 3, 2, None)),
        (ElectionState(3, leader_id=2, voted_id=2), 3, True, (R.FOLLOWER, 3, 2, 2)),
        (ElectionState(3, leader_id=1, voted_id=1), 3, True, (R.RESIGNED, 3, 1, 1)),
        (ElectionState(3, voted_id=1), 2, True, (R.CANDIDATE, 3, None, 1)),
        # Voted for itself and the log already holds the epoch: it led (file lagging).
        (ElectionState(3, voted_id=1), 3, True, (R.RESIGNED, 3, 1, 1)),
        (ElectionState(3, voted_id=2), 2, True, (R.VOTED, 3, None, 2)),
        (ElectionState(3, voted_id=2), 5, True, (R.UNATTACHED, 5, None, None)),
        (ElectionState(3, leader_id=2), 3, False, (R.FOLLOWER, 3, 2, None)),
        (ElectionState(3, voted_id=2), 3, False, (R.UNATTACHED, 3, None, None)),
    ],
)
def test_state_initial_role_from_the_quorum_state_file(stored, log_epoch, voter, expected):
    assert tuple(initial_state(stored, 1, is_voter=voter, log_last_epoch=log_epoch)) == expected


def test_state_election_state_rejects_negative_values():
    with pytest.raises(ValueError):
        ElectionState(-1)
    with pytest.raises(ValueError):
        ElectionState(1, leader_id=-2)
