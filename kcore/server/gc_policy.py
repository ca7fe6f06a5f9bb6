"""The broker's use of Python's cyclic garbage collector: what lives long is frozen.

Why
---
A broker's long-lived objects grow with its partitions: every partition log, its segments and
indexes, producer state, epoch cache, replica and fetch state, and for a mirror the partition's
state machine and driver. Python's collector traverses *all* of them in every full
(generation-2) collection, and it runs one whenever the objects that survived the younger
generations since the last one reach a quarter of the old ones: under steady request traffic
that is every few seconds to minutes, each a single step of the event loop in which no request
is answered. With 10,000 mirror partitions such a pause measured 0.3-0.8 s on a quiet machine
and several seconds on a loaded one (``bench/mirror_sync_bench.py``, docs/performance.md), and
it is what the produce p99 of the broker's clients waited for.

``gc.freeze()`` moves every object alive into a permanent generation the collector never
traverses; later collections only look at what came after. So the broker freezes once it
serves, and again whenever its partition count has moved by a quarter (and by at least
:data:`MIN_PARTITION_CHANGE`) since the last freeze, once the count has stayed put for
:data:`SETTLE_S` (a mirror's start of 10,000 partitions comes as many metadata deltas, and the
freeze should come after the last). Each freeze is ``gc.unfreeze(); gc.collect();
gc.freeze()``: one full collection, chosen by the broker at a topology change rather than by
the allocator in the middle of traffic, so that garbage is not frozen with the live objects
and the cycles of partitions deleted since the last freeze are freed.

What it costs: objects frozen and later dropped are freed by reference counting as before;
only those in reference cycles wait for the next freeze. With freezes at every 25 % change that
is bounded by a fraction of the heap.

:class:`GcFreezePolicy` is the pure decision (partition counts and time in);
:func:`freeze_long_lived` does it.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

__all__ = ["CHECK_INTERVAL_S", "GcFreezePolicy", "freeze_long_lived"]

CHECK_INTERVAL_S = 5.0  # how often the broker asks the policy
SETTLE_S = 10.0  # the partition count unchanged this long before a freeze
GROWTH = 0.25  # a change of a quarter of the count at the last freeze ...
MIN_PARTITION_CHANGE = 500  # ... and of at least this many partitions


@dataclass(slots=True)
class GcFreezePolicy:
    """When to freeze (see the module docstring). ``frozen_at``: the partition count at the
    last freeze (None: not yet, so the first check after start-up freezes)."""

    frozen_at: int | None = None
    _count: int = -1
    _since: float = 0.0

    def due(self, partitions: int, now: float) -> bool:
        """Whether to freeze now, with ``partitions`` partitions at time ``now`` (seconds, any
        monotonic clock); call :meth:`frozen` after freezing."""
        if partitions != self._count:
            self._count, self._since = partitions, now
        if self.frozen_at is None:
            return True
        change = abs(partitions - self.frozen_at)
        if change < MIN_PARTITION_CHANGE or change < GROWTH * self.frozen_at:
            return False
        return now - self._since >= SETTLE_S

    def frozen(self, partitions: int) -> None:
        self.frozen_at = partitions


def freeze_long_lived(partitions: int) -> float:
    """``gc.unfreeze(); gc.collect(); gc.freeze()``; returns the seconds it took (the one full
    collection, logged)."""
    began = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - began
    log.info(
        "garbage collector: %d objects frozen at %d partitions (full collection %.0f ms)",
        gc.get_freeze_count(), partitions, took * 1000,
    )  # fmt: skip
    return took
