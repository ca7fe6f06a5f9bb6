"""Kafka's primitive wire types: readers and writers over memoryviews and bytearrays.

Theory of operation
-------------------
Every reader takes ``(buf, pos)`` — ``buf`` a ``memoryview`` over a whole frame, ``pos`` an index —
and returns ``(value, new_pos)``. Readers never trust a length read from the wire: a length is
checked against the bytes that remain *before* anything is sliced or allocated, so a hostile
frame cannot make us allocate more than the frame itself. Every failure is a
:class:`MalformedMessage`; callers add the correlation id when they know it.

Writers append to a ``bytearray``. The generated codec (``kcore.protocol.codegen``) inlines the
common cases (fixed-width fields merged into one ``struct`` call, one-byte varints) and calls
these functions for the rest, so they are the single definition of each encoding.

Encodings (Kafka protocol guide, "Protocol Primitive Types"):

* ``int8/16/32/64``, ``uint16/32``, ``float64``: big-endian, fixed width; ``bool``: one byte.
* ``varint``/``varlong``: zig-zag, then unsigned LEB128 (records and record headers use them).
* ``unsigned varint``: LEB128 without zig-zag (compact lengths, tag numbers, tag sizes).
* ``string``: int16 length then UTF-8; ``-1`` is null. ``compact string``: unsigned varint of
  length + 1 then UTF-8; ``0`` is null. ``bytes``/``compact bytes`` likewise with int32 /
  unsigned varint lengths.
* arrays: int32 count (``-1`` null) or compact: unsigned varint count + 1 (``0`` null).
* ``uuid``: 16 raw bytes.
"""

from __future__ import annotations

import struct
import uuid as _uuid

__all__ = [
    "FrameTooLarge",
    "MalformedMessage",
    "UnsupportedVersion",
    "ZERO_UUID",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "write_uvarint",
    "write_varint",
    "write_varlong",
    "uvarint_bytes",
    "varint_size",
    "zigzag_encode",
    "zigzag_decode",
]

ZERO_UUID = _uuid.UUID(int=0)


class MalformedMessage(ValueError):
    """Bytes that do not decode as the message they claim to be.

    ``correlation_id`` is set when the request header was readable, so a server can still answer
    the request with an error; ``None`` means the connection can only be closed.
    """

    #: The Kafka error code a server answers with when it can answer at all (INVALID_REQUEST).
    error_code = 42

    def __init__(self, message: str, correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


class UnsupportedVersion(MalformedMessage):
    """An API key or version this codec does not know (UNSUPPORTED_VERSION, 35)."""

    error_code = 35

    def __init__(
        self,
        message: str,
        correlation_id: int | None = None,
        *,
        api_key: int | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, correlation_id)
        self.api_key = api_key
        self.version = version


class FrameTooLarge(MalformedMessage):
    """A size prefix above ``socket.request.max.bytes``: refused before anything is buffered."""


# --- fixed width ------------------------------------------------------------------------------

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

# --- varints ----------------------------------------------------------------------------------

# A 32-bit varint takes at most 5 bytes, a 64-bit one at most 10; anything longer is garbage.
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def _read_leb128(buf, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise MalformedMessage("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise MalformedMessage(f"varint longer than {max_bytes} bytes")


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 32 bits."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:  # one byte: nearly every length and tag count
            return b, pos + 1
    value, pos = _read_leb128(buf, pos, _MAX_VARINT_BYTES)
    if value > 0xFFFFFFFF:
        raise MalformedMessage("unsigned varint out of range")
    return value, pos


def zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def zigzag_encode(n: int) -> int:
    # Python ints are unbounded, so the arithmetic shift of the 64-bit form is written out.
    return (n << 1) ^ (n >> 63) if n < 0 else n << 1


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint (32-bit)."""
    value, pos = _read_leb128(buf, pos, _MAX_VARINT_BYTES)
    if value > 0xFFFFFFFF:
        raise MalformedMessage("varint out of range")
    return zigzag_decode(value), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """Read a zig-zag varlong (64-bit)."""
    value, pos = _read_leb128(buf, pos, _MAX_VARLONG_BYTES)
    if value > 0xFFFFFFFFFFFFFFFF:
        raise MalformedMessage("varlong out of range")
    return zigzag_decode(value), pos


# Encodings of 0..127 are one byte; precomputed because compact lengths hit them constantly.
_SMALL_UVARINTS = [bytes([i]) for i in range(128)]


def uvarint_bytes(n: int) -> bytes:
    """The unsigned-varint encoding of ``n`` (0 <= n < 2**64)."""
    if n < 128:
        if n < 0:
            raise ValueError(f"unsigned varint cannot encode {n}")
        return _SMALL_UVARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_uvarint(out: bytearray, n: int) -> None:
    out += uvarint_bytes(n)


def write_varint(out: bytearray, n: int) -> None:
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise ValueError(f"varint out of range: {n}")
    out += uvarint_bytes(zigzag_encode(n) & 0xFFFFFFFF)


def write_varlong(out: bytearray, n: int) -> None:
    if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of range: {n}")
    out += uvarint_bytes(zigzag_encode(n) & 0xFFFFFFFFFFFFFFFF)


def varint_size(n: int) -> int:
    """Bytes taken by the zig-zag varint encoding of ``n``."""
    z = zigzag_encode(n)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


# --- strings and bytes ------------------------------------------------------------------------


def read_string_body(buf, pos: int, n: int) -> tuple[str, int]:
    """Decode ``n`` bytes of UTF-8 at ``pos`` (``n`` already read and checked non-negative)."""
    end = pos + n
    if end > len(buf):
        raise MalformedMessage(f"string of {n} bytes runs past the end of the message")
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError as e:
        raise MalformedMessage(f"string is not valid UTF-8: {e.reason}") from None


def read_bytes_body(buf, pos: int, n: int) -> tuple[bytes, int]:
    end = pos + n
    if end > len(buf):
        raise MalformedMessage(f"bytes field of {n} bytes runs past the end of the message")
    return bytes(buf[pos:end]), end


def read_records_body(buf, pos: int, n: int) -> tuple[memoryview, int]:
    """Record batches are not copied: the caller gets a view into the frame."""
    end = pos + n
    if end > len(buf):
        raise MalformedMessage(f"records field of {n} bytes runs past the end of the message")
    return buf[pos:end], end


def check_array_count(buf, pos: int, n: int) -> None:
    """Refuse an element count that the remaining bytes cannot hold.

    Every element takes at least one byte on the wire in every message Kafka defines, so this
    bound stops a forged count from looping or allocating beyond the frame's own size.
    """
    if n > len(buf) - pos:
        raise MalformedMessage(
            f"array of {n} elements cannot fit in the {len(buf) - pos} bytes that remain"
        )


def read_uuid(buf, pos: int) -> tuple[_uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise MalformedMessage("truncated uuid")
    return _uuid.UUID(bytes=bytes(buf[pos:end])), end


def skip_tagged(buf, pos: int, size: int) -> int:
    """Skip an unknown tagged field of ``size`` bytes."""
    end = pos + size
    if end > len(buf):
        raise MalformedMessage("tagged field runs past the end of the message")
    return end
