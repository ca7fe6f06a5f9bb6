"""The fetcher framework's Trio shell (kcore.replica.fetcher) over an in-test leader endpoint.

The endpoint here is a small in-memory cluster (which broker leads which partition, each
partition a count of records); the real endpoint, the mirror's over ``kcore.client``, is tested
between two kcore clusters in ``tests/mirror/test_mirror_fetcher.py``.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from trio.testing import MockClock

from kcore.protocol.errors import ErrorCode
from kcore.replica.fetch_state import FetcherConfig, PartitionResponse
from kcore.replica.fetcher import (
    AppendResult,
    FetcherManager,
    InitialFetchState,
    OutOfRangeAction,
    fetcher_number,
)
from tests.client.fake_broker import trio_test

TID = uuid.UUID(int=1)


class Cluster:
    def __init__(self, leaders: dict, ends: dict) -> None:
        self.leaders = dict(leaders)  # tp -> broker id
        self.epochs = {tp: 0 for tp in leaders}
        self.ends = dict(ends)  # tp -> log end offset
        self.opened: list[tuple[int, int]] = []
        self.closed: list[tuple[int, int]] = []


class Endpoint:
    supports_last_fetched_epoch = True

    def __init__(self, cluster: Cluster, broker: int, number: int) -> None:
        self.cluster, self.broker, self.number = cluster, broker, number
        cluster.opened.append((broker, number))

    async def fetch(self, plan):
        await trio.sleep(0.001)
        out = {}
        for req in plan.partitions:
            tp = (req.topic, req.partition)
            if self.cluster.leaders[tp] != self.broker:
                out[tp] = PartitionResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif req.fetch_offset > self.cluster.ends[tp]:
                out[tp] = PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
            elif req.fetch_offset == self.cluster.ends[tp]:
                out[tp] = PartitionResponse(high_watermark=self.cluster.ends[tp])
            else:
                out[tp] = PartitionResponse(high_watermark=self.cluster.ends[tp], records=b"r")
        return out

    async def earliest_offset(self, tp, leader_epoch):
        return 0

    async def latest_offset(self, tp, leader_epoch):
        return self.cluster.ends[tp]

    async def epoch_end_offsets(self, partitions):
        raise AssertionError("not used")

    async def aclose(self):
        self.cluster.closed.append((self.broker, self.number))


class Handler:
    """The local side: a log end offset per partition, one record per append."""

    def __init__(self) -> None:
        self.ends: dict = {}
        self.appended_from: dict = {}
        self.failed: list = []

    def on_fetched(self, tp, response):
        pass

    def append(self, output):
        self.appended_from.setdefault(output.tp, set()).add(output.fetch_offset)
        self.ends[output.tp] = output.fetch_offset + 1
        return AppendResult(output.fetch_offset + 1, 0)

    def truncate_on_divergence(self, output):
        raise AssertionError("not used")

    async def resolve_out_of_range(self, tp, fetch_offset, endpoint, leader_epoch):
        end = await endpoint.latest_offset(tp, leader_epoch)
        return OutOfRangeAction(fail=f"{fetch_offset} above {end}")

    def on_error(self, error):
        pass

    def on_failed(self, tp, reason):
        self.failed.append((tp, reason))


class Locator:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lookups = 0

    async def find_leader(self, tp, *, refresh):
        self.lookups += 1
        return self.cluster.leaders[tp], self.cluster.epochs[tp]


def _manager(cluster, handler, num_fetchers=1):
    return FetcherManager(
        "test",
        lambda broker, number: Endpoint(cluster, broker, number),
        handler,
        Locator(cluster),
        config=FetcherConfig(max_wait_ms=0, backoff_s=0.01, backoff_max_s=0.05),
        num_fetchers=num_fetchers,
        relocate_backoff_s=0.01,
    )


async def _until(predicate):
    with trio.fail_after(10):
        while not predicate():
            await trio.sleep(0.005)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_manager_one_task_per_leader_and_fetcher_number():
    tps = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    cluster = Cluster({tp: 1 + i % 2 for i, tp in enumerate(tps)}, dict.fromkeys(tps, 5))
    handler = Handler()
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(_manager(cluster, handler, num_fetchers=2).run)
        manager.add_fetcher_for_partitions(
            {tp: InitialFetchState(TID, cluster.leaders[tp], 0, 0) for tp in tps}
        )
        expected = {(cluster.leaders[tp], fetcher_number(tp, 2)) for tp in tps}
        assert set(manager.fetchers) == expected
        await _until(lambda: all(handler.ends.get(tp) == 5 for tp in tps))
        # Each record appended once: no offset fetched twice.
        assert all(handler.appended_from[tp] == set(range(5)) for tp in tps)
        nursery.cancel_scope.cancel()


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_manager_moves_a_partition_to_its_new_leader():
    tp, other = ("a", 0), ("a", 1)
    cluster = Cluster({tp: 1, other: 1}, {tp: 3, other: 3})
    handler = Handler()
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(_manager(cluster, handler).run)
        manager.add_fetcher_for_partitions(
            {p: InitialFetchState(TID, 1, 0, 0) for p in (tp, other)}
        )
        await _until(lambda: handler.ends.get(tp) == 3 and handler.ends.get(other) == 3)
        cluster.leaders[tp] = 2  # the leader moves; the old one answers NOT_LEADER
        cluster.epochs[tp] = 1
        cluster.ends[tp] = 6
        await _until(lambda: handler.ends.get(tp) == 6)
        assert manager._placement[tp] == (2, 0) and manager._placement[other] == (1, 0)
        assert manager.fetch_state(tp).current_leader_epoch == 1
        assert handler.appended_from[tp] == set(range(6))  # resumed where it was
        # The last partition leaving a fetcher ends it and closes its endpoint.
        manager.remove_fetcher_for_partitions([other])
        await _until(lambda: (1, 0) in cluster.closed)
        assert set(manager.fetchers) == {(2, 0)}
        nursery.cancel_scope.cancel()


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_manager_failed_partition_leaves_and_is_reported():
    tp = ("a", 0)
    cluster = Cluster({tp: 1}, {tp: 2})
    handler = Handler()
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(_manager(cluster, handler).run)
        manager.add_fetcher_for_partitions({tp: InitialFetchState(TID, 1, 0, 9)})
        await _until(lambda: handler.failed)
        assert handler.failed == [(tp, "9 above 2")]
        assert manager.partitions == set() and manager.fetchers == {}
        nursery.cancel_scope.cancel()


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_manager_unreachable_leader_backs_off_and_retries():
    tp = ("a", 0)
    cluster = Cluster({tp: 1}, {tp: 2})
    handler = Handler()
    calls = []

    class Flaky(Endpoint):
        async def fetch(self, plan):
            calls.append(trio.current_time())
            if len(calls) < 3:
                raise OSError("connection refused")
            return await super().fetch(plan)

    manager = _manager(cluster, handler)
    manager.endpoint_factory = lambda broker, number: Flaky(cluster, broker, number)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        manager.add_fetcher_for_partitions({tp: InitialFetchState(TID, 1, 0, 0)})
        await _until(lambda: handler.ends.get(tp) == 2)
        assert calls[1] - calls[0] >= 0.01  # backed off between attempts
        nursery.cancel_scope.cancel()


def test_fetcher_manager_refuses_zero_fetchers():
    with pytest.raises(ValueError, match="at least 1"):
        _manager(Cluster({}, {}), Handler(), num_fetchers=0)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_manager_reports_since_when_a_leader_is_unreachable():
    tp = ("a", 0)
    cluster = Cluster({tp: 1}, {tp: 3})
    handler = Handler()

    class Down(Locator):
        down = True

        async def find_leader(self, tp, *, refresh):
            if self.down:
                raise OSError("no broker reachable")
            return await super().find_leader(tp, refresh=refresh)

    async with trio.open_nursery() as nursery:
        manager = _manager(cluster, handler)
        manager.locator = locator = Down(cluster)
        manager = await nursery.start(manager.run)
        manager.add_fetcher_for_partitions({tp: InitialFetchState(TID, 1, 0, 0)})
        await _until(lambda: handler.ends.get(tp) == 3)
        assert manager.unreachable(tp) is None
        cluster.leaders[tp] = 2  # the leader moves while no broker can be reached
        start = trio.current_time()
        await _until(lambda: manager.unreachable(tp) is not None)
        since, error = manager.unreachable(tp)
        assert start <= since <= trio.current_time() and error == "no broker reachable"
        await trio.sleep(5)
        assert manager.unreachable(tp)[0] == since  # the outage's start, not the last try
        locator.down = False
        cluster.ends[tp] = 4
        await _until(lambda: handler.ends.get(tp) == 4)
        assert manager.unreachable(tp) is None
        nursery.cancel_scope.cancel()
