"""ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers.

All four answer per partition from the partition's log on its leader; errors are reported in
the partition's entry and never fail the request.

Authorization (with an authorizer, as Kafka): ListOffsets needs DESCRIBE on the topic,
OffsetForLeaderEpoch CLUSTER_ACTION on the cluster (followers) or DESCRIBE on the topic
(consumers, KIP-320), DeleteRecords DELETE and DescribeProducers READ on the topic; a refused
topic's partitions answer TOPIC_AUTHORIZATION_FAILED and are not touched.
"""

from __future__ import annotations

import time
from collections import Counter

from kcore.log.partition_log import FetchIsolation, PartitionLog
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import RecordBatch
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6

LO = m.ListOffsetsResponse

# The current leader epoch of the requests that carry none (DeleteRecords, DescribeProducers):
# ReplicaManager.leader_partition then only checks that this node leads the partition.
NO_EPOCH = -1


def _denied() -> KafkaError:
    return KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _allowed_topics(ctx, operation: AclOperation, names) -> set[str]:
    return authz.filter_allowed(ctx, operation, ResourceType.TOPIC, names)


def _batch_at(plog: PartitionLog, offset: int) -> RecordBatch | None:
    info = plog.read(offset, 1, FetchIsolation.LOG_END)
    if not info.records:
        return None
    return RecordBatch(info.records[0].read())


def _first_record_at_or_after(plog: PartitionLog, timestamp: int, upper: int):
    """(offset, timestamp) of the first record with a timestamp >= ``timestamp`` below
    ``upper`` (Kafka answers with the exact record, not its batch)."""
    offset = plog.offset_for_timestamp(timestamp)
    while offset is not None and offset < upper:
        batch = _batch_at(plog, offset)
        if batch is None:
            return None
        for r in batch.records():
            if r.offset >= offset and r.timestamp >= timestamp and r.offset < upper:
                return r.offset, r.timestamp
        offset = batch.last_offset + 1
        if offset >= plog.log_end_offset:
            return None
    return None


def _max_timestamp_record(plog: PartitionLog) -> tuple[int, int] | None:
    ts, batch_offset = plog.max_timestamp_and_offset()
    if batch_offset < 0:
        return None
    batch = _batch_at(plog, batch_offset)
    if batch is None:
        return None
    for r in batch.records():
        if r.timestamp == ts:
            return r.offset, r.timestamp
    return batch.last_offset, ts


def list_offset(partition, timestamp: int, isolation_level: int, replica_id: int):
    """(offset, timestamp, leader epoch) for one ListOffsets query."""
    plog = partition.log
    if replica_id >= 0:
        upper = plog.log_end_offset
    elif isolation_level == 1:
        upper = plog.last_stable_offset
    else:
        upper = plog.high_watermark
    if timestamp == LATEST:
        # The partition's leader epoch, as Kafka's Partition.fetchOffsetForTimestamp (its
        # becoming leader starts the epoch in the log's cache; kcore's logs learn an epoch at
        # its first append, so a leader elected since then is not in the cache yet).
        return upper, -1, partition.leader_epoch
    elif timestamp in (EARLIEST, EARLIEST_LOCAL):
        offset, ts = plog.log_start_offset, -1
    elif timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1  # no tiered storage: nothing is tiered
    elif timestamp == MAX_TIMESTAMP:
        found = _max_timestamp_record(plog)
        if found is None:
            return -1, -1, -1
        offset, ts = found
    elif timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    else:
        found = _first_record_at_or_after(plog, timestamp, upper)
        if found is None:
            return -1, -1, -1
        offset, ts = found
    epoch = plog.epoch_cache.epoch_for_offset(offset) if offset < plog.log_end_offset else None
    if epoch is None:
        epoch = plog.latest_epoch if plog.latest_epoch is not None else -1
    return offset, ts, epoch


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
            offset, ts, epoch = list_offset(
                partition, p.timestamp, body.isolation_level, body.replica_id
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
