"""The ``.log`` file of a segment: appended batches, read back as headers or file slices.

Byte layout: record batches v2 back to back, exactly as received and stamped (see
``kcore/record/batch.py``); nothing else — no file header, no padding. Batch *i* starts where
batch *i - 1* ends; the offset index maps offsets to these positions.

Writes are plain ``pwrite`` calls at the end of the file (the size is tracked here, so a
truncation followed by a write lands exactly where it should, which ``O_APPEND`` would not
guarantee after ``ftruncate``). Nothing is fsynced unless :meth:`flush` is called: like Kafka,
kcore relies on the page cache and on replication, and the log loader truncates a torn tail
after a crash. An append may be written *behind* (``append(data, behind=...)``, the cluster
mirror's): :attr:`size` moves at once and a worker thread writes the bytes; :attr:`written`
is how far the file really is, and every other operation settles the range it needs first
(``kcore/log/write_behind.py`` has the rules).

Reads never copy record data into Python objects on the hot path: :meth:`slice` returns a
:class:`FileSlice` the server sends with ``os.sendfile``; only batch headers are read with
``pread`` (61 bytes each) to find positions.

Who may call it: the owning :class:`~kcore.log.segment.LogSegment`, under the partition log's
lock; :class:`FileSlice` objects may be read or sent by the server afterwards (the file stays
open until the segment's deferred deletion, ``file.delete.delay.ms``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kcore.log.write_behind import WriteBehind, write_all
from kcore.record.batch import BATCH_HEADER, BATCH_OVERHEAD, LOG_OVERHEAD, RecordBatch
from kcore.record.errors import CorruptRecordError

# base offset, batch length, partition leader epoch, magic: the first 17 bytes of any batch.
_PREFIX = struct.Struct(">qiib")
HEADER_SIZE = BATCH_HEADER.size  # 61
# Recovery and scans read the file in chunks of this size (whole batches are re-read when a
# batch straddles a chunk boundary).
SCAN_CHUNK_BYTES = 1 << 20
# The header fields batch_at needs, the others skipped (layout in kcore/record/batch.py): base
# offset, batch length, partition leader epoch, magic, (crc, attributes), last offset delta,
# (base timestamp), max timestamp.
_POSITION_FIELDS = struct.Struct(">qiib6xi8xq")
_new_tuple = tuple.__new__


class BatchPosition(NamedTuple):
    """Where a batch lies in the file, with the header fields lookups need.

    A named tuple: one is built per header read on every fetch, and a tuple is the cheapest
    object Python builds."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    max_timestamp: int


@dataclass(slots=True)  # not frozen: a frozen dataclass is several times slower to build
class FileSlice:
    """``length`` bytes of a segment file from ``position``: send it, or read it."""

    records: FileRecords
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.records.fd

    def read(self) -> bytes:
        """The bytes (a copy; the server prefers ``os.sendfile(sock, fileno(), position, n)``)."""
        return self.records.pread(self.position, self.length)


class FileRecords:
    """An open ``.log`` file (see the module docstring)."""

    # Slots: a lookup touches this object for every segment it lands in; a slotted object is
    # one compact block instead of an object plus its attribute values (fewer cache misses).
    __slots__ = ("path", "fd", "size", "written", "write_error", "_behind")

    def __init__(self, path: Path | str, *, create: bool = True) -> None:
        self.path = Path(path)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self.fd = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.written = self.size  # below size while appends written behind are queued
        self.write_error: OSError | None = None
        self._behind: WriteBehind | None = None

    def settle(self, end: int | None = None) -> None:
        """Wait until the file holds its bytes up to ``end`` (default: all of them), if
        appends written behind are still queued; raises the OSError of one that failed."""
        if self._behind is not None and (
            self.written < (self.size if end is None else end) or self.write_error is not None
        ):
            self._behind.settle(self, self.size if end is None else end)

    # -- writing ---------------------------------------------------------------------------

    def append(self, data, behind: WriteBehind | None = None) -> int:
        """Write ``data`` at the end; returns the position it starts at.

        ``data`` is a bytes-like object, or an object with ``parts`` (a list of bytes-likes)
        written with one ``pwritev`` so that the parts are never joined in memory. With
        ``behind``, the write is queued there and the size moves now (the caller keeps the
        buffers unchanged); a write error surfaces from the next operation that settles.
        """
        position = self.size
        parts = list(data.parts) if hasattr(data, "parts") else [data]
        if behind is not None:
            if self.write_error is not None:
                raise self.write_error
            self.size = position + sum(len(p) for p in parts)
            self._behind = behind
            behind.submit(self, parts, position, self.size)
            return position
        self.settle()
        self.size = self.written = write_all(self.fd, parts, position)
        return position

    def append_two(self, head, tail, size: int) -> int:
        """Write ``head`` then ``tail`` (``size`` bytes in all) at the end with one ``pwritev``;
        returns the position they start at.

        The single-batch append path: ``head`` is the batch's first 16 bytes as stamped (base
        offset, length, leader epoch), ``tail`` the rest of the client's batch, never copied.
        The same bytes and errors as :meth:`append` of the two parts, in one call less.
        """
        if self._behind is not None:
            self.settle()
        position = self.size
        written = os.pwritev(self.fd, (head, tail), position)
        if written != size:  # a short write (rare): finish it the general way
            rest = (
                (memoryview(head)[written:], tail)
                if written < len(head)
                else (memoryview(tail)[written - len(head) :],)
            )
            write_all(self.fd, list(rest), position + written)
        self.size = self.written = position + size
        return position

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        if size > self.size or size < 0:
            raise ValueError(f"cannot truncate {self.path} of {self.size} bytes to {size}")
        self.settle()
        removed = self.size - size
        if removed:
            os.ftruncate(self.fd, size)
            self.size = self.written = size
        return removed

    def flush(self) -> None:
        self.settle()
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.settle()
            finally:  # a failed write is raised, and the descriptor closed all the same
                os.close(self.fd)
                self.fd = -1

    def rename_to(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path

    def duplicate(self) -> FileRecords:
        """A second handle on this file, with its size as now, for a reader in another thread
        (the log cleaner's rounds): its descriptor is a ``dup``, so it stays valid when this
        one is closed, renamed or deleted. Read only; the caller closes it."""
        self.settle()
        other = object.__new__(FileRecords)
        other.path, other.size, other.written = self.path, self.size, self.size
        other.write_error, other._behind = None, None
        other.fd = os.dup(self.fd)
        return other

    # -- reading ---------------------------------------------------------------------------

    def pread(self, position: int, length: int) -> bytes:
        if self.written < position + length:
            self.settle(position + length)
        data = os.pread(self.fd, length, position)
        if len(data) != length:
            raise CorruptRecordError(
                f"{self.path}: read of {length} bytes at {position} returned {len(data)}"
            )
        return data

    def slice(self, position: int, length: int) -> FileSlice:
        if self.written < position + length:
            self.settle(position + length)  # the server sends it from the file
        return FileSlice(self, position, length)

    def batch_at(self, position: int) -> BatchPosition | None:
        """The header of the batch at ``position``, or None at (or past) the end of the data."""
        if position + HEADER_SIZE > self.size:
            if position < self.size:
                raise CorruptRecordError(f"{self.path}: partial batch header at {position}")
            return None
        if self.written < position + HEADER_SIZE:
            self.settle(position + HEADER_SIZE)
        base, length, epoch, magic, delta, max_timestamp = _POSITION_FIELDS.unpack_from(
            os.pread(self.fd, HEADER_SIZE, position)
        )
        if magic != 2 or length < BATCH_OVERHEAD - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{self.path}: bad batch header at {position} (magic {magic}, length {length})"
            )
        size = length + LOG_OVERHEAD
        if position + size > self.size:
            raise CorruptRecordError(f"{self.path}: batch at {position} runs past the end")
        # tuple.__new__: the NamedTuple constructor is a Python-level function (~0.3 us here).
        return _new_tuple(BatchPosition, (position, size, base, base + delta, epoch, max_timestamp))

    def batches_from(self, position: int = 0, end: int | None = None) -> Iterator[BatchPosition]:
        """Batch headers from ``position`` to ``end`` (default: the end of the file)."""
        end = self.size if end is None else end
        while position < end:
            b = self.batch_at(position)
            if b is None:
                return
            yield b
            position += b.size

    def full_batches_from(self, position: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """Whole batches (as views over chunk copies) from ``position``, for scans and recovery.

        Stops at the first bytes that are not a complete batch; the caller compares the
        position reached with :attr:`size` to see whether a torn tail is left.
        """
        self.settle()
        while position < self.size:
            chunk = os.pread(self.fd, max(SCAN_CHUNK_BYTES, HEADER_SIZE), position)
            view = memoryview(chunk)
            offset = 0
            while offset + LOG_OVERHEAD <= len(view):
                (length,) = struct.unpack_from(">i", view, offset + 8)
                size = length + LOG_OVERHEAD
                if length < BATCH_OVERHEAD - LOG_OVERHEAD:
                    return  # garbage length: the caller truncates here
                if offset + size > len(view):
                    if offset == 0:  # one batch larger than the chunk: read it whole
                        if position + size > self.size:
                            return  # a torn batch, or a corrupt length: never allocate it
                        whole = os.pread(self.fd, size, position)
                        if len(whole) < size:
                            return
                        view = memoryview(whole)
                    else:
                        break
                yield position + offset, RecordBatch(view[offset : offset + size])
                offset += size
            if offset == 0:
                return
            position += offset
