"""ConnectionCore: correlation ids, the in-flight table and response matching, without I/O."""

import pytest

from kcore.client.connection import ConnectionCore, InFlight
from kcore.client.errors import ProtocolError, UnsupportedVersionError
from kcore.protocol import api_versions_fallback_response, decode_request
from kcore.protocol import messages as m
from kcore.protocol.api import encode_response_bytes

META = m.MetadataRequest(topics=[])


def _answer(core_frame: bytes, body) -> bytes:
    req = decode_request(core_frame[4:])
    return encode_response_bytes(req.api.key, req.version, req.correlation_id, body)


def test_core_assigns_increasing_correlation_ids_and_tracks_them_in_order():
    core = ConnectionCore(client_id="t")
    entries = [core.send_request(META, 5)[0] for _ in range(3)]
    assert [e.correlation_id for e in entries] == [0, 1, 2]
    assert core.in_flight == (InFlight(3, 5, 0), InFlight(3, 5, 1), InFlight(3, 5, 2))


def test_core_frame_carries_header_and_body():
    core = ConnectionCore(client_id="tool", first_correlation_id=41)
    _, frame, expect = core.send_request(m.MetadataRequest(topics=None), 12)
    assert expect
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    req = decode_request(frame[4:])
    assert (req.api.name, req.version, req.correlation_id) == ("Metadata", 12, 41)
    assert req.header.client_id == "tool"


def test_core_correlation_id_wraps_to_zero_after_int32_max():
    core = ConnectionCore(first_correlation_id=2**31 - 1)
    assert core.send_request(META, 1)[0].correlation_id == 2**31 - 1
    assert core.send_request(META, 1)[0].correlation_id == 0


def test_core_matches_responses_fed_byte_by_byte():
    core = ConnectionCore()
    frames = [core.send_request(m.MetadataRequest(topics=[]), 9)[1] for _ in range(2)]
    stream = b"".join(
        _answer(f, m.MetadataResponse(cluster_id=f"c{i}")) for i, f in enumerate(frames)
    )
    got = []
    for i in range(len(stream)):
        core.receive_data(stream[i : i + 1])
        while (r := core.next_response()) is not None:
            got.append(r)
    assert [(e.correlation_id, b.cluster_id) for e, b in got] == [(0, "c0"), (1, "c1")]
    assert core.in_flight == ()


def test_core_out_of_order_response_is_a_protocol_error():
    core = ConnectionCore()
    core.send_request(META, 1)
    _, second, _ = core.send_request(META, 1)
    core.receive_data(_answer(second, m.MetadataResponse()))
    with pytest.raises(ProtocolError, match="out-of-order"):
        core.next_response()
    # the stream is lost: everything after raises too
    with pytest.raises(ProtocolError):
        core.receive_data(b"")
    with pytest.raises(ProtocolError):
        core.send_request(META, 1)


def test_core_unknown_correlation_id_is_a_protocol_error():
    core = ConnectionCore()
    core.send_request(META, 1)
    core.receive_data(encode_response_bytes(3, 1, 999, m.MetadataResponse()))
    with pytest.raises(ProtocolError, match="unknown correlation id 999"):
        core.next_response()


def test_core_response_with_nothing_in_flight_is_a_protocol_error():
    core = ConnectionCore()
    core.receive_data(encode_response_bytes(3, 1, 0, m.MetadataResponse()))
    with pytest.raises(ProtocolError, match="none in flight"):
        core.next_response()


def test_core_frame_over_max_frame_bytes_is_a_protocol_error():
    core = ConnectionCore(max_frame_bytes=1000)
    core.send_request(META, 1)
    core.receive_data((5000).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="bad response frame"):
        core.next_response()


def test_core_undecodable_body_is_a_protocol_error():
    core = ConnectionCore()
    core.send_request(META, 1)
    core.receive_data(b"\0\0\0\x06" + b"\0\0\0\0" + b"\xff\xff")
    with pytest.raises(ProtocolError, match="undecodable Metadata v1"):
        core.next_response()


def test_core_produce_acks_0_is_not_in_flight():
    core = ConnectionCore()
    entry, _, expect = core.send_request(m.ProduceRequest(acks=0, timeout_ms=1), 9)
    assert not expect and core.in_flight == ()
    entry2, _, expect2 = core.send_request(m.ProduceRequest(acks=1, timeout_ms=1), 9)
    assert expect2 and core.in_flight == (entry2,)
    assert entry2.correlation_id == entry.correlation_id + 1


def test_core_encoding_failure_registers_nothing():
    core = ConnectionCore()
    with pytest.raises(UnsupportedVersionError):
        core.send_request(META, 99)
    with pytest.raises(TypeError):
        core.send_request(m.MetadataResponse(), 1)
    assert core.in_flight == ()
    assert core.send_request(META, 1)[0].correlation_id == 0


def test_core_decodes_the_api_versions_v0_fallback_of_a_v4_request():
    core = ConnectionCore()
    entry, _, _ = core.send_request(m.ApiVersionsRequest(), 4)
    core.receive_data(api_versions_fallback_response(entry.correlation_id))
    got_entry, body = core.next_response()
    assert got_entry == entry
    assert body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_core_decodes_a_normal_api_versions_v3_response():
    core = ConnectionCore()
    entry, _, _ = core.send_request(m.ApiVersionsRequest(), 3)
    R = m.ApiVersionsResponse
    body = R(api_keys=[R.ApiVersion(api_key=3, min_version=0, max_version=12)], throttle_time_ms=7)
    core.receive_data(encode_response_bytes(18, 3, entry.correlation_id, body))
    assert core.next_response()[1] == body
