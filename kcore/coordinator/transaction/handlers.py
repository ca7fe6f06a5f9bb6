"""Wire-level entry points of the transaction coordinator: request message in, response out.

Theory of operation
-------------------
:class:`RequestHandlers` is the half of :class:`~kcore.coordinator.transaction.coordinator.
TransactionCoordinator` that speaks Kafka messages. Each ``handle_*`` method takes the decoded
request, its API version and ``now_ms``, calls the typed operation, and builds the response
with the error where that API version puts it. It never raises for a Kafka error: a
:class:`KafkaError` becomes the response's error code, so the shell only encodes what it gets.

Version rules, as Kafka's request handlers apply them:

* PRODUCER_FENCED (KIP-588) is understood from InitProducerId v4, AddPartitionsToTxn v2,
  AddOffsetsToTxn v2 and EndTxn v2; older versions receive INVALID_PRODUCER_EPOCH instead.
* AddPartitionsToTxn v0-3 is the producer's form (one transaction, errors per partition);
  v4+ is the brokers' batched form (``transactions``, each maybe ``verify_only``). A
  verify-only partition that is not in the transaction gets TRANSACTION_ABORTABLE from v5,
  INVALID_TXN_STATE before (v4 clients do not know the newer code).
* EndTxn v5 (transaction version 2, an epoch bump per transaction) is answered with the
  transaction-version-1 semantics and ``producer_id``/``producer_epoch`` of -1, as Kafka answers
  a client that does not use transaction version 2. The shell must therefore not advertise the
  ``transaction.version`` feature at level 2.

Authorization is the shell's: it answers denied requests itself, or, for AddPartitionsToTxn
v0-3, passes the partitions it refused in ``rejected`` and this layer answers as Kafka does
(the refused partitions with their error, the others OPERATION_NOT_ATTEMPTED, nothing added).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kcore.coordinator.transaction.metadata import (
    ProducerIdAndEpoch,
    TopicPartition,
    TransactionMetadata,
)
from kcore.coordinator.transaction.state import TransactionState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["RequestHandlers"]

# First version of each API that understands PRODUCER_FENCED.
_FENCED_SINCE = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2}
# First AddPartitionsToTxn version that understands TRANSACTION_ABORTABLE.
_ABORTABLE_SINCE = 5

_APTR = m.AddPartitionsToTxnResponse


def _for_version(api: str, version: int, code: ErrorCode | int) -> int:
    if code == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE[api]:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)


def _topic_results(
    errors: Mapping[TopicPartition, int],
) -> list[_APTR.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[_APTR.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(
            _APTR.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=int(code)
            )
        )
    return [
        _APTR.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results)
        for topic, results in by_topic.items()
    ]


def _partitions(topics) -> list[TopicPartition]:
    return [(t.name, p) for t in topics for p in t.partitions]


class RequestHandlers:
    """Message-level API, mixed into ``TransactionCoordinator`` (uses only its public typed
    operations)."""

    # -- typed operations provided by TransactionCoordinator ---------------------------------
    if TYPE_CHECKING:

        def init_producer_id(
            self, transactional_id, transaction_timeout_ms, now_ms, expected=None
        ): ...
        def add_partitions(
            self, transactional_id, producer_id, producer_epoch, partitions, now_ms
        ): ...
        def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions): ...
        def add_offsets(self, transactional_id, producer_id, producer_epoch, group_id, now_ms): ...
        def end_txn(self, transactional_id, producer_id, producer_epoch, commit, now_ms): ...
        def lookup(self, transactional_id) -> TransactionMetadata | None: ...
        def all_metadata(self) -> dict[str, TransactionMetadata]: ...
        def loading_partitions(self) -> list[int]: ...

    # -- InitProducerId ----------------------------------------------------------------------

    def handle_init_producer_id(
        self, request: m.InitProducerIdRequest, version: int, now_ms: int
    ) -> m.InitProducerIdResponse:
        """InitProducerId v0-6. ``producer_id``/``producer_epoch`` (v3+) must be both -1 or both
        set (else INVALID_REQUEST). Two-phase commit (v6 ``enable2_pc``/``keep_prepared_txn``,
        KIP-939) is not supported: INVALID_REQUEST."""
        response = m.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        try:
            if request.enable2_pc or request.keep_prepared_txn:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "two-phase commit is not supported")
            pid, epoch = request.producer_id, request.producer_epoch
            if (pid == -1) != (epoch == -1):
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, "producer id and epoch must both be set or unset"
                )
            expected: ProducerIdAndEpoch | None = (
                None if pid == -1 else ProducerIdAndEpoch(pid, epoch)
            )
            result = self.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, now_ms, expected
            )
        except KafkaError as e:
            response.error_code = _for_version("InitProducerId", version, e.code)
            return response
        response.producer_id = result.producer_id
        response.producer_epoch = result.producer_epoch
        return response

    # -- AddPartitionsToTxn ------------------------------------------------------------------

    def handle_add_partitions_to_txn(
        self,
        request: m.AddPartitionsToTxnRequest,
        version: int,
        now_ms: int,
        rejected: Mapping[TopicPartition, int] | None = None,
    ) -> m.AddPartitionsToTxnResponse:
        """AddPartitionsToTxn v0-5: the producer form (v0-3) or the batched broker form (v4+).
        ``rejected`` (v0-3 only): partitions the shell refused, with their error code
        (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION)."""
        if version <= 3:
            partitions = _partitions(request.v3_and_below_topics)
            if rejected:
                errors = {
                    tp: int(rejected.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED))
                    for tp in partitions
                }
                return _APTR(results_by_topic_v3_and_below=_topic_results(errors))
            try:
                self.add_partitions(
                    request.v3_and_below_transactional_id,
                    request.v3_and_below_producer_id,
                    request.v3_and_below_producer_epoch,
                    partitions,
                    now_ms,
                )
                code = int(ErrorCode.NONE)
            except KafkaError as e:
                code = _for_version("AddPartitionsToTxn", version, e.code)
            return _APTR(
                results_by_topic_v3_and_below=_topic_results(dict.fromkeys(partitions, code))
            )
        results = []
        for txn in request.transactions:
            partitions = _partitions(txn.topics)
            errors: dict[TopicPartition, int]
            try:
                if txn.verify_only:
                    verified = self.verify_partitions(
                        txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions
                    )
                    errors = {tp: int(code) for tp, code in verified.items()}
                    if version < _ABORTABLE_SINCE:
                        errors = {
                            tp: int(ErrorCode.INVALID_TXN_STATE)
                            if code == ErrorCode.TRANSACTION_ABORTABLE
                            else code
                            for tp, code in errors.items()
                        }
                else:
                    self.add_partitions(
                        txn.transactional_id,
                        txn.producer_id,
                        txn.producer_epoch,
                        partitions,
                        now_ms,
                    )
                    errors = dict.fromkeys(partitions, int(ErrorCode.NONE))
            except KafkaError as e:
                errors = dict.fromkeys(partitions, int(e.code))
            results.append(
                _APTR.AddPartitionsToTxnResult(
                    transactional_id=txn.transactional_id, topic_results=_topic_results(errors)
                )
            )
        return _APTR(results_by_transaction=results)

    # -- AddOffsetsToTxn / EndTxn -----------------------------------------------------------

    def handle_add_offsets_to_txn(
        self, request: m.AddOffsetsToTxnRequest, version: int, now_ms: int
    ) -> m.AddOffsetsToTxnResponse:
        """AddOffsetsToTxn v0-4."""
        try:
            self.add_offsets(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
                now_ms,
            )
        except KafkaError as e:
            return m.AddOffsetsToTxnResponse(
                error_code=_for_version("AddOffsetsToTxn", version, e.code)
            )
        return m.AddOffsetsToTxnResponse()

    def handle_end_txn(
        self, request: m.EndTxnRequest, version: int, now_ms: int
    ) -> m.EndTxnResponse:
        """EndTxn v0-5 (v5 answered with transaction-version-1 semantics, see above)."""
        response = m.EndTxnResponse(producer_id=-1, producer_epoch=-1)
        try:
            self.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                now_ms,
            )
        except KafkaError as e:
            response.error_code = _for_version("EndTxn", version, e.code)
        return response

    # -- DescribeTransactions / ListTransactions ----------------------------------------------

    def describe_transaction(
        self, transactional_id: str
    ) -> m.DescribeTransactionsResponse.TransactionState:
        """One DescribeTransactions entry: INVALID_REQUEST for an empty id, NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND for an unknown (or expiring)
        id, else the state, producer, timeout, start time and partitions."""
        entry = m.DescribeTransactionsResponse.TransactionState(
            transactional_id=transactional_id, producer_id=-1, producer_epoch=-1
        )
        try:
            if not transactional_id:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
            txn = self.lookup(transactional_id)
            if txn is None or txn.state is TransactionState.DEAD:
                raise KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        except KafkaError as e:
            entry.error_code = int(e.code)
            return entry
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            topics.setdefault(topic, []).append(partition)
        entry.transaction_state = txn.state.kafka_name
        entry.transaction_timeout_ms = txn.timeout_ms
        entry.transaction_start_time_ms = txn.start_ms
        entry.producer_id = txn.producer_id
        entry.producer_epoch = txn.producer_epoch
        entry.topics = [
            m.DescribeTransactionsResponse.TopicData(topic=t, partitions=ps)
            for t, ps in topics.items()
        ]
        return entry

    def handle_describe_transactions(
        self, request: m.DescribeTransactionsRequest, version: int
    ) -> m.DescribeTransactionsResponse:
        """DescribeTransactions v0: one entry per requested id (the shell answers ids the caller
        may not describe with TRANSACTIONAL_ID_AUTHORIZATION_FAILED itself)."""
        return m.DescribeTransactionsResponse(
            transaction_states=[self.describe_transaction(t) for t in request.transactional_ids]
        )

    def handle_list_transactions(
        self, request: m.ListTransactionsRequest, version: int, now_ms: int
    ) -> m.ListTransactionsResponse:
        """ListTransactions v0-2 over the ids this broker coordinates. Filters combine with
        AND: state names (unknown names are echoed in ``unknown_state_filters`` and match
        nothing), producer ids, v1 ``duration_filter`` (only transactions started more than that
        many ms ago), v2 ``transactional_id_pattern`` (a regular expression the whole id must
        match; null or empty matches all). COORDINATOR_LOAD_IN_PROGRESS while any partition
        loads, as Kafka."""
        response = m.ListTransactionsResponse()
        if self.loading_partitions():
            response.error_code = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            return response
        pattern = None
        if request.transactional_id_pattern:
            try:
                pattern = re.compile(request.transactional_id_pattern)
            except re.error:
                response.error_code = int(ErrorCode.INVALID_REGULAR_EXPRESSION)
                return response
        states = set()
        for name in request.state_filters:
            state = TransactionState.from_kafka_name(name)
            if state is None:
                response.unknown_state_filters.append(name)
            else:
                states.add(state)
        producer_ids = set(request.producer_id_filters)
        duration = request.duration_filter

        def include(tid: str, txn: TransactionMetadata) -> bool:
            # Dead ids are being removed: never listed.
            if txn.state is TransactionState.DEAD:
                return False
            if producer_ids and txn.producer_id not in producer_ids:
                return False
            if request.state_filters and txn.state not in states:
                return False
            if duration >= 0 and now_ms - txn.start_ms <= duration:
                return False
            return pattern is None or pattern.fullmatch(tid) is not None

        response.transaction_states = [
            m.ListTransactionsResponse.TransactionState(
                transactional_id=tid,
                producer_id=txn.producer_id,
                transaction_state=txn.state.kafka_name,
            )
            for tid, txn in sorted(self.all_metadata().items())
            if include(tid, txn)
        ]
        return response
