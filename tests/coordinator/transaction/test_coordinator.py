"""The coordinator's typed operations and wire handlers, one behaviour per test."""

import pytest

from kcore.coordinator.transaction import (
    CONSUMER_OFFSETS,
    ProducerIdAndEpoch,
    TransactionConfig,
    TransactionLogTombstone,
    TransactionState,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

from .harness import FIRST_PRODUCER_ID, GROUP_PARTITION, Harness

S = TransactionState
PID = FIRST_PRODUCER_ID


def code_of(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except KafkaError as e:
        return e.code
    return ErrorCode.NONE


@pytest.fixture
def h():
    return Harness()


def ongoing(h, tid="t", partitions=(("a", 0), ("a", 1))):
    got = h.coordinator.init_producer_id(tid, 60_000, h.now)
    h.coordinator.add_partitions(tid, got.producer_id, got.producer_epoch, partitions, h.now)
    return got


# -- ownership ---------------------------------------------------------------------------------


def test_coordinator_unowned_partition_answers_not_coordinator():
    h = Harness(owned=False)
    assert code_of(h.coordinator.init_producer_id, "t", 1000, 0) == ErrorCode.NOT_COORDINATOR


def test_coordinator_loading_partition_answers_load_in_progress():
    h = Harness(owned=False)
    h.coordinator.begin_loading(h.partition("t"), 0)
    assert (
        code_of(h.coordinator.init_producer_id, "t", 1000, 0)
        == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    h.coordinator.finish_loading(h.partition("t"), 0)
    assert code_of(h.coordinator.init_producer_id, "t", 1000, 0) == ErrorCode.NONE


def test_coordinator_unload_forgets_ids_and_markers(h):
    got = ongoing(h)
    h.coordinator.end_txn("t", got.producer_id, got.producer_epoch, True, h.now)
    h.coordinator.unload(h.partition("t"))
    assert h.coordinator.drain_markers(h.now) == []
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == ErrorCode.NOT_COORDINATOR


def test_coordinator_unload_with_an_older_epoch_is_ignored(h):
    h.load(h.partition("t"))  # epoch 1
    h.coordinator.unload(h.partition("t"), coordinator_epoch=0)
    assert code_of(h.coordinator.init_producer_id, "t", 1000, 0) == ErrorCode.NONE


# -- InitProducerId ----------------------------------------------------------------------------


def test_init_producer_id_without_transactional_id_gives_a_fresh_id(h):
    assert h.coordinator.init_producer_id(None, 0, h.now) == ProducerIdAndEpoch(PID, 0)
    assert h.coordinator.init_producer_id(None, 0, h.now) == ProducerIdAndEpoch(PID + 1, 0)
    assert h.appends == 0


def test_init_producer_id_new_id_persists_empty_at_epoch_zero(h):
    assert h.coordinator.init_producer_id("t", 60_000, h.now) == ProducerIdAndEpoch(PID, 0)
    record = h.last("t")
    assert (record.state, record.producer_id, record.producer_epoch, record.timeout_ms) == (
        S.EMPTY,
        PID,
        0,
        60_000,
    )


def test_init_producer_id_again_bumps_the_epoch(h):
    h.coordinator.init_producer_id("t", 60_000, h.now)
    assert h.coordinator.init_producer_id("t", 30_000, h.now) == ProducerIdAndEpoch(PID, 1)
    assert h.coordinator.metadata("t").timeout_ms == 30_000


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_producer_id_refuses_bad_timeouts(h, timeout):
    assert (
        code_of(h.coordinator.init_producer_id, "t", timeout, h.now)
        == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    )


def test_init_producer_id_refuses_an_empty_transactional_id(h):
    assert code_of(h.coordinator.init_producer_id, "", 1000, h.now) == ErrorCode.INVALID_REQUEST


def test_init_producer_id_on_ongoing_aborts_with_a_bumped_epoch_first(h):
    ongoing(h)
    appends = h.appends
    assert (
        code_of(h.coordinator.init_producer_id, "t", 60_000, h.now)
        == ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert h.appends == appends + 1
    record = h.last("t")
    assert (record.state, record.producer_epoch) == (S.PREPARE_ABORT, 1)
    # While the abort's markers are out, the client keeps getting CONCURRENT_TRANSACTIONS.
    assert (
        code_of(h.coordinator.init_producer_id, "t", 60_000, h.now)
        == ErrorCode.CONCURRENT_TRANSACTIONS
    )
    [marker] = h.complete_markers()
    assert (marker.commit, marker.producer_epoch, marker.partitions) == (
        False,
        1,
        (("a", 0), ("a", 1)),
    )
    assert h.last("t").state is S.COMPLETE_ABORT
    assert h.coordinator.init_producer_id("t", 60_000, h.now) == ProducerIdAndEpoch(PID, 2)
    # The zombie producer at epoch 0 is fenced.
    assert code_of(h.coordinator.add_partitions, "t", PID, 0, [("a", 0)], h.now) == (
        ErrorCode.PRODUCER_FENCED
    )


def test_init_producer_id_exhausted_epoch_moves_to_a_new_producer_id(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.metadata("t").producer_epoch = 32766  # as after 32766 re-initialisations
    got = h.coordinator.init_producer_id("t", 1000, h.now)
    assert got == ProducerIdAndEpoch(PID + 1, 0)
    assert h.last("t").previous_producer_id == PID


def test_init_producer_id_kip360_bumps_and_recognises_a_retry(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    expected = ProducerIdAndEpoch(PID, 0)
    assert h.coordinator.init_producer_id("t", 1000, h.now, expected) == ProducerIdAndEpoch(PID, 1)
    # The same request again (its answer was lost): same epoch, not another bump.
    assert h.coordinator.init_producer_id("t", 1000, h.now, expected) == ProducerIdAndEpoch(PID, 1)


def test_init_producer_id_kip360_with_a_stale_epoch_is_fenced(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.init_producer_id("t", 1000, h.now)  # epoch 2, last epoch -1
    stale = ProducerIdAndEpoch(PID, 0)
    assert code_of(h.coordinator.init_producer_id, "t", 1000, h.now, stale) == (
        ErrorCode.PRODUCER_FENCED
    )
    other = ProducerIdAndEpoch(PID + 50, 2)
    assert code_of(h.coordinator.init_producer_id, "t", 1000, h.now, other) == (
        ErrorCode.PRODUCER_FENCED
    )


def test_init_producer_id_kip360_retry_after_rotation_returns_the_new_id(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.metadata("t").producer_epoch = 32766
    old = ProducerIdAndEpoch(PID, 32766)
    new = h.coordinator.init_producer_id("t", 1000, h.now, old)
    assert new == ProducerIdAndEpoch(PID + 1, 0)
    assert h.coordinator.init_producer_id("t", 1000, h.now, old) == new


def test_init_producer_id_source_error_reaches_the_client_and_creates_nothing(h):
    h.pid_error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert code_of(h.coordinator.init_producer_id, "t", 1000, h.now) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert h.coordinator.metadata("t") is None and h.appends == 0


@pytest.mark.parametrize(
    ("append_error", "client_error"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_init_producer_id_append_failure_maps_errors_and_keeps_state(h, append_error, client_error):
    h.coordinator.init_producer_id("t", 1000, h.now)
    before = h.coordinator.metadata("t").to_record()
    h.fail_with = append_error
    assert code_of(h.coordinator.init_producer_id, "t", 1000, h.now) == client_error
    assert code_of(h.coordinator.init_producer_id, "new", 1000, h.now) == client_error
    assert h.coordinator.metadata("t").to_record() == before
    assert h.coordinator.metadata("t").pending_state is None
    assert h.coordinator.metadata("new") is None


def test_handle_init_producer_id_maps_fenced_to_invalid_producer_epoch_before_v4(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.init_producer_id("t", 1000, h.now)
    req = m.InitProducerIdRequest(
        transactional_id="t", transaction_timeout_ms=1000, producer_id=PID, producer_epoch=0
    )
    assert h.coordinator.handle_init_producer_id(req, 3, h.now).error_code == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    response = h.coordinator.handle_init_producer_id(req, 4, h.now)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (
        ErrorCode.PRODUCER_FENCED,
        -1,
        -1,
    )


def test_handle_init_producer_id_refuses_half_given_producer(h):
    req = m.InitProducerIdRequest(
        transactional_id="t", transaction_timeout_ms=1000, producer_id=5, producer_epoch=-1
    )
    assert h.coordinator.handle_init_producer_id(req, 4, h.now).error_code == (
        ErrorCode.INVALID_REQUEST
    )


# -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------


def test_add_partitions_opens_the_transaction_and_sets_its_start(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.now += 5
    h.coordinator.add_partitions("t", PID, 0, [("a", 0)], h.now)
    record = h.last("t")
    assert (record.state, record.partitions, record.start_ms) == (S.ONGOING, {"a": [0]}, h.now)


def test_add_partitions_already_present_persists_nothing(h):
    ongoing(h)
    appends = h.appends
    h.coordinator.add_partitions("t", PID, 0, [("a", 1)], h.now)
    assert h.appends == appends


@pytest.mark.parametrize(
    ("pid", "epoch", "error"),
    [
        (PID + 1, 0, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (PID, 1, ErrorCode.PRODUCER_FENCED),
    ],
)
def test_add_partitions_refuses_wrong_producer(h, pid, epoch, error):
    h.coordinator.init_producer_id("t", 1000, h.now)
    assert code_of(h.coordinator.add_partitions, "t", pid, epoch, [("a", 0)], h.now) == error


def test_add_partitions_unknown_id_is_invalid_mapping(h):
    assert code_of(h.coordinator.add_partitions, "u", PID, 0, [("a", 0)], h.now) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_add_partitions_while_completing_is_concurrent(h):
    got = ongoing(h)
    h.coordinator.end_txn("t", got.producer_id, got.producer_epoch, True, h.now)
    assert code_of(h.coordinator.add_partitions, "t", PID, 0, [("b", 0)], h.now) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )


def _aptr_v3(tid, pid, epoch, partitions):
    return m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
            for t, ps in partitions.items()
        ],
    )


def _codes_v3(response):
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def test_handle_add_partitions_v3_answers_per_partition(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    response = h.coordinator.handle_add_partitions_to_txn(
        _aptr_v3("t", PID, 0, {"a": [0, 1], "b": [2]}), 3, h.now
    )
    assert _codes_v3(response) == {("a", 0): 0, ("a", 1): 0, ("b", 2): 0}
    fenced = h.coordinator.handle_add_partitions_to_txn(_aptr_v3("t", PID, 7, {"a": [0]}), 1, h.now)
    assert _codes_v3(fenced) == {("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH}


def test_handle_add_partitions_v3_with_rejected_partitions_adds_nothing(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    appends = h.appends
    response = h.coordinator.handle_add_partitions_to_txn(
        _aptr_v3("t", PID, 0, {"a": [0], "secret": [0]}),
        3,
        h.now,
        rejected={("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED},
    )
    assert _codes_v3(response) == {
        ("a", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    assert h.appends == appends


def _aptr_v4(*transactions):
    return m.AddPartitionsToTxnRequest(
        transactions=[
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=verify,
                topics=[
                    m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in partitions.items()
                ],
            )
            for tid, pid, epoch, verify, partitions in transactions
        ]
    )


def _codes_v4(response):
    return {
        r.transactional_id: {
            (t.name, p.partition_index): p.partition_error_code
            for t in r.topic_results
            for p in t.results_by_partition
        }
        for r in response.results_by_transaction
    }


def test_handle_add_partitions_v4_batches_transactions(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    response = h.coordinator.handle_add_partitions_to_txn(
        _aptr_v4(("t", PID, 0, False, {"a": [0]}), ("nobody", 5, 0, False, {"a": [0]})), 4, h.now
    )
    assert _codes_v4(response) == {
        "t": {("a", 0): 0},
        "nobody": {("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING},
    }
    assert h.coordinator.metadata("t").partitions == {("a", 0)}


@pytest.mark.parametrize(
    ("version", "missing"),
    [(4, ErrorCode.INVALID_TXN_STATE), (5, ErrorCode.TRANSACTION_ABORTABLE)],
)
def test_handle_add_partitions_verify_only_checks_membership(h, version, missing):
    ongoing(h, partitions=[("a", 0)])
    appends = h.appends
    response = h.coordinator.handle_add_partitions_to_txn(
        _aptr_v4(("t", PID, 0, True, {"a": [0, 9]})), version, h.now
    )
    assert _codes_v4(response) == {"t": {("a", 0): 0, ("a", 9): missing}}
    assert h.appends == appends and h.coordinator.metadata("t").partitions == {("a", 0)}
    fenced = h.coordinator.handle_add_partitions_to_txn(
        _aptr_v4(("t", PID, 3, True, {"a": [0]})), version, h.now
    )
    assert _codes_v4(fenced) == {"t": {("a", 0): ErrorCode.PRODUCER_FENCED}}


def test_add_offsets_adds_the_groups_offsets_partition(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    response = h.coordinator.handle_add_offsets_to_txn(
        m.AddOffsetsToTxnRequest(
            transactional_id="t", producer_id=PID, producer_epoch=0, group_id="g"
        ),
        3,
        h.now,
    )
    assert response.error_code == 0
    assert h.coordinator.metadata("t").partitions == {(CONSUMER_OFFSETS, GROUP_PARTITION)}
    stale = m.AddOffsetsToTxnRequest(
        transactional_id="t", producer_id=PID, producer_epoch=9, group_id="g"
    )
    assert h.coordinator.handle_add_offsets_to_txn(stale, 1, h.now).error_code == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert h.coordinator.handle_add_offsets_to_txn(stale, 2, h.now).error_code == (
        ErrorCode.PRODUCER_FENCED
    )


# -- EndTxn ---------------------------------------------------------------------------------------


def test_end_txn_persists_prepare_commit_before_answering(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    assert h.last("t").state is S.PREPARE_COMMIT
    [marker] = h.coordinator.drain_markers(h.now)
    assert (marker.commit, marker.producer_id, marker.coordinator_epoch) == (True, PID, 0)
    h.coordinator.markers_written(marker, h.now)
    assert h.last("t").state is S.COMPLETE_COMMIT
    assert h.coordinator.metadata("t").partitions == set()


def test_end_txn_retry_after_completion_is_ok_and_other_outcome_invalid(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    h.complete_markers()
    appends = h.appends
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == ErrorCode.NONE
    assert h.appends == appends
    assert code_of(h.coordinator.end_txn, "t", PID, 0, False, h.now) == ErrorCode.INVALID_TXN_STATE


def test_end_txn_without_a_transaction_is_invalid_state(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == ErrorCode.INVALID_TXN_STATE


def test_end_txn_unknown_id_and_wrong_producer(h):
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    ongoing(h)
    assert code_of(h.coordinator.end_txn, "t", PID + 1, 0, True, h.now) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert code_of(h.coordinator.end_txn, "", PID, 0, True, h.now) == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    ("version", "error"), [(1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)]
)
def test_handle_end_txn_fenced_error_per_version(h, version, error):
    ongoing(h)
    req = m.EndTxnRequest(transactional_id="t", producer_id=PID, producer_epoch=5, committed=True)
    assert h.coordinator.handle_end_txn(req, version, h.now).error_code == error


def test_end_txn_append_failure_keeps_ongoing(h):
    ongoing(h)
    h.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    txn = h.coordinator.metadata("t")
    assert (txn.state, txn.pending_state) == (S.ONGOING, None)
    assert h.coordinator.drain_markers(h.now) == []


def test_end_txn_with_no_partitions_completes_at_once(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    h.coordinator.add_partitions("t", PID, 0, [], h.now)
    h.coordinator.end_txn("t", PID, 0, False, h.now)
    assert h.last("t").state is S.COMPLETE_ABORT
    assert h.coordinator.drain_markers(h.now) == []


# -- markers --------------------------------------------------------------------------------------


def test_markers_retriable_errors_are_retried_after_backoff(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    [marker] = h.coordinator.drain_markers(h.now)
    h.coordinator.markers_written(marker, h.now, {("a", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    assert h.coordinator.drain_markers(h.now) == []
    assert h.coordinator.next_deadline_ms() == h.now + h.config.retry_backoff_ms
    h.now += h.config.retry_backoff_ms
    [retry] = h.coordinator.drain_markers(h.now)
    assert retry.partitions == (("a", 1),)
    h.coordinator.markers_written(retry, h.now)
    assert h.last("t").state is S.COMPLETE_COMMIT


def test_markers_fenced_coordinator_abandons_the_transaction(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    [marker] = h.coordinator.drain_markers(h.now)
    h.coordinator.markers_written(
        marker, h.now, {("a", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    )
    assert h.coordinator.pending_markers() == {}
    assert h.last("t").state is S.PREPARE_COMMIT
    assert code_of(h.coordinator.init_producer_id, "t", 1000, h.now) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )


def test_markers_stale_report_is_ignored(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    [marker] = h.coordinator.drain_markers(h.now)
    h.load(h.partition("t"))  # failover to this broker again at the next epoch
    [fresh] = h.coordinator.drain_markers(h.now)
    assert fresh.coordinator_epoch == marker.coordinator_epoch + 1
    h.coordinator.markers_written(marker, h.now)
    assert h.last("t").state is S.PREPARE_COMMIT
    h.coordinator.markers_written(fresh, h.now)
    assert h.last("t").state is S.COMPLETE_COMMIT


def test_markers_failed_completion_append_is_retried_by_tick(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    [marker] = h.coordinator.drain_markers(h.now)
    h.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    h.coordinator.markers_written(marker, h.now)
    assert h.coordinator.metadata("t").state is S.PREPARE_COMMIT
    h.fail_with = None
    h.now = h.coordinator.next_deadline_ms()
    h.coordinator.tick(h.now)
    assert h.last("t").state is S.COMPLETE_COMMIT


def test_marker_request_builds_the_write_txn_markers_entry(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    [marker] = h.coordinator.drain_markers(h.now)
    entry = marker.to_writable_marker([("a", 1)])
    assert (entry.producer_id, entry.transaction_result, entry.coordinator_epoch) == (PID, True, 0)
    assert [(t.name, t.partition_indexes) for t in entry.topics] == [("a", [1])]


# -- loading -------------------------------------------------------------------------------------


def test_loading_completes_a_prepare_commit_found_in_the_log(h):
    ongoing(h)
    h.coordinator.end_txn("t", PID, 0, True, h.now)
    # The broker dies before any marker is written; a new coordinator loads the partition.
    fresh = Harness(owned=False)
    fresh.log = h.log
    fresh.epochs = dict(h.epochs)
    fresh.load(h.partition("t"))
    [marker] = fresh.coordinator.drain_markers(fresh.now)
    assert (marker.commit, marker.coordinator_epoch, marker.partitions) == (
        True,
        1,
        (("a", 0), ("a", 1)),
    )
    fresh.coordinator.markers_written(marker, fresh.now)
    assert fresh.last("t").state is S.COMPLETE_COMMIT


def test_loading_applies_tombstones_and_skips_unknown_keys(h):
    h.coordinator.init_producer_id("t", 1000, h.now)
    n = h.partition("t")
    h.log[n].append(TransactionLogTombstone("t"))
    h.coordinator.begin_loading(n, 5)
    for entry in h.log[n]:
        h.coordinator.replay(n, entry)
    h.coordinator.replay(n, None)
    h.coordinator.finish_loading(n, h.now)
    assert h.coordinator.metadata("t") is None


def test_replay_outside_loading_is_refused(h):
    with pytest.raises(ValueError):
        h.coordinator.replay(0, None)


# -- time ----------------------------------------------------------------------------------------


def test_tick_aborts_timed_out_transactions_with_an_epoch_bump(h):
    h.coordinator.init_producer_id("t", 5_000, h.now)
    h.coordinator.add_partitions("t", PID, 0, [("a", 0)], h.now)
    h.coordinator.tick(h.now + 5_000)  # not past the timeout yet
    assert h.coordinator.metadata("t").state is S.ONGOING
    h.now += h.config.abort_timed_out_transactions_interval_ms
    assert h.coordinator.next_deadline_ms() <= h.now
    h.coordinator.tick(h.now)
    record = h.last("t")
    assert (record.state, record.producer_epoch) == (S.PREPARE_ABORT, 1)
    [marker] = h.complete_markers()
    assert (marker.commit, marker.producer_epoch) == (False, 1)
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == ErrorCode.PRODUCER_FENCED


def test_tick_expires_idle_transactional_ids_with_a_tombstone(h):
    h.coordinator.init_producer_id("idle", 1000, h.now)
    ongoing(h, "busy")
    h.coordinator.tick(h.now)
    h.now += (
        h.config.transactional_id_expiration_ms
        + h.config.remove_expired_transactional_ids_interval_ms
    )
    h.coordinator.tick(h.now)
    assert h.last("idle") == TransactionLogTombstone("idle")
    assert h.coordinator.metadata("idle") is None
    # An open transaction never expires (it is aborted by its timeout instead).
    assert h.coordinator.metadata("busy") is not None


def test_tick_expiration_failure_keeps_the_ids(h):
    h.coordinator.init_producer_id("idle", 1000, h.now)
    h.coordinator.tick(h.now)
    h.now += (
        h.config.transactional_id_expiration_ms
        + h.config.remove_expired_transactional_ids_interval_ms
    )
    h.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    h.coordinator.tick(h.now)
    txn = h.coordinator.metadata("idle")
    assert txn is not None and txn.pending_state is None


def test_failed_fence_keeps_the_zombie_fenced_and_bumps_once(h):
    ongoing(h)
    h.fail_with = ErrorCode.REQUEST_TIMED_OUT
    assert code_of(h.coordinator.init_producer_id, "t", 60_000, h.now) == (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    txn = h.coordinator.metadata("t")
    assert (txn.state, txn.producer_epoch, txn.has_failed_epoch_fence) == (S.ONGOING, 1, True)
    assert code_of(h.coordinator.end_txn, "t", PID, 0, True, h.now) == ErrorCode.PRODUCER_FENCED
    h.fail_with = None
    assert code_of(h.coordinator.init_producer_id, "t", 60_000, h.now) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert h.last("t").producer_epoch == 1


# -- DescribeTransactions / ListTransactions -----------------------------------------------------


def test_describe_transactions_reports_state_and_partitions(h):
    ongoing(h)
    response = h.coordinator.handle_describe_transactions(
        m.DescribeTransactionsRequest(transactional_ids=["t", "unknown-id-9", ""]), 0
    )
    by_id = {s.transactional_id: s for s in response.transaction_states}
    t = by_id["t"]
    assert (t.error_code, t.transaction_state, t.producer_id, t.transaction_timeout_ms) == (
        0,
        "Ongoing",
        PID,
        60_000,
    )
    assert [(x.topic, x.partitions) for x in t.topics] == [("a", [0, 1])]
    assert by_id["unknown-id-9"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert by_id[""].error_code == ErrorCode.INVALID_REQUEST


def _list(h, version=2, **kw):
    response = h.coordinator.handle_list_transactions(
        m.ListTransactionsRequest(**kw), version, h.now
    )
    return response, sorted(s.transactional_id for s in response.transaction_states)


def test_list_transactions_filters(h):
    ongoing(h, "t1")
    h.coordinator.init_producer_id("t2", 1000, h.now)
    h.now += 10_000
    assert _list(h)[1] == ["t1", "t2"]
    assert _list(h, state_filters=["Ongoing"])[1] == ["t1"]
    assert _list(h, producer_id_filters=[PID + 1])[1] == ["t2"]
    response, ids = _list(h, state_filters=["Bogus"])
    assert (ids, response.unknown_state_filters) == ([], ["Bogus"])
    assert _list(h, state_filters=["Ongoing"], duration_filter=9_000)[1] == ["t1"]
    assert _list(h, state_filters=["Ongoing"], duration_filter=20_000)[1] == []
    assert _list(h, transactional_id_pattern="t[2-9]")[1] == ["t2"]
    assert _list(h, transactional_id_pattern="(")[0].error_code == (
        ErrorCode.INVALID_REGULAR_EXPRESSION
    )


def test_list_transactions_while_loading_is_load_in_progress(h):
    h.coordinator.begin_loading(3, 9)
    assert _list(h)[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_config_defaults_are_kafkas():
    c = TransactionConfig()
    assert (
        c.transaction_max_timeout_ms,
        c.transactional_id_expiration_ms,
        c.abort_timed_out_transactions_interval_ms,
        c.remove_expired_transactional_ids_interval_ms,
        c.state_log_partitions,
    ) == (900_000, 604_800_000, 10_000, 3_600_000, 50)
