"""The replica manager: the partitions this broker hosts, and every read and write of them.

Theory of operation
-------------------
The metadata layer tells the replica manager, partition by partition, what the cluster decided
(:meth:`ReplicaManager.apply_partition`, :meth:`ReplicaManager.remove_partition`); it creates the
local log the first time this node is a replica, and updates the partition's role and epochs.
Requests then reach partitions only through here:

* :meth:`append_records` — Produce and the coordinators: leader checks, the write guard
  (mirror read-only topics, D-18), ``min.insync.replicas`` for ``acks=all``, the append, the
  high watermark, and a purgatory notification so waiting fetches wake up;
* :meth:`fetch` — consumers and followers: leader-epoch checks, reads bounded by the isolation
  level, and (for followers) the recording of their log end offsets to move the high watermark;
* :meth:`partition_or_error` — the lookups ListOffsets, DeleteRecords, OffsetsForLeaderEpoch
  and DescribeProducers make.

Errors are per partition (:class:`KafkaError` raised from a partition's operation is caught by
the handler and put in that partition's response entry).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from kcore.log.log_manager import LogManager
from kcore.log.partition_log import FetchDataInfo, FetchIsolation, LogAppendInfo
from kcore.log.producer_state import AppendOrigin
from kcore.metadata.topic_names import INTERNAL_TOPICS
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.partition import Partition, PartitionState, WriteGuard

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        *,
        notify: Callable[[TopicPartition], None] = lambda tp: None,
        min_insync_replicas: Callable[[str], int] = lambda topic: 1,
    ) -> None:
        """``notify(tp)`` is called after every append and high-watermark move (the
        purgatory); ``min_insync_replicas(topic)`` resolves the topic's setting."""
        self.node_id = node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.notify = notify
        self.min_insync_replicas = min_insync_replicas
        self.write_guard: WriteGuard | None = None

    # -- what the metadata says ------------------------------------------------------------

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
            partition = Partition(topic, index, topic_id, self.node_id, plog)
            self.partitions[tp] = partition
        if partition.update_state(state):
            log.info("became leader of %s at leader epoch %d", partition.name, state.leader_epoch)
        self.notify(tp)
        return partition

    def remove_partition(self, topic: str, index: int, *, delete_log: bool) -> None:
        partition = self.partitions.pop((topic, index), None)
        if partition is None:
            return
        if delete_log:
            self.log_manager.delete_log(topic, index)
        if not any(t == topic for t, _ in self.partitions):
            self.topic_names.pop(partition.topic_id, None)
        self.notify((topic, index))

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
            write_guard=self.write_guard,
        )
        self.notify((topic, index))
        return info

    # -- reads -----------------------------------------------------------------------------

    def fetch(
        self,
        topic: str,
        index: int,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        *,
        current_leader_epoch: int = -1,
        replica_id: int = -1,
        min_one_batch: bool = True,
    ) -> tuple[Partition, FetchDataInfo]:
        partition = self.partition_or_error(topic, index)
        if replica_id >= 0 and partition.is_leader:
            # A follower's fetch offset is its log end offset: it may move the HW.
            partition.follower_end_offsets[replica_id] = fetch_offset
            if partition.maybe_advance_high_watermark():
                self.notify((topic, index))
        data = partition.read(
            fetch_offset,
            max_bytes,
            isolation,
            current_leader_epoch=current_leader_epoch,
            min_one_batch=min_one_batch,
        )
        return partition, data
