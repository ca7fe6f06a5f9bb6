"""ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers.

All four answer per partition from the partition on its leader (``kcore.replica``); errors are reported in
the partition's entry and never fail the request.

Authorization (with an authorizer, as Kafka): ListOffsets needs DESCRIBE on the topic,
OffsetForLeaderEpoch CLUSTER_ACTION on the cluster (followers) or DESCRIBE on the topic
(consumers, KIP-320), DeleteRecords DELETE and DescribeProducers READ on the topic; a refused
topic's partitions answer TOPIC_AUTHORIZATION_FAILED and are not touched.
"""

from __future__ import annotations

import time
from collections import Counter

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

LO = m.ListOffsetsResponse

# The current leader epoch of the requests that carry none (DeleteRecords, DescribeProducers):
# ReplicaManager.leader_partition then only checks that this node leads the partition.
NO_EPOCH = -1


def _denied() -> KafkaError:
    return KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _allowed_topics(ctx, operation: AclOperation, names) -> set[str]:
    return authz.filter_allowed(ctx, operation, ResourceType.TOPIC, names)


def _answer_partitions(
    ctx, allowed, requested, topic_result, partition_result, answer, *, with_message=False
) -> list:
    """The per-partition loop of all four APIs: one result per requested topic and partition,
    in request order.

    ``requested`` yields ``(topic name, partitions)``, a partition being ``(partition index,
    current leader epoch (``NO_EPOCH``: not checked), the request's partition entry)``;
    ``topic_result(name)`` and ``partition_result(index)`` make the empty results, the topic's
    holding its partitions' in ``.partitions``. A topic not in ``allowed`` answers
    TOPIC_AUTHORIZATION_FAILED before its partitions are looked up, so a refused principal
    learns nothing of them (not even whether they exist); otherwise
    ``answer(partition, request entry, result)`` fills the result from the partition this node
    leads. A KafkaError from the lookup or the answer goes in the partition's ``error_code``
    (and ``error_message``, ``with_message``) and never fails the request.
    """
    replicas = ctx.server.replica_manager
    results = []
    for name, partitions in requested:
        tr = topic_result(name)
        results.append(tr)
        for index, current_leader_epoch, p in partitions:
            entry = partition_result(index)
            tr.partitions.append(entry)
            try:
                if name not in allowed:
                    raise _denied()
                partition = replicas.leader_partition(name, index, current_leader_epoch)
                answer(partition, p, entry)
            except KafkaError as e:
                entry.error_code = int(e.code)
                if with_message:
                    entry.error_message = e.message
    return results


def register(registry: HandlerRegistry) -> None:
    @registry.register(2)
    async def list_offsets(ctx, body: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
        allowed = _allowed_topics(ctx, AclOperation.DESCRIBE, (t.name for t in body.topics))

        # As Kafka's ReplicaManager.fetchOffset: a partition asked twice is answered
        # INVALID_REQUEST each time, and not looked up.
        asked = Counter((t.name, p.partition_index) for t in body.topics for p in t.partitions)

        def answer(partition, p, entry) -> None:
            if asked[(partition.topic, p.partition_index)] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "partition asked more than once")
            offset, ts, epoch = partition.fetch_offset_for_timestamp(
                p.timestamp, body.isolation_level, body.replica_id
            )
            entry.offset, entry.timestamp, entry.leader_epoch = offset, ts, epoch
            if ctx.version == 0:
                entry.old_style_offsets = [offset] if offset >= 0 else []

        requested = (
            (t.name, ((p.partition_index, p.current_leader_epoch, p) for p in t.partitions))
            for t in body.topics
        )
        topics = _answer_partitions(
            ctx,
            allowed,
            requested,
            lambda name: LO.ListOffsetsTopicResponse(name=name),
            lambda index: LO.ListOffsetsPartitionResponse(partition_index=index),
            answer,
        )
        return LO(topics=topics)

    @registry.register(23)
    async def offset_for_leader_epoch(ctx, body: m.OffsetForLeaderEpochRequest):
        Resp = m.OffsetForLeaderEpochResponse
        # Once only for followers (cluster permission); consumers may also use it (KIP-320).
        if authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
            allowed = {t.topic for t in body.topics}
        else:
            allowed = _allowed_topics(ctx, AclOperation.DESCRIBE, (t.topic for t in body.topics))

        def answer(partition, p, entry) -> None:
            entry.leader_epoch, entry.end_offset = partition.end_offset_for_epoch(p.leader_epoch)

        requested = (
            (t.topic, ((p.partition, p.current_leader_epoch, p) for p in t.partitions))
            for t in body.topics
        )
        topics = _answer_partitions(
            ctx,
            allowed,
            requested,
            lambda name: Resp.OffsetForLeaderTopicResult(topic=name),
            lambda index: Resp.EpochEndOffset(partition=index),
            answer,
        )
        return Resp(topics=topics)

    @registry.register(21)
    async def delete_records(ctx, body: m.DeleteRecordsRequest) -> m.DeleteRecordsResponse:
        replicas = ctx.server.replica_manager
        Resp = m.DeleteRecordsResponse
        allowed = _allowed_topics(ctx, AclOperation.DELETE, (t.name for t in body.topics))

        def answer(partition, p, entry) -> None:
            # Through the write guard: mirror topics are read-only (D-18).
            entry.low_watermark = replicas.delete_records(
                partition.topic, partition.index, p.offset, int(time.time() * 1000)
            )

        requested = (
            (t.name, ((p.partition_index, NO_EPOCH, p) for p in t.partitions)) for t in body.topics
        )
        topics = _answer_partitions(
            ctx,
            allowed,
            requested,
            lambda name: Resp.DeleteRecordsTopicResult(name=name),
            lambda index: Resp.DeleteRecordsPartitionResult(
                partition_index=index, low_watermark=-1
            ),
            answer,
        )
        return Resp(topics=topics)

    @registry.register(61)
    async def describe_producers(ctx, body: m.DescribeProducersRequest):
        Resp = m.DescribeProducersResponse
        allowed = _allowed_topics(ctx, AclOperation.READ, (t.name for t in body.topics))

        def answer(partition, _, entry) -> None:
            psm = partition.producer_state
            for pid, e in sorted(psm.producers.items()):
                entry.active_producers.append(
                    Resp.ProducerState(
                        producer_id=pid,
                        producer_epoch=e.producer_epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=(
                            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
                        ),
                    )
                )

        requested = (
            (t.name, ((index, NO_EPOCH, None) for index in t.partition_indexes))
            for t in body.topics
        )
        topics = _answer_partitions(
            ctx,
            allowed,
            requested,
            lambda name: Resp.TopicResponse(name=name),
            lambda index: Resp.PartitionResponse(partition_index=index),
            answer,
            with_message=True,
        )
        return Resp(topics=topics)
