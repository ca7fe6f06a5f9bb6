"""What the Trio shells of the group and transaction coordinators share.

Theory of operation
-------------------
Both coordinators are pure cores over one internal topic (``__consumer_offsets``,
``__transaction_state``). Their shells differ in what they encode and what they do around a
response, but the mechanics below are the same, so they live here once:

* **appending.** :meth:`CoordinatorShell._append_batch` builds one uncompressed batch and
  appends it with ``acks=all`` and ``origin=COORDINATOR`` synchronously (the core sees a refused
  write at once), remembering each partition's log end after the append; inside
  :meth:`CoordinatorShell._run_on_core` it also collects the ends the running operation wrote.
* **durability.** :func:`wait_durable` waits until the high watermarks cover given end offsets;
  a response that depended on a write is sent only then, so a client that was told about a
  write keeps it across a leader change.
* **partitions.** :meth:`CoordinatorShell.leadership_changed` diffs the internal topic's
  partitions this node leads (and at which leader epoch) against those being served: lost ones
  are unloaded at once, new ones queued to a loader task that replays each from its log start
  to its log end, one batch at a time through the subclass's :meth:`_replay_batch`.
* **the clock.** :meth:`CoordinatorShell._run_timer` calls the core's ``tick`` at its next
  deadline; :meth:`kick` wakes it early because any request can move that deadline earlier.

The cores are synchronous and every call to one happens between two checkpoints of this one
Trio thread, so no lock is needed: an append never awaits.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import trio

from kcore.log.partition_log import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.record.batch import iter_batches
from kcore.record.records import RecordBatchBuilder

# How much of a partition's log one read of the loader takes: other requests run between two.
LOAD_READ_BYTES = 1 << 20
# After a failed tick, wait this long before the next so a core bug does not spin the CPU.
TICK_FAILURE_BACKOFF_S = 0.1


def now_ms() -> int:
    return int(time.time() * 1000)


async def wait_durable(broker, waits: Iterable[tuple[str, int, int]], timeout_s: float) -> bool:
    """Wait until each ``(topic, partition, end)``'s high watermark reaches ``end``, at most
    ``timeout_s``; True when all did. A partition no longer hosted here is not waited for."""
    waits = list(waits)
    replicas = broker.replica_manager

    def pending() -> list[tuple[str, int]]:
        out = []
        for topic, index, end in waits:
            partition = replicas.partitions.get((topic, index))
            if partition is not None and partition.log.high_watermark < end:
                out.append((topic, index))
        return out

    waiting = pending()  # a single replica: already durable, no timer needed
    if not waiting:
        return True
    with trio.move_on_after(timeout_s):
        while waiting:
            await broker.purgatory.wait(waiting, timeout_s)
            waiting = pending()
    return not waiting


class CoordinatorShell:
    """Base of a coordinator's Trio shell over the internal topic :attr:`topic`.

    A subclass sets :attr:`topic` and :attr:`name` (for logs), builds ``self.core`` after
    calling ``__init__`` (the core's ``append`` usually calls :meth:`_append_batch`), and
    implements :meth:`_begin_loading` and :meth:`_replay_batch`; it may hook
    :meth:`_after_tick`. Its ``run`` starts :meth:`_loader` and then awaits :meth:`_run_timer`.
    """

    topic: str
    name: str
    core: Any

    def __init__(self, broker) -> None:
        self.broker = broker
        self._log = logging.getLogger(type(self).__module__)
        self._wake = trio.Event()
        self._led: dict[int, int] = {}  # partition -> leader epoch being served or loaded
        self._appended_end: dict[int, int] = {}  # partition -> log end after our last append
        self._written: list[tuple[int, int]] | None = None  # appends of the running operation
        self._load_send, self._load_receive = trio.open_memory_channel[tuple[int, int]](math.inf)

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
            response = operation(now_ms())
        finally:
            self._written = None
        self.kick()
        ends: dict[int, int] = {}
        for partition, end in written:
            ends[partition] = max(end, ends.get(partition, 0))
        return response, ends

    async def _wait_written(self, ends: dict[int, int], timeout_s: float) -> bool:
        """:func:`wait_durable` for ends of this shell's topic."""
        return await wait_durable(
            self.broker, [(self.topic, p, end) for p, end in ends.items()], timeout_s
        )

    def _append_batch(
        self,
        partition: int,
        records: list,
        encode: Callable[[Any], tuple[bytes | None, bytes | None]],
        builder: RecordBatchBuilder | None = None,
    ) -> None:
        """Append ``records`` (each ``encode``d to key and value) as one batch of ``builder``
        (a plain one by default), synchronously; KafkaError when the log refuses it."""
        if not records:
            return
        now = now_ms()
        builder = builder if builder is not None else RecordBatchBuilder()
        for record in records:
            key, value = encode(record)
            builder.append(now, key, value)
        info = self.broker.replica_manager.append_records(
            self.topic,
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

    # -- partitions ---------------------------------------------------------------------------

    def leadership_changed(self) -> None:
        """Called by the broker after each metadata change that touched partitions."""
        led = {
            index: partition.state.leader_epoch
            for (topic, index), partition in self.broker.replica_manager.partitions.items()
            if topic == self.topic and partition.is_leader
        }
        for index, epoch in list(self._led.items()):
            if led.get(index) != epoch:
                del self._led[index]
                self._appended_end.pop(index, None)
                self.core.unload(index)
                self._log.info("%s: unloaded %s-%d", self.name, self.topic, index)
        for index, epoch in led.items():
            if index not in self._led:
                self._led[index] = epoch
                self._begin_loading(index, epoch)
                plog = self.broker.replica_manager.partitions[(self.topic, index)].log
                if plog.log_end_offset == plog.log_start_offset:
                    # Nothing to replay (a topic just created): serve at once. Queued behind
                    # dozens of siblings, its groups would answer COORDINATOR_LOAD_IN_PROGRESS
                    # for a while, and some clients (kafka-python's admin) give up on that.
                    self.core.finish_loading(index, now_ms())
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
        async for index, epoch in self._load_receive:
            if self._led.get(index) != epoch:
                continue  # lost (or re-won) since it was queued
            try:
                await self._load(index, epoch)
            except Exception:
                self._log.exception("%s: loading %s-%d failed", self.name, self.topic, index)

    async def _load(self, index: int, epoch: int) -> None:
        started = time.monotonic()
        partition = self.broker.replica_manager.partitions.get((self.topic, index))
        if partition is None:
            return
        plog = partition.log
        offset = plog.log_start_offset
        count = 0
        # Up to the log end as it is now, not as it was when loading started: WriteTxnMarkers
        # may append a marker to __consumer_offsets meanwhile (the group core leaves it to the
        # replay while loading). Nothing runs between the last check and finish_loading.
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
        self._log.info(
            "%s: loaded %s-%d (%d records, leader epoch %d) in %.0f ms",
            self.name,
            self.topic,
            index,
            count,
            epoch,
            (time.monotonic() - started) * 1000,
        )

    # -- the clock ----------------------------------------------------------------------------

    def _after_tick(self, now: int) -> None:
        """Run after every wake-up of the timer (and any tick); nothing by default."""

    async def _run_timer(self) -> None:
        """Forever: tick the core when its next deadline (None: none) is due, then sleep until
        the next one or until :meth:`kick`."""
        while True:
            self._wake = trio.Event()
            now = now_ms()
            deadline = self.core.next_deadline_ms()
            if deadline is not None and deadline <= now:
                try:
                    self.core.tick(now)
                except Exception:
                    self._log.exception("%s: tick failed", self.name)
                    await trio.sleep(TICK_FAILURE_BACKOFF_S)
            self._after_tick(now)
            deadline = self.core.next_deadline_ms()
            timeout = math.inf if deadline is None else max(deadline - now_ms(), 0) / 1000
            with trio.move_on_after(timeout):
                await self._wake.wait()
