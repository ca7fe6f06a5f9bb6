"""Producer state snapshots: the exact bytes and CRC-32C, atomic writes, corruption detection."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.errors import CorruptSnapshotError, LogError
from kcore.log.producer_snapshot import (
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)


def _reference_crc32c(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): independent of the
    ``crc32c`` package the module uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


ENTRY = ProducerSnapshotEntry(
    producer_id=-3,  # a mirrored producer: -(1 + 2)
    producer_epoch=5,
    last_sequence=41,
    last_offset=1234,
    offset_delta=9,
    timestamp=1_700_000_000_000,
    coordinator_epoch=7,
    current_txn_first_offset=-1,
)

ENTRY_BYTES = bytes.fromhex(
    "fffffffffffffffd"  # int64 producer id -3
    "0005"  # int16 producer epoch
    "00000029"  # int32 last sequence 41
    "00000000000004d2"  # int64 last offset 1234
    "00000009"  # int32 offset delta
    "0000018bcfe56800"  # int64 timestamp 1,700,000,000,000
    "00000007"  # int32 coordinator epoch
    "ffffffffffffffff"  # int64 current txn first offset: none
)


def test_producer_snapshot_reference_crc_matches_the_standard_check_value():
    assert _reference_crc32c(b"123456789") == 0xE3069283


def test_producer_snapshot_one_entry_golden_bytes(tmp_path):
    covered = b"\x00\x00\x00\x01" + ENTRY_BYTES  # entry count, then the entry
    crc = _reference_crc32c(covered)
    assert crc == 0xF267D42E
    expected = b"\x00\x01" + crc.to_bytes(4, "big") + covered
    assert len(expected) == 10 + 46

    path = tmp_path / "00000000000000001235.snapshot"
    write_snapshot(path, [ENTRY])
    assert path.read_bytes() == expected
    assert read_snapshot(path) == [ENTRY]


def test_producer_snapshot_empty_golden_bytes():
    crc = _reference_crc32c(b"\x00\x00\x00\x00")
    assert encode_snapshot([]) == b"\x00\x01" + crc.to_bytes(4, "big") + b"\x00\x00\x00\x00"
    assert decode_snapshot(encode_snapshot([])) == []


def test_producer_snapshot_default_has_no_open_transaction():
    entry = ProducerSnapshotEntry(1, 0, 0, 0, 0, 0, 0)
    assert entry.current_txn_first_offset == -1


def test_producer_snapshot_write_is_atomic_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "00000000000000000010.snapshot"
    write_snapshot(path, [ENTRY])
    write_snapshot(path, [])
    assert read_snapshot(path) == []
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("position", [0, 1, 2, 5, 6, 9, 10, 30, 55])
def test_producer_snapshot_any_flipped_byte_is_detected(tmp_path, position):
    data = bytearray(encode_snapshot([ENTRY]))
    data[position] ^= 0x40
    path = tmp_path / "x.snapshot"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="x.snapshot"):
        read_snapshot(path)


@pytest.mark.parametrize("cut", [0, 1, 6, 9, 10, 20, 55])
def test_producer_snapshot_truncated_file_is_detected(tmp_path, cut):
    path = tmp_path / "x.snapshot"
    path.write_bytes(encode_snapshot([ENTRY])[:cut])
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_producer_snapshot_count_mismatch_with_valid_crc_is_detected():
    covered = b"\x00\x00\x00\x02" + ENTRY_BYTES  # claims two entries, holds one
    data = b"\x00\x01" + struct.pack(">I", _reference_crc32c(covered)) + covered
    with pytest.raises(CorruptSnapshotError, match="2 entries"):
        decode_snapshot(data)


def test_producer_snapshot_unknown_version_is_detected():
    data = b"\x00\x02" + encode_snapshot([ENTRY])[2:]
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        decode_snapshot(data)


def test_producer_snapshot_corrupt_error_is_a_log_error():
    assert issubclass(CorruptSnapshotError, LogError)


def test_producer_snapshot_field_out_of_range_is_refused():
    with pytest.raises(ValueError):
        encode_snapshot([ProducerSnapshotEntry(1, 2**15, 0, 0, 0, 0, 0)])


entries = st.builds(
    ProducerSnapshotEntry,
    producer_id=st.integers(-(2**63), 2**63 - 1),
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    last_sequence=st.integers(-(2**31), 2**31 - 1),
    last_offset=st.integers(-1, 2**63 - 1),
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp=st.integers(-1, 2**63 - 1),
    coordinator_epoch=st.integers(-1, 2**31 - 1),
    current_txn_first_offset=st.integers(-1, 2**63 - 1),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(entries, max_size=20))
def test_producer_snapshot_round_trips_any_entries(snapshot):
    data = encode_snapshot(snapshot)
    assert len(data) == 10 + 46 * len(snapshot)
    assert struct.unpack_from(">I", data, 2)[0] == _reference_crc32c(data[6:])
    assert decode_snapshot(data) == snapshot
