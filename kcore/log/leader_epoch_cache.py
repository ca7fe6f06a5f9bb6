"""The leader-epoch cache of a partition: which leader epoch wrote which range of offsets.

Theory of operation
-------------------
Each entry ``(epoch, start_offset)`` says "the first offset written under leader ``epoch`` is
``start_offset``"; the epoch's range ends where the next entry starts (or at the log end offset
for the latest epoch). Both columns strictly increase from entry to entry; ``assign`` keeps it so
by dropping the entries a new one contradicts, exactly as current Kafka's
``LeaderEpochFileCache`` does (very old Kafka versions ignored a non-increasing epoch instead):

* the same epoch again with an offset >= its start offset: nothing to do (the common case: a
  leader appends many batches in one epoch);
* anything else: remove, from the end, every entry whose epoch is >= the new epoch or whose start
  offset is >= the new start offset, then append the new entry.

A follower uses the cache to answer (and the leader to serve) OffsetsForLeaderEpoch, which is how
a replica finds where its log diverged from the leader's after a leader change.

The cache is persisted in ``leader-epoch-checkpoint`` (see ``checkpoint.py``), always with
``atomic_write_bytes``' fsyncs. When it is written:

* ``assign`` of a new latest epoch (the append path: the first append of every partition and
  of every leader epoch) only marks the cache dirty. Writing and fsyncing the checkpoint there
  cost 6-64 ms on the broker's single event loop (2 fsyncs; docs/performance.md). The partition
  log writes a dirty checkpoint with ``flush_if_dirty()`` before it advances its recovery point
  (``PartitionLog.flush``, ``close``) and the loader does before it declares a recovered log's
  end its recovery point. Invariant: **every entry whose start offset is below the recovery
  point is in the durable checkpoint.** Entries at or above it may be missing after a crash;
  recovery rescans the log from the segment holding the recovery point and re-assigns every
  epoch it meets from the batches' partition leader epochs (``log_loader``), so they come back.
  Kafka keeps this write synchronous (KAFKA-16541 reverted a non-fsynced variant:
  an OS crash could leave an empty or torn file *replacing* a durable one); not writing at all
  until the durable point keeps the file either the old durable one or the new durable one.
* An ``assign`` that removes entries, and the truncations (``truncate_from_end``,
  ``truncate_from_start``, ``clear``), write at once unless the caller passes ``flush=False``:
  they are rare (leader changes, retention) and a crash must not resurrect removed entries below
  the recovery point.

After a crash the checkpoint may hold entries beyond the recovered log end, or lack entries the
log has: the log loader calls ``truncate_from_end`` at the start of its rescan, rebuilds the
rest from the batches, then ``truncate_from_end(log_end_offset)`` and
``truncate_from_start(log_start_offset)``, as Kafka does.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

from kcore.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcore.log.errors import CorruptCheckpointError

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEndOffset(NamedTuple):
    """The answer to OffsetsForLeaderEpoch: a leader epoch and the end offset of that epoch."""

    epoch: int
    end_offset: int


_UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class LeaderEpochFileCache:
    """The ``(leader epoch -> start offset)`` entries of one partition, backed by a checkpoint.

    Byte layout: see ``LeaderEpochCheckpointFile`` (text, ``<epoch> <start offset>`` lines).

    After a crash: the checkpoint is replaced atomically and durably, so it holds a consistent
    (possibly stale, never torn) list holding at least the entries below the recovery point;
    the owner rebuilds the rest from the log and trims it with ``truncate_from_end`` and
    ``truncate_from_start`` (see the module docstring).

    Who may call it: the partition's log (append path, truncation, retention) and the replica
    layer answering OffsetsForLeaderEpoch, serialised by the partition log's lock.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile) -> None:
        """Load the entries of ``checkpoint`` (applying ``assign``'s rules; nothing is written).

        Raises ``CorruptCheckpointError`` on a malformed checkpoint or a negative entry.
        """
        self._checkpoint = checkpoint
        # Two parallel columns, both strictly increasing, so bisect answers every query.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        # True when the entries differ from the checkpoint file (an assign not yet written).
        self._dirty = False
        for entry in checkpoint.read():
            try:
                self._assign(entry.epoch, entry.start_offset)
            except ValueError as exc:
                raise CorruptCheckpointError(f"{checkpoint.path}: {exc}") from None

    # -- updates ----------------------------------------------------------------------------

    def _assign(self, epoch: int, start_offset: int) -> bool | None:
        """Apply ``assign``'s rules: False when nothing changed, True when an entry was only
        appended, None when entries were removed too."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry (epoch {epoch}, offset {start_offset})")
        epochs, starts = self._epochs, self._starts
        if epochs and epochs[-1] == epoch and start_offset >= starts[-1]:
            return False
        removed = False
        while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
            epochs.pop()
            starts.pop()
            removed = True
        epochs.append(epoch)
        starts.append(start_offset)
        return None if removed else True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that leader ``epoch`` starts at ``start_offset``.

        Returns True when the cache changed. A repeat of the latest epoch at an offset not below
        its start is ignored; an entry that contradicts later entries (an epoch not above them,
        or a start offset not above theirs) removes them first -- see the module docstring.

        A new entry is not written here: the cache is marked dirty and the owner writes it with
        ``flush_if_dirty()`` before advancing its recovery point (the append path must not
        fsync; see the module docstring). An assign that removed entries writes at once.

        Raises ``ValueError`` for a negative epoch or offset.
        """
        changed = self._assign(epoch, start_offset)
        if changed is None:
            self.flush()
            return True
        if changed:
            self._dirty = True
        return changed

    def assign_all(self, entries: Iterable[EpochEntry]) -> None:
        """``assign`` each entry in order, then flush once (if any entry was given)."""
        entries = list(entries)
        for entry in entries:
            self._assign(entry.epoch, entry.start_offset)
        if entries:
            self.flush()

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Remove the entries whose start offset is >= ``end_offset`` (the log was truncated to
        ``end_offset``: those epochs wrote nothing that is left). A negative offset is ignored."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[keep:], self._starts[keep:]
        if flush:
            self.flush()
        else:
            self._dirty = True

    def truncate_from_start(self, start_offset: int, flush: bool = True) -> None:
        """Forget the offsets before ``start_offset`` (the log start offset moved up).

        Removes every entry starting at or before ``start_offset`` and puts back the last of
        them with its start moved up to ``start_offset``: the epoch that wrote ``start_offset``
        now starts there. Exclusive, as Kafka's: ``truncate_from_start(6)`` keeps an entry at 6.
        """
        removed = bisect.bisect_right(self._starts, start_offset)
        if not removed or (removed == 1 and self._starts[0] == start_offset):
            return  # nothing starts before ``start_offset``: no change (and no fsync)
        epoch = self._epochs[removed - 1]
        del self._epochs[:removed], self._starts[:removed]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        if flush:
            self.flush()
        else:
            self._dirty = True

    def clear(self, flush: bool = True) -> None:
        """Remove every entry (the log was deleted or truncated fully)."""
        if not self._epochs and not self._dirty:
            # Already empty, and so is the file: no change (and no fsync). A mirror's start
            # restarts each new, empty partition at the source's log start offset (D-16).
            return
        self._epochs.clear()
        self._starts.clear()
        if flush:
            self.flush()
        else:
            self._dirty = True

    def flush(self) -> None:
        """Write the entries to the checkpoint (atomically, durably: 2 fsyncs)."""
        self._checkpoint.write(self.epoch_entries())
        self._dirty = False

    def flush_if_dirty(self) -> bool:
        """``flush()`` if an ``assign`` has not been written yet; True if it wrote. The owner
        calls it before advancing its recovery point (see the module docstring)."""
        if not self._dirty:
            return False
        self.flush()
        return True

    @property
    def dirty(self) -> bool:
        """True when the entries have changes the checkpoint file does not hold yet."""
        return self._dirty

    # -- queries ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.epoch_entries()!r})"

    def epoch_entries(self) -> list[EpochEntry]:
        """Every entry, in epoch order."""
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The entry of the latest epoch, None when the cache is empty."""
        if not self._epochs:
            return None
        return EpochEntry(self._epochs[-1], self._starts[-1])

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch that wrote to the log, None when the cache is empty."""
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        """The entry of the earliest epoch, None when the cache is empty."""
        if not self._epochs:
            return None
        return EpochEntry(self._epochs[0], self._starts[0])

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, if there is one."""
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return EpochEntry(epoch, self._starts[i])
        return None

    def previous_epoch(self, epoch: int) -> int | None:
        """The greatest cached epoch below ``epoch``, if any."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._epochs[i - 1] if i else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest cached epoch above ``epoch``, if any."""
        i = bisect.bisect_right(self._epochs, epoch)
        return self._epochs[i] if i < len(self._epochs) else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Answer OffsetsForLeaderEpoch for ``requested_epoch``, as Kafka's ``endOffsetFor``.

        * ``UNDEFINED_EPOCH`` requested, empty cache, or an epoch above every cached one:
          ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` = ``(-1, -1)``.
        * The latest epoch: ``(latest epoch, log_end_offset)`` -- the epoch is still open.
        * Otherwise the end offset is the start offset of the first epoch above the requested
          one, and the epoch is the greatest cached epoch <= the requested one. When the
          requested epoch is below every cached epoch (its data was deleted), the requested
          epoch itself is returned with the start offset of the first cached epoch, so the
          follower truncates to where the leader's log begins.
        """
        epochs = self._epochs
        if requested_epoch == UNDEFINED_EPOCH or not epochs:
            return _UNDEFINED
        if epochs[-1] == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return _UNDEFINED
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._starts[0])
        return EpochEndOffset(epochs[higher - 1], self._starts[higher])

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the last entry starting at or before it (None if the
        offset is before the first entry). Offsets past the log end map to the latest epoch."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None
