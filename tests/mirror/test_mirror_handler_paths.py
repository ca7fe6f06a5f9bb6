"""The mirror fetcher's destination side (MirrorPartitionHandler) on every path the fetcher
task takes it down, over a recording partition: truncation on a diverging epoch (Kafka's
follower rule), decision D-16's out-of-range answers, epoch fencing (D-11), an empty log
restarted inside a batch, and the source offsets kept for Describe. The two-cluster tests
(test_mirror_fetcher.py, test_mirroring_*.py) run the same handler for real."""

from __future__ import annotations

import pytest
import trio

from kcore.mirror.fetcher import MirrorPartitionHandler
from kcore.record.records import RecordBatchBuilder
from kcore.replica.fetch_state import AppendRecords, PartitionResponse, TruncateOnDivergence

TP = ("orders", 0)
NOW = 1_700_000_000_000


class Partition:
    """A destination partition that records what is done to it. ``epochs``: the local
    answer to end_offset_for_epoch, per epoch asked."""

    def __init__(self, end=10, start=0, leader_epoch=3, latest_epoch=2, epochs=None) -> None:
        self.log_end_offset, self.log_start_offset = end, start
        self.leader_epoch, self.latest_epoch = leader_epoch, latest_epoch
        self.epochs = epochs or {}
        self.calls: list = []

    def end_offset_for_epoch(self, epoch):
        return self.epochs[epoch]

    def truncate_to(self, offset):
        self.calls.append(("truncate_to", offset))
        self.log_end_offset = min(self.log_end_offset, offset)

    def truncate_fully_and_start_at(self, offset, now_ms):
        self.calls.append(("restart_at", offset, now_ms))
        self.log_start_offset = self.log_end_offset = offset


class Replicas:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.appended: list = []

    def partition_or_error(self, topic, index):
        assert (topic, index) == TP
        return self.partition

    def append_as_follower(self, tp, batches, **kwargs):
        self.appended.append((tp, [b.base_offset for b in batches]))
        self.kwargs = kwargs
        self.partition.log_end_offset = batches[-1].last_offset + 1


class Listener:
    def __init__(self) -> None:
        self.fencing: list = []
        self.failed: list = []

    def on_epoch_fencing(self, tp, epoch):
        self.fencing.append((tp, epoch))

    def on_partition_failed(self, tp, reason):
        self.failed.append((tp, reason))


def handler_over(partition):
    listener = Listener()
    handler = MirrorPartitionHandler("dr", Replicas(partition), listener, now_ms=lambda: NOW)
    return handler, listener


def batch(base, count, epoch=0):
    builder = RecordBatchBuilder(base_offset=base, partition_leader_epoch=epoch)
    for i in range(count):
        builder.append(1_000 + i, None, b"v%d" % i)
    return bytes(builder.build())


def fetched(fetch_offset, records):
    return AppendRecords(TP, fetch_offset, memoryview(records), 100, 100, 0)


# -- truncation on a diverging epoch -----------------------------------------------------------


@pytest.mark.parametrize(
    "local, source_end, start, expected",
    [
        ((2, 9), 7, 0, [("truncate_to", 7)]),  # same epoch: the source's end
        ((2, 5), 7, 0, [("truncate_to", 5)]),  # ours ends earlier: the smaller
        ((1, 5), 7, 0, [("truncate_to", 5)]),  # we lack the epoch: where our last one ends
        ((2, 12), 15, 0, [("truncate_to", 10)]),  # never above the log end
        ((-1, -1), 7, 0, [("truncate_to", 0)]),  # no epoch at all: everything
        ((1, 3), 7, 4, [("restart_at", 3, NOW)]),  # below the log start: restart there
        ((1, 4), 7, 4, [("truncate_to", 4)]),
    ],
)
def test_handler_truncates_where_the_source_and_the_destination_agree(
    local, source_end, start, expected
):
    partition = Partition(end=10, start=start, latest_epoch=1, epochs={2: local})
    handler, _ = handler_over(partition)
    result = handler.truncate_on_divergence(TruncateOnDivergence(TP, 2, source_end))
    assert partition.calls == expected
    assert result == (partition.log_end_offset, 1)


# -- out of range (D-16) -----------------------------------------------------------------------


class Endpoint:
    def __init__(self, start, end) -> None:
        self.start, self.end = start, end
        self.asked: list = []

    async def earliest_offset(self, tp, leader_epoch):
        self.asked.append(("earliest", tp, leader_epoch))
        return self.start

    async def latest_offset(self, tp, leader_epoch):
        self.asked.append(("latest", tp, leader_epoch))
        return self.end


def resolve(fetch_offset, start=10, end=15):
    partition = Partition(end=fetch_offset)
    handler, _ = handler_over(partition)
    endpoint = Endpoint(start, end)
    action = trio.run(handler.resolve_out_of_range, TP, fetch_offset, endpoint, 6)
    return action, partition.calls, endpoint.asked


def test_handler_out_of_range_below_the_source_start_restarts_the_log_there():
    action, calls, asked = resolve(3)
    assert (action.restart_at, action.truncate_to, action.fail) == (10, None, None)
    assert calls == [("restart_at", 10, NOW)]
    assert asked == [("earliest", TP, 6)]


@pytest.mark.parametrize("fetch_offset", [10, 12, 15])
def test_handler_out_of_range_inside_the_source_log_fetches_again(fetch_offset):
    action, calls, asked = resolve(fetch_offset)
    assert (action.restart_at, action.truncate_to, action.fail) == (None, fetch_offset, None)
    assert calls == [] and asked == [("earliest", TP, 6), ("latest", TP, 6)]


def test_handler_out_of_range_above_the_source_end_fails_the_partition():
    action, calls, _ = resolve(16)
    assert calls == [] and action.restart_at is None and action.truncate_to is None
    assert action.fail == (
        "the destination log end offset 16 of orders-0 is above the source's log end offset "
        "15 with no diverging epoch: the source lost data the destination has (decision D-16)"
    )


def test_handler_reports_a_failed_partition_to_the_listener():
    handler, listener = handler_over(Partition())
    handler.on_failed(TP, "why")
    assert listener.failed == [(TP, "why")]


# -- appends -----------------------------------------------------------------------------------


def test_handler_holds_at_a_batch_of_a_newer_epoch_and_tells_the_listener():
    partition = Partition(end=10, leader_epoch=3, latest_epoch=3)
    handler, listener = handler_over(partition)
    result = handler.append(fetched(10, batch(10, 2, epoch=3) + batch(12, 2, epoch=5)))
    assert handler.replicas.appended == [(TP, [10])]  # the epoch-3 batch only
    assert (result.next_offset, result.last_epoch, result.hold) == (12, 3, True)
    assert listener.fencing == [(TP, 5)] and handler.fenced == {TP: 5}
    assert (handler.source[TP].batches_mirrored, handler.source[TP].bytes_mirrored) == (
        1,
        len(batch(10, 2, epoch=3)),
    )


def test_handler_append_of_nothing_new_keeps_the_local_epoch():
    partition = Partition(end=12, latest_epoch=2)
    handler, listener = handler_over(partition)
    result = handler.append(fetched(10, batch(10, 2)))  # all below the log end already
    assert handler.replicas.appended == [] and listener.fencing == []
    assert (result.next_offset, result.last_epoch, result.hold) == (12, 2, False)
    assert handler.source[TP].batches_mirrored == 0


def test_handler_empty_log_restarted_inside_a_batch_starts_where_the_batch_does():
    # DeleteRecords on the source moved its log start to 12, inside the batch 10-14; the
    # destination restarted its empty log at 12 (D-16) and the batch begins at 10.
    partition = Partition(end=12, start=12)
    handler, _ = handler_over(partition)
    handler.append(fetched(12, batch(10, 5)))
    assert partition.calls == [("restart_at", 10, NOW)]
    assert handler.replicas.appended == [(TP, [10])]


def test_handler_non_empty_log_is_not_restarted_for_a_batch_that_began_below_its_end():
    partition = Partition(end=12, start=0)
    handler, _ = handler_over(partition)
    handler.append(fetched(12, batch(10, 5)))
    assert partition.calls == []
    assert handler.replicas.appended == [(TP, [10])]


def test_handler_keeps_the_source_offsets_of_each_answer():
    handler, _ = handler_over(Partition())
    answer = PartitionResponse(high_watermark=40, last_stable_offset=38, log_start_offset=5)
    handler.on_fetched(TP, answer)
    s = handler.source[TP]
    assert (s.high_watermark, s.last_stable_offset, s.log_start_offset, s.last_fetch_ms) == (
        40,
        38,
        5,
        NOW,
    )


def test_handler_appends_as_the_mirror_with_the_rewritten_producer_ids():
    from kcore.log.producer_state import AppendOrigin
    from kcore.mirror.batches import prepare_mirrored_batches

    partition = Partition(end=10, leader_epoch=3, latest_epoch=1)
    handler, _ = handler_over(partition)
    b = RecordBatchBuilder(base_offset=10, partition_leader_epoch=2, producer_id=42)
    b.append(1_000, None, b"v")
    data = bytes(b.build())
    result = handler.append(fetched(10, data))
    kwargs = handler.replicas.kwargs
    assert kwargs["origin"] is AppendOrigin.MIRROR  # what the read-only guard lets in
    assert kwargs["now_ms"] == NOW
    assert kwargs["headers"] == prepare_mirrored_batches(memoryview(data), 10, 3).headers
    assert kwargs["headers"][0] is not None  # producer 42 is rewritten (D-17)
    assert (result.next_offset, result.last_epoch) == (11, 2)  # the appended batch's epoch


def test_handler_counts_what_it_mirrored_across_appends():
    partition = Partition(end=10)
    handler, _ = handler_over(partition)
    handler.append(fetched(10, batch(10, 2)))
    handler.append(fetched(12, batch(12, 3) + batch(15, 1)))
    s = handler.source[TP]
    assert s.batches_mirrored == 3
    assert s.bytes_mirrored == len(batch(10, 2)) + len(batch(12, 3)) + len(batch(15, 1))


def test_handler_refetch_names_the_local_latest_epoch():
    partition = Partition(end=10, latest_epoch=2)
    handler, _ = handler_over(partition)
    result = handler.append(fetched(30, batch(30, 1)))
    assert (result.next_offset, result.last_epoch, result.refetch) == (10, 2, True)


def test_handler_empty_log_at_the_batch_start_is_not_restarted():
    partition = Partition(end=12, start=12)
    handler, _ = handler_over(partition)
    handler.append(fetched(12, batch(12, 2)))
    assert partition.calls == [] and handler.replicas.appended == [(TP, [12])]
