"""Benchmark of kcore.record's hot path, each figure beside a baseline measured in the same run.

    .venv/bin/python bench/record_bench.py [--seconds 0.5]

What is measured (operations per second, and the ratio kcore / baseline in time per operation;
1.00x means kcore adds nothing over the bare primitive):

* validate (CRC-32C) of a 1 MiB and a 16 KiB batch        baseline: crc32c() over the same bytes
* header parsing: RecordBatch(view).header()              baseline: one struct.unpack_from
* header parsing: iter_batches over 64 x 16 KiB batches   baseline: a bare length-walking loop
* producer-id patch + CRC recompute (1 MiB and 16 KiB)    baseline: crc32c() over the same bytes

Not part of the test suite. Results, with the machine, go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import crc32c  # noqa: E402

from kcore.record import RecordBatch, RecordBatchBuilder, iter_batches  # noqa: E402
from kcore.record.batch import BATCH_HEADER  # noqa: E402


def make_batch(total_size: int, value_size: int = 1000) -> bytearray:
    """An uncompressed batch of about ``total_size`` bytes of 1000-byte random values."""
    b = RecordBatchBuilder(0, producer_id=1234, producer_epoch=0, base_sequence=0)
    rnd = os.urandom(value_size)
    i = 0
    while b.uncompressed_size + value_size + 32 <= total_size:
        b.append(1_700_000_000_000 + i, b"key-%08d" % i, rnd, [("trace", b"%d" % i)])
        i += 1
    return b.build()


def rate(fn, seconds: float) -> float:
    """Calls per second of ``fn``, timed in batches until ``seconds`` have passed."""
    n = 1
    while True:  # find a batch count that takes >= 10 ms, so timer overhead does not count
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= 0.01:
            break
        n *= 2
    calls, elapsed = 0, 0.0
    while elapsed < seconds:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed += time.perf_counter() - t0
        calls += n
    return calls / elapsed


def report(name: str, size: int | None, ours: float, base: float, base_name: str) -> None:
    mbps = f"{ours * size / 1e6:9.0f} MB/s" if size else " " * 14
    print(
        f"{name:44s} {ours:12,.0f}/s {mbps}   {base_name:26s} {base:12,.0f}/s   "
        f"ratio {base / ours:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    s = parser.parse_args().seconds

    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor()})")
    print(f"crc32c {crc32c.__version__}, hardware-accelerated: {crc32c.hardware_based}")
    print(f"{'operation':44s} {'kcore':>14s} {'':14s}   {'baseline':26s} {'':>14s}   ratio")

    for label, size in (("1 MiB", 1 << 20), ("16 KiB", 16 << 10)):
        data = make_batch(size)
        view = memoryview(data)
        covered = view[21:]
        batch = RecordBatch(view)
        batch.validate()

        crc_rate = rate(lambda covered=covered: crc32c.crc32c(covered), s)
        ours = rate(lambda view=view: RecordBatch(view).validate(), s)
        report(
            f"validate {label} batch (view + CRC)", len(data), ours, crc_rate, "crc32c(same bytes)"
        )

        pid_rate = rate(lambda batch=batch: batch.set_producer_id(-1236), s)
        report(
            f"set_producer_id {label} batch (+ CRC)",
            len(data),
            pid_rate,
            crc_rate,
            "crc32c(same bytes)",
        )

    data = make_batch(16 << 10)
    view = memoryview(data)
    base = rate(lambda: BATCH_HEADER.unpack_from(view, 0), s)
    ours = rate(lambda: RecordBatch(view).header(), s)
    report("header: RecordBatch(view).header()", None, ours, base, "struct.unpack_from")
    ours = rate(lambda: RecordBatch(view).producer_id, s)
    report("header: RecordBatch(view).producer_id", None, ours, base, "struct.unpack_from")

    many = memoryview(bytes(data) * 64)
    length = struct.Struct(">i")

    def bare_walk() -> int:
        pos, n, end = 0, 0, len(many)
        while pos + 12 <= end:
            pos += length.unpack_from(many, pos + 8)[0] + 12
            n += 1
        return n

    assert bare_walk() == 64 and sum(1 for _ in iter_batches(many)) == 64
    base = rate(bare_walk, s) * 64
    ours = rate(lambda: sum(1 for _ in iter_batches(many)), s) * 64
    report("iter_batches, per 16 KiB batch", None, ours, base, "bare length walk")


if __name__ == "__main__":
    main()
