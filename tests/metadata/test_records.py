"""Metadata records in Kafka's framing: round trips of every type and version, hand-computed
golden bytes, and the typed errors for what cannot be read."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcore.metadata import records as r
from kcore.protocol import messages as m

from .strategies import record_strategy

CASES = [
    (key, version)
    for key, mt in sorted(r.RECORD_TYPES.items())
    for version in range(mt.versions.lo, mt.versions.hi + 1)
]


@pytest.mark.parametrize(
    ("key", "version"), CASES, ids=[f"{r.RECORD_TYPES[k].name}-v{v}" for k, v in CASES]
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_records_every_type_and_version_round_trips_through_the_frame(key, version, data):
    mt = r.RECORD_TYPES[key]
    rec = data.draw(record_strategy(mt, version))
    framed = r.encode_record(rec, version)
    decoded, got_version = r.decode_record(framed)
    assert got_version == version
    assert decoded == rec
    assert r.encode_record(decoded, version) == framed
    assert framed[:3] == bytes([1, key, version])  # every key and version is below 128


def test_records_registry_holds_every_kraft_metadata_record_type():
    names = {mt.name for mt in r.RECORD_TYPES.values()}
    assert {
        "TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord",
        "ConfigRecord", "RegisterBrokerRecord", "BrokerRegistrationChangeRecord",
        "FenceBrokerRecord", "UnfenceBrokerRecord", "UnregisterBrokerRecord",
        "FeatureLevelRecord", "ProducerIdsRecord", "AccessControlEntryRecord",
        "RemoveAccessControlEntryRecord", "ClientQuotaRecord", "UserScramCredentialRecord",
        "RemoveUserScramCredentialRecord", "DelegationTokenRecord", "NoOpRecord",
        "RegisterControllerRecord", "BeginTransactionRecord", "EndTransactionRecord",
        "AbortTransactionRecord",
    } <= names  # fmt: skip
    assert "DeleteRecordsRequest" not in names  # api key 21 of a request is not a record type


def test_records_golden_topic_record_matches_hand_computed_bytes():
    rec = m.TopicRecord(name="orders", topic_id=uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"))
    expected = bytes.fromhex(
        "01"  # frame version 1 (unsigned varint)
        "02"  # record type: TopicRecord's api key 2
        "00"  # record version 0
        "07"
        + b"orders".hex()  # compact string: length + 1, then UTF-8
        + "00112233445566778899aabbccddeeff"  # the topic id, 16 bytes big-endian
        "00"  # no tagged fields
    )
    assert r.encode_record(rec) == expected
    assert r.decode_record(expected) == (rec, 0)


def test_records_golden_partition_change_v3_puts_min_leader_epoch_after_topic_id():
    rec = r.PartitionChangeRecord(
        partition_id=0, topic_id=uuid.UUID(int=0), leader=2, min_leader_epoch=10
    )
    expected = bytes.fromhex(
        "01" "05" "03"  # frame version, PartitionChangeRecord, version 3
        "00000000"  # PartitionId
        + "00" * 16  # TopicId
        + "0000000a"  # MinLeaderEpoch (spec M-88: a regular v3 field)
        "01" "01" "04" "00000002"  # one tagged field: tag 1 (Leader), 4 bytes, 2
    )  # fmt: skip
    assert r.encode_record(rec) == expected
    assert r.decode_record(expected) == (rec, 3)


def test_records_partition_change_without_min_leader_epoch_stays_at_kafkas_version_2():
    rec = r.PartitionChangeRecord(partition_id=1, topic_id=uuid.uuid4(), isr=[1, 2])
    assert r.default_version(rec) == 2
    framed = r.encode_record(rec)
    assert framed[2] == 2
    # The same bytes as Kafka's own v2 declaration produces.
    kafka = m.PartitionChangeRecord(partition_id=1, topic_id=rec.topic_id, isr=[1, 2])
    assert framed[3:] == kafka.encode(2)


def test_records_min_leader_epoch_is_refused_below_version_3():
    rec = r.PartitionChangeRecord(partition_id=1, topic_id=uuid.uuid4(), min_leader_epoch=5)
    with pytest.raises(ValueError, match="version 3"):
        r.encode_record(rec, 2)


def test_records_unknown_record_type_raises_a_typed_error():
    with pytest.raises(r.UnknownRecordTypeError) as info:
        r.decode_record(bytes([1, 99, 0]))
    assert info.value.api_key == 99
    assert isinstance(info.value, r.MetadataRecordError)


def test_records_unknown_frame_version_raises_a_typed_error():
    framed = bytearray(r.encode_record(m.NoOpRecord()))
    framed[0] = 2
    with pytest.raises(r.UnsupportedFrameVersionError):
        r.decode_record(bytes(framed))


def test_records_unknown_record_version_raises_a_typed_error():
    with pytest.raises(r.UnsupportedRecordVersionError):
        r.decode_record(bytes([1, 2, 7]) + m.TopicRecord(name="a").encode(0))
    with pytest.raises(r.UnsupportedRecordVersionError):
        r.encode_record(m.TopicRecord(name="a"), 1)


@pytest.mark.parametrize("cut", [0, 1, 2, 5, 20])
def test_records_truncated_or_padded_frames_are_malformed(cut):
    framed = r.encode_record(m.TopicRecord(name="orders", topic_id=uuid.uuid4()))
    with pytest.raises(r.MalformedRecordError):
        r.decode_record(framed[:cut])
    with pytest.raises(r.MalformedRecordError):
        r.decode_record(framed + b"\x00")


def test_records_a_message_that_is_not_a_record_cannot_be_framed():
    with pytest.raises(TypeError):
        r.encode_record(m.CreateTopicsRequest())


def test_records_a_registered_record_type_is_framed_and_decoded():
    from kcore.protocol.declarations import parse_text

    decl = parse_text(
        "message TestOnlyRecord versions 0 flexible 0+ key 200\n  Name string 0+\n"
    ).messages[0]
    mt = m._build_message(decl)
    r.register_record_type(mt)
    try:
        rec = mt.cls(name="x")
        framed = r.encode_record(rec)
        assert framed[:4] == bytes([1, 0xC8, 0x01, 0])  # 200 as an unsigned varint is C8 01
        assert r.decode_record(framed) == (rec, 0)
        with pytest.raises(ValueError, match="already"):
            r.register_record_type(m._build_message(decl))  # another type for key 200
    finally:
        del r.RECORD_TYPES[200]
        r._BY_CLASS.pop(mt.cls, None)


def test_records_the_protocols_own_partition_change_class_still_frames_as_type_5():
    rec = m.PartitionChangeRecord(partition_id=3, topic_id=uuid.uuid4(), leader=1)
    framed = r.encode_record(rec)
    assert framed[:3] == bytes([1, 5, 2])
    decoded, _ = r.decode_record(framed)
    assert isinstance(decoded, r.PartitionChangeRecord) and decoded.leader == 1
