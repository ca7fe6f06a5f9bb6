"""Records inside a v2 batch: decoding them on request, and building whole batches.

Theory of operation
-------------------
The broker's hot path never comes here (``kcore.record.batch`` handles batches as opaque bytes).
Records are decoded only for the few jobs that need them: compaction, timestamp checks,
transaction markers, tools and tests. :func:`iter_records` decompresses the payload once (bounded,
see :mod:`kcore.record.compression`) and yields :class:`Record` objects whose keys and values are
``bytes`` copies, so they do not pin the batch's buffer.

:class:`RecordBatchBuilder` writes the exact bytes Kafka's ``MemoryRecordsBuilder`` writes: the
records, compressed as a whole when asked, after a 61-byte header whose CRC is computed last.

Pure: no I/O, no clock (timestamps are passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from crc32c import crc32c

from kcore.protocol.primitives import (
    MalformedMessage,
    _read_leb128,
    write_varint,
    write_varlong,
)
from kcore.record.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
    TimestampType,
)
from kcore.record.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
    compress,
    decompress,
)
from kcore.record.errors import CorruptRecordError

__all__ = ["Header", "Record", "RecordBatchBuilder", "iter_records"]

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record of a batch, decoded: an immutable tuple (built about 5x faster than a frozen
    dataclass, which a deep iteration over a 1 GiB segment feels).

    Wire layout (varints are zig-zag; lengths of -1 mean null)::

        length          varint   bytes after this field
        attributes      int8     unused (0)
        timestampDelta  varlong  timestamp - batch base_timestamp
        offsetDelta     varint   offset - batch base_offset
        keyLength       varint   then key bytes
        valueLength     varint   then value bytes
        headersCount    varint   then per header: keyLength varint, UTF-8 key (never null),
                                 valueLength varint, value bytes

    ``offset`` and ``timestamp`` are absolute, computed from the batch; with
    ``LOG_APPEND_TIME`` every record's timestamp is the batch's ``max_timestamp``, as in Kafka.
    Header keys are decoded as UTF-8 with replacement characters for invalid bytes, as Java's
    ``new String(bytes, UTF_8)`` does.
    """

    offset: int
    timestamp: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


_new_record = tuple.__new__
_MAX_VARINT = 0xFFFFFFFF
_MAX_VARLONG = 0xFFFFFFFFFFFFFFFF


def _long_varint(buf, pos: int, max_bytes: int, limit: int) -> tuple[int, int]:
    """A zig-zag varint of 3 bytes or more."""
    value, pos = _read_leb128(buf, pos, max_bytes)
    if value > limit:
        raise MalformedMessage("varint out of range")
    return (value >> 1) ^ -(value & 1), pos


def _varint(buf, pos: int, max_bytes: int, limit: int) -> tuple[int, int]:
    """A zig-zag varint: one and two bytes (lengths and deltas below 8192, nearly all of them)
    without a loop, longer ones through :func:`_long_varint`. ``IndexError`` past the end."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    b2 = buf[pos + 1]
    if b2 < 0x80:
        b = (b & 0x7F) | (b2 << 7)
        return (b >> 1) ^ -(b & 1), pos + 2
    return _long_varint(buf, pos, max_bytes, limit)


def _read_nullable(buf: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """Varint length (-1 is null), then that many bytes; a length under 64 (one byte: keys,
    header keys and values nearly always) is read without a call."""
    b = buf[pos]
    if b < 0x80 and not b & 1:
        n = b >> 1
        pos += 1
    else:
        n, pos = _varint(buf, pos, 5, _MAX_VARINT)
        if n < 0:
            if n != -1:
                raise CorruptRecordError(f"{what} has invalid length {n}")
            return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError(f"{what} of {n} bytes runs past the end of the records")
    return buf[pos:end], end


def _read_headers(buf: bytes, pos: int) -> tuple[list[Header], int]:
    count, pos = _varint(buf, pos, 5, _MAX_VARINT)
    if count < 0:
        raise CorruptRecordError(f"record has invalid header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        hkey, pos = _read_nullable(buf, pos, "header key")
        if hkey is None:
            raise CorruptRecordError("record header key is null")
        hvalue, pos = _read_nullable(buf, pos, "header value")
        headers.append((hkey.decode("utf-8", errors="replace"), hvalue))
    return headers, pos


def _records(
    buf: bytes, count: int, base_offset: int, base_timestamp: int, append_time, out: list
) -> int:
    """Decode ``count`` records from ``buf`` into ``out``; returns the position after the last.

    The hot loop of every deep iteration (``kcore dump-log --deep-iteration`` reads a 1 GiB
    segment through it), so it is written out: ``buf`` is ``bytes`` (indexing and slicing
    ``bytes`` is the fastest Python has), varints of one or two bytes are read without a loop
    (:func:`_varint`), and a record without headers costs one byte test. Errors: ``CorruptRecordError``, ``MalformedMessage`` (a
    varint that never ends), ``IndexError`` (bytes that end mid-record), with the records
    before the bad one in ``out``; the caller words them. A list, not a generator: resuming a
    generator per record cost a tenth of the loop.
    """
    n_buf = len(buf)
    pos = 0
    append = out.append
    for _ in range(count):
        length, pos = _varint(buf, pos, 5, _MAX_VARINT)
        start = pos
        end_of_record = pos + length
        if length < 0 or end_of_record > n_buf:
            raise CorruptRecordError(f"record length {length} does not fit in the batch")
        pos += 1  # attributes: unused by every format version so far
        timestamp_delta, pos = _varint(buf, pos, 10, _MAX_VARLONG)
        offset_delta, pos = _varint(buf, pos, 5, _MAX_VARINT)
        # The key and the value: written out rather than through _read_nullable, whose two
        # calls per record cost a tenth of a deep iteration. A null is the byte 0x01.
        b = buf[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            n, pos = _varint(buf, pos, 5, _MAX_VARINT)
            if n < 0:
                raise CorruptRecordError(f"record key has invalid length {n}")
            key = buf[pos : pos + n]
            pos += n
            if pos > end_of_record:
                raise CorruptRecordError(
                    f"record key of {n} bytes runs past the end of the records"
                )
        b = buf[pos]
        if b == 1:
            value = None
            pos += 1
        else:
            n, pos = _varint(buf, pos, 5, _MAX_VARINT)
            if n < 0:
                raise CorruptRecordError(f"record value has invalid length {n}")
            value = buf[pos : pos + n]
            pos += n
            if pos > end_of_record:
                raise CorruptRecordError(
                    f"record value of {n} bytes runs past the end of the records"
                )
        if buf[pos] == 0:  # no headers: one byte
            headers: list[Header] = []
            pos += 1
        else:
            headers, pos = _read_headers(buf, pos)
        if pos != end_of_record:
            raise CorruptRecordError(
                f"record length says {length} bytes but its fields take {pos - start}"
            )
        timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
        record = (
            base_offset + offset_delta,
            timestamp,
            offset_delta,
            timestamp_delta,
            key,
            value,
            headers,
        )
        append(_new_record(Record, record))
    return pos


def iter_records(
    batch: RecordBatch, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> Iterator[Record]:
    """Yield the records of ``batch`` (usually called as ``batch.records()``).

    Args:
        batch: the batch; its CRC is not checked here (call ``batch.validate()`` first).
        max_size: bound on the decompressed size of a compressed batch.

    Raises (while iterating):
        CorruptRecordError: a record that does not parse, a record count that does not match
            the records, or bytes left over after the last record.
        CompressionError / DecompressionLimitExceeded: from decompression.
    """
    h = batch.header()
    codec = CompressionType.from_id(h.attributes & COMPRESSION_MASK)
    payload = batch.payload
    if codec is not CompressionType.NONE:
        payload = decompress(codec, payload, max_size=max_size)
    append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    count = h.record_count
    # Every record takes at least 7 bytes; a count the payload cannot hold is corruption, found
    # before looping over it.
    if count < 0 or count > len(payload):
        raise CorruptRecordError(
            f"record batch at offset {h.base_offset} claims {count} records in {len(payload)} bytes"
        )
    buf = payload if type(payload) is bytes else bytes(payload)
    records: list[Record] = []
    try:
        pos = _records(buf, count, h.base_offset, h.base_timestamp, append_time, records)
    except (MalformedMessage, CorruptRecordError, IndexError) as e:
        # MalformedMessage: a bad varint; IndexError: the bytes end in the middle of a record.
        yield from records  # the records before the bad one are whole
        why = "the records end in the middle of a record" if isinstance(e, IndexError) else e
        raise CorruptRecordError(
            f"record {len(records)} of the batch at offset {h.base_offset} is corrupt: {why}"
        ) from None
    yield from records
    if pos != len(buf):
        raise CorruptRecordError(
            f"record batch at offset {h.base_offset} has {len(buf) - pos} bytes after its "
            f"{count} records"
        )


def _write_nullable(out: bytearray, data) -> None:
    if data is None:
        out.append(1)  # zig-zag(-1)
    else:
        write_varint(out, len(data))
        out += data


def _encode_record(
    out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers
) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varlong(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_nullable(body, key)
    _write_nullable(body, value)
    write_varint(body, len(headers))
    for hkey, hvalue in headers:
        _write_nullable(body, hkey.encode("utf-8"))
        _write_nullable(body, hvalue)
    write_varint(out, len(body))
    out += body


def _check_range(name: str, value: int, bits: int) -> None:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} does not fit in an int{bits}")


class RecordBatchBuilder:
    """Builds one v2 record batch, byte for byte as Kafka's ``MemoryRecordsBuilder`` does.

    Output layout: the 61-byte header of :class:`~kcore.record.batch.RecordBatch`, then the
    records (each as in :class:`Record`), compressed together when ``compression`` is not NONE.
    The base timestamp is the first record's timestamp (or ``delete_horizon_ms`` when given, as
    the log cleaner writes), the max timestamp the largest record timestamp (or
    ``log_append_time`` for ``LOG_APPEND_TIME``), the last offset delta the last record's.

    Usage::

        b = RecordBatchBuilder(base_offset=0, compression=CompressionType.LZ4)
        b.append(timestamp=1700000000000, key=b"k", value=b"v", headers=[("h", b"1")])
        data = b.build()          # bytearray; RecordBatch(data) reads it back

    Arguments are checked for range when given; the producer semantics (e.g. that a
    transactional batch has a producer id) are the caller's business, except the two rules Kafka
    enforces when building: a batch needs at least one record, and a transactional batch needs
    a producer id other than -1.
    """

    __slots__ = (
        "_base_offset",
        "_compression",
        "_level",
        "_attributes",
        "_partition_leader_epoch",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_log_append_time",
        "_delete_horizon_ms",
        "_records",
        "_count",
        "_base_timestamp",
        "_max_timestamp",
        "_last_offset",
    )

    def __init__(
        self,
        base_offset: int = 0,
        *,
        compression: CompressionType | int = CompressionType.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        delete_horizon_ms: int | None = None,
    ) -> None:
        """Start an empty batch. ``log_append_time`` is required with ``LOG_APPEND_TIME``."""
        _check_range("base offset", base_offset, 64)
        _check_range("producer id", producer_id, 64)
        _check_range("producer epoch", producer_epoch, 16)
        _check_range("base sequence", base_sequence, 32)
        _check_range("partition leader epoch", partition_leader_epoch, 32)
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise ValueError("cannot write transactional records without a producer id")
        timestamp_type = TimestampType(timestamp_type)
        if timestamp_type is TimestampType.LOG_APPEND_TIME and log_append_time is None:
            raise ValueError("LOG_APPEND_TIME batches need log_append_time")
        self._compression = CompressionType.from_id(int(compression))
        self._level = compression_level
        attributes = int(self._compression) | (int(timestamp_type) << 3)
        if is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if is_control:
            attributes |= CONTROL_MASK
        if delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
        self._attributes = attributes
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._log_append_time = (
            log_append_time if timestamp_type is TimestampType.LOG_APPEND_TIME else None
        )
        self._delete_horizon_ms = delete_horizon_ms
        self._records = bytearray()
        self._count = 0
        self._base_timestamp = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset = base_offset - 1

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def next_offset(self) -> int:
        """The offset :meth:`append` assigns when none is given."""
        return self._last_offset + 1

    @property
    def uncompressed_size(self) -> int:
        """Header plus records so far, before compression: an upper bound for sizing batches."""
        return BATCH_OVERHEAD + len(self._records)

    def append(
        self,
        timestamp: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Iterable[Header] = (),
        *,
        offset: int | None = None,
    ) -> int:
        """Add a record and return its offset.

        Args:
            timestamp: epoch milliseconds (``NO_TIMESTAMP``, -1, is allowed).
            key, value: bytes or ``None`` (null).
            headers: ``(str key, bytes-or-None value)`` pairs, in order.
            offset: the record's absolute offset; by default the one after the last record.
                Offsets must increase (gaps are allowed: compacted batches have them).
        """
        if offset is None:
            offset = self._last_offset + 1
        elif offset <= self._last_offset:
            raise ValueError(
                f"offset {offset} is not above the last offset {self._last_offset} of the batch"
            )
        offset_delta = offset - self._base_offset
        _check_range("offset delta", offset_delta, 32)
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        timestamp_delta = timestamp - self._base_timestamp
        headers = list(headers)
        _encode_record(self._records, offset_delta, timestamp_delta, key, value, headers)
        self._count += 1
        self._last_offset = offset
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return offset

    def build(self) -> bytearray:
        """The finished batch: a fresh ``bytearray`` with the CRC set. The builder can build
        again (the same bytes) but is not meant to be appended to afterwards."""
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        if self._compression is CompressionType.NONE:
            payload = self._records
        else:
            payload = compress(self._compression, self._records, level=self._level)
        out = bytearray(BATCH_OVERHEAD)
        out += payload
        if self._log_append_time is not None:
            max_timestamp = self._log_append_time
        else:
            max_timestamp = self._max_timestamp
        BATCH_HEADER.pack_into(
            out,
            0,
            self._base_offset,
            len(out) - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC,
            0,  # the CRC, computed below over the finished bytes
            self._attributes,
            self._last_offset - self._base_offset,
            self._base_timestamp,
            max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
        )
        out[CRC_POS:ATTRIBUTES_POS] = crc32c(memoryview(out)[ATTRIBUTES_POS:]).to_bytes(4, "big")
        return out
