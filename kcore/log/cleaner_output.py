"""The cleaner's output: cleaned segments written beside the originals, rebuilt and empty
batches, and the crash-safe swap of cleaned segments into the log.

A cleaned group of segments is written as ``<base>.log.cleaned`` (and its indexes), renamed to
``.swap`` — the commit point — and then takes the place of the segments it replaces.
:func:`complete_interrupted_swaps` finishes (or discards) what a crash interrupted; the log loader
calls it before it lists segments.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from crc32c import crc32c

from kcore.log import files
from kcore.log.file_records import FileRecords
from kcore.log.offset_index import OffsetIndex
from kcore.log.segment import LogSegment, SegmentConfig
from kcore.log.time_index import TimeIndex
from kcore.log.transaction_index import TransactionIndex
from kcore.record.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CONTROL_MASK,
    CRC_POS,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
    TimestampType,
)
from kcore.record.errors import CorruptRecordError
from kcore.record.records import Record, RecordBatchBuilder

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_WRITE_CHUNK_BYTES = 1 << 20  # cleaned batches are written in chunks of about this size
_INDEX_KINDS = (files.index_file, files.time_index_file, files.txn_index_file)
_SEGMENT_SUFFIXES = (
    files.LOG_FILE_SUFFIX,
    files.INDEX_FILE_SUFFIX,
    files.TIME_INDEX_FILE_SUFFIX,
    files.TXN_INDEX_FILE_SUFFIX,
)


# -- the cleaned segment ---------------------------------------------------------------------


class CleanedSegment:
    """The new segment of a group, written as ``<base>.*.cleaned`` files.

    Indexes are built as :meth:`LogSegment.recover` builds them: an offset index entry after
    every ``index.interval.bytes`` of batches, the time index following the largest timestamp.
    """

    def __init__(self, directory: Path, base_offset: int, config: SegmentConfig) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.config = config
        suffix = files.CLEANED_FILE_SUFFIX
        for kind in (files.log_file, *_INDEX_KINDS):  # a leftover of an interrupted clean
            kind(directory, base_offset, suffix).unlink(missing_ok=True)
        self.log = FileRecords(files.log_file(directory, base_offset, suffix))
        self.offset_index = OffsetIndex(
            files.index_file(directory, base_offset, suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.time_index = TimeIndex(
            files.time_index_file(directory, base_offset, suffix),
            base_offset,
            config.segment_index_bytes,
        )
        txn_path = files.txn_index_file(directory, base_offset, suffix)
        txn_path.touch()  # always present, so the swap replaces the old segment's txnindex
        self.txn_index = TransactionIndex(txn_path, base_offset)
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self._since_index_entry = 0
        self._pending: list = []
        self._pending_bytes = 0

    @property
    def position(self) -> int:
        return self.log.size + self._pending_bytes

    def append(self, data, last_offset: int, max_timestamp: int) -> None:
        """Add one cleaned batch; index entries follow the segment's rule (Kafka's: the
        batch's last offset, the max timestamp moved first; see ``LogSegment``)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self._since_index_entry > self.config.index_interval_bytes:
            if not self.offset_index.is_full:
                self.offset_index.append(last_offset, self.position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._since_index_entry = 0
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        self._since_index_entry += len(data)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= _WRITE_CHUNK_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._pending:
            self.log.append(Parts(self._pending, self._pending_bytes))
            self._pending, self._pending_bytes = [], 0

    def finish(self) -> None:
        """Write what is buffered, trim the indexes and make everything durable."""
        self._write_pending()
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.trim()
        self.time_index.trim()
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        for index in (self.offset_index, self.time_index, self.txn_index):
            fsync_file(index.path)
        files.fsync_dir(self.dir)

    def rename_indexes(self, suffix: str) -> None:
        base = self.base_offset
        self.offset_index.rename_to(files.index_file(self.dir, base, suffix))
        self.time_index.rename_to(files.time_index_file(self.dir, base, suffix))
        self.txn_index.rename_to(files.txn_index_file(self.dir, base, suffix))

    def rename_log(self, suffix: str) -> None:
        self.log.rename_to(files.log_file(self.dir, self.base_offset, suffix))

    def close(self) -> None:
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Drop the files (the clean failed before its commit point)."""
        self.log.close()
        self.log.path.unlink(missing_ok=True)
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()


class Parts:
    """Buffers written with one ``pwritev`` by :meth:`FileRecords.append`."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list, size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size


class RetiredSegment:
    """An old segment renamed ``.deleted``, queued in the partition log's pending deletions.

    ``LogSegment.delete`` would also remove the files under the segment's *current* names,
    which now belong to the cleaned segment; this removes only the ``.deleted`` files.
    """

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment

    def delete(self) -> None:
        seg = self.segment
        seg.log.close()
        seg.log.path.unlink(missing_ok=True)
        seg.offset_index.delete_if_exists()
        seg.time_index.delete_if_exists()
        seg.txn_index.delete_if_exists()


def fsync_file(path: Path) -> None:
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- batches ---------------------------------------------------------------------------------


def build_empty_batch(batch: RecordBatch) -> bytearray:
    """The header-only batch Kafka's cleaner keeps for producer state (``writeEmptyHeader``).

    Same base offset, last offset delta, leader epoch, producer id, epoch and base sequence,
    timestamp type, transactional and control bits and max timestamp as ``batch``; no
    compression, no delete horizon, base timestamp -1, record count 0.
    """
    h = batch.header()
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    out = bytearray(BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(
        out,
        0,
        h.base_offset,
        BATCH_OVERHEAD - LOG_OVERHEAD,
        h.partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        h.last_offset_delta,
        NO_TIMESTAMP,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        0,
    )
    _UINT32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


def rebuild_batch(batch: RecordBatch, records: list[Record], delete_horizon_ms: int | None):
    """``batch`` holding only ``records`` (Kafka's ``buildRetainedRecordsInto``).

    Keeps the base offset, the last offset delta, the codec, the timestamp type (and the
    append time), the producer fields, the transactional and control bits and the leader
    epoch; ``delete_horizon_ms`` (or None) becomes the base timestamp, as KIP-534 stores it.
    """
    h = batch.header()
    append_time = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    builder = RecordBatchBuilder(
        h.base_offset,
        compression=batch.compression_type,
        timestamp_type=batch.timestamp_type,
        log_append_time=h.max_timestamp if append_time else None,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        delete_horizon_ms=delete_horizon_ms,
    )
    for r in records:
        builder.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
    out = builder.build()
    if _INT32.unpack_from(out, LAST_OFFSET_DELTA_POS)[0] != h.last_offset_delta:
        # The last sequence of the batch is base sequence + last offset delta: keep it.
        _INT32.pack_into(out, LAST_OFFSET_DELTA_POS, h.last_offset_delta)
        _UINT32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


# -- recovery --------------------------------------------------------------------------------


def complete_interrupted_swaps(directory: Path | str) -> list[int]:
    """Finish or undo the swaps a crash interrupted in ``directory``; returns the bases swapped.

    Meant to run first thing in the log loader (before segments are listed): ``.cleaned``
    files are removed (their clean never committed); for every ``<B>.log.swap`` the old
    segments it covers (base offsets in ``(B, last offset in the swap]``) are deleted and the
    ``<B>.*.swap`` files take their final names. Any other ``.swap`` file is renamed too, as
    the loader does. ``.deleted`` files are left to the loader.
    """
    directory = Path(directory)
    swap = files.SWAP_FILE_SUFFIX
    names = os.listdir(directory)
    leftovers = [n for n in names if n.endswith((files.CLEANED_FILE_SUFFIX, swap))]
    if not leftovers:
        # The common case, every partition at every start: nothing was interrupted, and
        # nothing is renamed, so there is no directory entry to make durable (the fsync of
        # each directory was most of a broker's start with 10,000 partitions).
        return []
    for name in leftovers:
        if name.endswith(files.CLEANED_FILE_SUFFIX):
            log.info("%s: removing %s of an unfinished clean", directory.name, name)
            (directory / name).unlink(missing_ok=True)
    swapped = []
    log_swap = files.LOG_FILE_SUFFIX + swap
    for name in sorted(n for n in os.listdir(directory) if n.endswith(log_swap)):
        base = files.offset_from_file_name(name)
        last = last_offset_in(directory / name)
        for other in os.listdir(directory):
            if not other.endswith(_SEGMENT_SUFFIXES):
                continue
            try:
                offset = files.offset_from_file_name(other)
            except ValueError:
                continue
            if last is not None and base < offset <= last:
                log.info("%s: deleting %s, replaced by the cleaned %s", directory.name, other, name)
                (directory / other).unlink()
        for kind in _INDEX_KINDS:
            path = kind(directory, base, swap)
            if path.exists():
                os.replace(path, kind(directory, base))
        os.replace(directory / name, files.log_file(directory, base))
        swapped.append(base)
        log.info("%s: completed the interrupted swap of segment %d", directory.name, base)
    for name in os.listdir(directory):
        if name.endswith(swap):
            os.replace(directory / name, directory / name.removesuffix(swap))
    files.fsync_dir(directory)
    return swapped


def last_offset_in(path: Path) -> int | None:
    records = FileRecords(path, create=False)
    last = None
    try:
        for b in records.batches_from(0):
            last = b.last_offset
    except CorruptRecordError:
        pass  # a torn tail cannot hold a committed swap (it was fsynced first); keep the rest
    finally:
        records.close()
    return last
