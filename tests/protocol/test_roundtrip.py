"""Round trips of every declared message at every version, and hand-computed wire vectors.

The property tests draw random messages from the declarations (``strategies.py``) and check, for
each (message, version) pair, that ``decode(encode(x)) == x`` and that re-encoding what was
decoded reproduces the bytes exactly. The targeted tests pin the encodings that the property
cannot see on its own (a codec that is wrong the same way in both directions round-trips): tagged
fields at their default, unknown tags, the nullable-struct marker, zero-copy records, and the
switch from the classic to the flexible encoding, each against bytes computed by hand from the
protocol guide.
"""

from __future__ import annotations

import keyword
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcore.protocol.codegen import snake_case
from kcore.protocol.messages import (
    MESSAGES,
    ApiVersionsResponse,
    CreateTopicsRequest,
    MetadataRequest,
    ProduceRequest,
    ScatterBuffer,
)
from kcore.protocol.primitives import MalformedMessage, UnsupportedVersion

from .strategies import message_strategy

CASES = [
    (name, version)
    for name, mt in sorted(MESSAGES.items())
    for version in range(mt.versions.lo, mt.versions.hi + 1)
]

# ~690 cases: 20 examples each keep the file under a minute on one core.
ROUNDTRIP_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@ROUNDTRIP_SETTINGS
@given(data=st.data())
def test_roundtrip_every_message_at_every_version_survives_encode_and_decode(name, version, data):
    mt = MESSAGES[name]
    msg = data.draw(message_strategy(mt, version), label="message")
    encoded = msg.encode(version)

    decoded = mt.cls.decode(encoded, version)
    assert decoded == msg
    assert decoded.encode(version) == encoded  # decode → encode reproduces the bytes

    # The same bytes inside a larger frame: decode_from reports where the message ends.
    framed = memoryview(b"\xaa\xbb" + encoded + b"\xcc")
    at_offset, end = mt.cls.decode_from(framed, 2, version)
    assert at_offset == msg and end == 2 + len(encoded)

    # encode_into a scatter buffer produces the same bytes as encode.
    out = ScatterBuffer()
    msg.encode_into(out, version)
    assert b"".join(bytes(part) for part in out.parts()) == encoded

    # A trailing byte, or a missing one, is a MalformedMessage and nothing else.
    with pytest.raises(MalformedMessage):
        mt.cls.decode(encoded + b"\x00", version)
    if encoded:
        with pytest.raises(MalformedMessage):
            mt.cls.decode(encoded[:-1], version)


def test_roundtrip_covers_every_declared_version():
    assert len(CASES) == sum(
        len(range(m.versions.lo, m.versions.hi + 1)) for m in MESSAGES.values()
    )
    assert len(CASES) > 600
    assert ("FetchRequest", 19) in CASES and ("RequestHeader", 2) in CASES


@pytest.mark.parametrize("name", ["FetchRequest", "MetadataRequest", "CreateTopicsRequest"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_strategy_leaves_fields_absent_at_the_version_at_their_default(name, data):
    """The strategy itself: what a version cannot carry must stay at the constructor default."""
    mt = MESSAGES[name]
    version = data.draw(st.integers(mt.versions.lo, mt.versions.hi), label="version")
    msg = data.draw(message_strategy(mt, version), label="message")

    def check(obj, sd):
        fresh = mt.classes[id(sd)]()
        for fd in sd.fields:
            value = getattr(obj, snake_case(fd.name))
            if version not in fd.versions:
                assert value == getattr(fresh, snake_case(fd.name)), fd.name
            elif fd.struct is not None and value is not None:
                for element in value if fd.is_array else [value]:
                    check(element, fd.struct)

    check(msg, mt.decl.root)


def test_roundtrip_unknown_version_is_refused():
    with pytest.raises(UnsupportedVersion):
        MetadataRequest().encode(99)
    with pytest.raises(UnsupportedVersion):
        MetadataRequest.decode(b"", 99)


# --- tagged fields -------------------------------------------------------------------------------

API_VERSION = ApiVersionsResponse.ApiVersion


def _api_versions_v3(**kwargs) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[API_VERSION(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0,
        **kwargs,
    )


# ApiVersionsResponse v3 (flexible): error_code int16, api_keys compact array (count + 1) of
# {api_key, min_version, max_version int16, empty tag section}, throttle_time_ms int32, then the
# top-level tag section.
API_VERSIONS_V3_BODY = bytes.fromhex("0000" + "02" + "0012 0000 0004 00" + "00000000")


def test_roundtrip_tagged_field_at_its_default_is_not_written():
    msg = _api_versions_v3(finalized_features_epoch=-1, zk_migration_ready=False)
    assert msg.encode(3) == API_VERSIONS_V3_BODY + b"\x00"  # no tagged fields at all


def test_roundtrip_tagged_fields_off_their_default_are_written_in_tag_order():
    msg = _api_versions_v3(finalized_features_epoch=7, zk_migration_ready=True)
    expected = API_VERSIONS_V3_BODY + bytes.fromhex(
        "02"  # two tagged fields
        + "01 08 0000000000000007"  # tag 1 FinalizedFeaturesEpoch, 8 bytes
        + "03 01 01"  # tag 3 ZkMigrationReady, 1 byte
    )
    assert msg.encode(3) == expected
    assert ApiVersionsResponse.decode(expected, 3) == msg


def test_roundtrip_unknown_tagged_fields_are_skipped_on_decode():
    data = API_VERSIONS_V3_BODY + bytes.fromhex(
        "03"
        + "01 08 0000000000000007"  # known: FinalizedFeaturesEpoch = 7
        + "63 03 aabbcc"  # unknown tag 99, 3 bytes
        + "ac02 02 dddd"  # unknown tag 300 (a two-byte varint), 2 bytes
    )
    msg = ApiVersionsResponse.decode(data, 3)
    assert msg == _api_versions_v3(finalized_features_epoch=7)
    # Unknown fields are dropped: re-encoding gives the canonical form.
    assert msg.encode(3) == API_VERSIONS_V3_BODY + bytes.fromhex("01 01 08 0000000000000007")


def test_roundtrip_unknown_tagged_field_inside_a_nested_struct_is_skipped():
    data = bytes.fromhex("0000 02 0012 0000 0004" + "01 63 02 eeee" + "00000000 00")
    msg = ApiVersionsResponse.decode(data, 3)
    assert msg == _api_versions_v3()


def test_roundtrip_tagged_field_whose_size_disagrees_with_its_type_is_malformed():
    data = API_VERSIONS_V3_BODY + bytes.fromhex("01 01 04 0000000000000007")  # 8 bytes, says 4
    with pytest.raises(MalformedMessage):
        ApiVersionsResponse.decode(data, 3)


def test_roundtrip_unknown_tagged_field_running_past_the_end_is_malformed():
    with pytest.raises(MalformedMessage):
        ApiVersionsResponse.decode(API_VERSIONS_V3_BODY + bytes.fromhex("01 63 05 aabb"), 3)


# --- records: zero copy ----------------------------------------------------------------------------

RECORDS = b"a record batch, opaque to the codec"


@pytest.mark.parametrize("version", [3, 9])  # classic int32 length; compact varint length
def test_roundtrip_records_decode_as_a_view_sharing_the_input_buffer(version):
    partition = ProduceRequest.PartitionProduceData(index=0, records=RECORDS)
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[partition])],
    )
    data = bytearray(req.encode(version))
    records = ProduceRequest.decode(data, version).topic_data[0].partition_data[0].records

    assert isinstance(records, memoryview)
    assert records.obj is data  # a view into the input, not a copy
    assert records == RECORDS
    at = data.find(RECORDS)
    data[at] = ord("A")
    assert bytes(records[:1]) == b"A"  # the input's change is visible through the view


# --- nullable structs ------------------------------------------------------------------------------


def _create_topics_v8(mirror_info) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=3, replication_factor=2, mirror_info=mirror_info
    )
    return CreateTopicsRequest(topics=[topic], timeout_ms=60000, validate_only=False)


# CreateTopicsRequest v8 (flexible): topics compact array of {name compact string, num_partitions
# int32, replication_factor int16, assignments and configs (empty compact arrays), mirror_info,
# tags}, timeout_ms int32, validate_only bool, tags.
_TOPIC_HEAD = "02" + "0274" + "00000003" + "0002" + "01" + "01"
_TAIL = "00" + "0000ea60" + "00" + "00"


def test_roundtrip_null_nullable_struct_is_a_minus_one_marker():
    data = bytes.fromhex(_TOPIC_HEAD + "ff" + _TAIL)
    msg = _create_topics_v8(None)
    assert msg.encode(8) == data
    assert CreateTopicsRequest.decode(data, 8) == msg


def test_roundtrip_present_nullable_struct_is_a_one_marker_then_the_struct():
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    data = bytes.fromhex(_TOPIC_HEAD + "01" + topic_id.hex + "00" + _TAIL)
    msg = _create_topics_v8(CreateTopicsRequest.MirrorInfo(topic_id=topic_id))
    assert msg.encode(8) == data
    assert CreateTopicsRequest.decode(data, 8) == msg


@pytest.mark.parametrize(("marker", "is_null"), [(0x80, True), (0xFE, True), (0x00, False)])
def test_roundtrip_nullable_struct_marker_is_read_as_a_signed_byte_like_kafka(marker, is_null):
    """Kafka's generated reader: ``if (readByte() < 0) null else read the struct``."""
    topic_id = uuid.UUID(int=1)
    struct_hex = "" if is_null else topic_id.hex + "00"
    data = bytes.fromhex(_TOPIC_HEAD + f"{marker:02x}" + struct_hex + _TAIL)
    mirror_info = CreateTopicsRequest.decode(data, 8).topics[0].mirror_info
    assert mirror_info == (None if is_null else CreateTopicsRequest.MirrorInfo(topic_id=topic_id))


# --- classic versus flexible -----------------------------------------------------------------------


def _metadata_request(topics) -> MetadataRequest:
    return MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
    )


@pytest.mark.parametrize(
    ("version", "hex_bytes"),
    [
        # v8, classic: int32 array count, int16 string length, no tag sections.
        (8, "00000001" + "0001 74" + "01 00 01"),
        # v9, flexible: count + 1 and length + 1 as varints, a tag section per struct and at the end.
        (9, "02" + "02 74 00" + "01 00 01" + "00"),
    ],
)
def test_roundtrip_metadata_request_v8_is_classic_and_v9_is_flexible(version, hex_bytes):
    msg = _metadata_request([MetadataRequest.MetadataRequestTopic(name="t")])
    data = bytes.fromhex(hex_bytes)
    assert msg.encode(version) == data
    assert MetadataRequest.decode(data, version) == msg


@pytest.mark.parametrize(
    ("version", "hex_bytes"), [(8, "ffffffff 01 00 01"), (9, "00 01 00 01 00")]
)
def test_roundtrip_null_array_is_minus_one_classic_and_zero_flexible(version, hex_bytes):
    msg = _metadata_request(None)  # null topics: "all topics"
    assert msg.encode(version) == bytes.fromhex(hex_bytes)
    assert MetadataRequest.decode(bytes.fromhex(hex_bytes), version) == msg


def test_roundtrip_array_of_int32_is_packed_big_endian():
    req = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="t",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    CreateTopicsRequest.CreatableReplicaAssignment(
                        partition_index=0, broker_ids=[1, 2, 0x7FFFFFFF]
                    )
                ],
            )
        ]
    )
    data = req.encode(4)  # classic
    assert struct.pack(">i3i", 3, 1, 2, 0x7FFFFFFF) in data
    assert CreateTopicsRequest.decode(data, 4) == req


# --- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kafka", "python"),
    [
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("TopicId", "topic_id"),
        ("ErrorCode", "error_code"),
        ("IncludeClusterAuthorizedOperations", "include_cluster_authorized_operations"),
        ("timeoutMs", "timeout_ms"),  # CreateTopics spells a few in lower camel case
        ("validateOnly", "validate_only"),
        ("V3AndBelowProducerId", "v3_and_below_producer_id"),
        ("ResultsByTopicV3AndBelow", "results_by_topic_v3_and_below"),
    ],
)
def test_roundtrip_snake_case_turns_kafka_names_into_attributes(kafka, python):
    assert snake_case(kafka) == python


def test_roundtrip_every_attribute_is_a_snake_case_identifier_of_its_kafka_name():
    for mt in MESSAGES.values():
        for sd in mt.decl.structs.values():
            attrs = mt.classes[id(sd)]._fields
            assert len(set(attrs)) == len(attrs)
            for fd, attr in zip(sd.fields, attrs):
                assert attr.isidentifier() and not keyword.iskeyword(attr), attr
                assert attr == attr.lower()
                assert attr.replace("_", "") == fd.name.lower(), (fd.name, attr)


def test_roundtrip_classes_use_snake_case_attributes():
    req = CreateTopicsRequest()
    assert req.timeout_ms == 60000 and req.validate_only is False
    fetch = MESSAGES["FetchRequest"].cls(max_wait_ms=500)
    assert fetch.max_wait_ms == 500 and fetch.max_bytes == 0x7FFFFFFF
    with pytest.raises(TypeError):
        MESSAGES["FetchRequest"].cls(MaxWaitMs=500)  # Kafka's own spelling is not accepted
