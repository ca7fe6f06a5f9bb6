"""The mirror fetcher's destination side (MirrorPartitionHandler) against a log that was cut
under it: a response to a fetch made from above the log end offset is never appended (the
offsets in between were never fetched: appending would leave a hole where the source has
records), and the fetcher is told to fetch again from the log end offset. The end-to-end
case is tests/mirror/test_mirroring_faults.py (a restarted destination whose partitions are
re-led while their fetchers run)."""

from __future__ import annotations

from types import SimpleNamespace

from kcore.mirror.fetcher import MirrorPartitionHandler
from kcore.record.records import RecordBatchBuilder
from kcore.replica.fetch_state import AppendRecords

TP = ("orders", 0)


class _Replicas:
    """The two calls the handler makes of the replica manager, over one partition."""

    def __init__(self, log_end_offset: int) -> None:
        self.partition = SimpleNamespace(
            log_end_offset=log_end_offset, log_start_offset=0, leader_epoch=0, latest_epoch=0
        )
        self.appended: list = []

    def partition_or_error(self, topic, index):
        return self.partition

    def append_as_follower(self, tp, batches, **kwargs):
        self.appended.append((tp, [b.base_offset for b in batches]))
        self.partition.log_end_offset = batches[-1].last_offset + 1


def _batch(base: int, count: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=base)
    for i in range(count):
        builder.append(1_000 + i, None, b"v%d" % i)
    return bytes(builder.build())


def _response(fetch_offset: int, records: bytes) -> AppendRecords:
    return AppendRecords(TP, fetch_offset, memoryview(records), 100, 100, 0)


def test_a_fetch_from_above_the_log_end_is_refetched_not_appended():
    replicas = _Replicas(log_end_offset=10)
    handler = MirrorPartitionHandler("dr", replicas, listener=None)
    result = handler.append(_response(30, _batch(30, 5)))  # the log was cut from 35 to 10
    assert replicas.appended == []
    assert result.refetch and result.next_offset == 10


def test_a_fetch_from_the_log_end_appends_even_across_a_sources_gap():
    # A compacted source has no records 10-29: the batch after the log end starts at 30, and
    # the copy keeps the same gap (same offsets as the source).
    replicas = _Replicas(log_end_offset=10)
    handler = MirrorPartitionHandler("dr", replicas, listener=None)
    result = handler.append(_response(10, _batch(30, 5)))
    assert replicas.appended == [(TP, [30])]
    assert not result.refetch and result.next_offset == 35


def test_a_fetch_from_below_the_log_end_appends_only_what_is_new():
    replicas = _Replicas(log_end_offset=12)
    handler = MirrorPartitionHandler("dr", replicas, listener=None)
    handler.append(_response(5, _batch(5, 5) + _batch(10, 5)))
    assert replicas.appended == [(TP, [10])]
