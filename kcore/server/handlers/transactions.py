"""Producer ids and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers, DescribeTransactions, ListTransactions.

The coordinator APIs hand the request to the pure transaction coordinator through its Trio
shell (:mod:`kcore.server.transaction_coordinator`), which decides and answers once what the
decision wrote to ``__transaction_state`` is durable. InitProducerId without a transactional id
(an idempotent producer) needs no coordinator: a fresh producer id from this broker's block, at
epoch 0, as Kafka gives it. WriteTxnMarkers is the partition leaders' side: a coordinator (this
broker's own or another's) asks it to append COMMIT/ABORT markers.

Versions: InitProducerId 0-5 (v6 is KIP-939's two-phase commit), AddPartitionsToTxn 0-5 (v4+
is the brokers' batched form, which needs cluster permission: kcore has no ACLs yet and
accepts it), AddOffsetsToTxn 0-4, EndTxn 0-4 (v5 belongs to KIP-890's transaction version 2,
which kcore does not support), WriteTxnMarkers 0-1 (v2 carries the transaction version),
DescribeTransactions 0, ListTransactions 0-2.
"""

from __future__ import annotations

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.registry import HandlerRegistry
from kcore.server.transaction_coordinator import APPEND_TIMEOUT_S, write_txn_markers

# How long InitProducerId may wait for this broker's first block of producer ids before it
# answers COORDINATOR_LOAD_IN_PROGRESS (which clients retry).
PRODUCER_ID_WAIT_S = 5.0


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
            rejected = _unknown_partitions(ctx.server.metadata_image, body.v3_and_below_topics)
        return await svc.call(
            lambda now: svc.core.handle_add_partitions_to_txn(body, version, now, rejected)
        )

    @registry.register(25, 0, 4)
    async def add_offsets_to_txn(ctx, body: m.AddOffsetsToTxnRequest) -> m.AddOffsetsToTxnResponse:
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_add_offsets_to_txn(body, version, now))

    @registry.register(26, 0, 4)
    async def end_txn(ctx, body: m.EndTxnRequest) -> m.EndTxnResponse:
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_end_txn(body, version, now))

    @registry.register(27, 0, 1)
    async def write_txn_markers_handler(
        ctx, body: m.WriteTxnMarkersRequest
    ) -> m.WriteTxnMarkersResponse:
        # Kafka requires ClusterAction here; kcore has no ACLs yet, so every caller may.
        results = await write_txn_markers(ctx.server, body.markers, APPEND_TIMEOUT_S)
        return m.WriteTxnMarkersResponse(markers=results)

    @registry.register(65, 0, 0)
    async def describe_transactions(
        ctx, body: m.DescribeTransactionsRequest
    ) -> m.DescribeTransactionsResponse:
        svc = ctx.server.transaction_coordinator
        return svc.core.handle_describe_transactions(body, ctx.version)

    @registry.register(66, 0, 2)
    async def list_transactions(ctx, body: m.ListTransactionsRequest) -> m.ListTransactionsResponse:
        svc = ctx.server.transaction_coordinator
        version = ctx.version
        return await svc.call(lambda now: svc.core.handle_list_transactions(body, version, now))
