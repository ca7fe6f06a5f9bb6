"""The memory log's epoch-cache semantics, the snapshot store, and entries as record batches."""

from __future__ import annotations

import pytest

from kcore.protocol import messages as m
from kcore.raft import rpc
from kcore.raft.log import LogEntry, MemoryRaftLog, OffsetAndEpoch, RaftLog, RaftRecord
from kcore.raft.records import (
    LEADER_CHANGE,
    decode_entries,
    decode_leader_change,
    encode_entries,
    encode_leader_change,
)
from kcore.raft.snapshots import MemorySnapshotStore, SnapshotStore
from kcore.record import CorruptRecordError, iter_batches

OE = OffsetAndEpoch


def make_log(*runs: tuple[int, int]) -> MemoryRaftLog:
    """A log of runs (epoch, count) of data entries."""
    log = MemoryRaftLog()
    for epoch, count in runs:
        log.append([RaftRecord(b"e%d-%d" % (epoch, i)) for i in range(count)], epoch)
    return log


def test_log_memory_log_implements_the_protocol():
    assert isinstance(MemoryRaftLog(), RaftLog)
    assert isinstance(MemorySnapshotStore(), SnapshotStore)


def test_log_append_assigns_offsets_and_tracks_epochs():
    log = MemoryRaftLog()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (0, 0, 0)
    assert log.append([RaftRecord(b"a"), RaftRecord(b"b")], 1) == range(0, 2)
    assert log.append([RaftRecord(b"lc", LEADER_CHANGE)], 3) == range(2, 3)
    assert log.append([], 3) == range(3, 3)
    assert log.end_offset == 3 and log.last_fetched_epoch == 3
    assert log.epoch_cache() == [OE(0, 1), OE(2, 3)]
    assert log.read(1, 1 << 20) == [LogEntry(1, 1, b"b"), LogEntry(2, 3, b"lc", LEADER_CHANGE)]
    with pytest.raises(ValueError, match="below"):
        log.append([RaftRecord(b"x")], 2)


def test_log_read_returns_at_least_one_entry_then_respects_max_bytes():
    log = make_log((1, 10))
    assert len(log.read(0, 1)) == 1
    assert len(log.read(0, 2 * (4 + 20))) == 2
    assert log.read(10, 100) == []
    with pytest.raises(ValueError, match="outside"):
        log.read(11, 100)


def test_log_end_offset_for_epoch_follows_kafkas_epoch_cache():
    # epochs 1: [0, 3), 3: [3, 5), 4: [5, 9)
    log = make_log((1, 3), (3, 2), (4, 4))
    assert log.end_offset_for_epoch(4) == OE(9, 4)  # the latest epoch ends at the log end
    assert log.end_offset_for_epoch(7) == OE(9, 4)  # above all: the log end, last epoch
    assert log.end_offset_for_epoch(3) == OE(5, 3)
    assert log.end_offset_for_epoch(2) == OE(3, 1)  # unknown: the largest epoch below
    assert log.end_offset_for_epoch(1) == OE(3, 1)
    assert log.end_offset_for_epoch(0) == OE(0, 0)  # below all: where the first one starts


def test_log_truncate_to_drops_the_tail_and_its_epochs():
    log = make_log((1, 3), (3, 2), (4, 4))
    log.truncate_to(4)
    assert (log.end_offset, log.last_fetched_epoch) == (4, 3)
    assert log.epoch_cache() == [OE(0, 1), OE(3, 3)]
    log.truncate_to(3)
    assert log.epoch_cache() == [OE(0, 1)] and log.last_fetched_epoch == 1
    log.truncate_to(10)  # past the end: nothing
    assert log.end_offset == 3
    log.truncate_to(0)
    assert (log.end_offset, log.last_fetched_epoch, log.epoch_cache()) == (0, 0, [])


def test_log_delete_before_cuts_the_head_at_a_snapshot():
    log = make_log((1, 3), (3, 2), (4, 4))
    log.delete_before(OE(4, 3))
    assert (log.start_offset, log.end_offset) == (4, 9)
    assert log.epoch_cache() == [OE(4, 3), OE(5, 4)]
    assert log.read(4, 100)[0] == LogEntry(4, 3, b"e3-1")
    with pytest.raises(ValueError, match="below the log start"):
        log.truncate_to(3)
    assert log.end_offset_for_epoch(1) == OE(4, 1)
    log.delete_before(OE(9, 4))  # everything: empty at the snapshot
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (9, 9, 4)
    assert log.end_offset_for_epoch(4) == OE(9, 4)
    assert log.end_offset_for_epoch(2) == OE(9, 4)
    with pytest.raises(ValueError, match="past the log end"):
        log.delete_before(OE(12, 4))


def test_log_end_offset_for_epoch_uses_the_snapshot_epoch_below_the_log():
    log = make_log((2, 10), (5, 3))
    log.delete_before(OE(10, 2))  # the snapshot ends epoch 2 at 10; epoch 5 starts there
    assert log.end_offset_for_epoch(3) == OE(10, 2)
    assert log.end_offset_for_epoch(1) == OE(10, 1)


def test_log_reset_to_snapshot_restarts_empty():
    log = make_log((1, 3))
    log.reset_to_snapshot(OE(50, 7))
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (50, 50, 7)
    assert log.append([RaftRecord(b"x")], 8) == range(50, 51)
    assert log.epoch_cache() == [OE(50, 8)]


def test_snapshot_store_freezes_reads_and_deletes():
    store = MemorySnapshotStore()
    writer = store.create(OE(10, 2))
    writer.append(b"abc")
    assert store.latest_id() is None  # invisible until frozen
    writer.append(b"def")
    writer.freeze()
    with pytest.raises(ValueError):
        writer.append(b"x")
    assert store.latest_id() == OE(10, 2) and store.size(OE(10, 2)) == 6
    assert store.read(OE(10, 2), 2, 3) == b"cde"
    assert store.read(OE(10, 2), 6, 3) == b""
    other = store.create(OE(20, 3))
    other.append(b"z")
    other.abort()
    assert store.ids() == [OE(10, 2)]
    w = store.create(OE(20, 3))
    w.append(b"z")
    w.freeze()
    store.delete_before(OE(20, 3))
    assert store.ids() == [OE(20, 3)] and store.size(OE(10, 2)) is None


def test_records_round_trip_as_record_batches():
    entries = [
        LogEntry(7, 2, b"a"),
        LogEntry(8, 2, b""),
        LogEntry(9, 3, encode_leader_change(1, [1, 2, 3], [1, 3]), LEADER_CHANGE),
        LogEntry(10, 3, b"c" * 1000),
        LogEntry(11, 3, b"d"),
    ]
    data = encode_entries(entries)
    batches = list(iter_batches(data))
    # epoch 2 data, the control record alone, epoch 3 data
    assert [(b.base_offset, b.partition_leader_epoch, b.is_control) for b in batches] == [
        (7, 2, False),
        (9, 3, True),
        (10, 3, False),
    ]
    assert decode_entries(data) == entries
    assert decode_entries(b"") == [] and decode_entries(None) == []
    assert decode_entries(data + data[:30]) == entries  # a trailing partial batch is ignored
    change = decode_leader_change(entries[2].value)
    assert change.leader_id == 1
    assert [v.voter_id for v in change.voters] == [1, 2, 3]
    assert [v.voter_id for v in change.granting_voters] == [1, 3]


def test_records_refuse_a_corrupt_batch():
    data = bytearray(encode_entries([LogEntry(0, 1, b"hello")]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_entries(bytes(data))


# The versions a driver would use with Kafka 4.x peers (Fetch 17 is Kafka 4.0's controller).
WIRE_VERSIONS = {
    m.VoteRequest: [0, 1],
    m.VoteResponse: [0, 1],
    m.BeginQuorumEpochRequest: [0, 1],
    m.BeginQuorumEpochResponse: [0, 1],
    m.EndQuorumEpochRequest: [0, 1],
    m.EndQuorumEpochResponse: [0, 1],
    m.FetchRequest: [12, 13, 15, 17],
    m.FetchResponse: [12, 13, 16, 17],
    m.FetchSnapshotRequest: [0, 1],
    m.FetchSnapshotResponse: [0, 1],
    m.DescribeQuorumResponse: [0, 1, 2],
}


def built_messages():
    sid = OE(100, 4)
    return [
        rpc.vote_request(
            "c", candidate_epoch=5, candidate_id=1, voter_id=2, last_offset=OE(9, 4), pre_vote=False
        ),
        rpc.vote_response(0, leader_id=None, epoch=5, granted=True),
        rpc.begin_quorum_epoch_request("c", leader_id=1, epoch=5, voter_id=2),
        rpc.begin_quorum_epoch_response(0, leader_id=1, epoch=5),
        rpc.end_quorum_epoch_request("c", leader_id=1, epoch=5, preferred=[3, 2]),
        rpc.end_quorum_epoch_response(0, leader_id=None, epoch=6),
        rpc.fetch_request(
            "c",
            replica_id=2,
            epoch=5,
            fetch_offset=9,
            last_fetched_epoch=4,
            log_start_offset=0,
            max_wait_ms=500,
            max_bytes=1 << 20,
        ),
        rpc.fetch_response(
            0,
            leader_id=1,
            epoch=5,
            high_watermark=8,
            log_start_offset=0,
            records=encode_entries([LogEntry(9, 5, b"x")]),
        ),
        rpc.fetch_response(0, leader_id=1, epoch=5, diverging=OE(7, 3)),
        rpc.fetch_response(0, leader_id=1, epoch=5, snapshot_id=sid),
        rpc.fetch_snapshot_request(
            "c", replica_id=2, epoch=5, snapshot_id=sid, position=10, max_bytes=100
        ),
        rpc.fetch_snapshot_response(
            0, leader_id=1, epoch=5, snapshot_id=sid, size=50, position=10, data=b"0123"
        ),
        rpc.describe_quorum_response(0, leader_id=1, epoch=5, high_watermark=8),
    ]


@pytest.mark.parametrize("message", built_messages(), ids=lambda msg: type(msg).__name__)
def test_rpc_messages_survive_the_wire_at_the_versions_peers_use(message):
    for version in WIRE_VERSIONS[type(message)]:
        decoded = type(message).decode(message.encode(version), version)
        part, back = rpc.partition_of(message), rpc.partition_of(decoded)
        assert back is not None
        for name in ("leader_id", "leader_epoch", "candidate_epoch", "fetch_offset", "position"):
            if hasattr(part, name):
                assert getattr(back, name) == getattr(part, name), (name, version)
        if isinstance(message, m.FetchRequest):
            assert rpc.fetch_replica_id(decoded) == 2
        if isinstance(message, m.FetchResponse):
            assert decode_entries(back.records) == decode_entries(part.records)
            assert back.diverging_epoch == part.diverging_epoch
            assert back.snapshot_id == part.snapshot_id
        if isinstance(message, m.EndQuorumEpochRequest):
            assert rpc.preferred_successors(back) == [3, 2]


def test_rpc_pre_vote_is_flagged_and_needs_vote_v2():
    last = OE(9, 4)
    pre = rpc.vote_request(
        None, candidate_epoch=4, candidate_id=1, voter_id=2, last_offset=last, pre_vote=True
    )
    real = rpc.vote_request(
        None, candidate_epoch=5, candidate_id=1, voter_id=2, last_offset=last, pre_vote=False
    )
    assert rpc.is_pre_vote(rpc.partition_of(pre)) and rpc.vote_request_needs_v2(pre)
    assert not rpc.is_pre_vote(rpc.partition_of(real)) and not rpc.vote_request_needs_v2(real)
    # Decoded from v1 bytes the flag is gone: hence vote_request_needs_v2 for drivers.
    decoded = m.VoteRequest.decode(real.encode(1), 1)
    assert not rpc.is_pre_vote(rpc.partition_of(decoded))
    assert "pre_vote=True" in repr(pre)
