"""The classic group state machine and protocol selection."""

import itertools

import pytest

from kcore.coordinator.group.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
    MemberMetadata,
)

S = GroupState


def test_group_state_names_are_kafkas():
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


@pytest.mark.parametrize("source, target", list(itertools.product(S, S)))
def test_group_transition_follows_the_table(source, target):
    group = ClassicGroup("g", state=source)
    if source in VALID_PREVIOUS_STATES[target]:
        group.transition_to(target, 42)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (
            target,
            source,
            42,
        )
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 42)
        assert group.state is source


def member(mid, *protocols):
    return MemberMetadata(
        mid, None, "c", "h", 1000, 1000, "consumer", [(p, b"") for p in protocols]
    )


def test_select_protocol_by_vote_among_common_protocols():
    group = ClassicGroup("g")
    group.add(member("a", "range", "rr"))
    group.add(member("b", "rr", "range", "sticky"))
    group.add(member("c", "rr", "range"))
    assert group.candidate_protocols() == {"range", "rr"}
    assert group.select_protocol() == "rr"
    group.state = S.STABLE
    assert group.supports_protocols("consumer", ["sticky", "range"])
    assert not group.supports_protocols("consumer", ["sticky"])
    assert not group.supports_protocols("connect", ["range"])


def test_remove_leader_elects_next_member():
    group = ClassicGroup("g")
    group.add(member("a", "range"))
    group.add(member("b", "range"))
    assert group.leader_id == "a"
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("b")
    assert group.leader_id is None
