"""The fetcher framework's Trio shell: fetcher tasks and the manager that places partitions.

Kafka's ``AbstractFetcherThread`` / ``AbstractFetcherManager``, as Trio tasks over the pure
:class:`~kcore.replica.fetch_state.FetcherCore`:

* a :class:`FetcherTask` copies the partitions it holds from **one leader** through a
  :class:`LeaderEndpoint` (the mirror's is a remote cluster's broker over ``kcore.client``;
  follower replication will bring a local-cluster one). Its loop: build a Fetch from the core,
  send it, turn the outputs into local work through the :class:`PartitionHandler` (append,
  truncate, out of range, errors), report the results back to the core;
* a :class:`FetcherManager` owns the tasks, one per ``(leader id, fetcher number)``
  (``fetcher number = hash(topic, partition) % num_fetchers``, as Kafka's
  ``getFetcherId``), adds and removes partitions (:meth:`FetcherManager.add_fetcher_for_partitions`,
  :meth:`FetcherManager.remove_fetcher_for_partitions`), and moves a partition to the fetcher of
  its new leader when the old one answers NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (through
  the :class:`LeaderLocator`, which refreshes the leader's metadata).

Tasks run in the manager's nursery (:meth:`FetcherManager.run`); a task without partitions
ends and its endpoint is closed. Time is Trio's clock (tests drive it with ``MockClock``).
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import trio

from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_state import (
    AppendRecords,
    FetcherConfig,
    FetcherCore,
    FetchPlan,
    FetchStatus,
    HandleOutOfRange,
    PartitionError,
    PartitionResponse,
    TopicPartition,
    TruncateOnDivergence,
)

log = logging.getLogger(__name__)

__all__ = [
    "AppendResult",
    "FetcherManager",
    "FetcherTask",
    "InitialFetchState",
    "LeaderEndpoint",
    "LeaderLocator",
    "OutOfRangeAction",
    "PartitionHandler",
]


class LeaderEndpoint(Protocol):
    """The leader a fetcher copies from (Kafka's ``LeaderEndPoint``)."""

    @property
    def supports_last_fetched_epoch(self) -> bool:
        """Whether Fetch v12+ (``LastFetchedEpoch``, divergence reporting) is available."""

    async def fetch(self, plan: FetchPlan) -> dict[TopicPartition, PartitionResponse]:
        """Send the plan's Fetch; raise (any exception) when the leader cannot be reached."""

    async def earliest_offset(self, tp: TopicPartition, leader_epoch: int) -> int:
        """The leader's log start offset."""

    async def latest_offset(self, tp: TopicPartition, leader_epoch: int) -> int:
        """The leader's log end offset (for the mirror: its high watermark)."""

    async def epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """OffsetsForLeaderEpoch. The mirror's endpoint refuses it (M-27)."""

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What the handler appended: fetch next from ``next_offset``, the last appended batch
    being of ``last_epoch``. ``hold``: stop fetching the partition here until the manager
    resumes it (the mirror's D-11 epoch fencing). ``refetch``: nothing was appended because
    the fetch was made from above the local log end offset (the log was truncated under the
    fetcher): fetch again from ``next_offset``, the log end offset, which may be lower."""

    next_offset: int
    last_epoch: int | None
    hold: bool = False
    refetch: bool = False


@dataclass(frozen=True, slots=True)
class OutOfRangeAction:
    """How to resolve an out-of-range fetch offset: ``truncate_to`` (fetch from there),
    ``restart_at`` (the log was emptied and restarted there), or ``fail`` (the partition
    leaves the fetcher and ``PartitionHandler.on_failed`` says why)."""

    truncate_to: int | None = None
    restart_at: int | None = None
    fail: str | None = None


class PartitionHandler(Protocol):
    """The local side of a fetcher (Kafka's ``processPartitionData``, ``truncate``,
    ``truncateFullyAndStartAt`` and the out-of-range policy)."""

    def on_fetched(self, tp: TopicPartition, response: PartitionResponse) -> None:
        """Every answer without error, records or not (the leader's offsets, for lag)."""

    def append(self, output: AppendRecords) -> AppendResult:
        """Append the fetched records; raise KafkaError to back the partition off."""

    def truncate_on_divergence(self, output: TruncateOnDivergence) -> tuple[int, int | None]:
        """Truncate where the leader's history diverges; returns ``(offset, latest epoch)``."""

    async def resolve_out_of_range(
        self, tp: TopicPartition, fetch_offset: int, endpoint: LeaderEndpoint, leader_epoch: int
    ) -> OutOfRangeAction:
        """Decide (asking the leader its log start and end) what an out-of-range offset
        means, doing any local truncation it implies."""

    def on_error(self, error: PartitionError) -> None:
        """The partition answered an error (it is backed off); for metrics and logs."""

    def on_failed(self, tp: TopicPartition, reason: str) -> None:
        """The partition left the fetcher for good (``OutOfRangeAction.fail``)."""


class LeaderLocator(Protocol):
    async def find_leader(self, tp: TopicPartition, *, refresh: bool) -> tuple[int, int]:
        """``(leader id, leader epoch)`` of ``tp``; raise when unknown (retried)."""


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """Where to start fetching a partition (Kafka's ``InitialFetchState``)."""

    topic_id: object
    leader_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int | None = None


class FetcherTask:
    """Copies partitions from one leader (see the module docstring)."""

    def __init__(
        self,
        name: str,
        leader_id: int,
        endpoint: LeaderEndpoint,
        handler: PartitionHandler,
        config: FetcherConfig,
        on_leader_change: Callable[[TopicPartition, PartitionError], None],
        on_failed: Callable[[TopicPartition], None] = lambda tp: None,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.name = name
        self.wall_clock_ms = wall_clock_ms
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.handler = handler
        if not endpoint.supports_last_fetched_epoch and config.use_last_fetched_epoch:
            # M-28: a leader without Fetch v12 gets no LastFetchedEpoch (and reports no
            # divergence); the fetcher stays in truncation-on-fetch mode all the same.
            config = _replace(config, use_last_fetched_epoch=False)
        self.core = FetcherCore(config)
        self._on_leader_change = on_leader_change
        self._on_failed = on_failed
        self._wake = trio.Event()
        self._closed = False
        self.fetches = 0  # requests sent (tests and metrics)
        # When the last answered fetch came (wall clock, ms) and the partitions it covered. In a
        # fetch session an answer leaves out partitions without news, so "answered" cannot be
        # told from the partitions in it.
        self.last_answered: tuple[int, Mapping[TopicPartition, int]] | None = None

    # -- membership (the manager calls these) --------------------------------------------------

    def add(self, tp: TopicPartition, state: InitialFetchState) -> None:
        self.core.add_partition(
            tp, state.topic_id, state.fetch_offset, state.leader_epoch, state.last_fetched_epoch
        )
        self._wake.set()

    def remove(self, tp: TopicPartition) -> int | None:
        """Stop fetching ``tp``; returns its fetch offset (None if it was not here)."""
        state = self.core.remove_partition(tp)
        self._wake.set()
        return None if state is None else state.fetch_offset

    def resume(self, tp: TopicPartition) -> None:
        self.core.resume(tp)
        self._wake.set()

    @property
    def partitions(self) -> dict:
        return self.core.partitions

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while not self._closed:
                now = trio.current_time()
                plan = self.core.build_fetch(now)
                if plan is None:
                    wakeup = self.core.next_wakeup(now)
                    self._wake = trio.Event()
                    with trio.move_on_at(math.inf if wakeup is None else wakeup):
                        await self._wake.wait()
                    continue
                await self._fetch_once(plan)
        finally:
            with trio.CancelScope(shield=True):
                await self.endpoint.aclose()

    async def _fetch_once(self, plan: FetchPlan) -> None:
        self.fetches += 1
        try:
            responses = await self.endpoint.fetch(plan)
        except trio.Cancelled:
            raise
        except Exception as e:  # the leader is unreachable: every partition backs off
            log.info("%s: fetch from broker %d failed: %s", self.name, self.leader_id, e)
            now = trio.current_time()
            for req in plan.partitions:
                self.core.delay((req.topic, req.partition), now, ErrorCode.NETWORK_EXCEPTION)
            return
        self.last_answered = (self.wall_clock_ms(), plan.versions)
        for tp, response in responses.items():
            if response.error_code == 0:
                self.handler.on_fetched(tp, response)
        outputs = self.core.handle_response(plan, responses, trio.current_time())
        for output in outputs:
            await self._process(output)

    async def _process(self, output) -> None:
        core = self.core
        tp = output.tp
        awaited = _AWAITED.get(type(output))
        if awaited is not None:
            state = core.partitions.get(tp)
            # Removed (or re-added) while an earlier output of the same answer was processed:
            # the answer is stale, and acting on it would append to, or truncate, a log this
            # fetcher no longer owns (Kafka checks the partition's fetch state the same way).
            if state is None or state.status is not awaited:
                return
        try:
            if isinstance(output, AppendRecords):
                result = self.handler.append(output)
                if result.refetch:
                    core.truncated(tp, result.next_offset, result.last_epoch)
                else:
                    core.appended(tp, result.next_offset, result.last_epoch)
                if result.hold:
                    core.hold(tp)
            elif isinstance(output, TruncateOnDivergence):
                offset, epoch = self.handler.truncate_on_divergence(output)
                core.truncated(tp, offset, epoch)
            elif isinstance(output, HandleOutOfRange):
                action = await self.handler.resolve_out_of_range(
                    tp, output.fetch_offset, self.endpoint, state.current_leader_epoch
                )
                if action.fail is not None:
                    core.remove_partition(tp)
                    self._on_failed(tp)
                    self.handler.on_failed(tp, action.fail)
                elif action.restart_at is not None:
                    core.restart_at(tp, action.restart_at)
                else:
                    offset = (
                        output.fetch_offset if action.truncate_to is None else action.truncate_to
                    )
                    core.truncated(tp, offset, None)
            elif isinstance(output, PartitionError):
                self.handler.on_error(output)
                if output.leader_change:
                    self._on_leader_change(tp, output)
        except trio.Cancelled:
            raise
        except Exception as e:
            # A local failure (an append refused, the leader unreachable while resolving an
            # out-of-range offset): back off and try again from the same offset.
            code = e.code if isinstance(e, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
            log.warning("%s: %s failed for %s-%d: %s", self.name, type(output).__name__, *tp, e)
            core.delay(tp, trio.current_time(), code)


#: The status the core leaves a partition in when it hands out each kind of local work.
_AWAITED = {
    AppendRecords: FetchStatus.PENDING,
    TruncateOnDivergence: FetchStatus.TRUNCATING,
    HandleOutOfRange: FetchStatus.TRUNCATING,
}


def _replace(config: FetcherConfig, **changes) -> FetcherConfig:
    from dataclasses import replace

    return replace(config, **changes)


def fetcher_number(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's ``getFetcherId``: ``abs(31 * hash(topic) + partition) % num_fetchers``, with a
    stable hash of the name (Python's ``hash`` of a str changes from run to run)."""
    return abs(31 * zlib.crc32(tp[0].encode()) + tp[1]) % num_fetchers


class FetcherManager:
    """Fetcher tasks by ``(leader id, fetcher number)`` (Kafka's ``AbstractFetcherManager``).

    ``endpoint_factory(leader_id, fetcher_number)`` opens the endpoint of a new task;
    ``locator`` finds a partition's leader after a leader change. Use inside
    :meth:`run` (``await nursery.start(manager.run)``).
    """

    def __init__(
        self,
        name: str,
        endpoint_factory: Callable[[int, int], LeaderEndpoint],
        handler: PartitionHandler,
        locator: LeaderLocator,
        *,
        config: FetcherConfig | None = None,
        num_fetchers: int = 1,
        relocate_backoff_s: float = 0.1,
        relocate_backoff_max_s: float = 5.0,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if num_fetchers < 1:
            raise ValueError(f"num_fetchers must be at least 1, not {num_fetchers}")
        self.name = name
        self.endpoint_factory = endpoint_factory
        self.handler = handler
        self.locator = locator
        self.config = config or FetcherConfig()
        self.num_fetchers = num_fetchers
        self.relocate_backoff_s = relocate_backoff_s
        self.relocate_backoff_max_s = relocate_backoff_max_s
        self.wall_clock_ms = wall_clock_ms
        self.fetchers: dict[tuple[int, int], FetcherTask] = {}
        self._placement: dict[TopicPartition, tuple[int, int]] = {}
        self._relocating: dict[TopicPartition, InitialFetchState] = {}
        # Partitions whose leader cannot be found: since when (Trio's clock) and why.
        self._unreachable: dict[TopicPartition, tuple[float, str]] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None

    # -- membership ----------------------------------------------------------------------------

    def add_fetcher_for_partitions(self, partitions: Mapping[TopicPartition, InitialFetchState]):
        """Fetch each partition from its leader, from its fetch offset (a partition already
        fetched is moved to the new leader / offset)."""
        for tp, state in partitions.items():
            self._relocating.pop(tp, None)
            self._unreachable.pop(tp, None)
            self._remove(tp)
            key = (state.leader_id, fetcher_number(tp, self.num_fetchers))
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = self._start_fetcher(key)
            fetcher.add(tp, state)
            self._placement[tp] = key

    def remove_fetcher_for_partitions(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Stop fetching ``tps``; returns the fetch offset each had."""
        out = {}
        for tp in tps:
            self._relocating.pop(tp, None)
            self._unreachable.pop(tp, None)
            offset = self._remove(tp)
            if offset is not None:
                out[tp] = offset
        return out

    def resume_partition(self, tp: TopicPartition, leader_epoch: int | None = None) -> None:
        """Fetch again a partition its handler held (``AppendResult.hold``)."""
        key = self._placement.get(tp)
        if key is not None:
            fetcher = self.fetchers[key]
            if leader_epoch is not None:
                fetcher.core.update_leader_epoch(tp, leader_epoch)
            fetcher.resume(tp)

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The leader ``tp`` is fetched from (None: not fetched, or being relocated)."""
        key = self._placement.get(tp)
        return None if key is None else key[0]

    def last_answered(self, tp: TopicPartition) -> int | None:
        """When (wall clock, ms) the last answered fetch of ``tp``'s fetcher came, if ``tp``
        was in it (None otherwise): the partition was fetched then, news or not."""
        key = self._placement.get(tp)
        answered = None if key is None else self.fetchers[key].last_answered
        if answered is None or tp not in answered[1]:
            return None
        return answered[0]

    def fetch_state(self, tp: TopicPartition):
        key = self._placement.get(tp)
        return None if key is None else self.fetchers[key].core.partitions.get(tp)

    @property
    def partitions(self) -> set[TopicPartition]:
        return set(self._placement) | set(self._relocating)

    def unreachable(self, tp: TopicPartition) -> tuple[float, str] | None:
        """``(since, last error)`` while no leader of ``tp`` can be reached (``since`` on
        Trio's clock), None while it is fetched or its leader is known."""
        if tp not in self._relocating:
            return None
        return self._unreachable.get(tp)

    async def aclose(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.close()
        self.fetchers.clear()
        self._placement.clear()
        self._relocating.clear()

    # -- internals -----------------------------------------------------------------------------

    def _remove(self, tp: TopicPartition) -> int | None:
        key = self._placement.pop(tp, None)
        if key is None:
            return None
        fetcher = self.fetchers[key]
        offset = fetcher.remove(tp)
        if not fetcher.partitions:
            fetcher.close()
            del self.fetchers[key]
        return offset

    def _start_fetcher(self, key: tuple[int, int]) -> FetcherTask:
        if self._nursery is None:
            raise RuntimeError(f"{self.name}: the fetcher manager is not running")
        leader_id, number = key
        fetcher = FetcherTask(
            f"{self.name}-fetcher-{number}-broker-{leader_id}",
            leader_id,
            self.endpoint_factory(leader_id, number),
            self.handler,
            self.config,
            self._leader_changed,
            self._remove,
            self.wall_clock_ms,
        )
        self.fetchers[key] = fetcher
        self._nursery.start_soon(fetcher.run)
        return fetcher

    def _leader_changed(self, tp: TopicPartition, error: PartitionError) -> None:
        """A partition's leader moved or its epoch changed: find it again (refreshing the
        metadata) and move the partition to the fetcher of its leader."""
        key = self._placement.get(tp)
        if key is None or self._nursery is None:
            return
        state = self.fetchers[key].core.partitions.get(tp)
        if state is None:
            return
        initial = InitialFetchState(
            state.topic_id, key[0], state.current_leader_epoch, state.fetch_offset,
            state.last_fetched_epoch,
        )  # fmt: skip
        self._remove(tp)
        self._relocating[tp] = initial
        self._nursery.start_soon(self._relocate, tp, initial)

    async def _relocate(self, tp: TopicPartition, initial: InitialFetchState) -> None:
        delay = self.relocate_backoff_s
        while self._relocating.get(tp) is initial:
            try:
                leader_id, epoch = await self.locator.find_leader(tp, refresh=True)
            except trio.Cancelled:
                raise
            except Exception as e:
                log.info("%s: no leader for %s-%d yet: %s", self.name, *tp, e)
                since = self._unreachable.get(tp, (trio.current_time(), ""))[0]
                self._unreachable[tp] = (since, str(e))
            else:
                self._unreachable.pop(tp, None)
                if self._relocating.get(tp) is not initial:
                    return  # removed or re-added meanwhile
                del self._relocating[tp]
                moved = InitialFetchState(
                    initial.topic_id, leader_id, epoch, initial.fetch_offset,
                    initial.last_fetched_epoch,
                )  # fmt: skip
                self.add_fetcher_for_partitions({tp: moved})
                return
            await trio.sleep(delay)
            delay = min(delay * 2, self.relocate_backoff_max_s)
