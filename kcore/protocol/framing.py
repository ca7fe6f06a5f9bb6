"""Size-prefixed frames: the unit both directions of a Kafka connection are cut into.

:class:`FrameDecoder` is sans-IO (after h11): feed it whatever the socket returned with
``receive_data``, then take complete frames with ``next_frame`` until it returns ``None``. A size
prefix larger than ``max_frame_bytes`` (the broker's ``socket.request.max.bytes``, 100 MiB by
default) or below zero raises :class:`FrameTooLarge` / :class:`MalformedMessage` as soon as the
four prefix bytes are in, before any of the frame is buffered, so a client cannot make the broker
hold more than one maximal request per connection.
"""

from __future__ import annotations

from kcore.protocol.primitives import INT32, FrameTooLarge, MalformedMessage

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes


class FrameDecoder:
    """Cuts a byte stream into frames (without their 4-byte size prefixes)."""

    __slots__ = ("_buf", "_start", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._start = 0  # consumed bytes at the front of _buf, dropped lazily
        self.max_frame_bytes = max_frame_bytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer. An empty ``data`` means nothing (not EOF)."""
        if self._start and self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame at EOF is an error)."""
        return len(self._buf) - self._start

    def pending_frame_size(self) -> int | None:
        """The size of the frame being received, once its prefix is in (for read sizing)."""
        if self.buffered < 4:
            return None
        return INT32.unpack_from(self._buf, self._start)[0]

    def next_frame(self) -> bytes | None:
        """The next complete frame, or ``None`` until more data arrives."""
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


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its size."""
    return INT32.pack(len(payload)) + payload
