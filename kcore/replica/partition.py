"""One partition as this broker sees it: its role, epochs, replicas, and its local log.

The metadata log says who leads each partition at which leader epoch; the replica manager turns
each change into :meth:`Partition.make_leader` or :meth:`Partition.make_follower` (Kafka's
``Partition.makeLeader`` / ``makeFollower``). A partition is the **leader** here when the
metadata names this node, a **follower** when this node is another replica.

Leader-side checks every request goes through (:meth:`Partition.check_leader_epoch`):

* a request carrying a *current leader epoch* older than ours gets FENCED_LEADER_EPOCH (the
  client's metadata is stale); a newer one gets UNKNOWN_LEADER_EPOCH (ours is stale);
* a produce or consumer fetch to a follower gets NOT_LEADER_OR_FOLLOWER.

High watermark: on a leader it is the smallest log end offset of the in-sync replicas
(:class:`~kcore.replica.isr.LeaderIsrState`, which also tracks each follower's fetches and
proposes ISR changes); with this node as the only in-sync replica that is the local log end
offset, set after every append. A follower takes its leader's HW, capped at its own log end
offset (:meth:`Partition.update_follower_high_watermark`).

Writes pass the partition's **write guard** first, given at construction: cluster mirroring's
refuses local writes to read-only mirror topics (decision D-18) while letting the mirror's own
(``AppendOrigin.MIRROR``) in. :attr:`Partition.read_only_hold` keeps a partition read-only for a
mirror whatever its config says (the STOPPING sequence, spec M-05).

Server code reaches the log only through this class (reads, appends, truncation, DeleteRecords,
producer-state checks, epoch lookups), so that the rules of each live in one place.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kcore.log.log_reads import FetchDataInfo, FetchIsolation
from kcore.log.partition_log import FollowerHeader, LogAppendInfo, PartitionLog
from kcore.log.producer_state import AppendOrigin, ProducerStateManager
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.isr import IsrChange, LeaderIsrState
from kcore.replica.list_offsets import fetch_offset_for_timestamp

NO_LEADER = -1


@dataclass(slots=True)
class PartitionState:
    """The partition's registration in the metadata image."""

    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


# (partition, origin) -> raise KafkaError to refuse the write.
WriteGuard = Callable[["Partition", AppendOrigin], None]


def allow_all_writes(partition: Partition, origin: AppendOrigin) -> None:
    """The write guard of a broker without cluster mirroring: every write may go in."""


@dataclass(frozen=True, slots=True)
class FetchParams:
    """One partition of a Fetch, as the replica layer reads it.

    ``replica_id`` is the fetching follower's id (-1: a consumer); ``current_leader_epoch`` and
    ``last_fetched_epoch`` are -1 when the fetcher sent none. ``fetch_only_leader`` is Kafka's
    ``FetchParams.fetchOnlyLeader``: False for a consumer that may read from a follower (Fetch
    v11+, KIP-392), which a follower then serves up to its high watermark.
    """

    fetch_offset: int
    max_bytes: int
    isolation: FetchIsolation
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    replica_id: int = -1
    min_one_batch: bool = True
    replica_epoch: int = -1  # the follower's broker epoch (ReplicaState, Fetch v15+)
    now_ms: int = 0  # when the fetch is served (a follower's caught-up time)
    log_start_offset: int = -1  # the fetching follower's own (Fetch v5+), -1 unknown
    fetch_only_leader: bool = True


@dataclass(slots=True)
class LogReadResult:
    """What a read of one partition returns (Kafka's ``LogReadResult``): the records (empty
    when the fetcher must truncate first), the partition's offsets at the time of the read,
    and the diverging epoch ``(epoch, end offset)`` when the fetcher's ``last_fetched_epoch``
    is not in this log's history as it says (KIP-595: truncate to ``end offset``, then fetch
    again)."""

    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: tuple[int, int] | None = None
    # A follower's fetch that lets it back into the ISR: the change to send the controller.
    isr_change: IsrChange | None = None


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    node_id: int
    log: PartitionLog
    write_guard: WriteGuard = allow_all_writes
    state: PartitionState = field(default_factory=PartitionState)
    # While leading: the followers' fetch positions and the ISR (None on a follower).
    isr_state: LeaderIsrState | None = None
    # The mirror that keeps this partition read-only whatever its config says (M-05), or None.
    read_only_hold: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.node_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    # -- offsets (the log's, read through here) ------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        """For the KIP-890 verification and DescribeProducers (read and guard, never write)."""
        return self.log.producer_state

    @property
    def latest_epoch(self) -> int | None:
        """The leader epoch of the last batch in the log (None for an empty history)."""
        return self.log.latest_epoch

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation_level: int, replica_id: int
    ) -> tuple[int, int, int]:
        """ListOffsets: ``(offset, timestamp, leader epoch)`` (see ``kcore.replica.list_offsets``)."""
        return fetch_offset_for_timestamp(self, timestamp, isolation_level, replica_id)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``."""
        return self.log.end_offset_for_epoch(epoch)

    # -- roles -----------------------------------------------------------------------------

    def make_leader(self, state: PartitionState, now_ms: int = 0) -> bool:
        """This node leads at ``state.leader_epoch``; returns True when it just became leader
        or its epoch changed (followers' positions are forgotten: they report again). The same
        epoch with a new partition epoch commits the ISR the controller has."""
        changed = not self.is_leader or state.leader_epoch != self.state.leader_epoch
        self.state = state
        if changed or self.isr_state is None:
            self.isr_state = LeaderIsrState(
                self.node_id,
                state.replicas,
                state.isr or (self.node_id,),
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                epoch_start_offset=self.log.log_end_offset,
                now_ms=now_ms,
            )
        else:
            self.isr_state.update_replicas(state.replicas, now_ms)
            self.isr_state.committed(state.isr or (self.node_id,), state.partition_epoch)
        self.maybe_advance_high_watermark()
        return changed

    def make_follower(self, state: PartitionState) -> bool:
        """Another node leads; returns True when the leader or its epoch changed."""
        changed = state.leader != self.state.leader or state.leader_epoch != self.state.leader_epoch
        self.state = state
        self.isr_state = None
        return changed

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the leader counts for the HW and for acks=all (see ``kcore.replica.isr``)."""
        return self.state.isr if self.isr_state is None else self.isr_state.maximal_isr

    @property
    def committed_isr(self) -> tuple[int, ...]:
        return self.state.isr if self.isr_state is None else self.isr_state.isr

    # -- checks ----------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool) -> None:
        """Kafka's leader checks; ``-1`` means the client sent no epoch."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.state.leader_epoch:
                raise KafkaError(
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"{self.name}: leader epoch {current_leader_epoch} is older than the current "
                    f"{self.state.leader_epoch}",
                )
            if current_leader_epoch > self.state.leader_epoch:
                raise KafkaError(
                    ErrorCode.UNKNOWN_LEADER_EPOCH,
                    f"{self.name}: leader epoch {current_leader_epoch} is newer than the current "
                    f"{self.state.leader_epoch}",
                )
        if require_leader and not self.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"this broker ({self.node_id}) is not the leader of {self.name} "
                f"(leader {self.state.leader})",
            )

    def check_writable(self, origin: AppendOrigin) -> None:
        """The write guard's verdict for a write of ``origin`` (raises KafkaError to refuse)."""
        self.write_guard(self, origin)

    # -- appends ---------------------------------------------------------------------------

    def append_as_leader(
        self,
        records,
        *,
        required_acks: int,
        min_insync_replicas: int,
        now_ms: int,
        origin: AppendOrigin,
    ) -> LogAppendInfo:
        self.check_leader_epoch(-1, require_leader=True)
        self.write_guard(self, origin)
        isr = self.committed_isr
        if required_acks == -1 and len(isr) < min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self.name} has {len(isr)} in-sync replicas, fewer than "
                f"min.insync.replicas ({min_insync_replicas})",
            )
        info = self.log.append_as_leader(
            records, self.state.leader_epoch, now_ms=now_ms, origin=origin
        )
        self.maybe_advance_high_watermark()
        return info

    def append_as_follower(
        self,
        records,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.REPLICATION,
        headers: list[FollowerHeader | None] | None = None,
    ) -> LogAppendInfo:
        """Append batches that carry their offsets and epochs: a follower's copy of its leader,
        or the cluster mirror's copy of a source partition (``origin=MIRROR``: this node may
        well lead the destination partition). Checked by the write guard, then by the log
        (CRC as received, offsets increasing: see ``PartitionLog.append_as_follower``); the
        high watermark moves as for any append on a leader."""
        self.write_guard(self, origin)
        info = self.log.append_as_follower(records, now_ms=now_ms, origin=origin, headers=headers)
        self.maybe_advance_high_watermark()
        return info

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above ``offset``; raises ``TruncationError`` below the
        log start offset (see ``PartitionLog.truncate_to``)."""
        return self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """Empty the log and restart it at ``offset`` (the mirror's D-16)."""
        self.log.truncate_fully_and_start_at(offset, now_ms)

    def delete_records(self, offset: int, now_ms: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1: the high watermark) and
        delete the segments wholly below it; returns the new low watermark. A write: the
        write guard refuses it on a read-only mirror topic (D-18)."""
        self.check_leader_epoch(-1, require_leader=True)
        self.write_guard(self, AppendOrigin.CLIENT)
        if not self.log.config.delete:  # as Kafka's Partition.deleteRecordsOnLeader
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"records of {self.log.name} cannot be deleted: cleanup.policy has no delete",
            )
        target = self.log.high_watermark if offset == -1 else offset
        if target < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset}")
        low = self.log.increment_log_start_offset(target)
        self.log.delete_segments_below_log_start(now_ms)
        return low

    def maybe_advance_high_watermark(self) -> bool:
        """HW = the smallest LEO of the maximal ISR, never moving back (leader only)."""
        if not self.is_leader:
            return False
        leo = self.log.log_end_offset
        new_hw = leo if self.isr_state is None else self.isr_state.high_watermark(leo)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """A follower: the leader's HW, capped at the local log end offset (Kafka's follower
        takes ``min(leader HW, LEO)``); returns whether it moved."""
        if self.is_leader or leader_high_watermark < 0:
            return False
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw == self.log.high_watermark:
            return False
        self.log.update_high_watermark(hw)
        return True

    def maybe_shrink_isr(self, now_ms: int, lag_ms: int) -> IsrChange | None:
        """The ISR without followers lagging more than ``lag_ms`` (leader only)."""
        if self.isr_state is None or not self.is_leader:
            return None
        return self.isr_state.maybe_shrink(self.log.log_end_offset, now_ms, lag_ms)

    def missing_truncation(
        self, fetched_after_ms: int, *, all_replicas: bool, min_isr: int
    ) -> str | None:
        """Why the replicas do not have this leader's truncation of its log yet (None: they
        do; see ``LeaderIsrState.missing_truncation``). Raises NOT_LEADER_OR_FOLLOWER once
        this node no longer leads."""
        self.check_leader_epoch(-1, require_leader=True)
        if self.isr_state is None:
            return None
        return self.isr_state.missing_truncation(
            self.log.log_end_offset,
            fetched_after_ms,
            all_replicas=all_replicas,
            min_isr=min_isr,
        )

    def isr_committed(self, isr, leader_epoch: int, partition_epoch: int) -> bool:
        """The controller accepted an ISR change (its AlterPartition answer); False when this
        node no longer leads at that epoch (the answer is stale)."""
        if self.isr_state is None or leader_epoch != self.state.leader_epoch:
            return False
        self.isr_state.committed(isr, partition_epoch)
        self.maybe_advance_high_watermark()
        return True

    # -- reads -----------------------------------------------------------------------------

    def fetch_records(self, params: FetchParams) -> LogReadResult:
        """Read for a consumer or a follower (Kafka's ``Partition.fetchRecords``).

        In order: the leader-epoch checks (raising KafkaError; NOT_LEADER_OR_FOLLOWER on a
        follower unless ``params.fetch_only_leader`` is False); then, with a
        ``last_fetched_epoch`` and a log with epochs, the divergence check of KIP-595 (a
        result with no records and the diverging epoch; an empty log has no epoch to name, and
        a fetch above its end gets OFFSET_OUT_OF_RANGE from the read); then the read. A follower's fetch offset is recorded as its log
        end offset, moving the high watermark, only after all of these passed: a fenced or
        diverging follower moves nothing.
        """
        self.check_leader_epoch(
            params.current_leader_epoch, require_leader=params.fetch_only_leader
        )
        plog = self.log
        if params.last_fetched_epoch >= 0 and plog.latest_epoch is not None:
            epoch, end = plog.end_offset_for_epoch(params.last_fetched_epoch)
            if epoch < 0:
                # The fetcher's epoch is above every epoch of this log. A Kafka leader always
                # has its own epoch in its cache, so that cannot happen there; a cluster
                # mirror's destination leader writes the source's epochs, which may be below
                # a follower's (the failover's markers at the bumped epoch, then a Start that
                # copied the source again from scratch). The log's latest epoch ends at the
                # log end: the follower cuts what it has above it (-1 would tell it nothing).
                epoch, end = plog.latest_epoch, plog.log_end_offset
            if epoch < params.last_fetched_epoch or end < params.fetch_offset:
                return self._result(FetchDataInfo(params.fetch_offset), (epoch, end))
        info = plog.read(
            params.fetch_offset,
            params.max_bytes,
            params.isolation,
            min_one_batch=params.min_one_batch,
        )
        change = None
        if params.replica_id >= 0:
            change = self.follower_fetched(
                params.replica_id,
                params.fetch_offset,
                params.now_ms,
                params.replica_epoch,
                params.log_start_offset,
            )
        result = self._result(info, None)
        result.isr_change = change
        return result

    def follower_fetched(
        self,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        broker_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> IsrChange | None:
        """Record a follower's fetch position, move the HW, and return the ISR expansion it
        allows (None: none). Raises NOT_LEADER_OR_FOLLOWER for a broker that is no replica."""
        isr = self.isr_state
        if isr is None or replica_id not in isr.followers:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {replica_id} is not a follower of {self.name} "
                f"(replicas {list(self.state.replicas)})",
            )
        isr.follower_fetched(
            replica_id,
            fetch_offset,
            self.log.log_end_offset,
            now_ms,
            broker_epoch,
            log_start_offset,
        )
        self.maybe_advance_high_watermark()
        return isr.maybe_expand(replica_id, self.log.high_watermark)

    def _result(self, info: FetchDataInfo, diverging: tuple[int, int] | None) -> LogReadResult:
        plog = self.log
        return LogReadResult(
            info,
            plog.high_watermark,
            plog.last_stable_offset,
            plog.log_start_offset,
            plog.log_end_offset,
            diverging,
        )

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        *,
        current_leader_epoch: int = -1,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """A plain read on the leader (coordinators loading their partitions)."""
        self.check_leader_epoch(current_leader_epoch, require_leader=True)
        return self.log.read(fetch_offset, max_bytes, isolation, min_one_batch=min_one_batch)
