"""ListOffsets LATEST by who asks (Kafka's ``Partition.fetchOffsetForTimestamp``): a consumer
(replica id -1) sees the high watermark, or the last stable offset reading committed; any
other replica id — a follower, Kafka's debugging id -2 that kcore's admin API uses — sees the
log end offset."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kcore.replica.list_offsets import LATEST, fetch_offset_for_timestamp


def partition(leo: int, hw: int, lso: int):
    log = SimpleNamespace(log_end_offset=leo, high_watermark=hw, last_stable_offset=lso)
    return SimpleNamespace(log=log, leader_epoch=4)


@pytest.mark.parametrize(
    "replica_id,isolation,expected",
    [
        (-1, 0, 7),  # a consumer reading uncommitted: the high watermark
        (-1, 1, 5),  # a consumer reading committed: the last stable offset
        (-2, 0, 9),  # the debugging replica id: the log end offset, whatever the isolation
        (-2, 1, 9),
        (3, 0, 9),  # a follower
    ],
)
def test_latest_offset_is_bounded_by_who_asks(replica_id, isolation, expected):
    assert fetch_offset_for_timestamp(partition(9, 7, 5), LATEST, isolation, replica_id) == (
        expected,
        -1,
        4,
    )
