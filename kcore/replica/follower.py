"""Follower replication's local side: a follower's copy of its leader (Kafka's
``ReplicaFetcherThread.processPartitionData``, ``truncate``, ``handleOutOfRangeError``).

:class:`FollowerPartitionHandler` is the ``PartitionHandler`` (``kcore.replica.fetcher``) of
the replica fetchers: every batch the leader sent is appended as it is
(``ReplicaManager.append_as_follower``, ``AppendOrigin.REPLICATION``): offsets, leader epochs,
producer ids, sequence numbers, timestamps and CRCs untouched, the CRC checked as received.
The log's follower append keeps producer state, the transaction index (markers included) and
the leader epoch cache exactly as the leader's, from the batches themselves. After each answer
the follower's high watermark becomes the leader's, capped at its own log end offset.

Truncation is by the leader's diverging epoch (Fetch v12+, KIP-595): a follower starts
fetching at its log end offset with its latest epoch as ``LastFetchedEpoch``, and a leader
whose history does not have that epoch there answers where it ends instead of records
(:func:`truncate_to_divergence`, shared with the cluster mirror). An out-of-range fetch offset
is resolved as Kafka's follower does: above the leader's log end offset (the leader lost
records this follower had, an unclean election) truncate to it; below the leader's log start
offset restart the log empty at it.

:class:`FollowerFetchers` listens to the replica manager (``PartitionChanges``): a partition
made follower joins the fetcher of its leader from its log end offset, one made leader or
removed leaves it. :class:`LocalLeaders` is the ``LeaderLocator`` over this broker's metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_state import (
    AppendRecords,
    PartitionError,
    PartitionResponse,
    TopicPartition,
    TruncateOnDivergence,
)
from kcore.replica.fetcher import (
    AppendResult,
    FetcherManager,
    InitialFetchState,
    LeaderEndpoint,
    OutOfRangeAction,
)
from kcore.replica.partition import NO_LEADER, Partition
from kcore.replica.replica_manager import PartitionChanges, ReplicaManager

log = logging.getLogger(__name__)

__all__ = [
    "FollowerFetchers",
    "FollowerPartitionHandler",
    "LocalLeaders",
    "refetch_if_cut",
    "truncate_to_divergence",
]


def refetch_if_cut(partition: Partition, output: AppendRecords, who: str) -> AppendResult | None:
    """The records were fetched from above the local log end offset: the log was truncated
    under the fetcher (a divergence, a mirror's failback). Appending them would leave a hole
    where the leader has records: fetch again from the log end offset (which may be lower).
    None when the fetch offset is the log end offset (append)."""
    end = partition.log_end_offset
    if output.fetch_offset <= end:
        return None
    log.warning(
        "%s: %s-%d was fetched from %d but the log ends at %d: fetching again from the log "
        "end offset", who, *output.tp, output.fetch_offset, end,
    )  # fmt: skip
    return AppendResult(end, partition.latest_epoch, refetch=True)


def restart_inside_first_batch(partition: Partition, first_offset: int, now_ms: int) -> None:
    """An empty log restarted inside a batch (the leader's log start offset is inside it, after
    DeleteRecords): start where the batch does, as Kafka's follower does on an
    UnexpectedAppendOffsetException."""
    if first_offset < partition.log_end_offset == partition.log_start_offset:
        partition.truncate_fully_and_start_at(first_offset, now_ms)


def truncate_to_divergence(
    partition: Partition, output: TruncateOnDivergence, now_ms: int
) -> tuple[int, int | None]:
    """Truncate where the leader's history diverges (Kafka's truncateOnFetchResponse): to the
    smaller of the two ends of ``epoch`` -- the leader's, and the local one (the local epoch may
    end first: what follows it locally is not the leader's; without the epoch, where the local
    epoch below it ends, so the next fetch, at a lower epoch, settles the rest) -- never above
    the log end; returns ``(log end offset, latest epoch)``."""
    _, local_end = partition.end_offset_for_epoch(output.epoch)
    target = max(min(local_end, output.end_offset, partition.log_end_offset), 0)
    if target < partition.log_start_offset:
        partition.truncate_fully_and_start_at(target, now_ms)
    else:
        partition.truncate_to(target)
    return partition.log_end_offset, partition.latest_epoch


class FollowerPartitionHandler:
    """The local side of the replica fetchers (see the module docstring)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.replicas = replica_manager
        self.now_ms = now_ms

    def _follower(self, tp: TopicPartition) -> Partition:
        partition = self.replicas.partition_or_error(*tp)
        if partition.is_leader:  # made leader while the fetch was in flight
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{partition.name} is led by this broker now"
            )
        return partition

    def on_fetched(self, tp: TopicPartition, response: PartitionResponse) -> None:
        self.replicas.update_follower_high_watermark(tp, response.high_watermark)

    def append(self, output: AppendRecords) -> AppendResult:
        tp = output.tp
        partition = self._follower(tp)
        refetch = refetch_if_cut(partition, output, "replica fetcher")
        if refetch is not None:
            return refetch
        now = self.now_ms()
        records = memoryview(output.records)
        if len(records) >= 8:
            restart_inside_first_batch(partition, int.from_bytes(records[:8], "big"), now)
        self.replicas.append_as_follower(tp, records, now_ms=now, origin=AppendOrigin.REPLICATION)
        self.replicas.update_follower_high_watermark(tp, output.high_watermark)
        return AppendResult(partition.log_end_offset, partition.latest_epoch)

    def truncate_on_divergence(self, output: TruncateOnDivergence) -> tuple[int, int | None]:
        partition = self._follower(output.tp)
        before = partition.log_end_offset
        result = truncate_to_divergence(partition, output, self.now_ms())
        log.info(
            "%s diverged from its leader at epoch %d (ending at %d there): truncated from %d "
            "to %d", partition.name, output.epoch, output.end_offset, before, result[0],
        )  # fmt: skip
        return result

    async def resolve_out_of_range(
        self, tp: TopicPartition, fetch_offset: int, endpoint: LeaderEndpoint, leader_epoch: int
    ) -> OutOfRangeAction:
        partition = self._follower(tp)
        leader_end = await endpoint.latest_offset(tp, leader_epoch)
        if fetch_offset > leader_end:
            # The leader has less than this follower (an unclean election): drop the excess.
            log.warning(
                "%s: the leader's log ends at %d, below this follower's %d: truncating",
                partition.name, leader_end, fetch_offset,
            )  # fmt: skip
            partition.truncate_to(max(leader_end, partition.log_start_offset))
            return OutOfRangeAction(truncate_to=partition.log_end_offset)
        leader_start = await endpoint.earliest_offset(tp, leader_epoch)
        if fetch_offset < leader_start:
            partition.truncate_fully_and_start_at(leader_start, self.now_ms())
            log.info(
                "%s: restarted at the leader's log start offset %d (was %d)",
                partition.name, leader_start, fetch_offset,
            )  # fmt: skip
            return OutOfRangeAction(restart_at=leader_start)
        return OutOfRangeAction(truncate_to=fetch_offset)  # in range by now: fetch again

    def on_error(self, error: PartitionError) -> None:
        log.info(
            "replica fetcher: %s-%d answered error %d (%s)", *error.tp, error.error_code,
            error.message or "",
        )  # fmt: skip

    def on_failed(self, tp: TopicPartition, reason: str) -> None:
        log.warning("replica fetcher: %s-%d stopped: %s", *tp, reason)


class LocalLeaders:
    """``LeaderLocator`` over this broker's own view of its partitions (the metadata image as
    the replica manager applied it). The same answer twice in a row is given only after one
    refusal, so a leader that keeps refusing is retried after the manager's backoff rather
    than at once, until the metadata moves."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replicas = replica_manager
        self._last: dict[TopicPartition, tuple[int, int]] = {}

    async def find_leader(self, tp: TopicPartition, *, refresh: bool) -> tuple[int, int]:
        partition = self.replicas.partition_or_error(*tp)
        state = partition.state
        if state.leader in (NO_LEADER, self.replicas.node_id):
            raise KafkaError(
                ErrorCode.LEADER_NOT_AVAILABLE,
                f"{partition.name} has no other leader (leader {state.leader})",
            )
        answer = (state.leader, state.leader_epoch)
        if self._last.pop(tp, None) == answer:
            return answer
        self._last[tp] = answer
        raise KafkaError(
            ErrorCode.LEADER_NOT_AVAILABLE,
            f"{partition.name}: waiting for the metadata to name a new leader",
        )


class FollowerFetchers:
    """Starts and stops the replica fetchers on the replica manager's changes (a
    ``PartitionListener``); ``manager`` is the broker's replica ``FetcherManager``."""

    def __init__(self, replica_manager: ReplicaManager, manager: FetcherManager) -> None:
        self.replicas = replica_manager
        self.manager = manager

    def __call__(self, changes: PartitionChanges) -> None:
        self.manager.remove_fetcher_for_partitions(
            [*(p.topic_partition for p in changes.leaders), *changes.removed]
        )
        states = {}
        stopped = []
        for partition in changes.followers:
            tp = partition.topic_partition
            state = partition.state
            if state.leader == NO_LEADER:
                stopped.append(tp)
                continue
            current = self.manager.fetch_state(tp)
            if (
                current is not None
                and self.manager.leader_of(tp) == state.leader
                and current.current_leader_epoch == state.leader_epoch
            ):
                continue  # the same leader at the same epoch (an ISR change): keep fetching
            states[tp] = InitialFetchState(
                topic_id=partition.topic_id,
                leader_id=state.leader,
                leader_epoch=state.leader_epoch,
                fetch_offset=partition.log_end_offset,
                last_fetched_epoch=partition.latest_epoch,
            )
        if stopped:
            self.manager.remove_fetcher_for_partitions(stopped)
        if states:
            self.manager.add_fetcher_for_partitions(states)
            log.info(
                "replica fetchers: following %s",
                ", ".join(f"{t}-{p} from broker {s.leader_id} at {s.fetch_offset} "
                          f"(epoch {s.leader_epoch})" for (t, p), s in states.items()),
            )  # fmt: skip
