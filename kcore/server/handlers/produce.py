"""Produce: append producers' record batches to the partitions this broker leads.

Per partition, independently: find the partition (by name, or by topic id from v13), refuse
what Kafka 4.x refuses (v0-2 payloads, more than one batch from v3 on), append through the
replica manager, and report the base offset or the error with its message. ``acks=0`` gets no
response at all. On a single broker ``acks=all`` completes with the local append; with
followers it waits in the purgatory for the high watermark until ``timeout.ms``
(``KafkaBroker.wait_for_high_watermarks``: NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile,
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below ``min.insync.replicas``).

Authorization (as Kafka's ``handleProduceRequest``): transactional batches need the request's
transactional id, with or without an authorizer, and with one WRITE on it (every partition
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, and nothing is appended); each topic needs
WRITE (TOPIC_AUTHORIZATION_FAILED), checked before whether it exists, so a producer learns
nothing about topics it may not write.

Transaction verification (KIP-890 part 1, ``transaction.partition.verification.enable``, on by
default): a transactional batch whose producer has no ongoing transaction on the partition yet
-- the first batch of a transaction there -- is appended only once the transaction coordinator
has confirmed that the producer added the partition to its transaction (AddPartitionsToTxn).
Without the check, a batch sent without AddPartitionsToTxn, or one that arrives after its
transaction was aborted, opens a transaction no coordinator will ever end: a hanging
transaction that pins the last stable offset. The partition's producer state holds a
verification guard across the round trip (see ``kcore/log/producer_state.py``); a marker
written meanwhile spends the guard and the append is refused. Later batches of the same
transaction find it ongoing in producer state and cost nothing more. As Kafka's
``ReplicaManager``, requests without a transactional id are not verified, and all the
partitions of a request are appended only after the verification, with one question to the
coordinator per request.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kcore.log.log_validator import RecordValidationError
from kcore.log.producer_state import AppendOrigin
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import RecordBatch, iter_batches
from kcore.record.errors import CorruptRecordError, UnsupportedMagicError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry
from kcore.server.request_metrics import PRODUCE_KEY

if TYPE_CHECKING:
    from kcore.server.transaction_coordinator import TransactionCoordinatorService

log = logging.getLogger(__name__)

Resp = m.ProduceResponse

# What a failed verification tells the producer, as Kafka 4.x: AddPartitionsToTxnManager
# (produceRequestVersionToTransactionSupportedOperation) gives Produce v11+ the coordinator's
# TRANSACTION_ABORTABLE (KIP-890, "Version 11 adds support for new error code
# TRANSACTION_ABORTABLE" in ProduceRequest.json) and v3-10 INVALID_TXN_STATE.
# ReplicaManager.handleProduceAppend then words INVALID_TXN_STATE as "Partition was not added
# to the transaction" and turns the coordinator's retriable trouble into NOT_ENOUGH_REPLICAS,
# which every producer retries without refreshing metadata (older clients do not retry
# NOT_COORDINATOR and friends on a produce correctly). Kafka keeps CONCURRENT_TRANSACTIONS
# only for transaction-version-2 producers (Produce v12+ adding the partition itself); kcore
# speaks transaction version 1 only, so v12+ is verified and mapped as v11.
_ABORTABLE_SINCE = 11
_UNVERIFIABLE = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


def _verification_failure(code: ErrorCode, version: int) -> KafkaError:
    """The produce error for a partition the coordinator did not confirm (``code``)."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < _ABORTABLE_SINCE:
        code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.INVALID_TXN_STATE:
        return KafkaError(code, "Partition was not added to the transaction")
    if code in _UNVERIFIABLE:
        return KafkaError(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {code.name}",
        )
    return KafkaError(code)


def _one_batch(records, version: int) -> RecordBatch:
    """Kafka 4.x: from Produce v3 on, a partition's records are exactly one v2 batch.

    Refused with INVALID_RECORD and the words of Kafka's ``ProduceRequest.validateRecords``
    (Kafka logs them and answers the code alone; kcore sends them as the error message too).
    Bytes after the batch, which Kafka trims silently, are refused as well: nothing is lost
    without a word.
    """
    try:
        it = iter_batches(records)
        batches = list(it)
    except UnsupportedMagicError as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
    except CorruptRecordError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    if not batches:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch "
            "per partition",
        )
    if len(batches) > 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly "
            f"one record batch per partition (got {len(batches)})",
        )
    if it.trailing_bytes:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"{it.trailing_bytes} bytes after the record batch: produce requests carry exactly "
            "one whole record batch per partition",
        )
    return batches[0]


def _has_transactional_records(body: m.ProduceRequest) -> bool:
    for topic_data in body.topic_data:
        for pd in topic_data.partition_data:
            try:
                if pd.records is not None and any(
                    b.is_transactional for b in iter_batches(pd.records)
                ):
                    return True
            except (UnsupportedMagicError, CorruptRecordError):
                continue  # refused per partition later
    return False


def _refuse_all(body: m.ProduceRequest, code: ErrorCode) -> m.ProduceResponse:
    return Resp(
        responses=[
            Resp.TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    Resp.PartitionProduceResponse(
                        index=pd.index,
                        error_code=int(code),
                        error_message=code.message,
                        base_offset=-1,
                    )
                    for pd in t.partition_data
                ],
            )
            for t in body.topic_data
        ]
    )


def register(registry: HandlerRegistry) -> None:
    # Advertised from v0 although v0-2 are refused: librdkafka before 2.11.1 disables
    # compression unless Produce v0 is listed (KAFKA-18659); Kafka 4.x does the same.
    @registry.register(0, 0, 12)
    async def produce(ctx, body: m.ProduceRequest):
        broker = ctx.server
        replicas = broker.replica_manager
        now_ms = int(time.time() * 1000)
        response = Resp()
        acks = body.acks
        if acks not in (-1, 0, 1):
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
        # As Kafka's handleProduceRequest, with or without an authorizer: transactional
        # batches need the request's transactional id, and WRITE on it when authorizing.
        tid = body.transactional_id
        if (
            (tid is None or authz.enabled(ctx))
            and _has_transactional_records(body)
            and (
                tid is None
                or not authz.allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)
            )
        ):
            refused = _refuse_all(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            broker.server.metrics.count_response_errors(PRODUCE_KEY, refused)
            return None if acks == 0 else refused
        names = [
            replicas.topic_names.get(t.topic_id, "") if ctx.version >= 13 else t.name
            for t in body.topic_data
        ]
        writable = authz.filter_allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
        ready: list[tuple[str, m.ProduceRequest.PartitionProduceData, RecordBatch, object]] = []
        for topic_data, topic in zip(body.topic_data, names, strict=True):
            topic_response = Resp.TopicProduceResponse(
                name=topic_data.name, topic_id=topic_data.topic_id
            )
            response.responses.append(topic_response)
            for pd in topic_data.partition_data:
                entry = Resp.PartitionProduceResponse(index=pd.index)
                topic_response.partition_responses.append(entry)
                try:
                    if ctx.version < 3:
                        raise KafkaError(
                            ErrorCode.UNSUPPORTED_VERSION,
                            f"Produce v{ctx.version} (message format v0/v1) is not supported",
                        )
                    if not topic:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id")
                    if topic not in writable:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    if pd.records is None:
                        raise KafkaError(ErrorCode.INVALID_RECORD, "null records")
                    ready.append((topic, pd, _one_batch(pd.records, ctx.version), entry))
                except KafkaError as e:
                    _fail(broker, topic, pd.index, entry, e)
        verifying: dict[tuple[str, int], _Verification] = {}
        if body.transactional_id is not None and ready:
            verifying = await _verify(ctx, body.transactional_id, ready, now_ms)
            if verifying:
                now_ms = int(time.time() * 1000)  # the coordinator may have taken a while
        waits = []
        traffic = broker.topic_traffic
        for topic, pd, batch, entry in ready:
            try:
                verification = verifying.get((topic, pd.index))
                if verification is not None:
                    verification.check(replicas, topic, pd.index, batch)
                # No checkpoint between the check above and the append: nothing (a marker
                # above all) can be written to the partition in between.
                info = replicas.append_records(
                    topic,
                    pd.index,
                    pd.records,
                    required_acks=acks,
                    now_ms=now_ms,
                    origin=AppendOrigin.CLIENT,
                )
                entry.base_offset = info.first_offset
                entry.log_append_time_ms = info.log_append_time
                entry.log_start_offset = info.log_start_offset
                traffic.produced(topic, len(pd.records), info.last_offset - info.first_offset + 1)
                if acks == -1:
                    epoch = replicas.partitions[(topic, pd.index)].leader_epoch
                    waits.append((topic, pd.index, info.last_offset + 1, epoch, entry))
            except KafkaError as e:
                _fail(broker, topic, pd.index, entry, e)
        if waits:
            await broker.wait_for_high_watermarks(waits, body.timeout_ms / 1000)
        if acks == 0:
            return None
        return response


def _fail(broker, topic: str, index: int, entry, error: KafkaError) -> None:
    entry.error_code = int(error.code)
    broker.server.metrics.count_error(PRODUCE_KEY, error.code)
    entry.error_message = error.message
    entry.base_offset = -1
    if isinstance(error, RecordValidationError):  # v0-7 have no RecordErrors: not encoded
        entry.record_errors = [
            Resp.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=text)
            for i, text in error.record_errors
        ]
    if error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        _current_leader(broker, topic, index, entry)


class _Verification:
    """One partition's verification: the guard taken before asking the coordinator (None when
    there was nothing to ask), and the error to refuse the append with (None if the answer
    was yes)."""

    __slots__ = ("guard", "failure")

    def __init__(self, guard) -> None:
        self.guard = guard
        self.failure: KafkaError | None = None

    def check(self, replicas, topic: str, index: int, batch: RecordBatch) -> None:
        """Raise the verification's failure, or INVALID_TXN_STATE if the guard is spent (a
        marker or another transactional append came in while the coordinator answered)."""
        if self.failure is not None:
            raise self.failure
        partition = replicas.leader_partition(topic, index)  # it may have moved meanwhile
        partition.producer_state.check_verified(batch.producer_id, batch.producer_epoch, self.guard)


async def _verify(
    ctx, transactional_id: str, ready, now_ms: int
) -> dict[tuple[str, int], _Verification]:
    """Start the verification of every partition whose batch is the first of its producer's
    transaction there, ask the coordinator once for all of them, and record the answers.

    Returns the partitions to check right before their append (the others need no check).
    Raises nothing: every failure is the partition's (all of them, for a request mixing
    producers).
    """
    broker = ctx.server
    producers = set()
    for _, _, batch, _ in ready:
        if batch.is_transactional:
            producers.add((batch.producer_id, batch.producer_epoch))
    if not producers:
        return {}
    verifying: dict[tuple[str, int], _Verification] = {}
    if len(producers) > 1:
        # Kafka's ReplicaManager refuses the whole request: one verification is one producer.
        error = KafkaError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            "Transactional records contained more than one producer ID",
        )
        for topic, pd, _, _ in ready:
            verification = verifying[(topic, pd.index)] = _Verification(None)
            verification.failure = error
        return verifying
    # Read per request: a config whose value changes at run time would take effect at once.
    if not broker.dynamic_value("transaction.partition.verification.enable"):
        return {}
    ((producer_id, producer_epoch),) = producers
    replicas = broker.replica_manager
    for topic, pd, batch, _ in ready:
        if not batch.is_transactional:
            continue
        partition = replicas.partitions.get((topic, pd.index))
        if partition is None or not partition.is_leader:
            # Nothing to ask: the check answers UNKNOWN_TOPIC_OR_PARTITION or
            # NOT_LEADER_OR_FOLLOWER, or INVALID_TXN_STATE (no guard) if this broker became
            # the leader while the coordinator answered for the other partitions.
            verifying[(topic, pd.index)] = _Verification(None)
            continue
        guard = partition.producer_state.maybe_start_transaction_verification(
            producer_id, producer_epoch, now_ms
        )
        if guard is not None:  # None: the transaction is ongoing here, nothing to ask
            verifying[(topic, pd.index)] = _Verification(guard)
    asking = [tp for tp, v in verifying.items() if v.guard is not None]
    if not asking:
        return verifying
    coordinator: TransactionCoordinatorService = broker.transaction_coordinator
    codes = await coordinator.verify_partitions(
        transactional_id, producer_id, producer_epoch, asking
    )
    for tp in asking:
        code = codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != ErrorCode.NONE:
            verifying[tp].failure = _verification_failure(code, ctx.version)
    return verifying


def _current_leader(broker, topic: str, index: int, entry) -> None:
    """v10+: tell the producer who leads now, so it need not refresh all metadata."""
    partition = broker.replica_manager.partitions.get((topic, index))
    if partition is not None:
        entry.current_leader = Resp.LeaderIdAndEpoch(
            leader_id=partition.state.leader, leader_epoch=partition.state.leader_epoch
        )
