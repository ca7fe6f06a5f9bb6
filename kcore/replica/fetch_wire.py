"""The fetcher framework's requests on the wire: a :class:`FetchPlan` as a Fetch request, a
Fetch response as endpoint-neutral :class:`PartitionResponse` s, and the ListOffsets and
OffsetsForLeaderEpoch requests an endpoint asks its leader.

Both leader endpoints use these: the mirror's (a source-cluster broker, as a consumer: replica
id -1, READ_COMMITTED) and the follower's (the local cluster's leader, as a replica: its broker
id and epoch in ``ReplicaState`` from v15, ``ReplicaId`` before). Versions decide the fields:
from v12 ``LastFetchedEpoch`` and the diverging epoch (KIP-595), from v13 topic ids (KIP-516).
From v7 an endpoint's :class:`~kcore.replica.fetch_session_handler.FetchSessionHandler` makes
its requests incremental (KIP-227). Pure: no I/O; the records stay the response's memoryviews.
"""

from __future__ import annotations

import abc
import uuid

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_session_handler import SESSION_ERRORS, FetchSessionHandler
from kcore.replica.fetch_state import FetchPlan, PartitionResponse, TopicPartition

__all__ = [
    "ListOffsetsMixin",
    "LAST_FETCHED_EPOCH_VERSION",
    "REPLICA_STATE_VERSION",
    "TOPIC_ID_VERSION",
    "fetch_request",
    "fetch_responses",
    "list_offsets_request",
    "listed_offset",
    "offsets_for_leader_epoch_request",
]

FETCH_KEY = 1
LAST_FETCHED_EPOCH_VERSION = 12  # KIP-595
TOPIC_ID_VERSION = 13  # KIP-516
REPLICA_STATE_VERSION = 15  # KIP-903: ReplicaState (id and broker epoch)
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps


def fetch_request(
    plan: FetchPlan,
    version: int,
    *,
    session: FetchSessionHandler | None = None,
    replica_id: int = -1,
    replica_epoch: int = -1,
    max_bytes: int | None = None,
    partition_max_bytes: int | None = None,
    rack_id: str = "",
) -> tuple[m.FetchRequest, dict[uuid.UUID, str]]:
    """The Fetch of ``plan`` at ``version``, and the topic names by id (to read the answer).
    With a ``session`` (v7+) only what changed since the last request is listed (KIP-227);
    without, every partition, sessionless. ``max_bytes`` / ``partition_max_bytes`` lower the
    plan's (a throttle)."""
    F = m.FetchRequest
    with_epoch = version >= LAST_FETCHED_EPOCH_VERSION
    names: dict[uuid.UUID, str] = {}
    for p in plan.partitions:  # every partition: an incremental answer may carry any of them
        names[p.topic_id] = p.topic
    if session is not None:
        fetch = session.build(plan.partitions, version, partition_max_bytes)
        session_id, session_epoch = fetch.session_id, fetch.session_epoch
        to_send, to_forget = fetch.to_send, fetch.to_forget
    else:
        session_id, session_epoch, to_forget = 0, -1, []
        to_send = [
            (p, p.partition_max_bytes if partition_max_bytes is None
             else min(p.partition_max_bytes, partition_max_bytes))
            for p in plan.partitions
        ]  # fmt: skip
    topics: dict[str, list] = {}
    ids: dict[str, uuid.UUID] = {}
    for p, limit in to_send:
        topics.setdefault(p.topic, []).append(
            F.FetchPartition(
                partition=p.partition,
                current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset,
                last_fetched_epoch=p.last_fetched_epoch if with_epoch else -1,
                partition_max_bytes=limit,
            )
        )
        ids[p.topic] = p.topic_id
    forgotten: dict[str, list[int]] = {}
    for topic, topic_id, partition in to_forget:
        forgotten.setdefault(topic, []).append(partition)
        ids[topic] = topic_id
    body = F(
        max_wait_ms=plan.max_wait_ms,
        min_bytes=plan.min_bytes,
        max_bytes=plan.max_bytes if max_bytes is None else max_bytes,
        isolation_level=plan.isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            F.FetchTopic(topic=name, topic_id=ids[name], partitions=parts)
            for name, parts in topics.items()
        ],
        forgotten_topics_data=[
            F.ForgottenTopic(topic=name, topic_id=ids[name], partitions=parts)
            for name, parts in forgotten.items()
        ],
        rack_id=rack_id,
    )
    if version >= REPLICA_STATE_VERSION:
        body.replica_state = F.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch)
    else:
        body.replica_id = replica_id
    return body, names


def fetch_responses(
    response: m.FetchResponse,
    version: int,
    names: dict[uuid.UUID, str],
    *,
    session: FetchSessionHandler | None = None,
    leader: str = "the leader",
) -> dict[TopicPartition, PartitionResponse]:
    """Each partition of a Fetch response (partitions of unknown topics are left out). A
    top-level error raises KafkaError (``leader`` names who answered), except the session's
    own errors: those answer nothing, and the ``session``'s next request is a full one."""
    usable = session is None or session.handle_response(response.error_code, response.session_id)
    if not usable and response.error_code in SESSION_ERRORS:
        return {}
    if response.error_code:
        raise KafkaError(response.error_code, f"Fetch from {leader} failed")
    by_id = version >= TOPIC_ID_VERSION
    with_epoch = version >= LAST_FETCHED_EPOCH_VERSION
    out: dict[TopicPartition, PartitionResponse] = {}
    for t in response.responses:
        name = names.get(t.topic_id) if by_id else t.topic
        if name is None:
            continue
        for p in t.partitions:
            diverging = p.diverging_epoch if with_epoch else None
            leader_at = p.current_leader if with_epoch else None
            out[(name, p.partition_index)] = PartitionResponse(
                error_code=p.error_code,
                high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset,
                log_start_offset=p.log_start_offset,
                records=p.records if p.records is not None else b"",
                diverging_epoch=(
                    (diverging.epoch, diverging.end_offset)
                    if diverging is not None and diverging.epoch >= 0
                    else None
                ),
                current_leader=(
                    (leader_at.leader_id, leader_at.leader_epoch)
                    if leader_at is not None and leader_at.leader_id >= 0
                    else None
                ),
            )
    return out


def list_offsets_request(
    tp: TopicPartition, leader_epoch: int, timestamp: int, *, replica_id: int = -1
) -> m.ListOffsetsRequest:
    """ListOffsets of one partition (a replica's ``latest`` is the leader's log end offset,
    a consumer's its high watermark)."""
    L = m.ListOffsetsRequest
    return L(
        replica_id=replica_id,
        isolation_level=0,
        topics=[
            L.ListOffsetsTopic(
                name=tp[0],
                partitions=[
                    L.ListOffsetsPartition(
                        partition_index=tp[1],
                        current_leader_epoch=leader_epoch,
                        timestamp=timestamp,
                    )
                ],
            )
        ],
    )


def listed_offset(response: m.ListOffsetsResponse, tp: TopicPartition, where: str) -> int:
    """The offset of ``tp`` in a ListOffsets answer; raises KafkaError for its error, or
    UNKNOWN_SERVER_ERROR when the answer leaves it out (``where`` names the leader)."""
    for t in response.topics:
        for p in t.partitions:
            if t.name == tp[0] and p.partition_index == tp[1]:
                if p.error_code:
                    raise KafkaError(p.error_code, f"ListOffsets of {tp[0]}-{tp[1]} on {where}")
                return p.offset
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no ListOffsets answer for {tp} from {where}")


class ListOffsetsMixin(abc.ABC):
    """``earliest_offset`` / ``latest_offset`` of a leader endpoint over its
    ``_list_offset(tp, leader epoch, timestamp)`` (ListOffsets -2 / -1: a replica's latest is
    the leader's log end offset, a consumer's its high watermark)."""

    @abc.abstractmethod
    async def _list_offset(self, tp: TopicPartition, leader_epoch: int, timestamp: int) -> int:
        """The offset ListOffsets answers for ``timestamp`` on the leader of ``tp``."""

    async def earliest_offset(self, tp: TopicPartition, leader_epoch: int) -> int:
        return await self._list_offset(tp, leader_epoch, EARLIEST)

    async def latest_offset(self, tp: TopicPartition, leader_epoch: int) -> int:
        return await self._list_offset(tp, leader_epoch, LATEST)


def offsets_for_leader_epoch_request(
    partitions: dict[TopicPartition, tuple[int, int]], *, replica_id: int
) -> m.OffsetForLeaderEpochRequest:
    """OffsetsForLeaderEpoch: ``tp -> (current leader epoch, epoch asked)``."""
    R = m.OffsetForLeaderEpochRequest
    topics: dict[str, list] = {}
    for (topic, index), (current, epoch) in partitions.items():
        topics.setdefault(topic, []).append(
            R.OffsetForLeaderPartition(
                partition=index, current_leader_epoch=current, leader_epoch=epoch
            )
        )
    return R(
        replica_id=replica_id,
        topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()],
    )
