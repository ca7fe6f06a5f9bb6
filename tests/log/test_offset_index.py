"""OffsetIndex: the .index byte layout, sizing, ordering rules, crash detection, and a model test."""

import bisect
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kcore.log.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    LogError,
)
from kcore.log.index import DEFAULT_MAX_INDEX_SIZE
from kcore.log.offset_index import OffsetIndex


def test_offset_index_entry_golden_bytes(tmp_path):
    path = tmp_path / "00000000000000001000.index"
    with OffsetIndex(path, 1000) as index:
        index.append(1005, 4096)
        index.append(1000 + 0x01020304, 0x7FFFFFFF)
    # int32 relative offset 5, int32 position 4096; then 0x01020304 and the largest position.
    assert path.read_bytes() == (
        b"\x00\x00\x00\x05\x00\x00\x10\x00" + b"\x01\x02\x03\x04\x7f\xff\xff\xff"
    )


def test_offset_index_new_file_is_preallocated_to_a_multiple_of_the_entry_size(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, max_index_size=100)
    assert path.stat().st_size == 96
    assert index.max_entries == 12
    assert index.entries == 0
    index.close()
    assert path.stat().st_size == 0


def test_offset_index_default_size_holds_1310720_entries(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        assert index.length == DEFAULT_MAX_INDEX_SIZE
        assert index.max_entries == 1_310_720


def test_offset_index_close_trims_and_reopen_counts_entries_without_scanning(tmp_path, monkeypatch):
    path = tmp_path / "0.index"
    with OffsetIndex(path, 50) as index:
        for i in range(10):
            index.append(50 + 2 * i, 100 * i)
    assert path.stat().st_size == 80

    def no_scan(self):
        raise AssertionError("opening an index must not read its entries")

    monkeypatch.setattr(OffsetIndex, "_keys", no_scan)
    monkeypatch.setattr(OffsetIndex, "_entries_view", no_scan)
    reopened = OffsetIndex(path, 50, writable=False)
    assert reopened.entries == 10
    assert reopened.last_offset == 68
    reopened.close()


def test_offset_index_lookup_returns_greatest_entry_not_above_target(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 100) as index:
        assert index.lookup(500) == (100, 0)  # empty: start of the segment
        index.append(110, 1000)
        index.append(120, 2000)
        assert index.lookup(99) == (100, 0)
        assert index.lookup(109) == (100, 0)
        assert index.lookup(110) == (110, 1000)
        assert index.lookup(119) == (110, 1000)
        assert index.lookup(120) == (120, 2000)
        assert index.lookup(10**15) == (120, 2000)


def test_offset_index_append_refuses_non_increasing_offsets(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        index.append(5, 0)
        with pytest.raises(InvalidOffsetError):
            index.append(5, 10)
        with pytest.raises(InvalidOffsetError):
            index.append(4, 10)
        assert index.entries == 1


def test_offset_index_append_refuses_offsets_outside_int32_relative_range(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 1000) as index:
        with pytest.raises(IndexOffsetOverflowError):
            index.append(999, 0)
        with pytest.raises(IndexOffsetOverflowError):
            index.append(1000 + 2**31, 0)
        index.append(1000 + 2**31 - 1, 0)


def test_offset_index_append_refuses_positions_outside_int32(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        with pytest.raises(ValueError):
            index.append(1, -1)
        with pytest.raises(ValueError):
            index.append(1, 2**31)
        assert index.entries == 0


def test_offset_index_full_index_refuses_appends(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0, max_index_size=24) as index:
        for i in range(3):
            index.append(i, i)
        assert index.is_full
        with pytest.raises(IndexFullError):
            index.append(3, 3)


def test_offset_index_read_only_refuses_appends(tmp_path):
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0) as index:
        index.append(1, 1)
    with OffsetIndex(path, 0, writable=False) as index, pytest.raises(LogError):
        index.append(2, 2)


def test_offset_index_read_only_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)


def test_offset_index_reopened_writable_index_grows_back_on_append(tmp_path):
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, max_index_size=80) as index:
        index.append(1, 10)
    index = OffsetIndex(path, 0, max_index_size=80)
    assert index.length == 8 and not index.is_full
    index.append(2, 20)
    assert index.length == 80
    assert index.lookup(5) == (2, 20)
    index.close()
    assert path.stat().st_size == 16


def test_offset_index_truncate_to_removes_entries_at_and_above_offset(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        for offset in (10, 20, 30, 40):
            index.append(offset, offset * 10)
        index.truncate_to(31)
        assert index.entries == 3 and index.last_offset == 30
        index.truncate_to(30)
        assert index.entries == 2 and index.last_offset == 20
        assert index.lookup(35) == (20, 200)
        index.truncate_to(0)
        assert index.entries == 0 and index.last_offset == 0
        index.append(5, 1)  # appends restart after a truncation
        assert index.lookup(7) == (5, 1)


def test_offset_index_reset_empties_and_preallocates_again(tmp_path):
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, max_index_size=80) as index:
        index.append(3, 3)
    index = OffsetIndex(path, 0, max_index_size=80)
    index.reset()
    assert index.entries == 0 and index.length == 80
    index.close()


def test_offset_index_fetch_upper_bound_offset_finds_first_entry_at_or_past_position(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        for i in range(1, 6):
            index.append(i * 10, i * 1000)
        assert index.fetch_upper_bound_offset(1500, 1000) == 30
        assert index.fetch_upper_bound_offset(1000, 1000) == 20
        assert index.fetch_upper_bound_offset(0, 0) == 10
        assert index.fetch_upper_bound_offset(4000, 2000) is None


def test_offset_index_resize_refuses_to_drop_entries(tmp_path):
    with OffsetIndex(tmp_path / "0.index", 0) as index:
        index.append(1, 1)
        index.append(2, 2)
        with pytest.raises(ValueError):
            index.resize(8)


def test_offset_index_sanity_check_detects_preallocated_tail_after_crash(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, max_index_size=800)
    for i in range(1, 4):
        index.append(i, i * 100)
    index.flush()
    crashed = tmp_path / "crashed.index"
    shutil.copyfile(path, crashed)  # the file as a crash leaves it: never trimmed
    index.close()

    survivor = OffsetIndex(crashed, 0, max_index_size=800)
    assert survivor.entries == 100  # counts the zero-filled preallocation
    with pytest.raises(CorruptIndexError):
        survivor.sanity_check()
    survivor.reset()
    survivor.sanity_check(full=True)
    survivor.close()


def test_offset_index_sanity_check_detects_partial_entry(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00")
    with OffsetIndex(path, 0, writable=False) as index:
        assert index.entries == 1
        with pytest.raises(CorruptIndexError):
            index.sanity_check()


def test_offset_index_sanity_check_detects_offset_below_base(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(b"\xff\xff\xff\xff\x00\x00\x00\x01")  # relative offset -1
    with OffsetIndex(path, 0, writable=False) as index, pytest.raises(CorruptIndexError):
        index.sanity_check()


def test_offset_index_full_sanity_check_detects_disorder_in_the_middle(tmp_path):
    path = tmp_path / "0.index"
    entries = [(1, 10), (5, 20), (3, 30), (7, 40), (9, 50)]
    path.write_bytes(b"".join(o.to_bytes(4, "big") + p.to_bytes(4, "big") for o, p in entries))
    with OffsetIndex(path, 0, writable=False) as index:
        index.sanity_check()  # the cheap check only looks at the tail
        with pytest.raises(CorruptIndexError, match="entry 2"):
            index.sanity_check(full=True)


def test_offset_index_rename_and_delete(tmp_path):
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0)
    index.append(1, 1)
    index.rename_to(tmp_path / "0.index.deleted")
    assert not path.exists() and index.path.exists()
    assert index.lookup(1) == (1, 1)
    assert index.delete_if_exists()
    assert not (tmp_path / "0.index.deleted").exists()
    assert not index.delete_if_exists()


def test_offset_index_lookup_after_close_raises(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0)
    index.append(1, 1)
    index.lookup(1)
    index.close()
    with pytest.raises(ValueError):
        index.lookup(1)


class OffsetIndexModel(RuleBasedStateMachine):
    """The index against a sorted list of (offset, position), through appends, lookups,
    truncations, trims, resets and reopens (read-only and writable)."""

    @initialize(base=st.integers(0, 2**40), capacity=st.integers(1, 40))
    def open_index(self, base, capacity):
        self.dir = Path(tempfile.mkdtemp())
        self.path = self.dir / "x.index"
        self.base = base
        self.max_size = capacity * 8 + 3  # also exercises the rounding down
        self.index = OffsetIndex(self.path, base, self.max_size)
        self.model: list[tuple[int, int]] = []

    def teardown(self):
        if hasattr(self, "index"):
            self.index.close()
            shutil.rmtree(self.dir)

    def _next(self, gap):
        return (self.model[-1][0] + gap) if self.model else self.base + gap - 1

    @rule(gap=st.integers(1, 1000), position_gap=st.integers(0, 5000))
    def append(self, gap, position_gap):
        offset = self._next(gap)
        position = (self.model[-1][1] if self.model else 0) + position_gap
        if len(self.model) >= self.max_size // 8:
            with pytest.raises(IndexFullError):
                self.index.append(offset, position)
        else:
            self.index.append(offset, position)
            self.model.append((offset, position))

    @precondition(lambda self: self.model and len(self.model) < self.max_size // 8)
    @rule(back=st.integers(0, 50))
    def append_stale_offset(self, back):
        with pytest.raises(InvalidOffsetError):
            self.index.append(self.model[-1][0] - back, 10**6)

    @rule(data=st.data())
    def lookup(self, data):
        top = self.model[-1][0] if self.model else self.base
        target = data.draw(st.integers(self.base - 5, top + 5))
        offsets = [o for o, _ in self.model]
        slot = bisect.bisect_right(offsets, target) - 1
        expected = self.model[slot] if slot >= 0 else (self.base, 0)
        assert self.index.lookup(target) == expected

    @rule(data=st.data())
    def truncate_to(self, data):
        top = self.model[-1][0] if self.model else self.base
        target = data.draw(st.integers(self.base - 2, top + 2))
        self.index.truncate_to(target)
        self.model = [(o, p) for o, p in self.model if o < target]

    @rule()
    def trim(self):
        self.index.trim()
        assert self.path.stat().st_size == 8 * len(self.model)

    @rule()
    def reset(self):
        self.index.reset()
        self.model = []

    @rule(read_only=st.booleans())
    def reopen(self, read_only):
        self.index.close()
        assert self.path.stat().st_size == 8 * len(self.model)
        if read_only:
            with OffsetIndex(self.path, self.base, writable=False) as view:
                view.sanity_check(full=True)
                assert [tuple(view.entry(i)) for i in range(view.entries)] == self.model
        self.index = OffsetIndex(self.path, self.base, self.max_size)
        self.index.sanity_check(full=True)

    @invariant()
    def counts_agree(self):
        assert self.index.entries == len(self.model)
        assert self.index.last_offset == (self.model[-1][0] if self.model else self.base)
        assert self.index.is_full == (len(self.model) >= self.max_size // 8)


OffsetIndexModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_offset_index_matches_sorted_list_model = OffsetIndexModel.TestCase


def test_offset_index_lookups_agree_across_warm_section_and_cache_growth(tmp_path):
    """Past 1,024 entries lookups search the last 8 KiB first; interleaved appends and lookups
    make the key cache grow several times."""
    rng = random.Random(7)
    offsets, positions = [], []
    with OffsetIndex(tmp_path / "0.index", 10) as index:
        offset = 10
        for i in range(3000):
            offset += rng.randint(1, 5)
            index.append(offset, i * 100)
            offsets.append(offset)
            positions.append(i * 100)
            if i % 97 == 0:
                assert index.lookup(offset) == (offset, i * 100)
        first_warm = len(offsets) - 1024
        probes = [
            offsets[j] + d
            for j in (0, first_warm - 1, first_warm, first_warm + 1, -1)
            for d in (-1, 0, 1)
        ]
        probes += [rng.randint(0, offset + 10) for _ in range(2000)]
        for target in probes:
            slot = bisect.bisect_right(offsets, target) - 1
            expected = (offsets[slot], positions[slot]) if slot >= 0 else (10, 0)
            assert index.lookup(target) == expected
