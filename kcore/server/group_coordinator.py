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
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from kcore.coordinator.group import records as group_records
from kcore.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kcore.log.partition_log import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import iter_batches
from kcore.record.control import ControlRecordType, read_control_record
from kcore.record.records import RecordBatchBuilder
from kcore.server.internal_topics import CONSUMER_OFFSETS

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 1 << 20


def now_ms() -> int:
    return int(time.time() * 1000)


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


class GroupCoordinatorService:
    """See the module docstring. ``broker`` gives the replica manager, config and purgatory."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.core = GroupCoordinator(group_config(broker.config), self._append)
        self._commit_timeout_s = broker.config.value("offsets.commit.timeout.ms") / 1000
        self._wake = trio.Event()
        self._led: dict[int, int] = {}  # partition -> leader epoch being served or loaded
        self._appended_end: dict[int, int] = {}  # partition -> log end after our last append
        self._written: list[tuple[int, int]] | None = None  # appends of the running call()
        self._load_send, self._load_receive = trio.open_memory_channel[tuple[int, int]](math.inf)
        # Set by the transactions code: async (TxnOffsetCommitRequest, version) -> ErrorCode,
        # KIP-890's check that the offsets partition is in the producer's transaction.
        self.verify_txn_offset_commit: Callable[[Any, int], Awaitable[ErrorCode]] | None = None

    # -- what the handlers use ----------------------------------------------------------------

    def kick(self) -> None:
        """A request may have moved the next deadline earlier: let the timer look again."""
        self._wake.set()

    async def call(self, operation: Callable[[int], Any]) -> Any:
        """Run ``operation(now_ms)`` on the core and answer once what it wrote is durable."""
        written = self._written = []
        response = operation(now_ms())
        self._written = None
        self.kick()
        if written:
            await self._durable(response, dict(written))
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
        start(now_ms(), respond)
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
        if not records:
            return
        now = now_ms()
        if transactional:
            builder = RecordBatchBuilder(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                is_transactional=True,
            )
        else:
            builder = RecordBatchBuilder()
        for record in records:
            key, value = group_records.encode(record)
            builder.append(now, key, value)
        info = self.broker.replica_manager.append_records(
            CONSUMER_OFFSETS,
            partition,
            builder.build(),
            required_acks=-1,
            now_ms=now,
            origin=AppendOrigin.COORDINATOR,
        )
        end = info.last_offset + 1
        self._appended_end[partition] = end
        if self._written is not None:
            self._written.append((partition, end))

    async def _durable(self, response: Any, ends: dict[int, int]) -> None:
        """Wait until each partition's high watermark reaches its end in ``ends``; on timeout
        the response says REQUEST_TIMED_OUT (the client retries)."""
        replicas = self.broker.replica_manager

        def pending() -> list[int]:
            out = []
            for p, end in ends.items():
                partition = replicas.partitions.get((CONSUMER_OFFSETS, p))
                if partition is not None and partition.log.high_watermark < end:
                    out.append(p)
            return out

        waiting = pending()  # a single replica: already durable, no timer needed
        if not waiting:
            return
        with trio.move_on_after(self._commit_timeout_s):
            while waiting:
                await self.broker.purgatory.wait(
                    [(CONSUMER_OFFSETS, p) for p in waiting], self._commit_timeout_s
                )
                waiting = pending()
            return
        _mark_timed_out(response)

    # -- partitions ---------------------------------------------------------------------------

    def leadership_changed(self) -> None:
        """Called by the broker after each metadata change that touched partitions."""
        led = {
            index: partition.state.leader_epoch
            for (topic, index), partition in self.broker.replica_manager.partitions.items()
            if topic == CONSUMER_OFFSETS and partition.is_leader
        }
        for index, epoch in list(self._led.items()):
            if led.get(index) != epoch:
                del self._led[index]
                self._appended_end.pop(index, None)
                self.core.unload(index)
                log.info("group coordinator: unloaded %s-%d", CONSUMER_OFFSETS, index)
        for index, epoch in led.items():
            if index not in self._led:
                self._led[index] = epoch
                self.core.begin_loading(index)
                self._load_send.send_nowait((index, epoch))
        self.kick()

    async def _loader(self) -> None:
        async for index, epoch in self._load_receive:
            if self._led.get(index) != epoch:
                continue  # lost (or re-won) since it was queued
            try:
                await self._load(index, epoch)
            except Exception:
                log.exception("group coordinator: loading %s-%d failed", CONSUMER_OFFSETS, index)

    async def _load(self, index: int, epoch: int) -> None:
        started = time.monotonic()
        partition = self.broker.replica_manager.partitions.get((CONSUMER_OFFSETS, index))
        if partition is None:
            return
        plog = partition.log
        offset = plog.log_start_offset
        count = 0
        # Up to the log end as it is now, not as it was when loading started: WriteTxnMarkers
        # may append a marker meanwhile (the core leaves it to us while loading). Nothing runs
        # between the last check and finish_loading.
        while offset < plog.log_end_offset:
            data = plog.read(offset, LOAD_READ_BYTES, FetchIsolation.LOG_END)
            if not data.records:
                break
            for file_slice in data.records:
                for batch in iter_batches(file_slice.read()):
                    offset = batch.last_offset + 1
                    count += self._replay_batch(index, batch)
            await trio.sleep(0)  # other requests run between chunks
            if self._led.get(index) != epoch:
                return  # leadership moved while loading; unload already happened
        self.core.finish_loading(index, now_ms())
        self.kick()
        log.info(
            "group coordinator: loaded %s-%d (%d records) in %.0f ms",
            CONSUMER_OFFSETS,
            index,
            count,
            (time.monotonic() - started) * 1000,
        )

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

    # -- the clock ----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._loader)
            task_status.started()
            while True:
                self._wake = trio.Event()
                deadline = self.core.next_deadline_ms()
                now = now_ms()
                if deadline is not None and deadline <= now:
                    try:
                        self.core.tick(now)
                    except Exception:
                        log.exception("group coordinator: tick failed")
                        await trio.sleep(0.1)
                    continue
                timeout = math.inf if deadline is None else (deadline - now) / 1000
                with trio.move_on_after(timeout):
                    await self._wake.wait()


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
