"""Snapshots on disk: Kafka's file names and framing, atomic writes, chunked reads."""

from __future__ import annotations

import os

import pytest

from kcore.protocol import messages as m
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.snapshot_files import (
    CorruptSnapshotError,
    FileSnapshotStore,
    SnapshotReader,
    encode_snapshot,
    snapshot_file_name,
    snapshot_id_from_file_name,
)
from kcore.raft.snapshots import SnapshotStore, SnapshotWriter
from kcore.record import ControlRecordType, iter_batches, read_control_record

SID = OffsetAndEpoch(12345, 7)


def test_snapshot_file_names_are_kafkas():
    assert snapshot_file_name(SID) == "00000000000000012345-0000000007.checkpoint"
    assert snapshot_file_name(SID, part=True) == "00000000000000012345-0000000007.checkpoint.part"
    assert snapshot_id_from_file_name("00000000000000012345-0000000007.checkpoint") == (SID, False)
    assert snapshot_id_from_file_name(snapshot_file_name(SID, part=True)) == (SID, True)
    for other in ("00000000000000000000.log", "quorum-state", "1-2.checkpoint"):
        assert snapshot_id_from_file_name(other) is None


def test_snapshot_content_is_header_data_batches_footer():
    values = [b"rec-%d" % i for i in range(1200)]
    data = encode_snapshot(SID, values, last_contained_log_timestamp=1700000000000)
    batches = list(iter_batches(data))
    assert all(b.partition_leader_epoch == 7 for b in batches)
    assert batches[0].is_control and batches[-1].is_control
    assert [b.base_offset for b in batches] == [0, 1, 513, 1025, 1201]
    header = read_control_record(batches[0])
    assert header.type is ControlRecordType.SNAPSHOT_HEADER
    assert m.SnapshotHeaderRecord.decode(bytes(header.value), 0).last_contained_log_timestamp == (
        1700000000000
    )
    assert read_control_record(batches[-1]).type is ControlRecordType.SNAPSHOT_FOOTER
    reader = SnapshotReader(SID, data)
    assert list(reader.records()) == values
    assert reader.last_contained_log_timestamp == 1700000000000
    assert len(reader) == 1200


def test_snapshot_of_an_empty_state_has_just_header_and_footer():
    reader = SnapshotReader(SID, encode_snapshot(SID, []))
    assert list(reader.records()) == []


def test_snapshot_reader_refuses_what_is_not_a_snapshot():
    good = encode_snapshot(SID, [b"a", b"b"])
    batches = list(iter_batches(good))
    header, body, footer = (bytes(b.buffer) for b in batches)
    for bad in (body + footer, header + body, good + b"\x00\x01", good[:-1], footer + header):
        with pytest.raises(CorruptSnapshotError):
            SnapshotReader(SID, bad)
    flipped = bytearray(good)
    flipped[len(header) + 70] ^= 0xFF
    with pytest.raises(CorruptSnapshotError):
        SnapshotReader(SID, bytes(flipped))


def test_snapshot_store_writes_part_then_renames_on_freeze(tmp_path):
    store = FileSnapshotStore(tmp_path)
    assert isinstance(store, SnapshotStore)
    writer = store.create(SID)
    assert isinstance(writer, SnapshotWriter)
    data = encode_snapshot(SID, [b"x" * 100] * 20)
    writer.append(data[:1000])
    writer.append(data[1000:])
    assert writer.size == len(data)
    assert os.listdir(tmp_path) == [snapshot_file_name(SID, part=True)]
    assert store.latest_id() is None and store.size(SID) is None
    writer.freeze()
    assert os.listdir(tmp_path) == [snapshot_file_name(SID)]
    assert store.latest_id() == SID and store.size(SID) == len(data)
    assert store.reader(SID).snapshot_id == SID
    with pytest.raises(ValueError):
        writer.append(b"more")


def test_snapshot_store_reads_chunks_for_fetch_snapshot(tmp_path):
    leader = FileSnapshotStore(tmp_path / "leader")
    data = encode_snapshot(SID, [b"v%d" % i for i in range(500)])
    w = leader.create(SID)
    w.append(data)
    w.freeze()
    follower = FileSnapshotStore(tmp_path / "follower")
    copy = follower.create(SID)
    while copy.size < leader.size(SID):
        copy.append(leader.read(SID, copy.size, 777))
    assert leader.read(SID, leader.size(SID), 10) == b""
    copy.freeze()
    assert follower.data(SID) == data
    assert len(follower.reader(SID)) == 500
    with pytest.raises(ValueError):
        leader.read(SID, len(data) + 1, 10)
    with pytest.raises(KeyError):
        leader.read(OffsetAndEpoch(1, 1), 0, 10)


def test_snapshot_store_abort_deletes_the_part_and_reopen_drops_leftovers(tmp_path):
    store = FileSnapshotStore(tmp_path)
    old = OffsetAndEpoch(10, 1)
    w = store.create(old)
    w.append(encode_snapshot(old, [b"a"]))
    w.freeze()
    aborted = store.create(OffsetAndEpoch(20, 2))
    aborted.append(b"partial")
    aborted.abort()
    assert sorted(os.listdir(tmp_path)) == [snapshot_file_name(old)]
    crashed = store.create(OffsetAndEpoch(30, 2))
    crashed.append(b"half a snapshot")  # the process dies here: the .part stays behind
    reopened = FileSnapshotStore(tmp_path)
    assert reopened.ids() == [old]
    assert sorted(os.listdir(tmp_path)) == [snapshot_file_name(old)]


def test_snapshot_store_create_again_replaces_an_unfrozen_writer(tmp_path):
    store = FileSnapshotStore(tmp_path)
    first = store.create(SID)
    first.append(b"stale bytes")
    second = store.create(SID)
    assert first.done and second.size == 0
    second.append(b"fresh")
    second.freeze()
    assert store.data(SID) == b"fresh"


def test_snapshot_store_delete_before_keeps_the_given_and_newer(tmp_path):
    store = FileSnapshotStore(tmp_path)
    ids = [OffsetAndEpoch(10, 1), OffsetAndEpoch(20, 1), OffsetAndEpoch(30, 2)]
    for sid in ids:
        w = store.create(sid)
        w.append(encode_snapshot(sid, []))
        w.freeze()
    store.delete_before(ids[1])
    assert store.ids() == ids[1:]
    assert FileSnapshotStore(tmp_path).ids() == ids[1:]
    assert store.latest_id() == ids[2]
