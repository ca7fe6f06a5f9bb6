"""The fetcher manager's and task's rules one at a time under ``MockClock``: a failed partition
sharing its fetcher, the stale outputs of an answer whose partition left meanwhile, the
endpoint closed even when cancelled, one fetcher per leader by default, and the spread of a
topic's partitions over the fetchers. Written against the survivors of `make mutate`."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from kcore.protocol.errors import ErrorCode
from kcore.replica.fetch_state import PartitionResponse
from kcore.replica.fetcher import FetcherManager, InitialFetchState, fetcher_number
from tests.client.fake_broker import trio_test
from tests.replica.test_fetcher_manager import TID, Cluster, Endpoint, Handler, Locator, _until

TP, OTHER = ("a", 0), ("b", 0)


def defaults_manager(cluster, handler, endpoint=Endpoint):
    """A manager with every default but the endpoint: the defaults are under test too."""
    return FetcherManager(
        "test", lambda broker, number: endpoint(cluster, broker, number), handler, Locator(cluster)
    )


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_one_fetcher_per_leader_by_default():
    cluster, handler = Cluster({TP: 1, OTHER: 1}, {TP: 2, OTHER: 2}), Handler()
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(defaults_manager(cluster, handler).run)
        manager.add_fetcher_for_partitions(
            {tp: InitialFetchState(TID, 1, 0, 0) for tp in (TP, OTHER)}
        )
        assert set(manager.fetchers) == {(1, 0)}
        await _until(lambda: handler.ends.get(TP) == 2 and handler.ends.get(OTHER) == 2)
        nursery.cancel_scope.cancel()


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_a_failed_partition_leaves_its_fetcher_to_the_others():
    cluster, handler = Cluster({TP: 1, OTHER: 1}, {TP: 2, OTHER: 3}), Handler()
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(defaults_manager(cluster, handler).run)
        manager.add_fetcher_for_partitions(
            {TP: InitialFetchState(TID, 1, 0, 9), OTHER: InitialFetchState(TID, 1, 0, 0)}
        )
        await _until(lambda: handler.failed and handler.ends.get(OTHER) == 3)
        assert handler.failed == [(TP, "9 above 2")]
        assert manager.partitions == {OTHER} and set(manager.fetchers) == {(1, 0)}
        fetcher = manager.fetchers[(1, 0)]
        assert set(fetcher.partitions) == {OTHER}
        cluster.ends[OTHER] = 4
        await _until(lambda: handler.ends.get(OTHER) == 4)
        assert handler.failed == [(TP, "9 above 2")]  # failed once, never fetched again
        nursery.cancel_scope.cancel()


class Answers(Endpoint):
    """Answers TP with records and OTHER with ``other`` (records unless told otherwise)."""

    other = None

    async def fetch(self, plan):
        out = await super().fetch(plan)
        if OTHER in out and self.other is not None:
            out[OTHER] = self.other
        return out


@pytest.mark.parametrize(
    "other",
    [
        None,
        PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE),
        PartitionResponse(high_watermark=3, records=b"r", diverging_epoch=(0, 0)),
    ],
    ids=["append", "out-of-range", "diverging"],
)
@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_the_answer_of_a_partition_removed_meanwhile_is_dropped(other):
    # An earlier output of the same answer removes the partition (the broker became its
    # leader, say): its own output must not append to, or truncate, the log any more.
    cluster = Cluster({TP: 1, OTHER: 1}, {TP: 3, OTHER: 3})
    touched = []

    class Removing(Handler):
        def append(self, output):
            if output.tp == TP:
                manager.remove_fetcher_for_partitions([OTHER])
            else:
                touched.append("append")
            return super().append(output)

        def truncate_on_divergence(self, output):
            touched.append("truncate")
            return 0, 0

        async def resolve_out_of_range(self, tp, fetch_offset, endpoint, leader_epoch):
            touched.append("out of range")
            return await super().resolve_out_of_range(tp, fetch_offset, endpoint, leader_epoch)

    handler = Removing()
    Answers.other = other
    manager = defaults_manager(cluster, handler, Answers)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        manager.add_fetcher_for_partitions(
            {tp: InitialFetchState(TID, 1, 0, 0) for tp in (TP, OTHER)}
        )
        await _until(lambda: handler.ends.get(TP) == 3)
        assert touched == [] and handler.failed == [] and manager.partitions == {TP}
        nursery.cancel_scope.cancel()


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_a_cancelled_fetcher_still_closes_its_endpoint():
    cluster, handler = Cluster({TP: 1}, {TP: 2}), Handler()

    class SlowClose(Endpoint):
        async def aclose(self):
            await trio.sleep(0.5)  # a connection's goodbye takes a while
            await super().aclose()

    manager = defaults_manager(cluster, handler, SlowClose)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        manager.add_fetcher_for_partitions({TP: InitialFetchState(TID, 1, 0, 0)})
        await _until(lambda: handler.ends.get(TP) == 2)
        nursery.cancel_scope.cancel()
    assert cluster.closed == [(1, 0)]


def test_a_topic_s_partitions_take_the_fetchers_in_turn():
    # Kafka's getFetcherId: 31 * hash(topic) + partition, so consecutive partitions of one
    # topic go to consecutive fetchers and spread evenly.
    for topic in ("a", "orders", "__consumer_offsets"):
        numbers = [fetcher_number((topic, p), 3) for p in range(9)]
        assert all((b - a) % 3 == 1 for a, b in zip(numbers, numbers[1:], strict=False))
        assert sorted(numbers) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert fetcher_number(("a", 0), 1) == 0
