"""The classic group coordinator, sans-IO: requests and time in, responses and records out.

Theory of operation
-------------------
A broker is the coordinator of the groups whose ``__consumer_offsets`` partition it leads
(``partition_for``). The shell tells this object which partitions it owns: ``begin_loading``
(requests for those groups answer COORDINATOR_LOAD_IN_PROGRESS), ``replay`` of every record in
log order, ``finish_loading`` (groups are served; loaded members' sessions start now), and
``unload`` when leadership moves (groups dropped, parked requests answered NOT_COORDINATOR).
Any group whose partition is neither loading nor owned answers NOT_COORDINATOR.

State changes that must survive a restart go through ``append(partition, records)`` (with
``producer_id``, ``producer_epoch`` and ``transactional=True`` for TxnOffsetCommit's
transactional batch), called synchronously *before* memory changes; it raises :class:`KafkaError` when the write fails, and
the error is mapped as Kafka maps log errors to coordinator errors (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, INVALID_COMMIT_OFFSET_SIZE / UNKNOWN_SERVER_ERROR for oversized
writes), with memory left as it was. Offsets and tombstones written live are applied by the
same code that replays them at load (``_apply``), so a reload reproduces what was served.

Time is only what callers pass. Timers are deadlines on the groups (join phase, sync phase,
member sessions, KIP-394 pending members) and one offset-expiration deadline per owned
partition; ``tick(now)`` fires every deadline that has passed, in deadline order and each at
its own deadline's time (as a timer wheel that never runs late would), and
``next_deadline_ms()`` says when to call it next.

The request handlers live in three mixins: :mod:`.membership` (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and the rebalance), :mod:`.offsets` (OffsetCommit, OffsetFetch, OffsetDelete and
expiration) and :mod:`.txn_offsets` (TxnOffsetCommit, transaction markers, pending offsets). This module holds ownership, the group-level admin APIs and the clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcore.coordinator.group import records as rec
from kcore.coordinator.group.group import ClassicGroup, CommittedOffset, GroupState
from kcore.coordinator.group.membership import MembershipMixin
from kcore.coordinator.group.offsets import OffsetsMixin
from kcore.coordinator.group.txn_offsets import PendingTxnOffsets, TxnOffsetsMixin
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["Append", "GroupConfig", "GroupCoordinator", "Respond"]

E = ErrorCode
S = GroupState

Respond = Callable[[Any], None]
# append(offsets-topic partition, records, *, producer_id=-1, producer_epoch=-1,
# transactional=False): one batch, synchronously; raises KafkaError. Plain writes pass only the
# first two arguments, so a two-argument function serves a coordinator that never sees
# TxnOffsetCommit.
Append = Callable[..., None]

# DescribeGroups' AuthorizedOperations when the client did not ask for them (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

# Log errors that mean "ask again later / elsewhere" (Kafka's GroupMetadataManager mapping).
_UNAVAILABLE = {
    E.UNKNOWN_TOPIC_OR_PARTITION,
    E.NOT_ENOUGH_REPLICAS,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.REQUEST_TIMED_OUT,
}
_MOVED = {E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR}
_TOO_LARGE = {E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE}

_PARTITION_CACHE_SIZE = 100_000


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the coordinator uses (Kafka's names: ``offsets.topic.num.partitions``,
    ``group.initial.rebalance.delay.ms``, ``group.min/max.session.timeout.ms``,
    ``group.max.size``, ``offsets.retention.minutes`` in ms, ``offsets.retention.check.interval
    .ms``, ``offset.metadata.max.bytes``)."""

    offsets_topic_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096


def _default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator(MembershipMixin, OffsetsMixin, TxnOffsetsMixin):
    """The classic group coordinator of one broker (all its ``__consumer_offsets`` partitions).

    ``append(partition, records, *, producer_id=-1, producer_epoch=-1, transactional=False)``
    persists records (see :mod:`.records`) as one batch or raises ``KafkaError``. ``member_id_factory(prefix)`` makes a new member id; the prefix is the
    client id, or the group.instance.id for a static member (as Kafka). Not thread-safe: the
    shell calls it from one task.
    """

    def __init__(
        self,
        config: GroupConfig,
        append: Append,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config
        self._append = append
        self._member_id_factory = member_id_factory or _default_member_id
        # Groups by partition, for partitions being loaded or owned.
        self._partitions: dict[int, dict[str, ClassicGroup]] = {}
        self._loading: set[int] = set()
        self._owned: set[int] = set()
        self._expiry_deadline: dict[int, int] = {}  # owned partition -> next offsets expiration
        self._partition_cache: dict[str, int] = {}
        # Offsets of open transactions, per partition being loaded or owned (.txn_offsets).
        self._txn: dict[int, PendingTxnOffsets] = {}
        self._record_order = 0  # bumped per offset record applied: see CommittedOffset

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id``."""
        # Every request asks this; the Java hash is a Python loop over the id.
        partition = self._partition_cache.get(group_id)
        if partition is None:
            partition = rec.partition_for(group_id, self.config.offsets_topic_partitions)
            if len(self._partition_cache) >= _PARTITION_CACHE_SIZE:
                self._partition_cache.clear()
            self._partition_cache[group_id] = partition
        return partition

    # ---- ownership ---------------------------------------------------------------------------

    def begin_loading(self, partition: int) -> None:
        """Start loading ``partition``: its groups answer COORDINATOR_LOAD_IN_PROGRESS until
        :meth:`finish_loading`. Whatever was held for it before is unloaded first."""
        if partition in self._partitions:
            self.unload(partition)
        self._partitions[partition] = {}
        self._txn[partition] = PendingTxnOffsets()
        self._loading.add(partition)

    def replay(self, partition: int, record) -> None:
        """Apply one record read from ``partition`` (in log order; tombstones included;
        None, a record type kcore skips, is ignored)."""
        if partition not in self._loading:
            raise ValueError(f"__consumer_offsets-{partition} is not loading")
        if record is not None:
            self._apply(self._partitions[partition], record)

    def finish_loading(self, partition: int, now_ms: int) -> None:
        """``partition`` is loaded: serve its groups. Loaded members get a full session from
        now; a group over ``max_size`` (the setting may have shrunk) rebalances at once."""
        if partition not in self._loading:
            raise ValueError(f"__consumer_offsets-{partition} is not loading")
        self._loading.discard(partition)
        self._owned.add(partition)
        self._expiry_deadline[partition] = now_ms + self.config.offsets_retention_check_interval_ms
        for group in list(self._partitions[partition].values()):
            for member in group.members.values():
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if len(group.members) > self.config.max_size and group.can_rebalance():
                self._prepare_rebalance(group, now_ms)

    def unload(self, partition: int) -> None:
        """Leadership of ``partition`` moved: drop its groups; every parked JoinGroup and
        SyncGroup is answered NOT_COORDINATOR so the clients look for the new coordinator."""
        groups = self._partitions.pop(partition, {})
        self._txn.pop(partition, None)
        self._loading.discard(partition)
        self._owned.discard(partition)
        self._expiry_deadline.pop(partition, None)
        for group in groups.values():
            for member in group.members.values():
                self._answer_join(member, E.NOT_COORDINATOR, member_id=member.member_id)
                self._answer_sync(member, E.NOT_COORDINATOR)
            group.state = S.DEAD  # the table allows Dead from anywhere; no timestamp needed

    def owned_partitions(self) -> set[int]:
        """The partitions whose groups this coordinator serves (loading ones excluded)."""
        return set(self._owned)

    def group_states(self) -> dict[str, int]:
        """How many groups of the served partitions are in each state, by Kafka's state
        names (``Stable``, ``Empty``, ...), for /metrics."""
        counts: dict[str, int] = {}
        for partition in self._owned:
            for group in self._partitions.get(partition, {}).values():
                counts[group.state.value] = counts.get(group.state.value, 0) + 1
        return counts

    # ---- applying records --------------------------------------------------------------------

    def _apply(self, groups: dict[str, ClassicGroup], record, now_ms: int | None = None) -> None:
        """Apply a record to memory: at load (replay) and after a successful live write of an
        offset or a tombstone. A live GroupMetadataRecord is never applied: memory already holds
        more than the record (parked requests, timers)."""
        if isinstance(record, rec.OffsetCommitRecord):
            group = groups.get(record.group)
            if group is None:
                # Offsets without group metadata: a simple group (no protocol type).
                group = groups[record.group] = ClassicGroup(record.group)
            group.offsets[record.topic, record.partition] = CommittedOffset(
                offset=record.offset,
                leader_epoch=record.leader_epoch,
                metadata=record.metadata,
                commit_timestamp_ms=record.commit_timestamp,
                expire_timestamp_ms=record.expire_timestamp,
                record_order=self._next_record_order(),
            )
        elif isinstance(record, rec.OffsetTombstone):
            group = groups.get(record.group)
            if group is not None:
                group.offsets.pop((record.topic, record.partition), None)
            # The tombstone deletes the partition's pending transactional offsets too (Kafka).
            txn = self._txn.get(self.partition_for(record.group))
            if txn is not None:
                txn.discard(record.group, (record.topic, record.partition))
        elif isinstance(record, rec.GroupMetadataRecord):
            old = groups.get(record.group)
            groups[record.group] = ClassicGroup.from_metadata(
                record.group, record.value, offsets=old.offsets if old is not None else None
            )
        elif isinstance(record, rec.GroupTombstone):
            group = groups.pop(record.group, None)
            if group is not None and now_ms is not None:
                group.transition_to(S.DEAD, now_ms)
        else:
            raise TypeError(f"not a __consumer_offsets record: {record!r}")

    def _next_record_order(self) -> int:
        self._record_order += 1
        return self._record_order

    def _append_group(self, group: ClassicGroup, record) -> None:
        self._append(self.partition_for(group.group_id), [record])

    @staticmethod
    def _map_write_error(error: KafkaError, *, offsets: bool = False) -> ErrorCode:
        """Kafka's mapping of a failed ``__consumer_offsets`` write to what the client sees."""
        code = error.code
        if code in _UNAVAILABLE:
            return E.COORDINATOR_NOT_AVAILABLE
        if code in _MOVED:
            return E.NOT_COORDINATOR
        if code in _TOO_LARGE:
            return E.INVALID_COMMIT_OFFSET_SIZE if offsets else E.UNKNOWN_SERVER_ERROR
        return code if isinstance(code, ErrorCode) else E.UNKNOWN_SERVER_ERROR

    def _lookup(self, group_id: str) -> tuple[ErrorCode, dict[str, ClassicGroup]]:
        """(NONE, the partition's groups) when we coordinate ``group_id``, else the error."""
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, {}
        if partition not in self._owned:
            return E.NOT_COORDINATOR, {}
        return E.NONE, self._partitions[partition]

    # ---- ListGroups / DescribeGroups / DeleteGroups --------------------------------------------

    def list_groups(self, req, version) -> m.ListGroupsResponse:
        """Handle ListGroups: the groups of every owned partition, filtered by state (v4+) and
        type (v5+; kcore only has "classic"), both case-insensitive as Kafka 4. While any
        partition is loading the answer is COORDINATOR_LOAD_IN_PROGRESS."""
        if self._loading:
            return m.ListGroupsResponse(error_code=int(E.COORDINATOR_LOAD_IN_PROGRESS))
        states = {s.lower() for s in req.states_filter} if version >= 4 else set()
        types = {t.lower() for t in req.types_filter} if version >= 5 else set()
        listed = []
        for partition in sorted(self._owned):
            for group_id in sorted(self._partitions[partition]):
                group = self._partitions[partition][group_id]
                if states and group.state.value.lower() not in states:
                    continue
                if types and "classic" not in types:
                    continue
                listed.append(
                    m.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type=group.protocol_type or "",
                        group_state=group.state.value,
                        group_type="classic",
                    )
                )
        return m.ListGroupsResponse(groups=listed)

    def describe_groups(self, req, version) -> m.DescribeGroupsResponse:
        """Handle DescribeGroups. An unknown group is described as Dead with no members and no
        error, except from v6 (KIP-1043), which answers GROUP_ID_NOT_FOUND. Members carry their
        metadata and assignment only while the group is Stable (as Kafka)."""
        described = []
        for group_id in req.groups:
            error, groups = self._lookup(group_id)
            group = groups.get(group_id)
            cls = m.DescribeGroupsResponse.DescribedGroup
            if error:
                described.append(cls(group_id=group_id, error_code=int(error)))
            elif group is None:
                missing = version >= 6
                described.append(
                    cls(
                        group_id=group_id,
                        group_state=S.DEAD.value,
                        error_code=int(E.GROUP_ID_NOT_FOUND if missing else E.NONE),
                        error_message=f"Group {group_id} not found." if missing else None,
                    )
                )
            else:
                described.append(self._describe(group))
        return m.DescribeGroupsResponse(groups=described)

    @staticmethod
    def _describe(group: ClassicGroup):
        stable = group.is_in(S.STABLE)
        members = [
            m.DescribeGroupsResponse.DescribedGroupMember(
                member_id=mem.member_id,
                group_instance_id=mem.group_instance_id,
                client_id=mem.client_id,
                client_host=mem.client_host,
                member_metadata=mem.metadata_for(group.protocol_name) if stable else b"",
                member_assignment=mem.assignment if stable else b"",
            )
            for mem in group.members.values()
        ]
        return m.DescribeGroupsResponse.DescribedGroup(
            group_id=group.group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    def delete_groups(self, req, version, now_ms) -> m.DeleteGroupsResponse:
        """Handle DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND
        when unknown). Tombstones for every offset and the group are written in one append per
        partition; if it fails, every group of that partition gets the mapped error."""
        results: dict[str, ErrorCode] = {}
        batches: dict[int, list[str]] = {}
        for group_id in req.groups_names:
            if group_id in results:
                continue
            if not group_id:
                results[group_id] = E.INVALID_GROUP_ID
                continue
            error, groups = self._lookup(group_id)
            group = groups.get(group_id)
            if not error and (group is None or group.is_in(S.DEAD)):
                error = E.GROUP_ID_NOT_FOUND
            elif not error and not group.is_in(S.EMPTY):
                error = E.NON_EMPTY_GROUP
            results[group_id] = error
            if not error:
                batches.setdefault(self.partition_for(group_id), []).append(group_id)
        for partition, group_ids in batches.items():
            groups = self._partitions[partition]
            records: list = []
            txn = self._txn[partition]
            for group_id in group_ids:
                group = groups[group_id]
                records += [rec.OffsetTombstone(group_id, t, p) for t, p in sorted(group.offsets)]
                # Partitions with only a pending transactional offset get a tombstone too, so
                # the transaction's commit cannot bring the deleted group's offsets back.
                records += [
                    rec.OffsetTombstone(group_id, t, p)
                    for t, p in txn.partitions_of(group_id)
                    if (t, p) not in group.offsets
                ]
                records.append(rec.GroupTombstone(group_id))
            try:
                self._append(partition, records)
            except KafkaError as e:
                for group_id in group_ids:
                    results[group_id] = self._map_write_error(e)
                continue
            for record in records:
                self._apply(groups, record, now_ms)
        cls = m.DeleteGroupsResponse.DeletableGroupResult
        return m.DeleteGroupsResponse(
            results=[cls(group_id=g, error_code=int(code)) for g, code in results.items()]
        )

    # ---- time ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire every timer due at or before ``now_ms``, earliest first, each at its deadline."""
        while True:
            event = self._earliest_event()
            if event is None or event[0] > now_ms:
                return
            self._fire(event)

    def next_deadline_ms(self) -> int | None:
        """The earliest time :meth:`tick` has work to do, or None when nothing is scheduled."""
        event = self._earliest_event()
        return None if event is None else event[0]

    # Event kinds in the order they fire when due at the same millisecond.
    _HEARTBEAT, _PENDING, _SYNC, _JOIN, _EXPIRY = range(5)

    def _earliest_event(self) -> tuple | None:
        best = None
        for partition in self._owned:
            deadline = self._expiry_deadline.get(partition)
            if deadline is not None:
                best = _min(best, (deadline, self._EXPIRY, partition, "", ""))
            for group_id, group in self._partitions[partition].items():
                if group.join_deadline_ms is not None:
                    best = _min(best, (group.join_deadline_ms, self._JOIN, partition, group_id, ""))
                if group.sync_deadline_ms is not None:
                    best = _min(best, (group.sync_deadline_ms, self._SYNC, partition, group_id, ""))
                for member_id, deadline in group.pending_members.items():
                    best = _min(best, (deadline, self._PENDING, partition, group_id, member_id))
                for member_id, member in group.members.items():
                    if member.heartbeat_deadline_ms is not None:
                        event = (member.heartbeat_deadline_ms, self._HEARTBEAT, partition)
                        best = _min(best, (*event, group_id, member_id))
        return best

    def _fire(self, event: tuple) -> None:
        at, kind, partition, group_id, member_id = event
        if kind == self._EXPIRY:
            self._expiry_deadline[partition] = at + self.config.offsets_retention_check_interval_ms
            self._expire_offsets(partition, at)
            return
        group = self._partitions[partition][group_id]
        if kind == self._JOIN:
            self._on_join_deadline(group, at)
        elif kind == self._SYNC:
            self._on_sync_deadline(group, at)
        elif kind == self._PENDING:
            self._on_pending_member_deadline(group, member_id, at)
        else:
            self._on_heartbeat_deadline(group, group.members[member_id], at)


def _min(a: tuple | None, b: tuple) -> tuple:
    return b if a is None or b < a else a
