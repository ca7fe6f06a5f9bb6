"""The offset index (``<base offset>.index``): where in the ``.log`` an offset's batch starts."""

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

_INT32 = struct.Struct(">i")
_new_tuple = tuple.__new__
_POSITION_FIELD_OFFSET = 4


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the segment's ``.log`` of the batch holding it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """A sparse map from offsets to byte positions in one segment's ``.log`` file.

    Byte layout: 8-byte big-endian entries, nothing else (no header, no checksum)::

        int32 relative offset   (offset - base offset of the segment; 0 .. 2**31 - 1)
        int32 position          (byte position of the batch in the .log file)

    Entries are sparse: the segment adds one every ``index.interval.bytes`` (4 KiB) of appended
    data, so a full 10 MiB index (1,310,720 entries) covers about 5 GiB of log. Offsets strictly
    increase from entry to entry; positions increase with them.

    After a crash: the file may still be preallocated (zero-filled tail); ``sanity_check()``
    reports it and the log loader rebuilds the index from the ``.log`` after ``reset()``.

    Who may call it: the owning log segment and the log loader, under the partition log's lock
    (see ``kcore.log.index`` for the sizing and lookup machinery).
    """

    ENTRY_SIZE = 8
    _ENTRY = struct.Struct(">ii")
    DTYPE = np.dtype([("offset", ">i4"), ("position", ">i4")])
    _KEY_FIELD = "offset"
    _KEY_DTYPE = np.int32

    _last_offset: int

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when the index is empty."""
        return self._last_offset

    def _load_last_entry(self) -> None:
        if self._entries == 0:
            self._last_offset = self._base_offset
        else:
            self._last_offset = self._base_offset + self._raw_entry(self._entries - 1)[0]

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry with its absolute offset. Raises ``IndexError`` out of range."""
        relative, position = self._raw_entry(n)
        return OffsetPosition(self._base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        """Add an entry mapping ``offset`` to the byte ``position`` of its batch.

        Raises:
            IndexFullError: the index holds ``max_entries`` entries (roll the segment first).
            InvalidOffsetError: ``offset`` is not greater than ``last_offset``.
            IndexOffsetOverflowError: ``offset - base_offset`` does not fit an int32.
            ValueError: ``position`` is not a non-negative int32.
            LogError: the index was opened read-only.
        """
        self._require_writable("append")
        if self.is_full:
            raise IndexFullError(
                f"attempt to append to a full index {self._path} ({self._entries} entries)"
            )
        relative = offset - self._base_offset
        if self._entries and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {self._entries} of {self._path}, "
                f"which is no larger than the last offset appended ({self._last_offset})"
            )
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self._base_offset} "
                f"in {self._path}"
            )
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} is not a non-negative int32")
        self._append_entry(relative, (relative, position), skip_full_check=False)
        self._last_offset = offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The last entry whose offset is <= ``target_offset``.

        The caller reads the ``.log`` forward from the returned position to find the batch that
        holds ``target_offset``. When no entry qualifies (empty index, or the target is below
        the first entry), returns ``(base_offset, 0)``: start at the top of the segment.
        """
        slot = self._largest_lower_bound_slot(target_offset - self._base_offset)
        if slot < 0:
            return OffsetPosition(self._base_offset, 0)
        relative, position = self._ENTRY.unpack_from(self._mm, slot * 8)  # type: ignore[arg-type]
        # tuple.__new__ skips the NamedTuple constructor's Python frame: ~100 ns of a ~1.5 us call.
        return _new_tuple(OffsetPosition, (self._base_offset + relative, position))

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        """The offset of the first entry at or after byte ``start_position + fetch_size``.

        A fetch that reads ``fetch_size`` bytes from ``start_position`` ends before that offset;
        Kafka uses it to bound the search of the transaction index. None if no entry is there.
        """
        target = start_position + fetch_size
        slot = self._bisect_field(_POSITION_FIELD_OFFSET, _INT32, target, right=False)
        if slot >= self._entries:
            return None
        return self.entry(slot).offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (the log was truncated there)."""
        self._truncate_to_entries(self._count_keys_below(offset - self._base_offset))

    def sanity_check(self, full: bool = False) -> None:
        """Raise ``CorruptIndexError`` if the index cannot be trusted.

        The default checks are O(1), cheap enough for every segment at startup: the size is a
        whole number of entries, the last offset is not below the base offset, and the last two
        offsets increase -- the zero-filled tail a crash leaves in a preallocated index fails
        that last test. ``full=True`` also checks every entry (a vectorised pass over the file).
        """
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file {self._path} has size {self._length}, "
                f"not a multiple of the entry size {self.ENTRY_SIZE}"
            )
        n = self._entries
        if n and self._last_offset < self._base_offset:
            raise CorruptIndexError(
                f"corrupt index {self._path}: last offset {self._last_offset} is below "
                f"the base offset {self._base_offset}"
            )
        if n >= 2 and self.entry(n - 2).offset >= self._last_offset:
            raise CorruptIndexError(
                f"corrupt index {self._path}: offsets do not increase at its last entry "
                f"({self.entry(n - 2).offset} then {self._last_offset})"
            )
        if full and n:
            view = self._entries_view()
            offsets = view["offset"].astype(np.int64)
            positions = view["position"].astype(np.int64)
            if offsets[0] < 0 or positions[0] < 0:
                raise CorruptIndexError(f"corrupt index {self._path}: negative first entry")
            if np.any(np.diff(offsets) <= 0) or np.any(np.diff(positions) < 0):
                bad = int(np.argmax((np.diff(offsets) <= 0) | (np.diff(positions) < 0))) + 1
                raise CorruptIndexError(
                    f"corrupt index {self._path}: entry {bad} does not follow entry {bad - 1}"
                )
