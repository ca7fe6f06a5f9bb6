"""LogCleaner: compaction of ``cleanup.policy=compact`` logs, checked by reading the log back."""

import contextlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcore.log import files
from kcore.log.cleaner import CleanerConfig, LogCleaner
from kcore.log.cleaner_output import complete_interrupted_swaps
from kcore.log.config import LogConfig
from kcore.log.log_loader import create_log, load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.record import (
    CompressionType,
    RecordBatch,
    RecordBatchBuilder,
    build_end_txn_marker_batch,
    iter_batches,
)

NOW = 1_700_000_000_000
RETENTION = 1_000  # delete.retention.ms in these tests
LOG_END = FetchIsolation.LOG_END


def config(**overrides):
    layers = {
        "cleanup.policy": "compact",
        "internal.segment.bytes": "2000",
        "delete.retention.ms": str(RETENTION),
        "file.delete.delay.ms": "0",
    }
    layers.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return LogConfig.from_layers(layers)


def records(pairs, *, ts=NOW, pid=-1, epoch=-1, seq=-1, txn=False, codec=CompressionType.NONE):
    b = RecordBatchBuilder(
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        compression=codec,
    )
    for key, value in pairs:
        b.append(timestamp=ts, key=key, value=value)
    return bytes(b.build())


class Journal:
    """A log and what was appended at each offset."""

    def __init__(self, plog):
        self.plog = plog
        self.at = {}  # offset -> (key, value)

    def append(self, pairs, now=NOW, **kw):
        info = self.plog.append_as_leader(records(pairs, ts=now, **kw), 0, now_ms=now)
        for i, pair in enumerate(pairs):
            self.at[info.first_offset + i] = pair
        return info.first_offset

    def marker(self, pid, epoch, commit, now=NOW):
        data = build_end_txn_marker_batch(pid, epoch, commit, 0, timestamp=now)
        self.plog.append_as_leader(bytes(data), 0, now_ms=now, origin=AppendOrigin.COORDINATOR)

    def fill(self, n, now=NOW, prefix=b"f"):
        """``n`` single-record batches of filler keys (rolls segments along the way)."""
        for i in range(n):
            self.append([(prefix + b"%d" % i, b"x" * 40)], now)


def read_batches(plog):
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 30, LOG_END)
        data = b"".join(s.read() for s in info.records)
        got = [RecordBatch(bytes(b.buffer)) for b in iter_batches(data)]
        if not got:
            break
        out += got
        offset = got[-1].next_offset
    return out


def data_records(plog):
    return [
        (r.offset, r.key, r.value)
        for b in read_batches(plog)
        if not b.is_control
        for r in b.records()
    ]


def visible(plog):
    """The key -> value map a consumer reading the whole log ends up with."""
    state = {}
    for _, key, value in data_records(plog):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def assert_consistent(plog, journal):
    """Segments do not overlap, offsets increase, every record is the one appended at its
    offset, CRCs hold."""
    bounds = [s.base_offset for s in plog.segments[1:]] + [plog.log_end_offset]
    for seg, bound in zip(plog.segments, bounds):
        for b in seg.log.batches_from(0):
            assert seg.base_offset <= b.base_offset and b.last_offset < bound, seg
    batches = read_batches(plog)
    assert all(b.is_valid_crc() for b in batches)
    bases = [b.base_offset for b in batches]
    assert bases == sorted(set(bases))
    for offset, key, value in data_records(plog):
        assert journal.at[offset] == (key, value)


def clean(cleaner, plog, now=NOW, **kw):
    plog.update_high_watermark(plog.log_end_offset)
    return cleaner.clean(plog, now, **kw)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """fsync makes up most of a clean's time here; crashes are simulated by stopping, not by
    losing the page cache, so the tests skip it."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def journal(tmp_path):
    plog = create_log(tmp_path / "t-0", config(), now_ms=NOW)
    yield Journal(plog)
    plog.close()


def test_cleaner_keeps_only_the_latest_value_per_key_with_original_offsets(journal):
    plog = journal.plog
    for round_ in range(12):
        for k in range(8):
            key = b"k%d" % k
            journal.append([(key, b"v%d-%d" % (k, round_) + b"." * 30)])
    assert len(plog.segments) > 3
    expected = visible(plog)
    size_before = plog.size_in_bytes()

    stats = clean(LogCleaner(), plog)

    assert stats.cleaned and stats.end_offset == stats.first_uncleanable_offset
    assert stats.end_offset == plog.active_segment.base_offset
    assert visible(plog) == expected
    assert_consistent(plog, journal)
    surviving = {offset for offset, _, _ in data_records(plog)}
    # Below the end of the round: the last record of each key there (a later one in the
    # active segment was not seen by this round).
    latest = {key: o for o, (key, _) in sorted(journal.at.items()) if o < stats.end_offset}
    assert {o for o in surviving if o < stats.end_offset} == set(latest.values())
    assert {o for o in journal.at if o >= stats.end_offset} <= surviving  # active: untouched
    assert plog.size_in_bytes() < size_before
    assert stats.records_removed > 0 and stats.bytes_written < stats.bytes_read
    names = os.listdir(plog.dir)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]


def test_cleaner_checkpoint_moves_to_the_end_of_the_cleaned_range(journal):
    cleaner = LogCleaner()
    for i in range(60):
        journal.append([(b"k%d" % (i % 4), b"v%d" % i + b"." * 40)])
    stats = clean(cleaner, journal.plog)
    assert cleaner.checkpoints == {journal.plog.name: stats.end_offset}
    again = clean(cleaner, journal.plog)  # nothing new is dirty
    assert not again.cleaned and again.first_dirty_offset == stats.end_offset


def test_cleaner_never_cleans_the_active_segment(tmp_path):
    plog = create_log(tmp_path / "t-0", config(internal_segment_bytes=1 << 20), now_ms=NOW)
    journal = Journal(plog)
    for i in range(30):
        journal.append([(b"k", b"v%d" % i)])
    stats = clean(LogCleaner(), plog, force=True)
    assert not stats.cleaned and stats.first_uncleanable_offset == 0
    assert len(data_records(plog)) == 30
    plog.close()


def test_cleaner_stops_at_the_high_watermark_segment(journal):
    plog = journal.plog
    journal.fill(60)
    journal.fill(60)  # the same keys again: all of the first round is obsolete
    hw_segment = plog.segments[2]
    plog.update_high_watermark(hw_segment.base_offset + 1)
    stats = LogCleaner().clean(plog, NOW)
    assert stats.cleaned and stats.end_offset == hw_segment.base_offset
    kept = [o for o, _, _ in data_records(plog)]
    assert [o for o in kept if o >= hw_segment.base_offset] == list(
        range(hw_segment.base_offset, plog.log_end_offset)
    )


def test_cleaner_tombstones_get_a_delete_horizon_and_vanish_after_delete_retention(journal):
    plog, cleaner = journal.plog, LogCleaner()
    journal.append([(b"a", b"1"), (b"b", b"2")])
    journal.append([(b"a", None)])  # tombstone at offset 2
    journal.fill(40)
    stats = clean(cleaner, plog)
    assert stats.cleaned
    tomb = next(b for b in read_batches(plog) if b.base_offset == 2)
    assert tomb.has_delete_horizon and tomb.delete_horizon_ms == NOW + RETENTION
    assert [(r.key, r.value) for r in tomb.records()] == [(b"a", None)]
    assert tomb.is_valid_crc() and tomb.last_offset == 2
    assert visible(plog)[b"b"] == b"2" and b"a" not in visible(plog)
    assert (0, b"a", b"1") not in data_records(plog)

    journal.fill(40, NOW + RETENTION - 1, prefix=b"g")
    clean(cleaner, plog, NOW + RETENTION - 1, force=True)  # the horizon has not passed yet
    assert (2, b"a", None) in data_records(plog)

    journal.fill(40, NOW + RETENTION, prefix=b"h")
    clean(cleaner, plog, NOW + RETENTION, force=True)
    assert (2, b"a", None) not in data_records(plog)
    assert (1, b"b", b"2") in data_records(plog)
    assert_consistent(plog, journal)


def test_cleaner_keeps_records_newer_than_min_compaction_lag(tmp_path):
    lag = 60_000
    plog = create_log(tmp_path / "t-0", config(min_compaction_lag_ms=lag), now_ms=NOW)
    journal = Journal(plog)
    journal.fill(60, NOW)
    journal.fill(60, NOW + 50_000)  # the same keys, younger
    young = next(s for s in plog.segments if s.max_timestamp >= NOW + 50_000)
    stats = clean(LogCleaner(), plog, NOW + 70_000)
    # Records up to NOW + 10_000 may be cleaned; the segments after them may not.
    assert stats.cleaned and stats.end_offset <= young.base_offset
    offsets = [o for o, _, _ in data_records(plog)]
    assert [o for o in offsets if o >= young.base_offset] == list(
        range(young.base_offset, plog.log_end_offset)
    )


def test_cleaner_honours_min_cleanable_dirty_ratio_and_max_compaction_lag(tmp_path):
    def run(**overrides):
        plog = create_log(tmp_path / str(len(overrides)), config(**overrides), now_ms=NOW)
        journal, cleaner = Journal(plog), LogCleaner()
        journal.fill(100)
        assert clean(cleaner, plog).cleaned  # nothing clean yet: the ratio is 1
        journal.fill(30, NOW + 1, prefix=b"g")  # a little dirty data after a large clean head
        plog.update_high_watermark(plog.log_end_offset)
        info = cleaner.cleanable(plog, NOW + 10_000)
        assert 0 < info.cleanable_ratio < 0.5
        return clean(cleaner, plog, NOW + 10_000).cleaned

    assert not run()
    assert run(max_compaction_lag_ms=5_000)  # a dirty segment waited longer than that


def test_cleaner_removes_aborted_transactions_and_keeps_committed_ones(journal):
    plog, cleaner = journal.plog, LogCleaner()
    journal.append([(b"k1", b"aborted"), (b"k2", b"aborted")], pid=7, epoch=0, seq=0, txn=True)
    journal.append([(b"k3", b"committed")], pid=8, epoch=0, seq=0, txn=True)
    journal.marker(7, 0, commit=False)
    journal.marker(8, 0, commit=True)
    journal.fill(40)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == plog.log_end_offset

    clean(cleaner, plog)
    keys = {key: value for _, key, value in data_records(plog)}
    assert keys.get(b"k3") == b"committed" and b"k1" not in keys and b"k2" not in keys
    controls = [b for b in read_batches(plog) if b.is_control]
    assert [(b.producer_id, b.base_offset) for b in controls] == [(7, 3), (8, 4)]
    # The marker of the aborted transaction stays while the batch of its producer does (it is
    # the producer's last data batch, kept empty), and so does its transaction index entry.
    kept = next(b for b in read_batches(plog) if b.producer_id == 7 and not b.is_control)
    assert kept.record_count == 0 and (kept.base_offset, kept.last_offset) == (0, 1)
    assert [t.producer_id for t in plog.segments[0].txn_index.all_aborted()] == [7]

    # Producer 7 moves on: its aborted batch is no longer its last one and goes; the marker
    # stays one more round (that round still saw the batch), then gets a delete horizon.
    journal.append([(b"k9", b"later")], pid=7, epoch=0, seq=2)
    journal.fill(40, NOW, prefix=b"g")
    clean(cleaner, plog, force=True)
    assert not [b for b in read_batches(plog) if b.producer_id == 7 and b.base_offset == 0]
    abort = next(b for b in read_batches(plog) if b.is_control and b.producer_id == 7)
    assert not abort.has_delete_horizon
    journal.fill(40, NOW, prefix=b"h")
    clean(cleaner, plog, force=True)
    abort = next(b for b in read_batches(plog) if b.is_control and b.producer_id == 7)
    assert abort.has_delete_horizon and abort.delete_horizon_ms == NOW + RETENTION
    commit = next(b for b in read_batches(plog) if b.is_control and b.producer_id == 8)
    assert not commit.has_delete_horizon  # k3 of its transaction is still there

    journal.fill(40, NOW + RETENTION, prefix=b"i")
    clean(cleaner, plog, NOW + RETENTION, force=True)
    assert [b.producer_id for b in read_batches(plog) if b.is_control] == [8]
    assert visible(plog)[b"k3"] == b"committed"
    assert_consistent(plog, journal)


def test_cleaner_keeps_producer_state_across_a_reload(tmp_path):
    cfg = config()
    plog = create_log(tmp_path / "t-0", cfg, now_ms=NOW)
    journal = Journal(plog)
    journal.append([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], pid=5, epoch=2, seq=10)
    journal.append([(b"a", b"2"), (b"b", b"2"), (b"c", b"2")])  # supersedes all of pid 5
    journal.fill(40)
    clean(LogCleaner(), plog)
    first = read_batches(plog)[0]
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 0)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (5, 2, 10)
    assert first.is_valid_crc()
    plog.close()
    for offset in plog.producer_state.snapshot_offsets():  # force a replay from the log
        plog.producer_state.snapshot_path(offset).unlink()

    again = load_log(tmp_path / "t-0", cfg, had_clean_shutdown=True, now_ms=NOW)
    entry = again.producer_state.last_entry(5)
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (2, 12, 2)
    retry = again.append_as_leader(
        records([(b"a", b"1")] * 3, pid=5, epoch=2, seq=10), 0, now_ms=NOW
    )
    assert retry.duplicate and retry.first_offset == 0
    again.append_as_leader(records([(b"a", b"3")], pid=5, epoch=2, seq=13), 0, now_ms=NOW)
    again.close()


def test_cleaner_rebuilt_batches_keep_codec_base_offset_and_last_offset_delta(journal):
    plog = journal.plog
    pairs = [(b"x", b"1"), (b"y", b"1"), (b"z", b"1")]
    journal.append(pairs, pid=3, epoch=0, seq=0, codec=CompressionType.GZIP)
    journal.append([(b"y", b"2"), (b"z", b"2")], pid=3, epoch=0, seq=3)
    journal.fill(40)
    clean(LogCleaner(), plog)
    first = read_batches(plog)[0]
    assert first.compression_type is CompressionType.GZIP and first.is_valid_crc()
    assert (first.base_offset, first.last_offset_delta, first.base_sequence) == (0, 2, 0)
    assert [(r.offset, r.key, r.value) for r in first.records()] == [(0, b"x", b"1")]
    assert first.partition_leader_epoch == 0


def test_cleaner_merges_cleaned_segments_into_groups_that_fit_a_segment(journal):
    plog, cleaner = journal.plog, LogCleaner()
    for i in range(300):
        journal.append([(b"k%d" % (i % 5), b"v%d" % i + b"." * 40)])
    before = len(plog.segments)
    clean(cleaner, plog)  # full segments: one per group; they shrink to almost nothing
    assert len(plog.segments) == before
    for i in range(60):
        journal.append([(b"k%d" % (i % 5), b"w%d" % i + b"." * 40)])
    clean(cleaner, plog, force=True)  # the small cleaned segments now share groups
    assert len(plog.segments) < before
    assert all(s.size <= 2000 for s in plog.segments)
    assert [s.base_offset for s in plog.segments] == plog._bases
    assert_consistent(plog, journal)


def test_cleaner_resets_a_checkpoint_outside_the_log(journal):
    cleaner = LogCleaner(checkpoints={journal.plog.name: 10_000})
    journal.fill(60)
    journal.fill(60)
    stats = clean(cleaner, journal.plog)
    assert stats.first_dirty_offset == 0 and stats.cleaned


def test_cleaner_small_offset_map_cleans_in_several_rounds(journal):
    plog, cleaner = journal.plog, LogCleaner(CleanerConfig(max_map_entries=25))
    for i in range(200):
        journal.append([(b"k%d" % (i % 40), b"v%d" % i + b"." * 30)])
    expected = visible(plog)
    ends = []
    for _ in range(50):
        stats = clean(cleaner, plog, force=True)
        if not stats.cleaned:
            break
        ends.append(stats.end_offset)
        assert visible(plog) == expected
    assert ends == sorted(ends) and len(ends) > 1
    assert ends[-1] == plog.active_segment.base_offset
    assert_consistent(plog, journal)


def test_cleaner_clean_filthiest_picks_the_dirtiest_due_log(tmp_path):
    logs = {}
    for name, rounds in (("a-0", 1), ("b-0", 3)):
        plog = create_log(tmp_path / name, config(), now_ms=NOW)
        journal = Journal(plog)
        for _ in range(rounds):
            journal.fill(50)
        plog.update_high_watermark(plog.log_end_offset)
        logs[name] = plog
    cleaner = LogCleaner()
    key, stats = cleaner.clean_filthiest(logs, NOW)
    assert stats.cleaned and key in logs and set(cleaner.checkpoints) == {key}
    for plog in logs.values():
        plog.close()


# -- crashes ---------------------------------------------------------------------------------


class Crash(Exception):
    pass


@contextlib.contextmanager
def crash_after_renames(n):
    """Let ``n`` renames happen, then fail the next one, as a power cut would."""
    real = {"rename": os.rename, "replace": os.replace}
    count = [0]

    def wrap(name):
        def renamed(*args, **kwargs):
            if count[0] >= n:
                raise Crash(f"crash before rename #{n + 1}")
            count[0] += 1
            return real[name](*args, **kwargs)

        return renamed

    os.rename, os.replace = wrap("rename"), wrap("replace")
    try:
        yield count
    finally:
        os.rename, os.replace = real["rename"], real["replace"]


def build_for_crash(directory, rounds):
    """A log whose next clean rewrites one group per segment (``rounds=1``: full segments) or
    merges small cleaned segments into multi-segment groups (``rounds>1``)."""
    plog = create_log(directory, config(), now_ms=NOW)
    journal = Journal(plog)
    cleaner = LogCleaner()
    for r in range(rounds):
        for i in range(45):
            key = b"r%dk%d" % (r, i % 6) if i % 3 else b"k%d" % (i % 6)
            journal.append([(key, b"v%d-%d" % (r, i) + b"." * 30)])
        if r < rounds - 1:
            clean(cleaner, plog)
    plog.update_high_watermark(plog.log_end_offset)
    return plog, journal, cleaner


@pytest.mark.parametrize("multi_segment_groups", [False, True])
def test_cleaner_crash_at_any_step_of_the_swap_recovers_a_consistent_log(
    tmp_path, multi_segment_groups
):
    rounds = 3 if multi_segment_groups else 1
    n = 0
    while True:
        directory = tmp_path / f"crash-{n}"
        plog, journal, cleaner = build_for_crash(directory, rounds)
        expected = visible(plog)
        leo = plog.log_end_offset
        with crash_after_renames(n):
            try:
                cleaner.clean(plog, NOW, force=True)
                finished = True
            except Crash:
                finished = False
        # A crash: nothing is closed. With several segments per group the loader must first
        # complete the swap (it is not yet wired into log_loader; see the cleaner's docstring).
        if multi_segment_groups:
            complete_interrupted_swaps(directory)
        again = load_log(
            directory, config(), had_clean_shutdown=False, recovery_point=leo, now_ms=NOW
        )
        assert again.log_end_offset == leo, n
        assert visible(again) == expected, n
        assert_consistent(again, journal)
        names = os.listdir(directory)
        assert not [x for x in names if x.endswith((".cleaned", ".swap", ".deleted"))]
        again.close()
        if finished:
            break
        n += 1
    assert n >= 6  # every rename of the swap was a crash point


def test_complete_interrupted_swaps_drops_the_segments_a_swap_covers(tmp_path):
    plog, journal, cleaner = build_for_crash(tmp_path / "t-0", 3)
    directory = plog.dir
    bases = [s.base_offset for s in plog.segments]
    with crash_after_renames(3), contextlib.suppress(Crash):  # right after the commit point
        cleaner.clean(plog, NOW, force=True)
    swaps = [n for n in os.listdir(directory) if n.endswith(".log.swap")]
    assert len(swaps) == 1
    base = files.offset_from_file_name(swaps[0])
    assert complete_interrupted_swaps(directory) == [base]
    remaining = sorted(
        files.offset_from_file_name(n) for n in os.listdir(directory) if n.endswith(".log")
    )
    assert base in remaining and len(remaining) < len(bases)


def test_cleaner_load_log_alone_completes_a_multi_segment_swap(tmp_path):
    plog, journal, cleaner = build_for_crash(tmp_path / "t-0", 3)
    leo = plog.log_end_offset
    with crash_after_renames(3), contextlib.suppress(Crash):  # right after the commit point
        cleaner.clean(plog, NOW, force=True)
    again = load_log(plog.dir, config(), had_clean_shutdown=False, recovery_point=leo)
    try:
        assert_consistent(again, journal)
    finally:
        again.close()


# -- the model -------------------------------------------------------------------------------

KEYS = [b"k%d" % i for i in range(6)]
op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS)),
    st.tuples(st.just("clean"), st.integers(0, 3 * RETENTION)),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, max_size=80), map_entries=st.sampled_from([2, 4, 1_000]))
def test_cleaner_matches_a_dict_model_across_many_cleans(tmp_path_factory, ops, map_entries):
    directory = tmp_path_factory.mktemp("model") / "t-0"
    cfg = config(internal_segment_bytes=600)
    plog = create_log(directory, cfg, now_ms=NOW)
    journal, cleaner = Journal(plog), LogCleaner(CleanerConfig(max_map_entries=map_entries))
    model, now = {}, NOW
    for o in ops:
        if o[0] == "put":
            journal.append([(o[1], o[2])], now)
            model[o[1]] = o[2]
        elif o[0] == "delete":
            journal.append([(o[1], None)], now)
            model.pop(o[1], None)
        else:
            now += o[1]
            clean(cleaner, plog, now, force=True)
            assert visible(plog) == model
            assert_consistent(plog, journal)
    clean(cleaner, plog, now + 2 * RETENTION, force=True)
    assert visible(plog) == model
    assert_consistent(plog, journal)
    plog.close()
    again = load_log(directory, cfg, had_clean_shutdown=True, now_ms=now)
    assert visible(again) == model
    assert_consistent(again, journal)
    again.close()


def test_complete_interrupted_swaps_with_nothing_interrupted_touches_nothing(tmp_path, monkeypatch):
    plog = create_log(tmp_path / "t-0", LogConfig.from_layers({}), now_ms=0)
    plog.close()
    before = sorted(os.listdir(plog.dir))
    fsyncs = []
    monkeypatch.setattr("os.fsync", lambda fd: fsyncs.append(fd))
    assert complete_interrupted_swaps(plog.dir) == []
    assert not fsyncs and sorted(os.listdir(plog.dir)) == before
