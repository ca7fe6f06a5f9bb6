"""The mirror partition state table and the operations' admission rules (D-12, D-26)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.mirror.state import (
    ADMISSION,
    TRANSITIONS,
    Admission,
    IllegalTransition,
    MirrorMode,
    MirrorOperation,
    MirrorPartitionState,
    check_operation,
    check_transition,
    parse_mirror_name,
)
from kcore.protocol.errors import ErrorCode, KafkaError

S = MirrorPartitionState
OP = MirrorOperation
states = st.sampled_from(list(MirrorPartitionState))


def test_state_codes_are_the_d05_codes():
    assert [(s.name, s.value) for s in S] == [
        ("LOG_TRUNCATION", 0), ("MIRRORING", 1), ("EPOCH_FENCING", 2), ("PAUSING", 3),
        ("PAUSED", 4), ("STOPPING", 5), ("STOPPED", 6), ("FAILED", 7), ("UNKNOWN", 16),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="9 is not a mirror partition state code"):
        S.from_code(9)


@given(states, states)
def test_state_check_transition_allows_exactly_the_table(old, new):
    if (old, new) in TRANSITIONS:
        assert check_transition(old, new) is TRANSITIONS[(old, new)]
    else:
        with pytest.raises(IllegalTransition, match=f"from {old.name} to {new.name}"):
            check_transition(old, new)


def test_state_table_holds_the_spec_rows_and_refuses_shortcuts():
    rows = {row.row for row in TRANSITIONS.values()}
    for label in ("T1", "T2", "T3", "T5", "T6", "T7", "T8", "T10", "T12"):
        assert label in rows
    # A pause never cuts a truncation short; nothing leaves STOPPED but a start; UNKNOWN is
    # never entered.
    for old, new in [
        (S.LOG_TRUNCATION, S.PAUSING),
        (S.PAUSED, S.PAUSING),
        (S.STOPPED, S.MIRRORING),
        (S.STOPPING, S.MIRRORING),
        (S.MIRRORING, S.UNKNOWN),
        (S.PAUSED, S.FAILED),
    ]:
        assert (old, new) not in TRANSITIONS


def _reachable(start):
    seen, todo = {start}, [start]
    while todo:
        state = todo.pop()
        for old, new in TRANSITIONS:
            if old is state and new not in seen:
                seen.add(new)
                todo.append(new)
    return seen


@pytest.mark.parametrize("state", [s for s in S if s is not S.STOPPED])
def test_state_failover_is_reachable_from_every_state(state):
    # D-12: STOPPING is one step away from every state but the stopping/stopped ones.
    assert S.STOPPED in _reachable(state)
    if state is not S.STOPPING:
        assert (state, S.STOPPING) in TRANSITIONS


def test_state_failed_retries_to_every_state_it_can_be_entered_from():
    entered_from = {old for old, new in TRANSITIONS if new is S.FAILED}
    assert entered_from == {S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING, S.STOPPING}
    assert all((S.FAILED, old) in TRANSITIONS for old in entered_from)


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, (None, MirrorMode.NONE)),
        ("", (None, MirrorMode.NONE)),
        ("dr", ("dr", MirrorMode.ACTIVE)),
        ("dr.paused", ("dr", MirrorMode.PAUSED)),
        ("dr.stopped", ("dr", MirrorMode.STOPPED)),
        ("a.b.stopped", ("a.b", MirrorMode.STOPPED)),
    ],
)
def test_state_parse_mirror_name_splits_the_suffix(value, expected):
    assert parse_mirror_name(value) == expected


def test_state_admission_is_d12_for_stop_and_m49_plus_failed_for_start():
    stop = ADMISSION[OP.STOP]
    accepted = {s for s, a in stop.items() if a is Admission.ACCEPT}
    # D-12's states, and UNKNOWN: failover is always possible, even before a first state.
    assert accepted == {
        S.UNKNOWN, S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING, S.PAUSING, S.PAUSED, S.FAILED,
    }  # fmt: skip
    assert stop[S.STOPPING] is stop[S.STOPPED] is Admission.NOOP
    delete = {s for s, a in ADMISSION[OP.DELETE].items() if a is not Admission.REJECT}
    assert delete == {S.STOPPED}  # D-29
    start = {s for s, a in ADMISSION[OP.START].items() if a is Admission.ACCEPT}
    assert start == {S.UNKNOWN, S.STOPPED, S.FAILED}
    assert ADMISSION[OP.PAUSE][S.MIRRORING] is Admission.ACCEPT
    assert ADMISSION[OP.PAUSE][S.LOG_TRUNCATION] is Admission.REJECT
    assert ADMISSION[OP.RESUME][S.PAUSING] is Admission.ACCEPT
    assert ADMISSION[OP.RESUME][S.FAILED] is Admission.REJECT


def test_state_check_operation_names_every_offending_partition_in_one_error():
    states = {
        ("orders", 1): S.STOPPING,
        ("orders", 0): S.MIRRORING,
        ("audit", 2): S.PAUSED,
        ("audit", 0): S.STOPPED,
    }
    with pytest.raises(KafkaError) as raised:
        check_operation(OP.START, "dr", states)
    error = raised.value
    assert error.code is ErrorCode.INVALID_MIRROR_STATE
    assert error.message.startswith(
        "Cannot start partitions of mirror 'dr': audit-2 is PAUSED, orders-0 is MIRRORING, "
        "orders-1 is STOPPING (start accepts UNKNOWN, STOPPED, FAILED)"
    )


def test_state_check_operation_returns_the_no_op_partitions():
    states = {("t", 0): S.MIRRORING, ("t", 1): S.STOPPED, ("t", 2): S.STOPPING}
    assert check_operation(OP.STOP, "dr", states) == {("t", 1), ("t", 2)}
    assert check_operation(OP.STOP, "dr", {}) == set()
