"""Record batches (message format v2, magic 2) as zero-copy views over bytes.

Theory of operation
-------------------
Kafka's speed comes from treating a batch as opaque bytes: the broker reads the 61-byte header,
checks the CRC, patches the base offset (and, for a mirror, the producer id) in place, and writes
the same bytes on. :class:`RecordBatch` does exactly that much over a ``memoryview``: every field
is a ``struct.unpack_from`` at a fixed position, nothing is copied, and the records are decoded
only when :meth:`RecordBatch.records` is called.

:func:`iter_batches` walks a buffer of concatenated batches (a Produce request's records, a Fetch
response, a segment file's mapping), yielding one view per batch and stopping cleanly at a
trailing partial batch, which Fetch responses routinely end with.

The old formats (magic 0 and 1, "message sets") are refused: Kafka 4.x removed them. Their magic
byte sits at the same position (byte 16) as v2's, which is why the v2 header puts it there.

Pure: no I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from crc32c import crc32c

from kcore.record.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
)
from kcore.record.errors import CompressionError, CorruptRecordError, UnsupportedMagicError

if TYPE_CHECKING:
    from kcore.record.records import Record

__all__ = [
    "BATCH_HEADER",
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "BatchIterator",
    "RecordBatch",
    "TimestampType",
    "iter_batches",
    "last_sequence",
    "mirror_producer_id",
]

MAGIC = 2

# The header, big-endian, 61 bytes: the field order of the class docstring below.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD = BATCH_HEADER.size  # 61
# Base offset and batch length: the part of the header that batch_length does not count.
LOG_OVERHEAD = 12
# The smallest v0 message (offset and size excluded): Kafka's first sanity check on a length,
# made before the magic byte (and so the format) is known.
_MIN_LEGACY_LENGTH = 14
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49
# Bytes needed to read the magic: offset (8) + length (4) + epoch/crc (4) + magic (1).
_HEADER_UP_TO_MAGIC = 17

# Field positions. The CRC covers attributes to the end of the batch, so base offset, length and
# partition leader epoch can be assigned by the broker without recomputing it.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
PRODUCER_EPOCH_POS = 51
BASE_SEQUENCE_POS = 53
RECORD_COUNT_POS = 57
RECORDS_POS = 61

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT32_MAX = 0x7FFFFFFF
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class TimestampType(enum.IntEnum):
    """Attribute bit 3: what a batch's timestamps mean."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """All 13 header fields, from one ``struct`` call (for code that reads most of them)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


# BatchHeader._make without its per-call length check: the struct always yields 13 fields.
_new_header = tuple.__new__


def mirror_producer_id(producer_id: int) -> int:
    """The producer id a mirrored batch carries (decision D-17): ``-(producer_id + 2)``.

    -1 (no producer id) maps to itself, source ids ``>= 0`` map to ``<= -2``, and the map is its
    own inverse, so failing back restores the original ids. It is a bijection on
    ``[-2**63, 2**63 - 2]``; ``2**63 - 1`` has no int64 image and raises ``ValueError``.
    """
    if not _INT64_MIN <= producer_id <= _INT64_MAX - 1:
        raise ValueError(f"producer id {producer_id} has no mirrored int64 counterpart")
    return -(producer_id + 2)


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record (:attr:`RecordBatch.last_sequence`), from header
    fields: ``NO_SEQUENCE`` stays; sequences wrap from 2**31-1 to 0, as in Kafka."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _check_magic(view: memoryview, pos: int) -> None:
    magic = view[pos + MAGIC_POS]
    if magic == MAGIC:
        return
    if magic in (0, 1):
        raise UnsupportedMagicError(
            f"record batch at byte {pos} has magic {magic}: magic v0/v1 message format is "
            "not supported; Kafka 4.x removed it"
        )
    # magic is read as unsigned; the wire type is int8.
    signed = magic - 256 if magic > 127 else magic
    raise CorruptRecordError(f"record batch at byte {pos} has unknown magic {signed}")


class RecordBatch:
    """A view over the bytes of one v2 record batch (magic 2); nothing is copied.

    Byte layout (big-endian; the CRC-32C covers bytes 21 to the end)::

        offset size field
             0    8 base_offset             int64   first offset; assigned by the leader
             8    4 batch_length            int32   bytes after this field (total - 12)
            12    4 partition_leader_epoch  int32   assigned by the leader; not in the CRC
            16    1 magic                   int8    2
            17    4 crc                     uint32  CRC-32C (Castagnoli) of bytes 21..end
            21    2 attributes              int16   bits 0-2 compression, 3 timestamp type,
                                                    4 transactional, 5 control,
                                                    6 has delete horizon
            23    4 last_offset_delta       int32   last record's offset - base_offset
            27    8 base_timestamp          int64   first timestamp (or the delete horizon)
            35    8 max_timestamp           int64   largest timestamp (append time if bit 3)
            43    8 producer_id             int64   -1: none
            51    2 producer_epoch          int16   -1: none
            53    4 base_sequence           int32   -1: none
            57    4 record_count            int32
            61    - records                         (compressed as a whole when bits 0-2 != 0)

    The constructor checks only what it must to frame the batch (magic 2, a length that fits the
    buffer); :meth:`validate` checks the CRC. The ``set_*`` methods patch a writable buffer (a
    ``bytearray`` or a writable ``memoryview`` of one) in place, recomputing the CRC when the
    field is covered by it.

    While a ``RecordBatch`` over a ``bytearray`` is alive, the ``bytearray`` cannot be resized
    (Python forbids resizing an exported buffer); drop the views before appending to it.
    """

    __slots__ = ("_view",)

    def __init__(self, buf) -> None:
        """Frame the batch at the start of ``buf`` (bytes, bytearray, mmap or memoryview).

        Bytes after the batch are ignored, so ``RecordBatch(segment_view[pos:])`` works.

        Raises:
            UnsupportedMagicError: the bytes are a v0/v1 message.
            CorruptRecordError: unknown magic, a length below the v2 minimum, or fewer bytes
                than the batch length announces.
        """
        view = buf if type(buf) is memoryview else memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        n = len(view)
        if n < _HEADER_UP_TO_MAGIC:
            raise CorruptRecordError(f"record batch of {n} bytes is too short to hold a header")
        if view[MAGIC_POS] != MAGIC:
            _check_magic(view, 0)
        if n < BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch of {n} bytes is shorter than the {BATCH_OVERHEAD}-byte v2 header"
            )
        (length,) = _INT32.unpack_from(view, LENGTH_POS)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch length {length} is below the v2 minimum of {_MIN_BATCH_LENGTH}"
            )
        size = length + LOG_OVERHEAD
        if size > n:
            raise CorruptRecordError(
                f"record batch of {size} bytes is truncated to the {n} bytes available"
            )
        self._view = view if size == n else view[:size]

    @classmethod
    def _framed(cls, view: memoryview) -> RecordBatch:
        """A view over bytes already framed by :class:`BatchIterator` (skips the checks)."""
        batch = cls.__new__(cls)
        batch._view = view
        return batch

    # --- the header, field by field ---------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return _INT64.unpack_from(self._view, BASE_OFFSET_POS)[0]

    @property
    def batch_length(self) -> int:
        """Bytes after the length field: :attr:`size_in_bytes` - 12."""
        return _INT32.unpack_from(self._view, LENGTH_POS)[0]

    @property
    def partition_leader_epoch(self) -> int:
        return _INT32.unpack_from(self._view, PARTITION_LEADER_EPOCH_POS)[0]

    @property
    def magic(self) -> int:
        return _INT8.unpack_from(self._view, MAGIC_POS)[0]

    @property
    def crc(self) -> int:
        """The stored CRC-32C (see :meth:`compute_crc` for the actual one)."""
        return _UINT32.unpack_from(self._view, CRC_POS)[0]

    @property
    def attributes(self) -> int:
        return _INT16.unpack_from(self._view, ATTRIBUTES_POS)[0]

    @property
    def last_offset_delta(self) -> int:
        return _INT32.unpack_from(self._view, LAST_OFFSET_DELTA_POS)[0]

    @property
    def base_timestamp(self) -> int:
        return _INT64.unpack_from(self._view, BASE_TIMESTAMP_POS)[0]

    @property
    def max_timestamp(self) -> int:
        return _INT64.unpack_from(self._view, MAX_TIMESTAMP_POS)[0]

    @property
    def producer_id(self) -> int:
        return _INT64.unpack_from(self._view, PRODUCER_ID_POS)[0]

    @property
    def producer_epoch(self) -> int:
        return _INT16.unpack_from(self._view, PRODUCER_EPOCH_POS)[0]

    @property
    def base_sequence(self) -> int:
        return _INT32.unpack_from(self._view, BASE_SEQUENCE_POS)[0]

    @property
    def record_count(self) -> int:
        return _INT32.unpack_from(self._view, RECORD_COUNT_POS)[0]

    def header(self) -> BatchHeader:
        """Every header field at once (one ``struct`` call instead of one per property)."""
        return _new_header(BatchHeader, BATCH_HEADER.unpack_from(self._view, 0))

    # --- derived ----------------------------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        """The batch's whole size: ``batch_length + 12``."""
        return len(self._view)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset after this batch: where the next batch starts."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self) -> CompressionType:
        """The codec of the records; ``CompressionError`` for the unassigned ids 5..7."""
        return CompressionType.from_id(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """A control batch: one control record (COMMIT, ABORT, ...), never shown to consumers."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """The log cleaner stored a delete horizon in :attr:`base_timestamp` (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        """The delete horizon, or ``NO_TIMESTAMP`` (-1) when the batch has none."""
        return self.base_timestamp if self.has_delete_horizon else NO_TIMESTAMP

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """The last record's sequence; sequences wrap from 2**31-1 to 0, as in Kafka."""
        return last_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes (a view; ``bytes(batch.buffer)`` copies them)."""
        return self._view

    @property
    def payload(self) -> memoryview:
        """The records section after the header, still compressed if the batch is."""
        return self._view[RECORDS_POS:]

    # --- checks -----------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """The CRC-32C of bytes 21..end, as it should be stored."""
        return crc32c(self._view[ATTRIBUTES_POS:])

    def is_valid_crc(self) -> bool:
        return self.crc == crc32c(self._view[ATTRIBUTES_POS:])

    def validate(self) -> None:
        """Check the batch as Kafka's ``DefaultRecordBatch.ensureValid`` does, and a little more.

        Framing (magic, length) was checked when the view was made; this adds the CRC, a known
        codec and a non-negative record count. Records are not decoded.

        Raises:
            CorruptRecordError: with the stored and computed CRCs, or the bad field.
            CompressionError: an unassigned codec id.
        """
        view = self._view
        h = BATCH_HEADER.unpack_from(view, 0)  # one call for the three fields checked
        stored = h[4]
        computed = crc32c(view[ATTRIBUTES_POS:])
        if stored != computed:
            raise CorruptRecordError(
                f"record batch at offset {h[0]} is corrupt "
                f"(stored crc = {stored}, computed crc = {computed})"
            )
        if h[5] & COMPRESSION_MASK > CompressionType.ZSTD:
            raise CompressionError(
                f"record batch at offset {h[0]} has unknown compression type id "
                f"{h[5] & COMPRESSION_MASK}"
            )
        count = h[12]
        if count < 0:
            raise CorruptRecordError(
                f"record batch at offset {h[0]} has a negative record count {count}"
            )

    # --- patching in place ------------------------------------------------------------------

    def _writable(self) -> memoryview:
        if self._view.readonly:
            raise TypeError("record batch buffer is read-only; build the view over a bytearray")
        return self._view

    def _rewrite_crc(self, view: memoryview) -> None:
        _UINT32.pack_into(view, CRC_POS, crc32c(view[ATTRIBUTES_POS:]))

    def set_base_offset(self, base_offset: int) -> None:
        """Assign the batch's first offset (the leader does, on append). Not in the CRC."""
        _INT64.pack_into(self._writable(), BASE_OFFSET_POS, base_offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Stamp the leader epoch (the leader does, on append). Not in the CRC."""
        _INT32.pack_into(self._writable(), PARTITION_LEADER_EPOCH_POS, epoch)

    def set_producer_id(self, producer_id: int) -> None:
        """Replace the producer id (the mirror does, decision D-17) and recompute the CRC.

        Costs one CRC pass over the batch: the producer id is covered by the CRC.
        """
        view = self._writable()
        _INT64.pack_into(view, PRODUCER_ID_POS, producer_id)
        self._rewrite_crc(view)

    def header_with_producer_id(self, producer_id: int) -> bytearray:
        """A copy of the 61-byte header carrying ``producer_id`` and the CRC the batch has with
        it, the batch itself untouched (read-only buffers too).

        The mirror's rewrite (D-17) without copying the payload: the log writes this header
        followed by the original payload (``PartitionLog.append_as_follower``'s ``headers``).
        Costs one CRC pass over the payload, as :meth:`set_producer_id`.
        """
        view = self._view
        header = bytearray(view[:RECORDS_POS])
        _INT64.pack_into(header, PRODUCER_ID_POS, producer_id)
        crc = crc32c(view[RECORDS_POS:], crc32c(memoryview(header)[ATTRIBUTES_POS:]))
        _UINT32.pack_into(header, CRC_POS, crc)
        return header

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type bit and max timestamp, recomputing the CRC if they change.

        The leader does this for ``message.timestamp.type=LogAppendTime`` topics, as Kafka's
        ``DefaultRecordBatch.setMaxTimestamp``; record timestamps are then read as this value.
        """
        view = self._writable()
        attributes = self.attributes
        new_attributes = (attributes & ~TIMESTAMP_TYPE_MASK) | (int(timestamp_type) << 3)
        if new_attributes == attributes and self.max_timestamp == max_timestamp:
            return
        _INT16.pack_into(view, ATTRIBUTES_POS, new_attributes)
        _INT64.pack_into(view, MAX_TIMESTAMP_POS, max_timestamp)
        self._rewrite_crc(view)

    # --- records ----------------------------------------------------------------------------

    def records(self, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> Iterator[Record]:
        """Decode the records, decompressing first if needed (see :mod:`kcore.record.records`).

        Args:
            max_size: the largest decompressed size accepted (a decompression-bomb bound).

        Raises (while iterating) ``CorruptRecordError``, ``CompressionError`` or
        ``DecompressionLimitExceeded``.
        """
        # Imported here: records.py builds on this module's layout constants, so a top-level
        # import would be circular.
        from kcore.record.records import iter_records

        return iter_records(self, max_size=max_size)

    def __repr__(self) -> str:
        h = self.header()
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset_delta={h.last_offset_delta}, "
            f"size={len(self._view)}, partition_leader_epoch={h.partition_leader_epoch}, "
            f"attributes={h.attributes:#06x}, producer_id={h.producer_id}, "
            f"producer_epoch={h.producer_epoch}, base_sequence={h.base_sequence}, "
            f"record_count={h.record_count})"
        )


class BatchIterator:
    """Iterates the whole batches of a buffer; see :func:`iter_batches`.

    After iteration stops, :attr:`valid_bytes` is the length of the prefix made of whole batches
    and :attr:`trailing_bytes` the length of the partial batch after it (0 if none). During
    iteration, :attr:`valid_bytes` is the end of the last batch yielded.
    """

    __slots__ = ("_view", "_max_batch_size", "valid_bytes")

    def __init__(self, view: memoryview, max_batch_size: int | None) -> None:
        self._view = view
        self._max_batch_size = max_batch_size
        self.valid_bytes = 0

    @property
    def trailing_bytes(self) -> int:
        return len(self._view) - self.valid_bytes

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> RecordBatch:
        view = self._view
        pos = self.valid_bytes
        remaining = len(view) - pos
        # The order of checks is Kafka's ByteBufferLogInputStream's: a length too small to be
        # any message is corruption even in a partial tail, while a short tail is just partial.
        if remaining < LOG_OVERHEAD:
            raise StopIteration
        (length,) = _INT32.unpack_from(view, pos + LENGTH_POS)
        if length < _MIN_LEGACY_LENGTH:
            raise CorruptRecordError(
                f"record batch at byte {pos} has length {length}, below the minimum of "
                f"{_MIN_LEGACY_LENGTH}"
            )
        size = length + LOG_OVERHEAD
        if self._max_batch_size is not None and size > self._max_batch_size:
            raise CorruptRecordError(
                f"record batch at byte {pos} of {size} bytes exceeds the largest allowed batch "
                f"of {self._max_batch_size} bytes"
            )
        if remaining < _HEADER_UP_TO_MAGIC:
            raise StopIteration
        if view[pos + MAGIC_POS] != MAGIC:
            _check_magic(view, pos)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at byte {pos} has length {length}, below the v2 minimum of "
                f"{_MIN_BATCH_LENGTH}"
            )
        if remaining < size:
            raise StopIteration
        self.valid_bytes = pos + size
        return RecordBatch._framed(view[pos : pos + size])


def iter_batches(buf, *, max_batch_size: int | None = None) -> BatchIterator:
    """Walk the concatenated v2 batches in ``buf`` without copying.

    A trailing partial batch ends the iteration quietly (a Fetch response may be cut anywhere);
    read :attr:`BatchIterator.valid_bytes` / :attr:`~BatchIterator.trailing_bytes` afterwards to
    know where the whole batches end. The batches' CRCs are not checked (call
    :meth:`RecordBatch.validate`).

    Args:
        buf: bytes, bytearray, mmap or memoryview. Views over a writable buffer can be patched.
        max_batch_size: refuse any batch larger than this many bytes (e.g. ``message.max.bytes``
            plus the log overhead), before waiting for its bytes.

    Raises (while iterating):
        UnsupportedMagicError: a v0/v1 message set.
        CorruptRecordError: a length no batch can have, an unknown magic, or a batch over
            ``max_batch_size``.
    """
    view = buf if type(buf) is memoryview else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return BatchIterator(view, max_batch_size)
