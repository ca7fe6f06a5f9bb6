"""Appends written by a thread of their own, so the event loop goes on while the kernel copies.

Writing to the page cache is the largest cost of the mirror's copy: ``pwritev`` of fresh file
pages costs this machine about 1.2 ms of CPU per MB, more than receiving the bytes and checking
their CRCs together. The syscall releases the GIL, but the event loop's thread is held in it
all the same. A :class:`WriteBehind` takes such writes off it: the log's state (size, indexes,
log end offset) moves at once, on the event loop, and the bytes reach the file a moment later,
in order, from one worker thread.

Only appends whose loss in a crash costs nothing go this way: the cluster mirror's
(``AppendOrigin.MIRROR``), which the mirror fetches again, byte for byte at the same offsets,
from the destination's log end offset after a restart. A client's produce is acknowledged only
once its bytes are in the page cache, so it is written on the event loop as before.

What keeps the file consistent (:class:`~kcore.log.file_records.FileRecords` does it):

* every other operation on a file — a read of a range not yet written, a write that is not
  behind, truncation, flush, close, a duplicate for the cleaner — first :meth:`settle`\\ s the
  file up to where it needs it, waiting (briefly, on the caller's thread) for the worker;
* a segment is settled before it is rolled away from, so after a crash no segment but the
  last can be short of its data;
* a failed write is kept on the file and raised by the next operation that settles it;
  the writes queued after it for that file are dropped (they would leave a hole);
* at most ``max_pending_bytes`` wait in the queue: a submit beyond it waits for the worker
  (backpressure on the mirror's fetcher, rather than memory without bound).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Protocol

__all__ = ["WriteBehind", "write_all"]

_IOV_MAX = 1024  # buffers per pwritev call (Linux)
DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024


class BehindFile(Protocol):
    """What a file written behind carries (``FileRecords``)."""

    fd: int
    written: int  # bytes of the file known to be written
    write_error: OSError | None


def write_all(fd: int, parts: list, offset: int) -> int:
    """Write every byte of ``parts`` (bytes-likes) at ``offset`` with as few ``pwritev`` calls
    as it takes (at most IOV_MAX buffers each, short writes resumed); returns the end offset."""
    parts = [memoryview(p) for p in parts]
    while parts:
        written = os.pwritev(fd, parts[:_IOV_MAX], offset)
        offset += written
        while parts and written >= len(parts[0]):
            written -= len(parts[0])
            parts.pop(0)
        if written:
            parts[0] = parts[0][written:]
    return offset


class WriteBehind:
    """One worker thread performing queued appends in submission order (see the module
    docstring). Started on the first submit; a daemon, so an idle one never holds up exit."""

    def __init__(self, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        self.max_pending_bytes = max_pending_bytes
        self._cond = threading.Condition()
        self._queue: deque[tuple[BehindFile, list, int, int]] = deque()
        self._pending_bytes = 0
        self._thread: threading.Thread | None = None

    def submit(self, file: BehindFile, parts: list, position: int, end: int) -> None:
        """Queue ``parts`` to be written at ``position`` (``end - position`` bytes in all).
        The caller keeps the buffers unchanged until the file is settled past ``end``."""
        size = end - position
        with self._cond:
            while self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes:
                self._cond.wait()
            self._queue.append((file, parts, position, end))
            self._pending_bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kcore-write-behind", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def settle(self, file: BehindFile, end: int) -> None:
        """Wait until ``file`` is written up to ``end``; raise the write's error if one
        failed."""
        with self._cond:
            while file.written < end and file.write_error is None:
                self._cond.wait()
        if file.write_error is not None:
            raise file.write_error

    def _run(self) -> None:
        cond, queue = self._cond, self._queue
        while True:
            with cond:
                while not queue:
                    cond.wait()
                file, parts, position, end = queue[0]
            error = None
            if file.write_error is None:  # after a failure, later writes would leave a hole
                try:
                    write_all(file.fd, parts, position)
                except OSError as e:
                    error = e
            with cond:
                queue.popleft()
                self._pending_bytes -= end - position
                if error is not None:
                    file.write_error = error
                elif file.write_error is None:
                    file.written = end
                cond.notify_all()


_default: WriteBehind | None = None
_default_lock = threading.Lock()


def default_write_behind() -> WriteBehind:
    """The process's worker (one disk's worth of writes in order is what a broker needs)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = WriteBehind()
        return _default
