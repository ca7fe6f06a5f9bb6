"""Record-batch compression codecs: none, gzip, snappy, lz4, zstd.

Theory of operation
-------------------
A compressed v2 batch keeps its 61-byte header in the clear and compresses only the records that
follow it (``kcore.record.batch``). The codec is the batch attribute's low three bits, so the ids
below are wire values: NONE 0, GZIP 1, SNAPPY 2, LZ4 3, ZSTD 4; 5..7 are unassigned.

:func:`compress` writes what Kafka's Java client writes, so a batch kcore recompresses reads the
same in every client:

* **gzip**: one RFC 1952 member (``java.util.zip.GZIPOutputStream``); level 6 by default
  (Java's ``Deflater.DEFAULT_COMPRESSION``, Kafka's ``compression.gzip.level`` default).
* **snappy**: the *xerial* block stream of ``snappy-java``'s ``SnappyOutputStream``::

      header   16 bytes   \\x82 S N A P P Y \\x00 | int32 version (1) | int32 compatible (1)
      chunk    repeated   int32 compressed length | raw snappy block of <= 32 KiB input

  (big-endian ints). Readers also accept plain raw snappy, which librdkafka may send.
* **lz4**: one LZ4 frame (``KafkaLZ4BlockOutputStream``): independent 64 KiB blocks, no content
  size, no checksums; level 9 (Kafka's ``compression.lz4.level`` default).
* **zstd**: one zstd frame, level 3 (Kafka's ``compression.zstd.level`` default).

:func:`decompress` is **bounded**: it never holds more than about twice ``max_size`` bytes of
output (plus 2 MiB for zstd), because a few KiB of zeros compressed with any of these codecs
claim megabytes. Each codec is
driven incrementally so the limit is hit *before* the memory is spent; going past it raises
:class:`~kcore.record.errors.DecompressionLimitExceeded`. Undecodable input raises
:class:`~kcore.record.errors.CompressionError`. Both are ``CorruptRecordError`` subclasses.

Pure: no I/O; the codecs' own C libraries do the work.
"""

from __future__ import annotations

import enum
import struct
import zlib

import lz4.frame
import snappy
import zstandard

from kcore.protocol.primitives import MalformedMessage, read_uvarint
from kcore.record.errors import CompressionError, DecompressionLimitExceeded

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "CompressionType",
    "compress",
    "decompress",
]

# The default bound for decompress(): 64 MiB is well above Kafka's default message.max.bytes
# (1 MiB compressed) times any honest ratio seen in practice for record data (~10x), and well
# below what would hurt a broker. Callers that know their limit pass max_size.
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024


class CompressionType(enum.IntEnum):
    """The codec id stored in bits 0..2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec for attribute bits ``codec_id``; ``CompressionError`` for 5..7."""
        try:
            return cls(codec_id)
        except ValueError:
            raise CompressionError(f"unknown compression type id {codec_id}") from None


# Kafka's default levels (KIP-390 made them configurable; these are the defaults).
_GZIP_LEVEL = 6
_LZ4_LEVEL = 9
_ZSTD_LEVEL = 3


def compress(codec: CompressionType | int, data, *, level: int | None = None) -> bytes:
    """Compress ``data`` (any bytes-like object) the way Kafka's Java client does.

    Args:
        codec: the codec; ``NONE`` returns ``bytes(data)``.
        level: the codec's level; ``None`` means Kafka's default (gzip 6, lz4 9, zstd 3; snappy
            has no levels).

    Returns the compressed bytes, ready to follow a batch header.
    """
    codec = CompressionType.from_id(int(codec))
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        # wbits 31 = gzip container; zlib writes mtime 0, so output is deterministic.
        c = zlib.compressobj(_GZIP_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec is CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec is CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=_LZ4_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            # Kafka's LZ4 reader does not support linked blocks.
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL if level is None else level).compress(data)


def decompress(
    codec: CompressionType | int, data, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress ``data`` (any bytes-like object), refusing output larger than ``max_size``.

    Args:
        codec: the codec; ``NONE`` returns ``data`` itself, unbounded (it is not a decompression).
        max_size: the largest output accepted, in bytes.

    Returns the decompressed bytes.

    Raises:
        DecompressionLimitExceeded: the output would exceed ``max_size``; no more than about
            twice ``max_size`` (plus 2 MiB for zstd) was held before stopping.
        CompressionError: the data is truncated, has trailing garbage, or is not valid for the
            codec.
    """
    codec = CompressionType.from_id(int(codec))
    if codec is CompressionType.NONE:
        return data
    if max_size < 0:
        raise ValueError(f"max_size must be >= 0, not {max_size}")
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data, max_size)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, max_size)
        return _zstd_decompress(data, max_size)
    except CompressionError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, snappy.UncompressError) as e:
        # lz4.frame raises RuntimeError for bad frames; the message names the codec's complaint.
        raise CompressionError(f"{codec.name.lower()} data is corrupt: {e}") from None


def _too_big(codec: str, max_size: int) -> DecompressionLimitExceeded:
    return DecompressionLimitExceeded(
        f"{codec} data decompresses to more than the limit of {max_size} bytes"
    )


# --- gzip -------------------------------------------------------------------------------------


def _gzip_decompress(data, max_size: int) -> bytes:
    out = bytearray()
    d = zlib.decompressobj(31)
    pending = data
    while True:
        # Asking for one byte more than the budget tells "exactly at the limit" from "past it".
        chunk = d.decompress(pending, max_size - len(out) + 1)
        out += chunk
        if len(out) > max_size:
            raise _too_big("gzip", max_size)
        if d.eof:
            rest = d.unused_data
            if not rest:
                return bytes(out)
            # GZIPInputStream reads concatenated members; anything else after one is garbage.
            if rest[:2] != b"\x1f\x8b":
                raise CompressionError(f"gzip data has {len(rest)} bytes of trailing garbage")
            d = zlib.decompressobj(31)
            pending = rest
            continue
        pending = d.unconsumed_tail
        if not pending and not chunk:
            raise CompressionError("gzip data is truncated")


# --- snappy -----------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's SnappyOutputStream default block size: each chunk holds at most 32 KiB of input.
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _xerial_compress(data) -> bytes:
    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = snappy.compress(view[start : start + _XERIAL_BLOCK_SIZE])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy_decompress(block, budget: int, max_size: int) -> bytes:
    # A raw snappy block starts with the uncompressed length as an unsigned varint, and the
    # decoder allocates exactly that much: checking it first is what bounds the allocation.
    try:
        length, _ = read_uvarint(block, 0)
    except MalformedMessage:
        raise CompressionError("snappy block has no valid length preamble") from None
    if length > budget:
        raise _too_big("snappy", max_size)
    out = snappy.uncompress(block)
    if len(out) != length:  # the decoder checks this; kept so a library change cannot lie to us
        raise CompressionError("snappy block length does not match its preamble")
    return out


def _snappy_decompress(data, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    # Like snappy-java's SnappyInputStream: the xerial header marks a block stream; anything
    # else is read as one raw block. The version/compat ints are not checked (some producers
    # write them little-endian, and there has only ever been version 1).
    if len(view) < 16 or view[:8] != _XERIAL_MAGIC:
        return _raw_snappy_decompress(view, max_size, max_size)
    out = bytearray()
    pos = 16
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CompressionError("xerial snappy stream is truncated inside a chunk length")
        (n,) = _INT32.unpack_from(view, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CompressionError(
                f"xerial snappy chunk of {n} bytes does not fit in the {end - pos} bytes left"
            )
        out += _raw_snappy_decompress(view[pos : pos + n], max_size - len(out), max_size)
        pos += n
    return bytes(out)


# --- lz4 --------------------------------------------------------------------------------------


def _lz4_decompress(data, max_size: int) -> bytes:
    out = bytearray()
    d = lz4.frame.LZ4FrameDecompressor()
    pending = data
    while True:
        chunk = d.decompress(pending, max_length=max_size - len(out) + 1)
        pending = b""
        out += chunk
        if len(out) > max_size:
            raise _too_big("lz4", max_size)
        if d.eof:
            rest = d.unused_data
            if not rest:
                return bytes(out)
            # Concatenated frames are valid LZ4; read them like the lz4 tool does.
            d = lz4.frame.LZ4FrameDecompressor()
            pending = rest
            continue
        if d.needs_input:
            raise CompressionError("lz4 frame is truncated")


# --- zstd -------------------------------------------------------------------------------------

# zstandard's decompressobj has no output limit, so the input is fed in slices small enough that
# their output is bounded: a zstd block regenerates at most 128 KiB and takes at least 4 bytes
# (3 of header, 1 of RLE payload), so k input bytes yield at most (1 + k/4) * 128 KiB. Slices of
# budget/32768 bytes (at least 64) thus overshoot the budget by at most max(budget, 2 MiB) plus a
# block, and normal data (ratios ~3-10x) needs only a few hundred calls per MiB. The decoder's
# own window buffer is capped by zstd's default window limit (128 MiB, as in zstd-jni, so frames
# written at level 22 still decode); Linux only commits its pages as output is written into it.
_ZSTD_MAX_RATIO = 32 * 1024
_ZSTD_MIN_SLICE = 64
_ZSTD = zstandard.ZstdDecompressor()


def _zstd_decompress(data, max_size: int) -> bytes:
    view = memoryview(data).cast("B")
    end = len(view)
    if end == 0:
        raise CompressionError("zstd data is empty")
    out = bytearray()
    d = _ZSTD.decompressobj()
    pos = 0
    while pos < end:
        budget = max_size - len(out)
        step = max(_ZSTD_MIN_SLICE, budget // _ZSTD_MAX_RATIO)
        piece = view[pos : pos + step]
        out += d.decompress(piece)
        pos += len(piece)
        if len(out) > max_size:
            raise _too_big("zstd", max_size)
        if d.eof:
            # A frame ended inside this slice: the rest of the slice is the next frame's start.
            # zstd-jni's stream reads concatenated frames, so we do too.
            pos -= len(d.unused_data)
            if pos >= end:
                return bytes(out)
            d = _ZSTD.decompressobj()
    # The input ran out with a frame still open.
    raise CompressionError("zstd frame is truncated")
