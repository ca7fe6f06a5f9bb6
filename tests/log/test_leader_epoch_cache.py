"""LeaderEpochFileCache: Kafka's assign / endOffsetFor / truncation semantics, and persistence."""

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kcore.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcore.log.errors import CorruptCheckpointError
from kcore.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))


def _cache_with(tmp_path, *entries):
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_leader_epoch_cache_end_offset_for_latest_epoch_is_log_end_offset(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    assert cache.end_offset_for(4, 20) == (4, 20)


def test_leader_epoch_cache_end_offset_for_older_epoch_is_next_epoch_start(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    assert cache.end_offset_for(2, 20) == (2, 8)
    assert cache.end_offset_for(3, 20) == (3, 11)


def test_leader_epoch_cache_end_offset_for_unknown_epoch_between_returns_floor_epoch(tmp_path):
    cache = _cache_with(tmp_path, (1, 5), (3, 8), (7, 20))
    assert cache.end_offset_for(2, 30) == (1, 8)
    assert cache.end_offset_for(5, 30) == (3, 20)


def test_leader_epoch_cache_end_offset_for_epoch_below_all_returns_first_start(tmp_path):
    cache = _cache_with(tmp_path, (5, 11), (6, 12), (10, 20))
    assert cache.end_offset_for(4, 30) == (4, 11)
    assert cache.end_offset_for(0, 30) == (0, 11)


def test_leader_epoch_cache_end_offset_for_undefined_cases(tmp_path, cache):
    assert cache.end_offset_for(0, 10) == UNDEFINED  # empty cache
    cache.assign(2, 6)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 10) == UNDEFINED
    assert cache.end_offset_for(3, 10) == UNDEFINED  # above every known epoch


def test_leader_epoch_cache_assign_same_epoch_later_offset_is_ignored(cache):
    assert cache.assign(2, 6)
    assert not cache.assign(2, 10)
    assert not cache.assign(2, 6)
    assert cache.epoch_entries() == [EpochEntry(2, 6)]


def test_leader_epoch_cache_assign_same_epoch_earlier_offset_replaces(cache):
    cache.assign(2, 6)
    assert cache.assign(2, 4)
    assert cache.epoch_entries() == [EpochEntry(2, 4)]


def test_leader_epoch_cache_assign_lower_epoch_truncates_conflicting_entries(cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(1, 10)
    assert cache.epoch_entries() == [EpochEntry(1, 10)]


def test_leader_epoch_cache_assign_higher_epoch_lower_offset_drops_later_starts(cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 7)
    assert cache.epoch_entries() == [EpochEntry(2, 6), EpochEntry(4, 7)]


def test_leader_epoch_cache_assign_refuses_negative_values(cache):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_leader_epoch_cache_assign_marks_dirty_without_writing(tmp_path, monkeypatch):
    fsyncs = []
    monkeypatch.setattr("os.fsync", lambda fd: fsyncs.append(fd))
    cache = _cache_with(tmp_path, (0, 0), (3, 120))
    path = tmp_path / "leader-epoch-checkpoint"
    assert not path.exists() and not fsyncs  # the append path does no file I/O
    assert cache.dirty
    assert cache.flush_if_dirty() is True
    assert path.read_bytes() == b"0\n2\n0 0\n3 120\n" and len(fsyncs) == 2  # file + dir
    assert not cache.dirty and cache.flush_if_dirty() is False
    cache.assign(3, 500)  # same epoch, later offset: no change, stays clean
    assert not cache.dirty


def test_leader_epoch_cache_assign_that_removes_entries_writes_at_once(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (4, 11))
    cache.flush()
    assert cache.assign(3, 11)  # removes (4, 11): written durably right away
    assert not cache.dirty
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    assert reloaded.epoch_entries() == [(2, 6), (3, 11)]


def test_leader_epoch_cache_truncate_from_start_at_first_start_is_a_no_op(tmp_path, monkeypatch):
    cache = _cache_with(tmp_path, (2, 6), (3, 8))
    cache.flush()
    fsyncs = []
    monkeypatch.setattr("os.fsync", lambda fd: fsyncs.append(fd))
    cache.truncate_from_start(6)
    assert cache.epoch_entries() == [(2, 6), (3, 8)] and not fsyncs


def test_leader_epoch_cache_clear_of_an_empty_clean_cache_writes_nothing(tmp_path, monkeypatch):
    fsyncs = []
    monkeypatch.setattr("os.fsync", lambda fd: fsyncs.append(fd))
    cache = _cache_with(tmp_path)
    cache.clear()
    assert not fsyncs and not (tmp_path / "leader-epoch-checkpoint").exists()


def test_leader_epoch_cache_clear_writes_when_the_file_or_memory_has_entries(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = _cache_with(tmp_path, (2, 6))
    cache.flush()
    cache.clear()
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).epoch_entries() == []
    # Emptied without a write, then cleared: the file still had the entry, so it is written.
    cache = _cache_with(tmp_path, (3, 8))
    cache.flush()
    cache.truncate_from_end(0, flush=False)
    cache.clear()
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).epoch_entries() == []


def test_leader_epoch_cache_truncation_without_flush_marks_dirty(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8))
    cache.flush()
    cache.truncate_from_end(8, flush=False)
    assert cache.dirty
    cache.flush_if_dirty()
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    assert reloaded.epoch_entries() == [(2, 6)]


def test_leader_epoch_cache_flush_writes_checkpoint_and_reloads(tmp_path):
    cache = _cache_with(tmp_path, (0, 0), (3, 120))
    cache.flush()
    path = tmp_path / "leader-epoch-checkpoint"
    assert path.read_bytes() == b"0\n2\n0 0\n3 120\n"
    again = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert again.epoch_entries() == cache.epoch_entries()
    assert again.latest_epoch == 3
    assert again.latest_entry == (3, 120)
    assert again.earliest_entry == (0, 0)


def test_leader_epoch_cache_assign_all_flushes_once(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    cache.assign_all([EpochEntry(1, 0), EpochEntry(2, 5)])
    assert path.read_bytes() == b"0\n2\n1 0\n2 5\n"


def test_leader_epoch_cache_truncate_from_end_removes_entries_at_or_after_offset(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(100)
    cache.truncate_from_end(-1)
    assert len(cache) == 3
    cache.truncate_from_end(9)
    assert cache.epoch_entries() == [(2, 6), (3, 8)]
    cache.truncate_from_end(8)
    assert cache.epoch_entries() == [(2, 6)]
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    assert reloaded.epoch_entries() == [(2, 6)]


def test_leader_epoch_cache_truncate_from_start_moves_first_retained_start_up(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == [(2, 6), (3, 8), (4, 11)]
    cache.truncate_from_start(8)  # exclusive: the entry at 8 stays
    assert cache.epoch_entries() == [(3, 8), (4, 11)]
    cache.truncate_from_start(9)
    assert cache.epoch_entries() == [(3, 9), (4, 11)]
    cache.truncate_from_start(15)
    assert cache.epoch_entries() == [(4, 15)]


def test_leader_epoch_cache_epoch_for_offset(tmp_path):
    cache = _cache_with(tmp_path, (2, 6), (3, 8))
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(6) == 2
    assert cache.epoch_for_offset(7) == 2
    assert cache.epoch_for_offset(8) == 3
    assert cache.epoch_for_offset(1000) == 3


def test_leader_epoch_cache_neighbour_queries(tmp_path, cache):
    assert cache.latest_epoch is None and cache.latest_entry is None
    assert cache.earliest_entry is None
    cache = _cache_with(tmp_path, (2, 6), (5, 8))
    assert cache.epoch_entry(5) == (5, 8) and cache.epoch_entry(3) is None
    assert cache.previous_epoch(5) == 2 and cache.previous_epoch(2) is None
    assert cache.next_epoch(2) == 5 and cache.next_epoch(5) is None
    cache.clear()
    assert len(cache) == 0


def test_leader_epoch_cache_negative_checkpoint_entry_is_corrupt(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n1\n-2 5\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochFileCache(LeaderEpochCheckpointFile(path))


def test_leader_epoch_cache_loading_applies_assign_rules(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n3\n1 0\n3 10\n2 20\n")  # epoch 2 after 3: 3 is dropped on load
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.epoch_entries() == [(1, 0), (2, 20)]


class EpochCacheModel(RuleBasedStateMachine):
    """The cache against a plain list transcribing Kafka's TreeMap operations with linear scans."""

    @initialize()
    def open_cache(self):
        self.dir = Path(tempfile.mkdtemp())
        self.checkpoint = LeaderEpochCheckpointFile(self.dir / "leader-epoch-checkpoint")
        self.cache = LeaderEpochFileCache(self.checkpoint)
        self.model: list[tuple[int, int]] = []

    def teardown(self):
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir)

    @rule(epoch=st.integers(0, 25), start=st.integers(0, 200))
    def assign(self, epoch, start):
        self.cache.assign(epoch, start)
        latest = self.model[-1] if self.model else None
        if latest is None or latest[0] != epoch or start < latest[1]:
            self.model = [(e, s) for e, s in self.model if e < epoch and s < start]
            self.model.append((epoch, start))

    @rule(end=st.integers(-2, 210))
    def truncate_from_end(self, end):
        self.cache.truncate_from_end(end)
        if end >= 0:
            self.model = [(e, s) for e, s in self.model if s < end]

    @rule(start=st.integers(0, 210))
    def truncate_from_start(self, start):
        self.cache.truncate_from_start(start)
        removed = [(e, s) for e, s in self.model if s <= start]
        if removed:
            kept = [(e, s) for e, s in self.model if s > start]
            self.model = [(removed[-1][0], start), *kept]

    @rule()
    def flush_if_dirty(self):
        self.cache.flush_if_dirty()

    @rule()
    def reload(self):
        self.cache.flush_if_dirty()  # as the owning log does before a clean close
        self.cache = LeaderEpochFileCache(self.checkpoint)

    @rule(requested=st.integers(-2, 27), leo=st.integers(0, 300))
    def end_offset_for(self, requested, leo):
        if requested == UNDEFINED_EPOCH:
            expected = UNDEFINED
        elif self.model and self.model[-1][0] == requested:
            expected = (requested, leo)
        else:
            higher = next(((e, s) for e, s in self.model if e > requested), None)
            floor = [(e, s) for e, s in self.model if e <= requested]
            if higher is None:
                expected = UNDEFINED
            elif not floor:
                expected = (requested, higher[1])
            else:
                expected = (floor[-1][0], higher[1])
        assert self.cache.end_offset_for(requested, leo) == expected

    @rule(offset=st.integers(0, 210))
    def epoch_for_offset(self, offset):
        previous = None
        for e, s in self.model:  # Kafka's loop
            if s == offset:
                previous = e
                break
            if s > offset:
                break
            previous = e
        assert self.cache.epoch_for_offset(offset) == previous

    @invariant()
    def entries_agree_and_increase(self):
        entries = self.cache.epoch_entries()
        assert entries == self.model
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:]))
        if not self.cache.dirty:  # only an appending assign is left for flush_if_dirty
            assert self.checkpoint.read() == entries


EpochCacheModel.TestCase.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
test_leader_epoch_cache_matches_model = EpochCacheModel.TestCase
