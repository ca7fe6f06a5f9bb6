"""What the Trio shells of the coordinators (group, transaction, cluster mirror) share.

Theory of operation
-------------------
Each coordinator is a pure core over one internal topic (``__consumer_offsets``,
``__transaction_state``, ``__mirror_state``). Their shells differ in what they encode and what
they do around a response, but the mechanics below are the same, so they live here once:

* **appending.** :meth:`CoordinatorShell._append_batch` builds one uncompressed batch and
  appends it with ``acks=all`` and ``origin=COORDINATOR`` synchronously (the core sees a refused
  write at once), remembering each partition's log end after the append; inside
  :meth:`CoordinatorShell._run_on_core` it also collects the ends the running operation wrote.
* **durability.** :func:`wait_for_high_watermarks` (the broker's one high-watermark wait)
  waits until the high watermarks cover given end offsets; a response that depended on a write
  is sent only then, so a client that was told about a write keeps it across a leader change.
* **the partitions.** Everything goes through a :class:`PartitionWriter` (append, log bounds,
  read, the HW wait, which partitions this node leads), :class:`ReplicaPartitionWriter` over
  the replica manager in the broker; the shell never touches a partition's log.
* **partitions.** :meth:`CoordinatorShell.leadership_changed` diffs the internal topic's
  partitions this node leads (and at which leader epoch) against those being served: lost ones
  are unloaded at once, new ones queued to a loader task that replays each from its log start
  to its log end, one batch at a time through the subclass's :meth:`_replay_batch`. A load
  that fails is visible and retried (:meth:`CoordinatorShell._loader`).
* **the clock.** :meth:`CoordinatorShell._run_timer` calls the core's ``tick`` at its next
  deadline; :meth:`kick` wakes it early because any request can move that deadline earlier.
  Wall-clock time (record timestamps, the core's ``now``) comes from an injected
  :class:`~kcore.server.clock.Clock`; deadlines are waited for on Trio's clock.

The cores are synchronous and every call to one happens between two checkpoints of this one
Trio thread, so no lock is needed: an append never awaits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import trio

from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.record.batch import RecordBatch, iter_batches
from kcore.record.records import RecordBatchBuilder
from kcore.server.clock import SYSTEM_CLOCK, Clock

# How much of a partition's log one read of the loader takes: other requests run between two.
LOAD_READ_BYTES = 1 << 20
# After a failed tick, wait this long before the next so a core bug does not spin the CPU.
TICK_FAILURE_BACKOFF_S = 0.1
# A failed load is tried again after this long, doubling up to the cap, while still led.
LOAD_RETRY_BACKOFF_S = 0.5
LOAD_RETRY_BACKOFF_MAX_S = 30.0

TopicPartition = tuple[str, int]


async def wait_for_high_watermarks(
    purgatory,
    high_watermark: Callable[[str, int], int | None],
    waits: Iterable[tuple[str, int, int]],
    timeout_s: float,
) -> set[TopicPartition]:
    """Wait until each ``(topic, partition, end)``'s high watermark reaches ``end``, at most
    ``timeout_s``; returns the partitions that did not. ``high_watermark(topic, partition)``
    is None for a partition no longer hosted here: it is not waited for.

    The one high-watermark wait of the broker: acks=all produce, the coordinators' writes
    and the transaction markers all use it. A notification of the purgatory (an append, an
    HW move, a partition change) re-checks the condition; it never completes a wait early.
    """
    waits = list(waits)

    def short() -> set[TopicPartition]:
        out = set()
        for topic, index, end in waits:
            hw = high_watermark(topic, index)
            if hw is not None and hw < end:
                out.add((topic, index))
        return out

    waiting = short()  # a single replica: already durable, no timer needed
    if not waiting:
        return waiting
    with trio.move_on_after(max(timeout_s, 0)):
        while waiting:
            await purgatory.wait(waiting, timeout_s)
            waiting = short()
    return short()


class PartitionWriter(Protocol):
    """What a coordinator shell needs of its internal topic's partitions (Kafka's
    ``CoordinatorRuntime`` has a ``PartitionWriter`` for the same reason): the shells never
    reach into the replica manager or a partition's log."""

    def led_partitions(self, topic: str) -> dict[int, int]:
        """Partition -> leader epoch, for the partitions of ``topic`` this node leads."""
        ...

    def log_bounds(self, topic: str, index: int) -> tuple[int, int] | None:
        """(log start, log end) of a hosted partition; None when not hosted here."""
        ...

    def append(self, topic: str, index: int, batch: bytes, now_ms: int) -> int:
        """Append one batch as the coordinator (acks=all); the log end after it. Raises
        KafkaError when refused (not the leader, too few in-sync replicas, ...)."""
        ...

    def read(self, topic: str, index: int, offset: int, max_bytes: int) -> list[RecordBatch]:
        """The batches from ``offset`` (up to the log end, about ``max_bytes``); empty at the
        end. Raises KafkaError when the partition is gone."""
        ...

    async def wait_for_high_watermarks(
        self, waits: Iterable[tuple[str, int, int]], timeout_s: float
    ) -> set[TopicPartition]:
        """:func:`wait_for_high_watermarks` over these partitions."""
        ...

    def delete_records_before(self, topic: str, index: int, offset: int, now_ms: int) -> int:
        """DeleteRecords: move the log start up to ``offset`` (at most the high watermark) and
        drop the segments wholly below it; the new log start. Raises KafkaError."""
        ...


class ReplicaPartitionWriter:
    """:class:`PartitionWriter` over the broker's replica manager and purgatory (thin, so it
    follows the replica manager as that changes)."""

    def __init__(self, replica_manager, purgatory) -> None:
        self.replicas = replica_manager
        self.purgatory = purgatory

    def led_partitions(self, topic: str) -> dict[int, int]:
        return {
            index: partition.state.leader_epoch
            for (name, index), partition in self.replicas.partitions.items()
            if name == topic and partition.is_leader
        }

    def log_bounds(self, topic: str, index: int) -> tuple[int, int] | None:
        partition = self.replicas.partitions.get((topic, index))
        if partition is None:
            return None
        return partition.log.log_start_offset, partition.log.log_end_offset

    def high_watermark(self, topic: str, index: int) -> int | None:
        partition = self.replicas.partitions.get((topic, index))
        return None if partition is None else partition.log.high_watermark

    def append(self, topic: str, index: int, batch: bytes, now_ms: int) -> int:
        info = self.replicas.append_records(
            topic, index, batch, required_acks=-1, now_ms=now_ms, origin=AppendOrigin.COORDINATOR
        )
        return info.last_offset + 1

    def read(self, topic: str, index: int, offset: int, max_bytes: int) -> list[RecordBatch]:
        plog = self.replicas.partition_or_error(topic, index).log
        data = plog.read(offset, max_bytes, FetchIsolation.LOG_END)
        return [batch for piece in data.records for batch in iter_batches(piece.read())]

    async def wait_for_high_watermarks(
        self, waits: Iterable[tuple[str, int, int]], timeout_s: float
    ) -> set[TopicPartition]:
        return await wait_for_high_watermarks(self.purgatory, self.high_watermark, waits, timeout_s)

    def delete_records_before(self, topic: str, index: int, offset: int, now_ms: int) -> int:
        partition = self.replicas.partition_or_error(topic, index)
        partition.check_leader_epoch(-1, require_leader=True)
        start = partition.log.increment_log_start_offset(offset)
        partition.log.delete_segments_below_log_start(now_ms)
        return start


class CoordinatorShell:
    """Base of a coordinator's Trio shell over the internal topic :attr:`topic`.

    A subclass sets :attr:`topic` and :attr:`name` (for logs), builds ``self.core`` after
    calling ``__init__`` (the core's ``append`` usually calls :meth:`_append_batch`), and
    implements :meth:`_begin_loading` and :meth:`_replay_batch`; it may hook
    :meth:`_after_tick`. :meth:`run` starts :meth:`_loader` and then awaits :meth:`_run_timer`.

    ``writer`` (default: the broker's :class:`ReplicaPartitionWriter`) is the internal topic;
    ``clock`` (default: the broker's) gives the wall-clock time of records and of the core.
    """

    topic: str
    name: str
    core: Any

    def __init__(
        self, broker, *, writer: PartitionWriter | None = None, clock: Clock | None = None
    ) -> None:
        self.broker = broker
        self.writer: PartitionWriter = writer if writer is not None else broker.partition_writer
        self.clock: Clock = clock if clock is not None else getattr(broker, "clock", SYSTEM_CLOCK)
        self._log = logging.getLogger(type(self).__module__)
        self._wake = trio.Event()
        self._led: dict[int, int] = {}  # partition -> leader epoch being served or loaded
        self._appended_end: dict[int, int] = {}  # partition -> log end after our last append
        self._written: list[tuple[int, int]] | None = None  # appends of the running operation
        self._load_failures: dict[int, int] = {}  # partition -> failed loads in a row
        self._nursery: trio.Nursery | None = None  # run()'s, for background work
        self._load_send, self._load_receive = trio.open_memory_channel[tuple[int, int]](math.inf)

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    def kick(self) -> None:
        """A request may have moved the next deadline earlier: let the timer look again."""
        self._wake.set()

    # -- the log ------------------------------------------------------------------------------

    def _run_on_core(self, operation: Callable[[int], Any]) -> tuple[Any, dict[int, int]]:
        """Run ``operation(now_ms)`` on the core; returns its result and, per partition it
        appended to, the log end after its last append there (what must become durable)."""
        written: list[tuple[int, int]] = []
        self._written = written
        try:
            response = operation(self.now_ms())
        finally:
            self._written = None
        self.kick()
        ends: dict[int, int] = {}
        for partition, end in written:
            ends[partition] = max(end, ends.get(partition, 0))
        return response, ends

    async def _wait_written(self, ends: dict[int, int], timeout_s: float) -> bool:
        """Wait until the high watermarks of this shell's topic reach ``ends``; True if so."""
        waits = [(self.topic, p, end) for p, end in ends.items()]
        return not await self.writer.wait_for_high_watermarks(waits, timeout_s)

    def _append_batch(
        self,
        partition: int,
        records: list,
        encode: Callable[[Any], tuple[bytes | None, bytes | None]],
        builder: RecordBatchBuilder | None = None,
    ) -> int | None:
        """Append ``records`` (each ``encode``d to key and value) as one batch of ``builder``
        (a plain one by default), synchronously; the batch's base offset (None when nothing
        was appended). KafkaError when the log refuses it."""
        if not records:
            return None
        now = self.now_ms()
        builder = builder if builder is not None else RecordBatchBuilder()
        for record in records:
            key, value = encode(record)
            builder.append(now, key, value)
        end = self.writer.append(self.topic, partition, builder.build(), now)
        self._appended_end[partition] = end
        if self._written is not None:
            self._written.append((partition, end))
        return end - len(records)

    # -- partitions ---------------------------------------------------------------------------

    def leadership_changed(self) -> None:
        """Called by the broker after each metadata change that touched partitions."""
        led = self.writer.led_partitions(self.topic)
        for index, epoch in list(self._led.items()):
            if led.get(index) != epoch:
                del self._led[index]
                self._appended_end.pop(index, None)
                self._load_failures.pop(index, None)
                self.core.unload(index)
                self._log.info("%s: unloaded %s-%d", self.name, self.topic, index)
        for index, epoch in led.items():
            if index not in self._led:
                self._led[index] = epoch
                self._begin_loading(index, epoch)
                bounds = self.writer.log_bounds(self.topic, index)
                if bounds is not None and bounds[0] == bounds[1]:
                    # Nothing to replay (a topic just created): serve at once. Queued behind
                    # dozens of siblings, its groups would answer COORDINATOR_LOAD_IN_PROGRESS
                    # for a while, and some clients (kafka-python's admin) give up on that.
                    self.core.finish_loading(index, self.now_ms())
                else:
                    self._load_send.send_nowait((index, epoch))
        self.kick()

    def _begin_loading(self, index: int, epoch: int) -> None:
        """Tell the core that ``index`` (led at ``epoch``) is loading."""
        raise NotImplementedError

    def _replay_batch(self, index: int, batch) -> int:
        """Replay one batch of partition ``index`` into the core; returns the records replayed."""
        raise NotImplementedError

    async def _loader(self) -> None:
        """Load the queued partitions one at a time. A load that fails is visible: the
        partition is unloaded (its keys answer NOT_COORDINATOR, as Kafka's coordinator runtime
        answers for a failed load, so clients keep asking) and loaded again after a backoff
        while this node still leads it at that epoch."""
        async with trio.open_nursery() as nursery:
            async for index, epoch in self._load_receive:
                if self._led.get(index) != epoch:
                    continue  # lost (or re-won) since it was queued
                try:
                    await self._load(index, epoch)
                    self._load_failures.pop(index, None)
                except Exception:
                    failures = self._load_failures.get(index, 0) + 1
                    self._load_failures[index] = failures
                    delay = min(
                        LOAD_RETRY_BACKOFF_S * 2 ** (failures - 1), LOAD_RETRY_BACKOFF_MAX_S
                    )
                    self._log.exception(
                        "%s: loading %s-%d failed (%d in a row); retrying in %.1f s",
                        self.name,
                        self.topic,
                        index,
                        failures,
                        delay,
                    )
                    if self._led.get(index) == epoch:
                        self.core.unload(index)
                        nursery.start_soon(self._retry_load, index, epoch, delay)

    async def _retry_load(self, index: int, epoch: int, delay: float) -> None:
        await trio.sleep(delay)
        if self._led.get(index) == epoch:
            self._begin_loading(index, epoch)
            self._load_send.send_nowait((index, epoch))

    async def _load(self, index: int, epoch: int) -> None:
        started = trio.current_time()
        bounds = self.writer.log_bounds(self.topic, index)
        if bounds is None:
            return
        offset = bounds[0]
        count = 0
        # Up to the log end as it is now, not as it was when loading started: WriteTxnMarkers
        # may append a marker to __consumer_offsets meanwhile (the group core leaves it to the
        # replay while loading). Nothing runs between the last check and finish_loading.
        while True:
            bounds = self.writer.log_bounds(self.topic, index)
            if bounds is None or offset >= bounds[1]:
                break
            batches = self.writer.read(self.topic, index, offset, LOAD_READ_BYTES)
            if not batches:
                break
            for batch in batches:
                offset = batch.last_offset + 1
                count += self._replay_batch(index, batch)
            await trio.sleep(0)  # other requests run between chunks
            if self._led.get(index) != epoch:
                return  # leadership moved while loading; unload already happened
        self.core.finish_loading(index, self.now_ms())
        self.kick()
        self._log.info(
            "%s: loaded %s-%d (%d records, leader epoch %d) in %.0f ms",
            self.name,
            self.topic,
            index,
            count,
            epoch,
            (trio.current_time() - started) * 1000,
        )

    # -- the clock ----------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The loader and the timer, until cancelled; started once both run."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._loader)
            task_status.started()
            try:
                await self._run_timer()
            finally:
                self._nursery = None

    def _after_tick(self, now: int) -> bool:
        """Run after every wake-up of the timer (and any tick); nothing by default. Returns
        whether it may have changed the core's next deadline."""
        return False

    async def _run_timer(self) -> None:
        """Forever: tick the core when its next deadline (None: none) is due, then sleep until
        the next one or until :meth:`kick`. Deadlines are the core's wall-clock milliseconds,
        waited for on Trio's clock."""
        while True:
            self._wake = trio.Event()
            now = self.now_ms()
            deadline = self.core.next_deadline_ms()
            ticked = deadline is not None and deadline <= now
            if ticked:
                try:
                    self.core.tick(now)
                except Exception:
                    self._log.exception("%s: tick failed", self.name)
                    await trio.sleep(TICK_FAILURE_BACKOFF_S)
            if self._after_tick(now) or ticked:
                # Looked for again only when something ran: the group coordinator's look is a
                # pass over every group, and the timer wakes after every request (kick).
                deadline = self.core.next_deadline_ms()
            timeout = math.inf if deadline is None else max(deadline - self.now_ms(), 0) / 1000
            with trio.move_on_after(timeout):
                await self._wake.wait()
