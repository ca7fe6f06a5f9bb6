"""``kcore dump-log`` over a 1 GiB segment, as a process, output to /dev/null.

Usage: ``.venv/bin/python bench/dump_log_bench.py [--mib 1024] [--value-bytes 1024]``

Writes one segment of ``--mib`` MiB in a temporary directory (uncompressed batches of about
16 KiB, Java's default ``batch.size``, of records with a 16-byte key and a ``--value-bytes``
value, an idempotent producer's sequences), then measures in the same run:

* the baseline: a plain read of the file in 1 MiB chunks (what the disk and page cache give);
* ``kcore dump-log --files F`` (batch lines only: bounded by the read, nothing is decoded);
* ``kcore dump-log --deep-iteration --print-data-log --files F`` (every record decoded and
  printed as Kafka prints it) — the target is >= 100 MB/s of segment;

each as MB/s of segment (startup included: it is what an operator waits for), as a ratio to
the baseline, and as MB per CPU-second of the process (what a shared machine's load does not
change much). The file is read once before timing, so all runs read from the page cache.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import print_header  # noqa: E402

from kcore.record.records import RecordBatchBuilder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH_BYTES = 16 * 1024


def write_segment(path: Path, mib: int, value_bytes: int) -> tuple[int, int]:
    """A segment of about ``mib`` MiB, consecutive offsets and sequences as one idempotent
    producer writes them; returns (bytes, records)."""
    value = (b"0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
    per_batch = max(1, BATCH_BYTES // (value_bytes + 40))
    target = mib << 20
    written = offset = 0
    with open(path, "wb") as f:
        while written < target:
            builder = RecordBatchBuilder(
                offset,
                producer_id=4242,
                producer_epoch=0,
                base_sequence=offset % (1 << 31),
                partition_leader_epoch=0,
            )
            for i in range(per_batch):
                builder.append(1_700_000_000_000 + offset + i, b"key-%012d" % (offset + i), value)
            batch = builder.build()
            f.write(batch)
            written += len(batch)
            offset += per_batch
    return written, offset


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(argv, stdout=devnull, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def plain_read(path: Path) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="segment size (MiB)")
    parser.add_argument("--value-bytes", type=int, default=1024, help="record value size")
    parser.add_argument("--runs", type=int, default=2, help="runs of each; the best is shown")
    args = parser.parse_args()
    print_header("kcore dump-log over one segment")
    with tempfile.TemporaryDirectory(prefix="dump-log-bench-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        size, records = write_segment(path, args.mib, args.value_bytes)
        print(f"# segment: {size / 1e6:.0f} MB, {records} records of {args.value_bytes} B values")
        plain_read(path)  # into the page cache
        baseline = min(plain_read(path) for _ in range(args.runs))
        kcore = [sys.executable, "-m", "kcore", "dump-log", "--files", str(path)]
        deep = [*kcore, "--deep-iteration", "--print-data-log"]
        rows = [
            ("plain read (baseline)", baseline),
            ("dump-log (batches)", min(timed(kcore) for _ in range(args.runs))),
            (
                "dump-log --deep-iteration --print-data-log",
                min(timed(deep) for _ in range(args.runs)),
            ),
        ]
        print(f"{'run':<44} {'wall s':>7} {'MB/s':>6} {'vs read':>8} {'CPU s':>6} {'MB/CPU-s':>9}")
        for name, (wall, cpu) in rows:
            print(
                f"{name:<44} {wall:7.2f} {size / wall / 1e6:6.0f} {baseline[0] / wall:8.3f} "
                f"{cpu:6.2f} {size / max(cpu, 1e-9) / 1e6:9.0f}"
            )
        rate = size / rows[-1][1][0] / 1e6
        verdict = "met" if rate >= 100 else "NOT met"
        print(f"# target >= 100 MB/s (wall) for the deep run: {verdict} ({rate:.0f})")
        print(f"# load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
