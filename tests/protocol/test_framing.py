"""Tests for frames and whole-request/response coding: FrameDecoder, decode_request's errors,
the ApiVersions fallback, and the request/response header versions.

Frames are built by hand (``struct.pack(">i", len) + payload``) rather than with the codec's own
``frame()``, and header bytes are checked byte by byte, so the tests do not trust the code under
test to tell them what the wire looks like.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.protocol import (
    APIS,
    APIS_BY_NAME,
    FrameDecoder,
    FrameTooLarge,
    MalformedMessage,
    UnsupportedVersion,
    api_versions_fallback_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_bytes,
)
from kcore.protocol import messages as m

I16, I32 = struct.Struct(">h"), struct.Struct(">i")


def framed(payload: bytes) -> bytes:
    return I32.pack(len(payload)) + payload


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (f := decoder.next_frame()) is not None:
        frames.append(f)
    return frames


# --- FrameDecoder ------------------------------------------------------------------------------


def test_frame_decoder_returns_frames_split_at_every_byte_boundary():
    payloads = [b"", b"a", b"hello world", bytes(range(256)), b"\x00\x00\x00\x05"]
    stream = b"".join(framed(p) for p in payloads)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        decoder.receive_data(stream[:cut])
        got = drain(decoder)
        decoder.receive_data(stream[cut:])
        got += drain(decoder)
        assert got == payloads, f"split at {cut}"
        assert decoder.buffered == 0


def test_frame_decoder_returns_frames_fed_one_byte_at_a_time():
    payloads = [b"x" * n for n in (0, 1, 3, 4, 5, 300)]
    decoder = FrameDecoder()
    got = []
    for byte in b"".join(framed(p) for p in payloads):
        decoder.receive_data(bytes([byte]))
        got += drain(decoder)
    assert got == payloads
    assert decoder.buffered == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    st.lists(st.integers(0, 10_000), max_size=12),
    st.sampled_from([bytes, bytearray, memoryview]),
)
def test_frame_decoder_random_splits_give_back_exactly_the_frames(payloads, cuts, chunk_type):
    stream = b"".join(framed(p) for p in payloads)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = FrameDecoder()
    got = []
    for lo, hi in zip(bounds, bounds[1:]):
        decoder.receive_data(chunk_type(stream[lo:hi]))
        got += drain(decoder)
    assert got == payloads
    assert decoder.buffered == 0
    assert decoder.next_frame() is None


def test_frame_decoder_returns_many_frames_from_one_chunk_in_order():
    payloads = [i.to_bytes(4, "big") * (i % 7) for i in range(20_000)]
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(framed(p) for p in payloads))
    assert drain(decoder) == payloads
    assert decoder.buffered == 0


def test_frame_decoder_keeps_the_partial_frame_after_many_complete_ones():
    # Enough whole frames (> 64 KiB) that the decoder drops its consumed front.
    payloads = [bytes([i % 251]) * 1000 for i in range(200)]
    tail = framed(b"t" * 5000)
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(framed(p) for p in payloads) + tail[:2000])
    assert drain(decoder) == payloads
    assert decoder.buffered == 2000
    assert decoder.pending_frame_size() == 5000
    decoder.receive_data(tail[2000:])
    assert drain(decoder) == [b"t" * 5000]


def test_frame_decoder_refuses_oversize_prefix_before_any_payload_arrives():
    decoder = FrameDecoder(max_frame_bytes=1000)
    prefix = I32.pack(1001)
    decoder.receive_data(prefix[:3])
    assert decoder.next_frame() is None  # three bytes: size not known yet
    decoder.receive_data(prefix[3:])
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert info.value.error_code == 42
    assert info.value.correlation_id is None


def test_frame_decoder_refuses_huge_prefix_with_the_default_limit():
    decoder = FrameDecoder()
    decoder.receive_data(I32.pack(2**31 - 1))
    with pytest.raises(FrameTooLarge, match="socket.request.max.bytes"):
        decoder.next_frame()


def test_frame_decoder_accepts_a_frame_of_exactly_the_limit():
    decoder = FrameDecoder(max_frame_bytes=1000)
    decoder.receive_data(framed(b"z" * 1000))
    assert decoder.next_frame() == b"z" * 1000


def test_frame_decoder_refuses_oversize_prefix_after_a_good_frame_in_the_same_chunk():
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.receive_data(framed(b"ok") + I32.pack(101))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.parametrize("size", [-1, -2, -(2**31)])
def test_frame_decoder_refuses_negative_size(size):
    decoder = FrameDecoder()
    decoder.receive_data(I32.pack(size))
    with pytest.raises(MalformedMessage, match="negative frame size") as info:
        decoder.next_frame()
    assert not isinstance(info.value, FrameTooLarge)


def test_frame_decoder_empty_data_is_not_a_frame():
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    assert decoder.next_frame() is None
    assert decoder.pending_frame_size() is None
    assert decoder.buffered == 0


def _feed_in_place(decoder: FrameDecoder, stream: bytes, cuts: list[int], use_buffer: list[bool]):
    """Feed ``stream`` in chunks cut at ``cuts``; a chunk goes through ``receive_buffer`` /
    ``advance`` when the decoder offers a buffer and ``use_buffer`` says so (as a shell that
    ``recv_into``s would), else through ``receive_data``. Returns the frames in order."""
    got, pos = [], 0
    for i, cut in enumerate([*sorted(cuts), len(stream)]):
        while pos < cut:
            got += drain(decoder)
            target = decoder.receive_buffer()
            if target is not None and use_buffer[i % len(use_buffer)]:
                n = min(len(target), cut - pos)
                target[:n] = stream[pos : pos + n]
                decoder.advance(n)
            else:
                n = cut - pos
                decoder.receive_data(stream[pos:cut])
            pos += n
    return got + drain(decoder)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 5, 65535, 65536, 70000, 200_000]), max_size=6),
    cuts=st.lists(st.integers(0, 1_000_000), max_size=8),
    use_buffer=st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_frame_decoder_large_frames_received_in_place_or_copied_come_out_the_same(
    sizes, cuts, use_buffer
):
    payloads = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    stream = b"".join(framed(p) for p in payloads)
    decoder = FrameDecoder()
    got = _feed_in_place(decoder, stream, [c % (len(stream) + 1) for c in cuts], use_buffer)
    assert [bytes(f) for f in got] == payloads
    assert decoder.buffered == 0 and decoder.receive_buffer() is None


def test_frame_decoder_offers_the_missing_rest_of_a_large_frame_only():
    decoder = FrameDecoder()
    decoder.receive_data(framed(b"x" * 100_000)[:1000])
    assert decoder.receive_buffer() is None  # nothing offered before next_frame saw the prefix
    assert decoder.next_frame() is None
    target = decoder.receive_buffer()
    assert len(target) == 100_000 - 996
    assert decoder.buffered == 1000 and decoder.pending_frame_size() == 100_000
    target[:] = b"x" * len(target)
    decoder.advance(len(target))
    assert decoder.receive_buffer() is None
    assert decoder.next_frame() == b"x" * 100_000
    assert decoder.buffered == 0 and decoder.next_frame() is None


def _in_two_pieces(decoder: FrameDecoder, stream: bytes):
    """One large frame fed as a partial piece (so it is received in place) and the rest."""
    decoder.receive_data(stream[:100])
    assert decoder.next_frame() is None
    decoder.receive_data(stream[100:])
    return decoder.next_frame()


def test_frame_decoder_never_reuses_a_large_frames_buffer_while_it_is_held():
    decoder = FrameDecoder()
    held = []
    for i in range(6):
        frame = _in_two_pieces(decoder, framed(bytes([i]) * 200_000))
        if i % 2 == 0:
            held.append((i, frame[10:20]))  # a slice of it, as a decoded records field is
        del frame
    for i, piece in held:
        assert bytes(piece) == bytes([i]) * 10


def test_frame_decoder_reuses_a_released_buffer():
    decoder = FrameDecoder()
    first = _in_two_pieces(decoder, framed(b"a" * 200_000))
    address = first.obj.ctypes.data
    del first
    second = _in_two_pieces(decoder, framed(b"b" * 150_000))
    assert second.obj.ctypes.data == address and bytes(second) == b"b" * 150_000


def test_frame_decoder_small_frames_are_not_offered_a_buffer():
    decoder = FrameDecoder()
    decoder.receive_data(framed(b"y" * 1000)[:10])
    assert decoder.next_frame() is None and decoder.receive_buffer() is None


def test_frame_decoder_refuses_advance_past_the_frame():
    decoder = FrameDecoder()
    decoder.receive_data(I32.pack(70_000))
    assert decoder.next_frame() is None
    with pytest.raises(ValueError):
        decoder.advance(70_001)
    decoder.advance(70_000)
    assert len(decoder.next_frame()) == 70_000


def test_frame_decoder_checks_the_limit_before_allocating_a_large_frame():
    decoder = FrameDecoder(max_frame_bytes=100_000)
    decoder.receive_data(I32.pack(100_001))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    assert decoder.receive_buffer() is None


# --- decode_request errors carry the correlation id --------------------------------------------

METADATA = APIS_BY_NAME["Metadata"]


def request_frame(api_key: int, version: int, correlation_id: int, rest: bytes = b"") -> bytes:
    """A request frame without size prefix: the fixed header prefix, then ``rest``."""
    return struct.pack(">hhi", api_key, version, correlation_id) + rest


def test_decode_request_unknown_api_key_is_unsupported_with_correlation_id():
    frame = request_frame(32000, 0, 12345, I16.pack(-1))
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    e = info.value
    assert (e.api_key, e.version, e.correlation_id, e.error_code) == (32000, 0, 12345, 35)


@pytest.mark.parametrize("version", [METADATA.max_version + 1, 99, -1])
def test_decode_request_unknown_version_is_unsupported_with_correlation_id(version):
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(request_frame(METADATA.key, version, -7, I16.pack(-1)))
    e = info.value
    assert (e.api_key, e.version, e.correlation_id, e.error_code) == (3, version, -7, 35)


def test_decode_request_truncated_body_is_malformed_with_correlation_id():
    whole = encode_request(
        3, 1, 4242, "cli", m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic()])
    )[4:]
    with pytest.raises(MalformedMessage) as info:
        decode_request(whole[:-1])
    e = info.value
    assert not isinstance(e, UnsupportedVersion)
    assert (e.correlation_id, e.error_code) == (4242, 42)


def test_decode_request_truncated_client_id_is_malformed_with_correlation_id():
    with pytest.raises(MalformedMessage, match="past the end") as info:
        decode_request(request_frame(3, 1, 99, I16.pack(10) + b"abc"))
    assert info.value.correlation_id == 99


def test_decode_request_ignores_trailing_bytes_after_the_body():
    # As Kafka does: librdkafka leaves stray bytes after an all-topics Metadata v9+ request.
    body = m.MetadataRequest(topics=None)
    whole = encode_request(3, 1, 31337, None, body)[4:]
    req = decode_request(whole + b"\x00\x01\x02")
    assert (req.correlation_id, req.body) == (31337, body)


def test_decode_response_refuses_trailing_bytes():
    data = encode_response_bytes(17, 1, 5, m.SaslHandshakeResponse(mechanisms=["PLAIN"]))[4:]
    assert decode_response(17, 1, data)[0] == 5
    with pytest.raises(MalformedMessage, match="1 unexpected bytes"):
        decode_response(17, 1, data + b"\x00")


def test_message_decode_refuses_trailing_bytes():
    data = m.MetadataRequest(topics=None).encode(1)
    with pytest.raises(MalformedMessage, match="2 unexpected bytes"):
        m.MetadataRequest.decode(data + b"\x00\x00", 1)


@pytest.mark.parametrize("length", range(8))
def test_decode_request_shorter_than_fixed_header_has_no_correlation_id(length):
    with pytest.raises(MalformedMessage) as info:
        decode_request(request_frame(3, 1, 5)[:length])
    assert info.value.correlation_id is None
    assert not isinstance(info.value, UnsupportedVersion)


def test_decode_request_reads_header_and_body():
    body = m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False,
    )
    req = decode_request(encode_request(3, 9, 8, "client-1", body)[4:])
    assert req.api is METADATA
    assert (req.version, req.correlation_id, req.header.client_id) == (9, 8, "client-1")
    assert req.body == body


# --- ApiVersions fallback ----------------------------------------------------------------------


def test_api_versions_fallback_response_is_v0_with_unsupported_version_and_own_range():
    api = APIS[18]
    data = api_versions_fallback_response(777)
    assert I32.unpack_from(data)[0] == len(data) - 4
    correlation_id, body = decode_response(18, 0, data[4:])
    assert correlation_id == 777
    assert body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (18, api.versions.lo, api.versions.hi)
    ]


def test_api_versions_fallback_response_bytes_are_header_v0_and_body_v0():
    api = APIS[18]
    data = api_versions_fallback_response(-2)
    # size | correlation id (no header tags) | error 35 | int32 count 1 | key 18, min, max
    expected_payload = struct.pack(">ihihhh", -2, 35, 1, 18, api.versions.lo, api.versions.hi)
    assert data == framed(expected_payload)


def test_api_versions_request_at_unknown_version_leads_to_the_fallback():
    # A client newer than us sends ApiVersions v(max+1) with a flexible header and body.
    too_new = APIS[18].max_version + 1
    frame = request_frame(18, too_new, 55, I16.pack(3) + b"cli" + b"\x00" + b"\x01\x01\x00")
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.version) == (18, too_new)
    correlation_id, body = decode_response(
        18, 0, api_versions_fallback_response(info.value.correlation_id)[4:]
    )
    assert (correlation_id, body.error_code) == (55, 35)


# --- header versions ---------------------------------------------------------------------------

# (API name, version, response header version): hard-coded from Kafka's rules.
RESPONSE_HEADER_CASES = [
    ("ApiVersions", 0, 0),
    ("ApiVersions", 2, 0),
    ("ApiVersions", 3, 0),  # flexible body, header still v0
    ("ApiVersions", 4, 0),
    ("Metadata", 8, 0),
    ("Metadata", 9, 1),
    ("Fetch", 11, 0),
    ("Fetch", 12, 1),
    ("Produce", 8, 0),
    ("Produce", 9, 1),
    ("SaslHandshake", 1, 0),
]


def sample_response(name: str):
    cls = APIS_BY_NAME[name].response.cls
    if name == "ApiVersions":
        return cls(
            error_code=0,
            api_keys=[cls.ApiVersion(api_key=1, min_version=4, max_version=16)],
            throttle_time_ms=3,
        )
    if name == "Metadata":
        return cls(throttle_time_ms=9, brokers=[cls.MetadataResponseBroker(node_id=1, host="h")])
    if name == "Fetch":
        return cls(throttle_time_ms=1, responses=[cls.FetchableTopicResponse(topic="t")])
    if name == "Produce":
        return cls(responses=[cls.TopicProduceResponse(name="t")], throttle_time_ms=2)
    return cls(error_code=33, mechanisms=["PLAIN"])


@pytest.mark.parametrize(("name", "version", "header_version"), RESPONSE_HEADER_CASES)
def test_response_header_version_follows_kafka_rules(name, version, header_version):
    api = APIS_BY_NAME[name]
    assert api.response_header_version(version) == header_version
    body = sample_response(name)
    data = encode_response_bytes(api.key, version, 0x01020304, body)
    assert I32.unpack_from(data)[0] == len(data) - 4
    assert data[4:8] == b"\x01\x02\x03\x04"
    header_tags = b"\x00" if header_version == 1 else b""
    assert data[8:] == header_tags + body.encode(version)
    correlation_id, decoded = decode_response(api.key, version, data[4:])
    assert correlation_id == 0x01020304
    # Fields absent at this version (throttle time in ApiVersions v0) come back as defaults.
    assert decoded.encode(version) == body.encode(version)
    assert decoded == type(body).decode(body.encode(version), version)


def test_api_versions_v3_response_without_header_tags_decodes_only_as_header_v0():
    # If a client assumed header v1 for ApiVersions v3, it would misread the body.
    body = sample_response("ApiVersions")
    data = encode_response_bytes(18, 3, 1, body)
    assert data[8:10] == b"\x00\x00"  # the body's error code, not a header tag count
    assert decode_response(18, 3, data[4:])[1] == body


@pytest.mark.parametrize(
    ("name", "version", "header_version"),
    [("Metadata", 8, 1), ("Metadata", 9, 2), ("ApiVersions", 2, 1), ("ApiVersions", 3, 2)],
)
def test_request_header_version_follows_flexibility(name, version, header_version):
    api = APIS_BY_NAME[name]
    assert api.request_header_version(version) == header_version
    body = api.request.cls()
    data = encode_request(api.key, version, 6, "ab", body)
    fixed = struct.pack(">hhi", api.key, version, 6) + I16.pack(2) + b"ab"
    # Header v2 keeps the client id as a non-compact string and adds a tag count.
    header = fixed + (b"\x00" if header_version == 2 else b"")
    assert data == framed(header + body.encode(version))
    assert decode_request(data[4:]).body == body


def test_encode_response_keeps_a_large_records_payload_as_its_own_part():
    cls = m.FetchResponse
    records = bytes(64 * 1024)
    body = cls(
        responses=[
            cls.FetchableTopicResponse(
                topic="t", partitions=[cls.PartitionData(partition_index=0, records=records)]
            )
        ]
    )
    parts = encode_response(1, 11, 9, body)
    assert any(p is records for p in parts)
    joined = b"".join(bytes(p) for p in parts)
    assert joined == encode_response_bytes(1, 11, 9, body)
    assert I32.unpack_from(joined)[0] == len(joined) - 4
