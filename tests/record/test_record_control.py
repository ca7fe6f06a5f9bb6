"""Control records: keys, transaction markers, MIRROR_PID_RESET, unknown types."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.record import (
    ControlRecordType,
    CorruptRecordError,
    EndTransactionMarker,
    MirrorPidResetRecord,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    build_end_txn_marker_batch,
    build_mirror_pid_reset_batch,
    decode_control_key,
    encode_control_key,
    iter_batches,
    read_control_record,
)


def test_control_record_type_values_are_kafkas_plus_mirror_pid_reset_7():
    assert {t.name: t.value for t in ControlRecordType} == {
        "UNKNOWN": -1,
        "ABORT": 0,
        "COMMIT": 1,
        "LEADER_CHANGE": 2,
        "SNAPSHOT_HEADER": 3,
        "SNAPSHOT_FOOTER": 4,
        "KRAFT_VERSION": 5,
        "KRAFT_VOTERS": 6,
        "MIRROR_PID_RESET": 7,
    }
    assert ControlRecordType.from_id(8) is ControlRecordType.UNKNOWN
    assert ControlRecordType.from_id(-5) is ControlRecordType.UNKNOWN


def test_control_key_is_version_zero_then_type():
    assert encode_control_key(ControlRecordType.MIRROR_PID_RESET) == b"\x00\x00\x00\x07"
    assert decode_control_key(b"\x00\x00\x00\x01") == (0, 1)
    # A later key version is read as version 0 (fields may only be appended), like Kafka.
    assert decode_control_key(b"\x00\x03\x00\x02\xff") == (3, 2)
    with pytest.raises(ValueError):
        encode_control_key(ControlRecordType.UNKNOWN)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", b"\xff\xff\x00\x01"])
def test_control_key_short_null_or_negative_version_is_corrupt(key):
    with pytest.raises(CorruptRecordError):
        decode_control_key(key)


# --- transaction markers --------------------------------------------------------------------


@given(commit=st.booleans(), epoch=st.integers(-(2**31), 2**31 - 1))
def test_end_transaction_marker_value_round_trips(commit, epoch):
    marker = EndTransactionMarker(commit, epoch)
    value = marker.encode_value()
    assert value == struct.pack(">hi", 0, epoch)
    assert EndTransactionMarker.decode(marker.control_type, value) == marker


def test_end_transaction_marker_reads_later_versions_and_refuses_short_values():
    later = struct.pack(">hi", 1, 42) + b"more fields"
    assert EndTransactionMarker.decode(ControlRecordType.ABORT, later).coordinator_epoch == 42
    with pytest.raises(CorruptRecordError, match="not at least 6"):
        EndTransactionMarker.decode(ControlRecordType.COMMIT, b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError, match="invalid version"):
        EndTransactionMarker.decode(ControlRecordType.COMMIT, struct.pack(">hi", -1, 0))
    with pytest.raises(CorruptRecordError, match="not a transaction marker"):
        EndTransactionMarker.decode(ControlRecordType.LEADER_CHANGE, struct.pack(">hi", 0, 0))


@settings(max_examples=40, deadline=None)
@given(
    pid=st.integers(0, 2**62),
    epoch=st.integers(0, 2**15 - 1),
    commit=st.booleans(),
    coordinator_epoch=st.integers(0, 2**31 - 1),
    base_offset=st.integers(0, 2**62),
    leader_epoch=st.integers(-1, 2**31 - 1),
    ts=st.integers(0, 2**45),
)
def test_end_txn_marker_batch_reads_back(
    pid, epoch, commit, coordinator_epoch, base_offset, leader_epoch, ts
):
    data = build_end_txn_marker_batch(
        pid, epoch, commit, coordinator_epoch, base_offset, leader_epoch, ts
    )
    batch = RecordBatch(data)
    batch.validate()
    assert batch.attributes == 0x30  # transactional | control, uncompressed, CREATE_TIME
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, -1)
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, leader_epoch)
    assert batch.record_count == 1 and batch.last_offset_delta == 0
    control = read_control_record(batch)
    assert control.type is (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
    assert control.is_transaction_marker
    assert (control.offset, control.timestamp) == (base_offset, ts)
    assert control.end_txn_marker() == EndTransactionMarker(commit, coordinator_epoch)


# --- MIRROR_PID_RESET -----------------------------------------------------------------------


@given(cluster_id=st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_mirror_pid_reset_value_round_trips(cluster_id):
    value = MirrorPidResetRecord(cluster_id).encode_value()
    encoded = cluster_id.encode()
    # int16 version, compact string (uvarint length + 1), empty tagged-field section
    assert value[:2] == b"\x00\x00" and value[-1:] == b"\x00"
    assert value.endswith(encoded + b"\x00")
    assert len(value) == 2 + (1 if len(encoded) + 1 < 128 else 2) + len(encoded) + 1
    assert MirrorPidResetRecord.decode(value) == MirrorPidResetRecord(cluster_id)


def test_mirror_pid_reset_value_skips_unknown_tagged_fields():
    # version 0, "abc", then 2 tagged fields: tag 0 size 2 "xy", tag 5 size 0
    value = b"\x00\x00\x04abc" + b"\x02" + b"\x00\x02xy" + b"\x05\x00"
    assert MirrorPidResetRecord.decode(value) == MirrorPidResetRecord("abc")


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"\x00",  # short version
        b"\xff\xff\x04abc\x00",  # negative version
        b"\x00\x00\x00\x00",  # null SourceClusterId (compact length 0)
        b"\x00\x00\x09abc\x00",  # string runs past the end
        b"\x00\x00\x04abc",  # tagged-field section missing
        b"\x00\x00\x04abc\x01\x00\x09xy",  # tagged field runs past the end
        b"\x00\x00\x03\xff\xfe\x00",  # not UTF-8
    ],
)
def test_mirror_pid_reset_corrupt_value_raises_corrupt_record_error(value):
    with pytest.raises(CorruptRecordError, match="MIRROR_PID_RESET"):
        MirrorPidResetRecord.decode(value)


def test_mirror_pid_reset_batch_reads_back_as_a_non_transactional_control_batch():
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"  # Kafka's documentation example cluster id
    batch = RecordBatch(build_mirror_pid_reset_batch(cluster_id, 500, 9, 1_700_000_000_000))
    batch.validate()
    assert batch.is_control and not batch.is_transactional
    assert (batch.base_offset, batch.partition_leader_epoch) == (500, 9)
    control = read_control_record(batch)
    assert control.type is ControlRecordType.MIRROR_PID_RESET
    assert len(control.value) == 26  # 2 + 1 + 22 + 1
    assert control.mirror_pid_reset() == MirrorPidResetRecord(cluster_id)
    with pytest.raises(CorruptRecordError):
        control.end_txn_marker()


# --- readers --------------------------------------------------------------------------------


def test_read_control_record_maps_unknown_types_to_unknown_so_readers_skip_them():
    stream = b"".join(
        [
            build_control_batch(
                42,
                b"from the future",
                producer_id=-1,
                producer_epoch=-1,
                is_transactional=False,
                base_offset=0,
                partition_leader_epoch=0,
                timestamp=1,
            ),
            build_end_txn_marker_batch(7, 0, True, 3, base_offset=1),
        ]
    )
    controls = [read_control_record(b) for b in iter_batches(stream)]
    assert [(c.type, c.type_id) for c in controls] == [
        (ControlRecordType.UNKNOWN, 42),
        (ControlRecordType.COMMIT, 1),
    ]
    # What a transaction-aware reader does: skip what it does not know, act on markers.
    markers = [c.end_txn_marker() for c in controls if c.is_transaction_marker]
    assert markers == [EndTransactionMarker(True, 3)]


def test_read_control_record_of_an_empty_control_batch_is_none():
    data = bytearray(build_end_txn_marker_batch(7, 0, False, 3))
    del data[61:]  # the cleaner may keep an empty batch to preserve producer state
    struct.pack_into(">i", data, 8, 49)
    struct.pack_into(">i", data, 57, 0)
    batch = RecordBatch(data)
    struct.pack_into(">I", data, 17, batch.compute_crc())
    batch.validate()
    assert read_control_record(batch) is None


def test_read_control_record_refuses_a_data_batch():
    b = RecordBatchBuilder(0)
    b.append(0, None, b"data")
    with pytest.raises(ValueError, match="not a control batch"):
        read_control_record(RecordBatch(b.build()))
