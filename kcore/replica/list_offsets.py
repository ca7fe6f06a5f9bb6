"""ListOffsets on one partition: the special timestamps and the search by timestamp.

Pure: no I/O beyond the log's own reads. :meth:`kcore.replica.partition.Partition.
fetch_offset_for_timestamp` is the way in.
"""

from __future__ import annotations

from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import PartitionLog
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import RecordBatch

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
CONSUMER_REPLICA_ID = -1  # anything else (a follower, -2: the debugging id) sees up to the LEO


def _batch_at(plog: PartitionLog, offset: int) -> RecordBatch | None:
    info = plog.read(offset, 1, FetchIsolation.LOG_END)
    if not info.records:
        return None
    return RecordBatch(info.records[0].read())


def _first_record_at_or_after(plog: PartitionLog, timestamp: int, upper: int):
    """(offset, timestamp) of the first record with a timestamp >= ``timestamp`` below
    ``upper`` (Kafka answers with the exact record, not its batch)."""
    offset = plog.offset_for_timestamp(timestamp)
    while offset is not None and offset < upper:
        batch = _batch_at(plog, offset)
        if batch is None:
            return None
        for r in batch.records():
            if r.offset >= offset and r.timestamp >= timestamp and r.offset < upper:
                return r.offset, r.timestamp
        offset = batch.last_offset + 1
        if offset >= plog.log_end_offset:
            return None
    return None


def _max_timestamp_record(plog: PartitionLog) -> tuple[int, int] | None:
    ts, batch_offset = plog.max_timestamp_and_offset()
    if batch_offset < 0:
        return None
    batch = _batch_at(plog, batch_offset)
    if batch is None:
        return None
    for r in batch.records():
        if r.timestamp == ts:
            return r.offset, r.timestamp
    return batch.last_offset, ts


def fetch_offset_for_timestamp(
    partition, timestamp: int, isolation_level: int, replica_id: int
) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one ListOffsets query on a partition this node
    leads (Kafka's ``Partition.fetchOffsetForTimestamp``): a consumer (``replica_id`` -1) reading
    committed sees up to the LSO, one reading uncommitted up to the high watermark; any other
    replica id -- a follower, or Kafka's debugging id -2 (kcore's admin API asks so for the log
    end offset) -- up to the log end offset. Raises KafkaError INVALID_REQUEST for an unknown
    special timestamp."""
    plog = partition.log
    if replica_id != CONSUMER_REPLICA_ID:
        upper = plog.log_end_offset
    elif isolation_level == 1:
        upper = plog.last_stable_offset
    else:
        upper = plog.high_watermark
    if timestamp == LATEST:
        # The partition's leader epoch, as Kafka's Partition.fetchOffsetForTimestamp (its
        # becoming leader starts the epoch in the log's cache; kcore's logs learn an epoch at
        # its first append, so a leader elected since then is not in the cache yet).
        return upper, -1, partition.leader_epoch
    elif timestamp in (EARLIEST, EARLIEST_LOCAL):
        offset, ts = plog.log_start_offset, -1
    elif timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1  # no tiered storage: nothing is tiered
    elif timestamp == MAX_TIMESTAMP:
        found = _max_timestamp_record(plog)
        if found is None:
            return -1, -1, -1
        offset, ts = found
    elif timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    else:
        found = _first_record_at_or_after(plog, timestamp, upper)
        if found is None:
            return -1, -1, -1
        offset, ts = found
    epoch = plog.epoch_cache.epoch_for_offset(offset) if offset < plog.log_end_offset else None
    if epoch is None:
        epoch = plog.latest_epoch if plog.latest_epoch is not None else -1
    return offset, ts, epoch
