"""The replicated log as the Raft core sees it: the :class:`RaftLog` protocol and a memory log.

Theory of operation
-------------------
The core needs very little from a log: append entries stamped with an epoch, read them back
from an offset, cut the tail (a follower whose log diverged from the leader's), cut the head
(after a snapshot), and answer the *epoch cache* question "where does epoch E end in this
log?". That is all :class:`RaftLog` asks for; :class:`MemoryRaftLog` implements it for the
simulation and the tests, and a later issue implements it on kcore's on-disk partition log
(``kcore/log``: segments plus ``leader-epoch-checkpoint``).

An entry is opaque bytes (a metadata record, framed by the metadata layer) or a control record
(``control_type`` set: the ``LeaderChangeMessage`` each leader appends when its epoch starts).
Each entry carries the epoch of the leader that appended it; epochs never decrease along the
log, so the log is a run of epochs, each starting at some offset (Kafka's leader epoch cache).

Offsets: ``start_offset`` is the first offset still held (0, or the end offset of the snapshot
the head was cut at); ``end_offset`` is one past the last entry (Kafka's log end offset).
``last_fetched_epoch`` is the epoch of the last entry, or of the snapshot the log starts at when
it is empty, or 0 for a brand new log (Kafka's ``lastFetchedEpoch``; epoch 0 is never led).

Durability: what :meth:`RaftLog.append` / :meth:`RaftLog.truncate_to` did must survive a crash
once :meth:`RaftLog.flush` returns. The core flushes before it acts on new entries (before a
leader counts them toward the high watermark, before a follower fetches past them).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["LogEntry", "MemoryRaftLog", "OffsetAndEpoch", "RaftLog", "RaftRecord"]

# Size accounting for read(max_bytes): a record's fixed cost in a v2 batch is about 20 bytes
# (attributes, deltas, key length, headers count as varints, plus the batch header shared).
_ENTRY_OVERHEAD = 20


class OffsetAndEpoch(NamedTuple):
    """An offset with the epoch it belongs to (a snapshot id, a log end, a diverging point)."""

    offset: int
    epoch: int


class RaftRecord(NamedTuple):
    """Something to append: opaque bytes, or a control record's value with its type id."""

    value: bytes
    control_type: int | None = None


class LogEntry(NamedTuple):
    """An entry of the log: its offset, the epoch of the leader that appended it, its bytes."""

    offset: int
    epoch: int
    value: bytes
    control_type: int | None = None

    @property
    def is_control(self) -> bool:
        return self.control_type is not None


@runtime_checkable
class RaftLog(Protocol):
    """What the Raft core needs from the replicated log. Only the core writes to it."""

    @property
    def start_offset(self) -> int:
        """The first offset held (the latest snapshot's end offset once the head is cut)."""
        ...

    @property
    def end_offset(self) -> int:
        """One past the last entry: the offset the next append gets."""
        ...

    @property
    def last_fetched_epoch(self) -> int:
        """The last entry's epoch; for an empty log the start epoch (snapshot's, or 0)."""
        ...

    def append(self, records: Sequence[RaftRecord], epoch: int) -> range:
        """Append ``records`` at the end, all with ``epoch``; return the offsets given.

        ``epoch`` must be at least :attr:`last_fetched_epoch` (epochs never decrease).
        """
        ...

    def read(self, from_offset: int, max_bytes: int) -> list[LogEntry]:
        """Entries from ``from_offset`` on: at least one if any, then up to ``max_bytes``.

        ``start_offset <= from_offset <= end_offset``; otherwise ``ValueError``.
        """
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at ``offset`` or above (and their epochs from the cache)."""
        ...

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Cut the head up to ``snapshot_id.offset`` (a snapshot now holds what was there)."""
        ...

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Drop everything; the log restarts empty at ``snapshot_id`` (a fetched snapshot)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Where ``epoch`` ends in this log, with Kafka's epoch-cache semantics.

        * ``epoch`` is the latest epoch: ``(end_offset, epoch)``;
        * ``epoch`` is above every epoch held: ``(end_offset, last_fetched_epoch)``;
        * otherwise ``(start of the first higher epoch, the largest epoch <= epoch)``; when no
          held epoch is <= ``epoch``, the requested epoch itself is returned with the start of
          the first held epoch (the log's start offset, after a cut).

        A follower compares the answer with its own log to find where the logs diverge.
        """
        ...

    def flush(self) -> None:
        """Make every append and truncation so far durable."""
        ...


class MemoryRaftLog:
    """A :class:`RaftLog` in memory, for the simulation and tests.

    It "survives a crash" by being kept by the simulated disk while the core is thrown away;
    every change is durable at once (``flush`` does nothing), which the Raft protocol allows.
    """

    def __init__(self) -> None:
        self._start = 0
        self._start_epoch = 0
        self._entries: list[LogEntry] = []
        # The epoch cache: parallel sorted lists of epochs and the offset each starts at.
        self._epochs: list[int] = []
        self._epoch_starts: list[int] = []

    # -- RaftLog ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def last_fetched_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._start_epoch

    def append(self, records: Sequence[RaftRecord], epoch: int) -> range:
        if epoch < self.last_fetched_epoch:
            raise ValueError(
                f"epoch {epoch} is below the log's last epoch {self.last_fetched_epoch}"
            )
        first = self.end_offset
        if records and (not self._epochs or self._epochs[-1] != epoch):
            self._epochs.append(epoch)
            self._epoch_starts.append(first)
        for i, rec in enumerate(records):
            self._entries.append(LogEntry(first + i, epoch, bytes(rec.value), rec.control_type))
        return range(first, first + len(records))

    def read(self, from_offset: int, max_bytes: int) -> list[LogEntry]:
        if not self._start <= from_offset <= self.end_offset:
            raise ValueError(
                f"offset {from_offset} is outside the log [{self._start}, {self.end_offset}]"
            )
        out: list[LogEntry] = []
        size = 0
        for entry in self._entries[from_offset - self._start :]:
            size += len(entry.value) + _ENTRY_OVERHEAD
            if out and size > max_bytes:
                break
            out.append(entry)
        return out

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise ValueError(f"cannot truncate to {offset}, below the log start {self._start}")
        if offset >= self.end_offset:
            return
        del self._entries[offset - self._start :]
        while self._epoch_starts and self._epoch_starts[-1] >= offset:
            self._epochs.pop()
            self._epoch_starts.pop()

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        offset = snapshot_id.offset
        if offset <= self._start:
            return
        if offset > self.end_offset:
            raise ValueError(f"cannot cut the head at {offset}, past the log end {self.end_offset}")
        del self._entries[: offset - self._start]
        self._start = offset
        self._start_epoch = snapshot_id.epoch
        # Like Kafka's LeaderEpochFileCache.truncateFromStart: epochs wholly before the new
        # start go; the epoch covering it now starts at the new start offset.
        while len(self._epochs) > 1 and self._epoch_starts[1] <= offset:
            self._epochs.pop(0)
            self._epoch_starts.pop(0)
        if self._epochs:
            if self._entries:
                self._epoch_starts[0] = offset
            else:
                self._epochs.clear()
                self._epoch_starts.clear()

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self._entries.clear()
        self._epochs.clear()
        self._epoch_starts.clear()
        self._start = snapshot_id.offset
        self._start_epoch = snapshot_id.epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        last = self.last_fetched_epoch
        if epoch >= last:
            return OffsetAndEpoch(self.end_offset, last)
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            # No entries at all (the log starts at a snapshot whose epoch is above `epoch`):
            # Kafka answers "unknown", which KafkaMetadataLog turns into the log end.
            return OffsetAndEpoch(self.end_offset, last)
        higher_start = self._epoch_starts[higher]
        if higher == 0:
            # No held epoch is <= `epoch`. If the log starts at a snapshot whose epoch is
            # <= epoch, that is the floor (KafkaMetadataLog's snapshot fallback).
            if self._start_epoch <= epoch and self._start > 0:
                return OffsetAndEpoch(higher_start, self._start_epoch)
            return OffsetAndEpoch(higher_start, epoch)
        return OffsetAndEpoch(higher_start, self._epochs[higher - 1])

    def flush(self) -> None:
        return None

    # -- for tests -------------------------------------------------------------------------

    def entries(self) -> list[LogEntry]:
        """A copy of every entry held, in offset order."""
        return list(self._entries)

    def epoch_cache(self) -> list[OffsetAndEpoch]:
        """The epoch cache as ``(start offset, epoch)`` pairs."""
        return [OffsetAndEpoch(o, e) for e, o in zip(self._epochs, self._epoch_starts)]

    def __repr__(self) -> str:
        return (
            f"MemoryRaftLog(start={self._start}, end={self.end_offset}, "
            f"epochs={self.epoch_cache()})"
        )
