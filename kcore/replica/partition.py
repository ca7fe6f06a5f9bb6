"""One partition as this broker sees it: its role, epochs, replicas, and its local log.

The metadata log says who leads each partition at which leader epoch; the replica manager turns
each change into :meth:`Partition.update_state`. A partition is the **leader** here when the
metadata names this node, a **follower** when this node is another replica.

Leader-side checks every request goes through (:meth:`Partition.check_leader_epoch`):

* a request carrying a *current leader epoch* older than ours gets FENCED_LEADER_EPOCH (the
  client's metadata is stale); a newer one gets UNKNOWN_LEADER_EPOCH (ours is stale);
* a produce or consumer fetch to a follower gets NOT_LEADER_OR_FOLLOWER.

High watermark: on a leader it is the smallest log end offset of the in-sync replicas; with
this node as the only in-sync replica that is the local log end offset, set after every append.
Writes pass the partition's **write guard** first: cluster mirroring installs one that refuses
local writes to read-only mirror topics (decision D-18) while letting the mirror fetcher in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kcore.log.partition_log import FetchDataInfo, FetchIsolation, LogAppendInfo, PartitionLog
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError

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


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    node_id: int
    log: PartitionLog
    state: PartitionState = field(default_factory=PartitionState)
    # LEO of each follower as last reported by its fetches (the leader's view).
    follower_end_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.node_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def update_state(self, state: PartitionState) -> bool:
        """Apply a new registration; returns True when this node just became leader."""
        became_leader = state.leader == self.node_id and (
            not self.is_leader or state.leader_epoch != self.state.leader_epoch
        )
        self.state = state
        if became_leader:
            self.follower_end_offsets = {}
            self.maybe_advance_high_watermark()
        return became_leader

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

    # -- appends ---------------------------------------------------------------------------

    def append_as_leader(
        self,
        records,
        *,
        required_acks: int,
        min_insync_replicas: int,
        now_ms: int,
        origin: AppendOrigin,
        write_guard: WriteGuard | None,
    ) -> LogAppendInfo:
        self.check_leader_epoch(-1, require_leader=True)
        if write_guard is not None:
            write_guard(self, origin)
        if required_acks == -1 and len(self.state.isr) < min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self.name} has {len(self.state.isr)} in-sync replicas, fewer than "
                f"min.insync.replicas ({min_insync_replicas})",
            )
        info = self.log.append_as_leader(
            records, self.state.leader_epoch, now_ms=now_ms, origin=origin
        )
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> bool:
        """HW = the smallest LEO among in-sync replicas (this node's own: its log's LEO)."""
        if not self.is_leader:
            return False
        ends = [
            self.log.log_end_offset if r == self.node_id else self.follower_end_offsets.get(r, -1)
            for r in self.state.isr
        ] or [self.log.log_end_offset]
        new_hw = min(ends)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    # -- reads -----------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        *,
        current_leader_epoch: int = -1,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Consumers and followers both read from the leader (no KIP-392 follower fetching)."""
        self.check_leader_epoch(current_leader_epoch, require_leader=True)
        return self.log.read(fetch_offset, max_bytes, isolation, min_one_batch=min_one_batch)
