"""Segment file names (20-digit offsets) and the atomic-replace helper."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.log.files import (
    atomic_write_bytes,
    filename_prefix,
    index_file,
    log_file,
    offset_from_file_name,
    snapshot_file,
    time_index_file,
    txn_index_file,
)


def test_files_filename_prefix_is_twenty_zero_padded_digits():
    assert filename_prefix(0) == "00000000000000000000"
    assert filename_prefix(123) == "00000000000000000123"
    assert filename_prefix(2**63 - 1) == "09223372036854775807"
    with pytest.raises(ValueError):
        filename_prefix(-1)


def test_files_segment_file_names(tmp_path):
    assert log_file(tmp_path, 5) == tmp_path / "00000000000000000005.log"
    assert log_file(tmp_path, 5, ".deleted") == tmp_path / "00000000000000000005.log.deleted"
    assert index_file(tmp_path, 5) == tmp_path / "00000000000000000005.index"
    assert time_index_file(tmp_path, 5) == tmp_path / "00000000000000000005.timeindex"
    assert txn_index_file(tmp_path, 5, ".swap") == tmp_path / "00000000000000000005.txnindex.swap"
    assert snapshot_file(tmp_path, 5) == tmp_path / "00000000000000000005.snapshot"


def test_files_offset_from_file_name():
    assert offset_from_file_name("00000000000000000123.log") == 123
    assert offset_from_file_name(Path("/x/y/00000000000000000007.index.deleted")) == 7
    assert offset_from_file_name("00000000000000000009.snapshot") == 9
    for bad in ("leader-epoch-checkpoint", ".log", "12a.log", "-1.log", "１２.log"):
        with pytest.raises(ValueError):
            offset_from_file_name(bad)


@given(st.lists(st.integers(0, 2**63 - 1), max_size=20))
def test_files_names_sort_as_offsets_and_parse_back(offsets):
    names = [log_file("d", o).name for o in offsets]
    assert sorted(names) == [log_file("d", o).name for o in sorted(offsets)]
    assert [offset_from_file_name(n) for n in names] == offsets


def test_files_atomic_write_replaces_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "f"
    atomic_write_bytes(path, b"one")
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
