"""Crash tests with real processes: SIGKILL a writer at random moments, many times.

A child process (``crash_child.py``) appends batches of an idempotent producer to a partition
log and reports each append after it returns. The parent kills it with SIGKILL at a seeded
random moment, reopens the log as the broker would after a crash
(``load_log(had_clean_shutdown=False)``) and checks:

* every reported append is there, at the reported offsets, with the same values;
* reading from the log start to the log end offset yields only whole, valid batches, with
  contiguous offsets and sequences (whatever the kill tore was cut, nothing else);
* the next run starts exactly at that log end offset, and its producer state knows the last
  batch (an idempotent retry is recognised as a duplicate).

Half of the rounds verify a copy and leave the crashed files to the next child, so the child's
own recovery of raw crash leftovers is exercised too.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kcore.log.log_loader import load_log
from kcore.log.log_reads import FetchIsolation
from kcore.record import RecordBatch, iter_batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_child  # noqa: E402

CHILD = Path(__file__).resolve().parent / "crash_child.py"


@dataclass
class Round:
    start_offset: int
    start_seq: int
    dup: tuple[int, int] | None = None
    appends: list[tuple[int, int, int, int]] = field(default_factory=list)
    stderr: str = ""


def run_child(directory: Path, seed: int, epoch: int, rng: random.Random, extra=()) -> Round:
    """Start the child, let it report a random number of appends, SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(seed), str(epoch), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(20, proc.kill)  # never hang the suite on a stuck child
    watchdog.start()
    try:
        header = proc.stdout.readline().split()
        if not header or header[0] != "start":
            proc.kill()
            raise AssertionError(f"child did not start: {header} {proc.stderr.read()}")
        rnd = Round(int(header[1]), int(header[2]))
        wanted = rng.randint(1, 40)
        during_large_write = rng.random() < 0.5
        lines, reported = [], 0
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            reported += line.startswith("append")
            if reported >= wanted and (not during_large_write or line.startswith("large")):
                break
        # Kill at a random moment of the next append (or of the large one just announced).
        time.sleep(rng.random() * (0.001 if during_large_write else 0.004))
        os.kill(proc.pid, signal.SIGKILL)
        rest, rnd.stderr = proc.communicate()
    finally:
        watchdog.cancel()
    assert proc.returncode == -signal.SIGKILL, f"child exited by itself: {rnd.stderr}"
    for line in lines + rest.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue  # a line cut by the kill: that append was not reported
        kind, *fields = line.split()
        if kind == "large":
            continue
        if kind == "dup":
            rnd.dup = (int(fields[0]), int(fields[1]))
        elif kind == "append":
            first, last, seq, crc = map(int, fields)
            rnd.appends.append((first, last, seq, crc))
        else:
            raise AssertionError(f"child reported {line!r}; stderr: {rnd.stderr}")
    return rnd


def read_everything(plog):
    """Every batch from the log start to the LEO, one fetch at a time (nothing is kept)."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20, FetchIsolation.LOG_END)
        data = b"".join(s.read() for s in info.records)
        it = iter_batches(data)
        got = [RecordBatch(bytes(b.buffer)) for b in it]
        assert got and it.trailing_bytes == 0, f"torn data at offset {offset}"
        assert got[-1].last_offset >= offset, f"a fetch at {offset} went backwards"
        yield from got
        offset = got[-1].last_offset + 1


def release(plog) -> None:
    """Let go of the files without a clean close (which would fsync every segment)."""
    for seg in plog.segments:
        seg.log.close()
        seg.offset_index.close_handler()
        seg.time_index.close_handler()
        seg.txn_index.close()


def verify(directory: Path, reported: dict[int, tuple[int, int, int]], seen: dict, flush):
    """Reopen after a crash and check every property.

    ``seen`` maps the first offset of every batch verified by an earlier round to its CRC: the
    records of those batches are not decoded again, their CRC-32C (which covers everything
    but the offset and leader epoch, both checked here) must simply be the same.

    Returns ``(log end offset, last sequence)`` and the offsets of the last batch.
    """
    plog = load_log(directory, crash_child.log_config(flush), had_clean_shutdown=False, now_ms=0)
    try:
        expected_offset, expected_seq = plog.log_start_offset, 0
        present, last = set(), None
        for b in read_everything(plog):
            b.validate()  # CRC and framing
            assert b.base_offset == expected_offset, "offsets are not contiguous"
            assert b.producer_id == crash_child.PRODUCER_ID
            assert b.base_sequence == expected_seq, "sequences are not contiguous"
            if b.base_offset in seen:
                assert b.crc == seen[b.base_offset], f"batch {b.base_offset} changed"
            else:
                values = [r.value for r in b.records()]
                assert values == [
                    crash_child.record_value(s) for s in range(b.base_sequence, b.last_sequence + 1)
                ]
                if b.base_offset in reported:
                    last_offset, seq, crc = reported[b.base_offset]
                    assert (b.last_offset, b.base_sequence) == (last_offset, seq)
                    assert zlib.crc32(b"".join(values)) == crc
                seen[b.base_offset] = b.crc
            present.add(b.base_offset)
            last = (b.base_offset, b.last_offset)
            expected_offset, expected_seq = b.last_offset + 1, b.last_sequence + 1
        assert plog.log_end_offset == expected_offset
        lost = sorted(set(reported) - present)
        assert not lost, f"reported appends at offsets {lost} were lost"
        for seg in plog.segments:
            seg.sanity_check()
            assert seg.size == sum(x.size for x in seg.log.batches_from(0))
        entry = plog.producer_state.last_entry(crash_child.PRODUCER_ID)
        last_seq = entry.last_seq if entry is not None else -1
        assert last_seq == expected_seq - 1
        return (plog.log_end_offset, last_seq), last
    finally:
        release(plog)


ROUNDS_PER_LOG = 25  # then start a new log: keeps the soak's files (and rescans) small


def crash_many_times(tmp_path: Path, rounds: int, seed: int, budget_s: float, extra=()) -> int:
    rng = random.Random(seed)
    flush = int(extra[1]) if extra else None
    deadline = time.monotonic() + budget_s
    done = 0
    for r in range(rounds):
        if done >= 3 and time.monotonic() > deadline:
            break  # a slow machine runs fewer rounds rather than a slower suite
        if r % ROUNDS_PER_LOG == 0:
            directory = tmp_path / f"crashy-{r // ROUNDS_PER_LOG}"
            shutil.rmtree(tmp_path / f"crashy-{r // ROUNDS_PER_LOG - 1}", ignore_errors=True)
            reported: dict[int, tuple[int, int, int]] = {}
            expected_start: tuple[int, int] = (0, -1)
            last_batch = None
            seen: dict[int, int] = {}
        rnd = run_child(directory, rng.randrange(1 << 30), r, rng, extra)
        assert (rnd.start_offset, rnd.start_seq) == expected_start, (
            f"round {r} started at {rnd.start_offset} (seq {rnd.start_seq}), "
            f"expected {expected_start}"
        )
        # The retry of the last batch (reported or not) got its original offsets back.
        assert rnd.dup == last_batch
        for first, last, seq, crc in rnd.appends:
            reported[first] = (last, seq, crc)
        if r % 2:
            target = tmp_path / f"verify-{r}" / directory.name
            shutil.copytree(directory, target)  # leave the raw crash to the next child
        else:
            target = directory
        expected_start, last_batch = verify(target, reported, seen, flush)
        if r % 2:
            shutil.rmtree(target.parent)
        done += 1
    return done


def test_log_crash_every_reported_append_survives_sigkill(tmp_path):
    done = crash_many_times(tmp_path, rounds=20, seed=20240611, budget_s=25)
    assert done >= 3


def test_log_crash_with_an_fsync_per_append_loses_nothing_reported(tmp_path):
    done = crash_many_times(tmp_path, rounds=5, seed=7, budget_s=8, extra=("--flush-messages", "1"))
    assert done >= 3


@pytest.mark.slow
def test_log_crash_soak_hundreds_of_kills(tmp_path):
    crash_many_times(tmp_path, rounds=200, seed=99, budget_s=600)
