"""Benchmark of the storage engine (kcore/log), each figure beside a baseline measured in the same run.

    .venv/bin/python bench/log_bench.py [--quick] [--dir DIR] [--seed N]
                                        [--only append|segmented|growth ...]

What is measured (issue 3, "Speed"):

1. Append throughput of ``PartitionLog.append_as_leader`` with uncompressed 1 MiB and 16 KiB
   batches (built once with ``RecordBatchBuilder`` and re-appended: no producer id, so no
   duplicate check), against the baseline of raw ``os.write`` appends of the same bytes to a
   plain file. kcore, the baseline and a reference (``crc32c`` over the batch, then
   ``os.write``: the least a validating append can do; for 1 MiB also ``crc32c`` on a second
   thread overlapped with the ``os.write``) take turns in chunks of 8 MiB; the
   ratio is the median over the chunks of (baseline time / kcore time) in the same turn, so
   that a noisy neighbour on this shared machine slows both alike. Also printed: the ratio of
   the sums, the ratio of CPU times, and the time kcore adds per append. Targets: >= 90 % of
   the baseline for 1 MiB, >= 50 % for 16 KiB. See ``prime_memory`` for a quirk of this VM.
2. A 1 GiB log of 16 KiB batches in ~1,000 segments (``internal.segment.bytes`` ~ 1 MiB),
   built in a child process that is then killed without closing the log (a crash: indexes
   still preallocated, no shutdown snapshot):
   * reopen after the crash: ``load_log(had_clean_shutdown=False)`` with the recovery point at
     ~99 % of the log; reports the time and the bytes scanned (recovery and producer-state
     replay), which must be only what follows the recovery point;
   * reopen after a clean shutdown (``close()`` then ``load_log(had_clean_shutdown=True)``):
     target < 0.5 s, nothing scanned;
   * random-offset lookups: ``PartitionLog.read(offset, 1, FetchIsolation.LOG_END)`` -- the
     user-visible read that finds the batch holding the offset and returns a ``FileSlice``.
     Target >= 200,000/s. For reference, the rate of one bare ``os.pread`` of a 61-byte header
     at a random position (a floor no lookup that touches the file can beat);
   * sequential read as file slices: ``read()`` over the whole log with max_bytes = 1 MiB
     (slices found per second), then the bytes/s of actually reading those slices with
     ``os.pread`` and with ``os.sendfile`` to /dev/null; baseline: ``os.pread`` of the same
     files in 1 MiB chunks, with no log at all.
3. Growth: one log (default segment.bytes, 1 GiB) grown to 100 MiB, 1 GiB and 4 GiB with 16 KiB
   batches; at each size the append rate (16 KiB and 1 MiB batches, each against its os.write
   baseline in the same window) and the random lookup rate must stay flat; beside the lookup
   rate, a bare random ``os.pread`` over the same log (the page cache slows down as it grows
   too) and the time kcore adds to it. The log's files are fsynced before each measured window,
   so the window does not pay for the writeback of the fill.

``--quick`` scales every size down (128 MiB / 128-segment log, growth to 16/64/256 MiB). Free
space is checked first with ``shutil.disk_usage``; sizes are scaled down, with a printed note,
if they would not fit. Everything is written under a temporary directory (``--dir``, default
the system's) that is deleted at the end. All reads are served from the page cache (the machine
has enough memory to hold every log written here): the figures are CPU costs, not disk speed.

Not part of the test suite. Results, with the machine, go in docs/performance.md ("Storage
engine (kcore/log)").
"""

from __future__ import annotations

import argparse
import datetime
import logging
import mmap
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crc32c import crc32c  # noqa: E402

from kcore.log.config import LogConfig  # noqa: E402
from kcore.log.file_records import FileRecords  # noqa: E402
from kcore.log.log_loader import create_log, load_log  # noqa: E402
from kcore.log.log_reads import FetchIsolation  # noqa: E402
from kcore.log.partition_log import PartitionLog  # noqa: E402
from kcore.log.segment import LogSegment  # noqa: E402
from kcore.record import RecordBatch, RecordBatchBuilder  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
NOW = int(time.time() * 1000)  # batch timestamps; within message.timestamp.after.max.ms
LOG_END = FetchIsolation.LOG_END
CHUNK = 8 * MiB  # kcore and the baseline alternate every CHUNK bytes

TARGET_APPEND_1M = 0.90
TARGET_APPEND_16K = 0.50
TARGET_LOOKUPS = 200_000
TARGET_CLEAN_REOPEN_S = 0.5
# "Flat as the log grows", made checkable: from the smallest to the largest size, the time kcore
# adds per append over os.write may grow at most 1.5x (the absolute rates follow the page cache,
# see prime_memory), and the random lookup rate may drop at most to 0.8x. Since lookups got
# faster, their absolute rate follows the page cache too (a bare random pread over 4 GiB runs
# at ~0.6x its rate over 100 MiB): the time kcore adds to a bare pread is also checked (1.5x).
FLAT_ADDED = 1.5
FLAT_LOOKUPS = 0.8

FULL = {
    "append_bytes": 256 * MiB,  # per batch size and round, for kcore and the baseline each
    "append_rounds": 3,
    "seg_log_bytes": GiB,
    "seg_count": 1000,
    "lookups": 200_000,
    "growth": [100 * MiB, GiB, 4 * GiB],
    "window_bytes": 128 * MiB,
}
QUICK = {
    "append_bytes": 64 * MiB,
    "append_rounds": 2,
    "seg_log_bytes": 128 * MiB,
    "seg_count": 128,
    "lookups": 50_000,
    "growth": [16 * MiB, 64 * MiB, 256 * MiB],
    "window_bytes": 32 * MiB,
}


# -- helpers ---------------------------------------------------------------------------------


def config(**overrides: object) -> LogConfig:
    return LogConfig.from_layers({k.replace("_", "."): str(v) for k, v in overrides.items()})


def make_batch(total_size: int, value_size: int = 1000) -> bytes:
    """An uncompressed batch of at most ``total_size`` bytes of ``value_size``-byte values."""
    b = RecordBatchBuilder(0)
    value = os.urandom(value_size)
    i = 0
    while b.uncompressed_size + value_size + 40 <= total_size:
        b.append(NOW, b"key-%08d" % i, value)
        i += 1
    return bytes(b.build())


def machine() -> dict[str, str]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "nproc": str(os.cpu_count()),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": datetime.date.today().isoformat(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds > 0 else float("inf")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


class Results:
    """Collects the summary lines printed at the end."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


_ZERO_MIB = bytes(MiB)


def prime_memory(nbytes: int) -> None:
    """Touch, then free, ``nbytes`` of anonymous memory (not timed).

    This VM hands free memory back to its host (virtio-balloon free page reporting): a page the
    guest has not used for a few seconds costs a host page fault when it is next touched, and
    appending to the page cache then runs at 200-300 MB/s instead of 2-4 GB/s -- for kcore and
    the baseline alike, which would hide kcore's own cost and make the figures depend on what
    else ran lately. Freed pages are reused first, so after this the chunk that follows
    appends into memory the host backs (most of the time).
    """
    m = mmap.mmap(-1, nbytes)
    for off in range(0, nbytes, MiB):
        m[off : off + MiB] = _ZERO_MIB[: min(MiB, nbytes - off)]
    m.close()


class CrcThread:
    """A parked thread that computes crc32c on request (``crc32c`` releases the GIL for buffers
    of 32 KiB and more), for the "overlap" side of the 1 MiB append: can a second core hide the
    CRC behind the write? Hand-off through two locks, the cheapest wake-up Python offers."""

    def __init__(self) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job: memoryview | None = None
        self.result = 0
        # Time the caller spends handing a job over (waking the thread) and waiting for it.
        self.start_us: list[float] = []
        self.wait_us: list[float] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self._go.acquire()
            job, self._job = self._job, None
            self.result = crc32c(job)
            del job
            self._done.release()

    def start(self, view: memoryview) -> None:
        started = time.perf_counter()
        self._job = view
        self._go.release()
        self.start_us.append((time.perf_counter() - started) * 1e6)

    def wait(self) -> int:
        started = time.perf_counter()
        self._done.acquire()
        self.wait_us.append((time.perf_counter() - started) * 1e6)
        return self.result


_CRC_THREAD: CrcThread | None = None


def crc_thread() -> CrcThread:
    """The one CrcThread of this process (started on first use)."""
    global _CRC_THREAD
    if _CRC_THREAD is None:
        _CRC_THREAD = CrcThread()
    return _CRC_THREAD


def append_window(
    plog: PartitionLog,
    base_fd: int,
    batch: bytes,
    nbytes: int,
    floor_fd: int | None = None,
    overlap_fd: int | None = None,
) -> dict:
    """Append ``nbytes`` of ``batch`` to ``plog`` and os.write the same to ``base_fd``, in
    alternating chunks of CHUNK bytes (which side goes first rotates). With ``floor_fd``, a
    third side does what no validated append can avoid: crc32c over the batch, then os.write.

    Before each chunk, ``prime_memory`` readies as much memory as the chunk writes. Nothing is
    fsynced (an fsync between chunks made the following page-cache writes up to 10x slower on
    this VM, for both sides); callers keep the dirty data well below the kernel's writeback
    threshold instead, and delete it afterwards. Returns the wall and CPU seconds
    per side, the bytes written by each, and per chunk: the ratio side rate / baseline rate
    and the time the side added per append over the baseline (us).
    """
    count = max(1, nbytes // len(batch))
    per_chunk = max(1, CHUNK // len(batch))
    append = plog.append_as_leader
    write = os.write
    view = memoryview(batch)[21:]  # what the batch CRC covers: attributes to the end

    def kcore(k: int) -> None:
        for _ in range(k):
            append(batch, 0, now_ms=NOW)

    def base(k: int) -> None:
        for _ in range(k):
            write(base_fd, batch)

    def floor(k: int) -> None:
        for _ in range(k):
            crc32c(view)
            write(floor_fd, batch)

    worker = crc_thread() if overlap_fd is not None else None

    def overlap(k: int) -> None:
        for _ in range(k):
            worker.start(view)
            write(overlap_fd, batch)
            worker.wait()

    sides = {"kcore": kcore, "base": base}
    if floor_fd is not None:
        sides["floor"] = floor
    if overlap_fd is not None:
        sides["overlap"] = overlap
    names = list(sides)
    seconds = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    ratios: dict[str, list[float]] = {n: [] for n in names if n != "base"}
    added: dict[str, list[float]] = {n: [] for n in ratios}  # us per append over the baseline
    done = 0
    turn = 0
    while done < count:
        k = min(per_chunk, count - done)
        prime_memory(k * len(batch) * len(names))
        chunk = {}
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            sides[name](k)
            chunk[name] = time.perf_counter() - start
            cpu[name] += time.process_time() - start_cpu
        for name in names:
            seconds[name] += chunk[name]
        for name in ratios:
            ratios[name].append(chunk["base"] / chunk[name])
            added[name].append((chunk[name] - chunk["base"]) / k * 1e6)
        done += k
        turn += 1
    return {
        "seconds": seconds,
        "cpu": cpu,
        "bytes": count * len(batch),
        "ratios": ratios,
        "added_us": added,
    }


def lookup_rate(plog: PartitionLog, offsets: list[int], repeats: int = 3) -> tuple[float, float]:
    """Random ``read(offset, 1, LOG_END)`` calls per second, best of ``repeats``: by the wall
    clock and by the process's CPU time (the latter is immune to being descheduled by other
    jobs on this shared 2-core machine, not to their cache pollution)."""
    read = plog.read
    best = best_cpu = 0.0
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        for o in offsets:
            read(o, 1, LOG_END)
        best = max(best, len(offsets) / (time.perf_counter() - start))
        best_cpu = max(best_cpu, len(offsets) / max(time.process_time() - start_cpu, 1e-9))
    return best, best_cpu


def check_lookups(plog: PartitionLog, offsets: list[int]) -> None:
    """The slice read() returns must start with the batch holding the offset."""
    for o in offsets:
        info = plog.read(o, 1, LOG_END)
        s = info.records[0]
        b = RecordBatch(s.records.pread(s.position, s.length))
        assert b.base_offset <= o <= b.last_offset, (o, b.base_offset, b.last_offset)


def random_offsets(plog: PartitionLog, n: int, rng: random.Random) -> list[int]:
    return [rng.randrange(plog.log_start_offset, plog.log_end_offset) for _ in range(n)]


def tail_offsets(plog: PartitionLog, n: int, rng: random.Random) -> list[int]:
    """Random offsets in the last 1 % of the log (consumers and followers near the end)."""
    lo = plog.log_end_offset - max(1, (plog.log_end_offset - plog.log_start_offset) // 100)
    return [rng.randrange(lo, plog.log_end_offset) for _ in range(n)]


def pread_floor(plog: PartitionLog, n: int, rng: random.Random) -> float:
    """os.pread of 61 bytes at random positions of random segments, per second."""
    segs = [s for s in plog.segments if s.size > 61]
    targets = []
    for _ in range(n):
        s = rng.choice(segs)
        targets.append((s.log.fd, rng.randrange(0, s.size - 61)))
    pread = os.pread
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for fd, pos in targets:
            pread(fd, 61, pos)
        best = max(best, n / (time.perf_counter() - start))
    return best


# -- 1. append throughput --------------------------------------------------------------------


def bench_append(root: Path, p: dict, res: Results) -> None:
    print("\n== 1. append throughput: append_as_leader vs os.write of the same bytes", flush=True)
    for label, size, target in (
        ("1 MiB", MiB, TARGET_APPEND_1M),
        ("16 KiB", 16 * 1024, TARGET_APPEND_16K),
    ):
        batch = make_batch(size)
        # The 1 MiB batch also gets the "overlap" side: crc32c on a second thread during the
        # os.write, the only way past the in-line CRC's ceiling (see CrcThread).
        with_overlap = size >= MiB
        sec = {"kcore": 0.0, "base": 0.0, "floor": 0.0}
        if with_overlap:
            sec["overlap"] = 0.0
        cpu = dict.fromkeys(sec, 0.0)
        total = 0
        ratios: dict[str, list[float]] = {name: [] for name in sec if name != "base"}
        added: dict[str, list[float]] = {name: [] for name in ratios}
        for r in range(p["append_rounds"]):
            d = Path(tempfile.mkdtemp(dir=root, prefix="append-"))
            plog = create_log(d / "append-0", config(), now_ms=NOW)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            fd = os.open(d / "baseline.bin", flags, 0o644)
            floor_fd = os.open(d / "floor.bin", flags, 0o644)
            overlap_fd = os.open(d / "overlap.bin", flags, 0o644) if with_overlap else None
            try:
                got = append_window(plog, fd, batch, p["append_bytes"], floor_fd, overlap_fd)
            finally:
                plog.close()
                os.close(fd)
                os.close(floor_fd)
                if overlap_fd is not None:
                    os.close(overlap_fd)
                shutil.rmtree(d)
            n = got["bytes"]
            total += n
            for name in sec:
                sec[name] += got["seconds"][name]
                cpu[name] += got["cpu"][name]
            for name in ratios:
                ratios[name] += got["ratios"][name]
                added[name] += got["added_us"][name]
            s = got["seconds"]
            print(
                f"  round {r + 1}: kcore {mbps(n, s['kcore']):6,.0f} MB/s, os.write "
                f"{mbps(n, s['base']):6,.0f} MB/s, crc32c+os.write {mbps(n, s['floor']):6,.0f}"
                f" MB/s; median chunk ratio kcore {statistics.median(got['ratios']['kcore']):.2f},"
                f" crc32c+os.write {statistics.median(got['ratios']['floor']):.2f}"
                + (
                    f", crc32c on a thread overlapped with os.write "
                    f"{statistics.median(got['ratios']['overlap']):.2f}"
                    if with_overlap
                    else ""
                ),
                flush=True,
            )
        ratio = statistics.median(ratios["kcore"])
        q = statistics.quantiles(ratios["kcore"], n=4)
        appends = total / len(batch)
        us = {name: sec[name] / appends * 1e6 for name in sec}
        floor_ratio = statistics.median(ratios["floor"])
        line = (
            f"append {label} batches ({len(batch):,} B, {total // MiB:,} MiB per side): kcore "
            f"{mbps(total, sec['kcore']):,.0f} MB/s ({us['kcore']:,.1f} us/append), baseline "
            f"os.write {mbps(total, sec['base']):,.0f} MB/s ({us['base']:,.1f} us); ratio "
            f"kcore/baseline: median of {len(ratios['kcore'])} paired {CHUNK // MiB} MiB chunks "
            f"{ratio:.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}; of the sums "
            f"{sec['base'] / sec['kcore']:.2f}; of CPU time {cpu['base'] / cpu['kcore']:.2f}); "
            f"kcore adds {statistics.median(added['kcore']):,.1f} us per append (median); "
            f"reference crc32c+os.write {mbps(total, sec['floor']):,.0f} MB/s "
            f"({us['floor']:,.1f} us), ratio {floor_ratio:.2f}, adds "
            f"{statistics.median(added['floor']):,.1f} us; target >= {target:.0%}: "
            f"{verdict(ratio >= target)}"
        )
        if with_overlap:
            worker = crc_thread()
            best = max(floor_ratio, statistics.median(ratios["overlap"]))
            line += (
                f". Upper bounds for a validating append on this machine (no bookkeeping at "
                f"all): crc32c + os.write = {floor_ratio:.2f} of os.write; crc32c on a second "
                f"thread overlapped with os.write = {statistics.median(ratios['overlap']):.2f} "
                f"(adds {statistics.median(added['overlap']):,.1f} us per append: the hand-off "
                f"that wakes the parked thread takes {statistics.median(worker.start_us):,.1f} "
                f"us of the caller's time, median; waiting for its result after the write "
                f"{statistics.median(worker.wait_us):,.1f} us)"
            )
            if best < target:
                line += (
                    f"; no validating append can reach {target:.0%} here: the target is not "
                    "reachable on this machine"
                )
        res.add(line)


# -- 2. the 1,000-segment log: crash and clean reopen, lookups, sequential reads -------------


def build_in_child(directory: Path, cfg: LogConfig, batch: bytes, nbytes: int) -> dict:
    """Build the log in a forked child that flushes at ~99 % and dies without closing."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: build, flush at 99 %, write the rest, crash
        try:
            os.close(r)
            plog = create_log(directory, cfg, now_ms=NOW)
            count = nbytes // len(batch)
            flush_at = int(count * 0.99)
            start = time.perf_counter()
            for i in range(count):
                if i == flush_at:
                    plog.flush()  # fsync; the recovery point becomes the LEO here
                plog.append_as_leader(batch, 0, now_ms=NOW)
            elapsed = time.perf_counter() - start
            msg = (
                f"{plog.recovery_point} {plog.log_end_offset} {len(plog.segments)} "
                f"{plog.size_in_bytes()} {elapsed}"
            )
            os.write(w, msg.encode())
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)  # no close(): indexes stay preallocated, no shutdown snapshot
    os.close(w)
    with os.fdopen(r) as f:
        fields = f.read().split()
    os.waitpid(pid, 0)
    rp, leo, nseg, size, elapsed = fields
    return {
        "recovery_point": int(rp),
        "leo": int(leo),
        "segments": int(nseg),
        "bytes": int(size),
        "build_s": float(elapsed),
    }


class ScanCounter:
    """Counts the bytes the loader reads batch by batch (recover() and producer replay)."""

    def __init__(self) -> None:
        self.recovered_bytes = 0
        self.recovered_segments = 0
        self.scanned_bytes = 0

    def __enter__(self) -> ScanCounter:
        self._recover = LogSegment.recover
        self._full = FileRecords.full_batches_from
        counter = self
        orig_recover, orig_full = self._recover, self._full

        def recover(seg, *a, **kw):
            counter.recovered_bytes += seg.size
            counter.recovered_segments += 1
            return orig_recover(seg, *a, **kw)

        def full_batches_from(fr, position=0):
            for pos, batch in orig_full(fr, position):
                counter.scanned_bytes += batch.size_in_bytes
                yield pos, batch

        LogSegment.recover = recover
        FileRecords.full_batches_from = full_batches_from
        return self

    def __exit__(self, *exc: object) -> None:
        LogSegment.recover = self._recover
        FileRecords.full_batches_from = self._full


def bench_segmented(root: Path, p: dict, rng: random.Random, res: Results) -> None:
    nbytes = p["seg_log_bytes"]
    batch = make_batch(16 * 1024)
    seg_bytes = nbytes // p["seg_count"]
    seg_bytes -= seg_bytes % len(batch)  # whole batches per segment: exactly seg_count segments
    cfg = config(internal_segment_bytes=seg_bytes)
    records_per_batch = RecordBatch(batch).record_count
    d = Path(tempfile.mkdtemp(dir=root, prefix="segmented-")) / "seg-0"
    print(
        f"\n== 2. {nbytes / MiB:,.0f} MiB log, internal.segment.bytes {seg_bytes:,} "
        f"({len(batch):,} B batches of {records_per_batch} records)",
        flush=True,
    )
    built = build_in_child(d, cfg, batch, nbytes)
    print(
        f"  built in a child in {built['build_s']:.1f} s ({mbps(built['bytes'], built['build_s']):,.0f}"
        f" MB/s incl. one fsync of 99 %): {built['segments']:,} segments, {built['bytes']:,} B, "
        f"LEO {built['leo']:,}, recovery point {built['recovery_point']:,}; child killed",
        flush=True,
    )

    # -- after a crash
    with ScanCounter() as sc:
        start = time.perf_counter()
        plog = load_log(
            d, cfg, recovery_point=built["recovery_point"], had_clean_shutdown=False, now_ms=NOW
        )
        crash_s = time.perf_counter() - start
    assert plog.log_end_offset == built["leo"], (plog.log_end_offset, built["leo"])
    rp_seg = plog._segment_index(built["recovery_point"])
    after_rp = sum(s.size for s in plog.segments[rp_seg:])
    res.add(
        f"reopen after a crash ({len(plog.segments):,} segments, {plog.size_in_bytes() / MiB:,.0f} "
        f"MiB, recovery point at {built['recovery_point'] / built['leo']:.1%} of the offsets): "
        f"{crash_s:.3f} s; recover() rescanned {sc.recovered_segments} segments = "
        f"{sc.recovered_bytes:,} B (the segments from the one holding the recovery point: "
        f"{after_rp:,} B); batches read in all (recovery + producer-state replay): "
        f"{sc.scanned_bytes:,} B = {sc.scanned_bytes / plog.size_in_bytes():.2%} of the log; "
        f"only what follows the recovery point scanned: "
        f"{verdict(sc.recovered_bytes <= after_rp and sc.scanned_bytes <= after_rp)}"
    )
    plog.close()

    # -- after a clean shutdown
    times = []
    for _ in range(3):
        with ScanCounter() as sc:
            start = time.perf_counter()
            plog = load_log(
                d, cfg, recovery_point=built["leo"], had_clean_shutdown=True, now_ms=NOW
            )
            times.append(time.perf_counter() - start)
        assert plog.log_end_offset == built["leo"]
        if len(times) < 3:
            plog.close()
    res.add(
        f"reopen after a clean shutdown ({len(plog.segments):,} segments): first "
        f"{times[0]:.3f} s, median of 3 {statistics.median(times):.3f} s; bytes scanned "
        f"{sc.scanned_bytes:,}; target < {TARGET_CLEAN_REOPEN_S} s: "
        f"{verdict(max(times) < TARGET_CLEAN_REOPEN_S)}"
    )

    # -- random lookups (plog is the freshly reopened log: key caches not built yet)
    offsets = random_offsets(plog, p["lookups"], rng)
    first, _ = lookup_rate(plog, offsets[:20000], repeats=1)  # builds the key caches
    check_lookups(plog, offsets[:2000])
    rate, rate_cpu = lookup_rate(plog, offsets)
    tail, tail_cpu = lookup_rate(plog, tail_offsets(plog, p["lookups"], rng))
    floor = pread_floor(plog, min(p["lookups"], 100_000), rng)
    res.add(
        f"random lookups, read(offset, 1, LOG_END) on the {plog.size_in_bytes() / MiB:,.0f} MiB "
        f"{len(plog.segments):,}-segment log: {rate:,.0f}/s ({1e6 / rate:.2f} us each; by CPU "
        f"time {rate_cpu:,.0f}/s; first {min(20000, len(offsets)):,} after the reopen, which "
        f"build the index key caches, {first:,.0f}/s); in the last 1 % of offsets (the active "
        f"segment) {tail:,.0f}/s (CPU time {tail_cpu:,.0f}/s); reference: bare os.pread(61 B) "
        f"at random positions {floor:,.0f}/s ({1e6 / floor:.2f} us); target >= "
        f"{TARGET_LOOKUPS:,}/s: {verdict(rate >= TARGET_LOOKUPS)}"
    )

    # -- sequential read as file slices
    read = plog.read
    slices = []
    start = time.perf_counter()
    offset = plog.log_start_offset
    leo = plog.log_end_offset
    while offset < leo:
        s = read(offset, MiB, LOG_END).records[0]
        slices.append(s)
        offset += s.length // len(batch) * records_per_batch  # uniform batches
    find_s = time.perf_counter() - start
    assert offset == leo
    total = sum(s.length for s in slices)
    assert total == plog.size_in_bytes()

    def by_pread() -> None:
        for s in slices:
            got = os.pread(s.fileno(), s.length, s.position)
            assert len(got) == s.length

    null = os.open(os.devnull, os.O_WRONLY)

    def by_sendfile() -> None:
        for s in slices:
            fd, pos, left = s.fileno(), s.position, s.length
            while left:
                n = os.sendfile(null, fd, pos, left)
                pos += n
                left -= n

    def baseline() -> None:
        for seg in plog.segments:
            fd, pos, end = seg.log.fd, 0, seg.size
            while pos < end:
                pos += len(os.pread(fd, min(MiB, end - pos), pos))

    def best_of(fn, repeats: int = 3) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        return best

    base_s = best_of(baseline)
    pread_s = best_of(by_pread)
    send_s = best_of(by_sendfile)
    os.close(null)
    res.add(
        f"sequential read as slices (max_bytes 1 MiB, {len(slices):,} reads over "
        f"{total / MiB:,.0f} MiB): finding the slices {len(slices) / find_s:,.0f} reads/s "
        f"({mbps(total, find_s):,.0f} MB/s of slices, {find_s * 1e3:.0f} ms); reading them: "
        f"os.pread {mbps(total, pread_s):,.0f} MB/s, os.sendfile to /dev/null "
        f"{mbps(total, send_s):,.0f} MB/s; slices found + pread "
        f"{mbps(total, find_s + pread_s):,.0f} MB/s; baseline os.pread of the segment files in "
        f"1 MiB chunks {mbps(total, base_s):,.0f} MB/s (ratio found+pread / baseline "
        f"{base_s / (find_s + pread_s):.2f})"
    )
    plog.close()
    shutil.rmtree(d.parent)


# -- 3. growth -------------------------------------------------------------------------------


def bench_growth(root: Path, p: dict, rng: random.Random, res: Results) -> None:
    print("\n== 3. growth: append and lookup cost as the log grows", flush=True)
    small = make_batch(16 * 1024)
    big = make_batch(MiB)
    d = Path(tempfile.mkdtemp(dir=root, prefix="growth-"))
    plog = create_log(d / "grow-0", config(), now_ms=NOW)
    rows = []
    try:
        for target in p["growth"]:
            start = time.perf_counter()
            filled = 0
            while plog.size_in_bytes() < target:
                plog.append_as_leader(small, 0, now_ms=NOW)
                filled += len(small)
            fill_s = time.perf_counter() - start
            for seg in plog.segments:  # write the fill back now, not during the window
                os.fsync(seg.log.fd)
            row = {"size": plog.size_in_bytes(), "fill": mbps(filled, fill_s)}
            for label, batch in (("16k", small), ("1m", big)):
                fd = os.open(d / "baseline.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    got = append_window(plog, fd, batch, p["window_bytes"])
                finally:
                    os.close(fd)
                    os.unlink(d / "baseline.bin")
                n, s = got["bytes"], got["seconds"]
                row[label] = (mbps(n, s["kcore"]), mbps(n, s["base"]))
                row[label + "_ratio"] = statistics.median(got["ratios"]["kcore"])
                row[label + "_added"] = statistics.median(got["added_us"]["kcore"])
            offsets = random_offsets(plog, p["lookups"], rng)
            check_lookups(plog, offsets[:1000])
            row["lookups"], row["lookups_cpu"] = lookup_rate(plog, offsets)
            row["tail"], row["tail_cpu"] = lookup_rate(plog, tail_offsets(plog, p["lookups"], rng))
            # The same-size reference: a bare pread of 61 B at random positions of this log (the
            # page cache's own cost grows with the log too).
            row["floor"] = pread_floor(plog, min(p["lookups"], 100_000), rng)
            row["segments"] = len(plog.segments)
            rows.append(row)
            print(
                f"  {row['size'] / MiB:7,.0f} MiB ({row['segments']} segments): "
                f"append 16 KiB {row['16k'][0]:6,.0f} MB/s (os.write {row['16k'][1]:6,.0f}), "
                f"1 MiB {row['1m'][0]:6,.0f} MB/s (os.write {row['1m'][1]:6,.0f}); "
                f"lookups {row['lookups']:9,.0f}/s (tail {row['tail']:,.0f}/s); "
                f"fill {row['fill']:,.0f} MB/s",
                flush=True,
            )
    finally:
        plog.close()
        shutil.rmtree(d)

    def grew(label: str) -> float:
        return max(rows[-1][label + "_added"], 0.0) / max(rows[0][label + "_added"], 1e-3)

    for label in ("16k", "1m"):
        res.add(
            f"growth, append {'16 KiB' if label == '16k' else '1 MiB'} (kcore MB/s; os.write "
            "MB/s in the same window; median chunk ratio; us kcore adds per append): "
            + ", ".join(
                f"{r['size'] / MiB:,.0f} MiB {r[label][0]:,.0f}; {r[label][1]:,.0f}; "
                f"{r[label + '_ratio']:.2f}; {r[label + '_added']:,.1f} us"
                for r in rows
            )
            + f"; largest/smallest: kcore rate {rows[-1][label][0] / rows[0][label][0]:.2f}, "
            f"ratio {rows[-1][label + '_ratio'] / rows[0][label + '_ratio']:.2f}, time added "
            f"per append {grew(label):.2f}; flat (added time within {FLAT_ADDED:.1f}x): "
            f"{verdict(grew(label) <= FLAT_ADDED)}"
        )
    res.add(
        "growth, lookups/s (random over the whole log | in the last 1 % of offsets): "
        + ", ".join(
            f"{r['size'] / MiB:,.0f} MiB ({r['segments']} seg) {r['lookups']:,.0f} | "
            f"{r['tail']:,.0f} (CPU time {r['lookups_cpu']:,.0f} | {r['tail_cpu']:,.0f})"
            for r in rows
        )
        + f"; largest/smallest: random {rows[-1]['lookups'] / rows[0]['lookups']:.2f}, tail "
        f"{rows[-1]['tail'] / rows[0]['tail']:.2f}; flat (largest >= {FLAT_LOOKUPS:.1f}x the "
        f"smallest): {verdict(rows[-1]['lookups'] >= FLAT_LOOKUPS * rows[0]['lookups'])}"
    )

    def lookup_added_us(r: dict) -> float:
        return 1e6 / r["lookups"] - 1e6 / r["floor"]

    # The absolute rate above also follows the page cache: a bare random pread slows down as
    # the log grows (0.6x from 100 MiB to 4 GiB here), so this criterion looks at the time
    # kcore adds to it, like the append one.
    lookup_grew = lookup_added_us(rows[-1]) / max(lookup_added_us(rows[0]), 1e-3)

    res.add(
        "growth, random lookups against the same-size reference (bare os.pread of 61 B at "
        "random positions of the log; us per lookup kcore | pread | kcore adds): "
        + ", ".join(
            f"{r['size'] / MiB:,.0f} MiB {1e6 / r['lookups']:.2f} | {1e6 / r['floor']:.2f} | "
            f"{lookup_added_us(r):.2f}"
            for r in rows
        )
        + f"; pread rate largest/smallest {rows[-1]['floor'] / rows[0]['floor']:.2f}; time "
        f"kcore adds per lookup largest/smallest {lookup_grew:.2f}; flat by the time kcore "
        f"adds (within {FLAT_ADDED:.1f}x, as for appends): {verdict(lookup_grew <= FLAT_ADDED)}"
    )


# -- main ------------------------------------------------------------------------------------


def scale_to_disk(p: dict, root: Path) -> dict:
    """Scale the sizes down if the data would not fit in the free space (with 50 % headroom)."""
    need = (
        2 * p["append_bytes"]  # one round of one batch size: kcore + baseline
        + p["seg_log_bytes"]
        + max(p["growth"])
        + 4 * p["window_bytes"]
    )
    free = shutil.disk_usage(root).free
    print(f"free space under {root}: {free / GiB:,.1f} GiB; this run needs ~{need / GiB:,.1f} GiB")
    if need * 1.5 <= free:
        return p
    factor = free / (need * 1.5)
    print(f"NOTE: not enough free space; every size is scaled by {factor:.2f}")
    q = dict(p)
    for key in ("append_bytes", "seg_log_bytes", "window_bytes"):
        q[key] = max(MiB, int(p[key] * factor))
    q["growth"] = [max(MiB, int(x * factor)) for x in p["growth"]]
    q["seg_count"] = max(8, int(p["seg_count"] * factor))
    return q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller logs (about a minute)")
    parser.add_argument("--dir", default=None, help="where to write (default: the system temp)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--only", choices=("append", "segmented", "growth"), action="append", default=None
    )
    args = parser.parse_args()
    # The loader's warnings (an unclean reopen finds the crashed segment's index zero-filled).
    logging.basicConfig(level=logging.WARNING, format="  log %(levelname)s: %(message)s")

    m = machine()
    print(
        f"machine: {m['cpu']}, nproc {m['nproc']}, Python {m['python']}, Linux {m['kernel']}, "
        f"{m['date']}, load average at start {m['load']}"
    )
    mode = "quick" if args.quick else "full"
    print(f"mode: {mode}; command: .venv/bin/python bench/log_bench.py{' --quick' * args.quick}")
    rng = random.Random(args.seed)
    res = Results()
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="kcore-log-bench-", dir=args.dir))
    try:
        p = scale_to_disk(QUICK if args.quick else FULL, root)
        only = set(args.only or ("append", "segmented", "growth"))
        if "append" in only:
            bench_append(root, p, res)
        if "segmented" in only:
            bench_segmented(root, p, rng, res)
        if "growth" in only:
            bench_growth(root, p, rng, res)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n== summary ({mode}, {time.perf_counter() - started:.0f} s)")
    for line in res.lines:
        print("- " + line)


if __name__ == "__main__":
    main()
