"""Compression codecs: round trips, Kafka's framings, corrupt input, decompression bombs."""

import gzip
import struct
import tracemalloc

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.record import (
    CompressionError,
    CompressionType,
    DecompressionLimitExceeded,
    compress,
    decompress,
)

CODECS = [c for c in CompressionType if c is not CompressionType.NONE]


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000) | st.binary(max_size=50).map(lambda b: b * 200))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_compression_round_trips_and_accepts_output_exactly_at_max_size(codec, data):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, packed, max_size=len(data)) == data
    if data:
        with pytest.raises(DecompressionLimitExceeded):
            decompress(codec, packed, max_size=len(data) - 1)


def test_compression_none_passes_data_through():
    data = memoryview(b"abc")
    assert decompress(CompressionType.NONE, data) is data
    assert compress(CompressionType.NONE, data) == b"abc"


def test_compression_unknown_codec_id_raises_compression_error():
    with pytest.raises(CompressionError, match="unknown compression type id 5"):
        decompress(5, b"x")
    with pytest.raises(CompressionError, match="unknown compression type id 7"):
        compress(7, b"x")


def test_compression_accepts_memoryview_input_for_every_codec():
    data = b"0123456789" * 1000
    for codec in CODECS:
        packed = memoryview(bytearray(b"hdr" + compress(codec, data)))[3:]
        assert decompress(codec, packed) == data, codec


# --- snappy: xerial framing and raw ---------------------------------------------------------

# Raw snappy blocks written by hand: uvarint uncompressed length, then one literal element
# whose tag byte is (length - 1) << 2 (element type 00 = literal), then the bytes.
RAW_HELLO = bytes([0x05, 0x10]) + b"hello"  # 5 bytes, tag (5-1)<<2 = 0x10
RAW_WORLD = bytes([0x06, 0x14]) + b" world"  # 6 bytes, tag (6-1)<<2 = 0x14
XERIAL_HELLO_WORLD = b"".join(
    [
        b"\x82SNAPPY\x00",  # xerial magic: marker byte -126, "SNAPPY", NUL
        b"\x00\x00\x00\x01",  # version 1
        b"\x00\x00\x00\x01",  # minimum compatible version 1
        b"\x00\x00\x00\x07",  # chunk 1: 7 compressed bytes
        RAW_HELLO,
        b"\x00\x00\x00\x08",  # chunk 2: 8 compressed bytes
        RAW_WORLD,
    ]
)


def test_compression_snappy_decodes_a_hand_made_xerial_stream():
    assert decompress(CompressionType.SNAPPY, XERIAL_HELLO_WORLD) == b"hello world"


def test_compression_snappy_ignores_xerial_version_fields_written_little_endian():
    # Some producers write version/compat little-endian; snappy-java does not check them either.
    stream = bytearray(XERIAL_HELLO_WORLD)
    stream[8:16] = b"\x01\x00\x00\x00\x01\x00\x00\x00"
    assert decompress(CompressionType.SNAPPY, stream) == b"hello world"


def test_compression_snappy_decodes_plain_raw_snappy():
    assert decompress(CompressionType.SNAPPY, RAW_HELLO) == b"hello"
    assert decompress(CompressionType.SNAPPY, snappy.compress(b"x" * 100_000)) == b"x" * 100_000


def test_compression_snappy_encodes_xerial_frames_of_32_kib_like_java():
    data = bytes(range(256)) * 400  # 102,400 bytes: chunks of 32768, 32768, 32768, 4096
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    pos, sizes = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        sizes.append(len(snappy.uncompress(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert sizes == [32768, 32768, 32768, 4096]


def test_compression_snappy_xerial_header_with_no_chunks_is_empty():
    assert compress(CompressionType.SNAPPY, b"") == XERIAL_HELLO_WORLD[:16]
    assert decompress(CompressionType.SNAPPY, XERIAL_HELLO_WORLD[:16] + b"") == b""


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_HELLO_WORLD[:-1],  # last chunk cut short
        XERIAL_HELLO_WORLD[:18],  # cut inside a chunk length
        XERIAL_HELLO_WORLD[:16] + b"\xff\xff\xff\xff" + RAW_HELLO,  # negative chunk length
        XERIAL_HELLO_WORLD[:16] + b"\x00\x00\x00\x07" + b"\x09\x10hello",  # lying preamble
        b"\x80\x80\x80\x80\x80\x80",  # raw: preamble varint that never ends
    ],
)
def test_compression_snappy_corrupt_stream_raises_compression_error(stream):
    with pytest.raises(CompressionError):
        decompress(CompressionType.SNAPPY, stream)


# --- other framings -------------------------------------------------------------------------


def test_compression_gzip_reads_concatenated_members_and_refuses_trailing_garbage():
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(CompressionType.GZIP, two) == b"abcdef"
    with pytest.raises(CompressionError, match="trailing garbage"):
        decompress(CompressionType.GZIP, gzip.compress(b"abc") + b"junk")


def test_compression_gzip_writes_one_deterministic_member():
    packed = compress(CompressionType.GZIP, b"abc" * 100)
    assert packed[:4] == b"\x1f\x8b\x08\x00" and packed == compress(
        CompressionType.GZIP, b"abc" * 100
    )
    assert gzip.decompress(packed) == b"abc" * 100


def test_compression_lz4_writes_kafkas_frame_and_reads_concatenated_frames():
    packed = compress(CompressionType.LZ4, b"q" * 200_000)
    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False and info["content_checksum"] is False
    assert info["block_size_id"] == lz4.frame.BLOCKSIZE_MAX64KB
    assert info["content_size"] == 0  # not stored, as KafkaLZ4BlockOutputStream writes
    two = lz4.frame.compress(b"ab", store_size=True) + packed
    assert decompress(CompressionType.LZ4, two) == b"ab" + b"q" * 200_000


def test_compression_zstd_reads_concatenated_and_unsized_frames():
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(b"z" * 300_000)
    two = unsized + zstandard.ZstdCompressor().compress(b"tail")
    assert decompress(CompressionType.ZSTD, two) == b"z" * 300_000 + b"tail"


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_compression_truncated_or_garbage_input_raises_compression_error(codec):
    packed = compress(codec, bytes(range(256)) * 64)
    for bad in (packed[:-1], packed[: len(packed) // 2], b"definitely not compressed data"):
        with pytest.raises(CompressionError) as info:
            decompress(codec, bad)
        assert info.value.error_code == 2  # CORRUPT_MESSAGE
    if codec is not CompressionType.SNAPPY:  # b"" is a valid raw snappy block of nothing
        with pytest.raises(CompressionError):
            decompress(codec, b"")


# --- decompression bombs --------------------------------------------------------------------

BOMB_SIZE = 32 * 1024 * 1024
LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def bombs():
    zeros = bytes(BOMB_SIZE)
    made = {codec: compress(codec, zeros, level=1) for codec in CODECS if codec != 2}
    made[CompressionType.SNAPPY] = compress(CompressionType.SNAPPY, zeros)
    made["raw snappy"] = snappy.compress(zeros)
    made["sized zstd"] = zstandard.ZstdCompressor(write_content_size=True).compress(zeros)
    made["sized lz4"] = lz4.frame.compress(zeros, store_size=True)
    return made


@pytest.mark.parametrize(
    "kind",
    [*CODECS, "raw snappy", "sized zstd", "sized lz4"],
    ids=lambda k: getattr(k, "name", k),
)
def test_compression_decompression_bomb_is_refused_without_allocating_its_size(bombs, kind):
    codec = {"raw snappy": 2, "sized zstd": 4, "sized lz4": 3}.get(kind, kind)
    packed = bombs[kind]
    assert len(packed) < BOMB_SIZE // 20  # a real bomb (snappy, the weakest, gets ~21x)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitExceeded, match="more than the limit") as info:
            decompress(codec, packed, max_size=LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.error_code == 10  # MESSAGE_TOO_LARGE
    assert peak < 4 * LIMIT, f"peak {peak} bytes for a {LIMIT}-byte limit"
