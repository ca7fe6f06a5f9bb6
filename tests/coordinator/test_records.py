"""The __consumer_offsets record format: golden bytes, round trips, partition_for."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.coordinator.group import records as rec
from kcore.protocol import messages as m


def s16(text: str) -> bytes:  # classic string: int16 length + UTF-8
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_java_string_hash_known_values():
    assert rec.java_string_hash("") == 0
    assert rec.java_string_hash("a") == 97
    assert rec.java_string_hash("foo") == 101574  # 102*31*31 + 111*31 + 111
    assert rec.java_string_hash("Aa") == rec.java_string_hash("BB") == 2112
    assert rec.java_string_hash("hello") == 99162322
    assert rec.java_string_hash("é") == 0xE9  # one UTF-16 unit, not two UTF-8 bytes
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
    assert rec.java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00 == 1772899
    # int32 overflow: "hello world" wraps to a negative number in Java.
    assert rec.java_string_hash("hello world") == 1794106052
    assert rec.java_string_hash("polygenelubricants") == -(2**31)


def test_partition_for_matches_kafka_rule():
    assert rec.partition_for("foo", 50) == 101574 % 50 == 24
    # Utils.abs(Integer.MIN_VALUE) is 0, not an overflow.
    assert rec.partition_for("polygenelubricants", 50) == 0
    negative = "GiraffeBrainFreeze"  # any string with a negative hash
    h = rec.java_string_hash(negative)
    if h < 0:
        assert rec.partition_for(negative, 7) == (-h) % 7
    with pytest.raises(ValueError):
        rec.partition_for("g", 0)


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_in_range(group, partitions):
    assert 0 <= rec.partition_for(group, partitions) < partitions


def test_offset_commit_golden_bytes_v3():
    record = rec.OffsetCommitRecord("g", "t", 1, 5, 7, "md", 1000)
    key, value = rec.encode(record)
    assert key == b"\x00\x01" + s16("g") + s16("t") + struct.pack(">i", 1)
    assert value == (
        b"\x00\x03"
        + struct.pack(">q", 5)
        + struct.pack(">i", 7)
        + s16("md")
        + struct.pack(">q", 1000)
    )
    assert rec.decode(key, value) == record


def test_offset_commit_with_expire_timestamp_is_written_as_v1():
    record = rec.OffsetCommitRecord("g", "t", 0, 9, -1, "", 1000, expire_timestamp=5000)
    key, value = rec.encode(record)
    assert value == (b"\x00\x01" + struct.pack(">q", 9) + s16("") + struct.pack(">qq", 1000, 5000))
    assert rec.decode(key, value) == record


def test_tombstones_golden_bytes():
    assert rec.encode(rec.OffsetTombstone("g", "t", 2)) == (
        b"\x00\x01" + s16("g") + s16("t") + struct.pack(">i", 2),
        None,
    )
    assert rec.encode(rec.GroupTombstone("grp")) == (b"\x00\x02" + s16("grp"), None)
    assert rec.decode(b"\x00\x02" + s16("grp"), None) == rec.GroupTombstone("grp")
    assert rec.decode(b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x02", None) == (
        rec.OffsetTombstone("g", "t", 2)
    )


def test_group_metadata_golden_bytes_v3():
    member = m.GroupMetadataValue.MemberMetadata(
        member_id="m1",
        group_instance_id=None,
        client_id="c",
        client_host="/h",
        rebalance_timeout=300,
        session_timeout=100,
        subscription=b"\x01",
        assignment=b"\x02\x03",
    )
    value = m.GroupMetadataValue(
        protocol_type="consumer",
        generation=4,
        protocol="range",
        leader="m1",
        current_state_timestamp=77,
        members=[member],
    )
    key, data = rec.encode(rec.GroupMetadataRecord("g", value))
    assert key == b"\x00\x02" + s16("g")
    assert data == (
        b"\x00\x03"
        + s16("consumer")
        + struct.pack(">i", 4)
        + s16("range")
        + s16("m1")
        + struct.pack(">q", 77)
        + struct.pack(">i", 1)
        + s16("m1")
        + b"\xff\xff"  # null group instance id
        + s16("c")
        + s16("/h")
        + struct.pack(">ii", 300, 100)
        + struct.pack(">i", 1)
        + b"\x01"
        + struct.pack(">i", 2)
        + b"\x02\x03"
    )
    assert rec.decode(key, data) == rec.GroupMetadataRecord("g", value)


def test_decode_reads_older_and_flexible_versions():
    key0 = b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 3)
    v0 = m.OffsetCommitValue(offset=4, metadata="x", commit_timestamp=9)
    got = rec.decode(key0, b"\x00\x00" + v0.encode(0))
    assert got == rec.OffsetCommitRecord("g", "t", 3, 4, -1, "x", 9)
    v4 = m.OffsetCommitValue(offset=4, leader_epoch=2, metadata="x", commit_timestamp=9)
    got = rec.decode(key0, b"\x00\x04" + v4.encode(4))
    assert got == rec.OffsetCommitRecord("g", "t", 3, 4, 2, "x", 9)
    gv = m.GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None)
    got = rec.decode(b"\x00\x02" + s16("g"), b"\x00\x00" + gv.encode(0))
    assert got.value.generation == 0 and got.value.current_state_timestamp == -1


@pytest.mark.parametrize("key_version", [3, 4, 5, 11, 16])
def test_decode_skips_kip848_record_types(key_version):
    key = struct.pack(">h", key_version) + s16("g") + s16("member")
    assert rec.decode(key, b"\x00\x00garbage") is None
    assert rec.decode(key, None) is None


@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00", None),  # no room for the version
        (b"", None),
        (b"\xff\xff" + s16("g"), None),  # negative key version
        (b"\x00\x02\x00\x05ab", None),  # truncated group id
        (b"\x00\x02" + s16("g") + b"\x00", None),  # trailing byte
        (b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x01", b"\x00\x03\x00"),
        (b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x01", b"\x00\x09" + bytes(30)),
        (b"\x00\x02" + s16("g"), b"\x00"),
    ],
)
def test_decode_rejects_corrupt_bytes_with_value_error(key, value):
    with pytest.raises(ValueError):
        rec.decode(key, value)


names = st.text(max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@given(names, names, int32, int64, int32, names, int64, st.one_of(st.just(-1), int64))
def test_offset_commit_round_trip(group, topic, partition, offset, epoch, md, ts, expire):
    # Value v1 (written when there is an expire timestamp) has no leader epoch field.
    epoch = epoch if expire == -1 else -1
    record = rec.OffsetCommitRecord(group, topic, partition, offset, epoch, md, ts, expire)
    assert rec.decode(*rec.encode(record)) == record


members = st.builds(
    m.GroupMetadataValue.MemberMetadata,
    member_id=names,
    group_instance_id=st.none() | names,
    client_id=names,
    client_host=names,
    rebalance_timeout=int32,
    session_timeout=int32,
    subscription=st.binary(max_size=20),
    assignment=st.binary(max_size=20),
)


@given(
    names,
    st.builds(
        m.GroupMetadataValue,
        protocol_type=names,
        generation=int32,
        protocol=st.none() | names,
        leader=st.none() | names,
        current_state_timestamp=int64,
        members=st.lists(members, max_size=3),
    ),
)
def test_group_metadata_round_trip(group, value):
    record = rec.GroupMetadataRecord(group, value)
    assert rec.decode(*rec.encode(record)) == record


@given(names, names, int32)
def test_tombstone_round_trip(group, topic, partition):
    for record in (rec.OffsetTombstone(group, topic, partition), rec.GroupTombstone(group)):
        assert rec.decode(*rec.encode(record)) == record
