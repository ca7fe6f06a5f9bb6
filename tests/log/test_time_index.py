"""TimeIndex: the .timeindex byte layout, Kafka's maybe-append rules, crash detection, a model test."""

import bisect
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kcore.log.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kcore.log.time_index import NO_TIMESTAMP, TimeIndex


def test_time_index_entry_golden_bytes(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    with TimeIndex(path, 0) as index:
        assert index.maybe_append(0x0102030405060708, 0x0A0B0C0D)
    # int64 timestamp, then int32 offset relative to the base offset 0.
    assert path.read_bytes() == bytes.fromhex("01020304050607080a0b0c0d")


def test_time_index_relative_offset_golden_bytes(tmp_path):
    path = tmp_path / "00000000000000001000.timeindex"
    with TimeIndex(path, 1000) as index:
        index.maybe_append(1_700_000_000_000, 1005)
    assert path.read_bytes() == bytes.fromhex("0000018bcfe5680000000005")


def test_time_index_new_file_is_preallocated_to_a_multiple_of_twelve(tmp_path):
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, 0)
    assert path.stat().st_size == 10 * 1024 * 1024 - 4  # 10,485,756 = 873,813 entries
    assert index.max_entries == 873_813
    index.close()
    assert path.stat().st_size == 0


def test_time_index_maybe_append_only_when_timestamp_grows(tmp_path):
    with TimeIndex(tmp_path / "0.timeindex", 100) as index:
        assert index.last_entry == (NO_TIMESTAMP, 100)
        assert not index.maybe_append(NO_TIMESTAMP, 100)  # v0 messages: no timestamps at all
        assert index.maybe_append(1000, 100)
        assert not index.maybe_append(1000, 105)  # same timestamp: ignored (roll re-appends)
        assert index.maybe_append(1001, 105)
        assert index.maybe_append(1002, 105)  # same offset, later timestamp: kept
        assert index.entries == 3
        assert index.last_entry == (1002, 105)


def test_time_index_maybe_append_refuses_going_backwards(tmp_path):
    with TimeIndex(tmp_path / "0.timeindex", 0) as index:
        index.maybe_append(1000, 10)
        with pytest.raises(InvalidOffsetError):
            index.maybe_append(2000, 9)
        with pytest.raises(InvalidOffsetError):
            index.maybe_append(999, 11)


def test_time_index_full_check_and_skip_full_check_on_roll(tmp_path):
    path = tmp_path / "0.timeindex"
    with TimeIndex(path, 0, max_index_size=24) as index:
        index.maybe_append(10, 1)
        index.maybe_append(20, 2)
        assert index.is_full
        with pytest.raises(IndexFullError):
            index.maybe_append(30, 3)
        # The segment's final entry on roll goes in even so: the file grows by one entry.
        assert index.maybe_append(30, 3, skip_full_check=True)
        assert index.entries == 3
    assert path.stat().st_size == 36


def test_time_index_lookup_returns_greatest_entry_not_above_timestamp(tmp_path):
    with TimeIndex(tmp_path / "0.timeindex", 500) as index:
        assert index.lookup(10**12) == (NO_TIMESTAMP, 500)
        index.maybe_append(1000, 510)
        index.maybe_append(2000, 520)
        assert index.lookup(999) == (NO_TIMESTAMP, 500)
        assert index.lookup(1000) == (1000, 510)
        assert index.lookup(1999) == (1000, 510)
        assert index.lookup(2**62) == (2000, 520)


def test_time_index_truncate_to_removes_every_entry_at_or_above_offset(tmp_path):
    with TimeIndex(tmp_path / "0.timeindex", 0) as index:
        index.maybe_append(10, 1)
        index.maybe_append(20, 5)
        index.maybe_append(30, 5)  # two entries share offset 5
        index.maybe_append(40, 9)
        index.truncate_to(5)
        assert index.entries == 1 and index.last_entry == (10, 1)
        index.truncate_to(0)
        assert index.entries == 0 and index.last_entry == (NO_TIMESTAMP, 0)


def test_time_index_reopen_restores_last_entry(tmp_path):
    path = tmp_path / "0.timeindex"
    with TimeIndex(path, 7) as index:
        index.maybe_append(100, 8)
        index.maybe_append(200, 9)
    with TimeIndex(path, 7) as index:
        assert index.entries == 2
        assert index.last_entry == (200, 9)
        assert not index.maybe_append(200, 10)
        assert index.maybe_append(300, 10)
        assert index.lookup(250) == (200, 9)


def test_time_index_sanity_check_detects_preallocated_tail_after_crash(tmp_path):
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, 0, max_index_size=120)
    index.maybe_append(1000, 1)
    index.maybe_append(2000, 2)
    index.flush()
    crashed = tmp_path / "crashed.timeindex"
    shutil.copyfile(path, crashed)
    index.close()
    with TimeIndex(crashed, 0, max_index_size=120) as survivor:
        assert survivor.entries == 10
        with pytest.raises(CorruptIndexError):
            survivor.sanity_check()


def test_time_index_sanity_check_detects_partial_entry_and_disorder(tmp_path):
    path = tmp_path / "0.timeindex"
    path.write_bytes(bytes.fromhex("00000000000003e800000001") + b"\x00")
    with TimeIndex(path, 0, writable=False) as index, pytest.raises(CorruptIndexError):
        index.sanity_check()
    path.write_bytes(
        bytes.fromhex("00000000000003e800000001")
        + bytes.fromhex("00000000000001f400000002")  # 500 < 1000
        + bytes.fromhex("00000000000007d000000003")
    )
    with TimeIndex(path, 0, writable=False) as index:
        index.sanity_check()
        with pytest.raises(CorruptIndexError):
            index.sanity_check(full=True)


class TimeIndexModel(RuleBasedStateMachine):
    """The index against a list of (timestamp, offset) with Kafka's append rules."""

    @initialize(base=st.integers(0, 2**40), capacity=st.integers(1, 30))
    def open_index(self, base, capacity):
        self.dir = Path(tempfile.mkdtemp())
        self.path = self.dir / "x.timeindex"
        self.base = base
        self.max_size = capacity * 12 + 5
        self.index = TimeIndex(self.path, base, self.max_size)
        self.model: list[tuple[int, int]] = []

    def teardown(self):
        if hasattr(self, "index"):
            self.index.close()
            shutil.rmtree(self.dir)

    def _last(self):
        return self.model[-1] if self.model else (NO_TIMESTAMP, self.base)

    @rule(dt=st.integers(-3, 100), do=st.integers(-2, 50))
    def maybe_append(self, dt, do):
        last_ts, last_offset = self._last()
        timestamp = max(last_ts, 0) + dt
        offset = max(last_offset + do, self.base)  # below the base is an overflow: tested apart
        if len(self.model) >= self.max_size // 12:
            expected = IndexFullError
        elif self.model and (offset < last_offset or timestamp < last_ts):
            expected = InvalidOffsetError
        else:
            expected = None
        if expected is not None:
            with pytest.raises(expected):
                self.index.maybe_append(timestamp, offset)
            return
        appended = self.index.maybe_append(timestamp, offset)
        assert appended == (timestamp > last_ts)
        if appended:
            self.model.append((timestamp, offset))

    @rule(data=st.data())
    def lookup(self, data):
        top = self._last()[0]
        target = data.draw(st.integers(-5, max(top, 0) + 5))
        slot = bisect.bisect_right([t for t, _ in self.model], target) - 1
        expected = self.model[slot] if slot >= 0 else (NO_TIMESTAMP, self.base)
        assert self.index.lookup(target) == expected

    @rule(data=st.data())
    def truncate_to(self, data):
        target = data.draw(st.integers(self.base - 2, self._last()[1] + 2))
        self.index.truncate_to(target)
        self.model = [(t, o) for t, o in self.model if o < target]

    @rule()
    def reopen(self):
        self.index.close()
        assert self.path.stat().st_size == 12 * len(self.model)
        self.index = TimeIndex(self.path, self.base, self.max_size)
        self.index.sanity_check(full=True)
        assert [tuple(self.index.entry(i)) for i in range(self.index.entries)] == self.model

    @invariant()
    def state_agrees(self):
        assert self.index.entries == len(self.model)
        assert self.index.last_entry == self._last()


TimeIndexModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_time_index_matches_list_model = TimeIndexModel.TestCase


def test_time_index_lookups_agree_across_warm_section(tmp_path):
    """Past 682 entries (8 KiB) lookups search the warm tail first."""
    rng = random.Random(3)
    entries = []
    with TimeIndex(tmp_path / "0.timeindex", 0) as index:
        timestamp, offset = 1000, 0
        for _ in range(2000):
            timestamp += rng.randint(1, 9)
            offset += rng.randint(0, 2)
            index.maybe_append(timestamp, offset)
            entries.append((timestamp, offset))
        timestamps = [t for t, _ in entries]
        first_warm = len(entries) - 8192 // 12
        probes = [
            timestamps[j] + d for j in (0, first_warm - 1, first_warm, -1) for d in (-1, 0, 1)
        ]
        probes += [rng.randint(900, timestamp + 10) for _ in range(2000)]
        for target in probes:
            slot = bisect.bisect_right(timestamps, target) - 1
            expected = entries[slot] if slot >= 0 else (NO_TIMESTAMP, 0)
            assert index.lookup(target) == expected
