"""Snapshots on disk: ``<20-digit offset>-<10-digit epoch>.checkpoint`` files, and their content.

Byte layout
-----------
One file per snapshot in the metadata log's folder (``__cluster_metadata-0``), named after the
snapshot id (Kafka's ``Snapshots.filenameFromSnapshotId``)::

    00000000000000012345-0000000007.checkpoint      end offset 12345, epoch 7

The content is Kafka's snapshot format (``RecordsSnapshotWriter``): record batches v2 back to
back, offsets counting from 0 and every batch's partition leader epoch set to the snapshot's
epoch:

* a control batch holding one SNAPSHOT_HEADER (3) control record, value
  ``SnapshotHeaderRecord`` v0 (``Version`` 0, ``LastContainedLogTimestamp``);
* data batches: one record per state-machine entry (null key, the entry's bytes as value);
* a control batch holding one SNAPSHOT_FOOTER (4) control record, value
  ``SnapshotFooterRecord`` v0.

:func:`encode_snapshot` builds that content and :class:`SnapshotReader` reads it back. The store
itself (:class:`FileSnapshotStore`) treats the bytes as opaque, as the Raft core does: a
follower receives them in FetchSnapshot chunks at arbitrary byte positions and writes them as
they come.

Writing and crashes
-------------------
A snapshot is written to ``<name>.checkpoint.part``; :meth:`FileSnapshotWriter.freeze` fsyncs
it, renames it to ``<name>.checkpoint`` and fsyncs the folder. A crash leaves either no
``.checkpoint`` (the ``.part`` is deleted when the store is opened; a follower fetches the
snapshot again) or a complete one, never a torn one. Deletion unlinks the file at once (no
reader can hold it: reads are synchronous ``pread`` calls).

Who may call it: the Raft core through the :class:`~kcore.raft.snapshots.SnapshotStore`
protocol (create, freeze, read chunks, delete older), and the Raft driver, which frames the
state machine's snapshots with :func:`encode_snapshot` and hands :class:`SnapshotReader` objects
to the metadata loader.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from kcore.protocol import messages as m
from kcore.raft.log import OffsetAndEpoch
from kcore.record import (
    NO_TIMESTAMP,
    ControlRecordType,
    CorruptRecordError,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    read_control_record,
)

__all__ = [
    "CHECKPOINT_SUFFIX",
    "CorruptSnapshotError",
    "FileSnapshotStore",
    "FileSnapshotWriter",
    "PART_SUFFIX",
    "SnapshotReader",
    "encode_snapshot",
    "snapshot_file_name",
    "snapshot_id_from_file_name",
]

log = logging.getLogger(__name__)

CHECKPOINT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(\.part)?$")
# Records per data batch of a snapshot (Kafka bounds its batches by bytes, 8 MiB; kcore by
# count, as kcore.raft.records does, to keep each CRC pass short).
SNAPSHOT_BATCH_RECORDS = 512


class CorruptSnapshotError(ValueError):
    """A snapshot's content is not header batch, data batches, footer batch."""


def snapshot_file_name(snapshot_id: OffsetAndEpoch, *, part: bool = False) -> str:
    """``<20-digit offset>-<10-digit epoch>.checkpoint`` (``.checkpoint.part`` if ``part``)."""
    suffix = PART_SUFFIX if part else CHECKPOINT_SUFFIX
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{suffix}"


def snapshot_id_from_file_name(name: str) -> tuple[OffsetAndEpoch, bool] | None:
    """``(snapshot id, is_part)`` for a snapshot file name, ``None`` for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return OffsetAndEpoch(int(match.group(1)), int(match.group(2))), match.group(3) is not None


# -- content ------------------------------------------------------------------------------------


def encode_snapshot(
    snapshot_id: OffsetAndEpoch,
    records: Iterable[bytes],
    *,
    last_contained_log_timestamp: int = NO_TIMESTAMP,
) -> bytes:
    """A snapshot's content in Kafka's format (see the module docstring).

    ``records`` are the state machine's entries (for the metadata log: framed metadata records,
    as :func:`kcore.metadata.records.encode_record` returns them), in replay order.
    """
    epoch = snapshot_id.epoch
    header = m.SnapshotHeaderRecord(
        version=0, last_contained_log_timestamp=last_contained_log_timestamp
    ).encode(0)
    out = bytearray(_control_batch(ControlRecordType.SNAPSHOT_HEADER, header, 0, epoch))
    offset = 1
    builder = None
    for value in records:
        if builder is None:
            builder = RecordBatchBuilder(offset, partition_leader_epoch=epoch)
        builder.append(NO_TIMESTAMP, None, bytes(value), offset=offset)
        offset += 1
        if builder.record_count >= SNAPSHOT_BATCH_RECORDS:
            out += builder.build()
            builder = None
    if builder is not None:
        out += builder.build()
    footer = m.SnapshotFooterRecord(version=0).encode(0)
    out += _control_batch(ControlRecordType.SNAPSHOT_FOOTER, footer, offset, epoch)
    return bytes(out)


def _control_batch(kind: ControlRecordType, value: bytes, offset: int, epoch: int) -> bytearray:
    return build_control_batch(
        kind,
        value,
        producer_id=-1,
        producer_epoch=-1,
        is_transactional=False,
        base_offset=offset,
        partition_leader_epoch=epoch,
        timestamp=NO_TIMESTAMP,
    )


class SnapshotReader:
    """The records of one snapshot, checked for Kafka's framing.

    Attributes: ``snapshot_id``; ``last_contained_log_timestamp`` (from the header). Iterate
    :meth:`records` for the state machine's entries (``bytes``), in order. The metadata loader
    takes them as they are: ``loader.load_snapshot(reader.records(), reader.snapshot_id.offset
    - 1)``.

    Raises:
        CorruptSnapshotError: a batch fails its CRC, the first batch is not a header control
            batch, the last is not a footer, or bytes follow the last whole batch.
    """

    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshot_id = snapshot_id
        self._data = data
        self._values: list[bytes] = []
        header = footer = None
        try:
            batches = iter_batches(memoryview(data))
            for batch in batches:
                batch.validate()
                if footer is not None:
                    raise CorruptSnapshotError(f"snapshot {snapshot_id}: a batch after the footer")
                if batch.is_control:
                    rec = read_control_record(batch)
                    kind = None if rec is None else rec.type
                    if kind is ControlRecordType.SNAPSHOT_HEADER and header is None:
                        if self._values:
                            raise CorruptSnapshotError(
                                f"snapshot {snapshot_id}: the header is not the first batch"
                            )
                        header = m.SnapshotHeaderRecord.decode(bytes(rec.value or b""), 0)
                    elif kind is ControlRecordType.SNAPSHOT_FOOTER and header is not None:
                        footer = m.SnapshotFooterRecord.decode(bytes(rec.value or b""), 0)
                    # Other control types (KRaft version, voters) carry nothing for kcore.
                    continue
                if header is None:
                    raise CorruptSnapshotError(f"snapshot {snapshot_id}: data before the header")
                self._values += [bytes(r.value or b"") for r in batch.records()]
            trailing = batches.trailing_bytes
        except CorruptRecordError as e:
            raise CorruptSnapshotError(f"snapshot {snapshot_id}: {e}") from None
        if header is None or footer is None or trailing:
            raise CorruptSnapshotError(
                f"snapshot {snapshot_id}: "
                + ("no header" if header is None else "no footer" if footer is None else "")
                + (f" {trailing} trailing bytes" if trailing else "")
            )
        self.last_contained_log_timestamp = header.last_contained_log_timestamp

    def records(self) -> Iterator[bytes]:
        """The state machine's entries, in the order they were written."""
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"SnapshotReader({self.snapshot_id}, {len(self._values)} records)"


# -- the store ------------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSnapshotWriter:
    """A snapshot being written to ``<name>.checkpoint.part`` (see the module docstring)."""

    def __init__(self, store: FileSnapshotStore, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self._store = store
        self.path = store.directory / snapshot_file_name(snapshot_id, part=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    @property
    def done(self) -> bool:
        return self._fd < 0

    def append(self, data: bytes) -> None:
        if self._fd < 0:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        view = memoryview(data)
        while view:
            view = view[os.pwrite(self._fd, view, self._size + len(data) - len(view)) :]
        self._size += len(data)

    def freeze(self) -> None:
        """fsync, rename to ``.checkpoint``, fsync the folder: the snapshot is now visible."""
        if self._fd < 0:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
        final = self._store.directory / snapshot_file_name(self.snapshot_id)
        os.replace(self.path, final)
        _fsync_dir(self._store.directory)
        self._store._frozen(self)

    def abort(self) -> None:
        """Throw the partial snapshot away (idempotent; a no-op once frozen)."""
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        self.path.unlink(missing_ok=True)
        self._store._writers.pop(self.snapshot_id, None)


class FileSnapshotStore:
    """A :class:`~kcore.raft.snapshots.SnapshotStore` of ``.checkpoint`` files in ``directory``.

    Opening the store deletes leftover ``.checkpoint.part`` files (snapshots whose writing a
    crash interrupted) and lists the complete ones.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ids: set[OffsetAndEpoch] = set()
        self._writers: dict[OffsetAndEpoch, FileSnapshotWriter] = {}
        for name in sorted(os.listdir(self.directory)):
            parsed = snapshot_id_from_file_name(name)
            if parsed is None:
                continue
            sid, is_part = parsed
            if is_part:
                log.info("%s: deleting the partial snapshot %s", self.directory.name, name)
                (self.directory / name).unlink(missing_ok=True)
            else:
                self._ids.add(sid)

    # -- SnapshotStore ------------------------------------------------------------------------

    def latest_id(self) -> OffsetAndEpoch | None:
        return max(self._ids, default=None)

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        if snapshot_id not in self._ids:
            return None
        try:
            return self.path(snapshot_id).stat().st_size
        except FileNotFoundError:
            self._ids.discard(snapshot_id)
            return None

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from ``position`` (a FetchSnapshot chunk).

        Raises:
            KeyError: no such snapshot.
            ValueError: ``position`` is outside the file.
        """
        size = self.size(snapshot_id)
        if size is None:
            raise KeyError(f"no snapshot {snapshot_id} in {self.directory}")
        if not 0 <= position <= size:
            raise ValueError(f"position {position} outside snapshot {snapshot_id} ({size} bytes)")
        fd = os.open(self.path(snapshot_id), os.O_RDONLY)
        try:
            return os.pread(fd, min(max_bytes, size - position), position)
        finally:
            os.close(fd)

    def create(self, snapshot_id: OffsetAndEpoch) -> FileSnapshotWriter:
        """A writer for ``snapshot_id``; an unfrozen writer of the same id is aborted."""
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:
            previous.abort()
        writer = self._writers[snapshot_id] = FileSnapshotWriter(self, snapshot_id)
        return writer

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for sid in sorted(s for s in self._ids if s < snapshot_id):
            self.delete(sid)

    # -- more --------------------------------------------------------------------------------

    def ids(self) -> list[OffsetAndEpoch]:
        """Every complete snapshot, oldest first."""
        return sorted(self._ids)

    def path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def data(self, snapshot_id: OffsetAndEpoch) -> bytes:
        """The whole content of a snapshot."""
        return self.path(snapshot_id).read_bytes()

    def reader(self, snapshot_id: OffsetAndEpoch) -> SnapshotReader:
        """A :class:`SnapshotReader` over a snapshot (read whole: metadata snapshots are small).

        Raises:
            FileNotFoundError: no such snapshot.
            CorruptSnapshotError: its content is not Kafka's snapshot framing.
        """
        return SnapshotReader(snapshot_id, self.data(snapshot_id))

    def delete(self, snapshot_id: OffsetAndEpoch) -> None:
        self.path(snapshot_id).unlink(missing_ok=True)
        self._ids.discard(snapshot_id)

    def close(self) -> None:
        """Abort every unfrozen writer (their ``.part`` files go)."""
        for writer in list(self._writers.values()):
            writer.abort()

    def _frozen(self, writer: FileSnapshotWriter) -> None:
        self._ids.add(writer.snapshot_id)
        if self._writers.get(writer.snapshot_id) is writer:
            del self._writers[writer.snapshot_id]

    def __repr__(self) -> str:
        return f"FileSnapshotStore({str(self.directory)!r}, {self.ids()})"
