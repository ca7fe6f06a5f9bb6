"""The pure half of ``kcore dump-log`` (kcore/inspect): Kafka's lines for batches, records,
control records and the other files, the decoders and console formatters, and where damaged
bytes stop parsing. Expected lines are written out by hand from Kafka's DumpLogSegments."""

import json
import uuid

from crc32c import crc32c

from kcore.coordinator.group import records as group_records
from kcore.coordinator.transaction import records as txn_records
from kcore.coordinator.transaction.state import TransactionState
from kcore.inspect import decoders as d
from kcore.inspect import file_dumps as fd
from kcore.inspect.segment_dump import DumpOptions, dump_records, summary_line
from kcore.log.producer_snapshot import ProducerSnapshotEntry
from kcore.log.transaction_index import AbortedTxn
from kcore.metadata import records as metadata_records
from kcore.mirror import records as mirror_records
from kcore.mirror.state import MirrorPartitionState as S
from kcore.protocol import messages as m
from kcore.protocol.message_json import message_json
from kcore.raft.log import LogEntry, OffsetAndEpoch
from kcore.raft.records import encode_entries, encode_leader_change
from kcore.raft.snapshot_files import encode_snapshot
from kcore.record import (
    CompressionType,
    RecordBatchBuilder,
    TimestampType,
    build_end_txn_marker_batch,
    build_mirror_pid_reset_batch,
)
from kcore.record.records import Record

from .dump_log_lines import kafka_batch_line


def _dump(data, **options) -> tuple[list[str], object]:
    out: list[bytes] = []
    report = dump_records(data, DumpOptions(**options), out.append, name="seg.log")
    return b"".join(out).decode().splitlines(), report


def _batch(base_offset=0, records=((1700000000000, b"k", b"v0", [("h", b"1")]),), **kw) -> bytes:
    b = RecordBatchBuilder(base_offset, **kw)
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return bytes(b.build())


# -- batch and record lines -------------------------------------------------------------------


def test_batch_line_has_every_field_in_kafkas_order():
    data = _batch(
        41,
        compression=CompressionType.LZ4,
        producer_id=7,
        producer_epoch=2,
        base_sequence=5,
        is_transactional=True,
        partition_leader_epoch=3,
        records=[(1700000000000 + i, b"k", b"v" * 50, []) for i in range(3)],
    )
    lines, report = _dump(data)
    crc = int.from_bytes(data[17:21], "big")
    assert lines == [
        "baseOffset: 41 lastOffset: 43 count: 3 baseSequence: 5 lastSequence: 7 producerId: 7 "
        "producerEpoch: 2 partitionLeaderEpoch: 3 isTransactional: true isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000002 "
        f"size: {len(data)} magic: 2 compresscodec: lz4 crc: {crc} isvalid: true"
    ]
    assert lines == [kafka_batch_line(data, 0)]
    assert (report.batches, report.records, report.first_offset, report.last_offset) == (
        1,
        3,
        41,
        43,
    )
    assert not report.problems


def test_batch_line_log_append_time_and_delete_horizon():
    data = _batch(
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=1700000009999,
        delete_horizon_ms=1700000005000,
    )
    (line,) = _dump(data)[0]
    assert (
        "deleteHorizonMs: OptionalLong[1700000005000] position: 0 LogAppendTime: 1700000009999"
        in line
    )


def test_record_lines_with_data_and_sequences():
    data = _batch(
        10,
        producer_id=3,
        producer_epoch=0,
        base_sequence=20,
        records=[
            (1700000000000, b"k0", b"v0", [("a", b"1"), ("b", None)]),
            (1700000000005, None, b"v1", []),
            (1700000000007, b"k2", None, []),
        ],
    )
    lines, _ = _dump(data, print_data=True)
    assert lines[1:] == [
        "| offset: 10 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: 20 "
        "headerKeys: [a,b] key: k0 payload: v0",
        "| offset: 11 CreateTime: 1700000000005 keySize: -1 valueSize: 2 sequence: 21 "
        "headerKeys: [] payload: v1",
        "| offset: 12 CreateTime: 1700000000007 keySize: 2 valueSize: -1 sequence: 22 "
        "headerKeys: [] key: k2",
    ]


def test_record_lines_deep_iteration_without_data_and_skip_metadata_quirks():
    data = _batch(records=[(5, b"k", b"v", []), (6, None, b"w", [])])
    deep, _ = _dump(data, deep_iteration=True)
    assert (
        deep[1] == "| offset: 0 CreateTime: 5 keySize: 1 valueSize: 1 sequence: -1 headerKeys: []"
    )
    skipped, _ = _dump(data, print_data=True, skip_record_metadata=True)
    # Kafka's: the "| " is printed only with the key, so a record without one starts with a space.
    assert skipped[1:] == ["| key: k payload: v", " payload: w"]


def test_record_lines_replace_bad_utf8_as_java_does():
    data = _batch(records=[(1, b"\xff", "é\u2603".encode() + b"\xc3", [])])
    lines, _ = _dump(data, print_data=True)
    assert lines[1].endswith("key: \ufffd payload: é\u2603\ufffd")


def test_control_lines_for_markers_mirror_pid_reset_and_kraft():
    commit = bytes(build_end_txn_marker_batch(9, 1, True, 3, base_offset=4, timestamp=7))
    abort = bytes(build_end_txn_marker_batch(9, 1, False, 3, base_offset=5, timestamp=8))
    reset = bytes(build_mirror_pid_reset_batch("uuid-of-source", base_offset=6, timestamp=9))
    lines, report = _dump(commit + abort + reset, print_data=True)
    assert lines[1] == (
        "| offset: 4 CreateTime: 7 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 3"
    )
    assert lines[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 3")
    assert lines[5].endswith(' MirrorPidReset {"version":0,"sourceClusterId":"uuid-of-source"}')
    assert "isControl: true" in lines[4] and not report.problems

    snapshot = encode_snapshot(
        OffsetAndEpoch(3, 2), [b"\x01\x0c\x00\x00"], last_contained_log_timestamp=11
    )
    lines, _ = _dump(snapshot, deep_iteration=True)
    assert lines[1].endswith(' SnapshotHeader {"version":0,"lastContainedLogTimestamp":11}')
    assert lines[-1].endswith(' SnapshotFooter {"version":0}')


def test_leader_change_prints_its_control_type_as_kafka():
    data = encode_entries([LogEntry(0, 1, encode_leader_change(1, [1], [1]), 2)])
    lines, _ = _dump(data, deep_iteration=True)
    assert lines[1].endswith("headerKeys: [] controlType: LEADER_CHANGE(2)")


def test_non_consecutive_offsets_are_collected():
    b = RecordBatchBuilder(0)
    for offset in (0, 1, 5, 9):
        b.append(1, b"k", b"v", offset=offset)
    _, report = _dump(bytes(b.build()), deep_iteration=True)
    assert report.non_consecutive == [(1, 5), (5, 9)]
    assert not report.problems


def test_summary_line():
    data = _batch(0, partition_leader_epoch=0) + _batch(1, partition_leader_epoch=2)
    _, report = _dump(data)
    assert summary_line(report) == (
        f"Summary: batches: 2 records: 2 bytes: {len(data)} firstOffset: 0 lastOffset: 1 "
        "partitionLeaderEpochs: [0,2]"
    )
    assert json.loads(summary_line(report, as_json=True))["partitionLeaderEpochs"] == [0, 2]


# -- damage -----------------------------------------------------------------------------------


def test_flipped_byte_is_reported_with_both_crcs_and_the_next_batch_is_read():
    first, second = _batch(0), _batch(1)
    data = bytearray(first + second)
    data[len(first) + 70] ^= 0x10  # inside the second batch's records
    lines, report = _dump(bytes(data), print_data=True)
    stored = int.from_bytes(data[len(first) + 17 : len(first) + 21], "big")
    computed = crc32c(bytes(data[len(first) + 21 :]))
    assert lines[2].endswith(f"crc: {stored} isvalid: false")
    assert f"position: {len(first)} " in lines[2]
    assert report.problems == [
        f"corrupt batch at position {len(first)} (baseOffset 1): crc {stored} found, "
        f"{computed} expected; its records are not read"
    ]


def test_truncated_batch_is_reported_where_parsing_stops():
    first, second = _batch(0), _batch(1)
    data = first + second[:40]
    lines, report = _dump(data, deep_iteration=True)
    assert lines[-1] == "Found 40 invalid bytes at the end of seg.log"
    assert report.problems == [
        f"parsing stopped at position {len(first)}: record batch of 40 bytes is shorter than "
        "the 61-byte v2 header (40 bytes after the last whole batch)"
    ]
    data = first + second[:-3]
    _, report = _dump(data)
    assert f"record batch of {len(second)} bytes is truncated" in report.problems[0]
    # --max-bytes cuts on purpose: no report, as in Kafka.
    out: list[bytes] = []
    report = dump_records(data, DumpOptions(), out.append, name="x", report_trailing=False)
    assert not report.problems and b"invalid bytes" not in b"".join(out)


def test_impossible_length_stops_parsing_at_its_position():
    first = _batch(0)
    data = bytearray(first + _batch(1))
    data[len(first) + 8 : len(first) + 12] = (3).to_bytes(4, "big")
    _, report = _dump(bytes(data))
    assert report.problems[0].startswith(f"parsing stopped at position {len(first)}: ")
    assert report.batches == 1


# -- decoders and console formatters ----------------------------------------------------------


def _record(key, value, offset=7) -> Record:
    return Record(offset, 0, 0, 0, key, value, [])


def test_offsets_decoder_and_formatter():
    key, value = group_records.encode(
        group_records.OffsetCommitRecord("g", "t", 2, 42, 5, "meta", 1700000000000)
    )
    assert d.decode_offsets(_record(key, value)) == (
        '{"type":"1","data":{"group":"g","topic":"t","partition":2}}',
        '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta",'
        '"commitTimestamp":1700000000000}}',
    )
    assert d.decode_offsets(_record(key, None))[1] == "<DELETE>"
    assert d.format_offsets(key, value) == (
        '{"key":{"version":1,"data":{"group":"g","topic":"t","partition":2}},'
        '"value":{"version":3,"data":{"offset":42,"leaderEpoch":5,"metadata":"meta",'
        '"commitTimestamp":1700000000000}}}'
    )
    assert d.format_offsets(key, None).endswith('"value":null}')
    group_key, _ = group_records.encode(group_records.GroupTombstone("g"))
    assert d.format_offsets(group_key, None) == ""  # Kafka's formatter skips group metadata
    assert d.decode_offsets(_record(b"\x00\x63x", b"")) == (
        "Unknown record type 99 at offset 7, skipping.",
        None,
    )
    assert d.decode_offsets(_record(b"\x00\x01\x00", b""))[0].startswith(
        "Error at offset 7, skipping."
    )


def test_offsets_decoder_decodes_consumer_subscription_and_assignment():
    sub = b"\x00\x01" + m.ConsumerProtocolSubscription(topics=["t"]).encode(1)
    assignment = b"\x00\x00" + m.ConsumerProtocolAssignment(
        assigned_partitions=[m.ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[0])]
    ).encode(0)
    member = m.GroupMetadataValue.MemberMetadata(
        member_id="m1",
        client_id="c",
        client_host="/h",
        session_timeout=10,
        subscription=sub,
        assignment=assignment,
    )
    value = m.GroupMetadataValue(
        protocol_type="consumer", generation=1, protocol="range", leader="m1", members=[member]
    )
    key, raw = group_records.encode(group_records.GroupMetadataRecord("g", value))
    payload = json.loads(d.decode_offsets(_record(key, raw))[1])
    (got,) = payload["data"]["members"]
    assert got["subscription"] == {"topics": ["t"], "userData": None, "ownedPartitions": []}
    assert got["assignment"] == {
        "assignedPartitions": [{"topic": "t", "partitions": [0]}],
        "userData": None,
    }


def test_transaction_log_decoder_and_formatter():
    record = txn_records.TransactionLogRecord(
        "tid",
        5,
        -1,
        -1,
        1,
        -1,
        60000,
        TransactionState.PREPARE_COMMIT,
        {"b": [1, 0], "a": [2]},
        123,
        100,
    )
    key, value = txn_records.encode(record)
    assert d.decode_transaction_log(_record(key, value)) == (
        "transaction_metadata::transactionalId=tid",
        "producerId:5,producerEpoch:1,state=PrepareCommit,partitions=[a-2,b-0,b-1],"
        "txnLastUpdateTimestamp=123,txnTimeoutMs=60000",
    )
    assert d.decode_transaction_log(_record(key, None))[1] == "<DELETE>"
    assert d.format_transaction_log(key, value) == (
        '{"key":{"version":0,"data":{"transactionalId":"tid"}},"value":{"version":1,"data":'
        '{"producerId":5,"producerEpoch":1,"transactionTimeoutMs":60000,"transactionStatus":2,'
        '"transactionPartitions":[{"topic":"a","partitionIds":[2]},{"topic":"b","partitionIds":'
        '[0,1]}],"transactionLastUpdateTimestampMs":123,"transactionStartTimestampMs":100}}}'
    )
    assert d.format_transaction_log(key, None).endswith('"value":null}')


def test_mirror_state_decoder_and_formatter():
    key, value = mirror_records.encode(
        mirror_records.MirrorPartitionStateRecord("my-mirror", "my-topic", 0, S.MIRRORING)
    )
    assert d.decode_mirror_state(_record(key, value)) == (
        '{"type":"2","data":{"mirrorName":"my-mirror"}}',
        '{"version":"0","data":{"topicName":"my-topic","partition":0,"state":1}}',
    )
    # spec §11.6: numbers for the type and the version.
    assert d.format_mirror_state(key, value) == (
        '{"key":{"type":2,"data":{"mirrorName":"my-mirror"}},'
        '"value":{"version":0,"data":{"topicName":"my-topic","partition":0,"state":1}}}'
    )
    assert d.format_mirror_state(key, None).endswith('"value":null}')
    assert d.decode_mirror_state(_record(b"\x00", b""))[0].startswith(
        "Error at offset 7, skipping."
    )


def test_cluster_metadata_decoder():
    topic_id = uuid.UUID(int=1)
    value = metadata_records.encode_record(m.TopicRecord(name="orders", topic_id=topic_id))
    assert d.decode_cluster_metadata(_record(None, value)) == (
        None,
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}',
    )
    assert d.decode_cluster_metadata(_record(None, b"\x01\x7f\x00"))[1] == (
        "Error at 7, skipping. Unknown metadata record type 127"
    )
    assert d.metadata_record_type_name("ZkMigrationStateRecord") == "ZK_MIGRATION_STATE_RECORD"


def test_message_json_tagged_fields_only_when_not_default_and_bytes_in_base64():
    value = m.MirrorPartitionStateValue(topic_name="t", partition=1, state=7, retry_attempt=2)
    assert message_json(value, 0) == {
        "topicName": "t",
        "partition": 1,
        "state": 7,
        "retryAttempt": 2,
    }
    member = m.GroupMetadataValue.MemberMetadata(subscription=b"\x00\x01", assignment=b"")
    value = m.GroupMetadataValue(members=[member])
    assert message_json(value, 3)["members"][0]["subscription"] == "AAE="


# -- the other files --------------------------------------------------------------------------


def test_file_kinds():
    assert fd.file_kind("00000000000000000000.log") == "log"
    assert fd.file_kind("00000000000000000000.log.deleted") is None
    assert fd.file_kind("00000000000000000012-0000000003.checkpoint") == "snapshot"
    assert fd.file_kind("00000000000000000009.snapshot") == "producer-snapshot"
    assert fd.file_kind("replication-offset-checkpoint") == "offset-checkpoint"
    assert fd.file_kind("leader-epoch-checkpoint") == "leader-epoch-checkpoint"
    assert fd.file_kind("meta.properties") is None
    assert fd.file_kind("quorum-state") is None


def test_producer_snapshot_and_txn_index_lines():
    entry = ProducerSnapshotEntry(7, 1, 10, 30, 4, 1700000000000, 2, 25)
    assert fd.producer_snapshot_line(entry) == (
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: 2 currentTxnFirstOffset: "
        "OptionalLong[25] lastTimestamp: 1700000000000 firstSequence: 6 lastSequence: 10 "
        "lastOffset: 30 offsetDelta: 4 timestamp: 1700000000000"
    )
    empty = ProducerSnapshotEntry(8, 0, -1, -1, 0, 5, -1)
    assert fd.producer_snapshot_line(empty) == (
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 5 "
    )
    wrapped = ProducerSnapshotEntry(9, 0, 1, 3, 3, 5, -1)  # sequences wrapped: 2**31-2 .. 1
    assert "firstSequence: 2147483646 lastSequence: 1" in fd.producer_snapshot_line(wrapped)
    assert fd.txn_index_fields(AbortedTxn(7, 10, 14, 15)) == {
        "version": 0,
        "producerId": 7,
        "firstOffset": 10,
        "lastOffset": 14,
        "lastStableOffset": 15,
    }


def test_index_checks_stop_at_the_zero_tail_and_find_mismatches():
    data = _batch(0, records=[(1, b"k", b"v", [])] * 2) + _batch(2, records=[(9, b"k", b"v", [])])
    size = len(_batch(0, records=[(1, b"k", b"v", [])] * 2))
    entries = fd.used_entries([(1, 0), (2, size), (0, 0), (0, 0)], 0, 0)
    assert entries == [(1, 0), (2, size)]
    assert fd.used_entries([(0, 0), (0, 0), (0, 0)], 0, 0) == []  # preallocated, none in use
    assert fd.used_entries([(0, 0)], 0, 0) == [(0, 0)]  # one entry: a batch of one record
    check = fd.check_offset_index(entries, data, max_message_size=1 << 20, verify_only=False)
    assert check.lines == ["offset: 1 position: 0", f"offset: 2 position: {size}"]
    assert not check.mismatches
    check = fd.check_offset_index([(0, 0)], data, max_message_size=1 << 20, verify_only=True)
    assert check.lines == [] and check.mismatches == [(0, 1)]
    check = fd.check_time_index([(1, 1), (9, 2), (9, 2)], entries, data, verify_only=False)
    assert check.lines[0] == "timestamp: 1 offset: 1"
    assert check.out_of_order == [(9, 9)] and not check.timestamp_mismatches


def test_cluster_metadata_decoder_reads_the_mirror_records():
    # Cluster mirroring's metadata: PartitionChangeRecord v3 (MinLeaderEpoch, spec M-88) and
    # ConfigRecords of the CLUSTER_MIRROR resource (type 64, M-87).
    change = metadata_records.PartitionChangeRecord(
        partition_id=0, topic_id=uuid.UUID(int=2), min_leader_epoch=9
    )
    payload = json.loads(
        d.decode_cluster_metadata(_record(None, metadata_records.encode_record(change)))[1]
    )
    assert payload["type"] == "PARTITION_CHANGE_RECORD" and payload["version"] == 3
    assert payload["data"]["minLeaderEpoch"] == 9
    config = m.ConfigRecord(
        resource_type=64, resource_name="my-mirror", name="bootstrap.servers", value="h:1"
    )
    payload = json.loads(
        d.decode_cluster_metadata(_record(None, metadata_records.encode_record(config)))[1]
    )
    assert payload == {
        "type": "CONFIG_RECORD",
        "version": 0,
        "data": {
            "resourceType": 64,
            "resourceName": "my-mirror",
            "name": "bootstrap.servers",
            "value": "h:1",
        },
    }


def test_console_consumer_formatters_are_these_functions():
    from types import SimpleNamespace

    from kcore.commands.console_formatters import make_formatter

    key, value = mirror_records.encode(
        mirror_records.MirrorPartitionStateRecord("m", "t", 0, S.LOG_TRUNCATION)
    )
    record = SimpleNamespace(key=key, value=value)
    formatter = make_formatter("org.apache.kafka.tools.consumer.MirrorStateMessageFormatter", {})
    assert formatter.format(record) == (d.format_mirror_state(key, value) + "\n").encode()
    group_key, _ = group_records.encode(group_records.GroupTombstone("g"))
    offsets = make_formatter("org.apache.kafka.tools.consumer.OffsetsMessageFormatter", {})
    assert offsets.format(SimpleNamespace(key=group_key, value=None)) == b""
