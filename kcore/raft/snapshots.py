"""Snapshots of the replicated state: the :class:`SnapshotStore` protocol and a memory store.

Theory of operation
-------------------
A snapshot holds the state machine's state after applying the log up to, not including,
``snapshot_id.offset``; ``snapshot_id.epoch`` is the epoch of the last entry it covers. Both
together are the snapshot id (Kafka's ``OffsetAndEpoch``; on disk the file is named
``<20-digit offset>-<10-digit epoch>.checkpoint``, written by a later issue).

Snapshots enter the store two ways:

* the local state machine asks the core for one (:meth:`RaftCore.create_snapshot`) at a
  committed offset; the core writes it here and cuts the log's head at it;
* a follower too far behind the leader's log start fetches the leader's latest snapshot in
  chunks (``FetchSnapshot``); the chunks go to a :class:`SnapshotWriter` that becomes visible
  only when :meth:`SnapshotWriter.freeze` is called (Kafka's ``.checkpoint.part`` renamed to
  ``.checkpoint``). An unfrozen writer is lost in a crash, which is fine: the follower fetches
  again.

The bytes are opaque to the core (the metadata layer frames them as record batches with a
SnapshotHeaderRecord and a SnapshotFooterRecord); FetchSnapshot ships them as "unaligned
records" at any byte position.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kcore.raft.log import OffsetAndEpoch

__all__ = ["MemorySnapshotStore", "SnapshotStore", "SnapshotWriter"]


@runtime_checkable
class SnapshotWriter(Protocol):
    """A snapshot being written; invisible to readers until frozen."""

    snapshot_id: OffsetAndEpoch

    @property
    def size(self) -> int:
        """Bytes appended so far (the position of the next chunk)."""
        ...

    def append(self, data: bytes) -> None:
        """Add bytes at the end."""
        ...

    def freeze(self) -> None:
        """Make the snapshot durable and visible under its id."""
        ...

    def abort(self) -> None:
        """Throw the partial snapshot away."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """Where frozen snapshots live. Only the Raft core writes to it."""

    def latest_id(self) -> OffsetAndEpoch | None:
        """The id with the highest end offset, or ``None``."""
        ...

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """The snapshot's size in bytes, or ``None`` if there is no such snapshot."""
        ...

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from ``position`` (``0 <= position <= size``)."""
        ...

    def create(self, snapshot_id: OffsetAndEpoch) -> SnapshotWriter:
        """Start writing a snapshot with this id (replacing an unfrozen one)."""
        ...

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Delete every snapshot older than ``snapshot_id`` (it is kept)."""
        ...


class _MemoryWriter:
    def __init__(self, store: MemorySnapshotStore, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self._store = store
        self._data = bytearray()
        self._done = False

    @property
    def size(self) -> int:
        return len(self._data)

    def append(self, data: bytes) -> None:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        self._data += data

    def freeze(self) -> None:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        self._done = True
        self._store._frozen[self.snapshot_id] = bytes(self._data)

    def abort(self) -> None:
        self._done = True


class MemorySnapshotStore:
    """A :class:`SnapshotStore` in memory: frozen snapshots survive a simulated crash (the
    simulation keeps the store), writers do not (they belong to the discarded core)."""

    def __init__(self) -> None:
        self._frozen: dict[OffsetAndEpoch, bytes] = {}

    def latest_id(self) -> OffsetAndEpoch | None:
        return max(self._frozen, default=None)

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self._frozen.get(snapshot_id)
        return None if data is None else len(data)

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        data = self._frozen[snapshot_id]
        if not 0 <= position <= len(data):
            raise ValueError(f"position {position} outside snapshot {snapshot_id}")
        return data[position : position + max_bytes]

    def create(self, snapshot_id: OffsetAndEpoch) -> _MemoryWriter:
        return _MemoryWriter(self, snapshot_id)

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for sid in [s for s in self._frozen if s < snapshot_id]:
            del self._frozen[sid]

    # -- for tests -------------------------------------------------------------------------

    def ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._frozen)

    def data(self, snapshot_id: OffsetAndEpoch) -> bytes:
        return self._frozen[snapshot_id]
