"""The fetcher task's handling of each core output, through the manager under ``MockClock``: a
diverging epoch, an out-of-range offset (restart, truncate, fail), an append that asks to
refetch or to hold, a failed append, and partition errors. Each test scripts the leader's
answers and checks the exact next Fetch (offset and last fetched epoch) the task sends."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import trio
from trio.testing import MockClock

from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_state import PartitionResponse
from kcore.replica.fetcher import AppendResult, InitialFetchState, OutOfRangeAction
from tests.client.fake_broker import trio_test
from tests.replica.test_fetcher_manager import TID, Cluster, Endpoint, Handler, _manager, _until

TP = ("a", 0)


class Scripted(Endpoint):
    """Answers each Fetch of TP with the next scripted response (then empty ones), and
    records every request as (fetch offset, last fetched epoch, current leader epoch)."""

    script: list = []
    asked: list = []
    sent: list = []  # (broker, the request) of every Fetch partition

    async def fetch(self, plan):
        await trio.sleep(0.001)
        out = {}
        for req in plan.partitions:
            tp = (req.topic, req.partition)
            self.sent.append((self.broker, req))
            self.asked.append((req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch))
            out[tp] = self.script.pop(0) if self.script else PartitionResponse(high_watermark=0)
        return out


class Recording(Handler):
    def __init__(self) -> None:
        super().__init__()
        self.outputs: list = []
        self.results: list = []  # what append returns, in order (then the default)
        self.out_of_range: list = []
        self.action = OutOfRangeAction()
        self.fetched: list = []  # (tp, high watermark, outputs so far) per on_fetched

    def append(self, output):
        self.outputs.append(("append", output.fetch_offset))
        if self.results:
            result = self.results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result
        return super().append(output)

    def truncate_on_divergence(self, output):
        self.outputs.append(("diverged", output.epoch, output.end_offset))
        return output.end_offset, output.epoch

    async def resolve_out_of_range(self, tp, fetch_offset, endpoint, leader_epoch):
        self.out_of_range.append((tp, fetch_offset, leader_epoch))
        return self.action

    def on_error(self, error):
        self.outputs.append(("error", error.tp, error.error_code))

    def on_fetched(self, tp, response):
        self.fetched.append((tp, response.high_watermark, len(self.outputs)))


@asynccontextmanager
async def fetching(handler, script):
    """Fetch TP from leader 1 (epoch 4) from offset 5, last fetched epoch 2, with ``script``
    as its answers; yields the running manager."""
    cluster = Cluster({TP: 1}, {TP: 100})
    Scripted.script, Scripted.asked, Scripted.sent = list(script), [], []
    manager = _manager(cluster, handler)
    manager.endpoint_factory = lambda broker, number: Scripted(cluster, broker, number)
    manager.cluster = cluster
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        manager.add_fetcher_for_partitions({TP: InitialFetchState(TID, 1, 4, 5, 2)})
        yield manager
        nursery.cancel_scope.cancel()


async def run(handler, script, until):
    """The requests the task sent until ``until(requests)``."""
    async with fetching(handler, script):
        await _until(lambda: until(Scripted.asked))
    return Scripted.asked


def records(offset):
    return PartitionResponse(high_watermark=100, records=b"r%d" % offset)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_diverging_epoch_truncates_and_fetches_from_there():
    handler = Recording()
    asked = await run(
        handler, [PartitionResponse(diverging_epoch=(1, 3))], lambda asked: len(asked) >= 2
    )
    assert handler.outputs[0] == ("diverged", 1, 3)
    assert asked[:2] == [(5, 2, 4), (3, 1, 4)]


@pytest.mark.parametrize(
    "result, then",
    [
        (AppendResult(9, 3), (9, 3, 4)),  # on from the next offset, with the last epoch
        (AppendResult(2, 1, refetch=True), (2, 1, 4)),  # the log was cut: from its end
    ],
    ids=["appended", "refetch"],
)
@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_append_result_sets_the_next_fetch(result, then):
    handler = Recording()
    handler.results = [result]
    asked = await run(handler, [records(5)], lambda asked: len(asked) >= 2)
    assert asked[:2] == [(5, 2, 4), then]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_append_that_holds_stops_the_partition_until_resumed():
    handler = Recording()
    handler.results = [AppendResult(6, 2, hold=True)]
    async with fetching(handler, [records(5)]) as manager:
        await _until(lambda: handler.outputs)
        await trio.sleep(5)  # held: no fetch however long we wait
        assert Scripted.asked == [(5, 2, 4)]
        manager.resume_partition(TP, leader_epoch=7)
        await _until(lambda: len(Scripted.asked) >= 2)
        assert Scripted.asked[1] == (6, 2, 7)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_failed_append_backs_off_and_fetches_the_same_offset():
    handler = Recording()
    handler.results = [OSError("disk full")]
    asked = await run(handler, [records(5), records(5)], lambda asked: len(asked) >= 2)
    assert asked[:2] == [(5, 2, 4), (5, 2, 4)]
    assert handler.outputs[:2] == [("append", 5), ("append", 5)]


@pytest.mark.parametrize(
    "failure, code",
    [
        (KafkaError(ErrorCode.KAFKA_STORAGE_ERROR), ErrorCode.KAFKA_STORAGE_ERROR),
        (OSError("disk full"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_failed_append_records_its_error_code(failure, code):
    handler = Recording()
    handler.results = [failure]
    async with fetching(handler, [records(5)]) as manager:
        await _until(lambda: handler.outputs)
        state = manager.fetch_state(TP)
        assert (state.last_error, state.failures, state.fetch_offset) == (code, 1, 5)


@pytest.mark.parametrize(
    "action, expected",
    [
        (OutOfRangeAction(restart_at=40), (40, -1, 4)),  # an emptied log restarted there
        (OutOfRangeAction(truncate_to=3), (3, -1, 4)),
        (OutOfRangeAction(), (5, -1, 4)),  # nothing to change: the same offset again
    ],
)
@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_out_of_range_resolved_fetches_where_the_handler_says(action, expected):
    handler = Recording()
    handler.action = action
    script = [PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)]
    asked = await run(handler, script, lambda asked: len(asked) >= 2)
    assert handler.out_of_range == [(TP, 5, 4)]  # asked with the partition's leader epoch
    assert asked[1] == expected


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_out_of_range_failed_partition_leaves_the_fetcher():
    handler = Recording()
    handler.action = OutOfRangeAction(fail="no such offset")
    script = [PartitionResponse(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)]
    async with fetching(handler, script) as manager:
        await _until(lambda: handler.failed)
        assert handler.failed == [(TP, "no such offset")]
        assert manager.partitions == set() and manager.fetch_state(TP) is None
        await trio.sleep(1)
        assert Scripted.asked == [(5, 2, 4)]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_partition_error_is_handed_to_the_handler():
    handler = Recording()
    script = [PartitionResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)]
    asked = await run(handler, script, lambda asked: len(asked) >= 2)
    assert handler.outputs[0] == ("error", TP, ErrorCode.UNKNOWN_SERVER_ERROR)
    assert asked[1] == (5, 2, 4)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_tells_the_handler_of_each_answer_without_error():
    handler = Recording()
    script = [PartitionResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR), records(5)]
    async with fetching(handler, script) as manager:
        await _until(lambda: ("append", 5) in handler.outputs)
        assert handler.outputs[:2] == [("error", TP, ErrorCode.UNKNOWN_SERVER_ERROR), ("append", 5)]
        assert handler.fetched[0] == (TP, 100, 1)  # the answer with records, before its append
        # Every request counted once (the last one may still be in flight).
        assert manager.fetchers[(1, 0)].fetches - len(Scripted.asked) in (0, 1)


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_unreachable_leader_delays_its_partitions_as_a_network_error():
    class Down(Scripted):
        async def fetch(self, plan):
            raise OSError("connection refused")

    handler = Recording()
    async with fetching(handler, []) as manager:
        manager.endpoint_factory = None  # the task made its endpoint already
        task = manager.fetchers[(1, 0)]
        task.endpoint = Down(Cluster({TP: 1}, {TP: 100}), 1, 0)
        await _until(lambda: manager.fetch_state(TP).last_error == ErrorCode.NETWORK_EXCEPTION)
        assert manager.fetch_state(TP).fetch_offset == 5


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_partition_moved_to_a_new_leader_keeps_its_whole_position():
    handler = Recording()
    script = [PartitionResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    async with fetching(handler, script) as manager:
        manager.cluster.leaders[TP] = 2
        manager.cluster.epochs[TP] = 6
        await _until(lambda: any(broker == 2 for broker, _ in Scripted.sent))
        broker, req = next((b, r) for b, r in Scripted.sent if b == 2)
        assert (req.topic_id, req.fetch_offset, req.last_fetched_epoch) == (TID, 5, 2)
        assert req.current_leader_epoch == 6  # the new leader's epoch, from the metadata
        assert set(manager.fetchers) == {(2, 0)}


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_of_a_leader_without_last_fetched_epoch_never_sends_it():
    class Old(Scripted):
        supports_last_fetched_epoch = False

    handler = Recording()
    async with fetching(handler, []) as manager:
        manager.endpoint_factory = lambda broker, number: Old(manager.cluster, broker, number)
        manager.remove_fetcher_for_partitions([TP])
        manager.add_fetcher_for_partitions({TP: InitialFetchState(TID, 1, 4, 5, 2)})
        await _until(lambda: any(r.last_fetched_epoch == -1 for _, r in Scripted.sent))
        assert Scripted.sent[-1][1].fetch_offset == 5


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_fetcher_removed_partitions_report_where_they_were():
    handler = Recording()
    handler.results = [AppendResult(9, 3)]
    async with fetching(handler, [records(5)]) as manager:
        await _until(lambda: handler.outputs)
        assert manager.remove_fetcher_for_partitions([TP, ("other", 0)]) == {TP: 9}
        assert manager.partitions == set()
