"""The purgatory: requests that wait for something to happen to a partition.

A long-polling fetch waits until ``min.bytes`` are available or ``max.wait.ms`` passes; an
``acks=all`` produce on a replicated partition waits for the high watermark. Kafka parks such
requests in a *purgatory* keyed by partition and completes them when an append (or a high
watermark move) touches a key they watch.

Here a waiter registers one :class:`trio.Event` under every key it watches; :meth:`notify`
sets the events registered under a key and forgets them. The waiter then re-checks its condition
itself (the event says "something changed", not "you are done"), so a notification can never
complete a request early, and a spurious wake-up costs one re-check.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import trio


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, list[trio.Event]] = {}

    def notify(self, key: Hashable) -> None:
        """Wake everything waiting on ``key`` (call after an append or an HW move)."""
        for event in self._waiters.pop(key, ()):
            event.set()

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Wait until one of ``keys`` is notified or ``timeout_s`` passes.

        Returns True when woken by a notification, False on timeout.
        """
        event = trio.Event()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, []).append(event)
        try:
            with trio.move_on_after(max(timeout_s, 0)):
                await event.wait()
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    if event in waiters:  # notify() may already have taken the list
                        waiters.remove(event)
                    if not waiters:
                        del self._waiters[key]
        return event.is_set()

    @property
    def watched(self) -> int:
        """How many (key, waiter) registrations exist (for metrics and tests)."""
        return sum(len(w) for w in self._waiters.values())
