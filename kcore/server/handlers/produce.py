"""Produce: append producers' record batches to the partitions this broker leads.

Per partition, independently: find the partition (by name, or by topic id from v13), refuse
what Kafka 4.x refuses (v0-2 payloads, more than one batch from v3 on), append through the
replica manager, and report the base offset or the error with its message. ``acks=0`` gets no
response at all. On a single broker ``acks=all`` completes with the local append; with
followers it waits in the purgatory for the high watermark until ``timeout.ms``.

Authorization (with an authorizer, as Kafka's ``handleProduceRequest``): transactional batches
need WRITE on the request's transactional id (every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, and nothing is appended); each topic needs
WRITE (TOPIC_AUTHORIZATION_FAILED), checked before whether it exists, so a producer learns
nothing about topics it may not write.
"""

from __future__ import annotations

import logging
import time

from kcore.log.producer_state import AppendOrigin
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import iter_batches
from kcore.record.errors import CorruptRecordError, UnsupportedMagicError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

log = logging.getLogger(__name__)

Resp = m.ProduceResponse


def _one_batch(records) -> None:
    """Kafka 4.x: from Produce v3 on, a partition's records are exactly one v2 batch."""
    try:
        it = iter_batches(records)
        count = sum(1 for _ in it)
    except UnsupportedMagicError as e:
        raise KafkaError(ErrorCode.INVALID_RECORD, str(e)) from None
    except CorruptRecordError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e)) from None
    if count != 1 or it.trailing_bytes:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            "produce requests from version 3 on must carry exactly one record batch per "
            f"partition (got {count} and {it.trailing_bytes} stray bytes)",
        )


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
        if authz.enabled(ctx) and _has_transactional_records(body):
            tid = body.transactional_id
            if tid is None or not authz.allowed(
                ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid
            ):
                refused = _refuse_all(body, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                return None if acks == 0 else refused
        names = [
            replicas.topic_names.get(t.topic_id, "") if ctx.version >= 13 else t.name
            for t in body.topic_data
        ]
        writable = authz.filter_allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
        waits = []
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
                    _one_batch(pd.records)
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
                    if acks == -1:
                        waits.append((topic, pd.index, info.last_offset + 1, entry))
                except KafkaError as e:
                    entry.error_code = int(e.code)
                    entry.error_message = e.message
                    entry.base_offset = -1
                    if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        _current_leader(broker, topic, pd.index, entry)
        if waits:
            await broker.wait_for_high_watermarks(waits, body.timeout_ms / 1000)
        if acks == 0:
            return None
        return response


def _current_leader(broker, topic: str, index: int, entry) -> None:
    """v10+: tell the producer who leads now, so it need not refresh all metadata."""
    partition = broker.replica_manager.partitions.get((topic, index))
    if partition is not None:
        entry.current_leader = Resp.LeaderIdAndEpoch(
            leader_id=partition.state.leader, leader_epoch=partition.state.leader_epoch
        )
