"""Golden byte vectors, written out by hand from the format in Kafka's implementation docs
(section 5.3: record batch, record, control batches), and checked against what kcore builds and
reads. The CRCs are the only values not derived by hand: each is checked below against
kafka-python's pure-Python CRC-32C, an implementation independent of the `crc32c` package."""

import warnings

from kcore.record import (
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    build_mirror_pid_reset_batch,
    read_control_record,
)

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas at import with a deprecated importlib API.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record._crc32c import crc as reference_crc32c

# 1700000000000 ms = 0x0000018BCFE56800
TS = bytes.fromhex("0000018bcfe56800")

# One record, key b"k", value b"hi", one header ("a", b"b"); base offset 5, leader epoch 3,
# producer 1000 epoch 0 sequence 0, uncompressed, CREATE_TIME.
SMALL_RECORD = bytes(
    [
        0x1A,  # length: 13 bytes follow -> zig-zag 26
        0x00,  # attributes
        0x00,  # timestampDelta 0
        0x00,  # offsetDelta 0
        0x02,  # keyLength 1 -> zig-zag 2
        0x6B,  # "k"
        0x04,  # valueLength 2 -> zig-zag 4
        0x68,
        0x69,  # "hi"
        0x02,  # headersCount 1
        0x02,  # headerKeyLength 1
        0x61,  # "a"
        0x02,  # headerValueLength 1
        0x62,  # "b"
    ]
)
SMALL_CRC = bytes.fromhex("ba37daee")
SMALL_BATCH = b"".join(
    [
        bytes.fromhex("0000000000000005"),  # baseOffset 5
        bytes.fromhex("0000003f"),  # batchLength: 61 - 12 + 14 = 63
        bytes.fromhex("00000003"),  # partitionLeaderEpoch 3
        bytes.fromhex("02"),  # magic 2
        SMALL_CRC,  # crc: CRC-32C of everything from attributes on
        bytes.fromhex("0000"),  # attributes: none, CREATE_TIME, not txn, not control
        bytes.fromhex("00000000"),  # lastOffsetDelta 0
        TS,  # baseTimestamp
        TS,  # maxTimestamp
        bytes.fromhex("00000000000003e8"),  # producerId 1000
        bytes.fromhex("0000"),  # producerEpoch 0
        bytes.fromhex("00000000"),  # baseSequence 0
        bytes.fromhex("00000001"),  # recordsCount 1
        SMALL_RECORD,
    ]
)

# COMMIT marker: producer 4242 epoch 7, coordinator epoch 9, base offset 100, leader epoch 2.
COMMIT_RECORD = bytes(
    [
        0x20,  # length: 16 bytes follow -> zig-zag 32
        0x00,  # attributes
        0x00,  # timestampDelta 0
        0x00,  # offsetDelta 0
        0x08,  # keyLength 4
        0x00,
        0x00,  # key: version 0
        0x00,
        0x01,  # key: type 1 = COMMIT
        0x0C,  # valueLength 6
        0x00,
        0x00,  # value: version 0
        0x00,
        0x00,
        0x00,
        0x09,  # value: coordinator epoch 9
        0x00,  # headersCount 0
    ]
)
COMMIT_CRC = bytes.fromhex("e314eb36")
COMMIT_BATCH = b"".join(
    [
        bytes.fromhex("0000000000000064"),  # baseOffset 100
        bytes.fromhex("00000042"),  # batchLength: 49 + 17 = 66
        bytes.fromhex("00000002"),  # partitionLeaderEpoch 2
        bytes.fromhex("02"),  # magic 2
        COMMIT_CRC,
        bytes.fromhex("0030"),  # attributes: transactional (0x10) | control (0x20)
        bytes.fromhex("00000000"),  # lastOffsetDelta 0
        TS,  # baseTimestamp
        TS,  # maxTimestamp
        bytes.fromhex("0000000000001092"),  # producerId 4242
        bytes.fromhex("0007"),  # producerEpoch 7
        bytes.fromhex("ffffffff"),  # baseSequence -1
        bytes.fromhex("00000001"),  # recordsCount 1
        COMMIT_RECORD,
    ]
)

# MIRROR_PID_RESET value for cluster id "abc": int16 version 0, compact string (3 + 1 = 0x04,
# then "abc"), empty tagged fields.
PID_RESET_VALUE = bytes([0x00, 0x00, 0x04, 0x61, 0x62, 0x63, 0x00])


def test_golden_crcs_match_an_independent_crc32c():
    assert reference_crc32c(SMALL_BATCH[21:]) == int.from_bytes(SMALL_CRC, "big")
    assert reference_crc32c(COMMIT_BATCH[21:]) == int.from_bytes(COMMIT_CRC, "big")


def test_golden_small_batch_is_what_the_builder_writes():
    b = RecordBatchBuilder(
        5, partition_leader_epoch=3, producer_id=1000, producer_epoch=0, base_sequence=0
    )
    b.append(1_700_000_000_000, b"k", b"hi", [("a", b"b")])
    assert bytes(b.build()) == SMALL_BATCH


def test_golden_small_batch_reads_back_field_by_field():
    batch = RecordBatch(SMALL_BATCH)
    batch.validate()
    h = batch.header()
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic) == (5, 63, 3, 2)
    assert (h.crc, h.attributes, h.last_offset_delta) == (0xBA37DAEE, 0, 0)
    assert (h.base_timestamp, h.max_timestamp) == (1_700_000_000_000, 1_700_000_000_000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (1000, 0, 0, 1)
    (record,) = batch.records()
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == (
        5,
        1_700_000_000_000,
        b"k",
        b"hi",
        [("a", b"b")],
    )


def test_golden_commit_batch_is_what_the_marker_builder_writes():
    built = build_end_txn_marker_batch(
        producer_id=4242,
        producer_epoch=7,
        commit=True,
        coordinator_epoch=9,
        base_offset=100,
        partition_leader_epoch=2,
        timestamp=1_700_000_000_000,
    )
    assert bytes(built) == COMMIT_BATCH


def test_golden_commit_batch_reads_as_a_commit_marker():
    batch = RecordBatch(COMMIT_BATCH)
    batch.validate()
    assert batch.is_control and batch.is_transactional
    control = read_control_record(batch)
    assert control.type is ControlRecordType.COMMIT
    marker = control.end_txn_marker()
    assert marker.commit and marker.coordinator_epoch == 9


def test_golden_abort_batch_differs_from_commit_only_in_type_and_crc():
    abort = build_end_txn_marker_batch(4242, 7, False, 9, 100, 2, 1_700_000_000_000)
    expected = bytearray(COMMIT_BATCH)
    expected[61 + 8] = 0x00  # key type byte: 0 = ABORT
    expected[17:21] = reference_crc32c(bytes(expected[21:])).to_bytes(4, "big")
    assert abort == expected


def test_golden_mirror_pid_reset_value_is_version_then_compact_string_then_tags():
    batch = RecordBatch(build_mirror_pid_reset_batch("abc", 10, 4, 1_700_000_000_000))
    batch.validate()
    (record,) = batch.records()
    assert record.key == b"\x00\x00\x00\x07"  # version 0, type 7 (D-03)
    assert record.value == PID_RESET_VALUE
    assert batch.attributes == 0x20  # control, not transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
