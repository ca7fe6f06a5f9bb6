"""The active controller: the pure QuorumController run on top of the metadata quorum.

Theory of operation
-------------------
Every metadata change goes through :meth:`ControllerService.submit`: under one lock (operations
are serialised, as Kafka's controller event queue does), the operation runs against the
controller's state, its records are proposed to the Raft quorum as one batch and replayed into
the controller at once (so the next operation sees them), and the lock is released. The caller
then waits until the batch is committed — only then is the response true for everyone — and
gets the operation's response. A node that is not the active controller answers NOT_CONTROLLER.

Committed batches reach the controller through the quorum's commit listener (it skips what it
already replayed); leadership changes call ``activate`` (appending the bootstrap records into an
empty log) or ``renounce``. A background task calls ``poll`` at the controller's deadlines, which
fences brokers whose heartbeats stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from kcore.metadata.controller import QuorumController
from kcore.metadata.records import decode_record, encode_record
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.raft.errors import NotLeaderError

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 30.0


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


class ControllerService:
    def __init__(
        self,
        node_id: int,
        controller: QuorumController,
        quorum: Any,
        *,
        image: Callable[[], Any] | None = None,
        bootstrap: list[Any] | None = None,
    ) -> None:
        """``image()`` returns the latest committed metadata image (after a snapshot load the
        controller restarts from it; it must be registered as a snapshot listener first).
        ``bootstrap``: the records an empty log starts with (``bootstrap.checkpoint``), else
        the defaults."""
        self._bootstrap = bootstrap
        self.node_id = node_id
        self.controller = controller
        self.quorum = quorum
        self._image = image
        self._lock = trio.Lock()
        self._active = False
        self._wakeup = trio.Event()
        quorum.on_commit(self._on_commit)
        quorum.on_leader_change(self._on_leader_change)
        if image is not None:
            quorum.on_snapshot_loaded(self._on_snapshot_loaded)

    @property
    def is_active(self) -> bool:
        return self._active

    # -- events from the quorum --------------------------------------------------------------

    def _on_commit(self, entries: list[tuple[int, bytes]]) -> None:
        # Replayed a run of consecutive offsets at a time: one image per run, not per record
        # (each image copies the topic maps, so per record a restart replaying a log of 40,000
        # records over 1,000 topics was quadratic). Control records leave gaps between runs.
        run: list = []
        first = last = None
        for offset, data in entries:
            if run and offset != last + 1:
                self.controller.replay_batch(run, first)
                run = []
            if not run:
                first = offset
            run.append(decode_record(data)[0])
            last = offset
        if run:
            self.controller.replay_batch(run, first)
        if last is not None:
            self.controller.commit(last)
        self._wakeup.set()

    def _on_snapshot_loaded(self, reader) -> None:
        """The log was replaced by a snapshot: restart the controller state from its image."""
        self.controller = QuorumController(self.controller.config, image=self._image())

    def _on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        active = leader_id == self.node_id
        if active == self._active:
            return
        self._active = active
        if active:
            log.info("became the active controller at epoch %d", epoch)
        else:
            log.info("no longer the active controller (leader %s, epoch %d)", leader_id, epoch)
            self.controller.renounce()
        self._wakeup.set()

    # -- operations --------------------------------------------------------------------------

    async def submit(self, operation: Callable[[QuorumController, int], Any]) -> Any:
        """Run ``operation(controller, now_ms)`` and return its response once committed."""
        async with self._lock:
            if not self._active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
            result = operation(self.controller, _now_ms())
            last = await self._append(result.records)
        if last is not None:
            await self._wait_committed(last)
        return result.response

    async def _append(self, records) -> int | None:
        """Propose ``records`` as one batch and replay them; returns the last offset."""
        if not records:
            return None
        try:
            offsets = await self.quorum.propose([encode_record(r) for r in records])
        except NotLeaderError:
            self._active = False
            self.controller.renounce()
            raise KafkaError(
                ErrorCode.NOT_CONTROLLER, "leadership moved during the operation"
            ) from None
        self.controller.replay_batch(records, offsets.start)
        return offsets.stop - 1

    async def _wait_committed(self, offset: int) -> None:
        try:
            await self.quorum.wait_for_commit(offset, COMMIT_TIMEOUT_S)
        except trio.TooSlowError:
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"metadata offset {offset} was not committed in time"
            ) from None

    # -- background work ---------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Activate when elected and fence stale brokers at the controller's deadlines."""
        task_status.started()
        activated = False
        while True:
            if self._active and not activated:
                async with self._lock:
                    result = self.controller.activate(_now_ms(), bootstrap=self._bootstrap)
                    last = await self._append(result.records) if self._active else None
                activated = True
                if last is not None:
                    await self._wait_committed(last)
            elif not self._active:
                activated = False
            deadline = self.controller.next_deadline_ms(_now_ms()) if self._active else None
            if deadline is not None and deadline <= _now_ms():
                async with self._lock:
                    if self._active:
                        result = self.controller.poll(_now_ms())
                        last = await self._append(result.records)
                continue
            self._wakeup = trio.Event()
            timeout = 1.0 if deadline is None else max((deadline - _now_ms()) / 1000, 0.01)
            with trio.move_on_after(timeout):
                await self._wakeup.wait()
