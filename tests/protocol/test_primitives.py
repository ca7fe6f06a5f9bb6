"""Tests for kcore.protocol.primitives: varints, strings, bytes, array counts.

Expected encodings are written out as bytes (from the Kafka protocol guide and Kafka's
``ByteUtils``), so an encoder bug cannot hide behind a decoder with the same bug. Length checks
that live in the generated readers (negative lengths, nulls on non-nullable fields) are tested
through real messages: bytes in, ``MalformedMessage`` out.
"""

from __future__ import annotations

import struct
import tracemalloc
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kcore.protocol import messages as m
from kcore.protocol.primitives import (
    MalformedMessage,
    check_array_count,
    read_bytes_body,
    read_records_body,
    read_string_body,
    read_uuid,
    read_uvarint,
    read_varint,
    read_varlong,
    skip_tagged,
    uvarint_bytes,
    varint_size,
    write_uvarint,
    write_varint,
    write_varlong,
    zigzag_decode,
    zigzag_encode,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Values at every change of encoded length, and the ends of each range.
INT32_BOUNDARIES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, -8193, INT32_MAX, INT32_MIN]
INT64_BOUNDARIES = INT32_BOUNDARIES + [INT32_MAX + 1, INT32_MIN - 1, INT64_MAX, INT64_MIN]
UINT32_BOUNDARIES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1]

SETTINGS = settings(max_examples=300, deadline=None)


def mv(data: bytes) -> memoryview:
    return memoryview(data)


def varint(n: int) -> bytes:
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


def varlong(n: int) -> bytes:
    out = bytearray()
    write_varlong(out, n)
    return bytes(out)


# --- zig-zag ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, 0),
        (-1, 1),
        (1, 2),
        (-2, 3),
        (2, 4),
        (INT32_MAX, 2**32 - 2),
        (INT32_MIN, 2**32 - 1),
        (INT64_MAX, 2**64 - 2),
        (INT64_MIN, 2**64 - 1),
    ],
)
def test_zigzag_encode_matches_kafka_table(value, encoded):
    assert zigzag_encode(value) == encoded
    assert zigzag_decode(encoded) == value


@SETTINGS
@given(st.integers(INT64_MIN, INT64_MAX))
def test_zigzag_round_trips_every_int64(n):
    z = zigzag_encode(n)
    assert 0 <= z < 2**64
    assert zigzag_decode(z) == n


# --- varint / varlong / unsigned varint round trips -------------------------------------------


@SETTINGS
@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trips_every_int32(n):
    data = varint(n) + b"\xaa"  # a trailing byte the reader must not consume
    value, pos = read_varint(mv(data), 0)
    assert value == n
    assert pos == len(data) - 1 == varint_size(n)
    assert pos <= 5


@pytest.mark.parametrize("n", INT32_BOUNDARIES)
def test_varint_round_trips_boundary_values(n):
    data = varint(n)
    assert read_varint(mv(data), 0) == (n, len(data))
    assert len(data) == varint_size(n)


@SETTINGS
@given(st.integers(INT64_MIN, INT64_MAX))
@example(INT64_MIN)
@example(INT64_MAX)
def test_varlong_round_trips_every_int64(n):
    data = b"\x00" + varlong(n)  # read at an offset, not only at 0
    value, pos = read_varlong(mv(data), 1)
    assert value == n
    assert pos == len(data) == 1 + varint_size(n)
    assert pos - 1 <= 10


@pytest.mark.parametrize("n", INT64_BOUNDARIES)
def test_varlong_round_trips_boundary_values(n):
    data = varlong(n)
    assert read_varlong(mv(data), 0) == (n, len(data))


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trips_every_uint32(n):
    out = bytearray()
    write_uvarint(out, n)
    assert bytes(out) == uvarint_bytes(n)
    assert read_uvarint(mv(bytes(out)), 0) == (n, len(out))


@pytest.mark.parametrize("n", UINT32_BOUNDARIES)
def test_uvarint_round_trips_boundary_values(n):
    data = uvarint_bytes(n)
    assert read_uvarint(mv(data), 0) == (n, len(data))
    # One byte per 7 bits: 0..127 in one byte, 128..16383 in two, and so on.
    assert len(data) == max(1, (n.bit_length() + 6) // 7)


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**32 - 1, "ffffffff0f")],
)
def test_uvarint_bytes_match_leb128(n, encoded):
    assert uvarint_bytes(n).hex() == encoded


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001"), (INT32_MIN, "ffffffff0f")],
)
def test_varint_bytes_match_kafka_byteutils(n, encoded):
    assert varint(n).hex() == encoded


@pytest.mark.parametrize("n", [INT32_MAX + 1, INT32_MIN - 1])
def test_write_varint_refuses_values_outside_int32(n):
    with pytest.raises(ValueError):
        write_varint(bytearray(), n)


@pytest.mark.parametrize("n", [INT64_MAX + 1, INT64_MIN - 1])
def test_write_varlong_refuses_values_outside_int64(n):
    with pytest.raises(ValueError):
        write_varlong(bytearray(), n)


def test_uvarint_bytes_refuses_negative_values():
    with pytest.raises(ValueError):
        uvarint_bytes(-1)


def test_varint_non_minimal_encoding_within_five_bytes_is_accepted():
    # Kafka's ByteUtils.readVarint accepts padding continuation bytes; so do we.
    assert read_uvarint(mv(bytes.fromhex("8000")), 0) == (0, 2)
    assert read_varint(mv(bytes.fromhex("8280808000")), 0) == (1, 5)


# --- overlong and truncated varints ------------------------------------------------------------


@pytest.mark.parametrize("reader", [read_uvarint, read_varint])
def test_varint_longer_than_five_bytes_is_refused(reader):
    with pytest.raises(MalformedMessage, match="longer than 5"):
        reader(mv(b"\x80" * 5 + b"\x00"), 0)


def test_varlong_longer_than_ten_bytes_is_refused():
    with pytest.raises(MalformedMessage, match="longer than 10"):
        read_varlong(mv(b"\x80" * 10 + b"\x00"), 0)


@pytest.mark.parametrize("reader", [read_uvarint, read_varint])
def test_varint_five_bytes_above_32_bits_is_refused(reader):
    # ff ff ff ff 1f carries 35 bits: fits the byte budget, not the type.
    with pytest.raises(MalformedMessage, match="out of range"):
        reader(mv(bytes.fromhex("ffffffff1f")), 0)


def test_varlong_ten_bytes_above_64_bits_is_refused():
    with pytest.raises(MalformedMessage, match="out of range"):
        read_varlong(mv(b"\xff" * 9 + b"\x7f"), 0)


@pytest.mark.parametrize("reader", [read_uvarint, read_varint, read_varlong])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x81\x82\x83\x84"])
def test_varint_truncated_input_is_malformed(reader, data):
    with pytest.raises(MalformedMessage, match="truncated"):
        reader(mv(data), 0)


@SETTINGS
@given(st.integers(INT64_MIN, INT64_MAX), st.data())
def test_varlong_every_strict_prefix_is_malformed(n, data):
    encoded = varlong(n)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedMessage):
        read_varlong(mv(encoded[:cut]), 0)


def test_uvarint_read_past_end_position_is_malformed():
    with pytest.raises(MalformedMessage):
        read_uvarint(mv(b"\x01"), 1)


# --- strings, bytes, records, uuids ------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"\xff",  # never valid in UTF-8
        b"\xc3",  # a lead byte with no continuation
        b"\xc0\x80",  # overlong NUL (Java's "modified UTF-8")
        b"\xed\xa0\x80",  # a lone surrogate
        b"ab\x80cd",  # a stray continuation byte
    ],
)
def test_string_invalid_utf8_is_malformed(data):
    with pytest.raises(MalformedMessage, match="UTF-8"):
        read_string_body(mv(data), 0, len(data))


def test_string_valid_utf8_decodes_and_advances():
    text = "topic-é€𝄞"
    data = b"xx" + text.encode() + b"yy"
    assert read_string_body(mv(data), 2, len(text.encode())) == (text, len(data) - 2)


@pytest.mark.parametrize("reader", [read_string_body, read_bytes_body, read_records_body])
def test_length_past_the_end_is_malformed(reader):
    with pytest.raises(MalformedMessage, match="past the end"):
        reader(mv(b"abcdef"), 2, 5)


def test_records_body_is_a_view_into_the_frame():
    frame = bytes(range(32))
    view, pos = read_records_body(mv(frame), 4, 8)
    assert pos == 12
    assert view.obj is frame
    assert bytes(view) == frame[4:12]


def test_bytes_body_is_an_independent_copy():
    frame = bytearray(b"0123456789")
    value, _ = read_bytes_body(mv(frame), 2, 3)
    frame[2] = ord("X")
    assert value == b"234"


def test_uuid_reads_sixteen_raw_bytes():
    u = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert read_uuid(mv(b"\0" + u.bytes), 1) == (u, 17)


def test_uuid_truncated_is_malformed():
    with pytest.raises(MalformedMessage, match="truncated uuid"):
        read_uuid(mv(b"\0" * 15), 0)


def test_skip_tagged_past_the_end_is_malformed():
    assert skip_tagged(mv(b"abcd"), 1, 3) == 4
    with pytest.raises(MalformedMessage, match="tagged field"):
        skip_tagged(mv(b"abcd"), 1, 4)


# --- lengths in real messages: nulls, negatives below -1 ---------------------------------------

I16, I32 = struct.Struct(">h"), struct.Struct(">i")


def request_header_v1(client_id_length: bytes) -> bytes:
    return struct.pack(">hhi", 3, 1, 77) + client_id_length


def test_nullable_string_length_minus_one_is_null():
    header = m.RequestHeader.decode(request_header_v1(I16.pack(-1)), 1)
    assert header.client_id is None


@pytest.mark.parametrize("length", [-2, -1000, -32768])
def test_nullable_string_length_below_minus_one_is_malformed(length):
    with pytest.raises(MalformedMessage, match="negative length"):
        m.RequestHeader.decode(request_header_v1(I16.pack(length)), 1)


@pytest.mark.parametrize("length", [-1, -2])
def test_non_nullable_string_negative_length_is_malformed(length):
    # MetadataRequest v1: Topics (nullable array) of {Name: non-nullable string}.
    with pytest.raises(MalformedMessage, match="non-nullable Name"):
        m.MetadataRequest.decode(I32.pack(1) + I16.pack(length), 1)


def test_compact_non_nullable_string_null_is_malformed():
    # ApiVersionsRequest v3: ClientSoftwareName is a compact string; 0 encodes null.
    with pytest.raises(MalformedMessage, match="non-nullable ClientSoftwareName"):
        m.ApiVersionsRequest.decode(b"\x00\x01\x00", 3)


def test_string_length_past_the_end_in_a_message_is_malformed():
    with pytest.raises(MalformedMessage, match="past the end"):
        m.MetadataRequest.decode(I32.pack(1) + I16.pack(10) + b"abc", 1)


def test_string_invalid_utf8_in_a_message_is_malformed():
    with pytest.raises(MalformedMessage, match="UTF-8"):
        m.MetadataRequest.decode(I32.pack(1) + I16.pack(2) + b"\xc3\x28", 1)


@pytest.mark.parametrize("count", [-2, INT32_MIN])
def test_nullable_array_count_below_minus_one_is_malformed(count):
    with pytest.raises(MalformedMessage, match="negative length"):
        m.MetadataRequest.decode(I32.pack(count), 1)


def test_nullable_array_count_minus_one_is_null():
    assert m.MetadataRequest.decode(I32.pack(-1), 1).topics is None


@pytest.mark.parametrize("length", [-1, -2])
def test_non_nullable_bytes_negative_length_is_malformed(length):
    with pytest.raises(MalformedMessage, match="non-nullable AuthBytes"):
        m.SaslAuthenticateRequest.decode(I32.pack(length), 0)


def test_bytes_length_past_the_end_in_a_message_is_malformed():
    with pytest.raises(MalformedMessage, match="past the end"):
        m.SaslAuthenticateRequest.decode(I32.pack(INT32_MAX) + b"abc", 0)


# --- array counts ------------------------------------------------------------------------------


def test_check_array_count_accepts_counts_the_bytes_can_hold():
    check_array_count(mv(b"\0" * 10), 4, 6)
    check_array_count(mv(b""), 0, 0)


@pytest.mark.parametrize("count", [7, 2**31 - 1, 2**32 - 2])
def test_check_array_count_refuses_counts_the_bytes_cannot_hold(count):
    with pytest.raises(MalformedMessage, match="cannot fit"):
        check_array_count(mv(b"\0" * 10), 4, count)


def _peak_bytes_while(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _expect_refused_count(decode, data, version):
    def run():
        # "cannot fit": refused by the up-front count check, not by running out of bytes.
        with pytest.raises(MalformedMessage, match="cannot fit"):
            decode(data, version)

    return run


@pytest.mark.parametrize(
    ("cls", "data", "version"),
    [
        # int32 count of structs (MetadataRequest v1 Topics)
        (m.MetadataRequest, I32.pack(INT32_MAX) + b"\0" * 64, 1),
        # compact count 2**32 - 2 of structs (MetadataRequest v12 Topics)
        (m.MetadataRequest, bytes.fromhex("ffffffff0f") + b"\0" * 64, 12),
        # int32 count of packed int32s (OffsetFetchRequest v1 Topics[0].PartitionIndexes)
        (
            m.OffsetFetchRequest,
            I16.pack(1) + b"g" + I32.pack(1) + I16.pack(1) + b"t" + I32.pack(INT32_MAX),
            1,
        ),
    ],
    ids=["int32-struct-array", "compact-struct-array", "int32-packed-int32-array"],
)
def test_forged_huge_array_count_is_refused_without_allocating(cls, data, version):
    cls.decode(cls().encode(version), version)  # build the reader outside the measurement
    peak = _peak_bytes_while(_expect_refused_count(cls.decode, data, version))
    # 2**31 elements would need gigabytes; refusing them needs a few small objects.
    assert peak < 64 * 1024, f"decoding a forged count allocated {peak} bytes"
