"""A log segment: one ``.log`` file and the three indexes that cover it.

Files, named by the segment's base offset (20 digits): ``<base>.log`` (batches,
:mod:`kcore.log.file_records`), ``<base>.index`` (offset → position, sparse),
``<base>.timeindex`` (timestamp → offset, sparse), ``<base>.txnindex`` (aborted transactions
whose markers are in this segment).

An index entry is added after every ``index.interval.bytes`` (4096) of appended data, so a lookup
reads at most a few headers forward from the indexed position. The time index records the
largest timestamp seen so far and the offset of the batch that carried it.

After a crash: the ``.log`` may end in a torn batch and the indexes may be stale or zero-filled
(they are preallocated and never fsynced before the log). :meth:`recover` rescans the ``.log``,
validating every batch's CRC, truncates at the first invalid byte, and rebuilds all indexes;
the partition log replays producer state and the leader-epoch cache from the batches it reports.

Who may call it: the owning partition log (and its loader and cleaner), under its lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kcore.log import files
from kcore.log.file_records import BatchPosition, FileRecords, FileSlice
from kcore.log.offset_index import OffsetIndex
from kcore.log.time_index import TimeIndex
from kcore.log.transaction_index import TransactionIndex
from kcore.record.batch import NO_TIMESTAMP, RecordBatch
from kcore.record.errors import CompressionError, CorruptRecordError

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """The settings a segment needs (Kafka's names: ``index.interval.bytes``, ...)."""

    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024


class LogSegment:
    """See the module docstring."""

    # Slots: see FileRecords (random lookups over ~1,000 segments miss the cache on each).
    __slots__ = (
        "dir",
        "base_offset",
        "config",
        "log",
        "offset_index",
        "time_index",
        "txn_index",
        "_bytes_since_last_index_entry",
        "max_timestamp",
        "offset_of_max_timestamp",
        "rolling_based_timestamp",
        "created_ms",
    )

    def __init__(
        self,
        directory: Path | str,
        base_offset: int,
        config: SegmentConfig = SegmentConfig(),
        *,
        created_ms: int = 0,
    ) -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.log = FileRecords(files.log_file(self.dir, base_offset))
        self.offset_index = OffsetIndex(
            files.index_file(self.dir, base_offset), base_offset, config.segment_index_bytes
        )
        self.time_index = TimeIndex(
            files.time_index_file(self.dir, base_offset), base_offset, config.segment_index_bytes
        )
        self.txn_index = TransactionIndex(files.txn_index_file(self.dir, base_offset), base_offset)
        self._bytes_since_last_index_entry = 0
        # The largest timestamp in the segment and the offset of the batch that carried it.
        last = self.time_index.last_entry
        self.max_timestamp = last.timestamp if self.time_index.entries else NO_TIMESTAMP
        self.offset_of_max_timestamp = last.offset if self.time_index.entries else -1
        # For segment.ms: the segment rolls this long after its first batch's timestamp.
        self.rolling_based_timestamp: int | None = None
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"LogSegment({self.log.path.name}, size={self.size})"

    @property
    def size(self) -> int:
        return self.log.size

    # -- appending -------------------------------------------------------------------------

    def append(
        self, largest_offset: int, data, batches: list[tuple[int, int, int]], behind=None
    ) -> int:
        """Append already-validated, offset-stamped batches; returns the position written at.

        ``batches`` lists ``(last_offset, relative_position, max_timestamp)`` of each batch in
        ``data``, in order. Index entries follow Kafka's rule per batch: an offset-index entry
        ``(last offset, position of the batch)`` and a time-index entry
        ``(max timestamp so far, last offset of the batch that carried it)`` once more than
        ``index.interval.bytes`` were appended since the last entry. ``behind`` (a
        ``WriteBehind``) writes the bytes from its thread (``FileRecords.append``).
        """
        if largest_offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        position = self.log.append(data, behind)
        if self.rolling_based_timestamp is None:
            largest_timestamp = max(b[2] for b in batches)
            if largest_timestamp >= 0:
                self.rolling_based_timestamp = largest_timestamp
        end = len(data)
        for i, (last_offset, rel, max_timestamp) in enumerate(batches):
            size = (batches[i + 1][1] if i + 1 < len(batches) else end) - rel
            self._index_batch(last_offset, position + rel, size, max_timestamp)
        return position

    def append_batch(self, head, tail, size: int, last_offset: int, max_timestamp: int) -> int:
        """Append one validated, offset-stamped batch given as its stamped first 16 bytes
        (``head``) and the rest (``tail``); returns the position written at.

        The same file bytes, index entries and errors as :meth:`append` with one batch: the
        partition log's single-batch path, without the lists.
        """
        if last_offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {last_offset} does not fit segment {self.base_offset}")
        position = self.log.append_two(head, tail, size)
        if self.rolling_based_timestamp is None and max_timestamp >= 0:
            self.rolling_based_timestamp = max_timestamp
        self._index_batch(last_offset, position, size, max_timestamp)
        return position

    def _index_batch(self, last_offset: int, position: int, size: int, max_timestamp: int) -> None:
        """Kafka's ``LogSegment`` bookkeeping for one batch written at ``position``.

        The max timestamp so far moves first, so a time-index entry added for this batch can
        name it. Entries hold the batch's *last* offset (Kafka's ``batch.lastOffset``), which is
        what ``kafka-dump-log.sh --verify-index-only`` checks against the batch at the indexed
        position. Segments written before kcore followed this rule hold base offsets; a lookup
        (the last entry <= target, then a forward scan) is correct for either, so such indexes
        are read as they are and not rebuilt.
        """
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        since = self._bytes_since_last_index_entry
        if since > self.config.index_interval_bytes:
            index = self.offset_index
            if last_offset > index.last_offset or index.entries == 0:
                index.append(last_offset, position)
            # maybe_append adds nothing unless the max timestamp grew (the partition log has
            # just checked that the time index is not full, so it would not raise either).
            if self.max_timestamp > self.time_index.last_entry.timestamp:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            since = 0
        self._bytes_since_last_index_entry = since + size

    @property
    def is_full(self) -> bool:
        # Read before every append: the indexes' is_full, inline (one call instead of three).
        offsets, times = self.offset_index, self.time_index
        return offsets._entries >= offsets._max_entries or times._entries >= times._max_entries

    # -- reading ---------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch at or after ``start_position`` whose last offset is >= ``offset``."""
        indexed = self.offset_index.lookup(offset)
        position = max(indexed.position, start_position)
        # A plain loop over batch_at rather than the batches_from generator: this is the hot
        # path of every fetch (the same headers are read, in the same order).
        batch_at = self.log.batch_at
        end = self.log.size
        while position < end:
            b = batch_at(position)
            if b is None:
                return None
            if b.last_offset >= offset:
                return b
            position += b.size
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_batch: bool = False,
    ) -> tuple[FileSlice, BatchPosition] | None:
        """Batches from the one holding ``start_offset``, up to ``max_size`` bytes.

        Only whole batches are returned unless ``min_one_batch`` (a fetch must make progress):
        then the first batch is returned whole even when it is larger than ``max_size``.
        ``max_position`` bounds the read (the position of the high watermark or LSO).
        Returns the slice and the first batch's position, or None if there is nothing.
        """
        # translate_offset(start_offset), inline: this is every fetch's hot path.
        log = self.log
        batch_at = log.batch_at
        end = log.size
        position = self.offset_index.lookup_position(start_offset)
        while True:
            if position >= end:
                return None
            first = batch_at(position)
            if first is None:
                return None
            if first.last_offset >= start_offset:
                break
            position += first.size
        end_limit = end if max_position is None else max_position
        if first.position >= end_limit:
            return None
        # The first batch's header was just read: start from it rather than reading it again
        # (a lookup costs one header read, not two).
        length = first.size
        if length > max_size and not min_one_batch:
            return None
        position = first.position + length
        if max_size - length > self.config.index_interval_bytes:
            # A large read: jump to the last indexed batch boundary that still fits instead of
            # reading every header before it (the index holds one per index.interval.bytes;
            # 1 MiB of 16 KiB batches took 64 header reads, ~150 us). The batches in between
            # are whole and fit, so the slice is the one the walk below would have found.
            jump = self.offset_index.position_at_or_below(min(first.position + max_size, end_limit))
            if jump is not None and jump > position:
                length = jump - first.position
                position = jump
        while length < max_size and position < end_limit:
            b = batch_at(position)
            if b is None or length + b.size > max_size:
                break
            length += b.size
            position += b.size
        return FileSlice(log, first.position, length), first

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> int | None:
        """The first offset >= ``start_offset`` of a batch whose max timestamp is >= ``timestamp``."""
        entry = self.time_index.lookup(timestamp)
        indexed = self.offset_index.lookup(max(entry.offset, start_offset))
        for b in self.log.batches_from(indexed.position):
            if b.max_timestamp >= timestamp and b.last_offset >= start_offset:
                return max(b.base_offset, start_offset)
        return None

    def next_offset(self) -> int:
        """The offset after this segment's last batch (its base offset if empty)."""
        last = None
        position = self.offset_index.lookup(INT32_MAX + self.base_offset).position
        for b in self.log.batches_from(position):
            last = b
        return self.base_offset if last is None else last.last_offset + 1

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int):
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        Returns the index's search result, whose ``is_complete`` says no later segment can
        hold more (an entry's LSO reached the upper bound).
        """
        return self.txn_index.search_aborted(fetch_offset, upper_bound_offset)

    # -- truncation and recovery -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose base offset is >= ``offset``; returns the bytes removed.

        Offsets inside a batch cannot be cut: a batch that starts below ``offset`` stays whole.
        """
        b = self.translate_offset(offset)
        if b is None:
            return 0
        position = b.position if b.base_offset >= offset else b.position + b.size
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.log.truncate_to(position)
        self._recompute_max_timestamp()
        self._bytes_since_last_index_entry = 0
        return removed

    def _recompute_max_timestamp(self) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        if self.time_index.entries:
            last = self.time_index.last_entry
            self.max_timestamp, self.offset_of_max_timestamp = last.timestamp, last.offset
        start = self.offset_index.lookup(self.time_index.last_entry.offset).position
        for b in self.log.batches_from(start):
            if b.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = b.max_timestamp, b.last_offset

    def recover(
        self,
        on_batch: Callable[[RecordBatch], None] | None = None,
        *,
        reset_txn_index: bool = True,
    ) -> int:
        """Rescan the ``.log``: validate each batch, rebuild the indexes, cut a bad tail.

        ``on_batch`` sees every valid batch in order (producer state, the leader-epoch cache
        and, when ``reset_txn_index``, the transaction index are rebuilt from them by the
        caller). Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        if reset_txn_index:
            self.txn_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self._bytes_since_last_index_entry = 0
        valid_end = 0
        try:
            for position, batch in self.log.full_batches_from(0):
                batch.validate()
                if batch.base_offset < self.base_offset:
                    raise CorruptRecordError(
                        f"batch at {position} has offset {batch.base_offset} below the segment's "
                        f"base offset {self.base_offset}"
                    )
                self._index_batch(
                    batch.last_offset, position, batch.size_in_bytes, batch.max_timestamp
                )
                if on_batch is not None:
                    on_batch(batch)
                valid_end = position + batch.size_in_bytes
        except (CorruptRecordError, CompressionError) as e:
            log.warning("%s: invalid batch at byte %d: %s", self.log.path, valid_end, e)
        truncated = self.log.truncate_to(valid_end)
        if truncated:
            log.warning(
                "%s: truncated %d bytes of invalid or torn data after byte %d",
                self.log.path,
                truncated,
                valid_end,
            )
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        return truncated

    def sanity_check(self) -> None:
        """Raise if an index cannot be trusted (the loader then calls :meth:`recover`)."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    # -- lifecycle -------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """The segment rolled: trim the preallocated indexes to their entries."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.trim()
        self.time_index.trim()

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.log.close()

    def rename_for_deletion(self) -> None:
        """Mark the files ``.deleted``; :meth:`delete` removes them after file.delete.delay.ms."""
        for path in self._paths():
            if path.exists():
                os.rename(path, str(path) + files.DELETED_FILE_SUFFIX)

    def delete(self) -> None:
        self.close()
        for path in self._paths():
            for p in (path, Path(str(path) + files.DELETED_FILE_SUFFIX)):
                p.unlink(missing_ok=True)

    def _paths(self) -> list[Path]:
        return [
            files.log_file(self.dir, self.base_offset),
            files.index_file(self.dir, self.base_offset),
            files.time_index_file(self.dir, self.base_offset),
            files.txn_index_file(self.dir, self.base_offset),
        ]
