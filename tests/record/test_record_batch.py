"""RecordBatch (the zero-copy view), its in-place patching, and iter_batches."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.record import (
    CompressionError,
    CompressionType,
    CorruptRecordError,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    UnsupportedMagicError,
    iter_batches,
    mirror_producer_id,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)


def make_batch(
    base_offset=0, n=3, compression=CompressionType.NONE, value=b"value", **kwargs
) -> bytearray:
    b = RecordBatchBuilder(base_offset, compression=compression, **kwargs)
    for i in range(n):
        b.append(1_000 + i, b"key-%d" % i, value, [("h", b"%d" % i)])
    return b.build()


def fields_except(batch: RecordBatch, *names: str) -> dict:
    return {k: v for k, v in batch.header()._asdict().items() if k not in names}


# --- header fields --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    base_offset=st.integers(0, 2**62),
    leader_epoch=INT32,
    producer_id=INT64,
    producer_epoch=INT16,
    base_sequence=INT32,
    transactional=st.booleans(),
    control=st.booleans(),
    compression=st.sampled_from(list(CompressionType)),
    n=st.integers(1, 5),
)
def test_record_batch_header_fields_read_back_what_the_builder_wrote(
    base_offset,
    leader_epoch,
    producer_id,
    producer_epoch,
    base_sequence,
    transactional,
    control,
    compression,
    n,
):
    if transactional and producer_id == -1:
        producer_id = 0
    data = make_batch(
        base_offset,
        n,
        compression,
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        is_control=control,
    )
    batch = RecordBatch(data)
    batch.validate()
    assert batch.base_offset == base_offset
    assert batch.batch_length == len(data) - 12
    assert batch.size_in_bytes == len(data)
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.magic == 2
    assert batch.crc == batch.compute_crc()
    assert batch.last_offset_delta == n - 1
    assert batch.last_offset == base_offset + n - 1
    assert batch.next_offset == base_offset + n
    assert batch.base_timestamp == 1_000
    assert batch.max_timestamp == 1_000 + n - 1
    assert batch.producer_id == producer_id
    assert batch.has_producer_id == (producer_id != -1)
    assert batch.producer_epoch == producer_epoch
    assert batch.base_sequence == base_sequence
    assert batch.record_count == n
    assert batch.compression_type is compression
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.is_transactional == transactional
    assert batch.is_control == control
    assert not batch.has_delete_horizon
    assert batch.delete_horizon_ms == -1
    assert tuple(batch.header()) == struct.unpack_from(">qiibIhiqqqhii", data)


def test_record_batch_attributes_bits_map_to_derived_properties():
    data = make_batch(
        compression=CompressionType.ZSTD,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=5_000,
        producer_id=1,
        is_transactional=True,
        is_control=True,
        delete_horizon_ms=9_000,
    )
    batch = RecordBatch(data)
    assert batch.attributes == 0x04 | 0x08 | 0x10 | 0x20 | 0x40
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.has_delete_horizon and batch.delete_horizon_ms == 9_000
    assert batch.max_timestamp == 5_000


@pytest.mark.parametrize(
    ("base", "delta", "expected"),
    [(-1, 5, -1), (0, 5, 5), (2**31 - 1, 0, 2**31 - 1), (2**31 - 2, 3, 1), (2**31 - 1, 1, 0)],
)
def test_record_batch_last_sequence_wraps_past_int32_max(base, delta, expected):
    data = make_batch(n=1, producer_id=7, producer_epoch=0, base_sequence=base)
    struct.pack_into(">i", data, 23, delta)  # last offset delta; the CRC is irrelevant here
    assert RecordBatch(data).last_sequence == expected


def test_record_batch_view_is_zero_copy_and_ignores_bytes_after_the_batch():
    data = make_batch() + b"next batch starts here"
    batch = RecordBatch(data)
    assert batch.size_in_bytes == len(data) - len(b"next batch starts here")
    assert batch.buffer.obj is data  # a view of the caller's buffer, not a copy
    assert batch.payload.obj is data
    batch.validate()


# --- CRC ------------------------------------------------------------------------------------


def test_record_batch_crc_detects_every_single_bit_flip_in_the_covered_region():
    data = make_batch(n=2)
    assert RecordBatch(data).is_valid_crc()
    # Bytes 17..20 are the CRC itself, 21..end what it covers: every flip must be caught.
    for pos in range(17, len(data)):
        for bit in range(8):
            corrupt = bytearray(data)
            corrupt[pos] ^= 1 << bit
            batch = RecordBatch(corrupt)
            assert not batch.is_valid_crc(), (pos, bit)
            with pytest.raises(CorruptRecordError, match="stored crc"):
                batch.validate()


def test_record_batch_crc_does_not_cover_base_offset_or_partition_leader_epoch():
    data = make_batch()
    for pos in [*range(0, 8), *range(12, 16)]:
        for bit in range(8):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            assert RecordBatch(flipped).is_valid_crc(), (pos, bit)


def test_record_batch_validate_refuses_an_unknown_compression_id():
    data = make_batch()
    struct.pack_into(">h", data, 21, 5)
    batch = RecordBatch(data)
    struct.pack_into(">I", data, 17, batch.compute_crc())
    with pytest.raises(CompressionError, match="unknown compression type id 5"):
        batch.validate()
    with pytest.raises(CompressionError):
        _ = batch.compression_type


def test_record_batch_validate_refuses_a_negative_record_count():
    data = make_batch()
    struct.pack_into(">i", data, 57, -3)
    batch = RecordBatch(data)
    struct.pack_into(">I", data, 17, batch.compute_crc())
    with pytest.raises(CorruptRecordError, match="negative record count"):
        batch.validate()


# --- patching -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(offset=INT64, compression=st.sampled_from(list(CompressionType)))
def test_record_batch_set_base_offset_keeps_the_crc_and_other_fields(offset, compression):
    data = make_batch(compression=compression, partition_leader_epoch=4)
    batch = RecordBatch(data)
    before_crc, before = batch.crc, fields_except(batch, "base_offset")
    batch.set_base_offset(offset)
    assert batch.base_offset == offset
    assert batch.crc == before_crc and batch.is_valid_crc()
    assert fields_except(batch, "base_offset") == before
    assert [r.offset_delta for r in batch.records()] == [0, 1, 2]
    assert [r.offset for r in batch.records()] == [offset, offset + 1, offset + 2]


@settings(max_examples=40, deadline=None)
@given(epoch=INT32)
def test_record_batch_set_partition_leader_epoch_keeps_the_crc_and_other_fields(epoch):
    data = make_batch()
    batch = RecordBatch(data)
    before_crc, before = batch.crc, fields_except(batch, "partition_leader_epoch")
    batch.set_partition_leader_epoch(epoch)
    assert batch.partition_leader_epoch == epoch
    assert batch.crc == before_crc and batch.is_valid_crc()
    assert fields_except(batch, "partition_leader_epoch") == before


@settings(max_examples=40, deadline=None)
@given(pid=INT64, compression=st.sampled_from(list(CompressionType)))
def test_record_batch_set_producer_id_recomputes_the_crc_and_keeps_other_fields(pid, compression):
    data = make_batch(compression=compression, producer_id=12, producer_epoch=3, base_sequence=9)
    batch = RecordBatch(data)
    before = fields_except(batch, "producer_id", "crc")
    records = list(batch.records())
    batch.set_producer_id(pid)
    assert batch.producer_id == pid
    batch.validate()
    assert fields_except(batch, "producer_id", "crc") == before
    assert list(batch.records()) == records


def test_record_batch_set_producer_id_changes_only_the_id_and_crc_bytes():
    data = make_batch(producer_id=12, producer_epoch=3, base_sequence=9)
    original = bytes(data)
    RecordBatch(data).set_producer_id(-14)
    changed = {i for i in range(len(data)) if data[i] != original[i]}
    assert changed <= set(range(17, 21)) | set(range(43, 51))


def test_record_batch_set_max_timestamp_switches_to_log_append_time():
    data = make_batch()
    batch = RecordBatch(data)
    batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 77_000)
    batch.validate()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 77_000
    assert {r.timestamp for r in batch.records()} == {77_000}
    same = bytes(data)
    batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 77_000)  # no change: no rewrite
    assert bytes(data) == same


def test_record_batch_set_max_timestamp_keeps_the_other_attributes():
    data = make_batch(
        compression=CompressionType.GZIP, producer_id=7, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    batch = RecordBatch(data)
    before = batch.attributes
    batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 77_000)
    batch.validate()
    assert batch.attributes == before | 0x08  # only the timestamp-type bit (3) changed
    assert batch.compression_type is CompressionType.GZIP and batch.is_transactional


def test_record_batch_set_max_timestamp_rewrites_when_either_field_changes():
    # Only the max timestamp changes (the type stays CreateTime).
    batch = RecordBatch(make_batch())
    batch.set_max_timestamp(TimestampType.CREATE_TIME, 5_000)
    batch.validate()
    assert (batch.timestamp_type, batch.max_timestamp) == (TimestampType.CREATE_TIME, 5_000)
    # Only the type changes (the max timestamp stays).
    batch = RecordBatch(make_batch())
    batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, batch.max_timestamp)
    batch.validate()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME


def test_record_batch_patching_a_read_only_buffer_raises_type_error():
    batch = RecordBatch(bytes(make_batch()))
    with pytest.raises(TypeError, match="^record batch buffer is read-only; build the view"):
        batch.set_base_offset(1)
    with pytest.raises(TypeError, match="read-only"):
        batch.set_producer_id(1)


# --- D-17 producer-id rewriting -------------------------------------------------------------


@given(pid=st.integers(-(2**63), 2**63 - 2))
def test_mirror_producer_id_is_its_own_inverse(pid):
    assert mirror_producer_id(mirror_producer_id(pid)) == pid


@given(pid=st.integers(0, 2**63 - 2))
def test_mirror_producer_id_maps_real_ids_to_at_most_minus_two(pid):
    assert mirror_producer_id(pid) <= -2


def test_mirror_producer_id_keeps_minus_one_and_maps_the_examples():
    assert mirror_producer_id(-1) == -1
    assert mirror_producer_id(0) == -2
    assert mirror_producer_id(41) == -43
    assert mirror_producer_id(-43) == 41
    with pytest.raises(ValueError, match=f"producer id {2**63 - 1} has no mirrored int64"):
        mirror_producer_id(2**63 - 1)
    with pytest.raises(ValueError, match="producer id -9223372036854775809"):
        mirror_producer_id(-(2**63) - 1)


@settings(max_examples=40, deadline=None)
@given(pid=st.integers(-1, 2**62), compression=st.sampled_from(list(CompressionType)))
def test_record_batch_producer_id_rewrite_round_trips_to_identical_bytes(pid, compression):
    data = make_batch(compression=compression, producer_id=pid, producer_epoch=1, base_sequence=0)
    original = bytes(data)
    batch = RecordBatch(data)
    batch.set_producer_id(mirror_producer_id(batch.producer_id))
    batch.validate()
    assert batch.producer_id == (-1 if pid == -1 else -(pid + 2))
    batch.set_producer_id(mirror_producer_id(batch.producer_id))
    assert bytes(data) == original


# --- framing and magic ----------------------------------------------------------------------


def legacy_message(magic: int) -> bytes:
    """A v0/v1 message: offset, size, crc, magic, attributes, (timestamp,) key -1, value."""
    body = bytes([magic, 0]) + (b"\x00" * 8 if magic == 1 else b"") + b"\xff\xff\xff\xff"
    body += struct.pack(">i", 5) + b"hello"
    return struct.pack(">qiI", 0, 4 + len(body), 0) + body


@pytest.mark.parametrize("magic", [0, 1])
def test_record_batch_refuses_magic_v0_and_v1(magic):
    with pytest.raises(UnsupportedMagicError, match="magic v0/v1 message format is not supp"):
        RecordBatch(legacy_message(magic))
    with pytest.raises(UnsupportedMagicError, match="Kafka 4.x removed it") as info:
        list(iter_batches(make_batch() + legacy_message(magic)))
    assert info.value.error_code == 87  # INVALID_RECORD


@pytest.mark.parametrize("magic, shown", [(3, 3), (0x7F, 127), (0x80, -128), (0xFF, -1)])
def test_record_batch_refuses_unknown_magic(magic, shown):
    data = make_batch()
    data[16] = magic
    # The magic is an int8 on the wire: the message shows it signed, as Kafka would.
    with pytest.raises(CorruptRecordError, match=f"unknown magic {shown}$") as info:
        RecordBatch(data)
    assert not isinstance(info.value, UnsupportedMagicError)
    assert info.value.error_code == 2  # CORRUPT_MESSAGE


def test_record_batch_refuses_truncated_and_undersized_buffers():
    data = make_batch()
    for cut in (0, 16, 17, 60, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            RecordBatch(data[:cut])
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError, match="below the v2 minimum"):
        RecordBatch(short)


def test_iter_batches_walks_concatenated_batches_as_views_of_the_buffer():
    batches = [make_batch(base_offset=10 * i, n=i + 1) for i in range(4)]
    buf = bytearray(b"".join(batches))
    it = iter_batches(buf)
    seen = list(it)
    assert [b.base_offset for b in seen] == [0, 10, 20, 30]
    assert [b.record_count for b in seen] == [1, 2, 3, 4]
    assert it.valid_bytes == len(buf) and it.trailing_bytes == 0
    seen[2].set_base_offset(999)  # patches the caller's buffer in place
    assert struct.unpack_from(">q", buf, len(batches[0]) + len(batches[1]))[0] == 999


def test_iter_batches_stops_cleanly_at_every_truncation_point():
    batches = [make_batch(base_offset=i * 3) for i in range(3)]
    buf = b"".join(batches)
    ends = [sum(len(b) for b in batches[: i + 1]) for i in range(3)]
    for cut in range(len(buf) + 1):
        it = iter_batches(buf[:cut])
        seen = list(it)
        whole = [e for e in ends if e <= cut]
        assert len(seen) == len(whole), cut
        assert it.valid_bytes == (whole[-1] if whole else 0)
        assert it.trailing_bytes == cut - it.valid_bytes


def test_iter_batches_refuses_a_length_no_message_can_have():
    buf = bytearray(make_batch())
    struct.pack_into(">i", buf, 8, 13)
    with pytest.raises(CorruptRecordError, match="below the minimum of 14"):
        list(iter_batches(buf[:12]))  # refused even before the magic is readable
    struct.pack_into(">i", buf, 8, 30)
    with pytest.raises(CorruptRecordError, match="v2 minimum"):
        list(iter_batches(buf))


def test_iter_batches_refuses_a_batch_over_max_batch_size_before_it_arrives():
    data = make_batch()
    assert len(list(iter_batches(data, max_batch_size=len(data)))) == 1
    with pytest.raises(CorruptRecordError, match="exceeds the largest allowed batch"):
        list(iter_batches(data[:20], max_batch_size=len(data) - 1))


def test_iter_batches_on_empty_buffer_yields_nothing():
    it = iter_batches(b"")
    assert list(it) == [] and it.valid_bytes == 0 and it.trailing_bytes == 0


def test_record_batch_names_each_size_limit_exactly_at_its_boundary():
    data = make_batch()
    size = len(data)
    for cut, message in [
        (16, "record batch of 16 bytes is too short to hold a header"),
        (17, "record batch of 17 bytes is shorter than the 61-byte v2 header"),
        (60, "record batch of 60 bytes is shorter than the 61-byte v2 header"),
        (61, f"record batch of {size} bytes is truncated to the 61 bytes available"),
        (size - 1, f"record batch of {size} bytes is truncated to the {size - 1} bytes available"),
    ]:
        with pytest.raises(CorruptRecordError, match=f"^{message}$"):
            RecordBatch(data[:cut])
    header_only = bytearray(data[:61])
    struct.pack_into(">i", header_only, 8, 49)  # the v2 minimum: a header and no records
    assert RecordBatch(header_only).size_in_bytes == 61
    struct.pack_into(">i", header_only, 8, 48)
    with pytest.raises(CorruptRecordError, match="^record batch length 48 is below the v2 mini"):
        RecordBatch(header_only)


def test_iter_batches_names_the_byte_where_a_bad_batch_starts():
    first = make_batch()
    at = len(first)
    for length, message in [
        (13, f"record batch at byte {at} has length 13, below the minimum of 14$"),
        (30, f"record batch at byte {at} has length 30, below the v2 minimum of 49$"),
    ]:
        bad = bytearray(make_batch())
        struct.pack_into(">i", bad, 8, length)
        with pytest.raises(CorruptRecordError, match=f"^{message}"):
            list(iter_batches(first + bad))
    bad = bytearray(make_batch())
    bad[16] = 3
    with pytest.raises(
        CorruptRecordError, match=f"^record batch at byte {at} has unknown magic 3$"
    ):
        list(iter_batches(first + bad))
    limit = len(first) - 1
    with pytest.raises(
        CorruptRecordError,
        match=f"^record batch at byte 0 of {len(first)} bytes exceeds the largest allowed "
        f"batch of {limit} bytes$",
    ):
        list(iter_batches(first, max_batch_size=limit))


def test_record_batch_and_iter_batches_read_any_byte_shaped_buffer():
    import array

    data = bytes(make_batch(base_offset=7)) + bytes(make_batch(base_offset=10))
    one = len(make_batch(base_offset=7))
    signed = memoryview(array.array("b", data))  # format "b": cast to unsigned bytes
    square = memoryview(data).cast("B", shape=[2, len(data) // 2])  # two dimensions
    for view in (signed, square):
        assert RecordBatch(view).base_offset == 7
        assert RecordBatch(view).size_in_bytes == one
        assert [b.base_offset for b in iter_batches(view)] == [7, 10]
        # Views of unsigned bytes, as from any other buffer (a CRC byte above 127 compares).
        assert RecordBatch(view).buffer == data[:one]
        assert [b.buffer for b in iter_batches(view)] == [data[:one], data[one:]]
        assert [b.buffer.format for b in iter_batches(view)] == ["B", "B"]


def test_iter_batches_accepts_each_length_exactly_at_its_minimum():
    # 14 bytes after the length field: the smallest legacy message, so not refused as one;
    # a v2 batch still needs 49 (the v2 minimum names it). A tail of exactly 17 bytes is
    # enough to read the magic.
    buf = bytearray(make_batch())
    struct.pack_into(">i", buf, 8, 14)
    with pytest.raises(CorruptRecordError, match="below the v2 minimum of 49$"):
        list(iter_batches(buf[:17]))
    header_only = bytearray(make_batch()[:61])
    struct.pack_into(">i", header_only, 8, 49)
    assert [b.size_in_bytes for b in iter_batches(header_only)] == [61]


def test_iter_batches_reads_the_magic_of_the_batch_it_is_at():
    # The byte 16 before the second batch (inside the first one's value) is a 2: only the
    # second batch's own magic byte may decide.
    b = RecordBatchBuilder(0)
    b.append(1_000, None, b"\x02" * 40)
    first = b.build()
    assert first[len(first) - 16] == 2
    bad = make_batch()
    bad[16] = 3
    with pytest.raises(CorruptRecordError, match=f"at byte {len(first)} has unknown magic 3$"):
        list(iter_batches(first + bad))


@pytest.mark.parametrize(
    "pos, fmt, value, error, message",
    [
        (None, None, None, CorruptRecordError, "is corrupt"),  # a flipped bit: the CRC
        (21, ">h", 5, CompressionError, "has unknown compression type id 5"),
        (57, ">i", -3, CorruptRecordError, "has a negative record count -3"),
    ],
)
def test_record_batch_validate_names_the_batch_by_its_base_offset(pos, fmt, value, error, message):
    data = make_batch(base_offset=1234)
    if pos is None:
        data[-1] ^= 1
    else:
        struct.pack_into(fmt, data, pos, value)
        struct.pack_into(">I", data, 17, RecordBatch(data).compute_crc())
    with pytest.raises(error, match=f"^record batch at offset 1234 {message}"):
        RecordBatch(data).validate()
