"""The Trio shell of the group coordinator: its clock, its log, and its partitions.

Theory of operation
-------------------
The pure :class:`~kcore.coordinator.group.coordinator.GroupCoordinator` decides everything about
groups; this shell gives it what it cannot have by itself:

* **a log.** The core persists state by calling ``append(partition, records)``; the shell
  encodes them (:mod:`kcore.coordinator.group.records`), builds one uncompressed batch (for
  TxnOffsetCommit a transactional batch of the producer: its id and epoch, base sequence 0, as
  Kafka's coordinators write; the log checks no sequence for a COORDINATOR append) and
  appends it to ``__consumer_offsets-<partition>`` through the replica manager, synchronously,
  so the core sees the outcome (and a refused write) at once. A response that depended on a
  write is sent only once the partition's high watermark covers it (``acks=all``): a commit a
  client was told about survives a leader change. Waiting longer than ``offsets.commit.timeout.ms``
  answers REQUEST_TIMED_OUT instead.
* **partitions.** After every metadata change the broker calls :meth:`leadership_changed`; the
  shell compares the ``__consumer_offsets`` partitions this node leads (and at which leader
  epoch) with those the core owns: new ones are loaded in the background — the core answers
  COORDINATOR_LOAD_IN_PROGRESS for their groups meanwhile — by replaying the partition's log
  from its start to its end (the end as it is when the replay gets there: a transaction marker
  written meanwhile is replayed too); records of transactional batches are replayed as pending
  offsets of their producer and COMMIT/ABORT markers complete them. Lost partitions are
  unloaded at once (waiting requests get NOT_COORDINATOR).
* **a clock.** One task sleeps until the core's next deadline (session expiries, rebalance
  timeouts, the initial rebalance delay, offset expiry) and calls ``tick``; every request wakes it
  because a request can move the next deadline earlier.
* **waiting.** JoinGroup and SyncGroup are answered by a callback, possibly much later (when the
  rebalance completes); :meth:`deferred` turns that callback into an awaitable.

The mechanics shared by both coordinators' shells (appending, waiting for the high
watermark, the leadership diff and loading, the timer loop) live in
:mod:`kcore.server.coordinator_shell`; this module keeps what is particular to this coordinator.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from kcore.coordinator.group import records as group_records
from kcore.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.control import ControlRecordType, read_control_record
from kcore.record.records import RecordBatchBuilder
from kcore.server.coordinator_shell import CoordinatorShell
from kcore.server.internal_topics import CONSUMER_OFFSETS


def group_config(config) -> GroupConfig:
    """The core's settings from the broker's (Kafka's key names)."""
    return GroupConfig(
        offsets_topic_partitions=config.value("offsets.topic.num.partitions"),
        initial_rebalance_delay_ms=config.value("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=config.value("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.value("group.max.session.timeout.ms"),
        max_size=config.value("group.max.size"),
        offsets_retention_ms=config.value("offsets.retention.minutes") * 60_000,
        offsets_retention_check_interval_ms=config.value("offsets.retention.check.interval.ms"),
        offset_metadata_max_bytes=config.value("offset.metadata.max.bytes"),
    )


class GroupCoordinatorService(CoordinatorShell):
    """See the module docstring. ``broker`` gives the replica manager, config and purgatory."""

    topic = CONSUMER_OFFSETS
    name = "group coordinator"

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.core = GroupCoordinator(group_config(broker.config), self._append)
        self._commit_timeout_s = broker.config.value("offsets.commit.timeout.ms") / 1000
        # Set by the transactions code: async (TxnOffsetCommitRequest, version) -> ErrorCode,
        # KIP-890's check that the offsets partition is in the producer's transaction.
        self.verify_txn_offset_commit: Callable[[Any, int], Awaitable[ErrorCode]] | None = None

    # -- what the handlers use ----------------------------------------------------------------

    async def call(self, operation: Callable[[int], Any]) -> Any:
        """Run ``operation(now_ms)`` on the core and answer once what it wrote is durable."""
        response, ends = self._run_on_core(operation)
        if ends:
            await self._durable(response, ends)
        return response

    async def deferred(self, start: Callable[[int, Callable[[Any], None]], None]) -> Any:
        """``start(now_ms, respond)`` hands the core a callback; wait until it is called, then
        until everything written to the partitions touched meanwhile is durable."""
        done = trio.Event()
        box: list[Any] = []

        def respond(response: Any) -> None:
            if not box:  # the core answers once; a second call would be a core bug
                box.append(response)
                done.set()

        before = dict(self._appended_end)
        start(self.now_ms(), respond)
        self.kick()
        await done.wait()
        ends = {p: end for p, end in self._appended_end.items() if before.get(p) != end}
        if ends:
            await self._durable(box[0], ends)
        return box[0]

    # -- the log ------------------------------------------------------------------------------

    def _append(
        self,
        partition: int,
        records: list,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        """The core's ``append``: one batch, synchronously; KafkaError when refused.

        A transactional batch carries the producer's id and epoch and base sequence 0 (Kafka's
        coordinators write 0; the log validates no sequence for a COORDINATOR append, and the
        batch opens the producer's transaction in this partition until its marker)."""
        builder = None
        if transactional:
            builder = RecordBatchBuilder(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                is_transactional=True,
            )
        self._append_batch(partition, records, group_records.encode, builder)

    async def _durable(self, response: Any, ends: dict[int, int]) -> None:
        """Wait until each partition's high watermark reaches its end in ``ends``; on timeout
        the response says REQUEST_TIMED_OUT (the client retries)."""
        if not await self._wait_written(ends, self._commit_timeout_s):
            _mark_timed_out(response)

    # -- partitions ---------------------------------------------------------------------------

    def _begin_loading(self, index: int, epoch: int) -> None:
        self.core.begin_loading(index)

    def _replay_batch(self, index: int, batch) -> int:
        """Replay one batch of ``__consumer_offsets-<index>``; returns the records replayed."""
        if batch.is_control:
            control = read_control_record(batch)
            if control is not None and control.is_transaction_marker:
                commit = control.type is ControlRecordType.COMMIT
                self.core.replay_marker(index, batch.producer_id, commit)
                return 1
            return 0
        count = 0
        for record in batch.records():
            decoded = group_records.decode(record.key, record.value)
            if decoded is None:
                continue
            if batch.is_transactional:
                self.core.replay_transactional(index, batch.producer_id, decoded)
            else:
                self.core.replay(index, decoded)
            count += 1
        return count


def _mark_timed_out(response: Any) -> None:
    """Put REQUEST_TIMED_OUT where the response carries its errors."""
    code = int(ErrorCode.REQUEST_TIMED_OUT)
    if (
        hasattr(response, "topics")
        and response.topics
        and hasattr(response.topics[0], "partitions")
    ):
        for topic in response.topics:  # OffsetCommit: per partition
            for p in topic.partitions:
                p.error_code = code
    elif hasattr(response, "error_code"):
        response.error_code = code
    else:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the coordinator write was not replicated")
