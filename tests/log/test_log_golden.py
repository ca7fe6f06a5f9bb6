"""Golden files: a tiny log written by kcore matches, byte for byte, what the format says.

Every expected byte below is written out by hand from the specifications, not captured from
kcore: the record batch v2 layout (``kafka-protocol/docs/implementation.html`` §5.3.1), the
record layout (§5.3.2: zig-zag varints), and the on-disk layout of a partition folder and a log
directory (``shared/reference/on-disk-format.md``). The CRC-32C literals are cross-checked
against the ``crc32c`` library over the expected bytes, so a wrong literal fails on its own.

The scenario (one partition, ``T`` = 1_700_000_000_000 = 0x0000018BCFE56800):

* A: leader append in epoch 5, idempotent producer 1000 (epoch 3), sequences 0-1, two records
  ``k0=hello`` at T and ``k1=world`` at T+1 -> offsets 0-1;
* B: leader append in epoch 5, same producer, sequence 2, one record ``k2=again`` at T+10 with a
  header ``h=1`` -> offset 2;
* C: follower append of a batch the leader stamped with offset 3 and epoch 7, no producer, one
  record with a null key and value ``bye`` at T+20 -> offset 3;
* close (trim the indexes, snapshot producer state).
"""

from __future__ import annotations

import json
import uuid

from crc32c import crc32c

from kcore.log import log_manager as log_manager_module
from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log
from kcore.log.log_manager import LogManager
from kcore.log.producer_state import AppendOrigin
from kcore.record import RecordBatchBuilder, build_end_txn_marker_batch

T = 1_700_000_000_000
NOW = T + 100
PRODUCER_ID = 1000

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
NODE_ID = 1
DIRECTORY_ID = uuid.UUID("5f3c9a0e-7b21-4c8d-9e4f-0a1b2c3d4e5f")  # base64: XzyaDnshTI2eTwobLD1OXw
TOPIC_ID = uuid.UUID("1c2d3e4f-5a6b-4c7d-8e9f-a0b1c2d3e4f5")  # base64: HC0-T1prTH2On6CxwtPk9Q


def h(text: str) -> bytes:
    """Hex with spaces and ``|`` separators for readability."""
    return bytes.fromhex(text.replace("|", " "))


# -- the three batches, field by field ------------------------------------------------------
#
# Record (§5.3.2): length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
# keyLength varint | key | valueLength varint | value | headers count varint | headers.
# Varints are zig-zag: 0 -> 00, 1 -> 02, 2 -> 04, 5 -> 0a, -1 -> 01, 13 -> 1a, 17 -> 22.

RECORDS_A = h(
    # len 13 | attr | tsDelta 0 | offDelta 0 | keyLen 2 | "k0" | valLen 5 | "hello"    | 0 headers
    "1a       | 00   | 00        | 00         | 04       | 6b30 | 0a       | 68656c6c6f | 00"
    # len 13 | attr | tsDelta 1 | offDelta 1 | keyLen 2 | "k1" | valLen 5 | "world"    | 0 headers
    "1a       | 00   | 02        | 02         | 04       | 6b31 | 0a       | 776f726c64 | 00"
)
RECORDS_B = h(
    # len 17 | attr | tsDelta 0 | offDelta 0 | keyLen 2 | "k2" | valLen 5 | "again"
    "22       | 00   | 00        | 00         | 04       | 6b32 | 0a       | 616761696e"
    # 1 header | keyLen 1 | "h" | valLen 1 | "1"
    "02        | 02       | 68  | 02       | 31"
)
RECORDS_C = h(
    # len 9 | attr | tsDelta 0 | offDelta 0 | key null (-1) | valLen 3 | "bye"  | 0 headers
    "12      | 00   | 00        | 00         | 01            | 06       | 627965 | 00"
)

# Batch header (§5.3.1), 61 bytes, big-endian:
#   baseOffset int64 | batchLength int32 (bytes after this field) | partitionLeaderEpoch int32 |
#   magic int8 (2) | crc uint32 (CRC-32C of attributes..end) | attributes int16 |
#   lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 | producerId int64 |
#   producerEpoch int16 | baseSequence int32 | records count int32
CRC_A, CRC_B, CRC_C = "67066ccb", "58344a7c", "d92fb1ac"

BATCH_A = (
    h(
        "0000000000000000"  # baseOffset 0 (assigned by the leader)
        "0000004d"  # batchLength 77 = 89 - 12
        "00000005"  # partitionLeaderEpoch 5 (stamped by the leader)
        "02"  # magic 2
        + CRC_A
        + "0000"  # attributes: no compression, CreateTime, not transactional, not control
        "00000001"  # lastOffsetDelta 1
        "0000018bcfe56800"  # baseTimestamp T
        "0000018bcfe56801"  # maxTimestamp T+1
        "00000000000003e8"  # producerId 1000
        "0003"  # producerEpoch 3
        "00000000"  # baseSequence 0
        "00000002"  # 2 records
    )
    + RECORDS_A
)
BATCH_B = (
    h(
        "0000000000000002"  # baseOffset 2
        "00000043"  # batchLength 67 = 79 - 12
        "00000005"  # partitionLeaderEpoch 5
        "02" + CRC_B + "0000"
        "00000000"  # lastOffsetDelta 0
        "0000018bcfe5680a"  # baseTimestamp T+10
        "0000018bcfe5680a"  # maxTimestamp T+10
        "00000000000003e8"  # producerId 1000
        "0003"  # producerEpoch 3
        "00000002"  # baseSequence 2
        "00000001"  # 1 record
    )
    + RECORDS_B
)
BATCH_C = (
    h(
        "0000000000000003"  # baseOffset 3 (the leader's, kept by the follower)
        "0000003b"  # batchLength 59 = 71 - 12
        "00000007"  # partitionLeaderEpoch 7 (the leader's)
        "02" + CRC_C + "0000"
        "00000000"  # lastOffsetDelta 0
        "0000018bcfe56814"  # baseTimestamp T+20
        "0000018bcfe56814"  # maxTimestamp T+20
        "ffffffffffffffff"  # producerId -1: none
        "ffff"  # producerEpoch -1
        "ffffffff"  # baseSequence -1
        "00000001"  # 1 record
    )
    + RECORDS_C
)
POSITION_B = 89  # batch A is 89 bytes
POSITION_C = 89 + 79  # = 168

# The .index: int32 offset relative to the segment's base offset | int32 position. With
# index.interval.bytes = 0 an entry is added before every append but the first (the segment
# indexes an append once more than index.interval.bytes were written since the last entry).
# An entry names the batch's last offset, as Kafka's LogSegment writes it (B and C hold one
# record each; tests/log/test_index_entries.py covers batches of many records).
INDEX = h(
    "00000002 00000059"  # offset 2 -> byte 89 (batch B)
    "00000003 000000a8"  # offset 3 -> byte 168 (batch C)
)
# The .timeindex: int64 max timestamp so far | int32 relative offset of the batch that carried it;
# added with each offset-index entry; the final (T+20, 3) entry is not repeated at close.
TIME_INDEX = h(
    "0000018bcfe5680a 00000002"  # T+10 at offset 2
    "0000018bcfe56814 00000003"  # T+20 at offset 3
)
# leader-epoch-checkpoint: version 0, 2 entries, "<epoch> <start offset>".
LEADER_EPOCH_CHECKPOINT = b"0\n2\n5 0\n7 3\n"
# 00000000000000000004.snapshot: producer state as of offset 4 (ProducerSnapshot v1).
SNAPSHOT_CRC = "8bb79bfb"
SNAPSHOT = h(
    "0001"  # version 1
    + SNAPSHOT_CRC  # CRC-32C of everything after this field
    + "00000001"  # 1 entry
    "00000000000003e8"  # producer id 1000
    "0003"  # producer epoch 3
    "00000002"  # last sequence 2
    "0000000000000002"  # last offset 2
    "00000000"  # offset delta 0 (the last batch held one record)
    "0000018bcfe5680a"  # timestamp T+10 (max timestamp of its last batch)
    "ffffffff"  # coordinator epoch -1: never wrote a transaction marker
    "ffffffffffffffff"  # current transaction first offset -1: no open transaction
)


def config() -> LogConfig:
    return LogConfig.from_layers({"index.interval.bytes": "0"})


def build_batches() -> tuple[bytes, bytes, bytes]:
    """The three batches as the producer (A, B) and the leader (C) send them."""
    a = RecordBatchBuilder(producer_id=PRODUCER_ID, producer_epoch=3, base_sequence=0)
    a.append(timestamp=T, key=b"k0", value=b"hello")
    a.append(timestamp=T + 1, key=b"k1", value=b"world")
    b = RecordBatchBuilder(producer_id=PRODUCER_ID, producer_epoch=3, base_sequence=2)
    b.append(timestamp=T + 10, key=b"k2", value=b"again", headers=[("h", b"1")])
    c = RecordBatchBuilder(base_offset=3, partition_leader_epoch=7)
    c.append(timestamp=T + 20, key=None, value=b"bye")
    return bytes(a.build()), bytes(b.build()), bytes(c.build())


def write_scenario(plog) -> None:
    a, b, c = build_batches()
    assert plog.append_as_leader(a, leader_epoch=5, now_ms=NOW).first_offset == 0
    assert plog.append_as_leader(b, leader_epoch=5, now_ms=NOW).first_offset == 2
    assert plog.append_as_follower(c, now_ms=NOW).first_offset == 3


def test_golden_expected_crcs_are_the_crc32c_of_the_expected_bytes():
    # The literals above are checked here against the spec's definition, independently of kcore.
    for batch, crc in ((BATCH_A, CRC_A), (BATCH_B, CRC_B), (BATCH_C, CRC_C)):
        assert crc32c(batch[21:]) == int(crc, 16)
    assert crc32c(SNAPSHOT[6:]) == int(SNAPSHOT_CRC, 16)
    assert (len(BATCH_A), len(BATCH_B), len(BATCH_C)) == (89, 79, 71)
    assert len(SNAPSHOT) == 10 + 46


def test_golden_builder_writes_the_batches_the_spec_describes():
    a, b, c = build_batches()
    # Before the leader stamps A and B they carry offset 0 and leader epoch -1.
    unstamped_b = bytes(8) + BATCH_B[8:12] + h("ffffffff") + BATCH_B[16:]
    assert a == BATCH_A[:12] + h("ffffffff") + BATCH_A[16:]
    assert b == unstamped_b
    assert c == BATCH_C


def test_golden_partition_files_match_the_format_byte_for_byte(tmp_path):
    directory = tmp_path / "golden-0"
    plog = create_log(directory, config(), now_ms=NOW)
    write_scenario(plog)
    plog.close()

    base = "00000000000000000000"
    assert (directory / f"{base}.log").read_bytes() == BATCH_A + BATCH_B + BATCH_C
    assert (directory / f"{base}.index").read_bytes() == INDEX
    assert (directory / f"{base}.timeindex").read_bytes() == TIME_INDEX
    assert (directory / "leader-epoch-checkpoint").read_bytes() == LEADER_EPOCH_CHECKPOINT
    assert (directory / "00000000000000000004.snapshot").read_bytes() == SNAPSHOT
    # No aborted transaction: no .txnindex; nothing else left behind (no .tmp, no .deleted).
    assert sorted(p.name for p in directory.iterdir()) == [
        f"{base}.index",
        f"{base}.log",
        f"{base}.timeindex",
        "00000000000000000004.snapshot",
        "leader-epoch-checkpoint",
    ]


def test_golden_log_directory_files_match_the_format(tmp_path, monkeypatch):
    # The directory id is random in `kcore format`; fix it so the file is a golden one.
    monkeypatch.setattr(log_manager_module, "random_uuid", lambda: DIRECTORY_ID)
    log_dir = tmp_path / "kafka-logs"
    manager = LogManager([log_dir], lambda topic: config())
    manager.format(CLUSTER_ID, NODE_ID)
    manager.startup(NOW)
    plog = manager.get_or_create_log("golden", 0, TOPIC_ID, NOW)
    write_scenario(plog)
    plog.update_high_watermark(4)
    manager.shutdown(broker_epoch=42)

    assert (log_dir / "meta.properties").read_text() == (
        "#kcore\n"
        "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
        "directory.id=XzyaDnshTI2eTwobLD1OXw\n"  # URL-safe base64 of the 16 bytes, no padding
        "node.id=1\n"
        "version=1\n"
    )
    assert (log_dir / "golden-0" / "partition.metadata").read_bytes() == (
        b"version: 0\ntopic_id: HC0-T1prTH2On6CxwtPk9Q\n"  # '-' is URL-safe base64's 62
    )
    # Checkpoints: version 0, entry count, "<topic> <partition> <offset>" per line.
    assert (log_dir / "recovery-point-offset-checkpoint").read_bytes() == b"0\n1\ngolden 0 4\n"
    assert (log_dir / "replication-offset-checkpoint").read_bytes() == b"0\n1\ngolden 0 4\n"
    assert (log_dir / "log-start-offset-checkpoint").read_bytes() == b"0\n0\n"
    marker = (log_dir / ".kafka_cleanshutdown").read_bytes()
    assert marker == b'{"version":0,"brokerEpoch":42}'
    assert json.loads(marker) == {"version": 0, "brokerEpoch": 42}
    # The partition folder holds the same golden segment files as without the manager.
    assert (log_dir / "golden-0" / "00000000000000000000.log").read_bytes() == (
        BATCH_A + BATCH_B + BATCH_C
    )


def test_golden_directory_files_survive_a_restart_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(log_manager_module, "random_uuid", lambda: DIRECTORY_ID)
    log_dir = tmp_path / "kafka-logs"
    manager = LogManager([log_dir], lambda topic: config())
    manager.format(CLUSTER_ID, NODE_ID)
    manager.startup(NOW)
    write_scenario(manager.get_or_create_log("golden", 0, TOPIC_ID, NOW))
    manager.shutdown()
    paths = [log_dir / "meta.properties", log_dir / "golden-0" / "partition.metadata"]
    before = [p.read_bytes() for p in paths]

    again = LogManager([log_dir], lambda topic: config())
    again.format(CLUSTER_ID, NODE_ID)  # formatting a formatted directory changes nothing
    again.startup(NOW)
    assert again.meta.cluster_id == CLUSTER_ID and again.meta.directory_id == DIRECTORY_ID
    assert again.topic_ids == {"golden": TOPIC_ID}
    assert again.get_log("golden", 0).log_end_offset == 4
    again.shutdown()
    assert [p.read_bytes() for p in paths] == before


def test_golden_transaction_index_entry_matches_the_format(tmp_path):
    directory = tmp_path / "golden-0"
    plog = create_log(directory, config(), now_ms=NOW)
    txn = RecordBatchBuilder(
        producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(timestamp=T, key=None, value=b"x")
    plog.append_as_leader(bytes(txn.build()), leader_epoch=5, now_ms=NOW)  # offset 0
    abort = build_end_txn_marker_batch(7, 0, commit=False, coordinator_epoch=3, timestamp=T)
    plog.append_as_leader(bytes(abort), 5, now_ms=NOW, origin=AppendOrigin.COORDINATOR)  # 1
    plog.close()
    # One 34-byte entry per aborted transaction whose ABORT marker is in the segment.
    assert (directory / "00000000000000000000.txnindex").read_bytes() == h(
        "0000"  # version 0
        "0000000000000007"  # producer id 7
        "0000000000000000"  # first offset 0
        "0000000000000001"  # last offset 1: the ABORT marker
        "0000000000000002"  # last stable offset 2: no other transaction was open
    )
