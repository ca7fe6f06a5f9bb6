"""Outbound request bookkeeping: one request in flight per destination, timeouts, backoff.

Kafka's ``RequestManager``: the core never has two requests outstanding to the same node, a
request unanswered after ``controller.quorum.request.timeout.ms`` (2000) is forgotten so the
node can be asked again, and after a failure (an error answer, a broken connection) the
destination rests ``controller.quorum.retry.backoff.ms`` (20) before the next attempt.

The tracker is reset on every state transition: answers to requests sent in an earlier state
(or epoch) are then unknown and ignored, so a handler only ever sees answers to what the
current state asked.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Inflight", "RequestTracker"]


@dataclass(slots=True)
class Inflight:
    """A request awaiting its answer."""

    request_id: int
    destination: int
    kind: type
    sent_ms: int
    deadline_ms: int
    context: Any = None


class RequestTracker:
    def __init__(self, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self._timeout = request_timeout_ms
        self._backoff = retry_backoff_ms
        self._by_id: dict[int, Inflight] = {}
        self._by_dest: dict[int, Inflight] = {}
        self._resting_until: dict[int, int] = {}
        self._next_id = 1

    def next_request_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid

    def expire(self, now: int) -> None:
        """Forget requests past their timeout; their destinations are ready again at once."""
        for inflight in [i for i in self._by_id.values() if i.deadline_ms <= now]:
            self._drop(inflight)

    def is_ready(self, destination: int, now: int) -> bool:
        """No request in flight to ``destination`` and it is not resting after a failure."""
        inflight = self._by_dest.get(destination)
        if inflight is not None:
            if inflight.deadline_ms > now:
                return False
            self._drop(inflight)
        return self._resting_until.get(destination, 0) <= now

    def has_inflight(self, destination: int) -> bool:
        return destination in self._by_dest

    def sent(self, destination: int, request_id: int, kind: type, now: int, context: Any) -> None:
        """Record a request just handed to the driver."""
        inflight = Inflight(request_id, destination, kind, now, now + self._timeout, context)
        self._by_id[request_id] = inflight
        self._by_dest[destination] = inflight
        self._resting_until.pop(destination, None)

    def answered(self, request_id: int) -> Inflight | None:
        """The request an answer belongs to (removed), or ``None`` for an unknown id."""
        inflight = self._by_id.get(request_id)
        if inflight is not None:
            self._drop(inflight)
        return inflight

    def backoff(self, destination: int, now: int) -> None:
        """Let ``destination`` rest after a failed or refused request."""
        self._resting_until[destination] = now + self._backoff

    def reset(self) -> None:
        """Forget every request in flight (a state transition); rests are kept."""
        self._by_id.clear()
        self._by_dest.clear()

    def next_wakeup(self, now: int) -> int | None:
        """The earliest future moment a timeout or a rest ends, if any."""
        times = [i.deadline_ms for i in self._by_id.values()]
        times += [t for t in self._resting_until.values() if t > now]
        return min(times, default=None)

    def _drop(self, inflight: Inflight) -> None:
        self._by_id.pop(inflight.request_id, None)
        if self._by_dest.get(inflight.destination) is inflight:
            del self._by_dest[inflight.destination]
