"""Size-prefixed frames: the unit both directions of a Kafka connection are cut into.

:class:`FrameDecoder` is sans-IO (after h11): feed it whatever the socket returned with
``receive_data``, then take complete frames with ``next_frame`` until it returns ``None``. A size
prefix larger than ``max_frame_bytes`` (the broker's ``socket.request.max.bytes``, 100 MiB by
default) or below zero raises :class:`FrameTooLarge` / :class:`MalformedMessage` as soon as the
four prefix bytes are in, before any of the frame is buffered, so a client cannot make the broker
hold more than one maximal request per connection.
"""

from __future__ import annotations

import sys

import numpy as np

from kcore.protocol.primitives import INT32, FrameTooLarge, MalformedMessage

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes


# A frame at least this large is received straight into a buffer of its own size (see
# FrameDecoder.receive_buffer): a 1 MiB produce request or a 50 MiB mirror fetch response then
# costs the one copy the kernel makes, instead of three (socket -> bytes -> the decoder's
# buffer -> the frame). Below it, the shared buffer is cheaper than an allocation per frame.
LARGE_FRAME_BYTES = 64 * 1024
# Large frames' buffers are kept for reuse, this many per decoder and up to this size: a fresh
# buffer of megabytes is fresh pages, and faulting them in while the socket copies into them
# costs more than the copy. Three, because a mirror fetch response (16 MiB) may still be
# queued for its write (kcore/log/write_behind.py) while the next ones arrive.
_SPARE_BUFFERS = 3
_SPARE_MAX_BYTES = 32 * 1024 * 1024
# sys.getrefcount of a spare buffer nobody else holds, in _allocate's loop: the pool's list,
# the loop's variable and the call's argument.
_UNSHARED = 3


class FrameDecoder:
    """Cuts a byte stream into frames (without their 4-byte size prefixes).

    Two ways in, which may be mixed: ``receive_data(bytes)`` copies what the socket returned;
    or, while a large frame is being received, ``receive_buffer()`` is the part of that frame
    still missing, for the shell to ``recv_into`` directly, and ``advance(n)`` says how much of
    it the socket filled. Frames come out in order either way, as ``bytes`` (small ones) or
    as a ``memoryview`` of the buffer they were received into (large ones).
    """

    __slots__ = ("_buf", "_start", "_frame", "_filled", "_spares", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._start = 0  # consumed bytes at the front of _buf, dropped lazily
        self._frame: memoryview | None = None  # a large frame being received in place
        self._filled = 0  # how much of _frame is in
        self._spares: list[np.ndarray] = []  # buffers of earlier large frames (see _allocate)
        self.max_frame_bytes = max_frame_bytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer. An empty ``data`` means nothing (not EOF)."""
        frame = self._frame
        if frame is not None:
            n = min(len(frame) - self._filled, len(data))
            frame[self._filled : self._filled + n] = data[:n]
            self._filled += n
            if n == len(data):
                return
            data = memoryview(data)[n:]  # the frames after the large one
        if self._start and self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        self._buf += data

    def receive_buffer(self) -> memoryview | None:
        """Where the socket's next bytes should go, or ``None`` to use ``receive_data``.

        Not ``None`` only while a large frame is in progress (its prefix was seen by
        :meth:`next_frame`): the missing rest of that frame.
        """
        if self._frame is None or self._filled == len(self._frame):
            return None
        return self._frame[self._filled :]

    def advance(self, n: int) -> None:
        """``n`` bytes were written into the last :meth:`receive_buffer`."""
        if self._frame is None or not 0 <= n <= len(self._frame) - self._filled:
            raise ValueError(f"advance({n}) beyond the frame being received")
        self._filled += n

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame at EOF is an error)."""
        pending = len(self._buf) - self._start
        if self._frame is not None:
            pending += 4 + self._filled
        return pending

    def pending_frame_size(self) -> int | None:
        """The size of the frame being received, once its prefix is in (for read sizing)."""
        if self._frame is not None:
            return len(self._frame)
        if len(self._buf) - self._start < 4:
            return None
        return INT32.unpack_from(self._buf, self._start)[0]

    def next_frame(self) -> bytes | memoryview | None:
        """The next complete frame, or ``None`` until more data arrives."""
        frame = self._frame
        if frame is not None:
            if self._filled < len(frame):
                return None
            self._frame = None
            return frame
        buf, start = self._buf, self._start
        if len(buf) - start < 4:
            return None
        (size,) = INT32.unpack_from(buf, start)
        if size < 0:
            raise MalformedMessage(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame of {size} bytes exceeds socket.request.max.bytes ({self.max_frame_bytes})"
            )
        end = start + 4 + size
        if len(buf) < end:
            if size >= LARGE_FRAME_BYTES:
                # Receive the rest in place: move what is here into a buffer of the frame's
                # size (nothing follows it in _buf: the frame is incomplete). np.empty, not
                # bytearray(size): the socket overwrites every byte, and zeroing megabytes
                # first costs as much as receiving them.
                self._frame = frame = self._allocate(size)
                got = len(buf) - start - 4
                frame[:got] = memoryview(buf)[start + 4 :]
                self._filled = got
                buf.clear()
                self._start = 0
            return None
        with memoryview(buf) as view:
            frame = view[start + 4 : end].tobytes()
        if end == len(buf):
            buf.clear()
            self._start = 0
        elif end > 65536 and end * 2 > len(buf):
            # Drop the consumed front once it dominates, so memory tracks what is unread.
            del buf[:end]
            self._start = 0
        else:
            self._start = end
        return frame

    def _allocate(self, size: int) -> memoryview:
        """A buffer for a large frame: a spare one that no earlier frame's reader still holds
        (no memoryview of it is alive: a memoryview keeps its exporter referenced), else a
        new one, kept as a spare if it is not too large."""
        for spare in self._spares:
            if len(spare) >= size and sys.getrefcount(spare) == _UNSHARED:
                return memoryview(spare)[:size]
        buffer = np.empty(size, np.uint8)
        if size <= _SPARE_MAX_BYTES:
            if len(self._spares) >= _SPARE_BUFFERS:
                self._spares.pop(0)
            self._spares.append(buffer)
        return memoryview(buffer)


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its size."""
    return INT32.pack(len(payload)) + payload
