"""Transactional offset commits (KIP-98's TxnOffsetCommit) for the classic group coordinator.

Theory of operation
-------------------
A transactional producer that consumed from a group sends its offsets to the group coordinator
with TxnOffsetCommit (after AddOffsetsToTxn put the group's ``__consumer_offsets`` partition in
the transaction). The coordinator validates the request as an OffsetCommit (laxer: a commit
without member id is accepted in any state), writes ordinary OffsetCommit records **in a
transactional batch of the producer** (its producer id and epoch, the transactional attribute,
base sequence 0 as Kafka's coordinators write), and keeps the offsets as *pending*: OffsetFetch
does not show them, and with ``require_stable`` (v7+) answers UNSTABLE_OFFSET_COMMIT for their
partitions so that a consumer does not start from a stale offset.

The transaction ends with a COMMIT or ABORT marker, written into the same partition by
WriteTxnMarkers, which then calls :meth:`TxnOffsetsMixin.complete_transaction`. On COMMIT each
pending offset of the producer becomes the committed offset **unless a committed offset written
later in the log exists** (a plain OffsetCommit after the TxnOffsetCommit wins, as Kafka decides
by record offsets, so that compaction of the topic cannot change the outcome); on ABORT the
pending offsets are dropped. The core writes nothing then: the marker is already in the log.

Loading replays the log in order: records of transactional batches go to
:meth:`~TxnOffsetsMixin.replay_transactional` (pending again), markers to
:meth:`~TxnOffsetsMixin.replay_marker`, so a restart rebuilds exactly what was served: committed
transactions applied, aborted ones gone, open ones pending.

Other rules (Kafka's ``OffsetMetadataManager``): an offset tombstone (OffsetDelete, DeleteGroups,
expiry) also drops the pending offsets of that partition; DeleteGroups and OffsetDelete write a
tombstone for a partition that only has a pending offset; expiry never deletes an offset whose
partition has a pending one, nor a group with any pending offset.

"Later in the log" is a counter (:attr:`CommittedOffset.record_order`) the coordinator bumps for
every offset record it applies, live or replayed; both happen in log order per partition, so the
counter orders records exactly as their log offsets would.
"""

from __future__ import annotations

from kcore.coordinator.group.group import ClassicGroup, CommittedOffset
from kcore.coordinator.group.offsets import commit_records, validate_offset_commit
from kcore.coordinator.group.records import OffsetCommitRecord
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["PendingTxnOffsets", "TxnOffsetsMixin"]

E = ErrorCode
NO_PRODUCER_ID = -1

TopicPartition = tuple[str, int]
GroupTopicPartition = tuple[str, str, int]


class PendingTxnOffsets:
    """The offsets of open transactions in one ``__consumer_offsets`` partition.

    ``by_producer``: producer id -> (group, topic, partition) -> the pending offset;
    ``open``: group -> (topic, partition) -> the producer ids holding an offset for it (the index
    OffsetFetch, expiry and deletion ask). Both always agree; no level is ever left empty.
    """

    def __init__(self) -> None:
        self.by_producer: dict[int, dict[GroupTopicPartition, CommittedOffset]] = {}
        self.open: dict[str, dict[TopicPartition, set[int]]] = {}

    def add(self, producer_id: int, group: str, tp: TopicPartition, offset: CommittedOffset):
        self.by_producer.setdefault(producer_id, {})[group, *tp] = offset
        self.open.setdefault(group, {}).setdefault(tp, set()).add(producer_id)

    def has(self, group: str, tp: TopicPartition) -> bool:
        return tp in self.open.get(group, ())

    def has_group(self, group: str) -> bool:
        return group in self.open

    def partitions_of(self, group: str) -> list[TopicPartition]:
        return sorted(self.open.get(group, ()))

    def discard(self, group: str, tp: TopicPartition) -> None:
        """Drop every pending offset of ``tp`` in ``group`` (an offset tombstone was applied)."""
        by_tp = self.open.get(group)
        if by_tp is None or tp not in by_tp:
            return
        for producer_id in by_tp.pop(tp):
            offsets = self.by_producer.get(producer_id)
            if offsets is not None:
                offsets.pop((group, *tp), None)
                if not offsets:
                    del self.by_producer[producer_id]
        if not by_tp:
            del self.open[group]

    def pop_producer(self, producer_id: int) -> dict[GroupTopicPartition, CommittedOffset]:
        """Remove and return the pending offsets of ``producer_id`` (empty when none)."""
        offsets = self.by_producer.pop(producer_id, {})
        for group, topic, partition in offsets:
            by_tp = self.open[group]
            producers = by_tp[topic, partition]
            producers.discard(producer_id)
            if not producers:
                del by_tp[topic, partition]
                if not by_tp:
                    del self.open[group]
        return offsets


class TxnOffsetsMixin:
    """TxnOffsetCommit, transaction completion and their replay for :class:`GroupCoordinator`
    (which provides ``_txn`` (partition -> :class:`PendingTxnOffsets`), ``_lookup``,
    ``_append``, ``_apply``, ``_next_record_order`` and the partition bookkeeping)."""

    # ---- TxnOffsetCommit -------------------------------------------------------------------------

    def txn_commit_offsets(self, req, version, now_ms) -> m.TxnOffsetCommitResponse:
        """Handle TxnOffsetCommit (v0-5): validate, write the offsets as a transactional batch of
        ``req.producer_id``/``req.producer_epoch`` and hold them as pending until the
        transaction's marker.

        Errors are per partition, the same for all when the request as a whole fails:
        INVALID_GROUP_ID (empty group id), NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS,
        ILLEGAL_GENERATION (unknown group with a generation, or a stale one),
        UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID (v3+ member checks, KIP-447),
        REBALANCE_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING (no producer id: kcore refuses a
        "transactional" commit without a transaction), and the write's errors mapped as for
        OffsetCommit (the log's INVALID_PRODUCER_EPOCH etc. pass through).
        OFFSET_METADATA_TOO_LARGE affects only the partitions whose metadata is too long.
        Before v3 the request has no member fields: it is validated as a simple commit.
        """
        codes: dict[tuple[int, int], ErrorCode] = {}

        def response(all_code: ErrorCode | None = None) -> m.TxnOffsetCommitResponse:
            R = m.TxnOffsetCommitResponse
            return R(
                topics=[
                    R.TxnOffsetCommitResponseTopic(
                        name=t.name,
                        partitions=[
                            R.TxnOffsetCommitResponsePartition(
                                partition_index=p.partition_index,
                                error_code=int(all_code if all_code is not None else codes[ti, pi]),
                            )
                            for pi, p in enumerate(t.partitions)
                        ],
                    )
                    for ti, t in enumerate(req.topics)
                ]
            )

        if not req.group_id:
            return response(E.INVALID_GROUP_ID)
        error, groups = self._lookup(req.group_id)
        if error:
            return response(error)
        if req.producer_id == NO_PRODUCER_ID:
            return response(E.INVALID_PRODUCER_ID_MAPPING)
        group = groups.get(req.group_id)
        generation = req.generation_id if version >= 3 else -1
        member_id = req.member_id if version >= 3 else ""
        instance_id = req.group_instance_id if version >= 3 else None
        if group is None:
            if generation >= 0:
                return response(E.ILLEGAL_GENERATION)
        else:
            error = validate_offset_commit(
                group, member_id, instance_id, generation, transactional=True
            )
            if error:
                return response(error)

        records = commit_records(
            req,
            codes,
            self.config.offset_metadata_max_bytes,
            with_leader_epoch=version >= 2,
            commit_timestamp=lambda p: now_ms,
        )
        partition = self.partition_for(req.group_id)
        if records:
            try:
                self._append(
                    partition,
                    records,
                    producer_id=req.producer_id,
                    producer_epoch=req.producer_epoch,
                    transactional=True,
                )
            except KafkaError as e:
                return response(self._map_write_error(e, offsets=True))
        if group is None:
            groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
        for record in records:
            self._apply_pending(partition, req.producer_id, record)
        return response()

    # ---- completion ------------------------------------------------------------------------------

    def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was just written to
        ``__consumer_offsets-<partition>``: its pending offsets there become committed (each
        unless a later plain commit of the same partition exists) or are dropped.

        Writes nothing (the marker is the record). A partition that is loading is left alone:
        the loader reads the log to its end and replays the marker itself. A partition not held
        here is ignored too: whoever loads it replays the marker. Like Kafka, the pending
        offsets are matched by producer id only; the log has already checked the marker's epoch.
        """
        if partition in self._owned:
            self._end_transaction(partition, producer_id, commit)

    def pending_transactional_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset for this partition of ``group_id``
        (OffsetFetch's ``require_stable``, KIP-447; expiry skips such offsets)."""
        txn = self._txn.get(self.partition_for(group_id))
        return txn is not None and txn.has(group_id, (topic, partition))

    def pending_offsets(self, partition: int, producer_id: int) -> dict:
        """The pending offsets of ``producer_id`` in ``partition``: {(group, topic, partition):
        CommittedOffset} (a copy; for tools and tests)."""
        txn = self._txn.get(partition)
        return dict(txn.by_producer.get(producer_id, {})) if txn is not None else {}

    # ---- loading ---------------------------------------------------------------------------------

    def replay_transactional(self, partition: int, producer_id: int, record) -> None:
        """Apply one record of a transactional batch of ``producer_id`` read from ``partition``
        while loading (log order). Offsets become pending; anything else (Kafka never writes
        it transactionally) is applied as a plain record would be. None is ignored."""
        if partition not in self._loading:
            raise ValueError(f"__consumer_offsets-{partition} is not loading")
        if record is None:
            return
        if isinstance(record, OffsetCommitRecord):
            groups = self._partitions[partition]
            if record.group not in groups:
                groups[record.group] = ClassicGroup(record.group)  # a simple group
            self._apply_pending(partition, producer_id, record)
        else:
            self._apply(self._partitions[partition], record)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """Apply a COMMIT/ABORT control record of ``producer_id`` read from ``partition`` while
        loading (log order)."""
        if partition not in self._loading:
            raise ValueError(f"__consumer_offsets-{partition} is not loading")
        self._end_transaction(partition, producer_id, commit)

    # ---- internals -------------------------------------------------------------------------------

    def _apply_pending(self, partition: int, producer_id: int, record: OffsetCommitRecord) -> None:
        offset = CommittedOffset(
            offset=record.offset,
            leader_epoch=record.leader_epoch,
            metadata=record.metadata,
            commit_timestamp_ms=record.commit_timestamp,
            expire_timestamp_ms=record.expire_timestamp,
            record_order=self._next_record_order(),
        )
        self._txn[partition].add(
            producer_id, record.group, (record.topic, record.partition), offset
        )

    def _end_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        pending = self._txn[partition].pop_producer(producer_id)
        if not commit:
            return
        groups = self._partitions[partition]
        for (group_id, topic, p), offset in pending.items():
            group = groups.get(group_id)
            if group is None:  # deleted meanwhile without tombstones for these: a simple group
                group = groups[group_id] = ClassicGroup(group_id)
            existing = group.offsets.get((topic, p))
            if existing is None or offset.record_order > existing.record_order:
                group.offsets[topic, p] = offset
