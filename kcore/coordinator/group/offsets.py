"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and offset expiration.

Theory of operation
-------------------
A committed offset is written to ``__consumer_offsets`` first and applied to memory only once
the write succeeded (through the same code that replays the log at load time), so memory never
holds an offset the log does not. A commit is checked against the group as Kafka does: a commit
with generation -1 and no member id comes from a consumer that assigns partitions itself (or
from an admin client) and is accepted only while the group has no members; it creates a
*simple* group (Empty, no protocol type) if there is none. Any other commit must come from a
current member of the current generation, and is refused with REBALANCE_IN_PROGRESS while the
group is CompletingRebalance (the member has not got its assignment yet) -- except a
TxnOffsetCommit, which Kafka accepts in that state.

Expiration (KIP-211): an offset with an explicit expire timestamp (written for OffsetCommit
v2-v4 with ``retention_time_ms``) expires then. Otherwise the retention clock starts when the
group became Empty (or at the commit, for simple groups and for groups loaded from logs that
predate the state timestamp); a Stable consumer group also loses offsets of topics it no longer
subscribes to, counted from their commit. Every ``offsets_retention_check_interval_ms`` the
coordinator writes tombstones for the expired offsets of each owned partition, and a tombstone
for every Empty group left with no offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcore.coordinator.group.group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    CommittedOffset,
    GroupState,
)
from kcore.coordinator.group.membership import validate_member
from kcore.coordinator.group.records import (
    GroupTombstone,
    OffsetCommitRecord,
    OffsetTombstone,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["OffsetsMixin", "validate_offset_commit"]

E = ErrorCode
S = GroupState


def validate_offset_commit(
    group: ClassicGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    *,
    transactional: bool = False,
) -> ErrorCode:
    """Kafka's ClassicGroup.validateOffsetCommit for an OffsetCommit, or a TxnOffsetCommit
    (``transactional``: one without member id and generation is accepted in any state)."""
    if group.is_in(S.DEAD):
        return E.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.is_in(S.EMPTY):
        return E.NONE  # a simple consumer or an admin client
    if generation_id >= 0 or member_id or instance_id is not None:
        error = validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
    elif not transactional and not group.is_in(S.EMPTY):
        return E.UNKNOWN_MEMBER_ID
    if not transactional and group.is_in(S.COMPLETING_REBALANCE):
        # A member with a valid generation has its JoinGroup answer but not yet its
        # assignment: it retries after SyncGroup. A TxnOffsetCommit is not held to the group's
        # state (Kafka's validateOffsetCommit): the transaction's offsets are only visible
        # once it commits, and refusing them would abort a producer mid-rebalance.
        return E.REBALANCE_IN_PROGRESS
    return E.NONE


def java_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units (what offset.metadata.max.bytes counts)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def commit_records(
    req,
    codes: dict[tuple[int, int], ErrorCode],
    metadata_max_bytes: int,
    *,
    with_leader_epoch: bool,
    commit_timestamp: Callable[[Any], int],
    expire_timestamp: int = -1,
) -> list[OffsetCommitRecord]:
    """The records an OffsetCommit or TxnOffsetCommit request ``req`` writes, in its order.

    Sets ``codes[topic index, partition index]``: OFFSET_METADATA_TOO_LARGE for a partition
    whose metadata is longer than ``metadata_max_bytes`` (it gets no record), NONE for the
    others. The leader epoch is kept only ``with_leader_epoch`` (the request's version has the
    field); ``commit_timestamp(partition)`` gives each record's commit time.
    """
    records = []
    for ti, t in enumerate(req.topics):
        for pi, p in enumerate(t.partitions):
            metadata = p.committed_metadata
            if metadata is not None and java_length(metadata) > metadata_max_bytes:
                codes[ti, pi] = E.OFFSET_METADATA_TOO_LARGE
                continue
            codes[ti, pi] = E.NONE
            records.append(
                OffsetCommitRecord(
                    group=req.group_id,
                    topic=t.name,
                    partition=p.partition_index,
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if with_leader_epoch else -1,
                    metadata=metadata or "",
                    commit_timestamp=commit_timestamp(p),
                    expire_timestamp=expire_timestamp,
                )
            )
    return records


class OffsetsMixin:
    """OffsetCommit / OffsetFetch / OffsetDelete and expiration for :class:`GroupCoordinator`."""

    # ---- OffsetCommit ----------------------------------------------------------------------------

    def commit_offsets(self, req, version, now_ms) -> m.OffsetCommitResponse:
        """Handle OffsetCommit; errors are per partition (the same for all when the request as a
        whole fails: NOT_COORDINATOR, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, ...).
        OFFSET_METADATA_TOO_LARGE affects only the partitions whose metadata is too long."""
        codes: dict[tuple[int, int], ErrorCode] = {}

        def response(all_code: ErrorCode | None = None) -> m.OffsetCommitResponse:
            topics = []
            for ti, t in enumerate(req.topics):
                parts = [
                    m.OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=int(all_code if all_code is not None else codes[ti, pi]),
                    )
                    for pi, p in enumerate(t.partitions)
                ]
                topics.append(
                    m.OffsetCommitResponse.OffsetCommitResponseTopic(
                        name=t.name, topic_id=t.topic_id, partitions=parts
                    )
                )
            return m.OffsetCommitResponse(topics=topics)

        error, groups = self._lookup(req.group_id)
        if error:
            return response(error)
        group = groups.get(req.group_id)
        generation = req.generation_id_or_member_epoch
        if group is None:
            if generation >= 0:
                # v9+ answers GROUP_ID_NOT_FOUND; older clients only understand this one.
                return response(E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
        else:
            error = validate_offset_commit(group, req.member_id, req.group_instance_id, generation)
            if error:
                return response(error)

        # OffsetCommit v2-v4 may set a retention; Kafka 4 still honours it as an explicit
        # expire timestamp (written as OffsetCommitValue v1).
        retention = req.retention_time_ms if 2 <= version <= 4 else -1
        expire = -1 if retention == -1 else now_ms + retention
        records = commit_records(
            req,
            codes,
            self.config.offset_metadata_max_bytes,
            # Fields absent from the request's version are ignored, even if set.
            with_leader_epoch=version >= 6,
            # Only v1 carries a client-chosen commit timestamp.
            commit_timestamp=lambda p: (
                p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now_ms
            ),
            expire_timestamp=expire,
        )
        if records:
            try:
                self._append(self.partition_for(req.group_id), records)
            except KafkaError as e:
                return response(self._map_write_error(e, offsets=True))
        if group is None:
            group = groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
        for record in records:
            self._apply(groups, record)
        # A commit from a member is a sign of life, as a heartbeat.
        member = group.members.get(req.member_id)
        if member is not None and group.is_in(S.STABLE, S.PREPARING_REBALANCE):
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return response()

    # ---- OffsetFetch -----------------------------------------------------------------------------

    def fetch_offsets(self, req, version, now_ms) -> m.OffsetFetchResponse:
        """Handle OffsetFetch. v0-7 fetch one group (its error is top-level from v2, copied to
        every partition before); v8+ several, each with its own error. ``topics`` None means all
        committed offsets. Unknown partitions answer offset -1, leader epoch -1, metadata ""."""
        if version >= 8:
            groups = []
            for g in req.groups:
                wanted = (
                    None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
                )
                error, topics = self._fetch_group(g.group_id, wanted, req.require_stable)
                groups.append(
                    m.OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        error_code=int(error),
                        topics=[
                            m.OffsetFetchResponse.OffsetFetchResponseTopics(
                                name=name,
                                partitions=[
                                    m.OffsetFetchResponse.OffsetFetchResponsePartitions(**p)
                                    for p in parts
                                ],
                            )
                            for name, parts in topics
                        ],
                    )
                )
            return m.OffsetFetchResponse(groups=groups)

        wanted = None if req.topics is None else [(t.name, t.partition_indexes) for t in req.topics]
        error, topics = self._fetch_group(req.group_id, wanted, req.require_stable)
        if error and version < 2:
            # No top-level error field before v2: every requested partition carries it.
            topics = [
                (name, [_unknown_partition(i, error) for i in indexes])
                for name, indexes in (wanted or [])
            ]
            error = E.NONE
        return m.OffsetFetchResponse(
            error_code=int(error),
            topics=[
                m.OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        m.OffsetFetchResponse.OffsetFetchResponsePartition(**p) for p in parts
                    ],
                )
                for name, parts in topics
            ],
        )

    def _fetch_group(self, group_id, wanted, require_stable) -> tuple[ErrorCode, list]:
        """(group error, [(topic, [partition fields])]) for one group."""
        error, groups = self._lookup(group_id)
        if error:
            return error, []
        group = groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = list(by_topic.items())
        out = []
        for topic, indexes in wanted:
            parts = []
            for i in indexes:
                committed = offsets.get((topic, i))
                if require_stable and self.pending_transactional_offsets(group_id, topic, i):
                    parts.append(_unknown_partition(i, E.UNSTABLE_OFFSET_COMMIT))
                elif committed is None:
                    parts.append(_unknown_partition(i, E.NONE))
                else:
                    parts.append(
                        dict(
                            partition_index=i,
                            committed_offset=committed.offset,
                            committed_leader_epoch=committed.leader_epoch,
                            metadata=committed.metadata,
                            error_code=0,
                        )
                    )
            out.append((topic, parts))
        return E.NONE, out

    # ---- OffsetDelete ----------------------------------------------------------------------------

    def delete_offsets(self, req, version, now_ms) -> m.OffsetDeleteResponse:
        """Handle OffsetDelete: tombstones for the named partitions' offsets. A group with
        members may only lose offsets of topics none of them subscribes to (consumer protocol);
        GROUP_SUBSCRIBED_TO_TOPIC for the others. Group errors (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP, coordinator errors) are top-level."""

        def top_level(code: ErrorCode) -> m.OffsetDeleteResponse:
            return m.OffsetDeleteResponse(error_code=int(code))

        if not req.group_id:
            return top_level(E.INVALID_GROUP_ID)
        error, groups = self._lookup(req.group_id)
        if error:
            return top_level(error)
        group = groups.get(req.group_id)
        if group is None or group.is_in(S.DEAD):
            return top_level(E.GROUP_ID_NOT_FOUND)
        if not group.is_in(S.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return top_level(E.NON_EMPTY_GROUP)

        records = []
        topics = []
        for t in req.topics:
            subscribed = group.is_subscribed_to_topic(t.name)
            parts = []
            for p in t.partitions:
                code = E.GROUP_SUBSCRIBED_TO_TOPIC if subscribed else E.NONE
                parts.append(
                    m.OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=int(code)
                    )
                )
                # A tombstone also for a partition with only a pending transactional offset.
                if not subscribed and (
                    (t.name, p.partition_index) in group.offsets
                    or self.pending_transactional_offsets(req.group_id, t.name, p.partition_index)
                ):
                    records.append(OffsetTombstone(req.group_id, t.name, p.partition_index))
            topics.append(
                m.OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=parts)
            )
        if records:
            try:
                self._append(self.partition_for(req.group_id), records)
            except KafkaError as e:
                return top_level(self._map_write_error(e))
            for record in records:
                self._apply(groups, record)
        return m.OffsetDeleteResponse(topics=topics)

    # ---- expiration ------------------------------------------------------------------------------

    def _expire_offsets(self, partition: int, now_ms: int) -> None:
        """Tombstone the expired offsets of one owned partition, and the Empty groups left
        without offsets (Kafka's cleanupGroupMetadata)."""
        groups = self._partitions[partition]
        retention = self.config.offsets_retention_ms
        records: list = []
        for group_id in sorted(groups):
            group = groups[group_id]
            base = _expiration_base(group)
            all_expired = True
            for (topic, p), committed in sorted(group.offsets.items()):
                if (
                    base is not None
                    and not group.is_subscribed_to_topic(topic)
                    and not self.pending_transactional_offsets(group_id, topic, p)
                    and _is_expired(committed, base(committed), now_ms, retention)
                ):
                    records.append(OffsetTombstone(group_id, topic, p))
                else:
                    all_expired = False
            # A group with pending transactional offsets stays (Kafka).
            if (
                all_expired
                and group.is_in(S.EMPTY)
                and not self._txn[partition].has_group(group_id)
            ):
                records.append(GroupTombstone(group_id))
        if not records:
            return
        try:
            self._append(partition, records)
        except KafkaError:
            return  # tried again at the next interval
        for record in records:
            self._apply(groups, record, now_ms)


def _unknown_partition(index: int, error: ErrorCode) -> dict:
    return dict(
        partition_index=index,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=int(error),
    )


def _is_expired(committed: CommittedOffset, base_ms: int, now_ms: int, retention_ms: int) -> bool:
    if committed.expire_timestamp_ms != -1:
        return now_ms >= committed.expire_timestamp_ms  # explicit (OffsetCommit v2-v4)
    return now_ms - base_ms >= retention_ms


def _expiration_base(group: ClassicGroup):
    """From when an offset's retention counts, or None when the group's offsets do not expire
    now (Kafka's ClassicGroup.offsetExpirationCondition)."""
    if group.protocol_type is None:  # a simple group: from each commit
        return lambda c: c.commit_timestamp_ms
    if group.is_in(S.EMPTY):
        stamp = group.state_timestamp_ms
        return lambda c: stamp if stamp is not None else c.commit_timestamp_ms
    if (
        group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and group.is_in(S.STABLE)
        and group.subscribed_topics() is not None
    ):
        return lambda c: c.commit_timestamp_ms  # only unsubscribed topics (checked by caller)
    return None
