"""The time index (``<base offset>.timeindex``): from a timestamp to the offset to read from."""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from kcore.log.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from kcore.log.index import INT32_MAX, AbstractIndex

NO_TIMESTAMP = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``: the timestamp of the empty index's last entry."""

_INT32 = struct.Struct(">i")
_OFFSET_FIELD_OFFSET = 8


class TimestampOffset(NamedTuple):
    """A timestamp (ms) and an offset: every record later than ``timestamp`` is at >= ``offset``."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """A sparse map from timestamps to offsets for one segment (ListOffsets by time, retention).

    Byte layout: 12-byte big-endian entries, nothing else::

        int64 timestamp         (ms; strictly increasing from entry to entry)
        int32 relative offset   (offset - base offset; non-decreasing)

    Entry (T, O) means every record of the segment with a timestamp greater than T is at an
    offset >= O. The segment appends (max timestamp so far, its offset) each time it adds an
    offset-index entry, and once more when it rolls; ``maybe_append`` drops entries whose
    timestamp does not grow, so the index stays sorted by timestamp.

    After a crash: as the offset index -- a zero-filled tail fails ``sanity_check()`` and the
    log loader rebuilds the index from the ``.log``.

    Who may call it: the owning log segment and the log loader, under the partition log's lock.
    """

    __slots__ = ("_last_entry",)

    ENTRY_SIZE = 12
    _ENTRY = struct.Struct(">qi")
    DTYPE = np.dtype([("timestamp", ">i8"), ("offset", ">i4")])
    _KEY_FIELD = "timestamp"
    _KEY_DTYPE = np.int64

    _last_entry: TimestampOffset

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` when the index is empty."""
        return self._last_entry

    def _load_last_entry(self) -> None:
        if self._entries == 0:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            self._last_entry = self.entry(self._entries - 1)

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry with its absolute offset. Raises ``IndexError`` out of range."""
        timestamp, relative = self._raw_entry(n)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` is greater than the last entry's.

        Returns True when an entry was written. An equal timestamp is ignored without error: the
        segment re-appends its last (max timestamp, offset) pair when it rolls or closes.

        Args:
            timestamp: the max timestamp seen so far in the segment (ms).
            offset: the offset of the record that carries it.
            skip_full_check: used by the segment on roll to write its final entry even into a
                full index (the file grows by one entry).

        Raises:
            IndexFullError: the index is full and ``skip_full_check`` is False.
            InvalidOffsetError: ``offset`` is below the last entry's offset, or ``timestamp`` is
                below the last entry's timestamp.
            IndexOffsetOverflowError: ``offset - base_offset`` does not fit an int32.
            LogError: the index was opened read-only.
        """
        if self._closed or not self._writable:
            self._require_writable("append")
        if not skip_full_check and self._entries >= self._max_entries:
            # Checked before the no-op case, as Kafka does: a full index is a signal to roll.
            raise IndexFullError(f"attempt to append to a full time index {self._path}")
        last = self._last_entry
        if self._entries and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {self._entries} of {self._path}, "
                f"which is smaller than the last offset appended ({last.offset})"
            )
        if self._entries and timestamp < last.timestamp:
            raise InvalidOffsetError(
                f"attempt to append timestamp {timestamp} to slot {self._entries} of "
                f"{self._path}, which is smaller than the last timestamp ({last.timestamp})"
            )
        if timestamp <= last.timestamp:
            return False
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self._base_offset} "
                f"in {self._path}"
            )
        self._append_entry(timestamp, (timestamp, relative), skip_full_check=skip_full_check)
        self._last_entry = TimestampOffset(timestamp, offset)
        return True

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The last entry whose timestamp is <= ``target_timestamp``.

        ``(NO_TIMESTAMP, base_offset)`` when there is none: the segment must be scanned from its
        first offset. (ListOffsets by time then reads the ``.log`` forward from the returned
        offset to the first record with a timestamp >= the target.)
        """
        slot = self._largest_lower_bound_slot(target_timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        timestamp, relative = self._ENTRY.unpack_from(self._mm, slot * 12)  # type: ignore[arg-type]
        return TimestampOffset(timestamp, self._base_offset + relative)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (the log was truncated there)."""
        relative = offset - self._base_offset
        self._truncate_to_entries(self._bisect_field(_OFFSET_FIELD_OFFSET, _INT32, relative, False))

    def sanity_check(self, full: bool = False) -> None:
        """Raise ``CorruptIndexError`` if the index cannot be trusted.

        O(1) by default: the size is a whole number of entries, the last timestamp is not below
        the first, the last offset is not below the base offset, and the last two timestamps
        increase (a crash's zero-filled tail fails this). ``full=True`` checks every entry.
        """
        self._check_whole_entries("time index")
        n = self._entries
        if n == 0:
            return
        last = self._last_entry
        if last.timestamp < self.entry(0).timestamp:
            raise CorruptIndexError(
                f"corrupt time index {self._path}: last timestamp {last.timestamp} is below "
                f"the first timestamp {self.entry(0).timestamp}"
            )
        if last.offset < self._base_offset:
            raise CorruptIndexError(
                f"corrupt time index {self._path}: last offset {last.offset} is below the "
                f"base offset {self._base_offset}"
            )
        if n >= 2 and self.entry(n - 2).timestamp >= last.timestamp:
            raise CorruptIndexError(
                f"corrupt time index {self._path}: timestamps do not increase at its last entry"
            )
        if full:
            view = self._entries_view()
            timestamps = view["timestamp"].astype(np.int64)
            offsets = view["offset"].astype(np.int64)
            if offsets[0] < 0 or np.any(np.diff(timestamps) <= 0) or np.any(np.diff(offsets) < 0):
                raise CorruptIndexError(f"corrupt time index {self._path}: entries are not sorted")
