"""Periodic snapshots of the metadata image (Kafka's ``SnapshotGenerator``).

Theory of operation
-------------------
A :class:`MetadataSnapshotter` listens to the metadata quorum's commits (registered *after* the
broker's metadata loader, so the image already holds what it is told about) and counts the bytes
of committed metadata records. Once ``metadata.log.max.record.bytes.between.snapshots`` bytes
were committed since the last snapshot (or since start), its task writes a snapshot of the
current image::

    quorum.create_snapshot(image.offset + 1, [encode_record(r) for r in image_records(image)])

``image.offset`` is the offset of the last record the image includes, so the snapshot's end
offset (the offset after its last record, the driver's contract) is ``image.offset + 1``. The
driver then cuts the log before that offset. A restart loads the latest snapshot and replays the
log after it; followers behind the log start fetch the snapshot.

The snapshot is written from a task, not from inside the commit callback (which runs in the
Raft driver's loop): the callback only counts and wakes the task.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from kcore.metadata.records import encode_record
from kcore.metadata.snapshot import image_records

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS = 20971520


class MetadataSnapshotter:
    """Writes a metadata snapshot every ``max_bytes`` committed record bytes.

    Args:
        quorum: the Raft driver (``on_commit``, ``on_snapshot_loaded``, ``create_snapshot``).
        image: returns the latest committed :class:`~kcore.metadata.image.MetadataImage`.
        max_bytes: ``metadata.log.max.record.bytes.between.snapshots``.
    """

    def __init__(self, quorum: Any, image: Any, max_bytes: int) -> None:
        self.quorum = quorum
        self._image = image
        self.max_bytes = max(1, int(max_bytes))
        self.bytes_since_snapshot = 0
        self.snapshots_taken = 0
        self.last_snapshot_end: int | None = None
        self._wake = trio.Event()

    def install(self) -> None:
        """Register with the quorum (after the metadata loader's listeners)."""
        self.quorum.on_commit(self._on_commit)
        self.quorum.on_snapshot_loaded(self._on_snapshot_loaded)

    def _on_commit(self, entries: list[tuple[int, bytes]]) -> None:
        self.bytes_since_snapshot += sum(len(value) for _, value in entries)
        if self.bytes_since_snapshot >= self.max_bytes:
            self._wake.set()

    def _on_snapshot_loaded(self, reader: Any) -> None:
        self.bytes_since_snapshot = 0
        self.last_snapshot_end = reader.snapshot_id.offset

    def maybe_snapshot(self) -> bool:
        """Write a snapshot now if enough bytes were committed; True if one was written."""
        if self.bytes_since_snapshot < self.max_bytes:
            return False
        image = self._image()
        end_offset = image.offset + 1
        if self.last_snapshot_end is not None and end_offset <= self.last_snapshot_end:
            return False
        records = [encode_record(r) for r in image_records(image)]
        try:
            sid = self.quorum.create_snapshot(end_offset, records)
        except (ValueError, RuntimeError) as e:
            # Not committed yet, or not past the log start: try again after the next commit.
            log.debug("metadata snapshot at %d not possible yet: %s", end_offset, e)
            return False
        self.bytes_since_snapshot = 0
        self.snapshots_taken += 1
        self.last_snapshot_end = end_offset
        log.info(
            "wrote metadata snapshot %s (%d records, end offset %d)",
            sid,
            len(records),
            end_offset,
        )
        return True

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            try:
                self.maybe_snapshot()
            except Exception:
                log.exception("writing a metadata snapshot failed")
            await trio.sleep(0)
