"""Checkpoint files: the exact text, atomic replacement, strict reading of corrupt files."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from kcore.log.errors import CorruptCheckpointError


def test_offset_checkpoint_golden_text(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("my-topic", 0): 1234, ("other.topic_x", 3): 99})
    assert path.read_bytes() == b"0\n2\nmy-topic 0 1234\nother.topic_x 3 99\n"


def test_leader_epoch_checkpoint_golden_text(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(3, 120)])
    assert path.read_bytes() == b"0\n2\n0 0\n3 120\n"


def test_offset_checkpoint_empty_golden_text_and_round_trip(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({})
    assert path.read_bytes() == b"0\n0\n"
    assert checkpoint.read() == {}


def test_offset_checkpoint_reads_kafka_written_file(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(b"0\n3\n__consumer_offsets 12 0\nt 0 5\nt 1 -1\n")
    assert OffsetCheckpointFile(path).read() == {
        ("__consumer_offsets", 12): 0,
        ("t", 0): 5,
        ("t", 1): -1,
    }


def test_checkpoint_missing_or_empty_file_reads_as_no_entries(tmp_path):
    path = tmp_path / "cleaner-offset-checkpoint"
    assert OffsetCheckpointFile(path).read() == {}
    path.write_bytes(b"")
    assert OffsetCheckpointFile(path).read() == {}
    assert LeaderEpochCheckpointFile(path).read() == []


def test_checkpoint_accepts_crlf_line_ends(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\r\n1\r\n5 77\r\n")
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(5, 77)]


def test_checkpoint_write_replaces_atomically_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({("a", 0): 1})
    # A crash during an earlier write left a half-written temporary file behind.
    (tmp_path / "recovery-point-offset-checkpoint.tmp").write_bytes(b"0\n5\nhalf")
    assert checkpoint.read() == {("a", 0): 1}
    checkpoint.write({("a", 0): 2, ("b", 1): 3})
    assert checkpoint.read() == {("a", 0): 2, ("b", 1): 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point-offset-checkpoint"]


@pytest.mark.parametrize(
    ("content", "line", "why"),
    [
        (b"1\n0\n", 1, "unrecognised version 1"),
        (b"x\n0\n", 1, "malformed version"),
        (b"0\n", 2, "truncated"),
        (b"0\nmany\n", 2, "malformed entry count"),
        (b"0\n-1\n", 2, "malformed entry count"),
        (b"0\n2\nt 0 5\n", 3, "expected 2 entries but found 1"),
        (b"0\n1\nt 0 5\nt 1 6\n", 4, "expected 1 entries but found 2"),
        (b"0\n1\nt 0\n", 3, "expected 3 fields"),
        (b"0\n1\nt 0 5 7\n", 3, "expected 3 fields"),
        (b"0\n2\nt 0 5\nt x 6\n", 4, "malformed entry"),
        (b"0\n1\nt 0 1_000\n", 3, "malformed entry"),
        (b"0\n1\nt -1 5\n", 3, "out of range"),
        (b"0\n2\nt 0 5\n\n", 4, "malformed entry"),
        (b"0\n1\nt 0 99999999999999999999\n", 3, "out of range"),
        (b"0\n1\n\xff 0 5\n", 1, "not UTF-8"),
    ],
)
def test_offset_checkpoint_corrupt_file_names_file_and_line(tmp_path, content, line, why):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    message = str(info.value)
    assert str(path) in message
    assert why in message
    if "UTF-8" not in why:
        assert f"line {line}:" in message


def test_leader_epoch_checkpoint_corrupt_entry_names_line(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n2\n0 0\n3\n")
    with pytest.raises(CorruptCheckpointError, match="line 4"):
        LeaderEpochCheckpointFile(path).read()


def test_offset_checkpoint_refuses_topic_with_whitespace(tmp_path):
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "c").write({("bad topic", 0): 1})


topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=20,
)


@settings(max_examples=100, deadline=None)
@given(
    offsets=st.dictionaries(
        st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(-1, 2**63 - 1), max_size=20
    )
)
def test_offset_checkpoint_round_trips_any_offsets(tmp_path_factory, offsets):
    checkpoint = OffsetCheckpointFile(tmp_path_factory.mktemp("cp") / "checkpoint")
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
