"""Offset index lookups per second on a full 10 MiB index (1,310,720 entries).

Usage: ``.venv/bin/python bench/index_bench.py [--lookups N]``

Measures, in one run and on the same offsets:

* ``OffsetIndex.lookup`` for random targets over the whole index and for targets in the last
  1,024 entries (where consumers and followers at the log end look);
* the baseline: ``bisect`` on a plain Python list of the same offsets, returning the same
  (offset, position) pair;
* the lookup without Kafka's warm-section shortcut, and the naive ``np.searchsorted`` on the
  big-endian mapping (why the index keeps a native-endian copy of its keys);
* opening the closed (trimmed) index, which must not scan it, and the first lookup, which builds
  the key cache.

Target: >= 200,000 random lookups/s. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import bisect
import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kcore.log.index import DEFAULT_MAX_INDEX_SIZE
from kcore.log.offset_index import OffsetIndex

BASE_OFFSET = 1_000_000
OFFSET_STEP = 3  # sparse: one entry every few offsets, as with index.interval.bytes
POSITION_STEP = 1024  # 1.3M entries must stay within a 2 GiB segment


class _NoWarmOffsetIndex(OffsetIndex):
    """The same index with the warm-section shortcut disabled (for comparison only)."""

    _WARM_ENTRIES = 1 << 40


def _rates(fns: dict[str, Callable[[int], object]], targets: list[int], repeats: int = 5):
    """Best-of-``repeats`` calls per second of each function over ``targets``.

    The functions take turns within each repeat so that a noisy neighbour on the machine slows
    them all alike instead of whichever happened to run at the wrong moment.
    """
    best = dict.fromkeys(fns, 0.0)
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for target in targets:
                fn(target)
            best[name] = max(best[name], len(targets) / (time.perf_counter() - start))
    return best


def _naive_rate(index: OffsetIndex, targets: list[int]) -> float:
    """Lookups/s of ``np.searchsorted`` on the big-endian view (the view dies on return, so the
    index can still be closed)."""
    view = index._entries_view()["offset"]
    base = index.base_offset
    return _rates({"naive": lambda t: view.searchsorted(t - base, "right")}, targets, 1)["naive"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=300_000)
    args = parser.parse_args()

    print(f"machine: {platform.machine()} {platform.processor() or ''} {platform.system()}")
    print(f"python {platform.python_version()}, numpy {np.__version__}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000001000000.index"
        index = OffsetIndex(path, BASE_OFFSET)
        n = index.max_entries
        start = time.perf_counter()
        for i in range(n):
            index.append(BASE_OFFSET + i * OFFSET_STEP, i * POSITION_STEP)
        append_s = time.perf_counter() - start
        assert index.is_full
        index.close()
        print(f"entries: {n:,} ({DEFAULT_MAX_INDEX_SIZE // 2**20} MiB index)")
        print(f"append:                          {n / append_s:12,.0f} entries/s")

        start = time.perf_counter()
        index = OffsetIndex(path, BASE_OFFSET, writable=False)
        open_s = time.perf_counter() - start
        start = time.perf_counter()
        index.lookup(BASE_OFFSET)
        first_s = time.perf_counter() - start
        print(f"open after clean close:          {open_s * 1e6:12,.0f} us (no scan)")
        print(f"first lookup (builds key cache): {first_s * 1e3:12,.2f} ms")

        rng = random.Random(42)
        last = index.last_offset
        random_targets = [rng.randrange(BASE_OFFSET, last + 10) for _ in range(args.lookups)]
        tail_from = index.entry(n - 1024).offset
        tail_targets = [rng.randrange(tail_from, last + 10) for _ in range(args.lookups)]

        offsets = [BASE_OFFSET + i * OFFSET_STEP for i in range(n)]
        positions = [i * POSITION_STEP for i in range(n)]

        def baseline(target: int) -> tuple[int, int]:
            slot = bisect.bisect_right(offsets, target) - 1
            if slot < 0:
                return (BASE_OFFSET, 0)
            return (offsets[slot], positions[slot])

        for target in random_targets[:1000]:  # same answers, or the comparison means nothing
            assert tuple(index.lookup(target)) == baseline(target)

        no_warm = _NoWarmOffsetIndex(path, BASE_OFFSET, writable=False)
        rows = [
            ("random", random_targets),
            ("tail (last 1,024 entries)", tail_targets),
        ]
        for label, targets in rows:
            rates = _rates(
                {"ours": index.lookup, "no_warm": no_warm.lookup, "base": baseline}, targets
            )
            print(f"lookups, {label}:")
            print(f"  OffsetIndex.lookup:            {rates['ours']:12,.0f} /s")
            print(f"  without warm section:          {rates['no_warm']:12,.0f} /s")
            print(f"  baseline bisect on list:       {rates['base']:12,.0f} /s")
            print(f"  ratio OffsetIndex / baseline:  {rates['ours'] / rates['base']:12.2f}")
        no_warm.close()

        # np.searchsorted straight on the big-endian mapping byte-swaps the whole column on
        # every call: a few hundred calls are enough to show it.
        print(
            f"naive np.searchsorted on the big-endian mapping: {_naive_rate(index, random_targets[:200]):,.0f} /s"
        )
        index.close()


if __name__ == "__main__":
    main()
