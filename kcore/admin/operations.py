"""Long admin operations that answer 202 and a Location to poll: kept in memory on the node
that runs them, bounded.

A mirror topic operation over HTTP (``POST /v1/mirrors/{mirror}/stop`` ...) runs as a task of
the admin app's nursery, not of the request, so an HTTP client that gives up does not cancel a
failover half-way, and a stop that first waits for the lag to drain (D-31) holds no connection.
The route waits a little for it (most operations are one Kafka request) and answers 200 with
the result, or 202 and ``Location: /v1/mirrors/{mirror}/operations/{id}``.

Bounded: at most :data:`MAX_KEPT` operations are remembered (a finished one is forgotten,
oldest first, to make room), and at most :data:`MAX_RUNNING` run at once; past that a new one
is refused (503) rather than growing memory without end. Time is injected (``now_ms``).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from kcore.admin.kafka import AdminError

MAX_KEPT = 256
MAX_RUNNING = 32

RUNNING, DONE, FAILED = "running", "done", "failed"


@dataclass
class Operation:
    """One operation: ``status`` is running, done (the Kafka request was answered; per-topic
    refusals are in ``topics``) or failed (refused as a whole: ``error``)."""

    id: str
    mirror: str
    action: str
    started_ms: int
    phase: str | None = None
    status: str = RUNNING
    finished_ms: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    error: AdminError | None = None
    finished: trio.Event = field(default_factory=trio.Event, repr=False)

    @property
    def location(self) -> str:
        return f"/v1/mirrors/{self.mirror}/operations/{self.id}"

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "mirror": self.mirror,
            "action": self.action,
            "status": self.status,
            "phase": self.phase,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "topics": self.result.get("topics", []),
            "warning": self.result.get("warning"),
            "error": None if self.error is None else self.error.body(),
        }


class OperationLog:
    """The operations of one admin endpoint, newest last."""

    def __init__(self, now_ms: Callable[[], int], *, kept: int = MAX_KEPT) -> None:
        self.now_ms = now_ms
        self.kept = kept
        self._operations: OrderedDict[str, Operation] = OrderedDict()

    def running(self) -> int:
        return sum(1 for op in self._operations.values() if op.status == RUNNING)

    def begin(self, mirror: str, action: str) -> Operation:
        if self.running() >= MAX_RUNNING:
            raise AdminError(
                503,
                "TOO_MANY_OPERATIONS",
                f"{MAX_RUNNING} mirror operations are running on this node; try again later",
            )
        while len(self._operations) >= self.kept:
            oldest = next((k for k, op in self._operations.items() if op.status != RUNNING), None)
            if oldest is None:
                break
            del self._operations[oldest]
        op = Operation(uuid.uuid4().hex, mirror, action, self.now_ms())
        self._operations[op.id] = op
        return op

    def get(self, mirror: str, op_id: str) -> Operation | None:
        op = self._operations.get(op_id)
        return op if op is not None and op.mirror == mirror else None

    def of_mirror(self, mirror: str) -> list[Operation]:
        return [op for op in self._operations.values() if op.mirror == mirror]

    def finish(self, op: Operation, result: dict[str, Any]) -> None:
        op.status, op.result, op.phase = DONE, result, None
        self._close(op)

    def fail(self, op: Operation, error: AdminError) -> None:
        op.status, op.error, op.phase = FAILED, error, None
        self._close(op)

    def _close(self, op: Operation) -> None:
        op.finished_ms = self.now_ms()
        op.finished.set()
