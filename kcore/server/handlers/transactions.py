"""Producer ids and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers, DescribeTransactions, ListTransactions.

The coordinator APIs hand the request to the pure transaction coordinator through its Trio
shell (:mod:`kcore.server.transaction_coordinator`), which decides and answers once what the
decision wrote to ``__transaction_state`` is durable. InitProducerId without a transactional id
(an idempotent producer) needs no coordinator: a fresh producer id from this broker's block, at
epoch 0, as Kafka gives it. WriteTxnMarkers is the partition leaders' side: a coordinator (this
broker's own or another's) asks it to append COMMIT/ABORT markers.

Versions: InitProducerId 0-5 (v6 is KIP-939's two-phase commit), AddPartitionsToTxn 0-5 (v4+
is the brokers' batched form), AddOffsetsToTxn 0-4, EndTxn 0-4 (v5 belongs to KIP-890's transaction version 2,
which kcore does not support), WriteTxnMarkers 0-1 (v2 carries the transaction version),
DescribeTransactions 0, ListTransactions 0-2.

Authorization (with an authorizer, as Kafka's ``KafkaApis``), before the coordinator sees the
request:

* InitProducerId: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
  idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
  (CLUSTER_AUTHORIZATION_FAILED).
* AddPartitionsToTxn v0-3: WRITE on the transactional id (every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (internal topics never): one
  refused partition fails the request, its partitions TOPIC_AUTHORIZATION_FAILED and the others
  OPERATION_NOT_ATTEMPTED. v4+ (brokers): CLUSTER_ACTION (top-level CLUSTER_AUTHORIZATION_FAILED).
* AddOffsetsToTxn: WRITE on the transactional id, READ on the group. EndTxn: WRITE on the
  transactional id.
* WriteTxnMarkers: CLUSTER_ACTION; refused, every partition answers
  CLUSTER_AUTHORIZATION_FAILED and no marker is written.
* DescribeTransactions: DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
  the partitions of topics the principal may not DESCRIBE are left out. ListTransactions: only
  the ids the principal may DESCRIBE.
"""

from __future__ import annotations

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.metadata.topic_names import INTERNAL_TOPICS
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry
from kcore.server.transaction_coordinator import APPEND_TIMEOUT_S, write_txn_markers

# How long InitProducerId may wait for this broker's first block of producer ids before it
# answers COORDINATOR_LOAD_IN_PROGRESS (which clients retry).
PRODUCER_ID_WAIT_S = 5.0
TXN_ID = ResourceType.TRANSACTIONAL_ID
WRITE, DESCRIBE = AclOperation.WRITE, AclOperation.DESCRIBE


def _unwritable_partitions(ctx, topics) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3: partitions of topics the principal may not WRITE (internal
    topics are never added by a producer)."""
    writable = authz.filter_allowed(
        ctx, WRITE, ResourceType.TOPIC, (t.name for t in topics if t.name not in INTERNAL_TOPICS)
    )
    return {
        (t.name, index): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for t in topics
        if t.name not in writable
        for index in t.partitions
    }


def _mirror_partitions(broker, topics) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3: partitions of read-only mirror topics (D-18) never join a
    transaction (TOPIC_IS_MIRROR), so no transactional write can start there."""
    refused: dict[tuple[str, int], int] = {}
    for t in topics:
        try:
            broker.mirror_write_guard.check_topic(t.name, "add to a transaction")
        except KafkaError as e:
            refused.update({(t.name, index): int(e.code) for index in t.partitions})
    return refused


def _init_producer_id_denied(ctx, transactional_id: str | None) -> ErrorCode:
    if transactional_id is not None:
        if authz.allowed(ctx, WRITE, TXN_ID, transactional_id):
            return ErrorCode.NONE
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if authz.allowed_on_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) or authz.allowed_on_any_topic(
        ctx, WRITE
    ):
        return ErrorCode.NONE
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _add_partitions_refused(topics, code: ErrorCode) -> m.AddPartitionsToTxnResponse:
    R = m.AddPartitionsToTxnResponse
    return R(
        results_by_topic_v3_and_below=[
            R.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(
                        partition_index=i, partition_error_code=int(code)
                    )
                    for i in t.partitions
                ],
            )
            for t in topics
        ]
    )


def _markers_refused(markers, code: ErrorCode) -> m.WriteTxnMarkersResponse:
    """Every partition of every marker answered ``code`` (WriteTxnMarkers has no top-level
    error)."""
    R = m.WriteTxnMarkersResponse
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=i, error_code=int(code)
                            )
                            for i in t.partition_indexes
                        ],
                    )
                    for t in marker.topics
                ],
            )
            for marker in markers
        ]
    )


def _unknown_partitions(image, topics) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3: partitions the metadata does not know (Kafka refuses the whole
    request then, naming them UNKNOWN_TOPIC_OR_PARTITION)."""
    rejected = {}
    for topic in topics:
        info = image.topics.by_name.get(topic.name)
        for index in topic.partitions:
            if info is None or index not in info.partitions:
                rejected[(topic.name, index)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return rejected


def register(registry: HandlerRegistry) -> None:
    @registry.register(22, 0, 5)
    async def init_producer_id(ctx, body: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
        denied = _init_producer_id_denied(ctx, body.transactional_id)
        if denied:
            return m.InitProducerIdResponse(
                error_code=int(denied), producer_id=-1, producer_epoch=-1
            )
        svc = ctx.server.transaction_coordinator
        supply = svc.producer_ids
        if not supply.available:
            await supply.wait_available(PRODUCER_ID_WAIT_S)
        if body.transactional_id is None:
            try:
                pid = supply.next_producer_id()
            except KafkaError as e:  # still no block of ids: the client retries
                return m.InitProducerIdResponse(
                    error_code=int(e.code), producer_id=-1, producer_epoch=-1
                )
            return m.InitProducerIdResponse(producer_id=pid, producer_epoch=0)
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_init_producer_id(body, version, now))

    @registry.register(24, 0, 5)
    async def add_partitions_to_txn(
        ctx, body: m.AddPartitionsToTxnRequest
    ) -> m.AddPartitionsToTxnResponse:
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        rejected = None
        if version <= 3:
            topics = body.v3_and_below_topics
            if not authz.allowed(ctx, WRITE, TXN_ID, body.v3_and_below_transactional_id):
                return _add_partitions_refused(
                    topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                )
            unknown = _unknown_partitions(ctx.server.metadata_image, topics)
            rejected = {
                **unknown,
                **_mirror_partitions(ctx.server, topics),
                **_unwritable_partitions(ctx, topics),
            }
        elif not authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return await svc.call(
            lambda now: svc.core.handle_add_partitions_to_txn(body, version, now, rejected)
        )

    @registry.register(25, 0, 4)
    async def add_offsets_to_txn(ctx, body: m.AddOffsetsToTxnRequest) -> m.AddOffsetsToTxnResponse:
        authz.require(ctx, WRITE, TXN_ID, body.transactional_id)
        authz.require(ctx, AclOperation.READ, ResourceType.GROUP, body.group_id)
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_add_offsets_to_txn(body, version, now))

    @registry.register(26, 0, 4)
    async def end_txn(ctx, body: m.EndTxnRequest) -> m.EndTxnResponse:
        authz.require(ctx, WRITE, TXN_ID, body.transactional_id)
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_end_txn(body, version, now))

    @registry.register(27, 0, 1)
    async def write_txn_markers_handler(
        ctx, body: m.WriteTxnMarkersRequest
    ) -> m.WriteTxnMarkersResponse:
        if not authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
            return _markers_refused(body.markers, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        results = await write_txn_markers(ctx.server, body.markers, APPEND_TIMEOUT_S)
        return m.WriteTxnMarkersResponse(markers=results)

    @registry.register(65, 0, 0)
    async def describe_transactions(
        ctx, body: m.DescribeTransactionsRequest
    ) -> m.DescribeTransactionsResponse:
        svc = ctx.server.transaction_coordinator
        ids = body.transactional_ids
        describable = authz.filter_allowed(ctx, DESCRIBE, TXN_ID, ids)
        request = authz.replace(body, transactional_ids=[t for t in ids if t in describable])
        response = svc.core.handle_describe_transactions(request, ctx.version)
        if not authz.enabled(ctx):
            return response
        answered = iter(response.transaction_states)
        S = m.DescribeTransactionsResponse.TransactionState
        states = []
        for tid in ids:
            if tid not in describable:
                code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                states.append(S(transactional_id=tid, error_code=int(code)))
                continue
            state = next(answered)
            topics = authz.filter_allowed(
                ctx, DESCRIBE, ResourceType.TOPIC, (t.topic for t in state.topics)
            )
            state.topics = [t for t in state.topics if t.topic in topics]
            states.append(state)
        response.transaction_states = states
        return response

    @registry.register(66, 0, 2)
    async def list_transactions(ctx, body: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        response = await svc.call(lambda now: svc.core.handle_list_transactions(body, version, now))
        describable = authz.filter_allowed(
            ctx, DESCRIBE, TXN_ID, (t.transactional_id for t in response.transaction_states)
        )
        response.transaction_states = [
            t for t in response.transaction_states if t.transactional_id in describable
        ]
        return response
