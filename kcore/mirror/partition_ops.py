"""The mirror partitions' requests, batched: what thousands of drivers ask at once is a few.

Theory of operation
-------------------
A mirror's partitions start together: a metadata sync round that discovers a thousand topics,
a broker restart that leads 10,000 mirror partitions, a Start of a pattern. Each partition's
driver (:class:`~kcore.mirror.manager.PartitionDriver`) then asks, within moments of the
others, for the same four things: its state from the ClusterMirrorCoordinator (ReadState),
each transition persisted there (PersistState, PersistLastMirrorEpoch), the source's last
mirror epoch and log start offset (FetchLastMirrorEpoch), and a place in the mirror's fetcher
(AddFetcher). One request per partition and per step is 4 x N round trips, each answer a
separate wakeup, and with N = 10,000 the ops queued behind one another ran past the machine's
own timeouts and were sent again: the destination took minutes to bring 10,000 partitions to
MIRRORING.

:class:`Coalescer` queues the items of one kind for one mirror and runs them as one batch: the
first item starts a task that lets the loop run once (so every driver woken in the same pass
adds its own) and then sends everything queued, at most ``max_batch`` at a time; what is
queued while a batch is in flight is the next batch. One batch per kind and mirror is in
flight at any time, so the coordinator and the source see a bounded number of requests however
many partitions start, and a single partition's op still goes out at once (a group commit, not
a timer). :class:`MirrorPartitionOps` is the four batched operations:

==========================  ===============================================================
op                          one batch is
==========================  ===============================================================
ReadState                   one ``read_full`` (ReadMirrorStates when the coordinator is
                            elsewhere) of every partition in the batch
PersistState,               one ``write_states`` of every update (one ``__mirror_state``
PersistLastMirrorEpoch      batch); a write refused for one partition's sake (fenced, D-14)
                            is sent again partition by partition, so only that one fails
FetchLastMirrorEpoch        one DescribeClusterMirrors of the mirror (its LMEs, M-37), one
                            Metadata of the batch's topics, ListOffsets EARLIEST per source
                            leader
AddFetcher                  one ``MirrorFetcherManager.add_partitions``: one Metadata, one
                            version check per source leader
RequestEpochBump            one BumpLeaderEpochs at the controller (one metadata commit; a
                            Stop of 10,000 partitions was 10,000)
==========================  ===============================================================

Every answer goes back to its driver as the event the unbatched op would have sent; an error
that concerns one partition (an unknown source topic, a fenced write) fails that partition
alone. An item whose driver has ended meanwhile (its leadership moved) is dropped: nobody
waits for it, and its successor reads the state afresh.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import trio

from kcore.client.admin import EARLIEST_TIMESTAMP, list_offsets
from kcore.client.errors import ClientError
from kcore.client.mirrors import describe_cluster_mirrors
from kcore.mirror.coordinator import StateUpdate
from kcore.mirror.events import (
    LastMirrorEpochFetched,
    OpCompleted,
    OpFailed,
    PersistedState,
    SourceFailed,
    StateLoaded,
)
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["Coalescer", "MirrorPartitionOps", "op_error"]

log = logging.getLogger(__name__)

S = MirrorPartitionState
T = TypeVar("T")
TopicPartition = tuple[str, int]

#: Partitions per batch. A ReadMirrorStates or WriteMirrorStates of 1,000 partitions is tens of
#: KB, and a batch's answers are handed out in one pass of the loop: bigger batches would make
#: that pass long enough to delay the broker's other requests.
MAX_BATCH = 1000


def op_error(e: Exception) -> tuple[ErrorCode, str]:
    """The error code and message a failed op reports to its machine."""
    if isinstance(e, KafkaError):
        return e.code, e.message
    if isinstance(e, (ClientError, OSError, trio.TooSlowError)):
        return ErrorCode.NETWORK_EXCEPTION, str(e)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}"


class Coalescer(Generic[T]):
    """Runs ``run(batch)`` over the items submitted (see the module docstring).

    ``run`` answers every item of its batch; if it raises, ``fail(batch, exception)`` does.
    ``key(item)``: items with equal keys never share a batch (the later one waits for the
    next), for requests that refuse a partition named twice."""

    def __init__(
        self,
        name: str,
        run: Callable[[list[T]], Awaitable[None]],
        fail: Callable[[list[T], Exception], None],
        *,
        max_batch: int = MAX_BATCH,
        key: Callable[[T], Hashable] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self.name = name
        self._run = run
        self._fail = fail
        self._key = key
        self.max_batch = max_batch
        self._queue: deque[T] = deque()
        self._running = False
        self.batches = 0  # batches sent (tests, and the debug log)

    def __len__(self) -> int:
        return len(self._queue)

    def submit(self, nursery: trio.Nursery, item: T) -> None:
        self._queue.append(item)
        if not self._running:
            self._running = True
            nursery.start_soon(self._drain)

    async def _drain(self) -> None:
        try:
            await trio.sleep(0)  # every driver woken in this pass of the loop adds its item
            while self._queue:
                batch = self._take()
                self.batches += 1
                try:
                    await self._run(batch)
                except Exception as e:  # noqa: BLE001 - answered per item; the broker stays up
                    if not isinstance(e, (KafkaError, ClientError, OSError, trio.TooSlowError)):
                        log.exception("%s: a batch of %d failed", self.name, len(batch))
                    self._fail(batch, e)
        finally:
            self._running = False

    def _take(self) -> list[T]:
        if self._key is None:
            count = min(len(self._queue), self.max_batch)
            return [self._queue.popleft() for _ in range(count)]
        batch, keys, later = [], set(), []
        while self._queue and len(batch) < self.max_batch:
            item = self._queue.popleft()
            k = self._key(item)
            if k in keys:
                later.append(item)
            else:
                keys.add(k)
                batch.append(item)
        self._queue.extendleft(reversed(later))
        return batch


class MirrorPartitionOps:
    """The batched ops of the drivers of one :class:`~kcore.mirror.manager.MirrorManager`.

    A driver calls :meth:`read_state`, :meth:`persist`, :meth:`fetch_last_mirror_epoch` and
    :meth:`add_fetcher`; each returns at once and the answer comes back as an event through
    ``driver.send``. ``manager.fetcher(mirror)`` gives the mirror's fetcher manager (and its
    source client); ``access`` is the broker's
    :class:`~kcore.server.mirror_coordinator.MirrorStateAccess`."""

    def __init__(self, manager, access, *, max_batch: int = MAX_BATCH) -> None:
        self.manager = manager
        self.access = access
        self.max_batch = max_batch
        self._coalescers: dict[tuple[str, str], Coalescer] = {}

    def coalescer(self, kind: str, mirror: str) -> Coalescer:
        """The queue of ``kind`` ("read", "write", "lme", "add") for ``mirror``."""
        found = self._coalescers.get((kind, mirror))
        if found is None:
            run, fail = {
                "read": (self._read_batch, _fail_ops),
                "write": (self._write_batch, _fail_ops),
                "lme": (self._lme_batch, _fail_ops),
                "add": (self._add_batch, _fail_adds),
                "bump": (self._bump_batch, _fail_ops),
            }[kind]
            found = self._coalescers[(kind, mirror)] = Coalescer(
                f"mirror {mirror}: {kind}",
                lambda batch, r=run, m=mirror: r(m, batch),
                fail,
                max_batch=self.max_batch,
                key=(lambda item: item[0].tp) if kind in ("write", "bump") else None,
            )
        return found

    def _submit(self, kind: str, driver, item: tuple) -> None:
        nursery = self.manager._nursery
        if nursery is not None:
            self.coalescer(kind, driver.mirror).submit(nursery, item)

    # -- what a driver asks ---------------------------------------------------------------

    def read_state(self, driver, op: int) -> None:
        """Answered with StateLoaded(op, the recorded state or None) or OpFailed."""
        self._submit("read", driver, (driver, op))

    def persist(self, driver, op: int, record: PersistedState) -> None:
        """Answered with OpCompleted(op) once durable, or OpFailed."""
        update = StateUpdate(
            driver.tp[0],
            driver.tp[1],
            int(record.state),
            record.last_mirror_epoch,
            int(record.previous_state),
            record.retry_attempt,
            record.reason,
            # Fences this write if another broker has led the partition since (D-14).
            leader_epoch=driver.leader_epoch,
        )
        self._submit("write", driver, (driver, op, update))

    def fetch_last_mirror_epoch(self, driver, op: int) -> None:
        """Answered with LastMirrorEpochFetched or OpFailed."""
        self._submit("lme", driver, (driver, op))

    def bump_epoch(self, driver, op: int, min_leader_epoch: int) -> None:
        """BumpLeaderEpochs (D-10) of the partition to at least ``min_leader_epoch``: answered
        with OpCompleted once the controller accepted it (the new epoch comes with the
        metadata), or OpFailed."""
        self._submit("bump", driver, (driver, op, min_leader_epoch))

    def add_fetcher(self, driver) -> None:
        """The partition joins the mirror's fetcher at its log end offset, unless the driver
        removed it meanwhile (``driver.still_wants_fetch(generation)``); a failure is the
        driver's SourceFailed."""
        self._submit("add", driver, (driver, driver.fetch_generation))

    # -- the batches ----------------------------------------------------------------------

    async def _read_batch(self, mirror: str, batch: list) -> None:
        batch = [item for item in batch if item[0].alive]
        if not batch:
            return
        full = await self.access.read_full(mirror, [driver.tp for driver, _ in batch])
        for driver, op in batch:
            state = full.get(driver.tp)
            stored = None
            if state is not None and state.state is not S.UNKNOWN:
                stored = PersistedState(
                    state.state,
                    state.previous_state,
                    state.retry_attempt,
                    state.last_mirror_epoch,
                    state.reason,
                )
            driver.send(StateLoaded(op, stored))

    async def _write_batch(self, mirror: str, batch: list) -> None:
        batch = [item for item in batch if item[0].alive]
        if not batch:
            return
        try:
            await self.access.write_states(mirror, [update for _, _, update in batch])
        except KafkaError as e:
            if len(batch) == 1 or e.code not in (
                ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.INVALID_REQUEST,
            ):
                raise
            # Refused whole for some partitions' sake: each on its own, so only they fail.
            for item in batch:
                try:
                    await self._write_batch(mirror, [item])
                except Exception as single:  # noqa: BLE001 - that partition's own answer
                    _fail_ops([item], single)
            return
        for driver, op, _ in batch:
            driver.send(OpCompleted(op))

    async def _lme_batch(self, mirror: str, batch: list) -> None:
        """The source's LME for this mirror name (-1 when it has none, or does not mirror at
        all), log start offset and current leader epoch of every partition of the batch."""
        batch = [item for item in batch if item[0].alive]
        if not batch:
            return
        client = (await self.manager.fetcher(mirror)).client(0)
        lmes: dict[TopicPartition, int] = {}
        try:
            # Only the LMEs are wanted: the coordinator's, in any broker's answer.
            described = await describe_cluster_mirrors(client, [mirror], target="any")
        except (ClientError, KafkaError):
            described = None  # a source without cluster mirroring: no LME tracking (M-70)
        if described is not None and not described.error_code:
            for answer in described.mirrors:
                if answer.mirror_name != mirror or answer.error_code:
                    continue
                for t in answer.topics:
                    for p in t.partitions:
                        lmes[(t.topic_name, p.partition_index)] = p.last_mirror_epoch
        tps = sorted({driver.tp for driver, _ in batch})
        metadata = await client.refresh_metadata(sorted({t for t, _ in tps}))
        refused: dict[TopicPartition, KafkaError] = {}
        for tp in tps:
            try:
                metadata.leader_for(*tp)
            except KafkaError as e:  # that partition alone fails (its topic is gone, ...)
                refused[tp] = e
        known = [tp for tp in tps if tp not in refused]
        offsets = await list_offsets(client, dict.fromkeys(known, EARLIEST_TIMESTAMP))
        for driver, op in batch:
            tp = driver.tp
            answer = offsets.get(tp)
            if tp in refused:
                error = refused[tp]
                driver.send(OpFailed(op, error.code, error.message))
            elif answer is None or answer.error_code:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if answer is None else answer.error_code
                message = f"ListOffsets of {tp[0]}-{tp[1]} on the source"
                driver.send(OpFailed(op, ErrorCode(code), message))
            else:
                epoch = metadata.partition(*tp).leader_epoch
                driver.send(LastMirrorEpochFetched(op, lmes.get(tp, -1), answer.offset, epoch))

    async def _bump_batch(self, mirror: str, batch: list) -> None:
        batch = [item for item in batch if item[0].alive]
        if not batch:
            return
        broker = self.manager.broker
        hold_ms = broker.config.value("kcore.testing.mirror.stopping.hold.ms")
        if hold_ms and any(driver.machine.state is S.STOPPING for driver, _, _ in batch):
            # Testing only: a crash test's window inside STOPPING (LME persisted, not bumped).
            await trio.sleep(hold_ms / 1000)
        B = m.BumpLeaderEpochsRequest
        topics: dict[str, tuple] = {}
        asked = []
        for driver, op, min_epoch in batch:
            try:
                partition = broker.replica_manager.partition_or_error(*driver.tp)
            except KafkaError as e:  # no longer here: that partition alone fails
                driver.send(OpFailed(op, e.code, e.message))
                continue
            asked.append((driver, op, min_epoch))
            entry = topics.setdefault(driver.tp[0], (partition.topic_id, []))
            entry[1].append(
                B.LeaderEpochState(partition_index=driver.tp[1], min_leader_epoch=min_epoch)
            )
        if not asked:
            return
        request = B(
            topics=[B.TopicState(topic_id=tid, partitions=parts) for tid, parts in topics.values()]
        )
        response = await broker.controller_call(lambda c, now: c.bump_leader_epochs(request))
        if response.error_code:
            raise KafkaError(response.error_code, "BumpLeaderEpochs refused")
        refused = {
            (t.topic_name, p.partition_index): p.error_code
            for t in response.topics
            for p in t.partitions
            if p.error_code
        }
        for driver, op, _ in asked:
            code = refused.get(driver.tp)
            if code:
                message = f"BumpLeaderEpochs of {driver.tp[0]}-{driver.tp[1]}"
                driver.send(OpFailed(op, ErrorCode(code), message))
            else:
                driver.send(OpCompleted(op))

    async def _add_batch(self, mirror: str, batch: list) -> None:
        batch = [item for item in batch if item[0].alive]
        if not batch:
            return
        wanted = {driver.tp: (driver, generation) for driver, generation in batch}
        fetcher = await self.manager.fetcher(mirror)

        def still_wanted(tp: TopicPartition) -> bool:
            # The add awaited the source: a RemoveFetcher (or the end of this leadership) may
            # have come first, and then the add must not happen at all.
            driver, generation = wanted[tp]
            return driver.alive and driver.fetch_generation == generation

        result = await fetcher.add_partitions(list(wanted), still_wanted)
        for tp in result.added:
            wanted[tp][0].fetch_added()
        for tp, error in result.refused.items():
            code, message = op_error(error)
            wanted[tp][0].send(SourceFailed(code, message))


def _fail_ops(batch: list, e: Exception) -> None:
    code, message = op_error(e)
    for item in batch:
        driver, op = item[0], item[1]
        if driver.alive:
            driver.send(OpFailed(op, code, message))


def _fail_adds(batch: list, e: Exception) -> None:
    code, message = op_error(e)
    for driver, _generation in batch:
        if driver.alive:
            driver.send(SourceFailed(code, message))
