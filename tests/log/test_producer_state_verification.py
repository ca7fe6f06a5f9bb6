"""ProducerStateManager's transaction verification guard (KIP-890 part 1, Kafka's
VerificationStateEntry): who needs verifying, and which guards still let an append in."""

import pytest

from kcore.log.producer_state import AppendOrigin, ProducerStateManager
from kcore.protocol.errors import ErrorCode, KafkaError

PID, EPOCH = 7, 0


def _txn_batch(psm, offset, *, epoch=EPOCH, seq=0, pid=PID):
    info = psm.prepare_update(pid, AppendOrigin.CLIENT)
    info.append_data_batch(epoch, seq, seq, 1000, offset, offset, True)
    psm.update(info)


def _plain_batch(psm, offset, *, pid=PID, seq=0):
    info = psm.prepare_update(pid, AppendOrigin.CLIENT)
    info.append_data_batch(EPOCH, seq, seq, 1000, offset, offset, False)
    psm.update(info)


def _marker(psm, offset, *, commit=False, epoch=EPOCH, pid=PID):
    info = psm.prepare_update(pid, AppendOrigin.COORDINATOR)
    psm.complete_txn(info.append_end_txn_marker(commit, 0, epoch, offset, 2000))
    psm.update(info)


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=10_000)


def test_verification_first_transactional_batch_needs_a_guard_and_later_ones_do_not(psm):
    guard = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    assert guard is not None
    psm.check_verified(PID, EPOCH, guard)  # the coordinator said yes: the append may go
    _txn_batch(psm, 0)
    assert psm.has_ongoing_transaction(PID, EPOCH)
    assert psm.verification_guard(PID) is None  # spent by the transaction's first batch
    # The transaction is ongoing here: nothing to ask, and no guard needed to append.
    assert psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0) is None
    psm.check_verified(PID, EPOCH, None)


def test_verification_without_a_guard_is_refused_with_invalid_txn_state(psm):
    with pytest.raises(KafkaError) as e:
        psm.check_verified(PID, EPOCH, None)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE


def test_verification_guard_spent_by_a_marker_refuses_the_racing_append(psm):
    # The ABA race: verification of the next transaction's first batch starts, the ABORT
    # marker of the transaction lands before the coordinator's answer, the answer is "yes".
    _txn_batch(psm, 0)
    _marker(psm, 1)  # transaction 1 ends; producer state shows nothing ongoing
    guard = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    assert guard is not None
    _marker(psm, 2)  # an abort marker arrives while the coordinator is being asked
    with pytest.raises(KafkaError) as e:
        psm.check_verified(PID, EPOCH, guard)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    # A retry starts over with a fresh guard.
    fresh = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    assert fresh is not None and fresh is not guard
    psm.check_verified(PID, EPOCH, fresh)


def test_verification_concurrent_requests_of_one_producer_share_the_guard(psm):
    first = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    second = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=5)
    assert first is second
    psm.check_verified(PID, EPOCH, first)
    _txn_batch(psm, 0)
    # The second request's batch follows the first: the transaction is ongoing now.
    psm.check_verified(PID, EPOCH, second)


def test_verification_guard_survives_a_non_transactional_batch_of_the_producer(psm):
    guard = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    _plain_batch(psm, 0)  # Kafka clears the guard only for transactional batches and markers
    psm.check_verified(PID, EPOCH, guard)


def test_verification_ongoing_transaction_of_an_older_epoch_does_not_count(psm):
    _txn_batch(psm, 0, epoch=0)
    assert not psm.has_ongoing_transaction(PID, 1)
    assert psm.maybe_start_transaction_verification(PID, 1, now_ms=0) is not None
    with pytest.raises(KafkaError) as e:
        psm.check_verified(PID, 1, None)
    # Kafka's words (UnifiedLog's InvalidTxnStateException), after the producer and partition.
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    assert e.value.message == (
        f"producer {PID} in t-0: Record was not part of an ongoing transaction"
    )


def test_verification_guards_of_other_producers_are_independent(psm):
    mine = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    theirs = psm.maybe_start_transaction_verification(PID + 1, EPOCH, now_ms=0)
    assert mine is not theirs
    _marker(psm, 0, pid=PID + 1)
    psm.check_verified(PID, EPOCH, mine)
    with pytest.raises(KafkaError):
        psm.check_verified(PID + 1, EPOCH, theirs)


def test_verification_stale_entries_expire_with_producer_id_expiration_ms(psm):
    guard = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    psm.remove_expired_producers(now_ms=9_999)
    assert psm.verification_guard(PID) is guard
    psm.remove_expired_producers(now_ms=10_000)  # Kafka: now - timestamp >= expiration
    assert psm.verification_guard(PID) is None


@pytest.mark.parametrize("reset", ["reset_producers", "truncate_fully"])
def test_verification_guards_are_dropped_with_the_producer_state(psm, reset):
    guard = psm.maybe_start_transaction_verification(PID, EPOCH, now_ms=0)
    getattr(psm, reset)()
    with pytest.raises(KafkaError):
        psm.check_verified(PID, EPOCH, guard)
