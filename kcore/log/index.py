"""The machinery shared by a segment's index files, above all the memory-mapped ones.

:class:`SegmentIndexFile` holds the file handling all three of a segment's indexes share (the
path, ``rename_to``, ``delete_if_exists``, use as a context manager); the transaction index, a
plain file of fixed-size entries rather than a mapping, derives from it directly.
:class:`AbstractIndex`, the base of the offset index and the time index, adds the mapping, the
sizing and the lookups described below.

Theory of operation
-------------------
An index file is an array of fixed-size big-endian entries, sorted by a *key* (the offset for the
``.index``, the timestamp for the ``.timeindex``). The file is memory-mapped; entry ``n`` lives at
byte ``n * ENTRY_SIZE``. The same bytes can be viewed as a numpy structured array (``DTYPE``) for
bulk work (building the lookup cache, the full sanity check).

Sizes. An index opened for append is preallocated to ``max_index_size`` (``segment.index.bytes``,
10 MiB by default, rounded down to a multiple of the entry size) so appends never grow the file
one entry at a time; ``trim()`` (when the segment rolls) and ``close()`` cut the file back to
``entries * ENTRY_SIZE``. Hence after a clean shutdown ``entries == file size // ENTRY_SIZE`` and
opening costs O(1): nothing is scanned. An existing file is mapped at its current size; the
first append beyond it grows it to ``max_index_size`` again.

Readahead. The preallocated part is a hole, and the first write into a hole through the mapping
faults the page in like a read: the kernel's fault-around readahead (``read_ahead_kb``, 8 MiB
on the development VM's disk) then allocates and zero-fills up to that much page cache, ~2 ms
of CPU (2.0-2.7 ms measured, up to 6 ms), on the event loop, twice per new segment (offset and
time index). ``_map`` therefore advises ``MADV_RANDOM`` for the part of a writable mapping past
the used entries: each new page then faults alone (~5 us for the first entry of a fresh index).
The used entries keep normal readahead, so a reopened index is still read sequentially.

After a crash. The file was still preallocated, so ``entries`` counts the zero-filled tail as
entries. The index carries no checksum: ``sanity_check()`` spots such a tail (the last two keys
do not increase, or the last key is below the base) and the caller -- the log loader -- then
calls ``reset()`` and rebuilds the index from the ``.log``, as Kafka does after an unclean
shutdown.

Lookups. ``np.searchsorted`` cannot be used on the big-endian mapping: numpy byte-swaps the whole
column into a temporary on every call (about 1,000 lookups/s on a full 10 MiB index). Instead the
keys are copied once, lazily, into a native-endian numpy array (one vectorised conversion, a few
ms for 1.3M entries, on the first lookup -- opening never scans) that appends keep current, and
``bisect`` runs over a ``memoryview`` of it: 0.3-0.75M random lookups/s on a full index, 1.4x
to 1.75x a ``bisect`` over a plain Python list of the same offsets (``bench/index_bench.py``;
the range is a shared 2-vCPU machine's noise), versus ~0.4M/s at best (micro-benchmark) for a
hand-written bisect over the mapping with ``struct``. As Kafka does, the last 8 KiB of entries
("warm" entries) are searched first: lookups cluster at the log end, and there it measured ~30%
faster (1.34M vs 1.04M/s), while lookups spread over the whole index stay within noise.

Who may call it: the owning log segment (and the log loader that opens and rebuilds segments),
under the partition log's lock. An index is not thread-safe by itself; concurrent readers and a
``resize()``/``close()`` must be serialised by the caller.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar, Self

import numpy as np

from kcore.log.errors import CorruptIndexError, IndexFullError, LogError

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
"""Kafka's default ``segment.index.bytes`` (10 MiB)."""

INT32_MAX = 2**31 - 1

# Absent on platforms without madvise (the advice is an optimisation only).
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)

# Kafka's warm section: the last 8 KiB of entries (1,024 offset-index entries), searched first.
_WARM_BYTES = 8192


def round_down(value: int, multiple: int) -> int:
    """The largest multiple of ``multiple`` that is <= ``value`` (for non-negative values)."""
    return value - value % multiple


class SegmentIndexFile:
    """A file of fixed-size entries owned by one log segment: the file handling its indexes share.

    Holds the path and the operations that only move or remove the file; how it is opened,
    written, flushed and closed is the subclass's (a mapping for :class:`AbstractIndex`, a
    descriptor for ``TransactionIndex``). Subclasses implement ``close()`` and ``_release()``.
    Who may call it: as each subclass says (the owning segment, under the partition log's lock).
    """

    __slots__ = ("_path",)

    _path: Path

    @property
    def path(self) -> Path:
        """The index file (changes on ``rename_to``)."""
        return self._path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give up the file cleanly (subclasses say how). Idempotent."""
        raise NotImplementedError

    def _release(self) -> None:
        """Give up the file before it is deleted: no trimming, no flushing (see subclasses)."""
        raise NotImplementedError

    def delete_if_exists(self) -> bool:
        """Release the file (unmap or close it) and delete it; True if a file was deleted."""
        self._release()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file if it exists (e.g. to add ``.deleted`` or drop ``.swap``).

        The index goes on working under the new name: a mapping stays valid, and a file not
        created yet (an empty transaction index) is created there by the first append.
        """
        new_path = Path(new_path)
        try:
            if self._path.exists():
                os.replace(self._path, new_path)
        finally:
            self._path = new_path


class AbstractIndex(SegmentIndexFile):
    """A memory-mapped file of fixed-size big-endian entries sorted by a key.

    Subclasses describe their entry with ``ENTRY_SIZE``, ``_ENTRY`` (a ``struct.Struct``),
    ``DTYPE`` (the same layout as a numpy structured dtype), ``_KEY_FIELD`` (the field lookups
    search) and ``_KEY_DTYPE`` (its native-endian numpy type), and implement
    ``_load_last_entry()`` and ``sanity_check()``. See the module docstring for the byte layout
    rules, what a crash leaves behind, and who may call it.
    """

    # Slots: see FileRecords (every lookup reads several of these on a cold segment).
    __slots__ = (
        "_base_offset",
        "_writable",
        "_max_index_size",
        "_max_entries",
        "_mm",
        "_length",
        "_closed",
        "_cache",
        "_cache_mv",
        "_cache_valid",
        "_entries",
    )

    ENTRY_SIZE: ClassVar[int]
    _WARM_ENTRIES: ClassVar[int]  # 8192 // ENTRY_SIZE unless set, by __init_subclass__
    _ENTRY: ClassVar[struct.Struct]
    DTYPE: ClassVar[np.dtype]
    _KEY_FIELD: ClassVar[str]
    _KEY_DTYPE: ClassVar[type[np.integer]]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "_WARM_ENTRIES" not in cls.__dict__:  # a subclass may set its own (the benchmark)
            cls._WARM_ENTRIES = _WARM_BYTES // cls.ENTRY_SIZE
        cls._check_entry_layout()

    @classmethod
    def _check_entry_layout(cls) -> None:
        """The entry is declared twice (``_ENTRY`` writes it, ``DTYPE`` reads it in bulk): refuse
        the class if the two ever disagree on size, order or width of the fields, rather than
        let lookups read entries other than the ones appended."""
        names = cls.DTYPE.names or ()
        probe = tuple(i + 1 for i in range(len(names)))
        if not (cls._ENTRY.size == cls.DTYPE.itemsize == cls.ENTRY_SIZE):
            raise TypeError(
                f"{cls.__name__}: ENTRY_SIZE {cls.ENTRY_SIZE}, _ENTRY {cls._ENTRY.size} bytes and "
                f"DTYPE {cls.DTYPE.itemsize} bytes must agree"
            )
        read = np.frombuffer(cls._ENTRY.pack(*probe), dtype=cls.DTYPE)[0]
        # Entries are packed key first (``pack_into(..., key, value)``): the key field leads.
        if tuple(int(read[name]) for name in names) != probe or names[:1] != (cls._KEY_FIELD,):
            raise TypeError(f"{cls.__name__}: _ENTRY {cls._ENTRY.format!r} and DTYPE disagree")

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        writable: bool = True,
    ) -> None:
        """Open (or, when ``writable``, create) the index at ``path``.

        Args:
            path: the index file.
            base_offset: the base offset of the owning segment; entries store offsets relative
                to it.
            max_index_size: ``segment.index.bytes``; rounded down to a multiple of the entry
                size. The index is full once it holds that many bytes of entries.
            writable: open for append. A missing or empty file is created and preallocated to
                ``max_index_size``; an existing one is mapped as it is (its entry count is its
                size divided by the entry size -- no scan). A read-only index requires the file.

        Raises:
            ValueError: ``max_index_size`` smaller than one entry.
            FileNotFoundError: a read-only index whose file does not exist.
        """
        if max_index_size < self.ENTRY_SIZE:
            raise ValueError(f"max_index_size {max_index_size} is smaller than one entry")
        self._path = Path(path)
        self._base_offset = base_offset
        self._writable = writable
        self._max_index_size = round_down(max_index_size, self.ENTRY_SIZE)
        # Read on every append (is_full): a plain attribute, not a division per call.
        self._max_entries = self._max_index_size // self.ENTRY_SIZE
        self._mm: mmap.mmap | None = None
        self._length = 0  # bytes currently mapped (= file size as last set by us)
        self._closed = False
        # Native-endian copy of the key column, valid for entries [0, _cache_valid).
        self._cache: np.ndarray | None = None
        self._cache_mv: memoryview | None = None
        self._cache_valid = 0

        if writable:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                length = os.fstat(fd).st_size
                if length == 0:
                    # A new index: preallocate (sparse) so appends never grow the file.
                    os.ftruncate(fd, self._max_index_size)
            finally:
                os.close(fd)
        else:
            length = os.stat(self._path).st_size
        # Entries are counted from the size before any preallocation: an existing file holds
        # exactly its used entries after a clean shutdown, because close() trimmed it.
        self._entries = length // self.ENTRY_SIZE
        target = self._max_index_size if writable and length == 0 else length
        if self._entries:
            self._map(target)
        else:
            # An empty index is mapped on its first append: a broker with thousands of fresh
            # partitions keeps one descriptor per partition open instead of three.
            self._length = target
        self._load_last_entry()

    # -- properties -------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        """The base offset of the owning segment."""
        return self._base_offset

    @property
    def entries(self) -> int:
        """The number of entries in the index."""
        return self._entries

    @property
    def max_index_size(self) -> int:
        """``segment.index.bytes`` rounded down to a multiple of the entry size."""
        return self._max_index_size

    @property
    def max_entries(self) -> int:
        """How many entries the index may hold before the segment must roll."""
        return self._max_entries

    @property
    def is_full(self) -> bool:
        """True when no further entry may be appended (the segment must roll)."""
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """The bytes used by entries (the file size after ``trim()``)."""
        return self._entries * self.ENTRY_SIZE

    @property
    def length(self) -> int:
        """The current size of the file, preallocation included."""
        return self._length

    @property
    def writable(self) -> bool:
        """Whether the index was opened for append."""
        return self._writable

    def __len__(self) -> int:
        return self._entries

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, length={self._length})"
        )

    # -- mapping ----------------------------------------------------------------------------

    def _map(self, length: int) -> None:
        """Map the first ``length`` bytes of the file (nothing when ``length`` is 0).

        The descriptor is closed right away: ``mmap`` keeps its own duplicate, so an index costs
        one descriptor, not two.
        """
        self._length = length
        if length == 0:
            self._mm = None  # mmap cannot map zero bytes
            return
        flags = os.O_RDWR if self._writable else os.O_RDONLY
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        fd = os.open(self._path, flags)
        try:
            self._mm = mmap.mmap(fd, length, access=access)
        finally:
            os.close(fd)
        if self._writable and _MADV_RANDOM is not None:
            # No readahead into the preallocated hole (see "Readahead" in the module docstring).
            start = round_down(self._entries * self.ENTRY_SIZE, mmap.PAGESIZE)
            if start < length:
                self._mm.madvise(_MADV_RANDOM, start, length - start)

    def _unmap(self) -> None:
        if self._mm is not None:
            # Fails with BufferError if a numpy view of the mapping escaped; none is kept.
            self._mm.close()
            self._mm = None

    def _require_writable(self, action: str) -> None:
        if self._closed:
            raise ValueError(f"{action}: {self._path} is closed")
        if not self._writable:
            raise LogError(f"{action}: {self._path} was opened read-only")

    def resize(self, new_size: int) -> bool:
        """Set the file size to ``new_size`` rounded down to a multiple of the entry size.

        Used to preallocate the active segment's index again after a restart and, through
        ``trim()``, to cut the preallocation. Returns False when the size did not change.

        Raises:
            ValueError: the new size cannot hold the current entries.
            LogError: the index is read-only.
        """
        self._require_writable("resize")
        rounded = round_down(new_size, self.ENTRY_SIZE)
        if rounded < self.size_in_bytes:
            raise ValueError(
                f"cannot resize {self._path} to {rounded} bytes: it holds {self._entries} entries"
            )
        if rounded == self._length:
            return False
        self._unmap()
        os.truncate(self._path, rounded)
        self._map(rounded)
        return True

    def trim(self) -> bool:
        """Cut the preallocation so the file holds exactly the entries (Kafka's
        ``trimToValidSize``); called when the segment rolls. Returns True if the size changed."""
        return self.resize(self.size_in_bytes)

    def flush(self) -> None:
        """Write the mapped pages to disk (msync)."""
        if self._mm is not None and self._writable:
            self._mm.flush()

    def close(self) -> None:
        """Trim (when writable) and unmap. Idempotent."""
        if self._closed:
            return
        if self._writable:
            self.trim()
        self._unmap()
        self._closed = True
        self._drop_cache()

    def close_handler(self) -> None:
        """Unmap without trimming (before the file is deleted). Idempotent."""
        self._unmap()
        self._closed = True
        self._drop_cache()

    def _release(self) -> None:
        # delete_if_exists: the file is going, so trimming it first would be wasted work.
        self.close_handler()

    # -- entries ----------------------------------------------------------------------------

    def _entries_view(self) -> np.ndarray:
        """A big-endian structured numpy view of the used entries (do not keep it: a live view
        pins the mapping and makes ``resize``/``close`` fail)."""
        if self._mm is None or self._entries == 0:
            return np.empty(0, dtype=self.DTYPE)
        return np.frombuffer(self._mm, dtype=self.DTYPE, count=self._entries)

    def _raw_entry(self, n: int) -> tuple[int, ...]:
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} out of range: {self._path} holds {self._entries}")
        return self._ENTRY.unpack_from(self._mm, n * self.ENTRY_SIZE)  # type: ignore[arg-type]

    def _append_entry(self, key: int, fields: tuple[int, ...], *, skip_full_check: bool) -> None:
        """Write ``fields`` as entry number ``entries``; the caller has checked the ordering."""
        n = self._entries
        if not skip_full_check and n >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full index {self._path} ({n} entries)")
        end = (n + 1) * self.ENTRY_SIZE
        if end > self._length:
            # Reopened (or trimmed) index: grow back to the preallocated size, or by one entry
            # when the caller appends past the limit on purpose (the time index on roll).
            self.resize(max(self._max_index_size, end))
        if self._mm is None:
            self._map(self._length)
        self._ENTRY.pack_into(self._mm, n * self.ENTRY_SIZE, *fields)  # type: ignore[arg-type]
        self._entries = n + 1
        # Keep the lookup cache current so the active segment never reconverts the column.
        if self._cache_valid == n and self._cache_mv is not None and n < len(self._cache_mv):
            self._cache_mv[n] = key
            self._cache_valid = n + 1

    def _truncate_to_entries(self, n: int) -> None:
        """Forget every entry from number ``n`` on (the bytes stay until overwritten)."""
        self._require_writable("truncate")
        if n < self._entries:
            self._entries = n
            self._cache_valid = min(self._cache_valid, n)
            self._load_last_entry()

    def truncate(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Remove every entry and preallocate again: the first step of rebuilding the index."""
        self.truncate()
        self.resize(self._max_index_size)

    # -- searching --------------------------------------------------------------------------

    def _drop_cache(self) -> None:
        self._cache_mv = None
        self._cache = None
        self._cache_valid = 0

    def _keys(self) -> memoryview:
        """The native-endian key column, valid for indices [0, entries)."""
        n = self._entries
        valid = self._cache_valid
        if valid < n or self._cache_mv is None:
            cache = self._cache
            if cache is None or len(cache) < n:
                # Room to grow by half on a writable index, so appends rarely reallocate.
                capacity = max(n + n // 2, 64) if self._writable else n
                grown = np.empty(capacity, dtype=self._KEY_DTYPE)
                if cache is not None:
                    grown[:valid] = cache[:valid]
                self._cache_mv = None
                self._cache = cache = grown
            cache[valid:n] = self._entries_view()[self._KEY_FIELD][valid:n]
            self._cache_mv = memoryview(cache)
            self._cache_valid = n
        return self._cache_mv  # type: ignore[return-value]

    def _largest_lower_bound_slot(self, key: int) -> int:
        """The number of the last entry whose key is <= ``key``, or -1 if there is none."""
        n = self._entries
        keys = self._cache_mv
        if keys is None or self._cache_valid < n:
            if self._closed:
                raise ValueError(f"lookup: {self._path} is closed")
            if n == 0:
                return -1
            keys = self._keys()
        # Warm entries first, as Kafka: most lookups (consumers and followers at the log end)
        # land in the last 8 KiB of entries, and a bisect over those few stays in the CPU cache.
        first_warm = n - self._WARM_ENTRIES
        if first_warm > 0:
            if keys[first_warm] <= key:
                return bisect.bisect_right(keys, key, first_warm, n) - 1
            return bisect.bisect_right(keys, key, 0, first_warm) - 1
        return bisect.bisect_right(keys, key, 0, n) - 1

    def _count_keys_below(self, key: int) -> int:
        """How many entries have a key < ``key``."""
        if self._entries == 0:
            return 0
        return bisect.bisect_left(self._keys(), key, 0, self._entries)

    def _bisect_field(self, field_offset: int, fmt: struct.Struct, target: int, right: bool) -> int:
        """Bisect a non-key field straight on the mapping (rare operations: no cache needed).

        ``field_offset`` is the field's byte offset inside an entry; the field must be sorted
        (non-decreasing) across entries. Returns the insertion point like ``bisect``.
        """
        mm, size = self._mm, self.ENTRY_SIZE

        def read(i: int) -> int:
            return fmt.unpack_from(mm, i * size + field_offset)[0]  # type: ignore[arg-type]

        search = bisect.bisect_right if right else bisect.bisect_left
        return search(range(self._entries), target, key=read)

    # -- subclass hooks ---------------------------------------------------------------------

    def _load_last_entry(self) -> None:
        """Refresh the cached last entry after open or truncation (O(1))."""
        raise NotImplementedError

    def sanity_check(self, full: bool = False) -> None:
        """Raise ``CorruptIndexError`` if the index is visibly corrupt (see subclasses)."""
        raise NotImplementedError

    def _check_whole_entries(self, kind: str) -> None:
        """The first check of ``sanity_check``: the file holds a whole number of entries.

        ``kind`` names the index in the error ("index", "time index").
        """
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{kind} file {self._path} has size {self._length}, "
                f"not a multiple of the entry size {self.ENTRY_SIZE}"
            )
