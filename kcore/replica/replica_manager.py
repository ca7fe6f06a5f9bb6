"""The replica manager: the partitions this broker hosts, and every read and write of them.

Theory of operation
-------------------
The metadata layer hands each image delta to :meth:`ReplicaManager.apply_delta` (Kafka's
``ReplicaManager.applyDelta``): partitions deleted or no longer replicated here are dropped,
the others get their local log (created the first time this node is a replica) and are made
leader or follower at their new epoch. Then every **listener** (:meth:`add_listener`) hears
what changed (:class:`PartitionChanges`): the coordinators load or unload their partitions,
cluster mirroring starts or stops its fetchers, later the follower fetchers. Nothing here
calls them by name.

Requests then reach partitions only through here:

* :meth:`append_records` — Produce and the coordinators: leader checks, the write guard
  (mirror read-only topics, D-18), ``min.insync.replicas`` for ``acks=all``, the append, the
  high watermark, and a purgatory notification so waiting fetches wake up;
* :meth:`append_as_follower` — batches that keep their offsets and epochs (the cluster
  mirror's copy of a source partition, a follower's of its leader: ``kcore.replica.follower``);
* :meth:`fetch` — consumers and followers: ``Partition.fetch_records`` (leader-epoch checks,
  the diverging epoch, reads bounded by the isolation level, then the follower's position,
  which moves the HW and may let the follower back into the ISR: ``alter_isr``);
* :meth:`maybe_shrink_isrs` — the periodic ISR shrink of every partition led here;
* :meth:`delete_records` — DeleteRecords, through the write guard;
* :meth:`partition_or_error` / :meth:`leader_partition` — the lookups ListOffsets,
  OffsetsForLeaderEpoch, DescribeProducers and the KIP-890 verification make.

The **write guard** is given at construction (cluster mirroring's, or one that allows every
write); :meth:`hold_read_only` / :meth:`release_read_only` keep one partition read-only for a
mirror whatever its config says (the STOPPING sequence: writable only once STOPPED, M-05).

Errors are per partition (:class:`KafkaError` raised from a partition's operation is caught by
the handler and put in that partition's response entry).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kcore.log.log_manager import LogManager
from kcore.log.partition_log import FollowerHeader, LogAppendInfo
from kcore.log.producer_state import AppendOrigin
from kcore.metadata.topic_names import INTERNAL_TOPICS
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.isr import IsrChange
from kcore.replica.partition import (
    FetchParams,
    LogReadResult,
    Partition,
    PartitionState,
    WriteGuard,
    allow_all_writes,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PartitionChanges:
    """What one metadata delta changed among this node's partitions, as listeners hear it.

    ``leaders`` / ``followers``: partitions made leader / follower by the delta (new ones, or
    a new epoch or leader); ``removed``: partitions this node no longer hosts.
    """

    leaders: list[Partition] = field(default_factory=list)
    followers: list[Partition] = field(default_factory=list)
    removed: list[TopicPartition] = field(default_factory=list)


#: A listener of partition changes (coordinators, the mirror manager, follower fetchers).
PartitionListener = Callable[[PartitionChanges], None]


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        *,
        notify: Callable[[TopicPartition], None] = lambda tp: None,
        min_insync_replicas: Callable[[str], int] = lambda topic: 1,
        write_guard: WriteGuard = allow_all_writes,
        alter_isr: Callable[[Partition, IsrChange], None] = lambda partition, change: None,
    ) -> None:
        """``notify(tp)`` is called after every append and high-watermark move (the
        purgatory); ``min_insync_replicas(topic)`` resolves the topic's setting;
        ``write_guard`` judges every write (see :data:`~kcore.replica.partition.WriteGuard`);
        ``alter_isr(partition, change)`` sends an ISR change a leader proposes to the
        controller (``kcore.replica.alter_partition``)."""
        self.node_id = node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.notify = notify
        self.min_insync_replicas = min_insync_replicas
        self.write_guard = write_guard
        self.alter_isr = alter_isr
        self._listeners: list[PartitionListener] = []

    # -- what the metadata says ------------------------------------------------------------

    def add_listener(self, listener: PartitionListener) -> None:
        """Call ``listener(changes)`` after every delta that changed this node's partitions."""
        self._listeners.append(listener)

    def apply_delta(self, topics_delta, now_ms: int) -> PartitionChanges:
        """Apply a metadata image's topics delta (``kcore.metadata.delta``) to this node's
        partitions, then tell every listener; returns the changes."""
        changes = PartitionChanges()
        local = topics_delta.local_changes(self.node_id)
        for topic_id, index in local.deletes:
            old = topics_delta.previous.by_id.get(topic_id) or topics_delta.deleted.get(topic_id)
            if old is not None and self.remove_partition(old.name, index, delete_log=True):
                changes.removed.append((old.name, index))
        for (topic_id, index), (name, reg) in {**local.followers, **local.leaders}.items():
            state = PartitionState(
                leader=reg.leader,
                leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch,
                replicas=tuple(reg.replicas),
                isr=tuple(reg.isr),
            )
            partition = self.apply_partition(name, topic_id, index, state, now_ms)
            if partition is None:
                changes.removed.append((name, index))
            elif partition.is_leader:
                changes.leaders.append(partition)
            else:
                changes.followers.append(partition)
        for listener in self._listeners:
            listener(changes)
        return changes

    def apply_partition(
        self, topic: str, topic_id: uuid.UUID, index: int, state: PartitionState, now_ms: int
    ) -> Partition | None:
        """Host (or update) a partition this node is a replica of; drop it if no longer one."""
        tp = (topic, index)
        if self.node_id not in state.replicas:
            self.remove_partition(topic, index, delete_log=True)
            return None
        self.topic_names[topic_id] = topic
        partition = self.partitions.get(tp)
        if partition is None:
            plog = self.log_manager.get_or_create_log(topic, index, topic_id, now_ms)
            partition = Partition(topic, index, topic_id, self.node_id, plog, self.write_guard)
            self.partitions[tp] = partition
        if state.leader == self.node_id:
            if partition.make_leader(state, now_ms):
                log.info(
                    "became leader of %s at leader epoch %d", partition.name, state.leader_epoch
                )
        else:
            partition.make_follower(state)
        self.notify(tp)
        return partition

    def remove_partition(self, topic: str, index: int, *, delete_log: bool) -> bool:
        """Stop hosting a partition (deleting its log if asked); False if it was not hosted."""
        partition = self.partitions.pop((topic, index), None)
        if partition is None:
            return False
        if delete_log:
            self.log_manager.delete_log(topic, index)
        if not any(t == topic for t, _ in self.partitions):
            self.topic_names.pop(partition.topic_id, None)
        self.notify((topic, index))
        return True

    # -- read-only holds (cluster mirroring) -----------------------------------------------

    def hold_read_only(self, tp: TopicPartition, mirror: str) -> None:
        """Keep ``tp`` read-only for ``mirror`` whatever its ``mirror.name`` says, until
        :meth:`release_read_only` (the STOPPING sequence: the config already ends in
        ``.stopped`` while markers are still being written, spec M-05). Raises KafkaError
        UNKNOWN_TOPIC_OR_PARTITION if this node does not host it."""
        self.partition_or_error(*tp).read_only_hold = mirror

    def release_read_only(self, tp: TopicPartition) -> None:
        """End :meth:`hold_read_only` (a partition not hosted here: nothing to do)."""
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.read_only_hold = None

    # -- lookups ---------------------------------------------------------------------------

    def partition_or_error(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"this server does not host {topic}-{index}",
            )
        return partition

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1):
        partition = self.partition_or_error(topic, index)
        partition.check_leader_epoch(current_leader_epoch, require_leader=True)
        return partition

    # -- writes ----------------------------------------------------------------------------

    def append_records(
        self,
        topic: str,
        index: int,
        records,
        *,
        required_acks: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Append to a partition this node leads; raises KafkaError for that partition."""
        if origin is AppendOrigin.CLIENT and topic in INTERNAL_TOPICS:
            # Only their coordinators write there: a client's record could corrupt group or
            # transaction state (Kafka refuses it the same way).
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}"
            )
        partition = self.partition_or_error(topic, index)
        info = partition.append_as_leader(
            records,
            required_acks=required_acks,
            min_insync_replicas=self.min_insync_replicas(topic),
            now_ms=now_ms,
            origin=origin,
        )
        self.notify((topic, index))
        return info

    def append_as_follower(
        self,
        tp: TopicPartition,
        records,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.REPLICATION,
        headers: list[FollowerHeader | None] | None = None,
    ) -> LogAppendInfo:
        """Append batches that keep their offsets and epochs (``Partition.append_as_follower``)
        and wake the fetches and acks=all produces waiting on the partition."""
        partition = self.partition_or_error(*tp)
        info = partition.append_as_follower(records, now_ms=now_ms, origin=origin, headers=headers)
        self.notify(tp)
        return info

    def delete_records(self, topic: str, index: int, offset: int, now_ms: int) -> int:
        """DeleteRecords on a partition this node leads; returns the new low watermark."""
        low = self.partition_or_error(topic, index).delete_records(offset, now_ms)
        self.notify((topic, index))
        return low

    # -- reads -----------------------------------------------------------------------------

    def fetch(self, topic: str, index: int, params: FetchParams) -> LogReadResult:
        """Read one partition for a consumer or follower (``Partition.fetch_records``)."""
        partition = self.partition_or_error(topic, index)
        hw = partition.high_watermark
        result = partition.fetch_records(params)
        if result.high_watermark != hw:
            self.notify((topic, index))  # a follower's fetch moved the high watermark
        if result.isr_change is not None:
            self.alter_isr(partition, result.isr_change)  # a follower caught up: ISR expansion
        return result

    def maybe_shrink_isrs(self, now_ms: int, lag_ms: int) -> None:
        """Propose removing the followers that lag more than ``lag_ms`` from the ISR of every
        partition led here (Kafka's ``maybeShrinkIsr``, run every half lag period)."""
        for partition in self.partitions.values():
            change = partition.maybe_shrink_isr(now_ms, lag_ms)
            if change is not None:
                self.alter_isr(partition, change)

    def update_follower_high_watermark(self, tp: TopicPartition, leader_hw: int) -> None:
        """A follower learned its leader's HW (``Partition.update_follower_high_watermark``)."""
        partition = self.partitions.get(tp)
        if partition is not None and partition.update_follower_high_watermark(leader_hw):
            self.notify(tp)
