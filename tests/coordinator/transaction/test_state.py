"""The transition table and the checked transitions of one transactional id."""

import pytest

from kcore.coordinator.transaction.metadata import TransactionMetadata
from kcore.coordinator.transaction.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TransactionState,
    check_transition,
)
from kcore.protocol.errors import ErrorCode, KafkaError

S = TransactionState


def test_state_ids_and_names_are_kafkas():
    assert [(s.id, s.kafka_name) for s in S] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert all(S.from_kafka_name(s.kafka_name) is s for s in S)
    assert S.from_kafka_name("ongoing") is None
    assert S.from_id(3) is S.PREPARE_ABORT


def test_state_table_is_kafkas():
    kafka = {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {
            S.ONGOING,
            S.PREPARE_EPOCH_FENCE,
            S.EMPTY,
            S.COMPLETE_COMMIT,
            S.COMPLETE_ABORT,
        },
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert kafka == VALID_PREVIOUS_STATES


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_check_transition_follows_the_table(current, target):
    if current in VALID_PREVIOUS_STATES[target]:
        check_transition("t", current, target)
    else:
        with pytest.raises(IllegalTransition):
            check_transition("t", current, target)


def _txn(**kw) -> TransactionMetadata:
    defaults = dict(producer_id=10, producer_epoch=0, timeout_ms=1000, last_update_ms=0)
    defaults.update(kw)
    return TransactionMetadata("t", **defaults)


def test_metadata_prepare_then_complete_applies_the_record():
    txn = _txn()
    record = txn.prepare_add_partitions({("a", 0)}, now_ms=5)
    assert txn.pending_state is S.ONGOING and txn.state is S.EMPTY
    txn.complete_transition(record)
    assert (txn.state, txn.partitions, txn.start_ms, txn.pending_state) == (
        S.ONGOING,
        {("a", 0)},
        5,
        None,
    )
    assert txn.to_record() == record


def test_metadata_abort_transition_changes_nothing():
    txn = _txn()
    before = txn.to_record()
    txn.prepare_add_partitions({("a", 0)}, now_ms=5)
    txn.abort_transition()
    assert txn.to_record() == before and txn.pending_state is None


def test_metadata_refuses_a_second_pending_transition():
    txn = _txn()
    txn.prepare_add_partitions({("a", 0)}, now_ms=5)
    with pytest.raises(IllegalTransition):
        txn.prepare_add_partitions({("a", 1)}, now_ms=6)


@pytest.mark.parametrize(
    ("state", "prepare"),
    [
        (S.EMPTY, lambda t: t.prepare_abort_or_commit(S.PREPARE_COMMIT, 1)),
        (S.EMPTY, lambda t: t.prepare_complete(1)),
        (S.ONGOING, lambda t: t.prepare_increment_epoch(1000, None, 1)),
        (S.ONGOING, lambda t: t.prepare_dead()),
        (S.PREPARE_COMMIT, lambda t: t.prepare_add_partitions({("a", 1)}, 1)),
        (S.COMPLETE_COMMIT, lambda t: t.prepare_fence_epoch()),
        (S.PREPARE_ABORT, lambda t: t.prepare_increment_epoch(1000, None, 1)),
    ],
)
def test_metadata_refuses_illegal_moves(state, prepare):
    txn = _txn(state=state, start_ms=0)
    with pytest.raises(IllegalTransition):
        prepare(txn)
    assert txn.pending_state is None and txn.state is state


def test_metadata_complete_refuses_a_record_that_is_not_pending():
    txn = _txn()
    record = txn.prepare_add_partitions({("a", 0)}, now_ms=5)
    txn.abort_transition()
    with pytest.raises(IllegalTransition):
        txn.complete_transition(record)


def test_metadata_increment_epoch_with_expected_epochs():
    txn = _txn(producer_epoch=4, last_producer_epoch=-1)
    txn.complete_transition(txn.prepare_increment_epoch(1000, 4, 1))
    assert (txn.producer_epoch, txn.last_producer_epoch) == (5, 4)
    # A retry of that call (answer lost) carries epoch 4 again: same epoch, no bump.
    txn.complete_transition(txn.prepare_increment_epoch(1000, 4, 2))
    assert (txn.producer_epoch, txn.last_producer_epoch) == (5, 4)
    with pytest.raises(KafkaError) as err:
        txn.prepare_increment_epoch(1000, 2, 3)
    assert err.value.code == ErrorCode.PRODUCER_FENCED


def test_metadata_rotation_moves_to_a_new_producer_id_at_epoch_zero():
    txn = _txn(producer_epoch=32766)
    txn.complete_transition(txn.prepare_producer_id_rotation(11, 1000, 1, record_last_epoch=True))
    assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id) == (11, 0, 10)
    assert txn.last_producer_epoch == 32766


def test_metadata_fence_bumps_once_even_after_a_failed_fence():
    txn = _txn(state=S.ONGOING, start_ms=0, partitions={("a", 0)})
    record = txn.begin_fenced_abort(txn.prepare_fence_epoch(), 1)
    assert record.state is S.PREPARE_ABORT and record.producer_epoch == 1
    txn.fence_failed()
    assert (txn.state, txn.producer_epoch, txn.has_failed_epoch_fence) == (S.ONGOING, 1, True)
    record = txn.begin_fenced_abort(txn.prepare_fence_epoch(), 2)
    assert record.producer_epoch == 1
    txn.complete_transition(record)
    assert txn.state is S.PREPARE_ABORT and not txn.has_failed_epoch_fence
