"""The log cleaner's round off the owning thread: ``LogManager.begin_cleaning`` (choose and
snapshot), ``CleaningRound.run`` in another thread, ``finish_cleaning`` (swap, or discard when
the log changed meanwhile, since the map may have dropped records because of later ones that
are no longer there)."""

from __future__ import annotations

import os
import threading

import pytest

from kcore.log.cleaner_round import CleaningAborted, CleaningRound
from kcore.log.errors import LogError
from kcore.record import RecordBatchBuilder
from tests.log.test_log_manager import T0, TOPIC_ID, all_batches, formatted, small_segments

TP = ("t", 0)


def compacted(**overrides):
    return small_segments(
        **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, **overrides}
    )


def put(plog, key: bytes, value: bytes) -> None:
    b = RecordBatchBuilder()
    b.append(timestamp=T0, key=key, value=value)
    plog.append_as_leader(bytes(b.build()), leader_epoch=0, now_ms=T0)


def filled(tmp_path, cfg=None, rounds: int = 8):
    """A manager with one compacted log: keys k0..k3 written ``rounds`` times (several
    segments), and what a consumer should see after cleaning."""
    manager = formatted(tmp_path, cfg or compacted(), cleaner_backoff_ms=1000)
    manager.startup(T0)
    plog = manager.get_or_create_log(*TP, TOPIC_ID, T0)
    latest = {}
    for r in range(rounds):
        for k in range(4):
            key, value = b"k%d" % k, b"r%d-" % r + b"v" * 100
            put(plog, key, value)
            latest[key] = value
    plog.update_high_watermark(plog.log_end_offset)
    assert len(plog.segments) > 3
    return manager, plog, latest


def records(plog) -> list[tuple[bytes, bytes]]:
    return [(r.key, r.value) for b in all_batches(plog) for r in b.records()]


def leftovers(plog) -> list[str]:
    return [n for n in os.listdir(plog.dir) if n.endswith((".cleaned", ".swap"))]


def in_thread(prepared: CleaningRound) -> None:
    t = threading.Thread(target=prepared.run)
    t.start()
    t.join(30)
    assert not t.is_alive()


def test_cleaning_round_runs_in_another_thread_while_the_log_takes_appends(tmp_path):
    manager, plog, latest = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    assert prepared is not None
    t = threading.Thread(target=prepared.run)
    t.start()
    for i in range(20):  # appends (and rolls) on this thread meanwhile
        put(plog, b"tail-%d" % i, b"t" * 100)
    t.join(30)
    plog.update_high_watermark(plog.log_end_offset)
    stats = manager.finish_cleaning(prepared, T0)
    assert stats is not None and stats.cleaned and not stats.discarded
    assert manager.cleaner.checkpoints[TP] == stats.end_offset > 0
    got = records(plog)
    cleaned = [kv for kv in got if kv[0].startswith(b"k")]
    assert len(cleaned) < 32  # compacted ...
    assert dict(cleaned) == latest  # ... to the latest value of each key
    assert [k for k, _ in got if k.startswith(b"tail")] == [b"tail-%d" % i for i in range(20)]
    assert not leftovers(plog)


def _truncate_into_the_round(plog):
    plog.truncate_to(plog.segments[1].base_offset + 1)


def _retention_deletes_the_first_segment(plog):
    plog.increment_log_start_offset(plog.segments[1].base_offset)
    assert plog.delete_segments_below_log_start(T0) >= 1


def _compaction_switched_off(plog):
    plog.config = small_segments(**{"cleanup.policy": "delete"})


@pytest.mark.parametrize(
    "change",
    [_truncate_into_the_round, _retention_deletes_the_first_segment, _compaction_switched_off],
)
def test_cleaning_round_is_discarded_when_the_log_changed_while_it_ran(tmp_path, change):
    manager, plog, _ = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    in_thread(prepared)
    assert prepared.outputs and prepared.error is None  # cleaned segments were written
    change(plog)
    before = records(plog)
    dirty = manager.cleaner.checkpoints.get(TP)
    stats = manager.finish_cleaning(prepared, T0)
    assert stats.discarded and not stats.cleaned
    assert records(plog) == before  # nothing swapped in
    assert manager.cleaner.checkpoints.get(TP) == dirty
    assert not leftovers(plog)
    assert TP not in manager._uncleanable  # not a failure of the log


def test_cleaning_round_of_a_log_deleted_meanwhile_is_dropped(tmp_path):
    manager, plog, _ = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    directory = plog.dir
    manager.delete_log(*TP)  # closes the segments the round reads: its own descriptors stay
    prepared.run()
    assert isinstance(prepared.error, CleaningAborted)
    assert manager.finish_cleaning(prepared, T0) is None
    assert not directory.exists()
    assert manager.begin_cleaning(T0 + 1) is None  # nothing left to clean, no error


def test_cleaning_round_reads_its_own_descriptors_after_the_log_closed_them(tmp_path):
    manager, plog, _ = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    below = prepared.first_uncleanable_offset
    expected = {r.key: r.value for b in all_batches(plog) for r in b.records() if r.offset < below}
    for seg in plog.segments[:-1]:  # as a deferred deletion would close them
        seg.log.close()
    prepared.run()
    assert prepared.error is None
    got = [(r.key, r.value) for _, c in prepared.outputs for r in _cleaned_records(c)]
    assert len(got) == len(expected) and dict(got) == expected
    prepared.delete_outputs()
    prepared.close()


def _cleaned_records(cleaned):
    for _, b in cleaned.log.full_batches_from(0):
        yield from b.records()


def test_log_manager_abort_cleaning_stops_the_round_and_discards_it(tmp_path):
    manager, plog, _ = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    before = records(plog)
    manager.abort_cleaning()
    prepared.run()
    assert isinstance(prepared.error, CleaningAborted) and not prepared.outputs
    stats = manager.finish_cleaning(prepared, T0)
    assert stats.discarded and records(plog) == before and not leftovers(plog)


def test_log_manager_runs_one_cleaning_round_at_a_time(tmp_path):
    manager, plog, _ = filled(tmp_path)
    prepared = manager.begin_cleaning(T0)
    assert manager.begin_cleaning(T0) is None
    prepared.run()
    manager.finish_cleaning(prepared, T0)
    with pytest.raises(ValueError):
        manager.finish_cleaning(prepared, T0)


def test_cleaning_round_error_marks_the_log_uncleanable_only_if_the_log_is_unchanged(
    tmp_path, monkeypatch, caplog
):
    manager, plog, _ = filled(tmp_path)

    def broken(self):
        raise LogError("unreadable segment")

    monkeypatch.setattr(CleaningRound, "_build_offset_map", broken)
    prepared = manager.begin_cleaning(T0)
    in_thread(prepared)
    assert manager.finish_cleaning(prepared, T0) is None
    assert TP in manager._uncleanable and "uncleanable" in caplog.text
