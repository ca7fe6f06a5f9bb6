"""The clock the Trio shells read: wall-clock milliseconds for timestamps and the pure cores.

Deadlines are waited for on Trio's clock (``trio.sleep``, ``move_on_after``); what a shell
reads as "now" for a record timestamp or a core's ``now_ms`` comes from a :class:`Clock`, so a
test can drive both from one source: :class:`TrioWallClock` under ``trio.testing.MockClock``
makes wall time move exactly as far as the Trio clock jumps.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "TrioWallClock"]


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch (record timestamps, the cores' ``now``)."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class TrioWallClock:
    """Wall time that follows Trio's clock from ``start_ms`` (tests with a MockClock)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._offset_ms = start_ms - trio.current_time() * 1000

    def wall_ms(self) -> int:
        return int(self._offset_ms + trio.current_time() * 1000)


SYSTEM_CLOCK = SystemClock()
