"""RecordBatchBuilder -> RecordBatch -> records round trips, and corrupt-record detection."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.protocol.primitives import write_varint
from kcore.record import (
    BatchHeader,
    CompressionType,
    CorruptRecordError,
    DecompressionLimitExceeded,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    compress,
    iter_batches,
)

# Header keys are UTF-8 strings; lone surrogates cannot be encoded, as in Java.
header_keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
nullable_bytes = st.none() | st.binary(max_size=64)
records_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**45) | st.just(-1),  # timestamp (ms), or NO_TIMESTAMP
        nullable_bytes,  # key
        st.none() | st.binary(max_size=300),  # value
        st.lists(st.tuples(header_keys, nullable_bytes), max_size=3),  # headers
        st.integers(1, 4),  # offset step: gaps appear after compaction
    ),
    min_size=1,
    max_size=12,
)


def build(records, base_offset=0, **kwargs):
    b = RecordBatchBuilder(base_offset, **kwargs)
    offset = base_offset - 1
    for ts, key, value, headers, step in records:
        offset += step
        assert b.append(ts, key, value, headers, offset=offset) == offset
    return b.build()


@settings(max_examples=60, deadline=None)
@given(
    records=records_strategy,
    base_offset=st.integers(0, 2**40),
    compression=st.sampled_from(list(CompressionType)),
)
def test_record_batch_builder_round_trips_records_for_every_codec(
    records, base_offset, compression
):
    data = build(records, base_offset, compression=compression)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression_type is compression
    decoded = list(batch.records())
    assert len(decoded) == len(records) == batch.record_count
    base_ts = records[0][0]
    offset = base_offset - 1
    for r, (ts, key, value, headers, step) in zip(decoded, records):
        offset += step
        assert r.offset == offset and r.offset_delta == offset - base_offset
        assert r.timestamp == ts and r.timestamp_delta == ts - base_ts
        assert (r.key, r.value, r.headers) == (key, value, headers)
    assert batch.last_offset == offset
    assert batch.base_timestamp == base_ts
    assert batch.max_timestamp == max(max(t for t, *_ in records), -1)


def test_record_batch_builder_default_offsets_follow_the_base_offset():
    b = RecordBatchBuilder(100)
    assert [b.append(1, None, b"v") for _ in range(3)] == [100, 101, 102]
    assert b.next_offset == 103 and b.record_count == 3
    assert [r.offset for r in RecordBatch(b.build()).records()] == [100, 101, 102]


def test_record_batch_builder_compresses_compressible_records_for_every_codec():
    records = [(1_000 + i, b"key", b"the same value again " * 20, [], 1) for i in range(50)]
    plain = build(records)
    for codec in list(CompressionType)[1:]:
        data = build(records, compression=codec)
        assert len(data) < len(plain) // 4, codec
        assert [r.value for r in RecordBatch(data).records()] == [r[2] for r in records]


def test_record_batch_builder_log_append_time_gives_every_record_the_append_time():
    b = RecordBatchBuilder(0, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=123_456)
    b.append(5, None, b"a")
    b.append(9, None, b"b")
    batch = RecordBatch(b.build())
    assert batch.max_timestamp == 123_456 and batch.base_timestamp == 5
    assert [(r.timestamp, r.timestamp_delta) for r in batch.records()] == [
        (123_456, 0),
        (123_456, 4),
    ]


def test_record_batch_builder_delete_horizon_is_the_base_timestamp():
    b = RecordBatchBuilder(0, delete_horizon_ms=50_000)
    b.append(49_000, b"k", None)
    batch = RecordBatch(b.build())
    assert batch.has_delete_horizon and batch.base_timestamp == 50_000
    (r,) = batch.records()
    assert r.timestamp == 49_000 and r.timestamp_delta == -1_000 and r.value is None


def test_record_batch_builder_refuses_what_kafka_refuses():
    with pytest.raises(ValueError, match="at least one record"):
        RecordBatchBuilder(0).build()
    with pytest.raises(ValueError, match="producer id"):
        RecordBatchBuilder(0, is_transactional=True)
    with pytest.raises(ValueError, match="log_append_time"):
        RecordBatchBuilder(0, timestamp_type=TimestampType.LOG_APPEND_TIME)
    b = RecordBatchBuilder(10)
    b.append(0, None, None, offset=12)
    with pytest.raises(ValueError, match="not above the last offset"):
        b.append(0, None, None, offset=12)
    with pytest.raises(ValueError, match="int32"):
        b.append(0, None, None, offset=10 + 2**31)
    with pytest.raises(ValueError, match="int16"):
        RecordBatchBuilder(0, producer_epoch=2**15)


# --- corrupt records ------------------------------------------------------------------------


def batch_with_payload(payload: bytes, count: int, codec=CompressionType.NONE) -> bytearray:
    """A batch whose records section is exactly ``payload`` (compressed with ``codec``)."""
    body = compress(codec, payload)
    data = bytearray(61) + body
    header = BatchHeader(
        base_offset=0,
        batch_length=len(data) - 12,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=int(codec),
        last_offset_delta=0,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=count,
    )
    struct.pack_into(">qiibIhiqqqhii", data, 0, *header)
    batch = RecordBatch(data)
    struct.pack_into(">I", data, 17, batch.compute_crc())
    return data


def record_bytes(body: bytes) -> bytes:
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def test_records_parse_a_minimal_record():
    # attributes 0, timestampDelta 0, offsetDelta 0, key null (-1 -> 0x01), value of 1 byte
    # (0x02) "x", no headers: the smallest sensible record.
    data = batch_with_payload(record_bytes(bytes([0, 0, 0, 0x01, 0x02, 0x78, 0])), 1)
    (r,) = RecordBatch(data).records()
    assert (r.key, r.value, r.headers) == (None, b"x", [])


@pytest.mark.parametrize(
    ("payload", "count", "message"),
    [
        # length says 8 but the fields take 7
        (bytes([0x10, 0, 0, 0, 0x01, 0x02, 0x78, 0, 0]), 1, "fields take 7"),
        # value length 5 runs past the end
        (record_bytes(bytes([0, 0, 0, 0x01, 0x0A, 0x78, 0])), 1, "runs past the end"),
        # key length -2 is not a length
        (record_bytes(bytes([0, 0, 0, 0x03, 0x02, 0x78, 0])), 1, "invalid length -2"),
        # a header with a null key
        (record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01])), 1, "header key is null"),
        # a negative header count
        (record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0x01])), 1, "invalid header count"),
        # two records claimed, one present
        (record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0])), 2, "corrupt"),
        # bytes left after the last record
        (record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0])) + b"\x00", 1, "bytes after its 1"),
        # a varint that never ends
        (b"\xff" * 12, 1, "varint"),
        # more records than bytes
        (record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0])), 1000, "claims 1000 records"),
    ],
)
def test_records_corrupt_record_raises_corrupt_record_error(payload, count, message):
    batch = RecordBatch(batch_with_payload(payload, count))
    batch.validate()  # the CRC is fine: the corruption was there when it was computed
    with pytest.raises(CorruptRecordError, match=message):
        list(batch.records())


def test_records_of_a_compressed_batch_are_bounded_by_max_size():
    payload = b"".join(record_bytes(bytes([0, 0, 0, 0x01, 0x01, 0])) for _ in range(10_000))
    batch = RecordBatch(batch_with_payload(payload, 10_000, CompressionType.GZIP))
    assert len(list(batch.records())) == 10_000
    with pytest.raises(DecompressionLimitExceeded):
        list(batch.records(max_size=len(payload) - 1))


def test_records_are_decoded_only_when_asked():
    # A batch with a garbage payload frames and validates; only records() notices.
    data = batch_with_payload(b"\xff" * 40, 3)
    (batch,) = iter_batches(data)
    batch.validate()
    with pytest.raises(CorruptRecordError):
        list(batch.records())


@settings(max_examples=25, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.integers(0, 2**45),
            st.none() | st.binary(min_size=60, max_size=20_000),  # 1-, 2- and 3-byte lengths
            st.none() | st.binary(max_size=20_000),
            st.lists(
                st.tuples(
                    st.text(st.characters(blacklist_categories=("Cs",)), min_size=30, max_size=90),
                    st.none() | st.binary(max_size=200),  # past the one-byte fast path
                ),
                max_size=2,
            ),
            st.integers(1, 6000),  # offset deltas past two varint bytes
        ),
        min_size=1,
        max_size=6,
    )
)
def test_records_decode_long_varints_and_large_headers(records):
    # The decoder reads varints of one and two bytes inline and longer ones apart: both paths.
    decoded = list(RecordBatch(build(records)).records())
    offset = -1
    for r, (ts, key, value, headers, step) in zip(decoded, records, strict=True):
        offset += step
        assert (r.offset, r.timestamp, r.key, r.value, r.headers) == (
            offset,
            ts,
            key,
            value,
            headers,
        )
