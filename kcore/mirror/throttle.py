"""The mirror replication throttle: ``mirror.replication.throttled.rate`` (spec M-116), sans-IO.

One :class:`MirrorThrottle` per broker is shared by the fetchers of every mirror on it: the
broker-level ceiling on bytes copied from source clusters, independent of the intra-cluster
replication throttles. It is a token bucket of one second's worth of bytes: every fetched
response's record bytes are :meth:`~MirrorThrottle.record`-ed (the bucket may go into debt by
one response), and before each Fetch the fetcher waits :meth:`~MirrorThrottle.delay` seconds,
until the debt is paid back at the rate. :meth:`~MirrorThrottle.max_bytes` caps a Fetch's
``max_bytes`` at one second's worth, so a single response overshoots by at most that (or one
batch, which Kafka returns whatever the limit). The rate is read on every call, so a change
through IncrementalAlterConfigs (a dynamic broker config) takes effect at the next fetch; the
default, Long.MAX_VALUE, is no throttle.

The accounting (``recorded_bytes``, ``first_s``, ``last_s``, ``waited_s``) is the throttle's
own, so a test can check ``recorded_bytes <= rate * (last_s - first_s) + burst`` without wall
clock assertions. Pure: time is passed in (seconds, any monotonic clock).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["UNLIMITED", "MirrorThrottle"]

UNLIMITED = 2**63 - 1  # Long.MAX_VALUE, the key's default


class MirrorThrottle:
    """See the module docstring. ``rate()`` returns the ceiling in bytes per second."""

    def __init__(self, rate: Callable[[], int]) -> None:
        self._rate = rate
        self._tokens: float | None = None  # a full bucket until the first response
        self._at = 0.0
        self.recorded_bytes = 0
        self.first_s: float | None = None
        self.last_s: float | None = None
        self.waited_s = 0.0

    def rate(self) -> int | None:
        """The ceiling in bytes per second, None when there is none."""
        rate = self._rate()
        return None if rate >= UNLIMITED else max(rate, 1)

    def _refill(self, now: float, rate: int) -> float:
        tokens = float(rate) if self._tokens is None else self._tokens
        tokens = min(float(rate), tokens + (now - self._at) * rate)
        self._tokens, self._at = tokens, now
        return tokens

    def delay(self, now: float) -> float:
        """Seconds to wait before the next Fetch (0 when not throttled or in credit)."""
        rate = self.rate()
        if rate is None:
            return 0.0
        tokens = self._refill(now, rate)
        wait = 0.0 if tokens >= 0 else -tokens / rate
        self.waited_s += wait
        return wait

    def max_bytes(self, wanted: int) -> int:
        """A Fetch's ``max_bytes`` under the throttle: at most one second's worth."""
        rate = self.rate()
        return wanted if rate is None else max(1, min(wanted, rate))

    def record(self, nbytes: int, now: float) -> None:
        """``nbytes`` of records arrived from a source at ``now``."""
        if self.first_s is None:
            self.first_s = now
        self.last_s = now
        self.recorded_bytes += nbytes
        rate = self.rate()
        if rate is not None:
            self._tokens = self._refill(now, rate) - nbytes
