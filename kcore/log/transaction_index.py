"""The transaction index (``<base offset>.txnindex``): the aborted transactions of a segment."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kcore.log.errors import CorruptIndexError, InvalidOffsetError
from kcore.log.index import SegmentIndexFile

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_DTYPE = np.dtype(
    [
        ("version", ">i2"),
        ("producer_id", ">i8"),
        ("first_offset", ">i8"),
        ("last_offset", ">i8"),
        ("last_stable_offset", ">i8"),
    ]
)
assert _DTYPE.itemsize == ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, its offset range, and the LSO when it aborted.

    ``first_offset`` is the transaction's first offset (possibly in an earlier segment),
    ``last_offset`` the offset of its ABORT marker, ``last_stable_offset`` the partition's LSO
    right after the marker was written. A READ_COMMITTED fetch returns (producer id, first
    offset) for each aborted transaction overlapping the fetched range.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte on-disk entry (version 0)."""
        return _ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The aborted transactions found in one segment, and whether the search may stop there.

    ``is_complete`` is True when an entry's last stable offset reached the fetch's upper bound:
    no later segment can hold an aborted transaction overlapping the range.
    """

    aborted: list[AbortedTxn]
    is_complete: bool


def _decode_array(data: bytes, first_slot: int, source: object) -> np.ndarray:
    """The whole entries of ``data`` as a structured array; ``CorruptIndexError`` names the
    first entry (counting from ``first_slot``) with a version other than the current one."""
    array = np.frombuffer(data, dtype=_DTYPE, count=len(data) // ENTRY_SIZE)
    bad = np.flatnonzero(array["version"] != CURRENT_VERSION)
    if bad.size:
        slot = first_slot + int(bad[0])
        raise CorruptIndexError(
            f"unexpected aborted transaction version {int(array['version'][bad[0]])} in "
            f"entry {slot} of transaction index {source} (current version is "
            f"{CURRENT_VERSION})"
        )
    return array


def decode_aborted_txns(data: bytes, source: object = "transaction index") -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes, for readers that must not open the file
    for writing (``kcore dump-log`` on a running broker's files): a torn trailing entry is
    ignored, as opening the index would cut it. Raises ``CorruptIndexError`` for an entry
    with an unknown version; ``source`` names the file in the message."""
    return TransactionIndex._to_txns(_decode_array(data, 0, source))


class TransactionIndex(SegmentIndexFile):
    """The append-only list of transactions aborted by markers written in one segment.

    Byte layout: 34-byte big-endian entries, one per ABORT marker in the segment, in marker
    order (so ``last_offset`` strictly increases); not memory-mapped, no header::

        int16 version             (0)
        int64 producer id
        int64 first offset
        int64 last offset         (offset of the ABORT marker)
        int64 last stable offset

    The file is only created by the first ``append``: most segments hold no aborted
    transaction and have no ``.txnindex`` at all.

    After a crash: an append torn by the crash leaves a partial trailing entry; opening the index
    cuts the file back to a whole number of entries (the marker is in the ``.log``, and the log
    loader rebuilds this index for every segment after the recovery point anyway). A tail of
    zeros written by a crash fails ``sanity_check()``.

    Who may call it: the owning log segment, the log loader and the fetch path (which calls
    ``collect_aborted``), under the partition log's lock. The path, ``rename_to`` and
    ``delete_if_exists`` are :class:`~kcore.log.index.SegmentIndexFile`'s.
    """

    def __init__(self, path: str | os.PathLike[str], start_offset: int) -> None:
        """Open the index of the segment whose base offset is ``start_offset``.

        Reads only the last entry (O(1)). Raises ``CorruptIndexError`` if that entry has an
        unknown version.
        """
        self._path = Path(path)
        self._start_offset = start_offset
        self._fd: int | None = None
        self._size = 0
        self._last_offset: int | None = None
        if self._path.exists():
            self._open()
            torn = self._size % ENTRY_SIZE
            if torn:
                self._size -= torn
                os.ftruncate(self._fd, self._size)  # type: ignore[arg-type]
            if self._size:
                last = self._read_entries(self._size - ENTRY_SIZE, 1)
                self._last_offset = last[0].last_offset

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    # -- properties -------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The base offset of the owning segment."""
        return self._start_offset

    @property
    def last_offset(self) -> int | None:
        """The last offset (ABORT marker) of the last entry, None when empty."""
        return self._last_offset

    @property
    def entries(self) -> int:
        """The number of entries."""
        return self._size // ENTRY_SIZE

    def __len__(self) -> int:
        return self.entries

    def __repr__(self) -> str:
        return f"TransactionIndex(path={str(self._path)!r}, entries={self.entries})"

    # -- reading ----------------------------------------------------------------------------

    def _read_array(self, position: int = 0, count: int | None = None) -> np.ndarray:
        """Entries from byte ``position`` as a big-endian structured array (version-checked)."""
        if count is None:
            count = (self._size - position) // ENTRY_SIZE
        if count <= 0:
            return np.empty(0, dtype=_DTYPE)
        data = os.pread(self._open(), count * ENTRY_SIZE, position)
        return _decode_array(data, position // ENTRY_SIZE, self._path)

    @staticmethod
    def _to_txns(array: np.ndarray) -> list[AbortedTxn]:
        return [AbortedTxn(pid, first, last, lso) for _, pid, first, last, lso in array.tolist()]

    def _read_entries(self, position: int = 0, count: int | None = None) -> list[AbortedTxn]:
        return self._to_txns(self._read_array(position, count))

    def all_aborted(self) -> list[AbortedTxn]:
        """Every entry, in file order."""
        return self._read_entries()

    def search_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        As Kafka's ``TransactionIndex.collectAbortedTxns``: entries are taken in order while
        their last offset is >= ``fetch_offset`` and their first offset < ``upper_bound_offset``;
        the scan stops (``is_complete``) after the first entry whose last stable offset is >=
        ``upper_bound_offset`` -- every transaction overlapping the range aborted before it.
        """
        array = self._read_array()
        stops = np.flatnonzero(array["last_stable_offset"] >= upper_bound_offset)
        complete = bool(stops.size)
        if complete:
            array = array[: int(stops[0]) + 1]
        overlapping = (array["last_offset"] >= fetch_offset) & (
            array["first_offset"] < upper_bound_offset
        )
        return TxnIndexSearchResult(self._to_txns(array[overlapping]), complete)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        See ``search_aborted``, which also says whether later segments need searching.
        """
        return self.search_aborted(fetch_offset, upper_bound_offset).aborted

    # -- writing ----------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append an entry (creating the file on the first one).

        Raises ``InvalidOffsetError`` unless ``txn.last_offset`` is greater than the last entry's:
        markers are appended in offset order.
        """
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase, but {txn.last_offset} "
                f"is not greater than the current last offset {self._last_offset} of "
                f"{self._path}"
            )
        data = txn.to_bytes()
        fd = self._open()
        written = os.pwrite(fd, data, self._size)
        if written != ENTRY_SIZE:
            # A short write on a regular file means the disk is full: leave no partial entry.
            os.ftruncate(fd, self._size)
            raise OSError(f"short write to {self._path}: {written} of {ENTRY_SIZE} bytes")
        self._size += ENTRY_SIZE
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose last offset is >= ``offset`` (the log was truncated there)."""
        array = self._read_array()
        past = np.flatnonzero(array["last_offset"] >= offset)
        if not past.size:
            return
        keep = int(past[0])
        self._size = keep * ENTRY_SIZE
        os.ftruncate(self._fd, self._size)  # type: ignore[arg-type]
        self._last_offset = int(array["last_offset"][keep - 1]) if keep else None

    def reset(self) -> None:
        """Remove every entry (the file stays, empty)."""
        if self._fd is not None or self._path.exists():
            os.ftruncate(self._open(), 0)
        self._size = 0
        self._last_offset = None

    def sanity_check(self) -> None:
        """Raise ``CorruptIndexError`` if an entry cannot be right.

        Checks each entry's version, that its last offset is not below the segment's start
        offset (Kafka's check), that its first offset is not above its last, and that last
        offsets strictly increase. Reads the whole file: the index is small (one entry per
        aborted transaction).
        """
        array = self._read_array()
        if not array.size:
            return
        first = array["first_offset"].astype(np.int64)
        last = array["last_offset"].astype(np.int64)
        problems = (last < self._start_offset) | (first > last)
        problems[1:] |= np.diff(last) <= 0
        bad = np.flatnonzero(problems)
        if bad.size:
            slot = int(bad[0])
            raise CorruptIndexError(
                f"corrupt transaction index {self._path}: entry {slot} "
                f"{self._to_txns(array[slot : slot + 1])[0]} is out of order or below the "
                f"start offset {self._start_offset}"
            )

    # -- the file ---------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the file (if it exists)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file descriptor. Idempotent; a later append reopens the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _release(self) -> None:
        # delete_if_exists: close, and forget the entries along with the file.
        self.close()
        self._size = 0
        self._last_offset = None
