"""ProducerStateManager: idempotence checks, transactions, LSO inputs, snapshots, resets."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.producer_state import (
    INT32_MAX,
    AppendOrigin,
    ProducerStateManager,
    decrement_sequence,
    has_producer_id,
    in_sequence,
)
from kcore.protocol.errors import ErrorCode, KafkaError

CLIENT = AppendOrigin.CLIENT
REPLICATION = AppendOrigin.REPLICATION
COORDINATOR = AppendOrigin.COORDINATOR


def _append(psm, pid, epoch, first_seq, count, first_offset, *, txn=False, origin=CLIENT, ts=1000):
    info = psm.prepare_update(pid, origin)
    last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
    info.append_data_batch(
        epoch, first_seq, last_seq, ts, first_offset, first_offset + count - 1, txn
    )
    psm.update(info)
    psm.update_map_end_offset(first_offset + count)
    return info


def _marker(psm, pid, epoch, offset, *, commit, coordinator_epoch=0, origin=COORDINATOR):
    info = psm.prepare_update(pid, origin)
    completed = info.append_end_txn_marker(commit, coordinator_epoch, epoch, offset, 2000)
    psm.update(info)
    psm.complete_txn(completed)
    psm.update_map_end_offset(offset + 1)
    return completed


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, "t-0")


def test_sequence_helpers_wrap_at_int32_max():
    assert in_sequence(INT32_MAX, 0)
    assert in_sequence(4, 5)
    assert not in_sequence(4, 6)
    assert decrement_sequence(2, 4) == INT32_MAX - 1
    assert decrement_sequence(10, 3) == 7


def test_has_producer_id_accepts_mirrored_negative_ids():
    assert not has_producer_id(-1)
    assert has_producer_id(-2)  # source producer 0 mirrored as -(0 + 2), decision D-17
    assert has_producer_id(0)


def test_producer_state_in_sequence_appends_are_accepted(psm):
    _append(psm, 7, 0, 0, 5, 0)
    _append(psm, 7, 0, 5, 3, 5)
    entry = psm.last_entry(7)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (0, 0, 7)
    assert entry.last_data_offset == 7


def test_producer_state_gap_in_sequence_is_out_of_order(psm):
    _append(psm, 7, 0, 0, 5, 0)
    with pytest.raises(KafkaError) as e:
        _append(psm, 7, 0, 6, 1, 5)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm.last_entry(7).last_seq == 4  # the refused append changed nothing


def test_producer_state_duplicate_batch_is_found_with_its_original_offsets(psm):
    _append(psm, 7, 0, 0, 5, 100)
    _append(psm, 7, 0, 5, 5, 105)
    dup = psm.last_entry(7).find_duplicate(0, 0, 4)
    assert (dup.first_offset, dup.last_offset) == (100, 104)
    assert psm.last_entry(7).find_duplicate(1, 0, 4) is None  # another epoch is no duplicate


def test_producer_state_only_last_five_batches_are_remembered(psm):
    for i in range(7):
        _append(psm, 7, 0, i, 1, i)
    entry = psm.last_entry(7)
    assert entry.find_duplicate(0, 1, 1) is None
    assert entry.find_duplicate(0, 2, 2) is not None


def test_producer_state_old_epoch_is_fenced(psm):
    _append(psm, 7, 3, 0, 1, 0)
    with pytest.raises(KafkaError) as e:
        _append(psm, 7, 2, 1, 1, 1)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_producer_state_new_epoch_must_start_at_sequence_zero(psm):
    _append(psm, 7, 0, 0, 3, 0)
    with pytest.raises(KafkaError) as e:
        _append(psm, 7, 1, 3, 1, 3)
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    _append(psm, 7, 1, 0, 1, 3)
    assert psm.last_entry(7).producer_epoch == 1


def test_producer_state_unknown_producer_accepts_any_first_sequence(psm):
    _append(psm, 9, 0, 42, 2, 0)  # its earlier state was removed (retention, expiry)
    assert psm.last_entry(9).last_seq == 43


def test_producer_state_replication_origin_is_not_checked(psm):
    _append(psm, -9, 0, 0, 1, 0, origin=REPLICATION)
    _append(psm, -9, 0, 10, 1, 1, origin=REPLICATION)  # a gap a leader accepted
    assert psm.last_entry(-9).last_seq == 10


def test_producer_state_transaction_sets_first_unstable_offset_until_replicated(psm):
    assert psm.first_unstable_offset() is None
    _append(psm, 7, 0, 0, 2, 10, txn=True)
    _append(psm, 8, 0, 0, 1, 12, txn=True)
    assert psm.first_unstable_offset() == 10
    assert psm.ongoing_transactions == [(7, 10), (8, 12)]
    completed = _marker(psm, 7, 0, 13, commit=True)
    assert completed.first_offset == 10 and not completed.is_aborted
    assert psm.first_unstable_offset() == 10  # marker at 13 not yet below the high watermark
    psm.on_high_watermark_updated(14)
    assert psm.first_unstable_offset() == 12


def test_producer_state_abort_records_lso_of_the_other_open_transaction(psm):
    _append(psm, 7, 0, 0, 2, 10, txn=True)
    _append(psm, 8, 0, 0, 1, 12, txn=True)
    info = psm.prepare_update(7, COORDINATOR)
    completed = info.append_end_txn_marker(False, 0, 0, 13, 2000)
    assert completed.is_aborted
    assert psm.last_stable_offset_after(completed) == 12
    psm.update(info)
    psm.complete_txn(completed)
    completed8 = _marker(psm, 8, 0, 14, commit=False)
    assert psm.last_stable_offset_after(completed8) == 15


def test_producer_state_non_transactional_write_during_transaction_is_refused(psm):
    _append(psm, 7, 0, 0, 1, 0, txn=True)
    with pytest.raises(KafkaError) as e:
        _append(psm, 7, 0, 1, 1, 1, txn=False)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE


def test_producer_state_marker_from_old_coordinator_epoch_is_fenced(psm):
    _append(psm, 7, 0, 0, 1, 0, txn=True)
    _marker(psm, 7, 0, 1, commit=True, coordinator_epoch=5)
    _append(psm, 7, 0, 1, 1, 2, txn=True)
    with pytest.raises(KafkaError) as e:
        _marker(psm, 7, 0, 3, commit=True, coordinator_epoch=4)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_producer_state_mirror_pid_reset_expires_every_producer(psm):
    _append(psm, -9, 0, 0, 1, 0, origin=REPLICATION)
    _append(psm, 4, 0, 0, 1, 1)
    psm.reset_producers()
    assert psm.last_entry(-9) is None and psm.last_entry(4) is None
    _append(psm, 4, 0, 17, 1, 2)  # starts fresh: any sequence is accepted


def test_producer_state_expiry_keeps_producers_with_open_transactions(psm):
    _append(psm, 1, 0, 0, 1, 0, ts=1_000)
    _append(psm, 2, 0, 0, 1, 1, txn=True, ts=1_000)
    _append(psm, 3, 0, 0, 1, 2, ts=90_000_000)
    expired = psm.remove_expired_producers(now_ms=1_000 + psm.producer_id_expiration_ms + 1)
    assert expired == [1]
    assert psm.last_entry(2) is not None and psm.last_entry(3) is not None


def test_producer_state_expires_a_producer_at_exactly_producer_id_expiration_ms(tmp_path):
    # Kafka's isProducerExpired: now - last timestamp >= producer.id.expiration.ms.
    psm = ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=10_000)
    _append(psm, 1, 0, 0, 1, 0, ts=1_000)
    assert psm.remove_expired_producers(now_ms=10_999) == []
    assert psm.remove_expired_producers(now_ms=11_000) == [1]
    assert psm.last_entry(1) is None


def test_producer_state_snapshot_skips_producers_expired_at_exactly_the_limit(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=10_000)
    _append(psm, 1, 0, 0, 1, 0, ts=1_000)
    _append(psm, 2, 0, 0, 1, 1, ts=1_001)
    psm.take_snapshot()
    again = ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=10_000)
    again.truncate_and_reload(0, 2, now_ms=11_000)
    assert again.last_entry(1) is None  # idle for exactly 10 000 ms: expired while down
    assert again.last_entry(2) is not None


def test_producer_state_snapshot_round_trip_restores_entries_and_open_transactions(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 7, 2, 0, 5, 0)
    _append(psm, -5, 1, 0, 2, 5, txn=True, origin=REPLICATION)
    path = psm.take_snapshot()
    assert path.name == "00000000000000000007.snapshot"

    again = ProducerStateManager(tmp_path, "t-0")
    replay_from = again.truncate_and_reload(0, 7, now_ms=2_000)
    assert replay_from == 7
    e = again.last_entry(7)
    assert (e.producer_epoch, e.last_seq, e.last_data_offset) == (2, 4, 4)
    assert again.last_entry(-5).current_txn_first_offset == 5
    assert again.first_unstable_offset() == 5
    # The producer continues where it was: the next sequence is accepted, a gap is not.
    _append(again, 7, 2, 5, 1, 7)
    with pytest.raises(KafkaError):
        _append(again, 7, 2, 9, 1, 8)


def test_producer_state_snapshot_keeps_coordinator_epoch_and_batch_timestamps(tmp_path):
    # Mutation testing: dropping the coordinator epoch or the batch timestamps on load, and
    # not recording the map end offset, all passed the suite.
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 3, 0, 0, 1, 0, txn=True, ts=1_500)
    _marker(psm, 3, 0, 1, commit=True, coordinator_epoch=4)
    _append(psm, 3, 0, 1, 2, 2, ts=1_700)
    psm.take_snapshot()  # at 4
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(0, 4, now_ms=2_000) == 4
    assert again.map_end_offset == 4
    entry = again.last_entry(3)
    assert entry.coordinator_epoch == 4
    assert entry.last_timestamp == 1_700
    dup = entry.find_duplicate(0, 1, 2)
    assert (dup.first_offset, dup.last_offset, dup.timestamp) == (2, 3, 1_700)
    # A marker from an older coordinator epoch is a zombie's, after the restart as before.
    with pytest.raises(KafkaError) as e:
        _marker(again, 3, 0, 4, commit=False, coordinator_epoch=3)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert "coordinator epoch 3, older than 4" in e.value.message


def test_producer_state_snapshot_at_the_log_start_is_used_and_kept(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 7, 0, 0, 5, 0)
    psm.take_snapshot()  # at 5
    _append(psm, 7, 0, 5, 5, 5)
    psm.take_snapshot()  # at 10
    psm.delete_snapshots_before(10)
    assert psm.snapshot_offsets() == [10]  # the one at the offset itself stays
    psm.delete_snapshots_before(10)  # nothing left below: no error
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(10, 10, now_ms=2_000) == 10  # at the log start: loaded
    assert again.last_entry(7).last_seq == 9


def test_producer_state_snapshot_below_the_log_start_is_not_loaded(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 9, 0, 0, 1, 0)  # its only batch is at offset 0
    psm.take_snapshot()  # at 1
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(0, 1, now_ms=2_000) == 1
    dup = again.last_entry(9).find_duplicate(0, 0, 0)  # a retry of the batch at offset 0
    assert (dup.first_offset, dup.last_offset) == (0, 0)
    later = ProducerStateManager(tmp_path, "t-0")
    assert later.truncate_and_reload(3, 3, now_ms=2_000) == 3  # the snapshot is below: replay
    assert later.map_end_offset == 3 and later.last_entry(9) is None


def test_producer_state_reload_ignores_snapshots_beyond_the_log_end(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 7, 0, 0, 5, 0)
    psm.take_snapshot()  # at 5
    _append(psm, 7, 0, 5, 5, 5)
    psm.take_snapshot()  # at 10
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(0, 8, now_ms=2_000) == 5
    assert again.snapshot_offsets() == [5]
    assert again.last_entry(7).last_seq == 4


def test_producer_state_corrupt_snapshot_falls_back_to_an_older_one(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 7, 0, 0, 5, 0)
    psm.take_snapshot()
    _append(psm, 7, 0, 5, 5, 5)
    newest = psm.take_snapshot()
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(0, 10, now_ms=2_000) == 5
    assert not newest.exists()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.booleans()), max_size=30))
def test_producer_state_accepts_exactly_the_in_sequence_appends(tmp_path_factory, appends):
    """Against a model: per producer, an append is accepted iff it continues the sequence."""
    psm = ProducerStateManager(tmp_path_factory.mktemp("psm"), "t-0")
    next_seq: dict[int, int] = {}
    offset = 0
    for pid, count, skip in appends:
        first = next_seq.get(pid, 0) + (1 if skip else 0)
        expected_ok = pid not in next_seq or first == next_seq[pid]
        try:
            _append(psm, pid, 0, first, count, offset)
            ok = True
        except KafkaError as e:
            assert e.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            ok = False
        assert ok == expected_ok
        if ok:
            next_seq[pid] = first + count
            offset += count


def test_producer_state_coordinator_batch_from_a_fenced_epoch_is_refused(psm):
    """A group coordinator's transactional offset commit carries the producer's epoch: from a
    fenced (older) epoch it is refused like a client's batch (Kafka checks the epoch for every
    origin but replication); sequences are not checked for it."""
    _append(psm, 11, 3, 0, 1, 0, txn=True)
    _marker(psm, 11, 3, 1, commit=True)
    with pytest.raises(KafkaError) as e:
        _append(psm, 11, 2, 0, 1, 2, txn=True, origin=COORDINATOR)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    _append(psm, 11, 3, 0, 1, 2, txn=True, origin=COORDINATOR)  # current epoch, sequence 0 again
    _append(psm, 11, 2, 0, 1, 3, txn=True, origin=REPLICATION)  # followers only record


# -- boundaries found by mutation testing ------------------------------------------------------


def test_producer_state_sequence_zero_follows_only_int32_max(psm):
    _append(psm, 1, 0, 0, 6, 0)  # sequences 0-5
    with pytest.raises(KafkaError) as e:
        _append(psm, 1, 0, 0, 1, 6)  # 0 again, same epoch: not a wrap
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "sequence 0 at offset 6 does not follow 5 (epoch 0)" in e.value.message
    _append(psm, 2, 0, INT32_MAX - 1, 2, 10)  # ... up to INT32_MAX
    _append(psm, 2, 0, 0, 1, 12)  # wraps to 0
    assert psm.last_entry(2).last_seq == 0


def test_producer_state_a_duplicate_matches_both_ends_of_a_batch(psm):
    _append(psm, 1, 0, 0, 3, 0)  # 0-2
    _append(psm, 1, 0, 3, 2, 3)  # 3-4
    entry = psm.last_entry(1)
    assert entry.find_duplicate(0, 0, 2).first_offset == 0
    assert entry.find_duplicate(0, 0, 4) is None  # only the first sequence matches
    assert entry.find_duplicate(0, 1, 2) is None  # only the last one


def test_producer_state_a_marker_at_the_high_watermark_is_not_yet_replicated(psm):
    _append(psm, 1, 0, 0, 1, 0, txn=True)
    _marker(psm, 1, 0, 1, commit=True)
    psm.on_high_watermark_updated(1)  # the marker (offset 1) is not below the HW yet
    assert psm.first_unstable_offset() == 0
    psm.on_high_watermark_updated(2)
    assert psm.first_unstable_offset() is None


def test_producer_state_snapshot_offsets_lists_only_snapshot_files_in_order(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    for name in [
        "00000000000000000020.snapshot",
        "00000000000000000005.snapshot",
        "00000000000000000011.snapshot",
        "0000000000000000001x.snapshot",  # not an offset
        "00000000000000000007.snapshot.deleted",
        "00000000000000000009.index",
        "leader-epoch-checkpoint",
    ]:
        (tmp_path / name).write_bytes(b"")
    assert psm.snapshot_offsets() == [5, 11, 20]
    psm.delete_snapshots_after(11)  # the one at the offset itself stays
    assert psm.snapshot_offsets() == [5, 11]
    psm.delete_snapshots_before(11)
    assert psm.snapshot_offsets() == [11]
    assert (tmp_path / "0000000000000000001x.snapshot").exists()


def test_producer_state_truncate_fully_restarts_the_map_at_zero(psm):
    _append(psm, 7, 0, 0, 5, 0)
    assert psm.map_end_offset == 5
    psm.truncate_fully()
    assert psm.map_end_offset == 0 and psm.last_entry(7) is None
    assert psm.take_snapshot().name == "00000000000000000000.snapshot"


def test_producer_state_snapshot_of_a_producer_whose_batches_a_new_epoch_cleared(tmp_path):
    from kcore.log.producer_snapshot import read_snapshot

    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 3, 0, 0, 4, 0, txn=True)
    _marker(psm, 3, 1, 4, commit=False)  # the coordinator bumped the epoch: batches forgotten
    assert list(psm.last_entry(3).batches) == []
    (entry,) = read_snapshot(psm.take_snapshot())
    assert (entry.producer_epoch, entry.last_sequence, entry.last_offset) == (1, -1, -1)
    assert entry.offset_delta == 0 and entry.current_txn_first_offset == -1


def test_producer_state_errors_name_the_producer_partition_offset_and_epochs(psm):
    _append(psm, 7, 2, 0, 5, 0)
    cases = [
        (
            lambda: _append(psm, 7, 1, 5, 1, 5),
            ErrorCode.INVALID_PRODUCER_EPOCH,
            "epoch 1 of producer 7 at offset 5 in t-0 is older than its current epoch 2",
        ),
        (
            lambda: _append(psm, 7, 3, 4, 1, 5),
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            "producer 7 in t-0: a new epoch 3 must start at sequence 0, got 4 at 5",
        ),
        (
            lambda: _marker(psm, 7, 1, 5, commit=True),
            ErrorCode.INVALID_PRODUCER_EPOCH,
            "epoch 1 of producer 7 at offset 5 in t-0 is older than its current epoch 2",
        ),
    ]
    for call, code, message in cases:
        with pytest.raises(KafkaError) as e:
            call()
        assert (e.value.code, e.value.message) == (code, message)
    _append(psm, 8, 0, 0, 1, 5, txn=True)
    with pytest.raises(KafkaError) as e:
        _append(psm, 8, 0, 1, 1, 6)
    assert e.value.message == (
        "producer 8 wrote a non-transactional batch to t-0 while its transaction is open"
    )


def test_producer_state_batches_of_one_append_follow_each_other(psm):
    # A leader append of several batches of a new producer: the second is checked against
    # the first, still uncommitted.
    info = psm.prepare_update(7, CLIENT)
    info.append_data_batch(0, 0, 4, 1000, 0, 4, False)
    info.append_data_batch(0, 5, 6, 1000, 5, 6, False)
    with pytest.raises(KafkaError) as e:
        info.append_data_batch(0, 9, 9, 1000, 7, 7, False)
    assert (
        e.value.message == "producer 7 in t-0: sequence 9 at offset 7 does not follow 6 (epoch 0)"
    )


def test_producer_state_a_duplicate_reports_its_original_timestamp(psm):
    _append(psm, 7, 0, 0, 3, 0, ts=1_234)
    dup = psm.last_entry(7).find_duplicate(0, 0, 2)
    assert (dup.first_offset, dup.last_offset, dup.timestamp) == (0, 2, 1_234)


def test_producer_state_marker_without_an_open_transaction_completes_at_itself(psm):
    _append(psm, 7, 0, 0, 1, 0)
    info = psm.prepare_update(7, COORDINATOR)
    completed = info.append_end_txn_marker(False, 0, 0, 1, 2000)
    assert (completed.producer_id, completed.first_offset, completed.last_offset) == (7, 1, 1)
    assert info.completed_transactions == [completed]


def test_producer_state_fresh_manager_maps_nothing_yet(tmp_path):
    psm = ProducerStateManager(tmp_path, "t-0")
    assert psm.map_end_offset == 0
    assert psm.take_snapshot().name == "00000000000000000000.snapshot"


def test_producer_state_reloaded_transaction_at_offset_zero_stays_open_until_its_marker(tmp_path):
    from kcore.log.producer_snapshot import read_snapshot

    psm = ProducerStateManager(tmp_path, "t-0")
    _append(psm, 7, 0, 0, 2, 0, txn=True)
    _append(psm, 8, 0, 0, 1, 2, txn=True)
    psm.take_snapshot()  # at 3
    again = ProducerStateManager(tmp_path, "t-0")
    assert again.truncate_and_reload(0, 3, now_ms=2_000) == 3
    assert again.first_unstable_offset() == 0
    assert again.ongoing_transactions == [(7, 0), (8, 2)]
    completed = _marker(again, 7, 0, 3, commit=False)
    assert (completed.producer_id, completed.first_offset) == (7, 0)
    assert again.last_stable_offset_after(completed) == 2  # 8's, not 7's own
    again.on_high_watermark_updated(4)
    assert again.first_unstable_offset() == 2
    again.update_map_end_offset(4)
    assert sorted(e.producer_id for e in read_snapshot(again.take_snapshot())) == [7, 8]


def test_producer_state_a_transaction_of_one_producer_spends_no_other_producers_guard(psm):
    guard = psm.maybe_start_transaction_verification(9, 0, now_ms=0)
    _append(psm, 7, 0, 0, 1, 0, txn=True)  # another producer's transaction begins
    assert psm.verification_guard(9) is guard
