"""The offset index (``<base offset>.index``): where in the ``.log`` an offset's batch starts."""

from __future__ import annotations

import struct
from bisect import bisect_right
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
    """An offset and the byte position in the segment's ``.log`` of the batch holding it
    (an index entry: the batch's last offset, as Kafka writes it)."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """A sparse map from offsets to byte positions in one segment's ``.log`` file.

    Byte layout: 8-byte big-endian entries, nothing else (no header, no checksum)::

        int32 relative offset   (the batch's last offset - base offset of the segment)
        int32 position          (byte position of the batch in the .log file)

    An entry names the *last* offset of the batch at its position, as Kafka's
    ``LogSegment`` writes it (``kafka-dump-log.sh --verify-index-only`` checks exactly that).
    A lookup takes the last entry at or below the target and scans batch headers forward, which
    is also correct for indexes that kcore wrote before it followed this rule (base offsets):
    those are read as they are.

    Entries are sparse: the segment adds one every ``index.interval.bytes`` (4 KiB) of appended
    data, so a full 10 MiB index (1,310,720 entries) covers about 5 GiB of log. Offsets strictly
    increase from entry to entry; positions increase with them.

    After a crash: the file may still be preallocated (zero-filled tail); ``sanity_check()``
    reports it and the log loader rebuilds the index from the ``.log`` after ``reset()``.

    Who may call it: the owning log segment and the log loader, under the partition log's lock
    (see ``kcore.log.index`` for the sizing and lookup machinery).
    """

    __slots__ = ("_last_offset",)

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
        # Runs on the append path (every index.interval.bytes): the checks read plain
        # attributes rather than properties, in the order and with the errors as before.
        if self._closed or not self._writable:
            self._require_writable("append")
        n = self._entries
        if n >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full index {self._path} ({n} entries)")
        relative = offset - self._base_offset
        if n and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {n} of {self._path}, "
                f"which is no larger than the last offset appended ({self._last_offset})"
            )
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self._base_offset} "
                f"in {self._path}"
            )
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} is not a non-negative int32")
        mm = self._mm
        if mm is not None and (n + 1) * 8 <= self._length:
            # The usual case, inline: a mapped, preallocated index (see _append_entry).
            self._ENTRY.pack_into(mm, n * 8, relative, position)
            self._entries = n + 1
            if self._cache_valid == n and self._cache_mv is not None and n < len(self._cache_mv):
                self._cache_mv[n] = relative
                self._cache_valid = n + 1
        else:
            self._append_entry(relative, (relative, position), skip_full_check=True)
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

    def lookup_position(self, target_offset: int) -> int:
        """``lookup(target_offset).position`` without building the pair (every fetch's first
        step; a read then starts at this byte of the ``.log``)."""
        key = target_offset - self._base_offset
        n = self._entries
        keys = self._cache_mv
        if keys is None or self._cache_valid < n:
            slot = self._largest_lower_bound_slot(key)  # builds the key cache first
        else:
            # _largest_lower_bound_slot, inline (one call less on every fetch).
            first_warm = n - self._WARM_ENTRIES
            if first_warm > 0 and keys[first_warm] <= key:
                slot = bisect_right(keys, key, first_warm, n) - 1
            else:
                slot = bisect_right(keys, key, 0, first_warm if first_warm > 0 else n) - 1
        if slot < 0:
            return 0
        return _INT32.unpack_from(self._mm, slot * 8 + 4)[0]  # type: ignore[arg-type]

    def position_at_or_below(self, position: int) -> int | None:
        """The largest indexed position that is <= ``position``, or None if there is none.

        Indexed positions are batch boundaries (an entry is the start of a batch), so a read
        may take every byte below the returned position as whole batches without reading
        their headers. A bisect on the mapping's position column (Kafka's
        ``lookup`` by position); no cache: a few struct reads, once per large read.
        """
        slot = self._bisect_field(_POSITION_FIELD_OFFSET, _INT32, position, right=True) - 1
        if slot < 0:
            return None
        return _INT32.unpack_from(self._mm, slot * 8 + 4)[0]  # type: ignore[arg-type]

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
        self._check_whole_entries("index")
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
