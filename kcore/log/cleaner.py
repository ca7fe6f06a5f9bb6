"""Log compaction (``cleanup.policy=compact``): Kafka's LogCleaner, as one synchronous call.

Theory of operation
-------------------
A compacted log is split by the **first dirty offset** (the cleaner checkpoint, kept per log in
:attr:`LogCleaner.checkpoints`; the log manager persists it in ``cleaner-offset-checkpoint``)
into a *clean* head, already deduplicated, and a *dirty* tail. One :meth:`LogCleaner.clean`:

1. **Chooses the range** (Kafka's ``LogCleanerManager.cleanableOffsets``): from the first dirty
   offset up to the *first uncleanable offset*, the smallest of the active segment's base, the
   last stable offset (so bounded by the high watermark and by open transactions) and the base
   of the first dirty segment holding a record younger than ``min.compaction.lag.ms``; rounded
   down to a segment base, so only whole inactive segments are ever rewritten. The log is
   cleaned when the dirty share of the bytes exceeds ``min.cleanable.dirty.ratio``, or when a
   dirty segment's first batch is older than ``max.compaction.lag.ms``, or when forced.
2. **Builds the offset map** over the dirty range: key (bytes) -> offset of its last record,
   skipping aborted transactional batches (found through the transaction indexes). The map
   holds at most ``CleanerConfig.max_map_entries`` keys; when full, the round stops at the
   last whole batch mapped and the next round continues from there.
3. **Rewrites the segments** from the log start up to the end of the map, in groups whose
   total size fits one segment (``segment.bytes`` and ``segment.index.bytes``), each into one
   new segment, batch by batch (Kafka's ``MemoryRecords.filterTo`` with the cleaner's filter):

   * a record is kept if it is the last one of its key in the map (or beyond the map), and,
     for a tombstone (null value), while its batch's delete horizon has not passed;
   * KIP-534: a kept batch holding a tombstone, or a transaction marker that may go, gets a
     *delete horizon* = ``now + delete.retention.ms`` in its header (attribute bit 6, base
     timestamp = horizon) the first time a clean sees it; later cleans drop the tombstones /
     the marker once ``now >= horizon``;
   * records of aborted transactions are dropped; an ABORT marker stays (and its entry in the
     new segment's transaction index) until a clean finds no data of its transaction left,
     then it is given a delete horizon like a tombstone; a COMMIT marker likewise goes once no
     batch of its transaction remains;
   * the batch holding the last data offset of every active producer (or its last marker) is
     kept, **empty** if need be (a 61-byte header, record count 0, the original base offset,
     last offset delta, producer id, epoch and base sequence), so producer state survives a
     reload; so is the last batch before the first uncleanable offset, so the last offset of
     the round is not lost;
   * a batch whose records are all kept and needs no horizon is copied byte for byte; one
     that lost records is rebuilt with the same codec, producer fields, leader epoch and
     timestamp type, *the original base offset and last offset delta* (Kafka's
     ``overrideLastOffset``; every kept record keeps its offset, so the offset deltas inside
     are unchanged and the base sequence still matches the base offset).

4. **Swaps** each group's new segment in, crash-safely (see below), reopens it as a
   :class:`~kcore.log.segment.LogSegment` and replaces the group in ``plog.segments`` and
   ``plog._bases``. The old files are renamed ``.deleted`` and removed after
   ``file.delete.delay.ms`` through the partition log's pending deletions, so fetches that hold
   a slice of them finish.

The swap, and what a crash leaves
---------------------------------
For a group whose first segment has base ``B`` (all names ``<B>.<kind><suffix>``):

1. write ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned``,
   ``B.txnindex.cleaned``; fsync them and the directory;
2. rename the old ``B.index`` to ``B.index.deleted`` (its positions are wrong for the new log;
   an absent offset index is valid for either log: lookups scan from position 0);
3. rename ``B.log.cleaned`` -> ``B.log.swap``: **the commit point**;
4. rename the three index ``.cleaned`` files -> ``.swap``;
5. rename every remaining file of the old segments to ``.deleted``;
6. rename the ``.swap`` files to their final names, the indexes first and the log last.

After a crash, :func:`complete_interrupted_swaps` (to be called by the log loader before it
lists the segments) deletes ``.cleaned`` files (a clean that did not commit), and for every
``B.log.swap`` deletes the old segments it overlaps (bases in ``(B, last offset of the swap]``),
then renames the ``.swap`` files. For a group of **one** segment every state above is also
consistent under the loader's plain rule (remove ``.cleaned`` and ``.deleted``, rename
``X.swap`` to ``X``); a group of several segments needs :func:`complete_interrupted_swaps`
between steps 3 and 5, where the old later segments still exist next to the committed swap.

What is not implemented: Kafka's legacy (magic < 2) delete horizon, the I/O throttle, cleaner
threads and the pause/abort states of the cleaner manager (the log manager calls
:meth:`LogCleaner.clean` one log at a time), and splitting a segment whose offsets overflow.

Who may call it: the log manager, under the partition log's lock (nothing else may append,
truncate or delete segments of the log during a clean). Pure and synchronous: no threads, no
trio; time is passed in as ``now_ms``.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import struct
import time
from collections.abc import Hashable, Mapping, MutableMapping
from dataclasses import dataclass

from kcore.log import files
from kcore.log.cleaner_output import (
    CleanedSegment,
    RetiredSegment,
    build_empty_batch,
    rebuild_batch,
)
from kcore.log.errors import LogError
from kcore.log.producer_state import has_producer_id
from kcore.log.segment import LogSegment
from kcore.log.transaction_index import AbortedTxn, TransactionIndex
from kcore.record.batch import (
    NO_TIMESTAMP,
    RecordBatch,
)
from kcore.record.control import ControlRecordType, read_control_record
from kcore.record.records import Record

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


class LogCleaningError(LogError):
    """Cleaning the log under ``key`` failed (``__cause__`` says why); Kafka marks such a log
    uncleanable rather than retrying it forever."""

    def __init__(self, key: Hashable, error: Exception) -> None:
        super().__init__(f"cleaning {key} failed: {error}")
        self.key = key


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker-wide cleaner settings (Kafka's ``log.cleaner.*``).

    ``max_map_entries`` bounds the offset map of one round (Kafka sizes it from
    ``log.cleaner.dedupe.buffer.size``, 128 MiB at 24 bytes a slot and a 0.9 load factor,
    about 5M keys; a Python dict of bytes keys costs more, so the default is 1M).
    """

    max_map_entries: int = 1_000_000

    def __post_init__(self) -> None:
        if self.max_map_entries < 1:
            raise ValueError("max_map_entries must be at least 1")


@dataclass(slots=True)
class LogToClean:
    """What :meth:`LogCleaner.cleanable` found for one log (Kafka's ``LogToClean``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool  # max.compaction.lag.ms passed for a dirty segment
    checkpoint_was_invalid: bool  # the checkpoint was outside [log start, LEO]: reset

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class CleanerStats:
    """What one :meth:`LogCleaner.clean` did. ``end_offset`` is the new first dirty offset."""

    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    end_offset: int = 0
    cleaned: bool = False
    map_bytes_read: int = 0
    map_records_read: int = 0
    map_entries: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    invalid_records: int = 0  # records without a key in a compacted log: dropped
    segments_read: int = 0
    segments_written: int = 0
    duration_ms: float = 0.0  # wall clock, for metrics only

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_written


class OffsetMap:
    """Key -> offset of the key's last record in the dirty range, with the last offset mapped.

    ``latest_offset`` is the last offset the map covers (Kafka's ``OffsetMap.latestOffset``):
    records above it were not looked at and are always kept.
    """

    __slots__ = ("_map", "max_entries", "latest_offset")

    def __init__(self, max_entries: int) -> None:
        self._map: dict[bytes, int] = {}
        self.max_entries = max_entries
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset

    def get(self, key: bytes) -> int:
        """The mapped offset of ``key``, or -1."""
        return self._map.get(key, -1)

    def can_take(self, records: int) -> bool:
        return len(self._map) + records <= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._map) / self.max_entries


@dataclass(slots=True)
class _Round:
    """The state one :meth:`LogCleaner.clean` shares between its groups."""

    offset_map: OffsetMap
    txn: CleanedTransactionMetadata
    # producer id -> (last data offset or None, epoch) of every producer in producer state
    active_producers: dict[int, tuple[int | None, int]]
    upper_bound: int  # the first uncleanable offset
    now_ms: int
    delete_retention_ms: int
    stats: CleanerStats


# -- transactions ----------------------------------------------------------------------------


class _AbortedTxnState:
    __slots__ = ("txn", "last_observed_offset")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_offset: int | None = None


class CleanedTransactionMetadata:
    """Transaction state while the cleaner walks the log (Kafka's class of the same name).

    Decides which batches belong to aborted transactions (dropped) and when a marker may go:
    an ABORT marker once no batch of its transaction was seen by this clean, a COMMIT marker
    likewise. Kept ABORT markers whose data was seen are written to ``cleaned_index``.
    """

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._heap: list[tuple[int, int, AbortedTxn]] = []  # (first offset, seq, txn)
        self._seq = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._heap, (txn.first_offset, self._seq, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._heap and self._heap[0][0] <= offset:
            txn = heapq.heappop(self._heap)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """Track a control batch; True if it may be discarded."""
        self._consume_aborted_up_to(batch.last_offset)
        control = read_control_record(batch)
        if control is None:
            return True  # an empty control batch: an earlier clean already emptied it
        pid = batch.producer_id
        if control.type is ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.last_observed_offset is not None:
                # Data of the transaction is still in the log: keep the marker and its entry.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if control.type is ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False  # other control records (MIRROR_PID_RESET, unknown) are kept

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """Track a data batch; True if it belongs to an aborted transaction."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        state = self._ongoing_aborted.get(batch.producer_id)
        if state is not None:
            state.last_observed_offset = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False


def _collect_aborted(plog, start: int, upper: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, upper)``, from the segment holding ``start``
    onward (the marker, and so the index entry, may be in a later segment)."""
    out: list[AbortedTxn] = []
    first = max(bisect.bisect_right(plog._bases, start) - 1, 0)
    for seg in plog.segments[first:]:
        result = seg.collect_aborted_txns(start, upper)
        out += result.aborted
        if result.is_complete:
            break
    return out


# -- the cleaner -----------------------------------------------------------------------------


class LogCleaner:
    """See the module docstring.

    ``checkpoints`` maps a log's key (by default its directory name, ``topic-partition``; the
    log manager may pass its own keys) to the log's first dirty offset. The log manager loads
    it from ``cleaner-offset-checkpoint`` and writes it back after each clean.
    """

    def __init__(
        self,
        config: CleanerConfig | None = None,
        checkpoints: MutableMapping[Hashable, int] | None = None,
    ) -> None:
        self.config = config or CleanerConfig()
        self.checkpoints: MutableMapping[Hashable, int] = {} if checkpoints is None else checkpoints

    # -- choosing ------------------------------------------------------------------------

    def cleanable(self, plog, now_ms: int, *, key: Hashable | None = None) -> LogToClean:
        """The cleanable range of ``plog`` and its dirty ratio (nothing is changed)."""
        key = plog.name if key is None else key
        start, leo = plog.log_start_offset, plog.log_end_offset
        checkpoint = self.checkpoints.get(key, start)
        invalid = not start <= checkpoint <= leo
        first_dirty = start if invalid else checkpoint
        if invalid and key in self.checkpoints:
            log.warning(
                "%s: cleaner checkpoint %d is outside [%d, %d]; cleaning from the log start",
                plog.name,
                checkpoint,
                start,
                leo,
            )
        segments = plog.segments
        active = segments[-1]
        ends = _segment_ends(segments)
        # The inactive segments that may hold offsets >= first_dirty.
        dirty_inactive = [s for s, e in zip(segments[:-1], ends) if e > first_dirty]
        candidates = [plog.last_stable_offset, active.base_offset]
        lag = max(plog.config.min_compaction_lag_ms, 0)
        if lag > 0:
            young = next((s for s in dirty_inactive if s.max_timestamp > now_ms - lag), None)
            if young is not None:
                candidates.append(young.base_offset)
        uncleanable = max(first_dirty, min(candidates))
        # Round down to the base of the segment holding it (Kafka's calculateCleanableBytes).
        index = max(bisect.bisect_right(plog._bases, uncleanable) - 1, 0)
        first_uncleanable = min(segments[index].base_offset, active.base_offset)
        low = min(first_dirty, first_uncleanable)
        cleanable_bytes = sum(
            s.size for s, e in zip(segments, ends) if s.base_offset < first_uncleanable and e > low
        )
        clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
        max_lag = max(plog.config.max_compaction_lag_ms, 0)
        first_timestamps = [t for t in map(_first_batch_timestamp, dirty_inactive) if t > 0]
        need_now = bool(first_timestamps) and min(first_timestamps) < now_ms - max_lag
        return LogToClean(
            first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now, invalid
        )

    def should_clean(self, plog, info: LogToClean) -> bool:
        """Kafka's choice: forced by max.compaction.lag.ms, or dirty enough."""
        if info.cleanable_bytes <= 0:
            return False
        return info.need_compaction_now or (
            info.cleanable_ratio > plog.config.min_cleanable_dirty_ratio
        )

    def clean_filthiest(
        self, logs: Mapping[Hashable, object], now_ms: int
    ) -> tuple[Hashable, CleanerStats] | None:
        """Clean the compacted log with the highest dirty ratio among those due; None if none is."""
        best = None
        for key, plog in logs.items():
            if not plog.config.compact:
                continue
            info = self.cleanable(plog, now_ms, key=key)
            if info.checkpoint_was_invalid:
                self.checkpoints[key] = info.first_dirty_offset
            if self.should_clean(plog, info) and (
                best is None or info.cleanable_ratio > best[2].cleanable_ratio
            ):
                best = (key, plog, info)
        if best is None:
            return None
        key, plog, _ = best
        try:
            return key, self.clean(plog, now_ms, key=key)
        except Exception as e:
            raise LogCleaningError(key, e) from e

    def truncate_checkpoint(self, key: Hashable, offset: int) -> None:
        """The log was truncated to ``offset``: the checkpoint may not stay above it."""
        if self.checkpoints.get(key, 0) > offset:
            self.checkpoints[key] = offset

    def forget(self, key: Hashable) -> None:
        """The log was deleted."""
        self.checkpoints.pop(key, None)

    # -- cleaning ------------------------------------------------------------------------

    def clean(
        self, plog, now_ms: int, *, key: Hashable | None = None, force: bool = False
    ) -> CleanerStats:
        """Compact ``plog`` if it is due (or ``force``) and return what was done.

        ``stats.cleaned`` says whether segments were rewritten; ``stats.end_offset`` is the new
        first dirty offset, also stored in :attr:`checkpoints` under ``key``. Raises
        :class:`~kcore.log.errors.LogError` or ``CorruptRecordError`` on a segment that cannot
        be read: groups already swapped stay swapped, the group being written is deleted and
        the checkpoint does not move. An ``OSError`` in the middle of a swap leaves files that
        :func:`complete_interrupted_swaps` resolves at the next start (take the log offline).
        """
        key = plog.name if key is None else key
        started = time.monotonic()
        info = self.cleanable(plog, now_ms, key=key)
        stats = CleanerStats(
            first_dirty_offset=info.first_dirty_offset,
            first_uncleanable_offset=info.first_uncleanable_offset,
            end_offset=info.first_dirty_offset,
        )
        if info.checkpoint_was_invalid:
            self.checkpoints[key] = info.first_dirty_offset
        due = info.cleanable_bytes > 0 if force else self.should_clean(plog, info)
        if not plog.config.compact or not due:
            stats.duration_ms = (time.monotonic() - started) * 1000
            return stats
        offset_map = self._build_offset_map(
            plog, info.first_dirty_offset, info.first_uncleanable_offset, stats
        )
        end_offset = offset_map.latest_offset + 1
        stats.map_entries = len(offset_map)
        groups = _group_segments(
            [s for s in plog.segments[:-1] if s.base_offset < end_offset],
            plog.config.segment_size,
            plog.config.segment_index_bytes,
            info.first_uncleanable_offset,
        )
        round_ = _Round(
            offset_map,
            CleanedTransactionMetadata(),
            {
                pid: (None if e.last_data_offset < 0 else e.last_data_offset, e.producer_epoch)
                for pid, e in plog.producer_state.producers.items()
            },
            info.first_uncleanable_offset,
            now_ms,
            plog.config.delete_retention_ms,
            stats,
        )
        for group in groups:
            self._clean_group(plog, group, round_)
        stats.end_offset = end_offset
        stats.cleaned = True
        self.checkpoints[key] = end_offset
        stats.duration_ms = (time.monotonic() - started) * 1000
        log.info(
            "%s: cleaned offsets [%d, %d) in %d group(s): %d of %d records kept, %d -> %d bytes",
            plog.name,
            info.first_dirty_offset,
            end_offset,
            len(groups),
            stats.records_written,
            stats.records_read,
            stats.bytes_read,
            stats.bytes_written,
        )
        return stats

    def _build_offset_map(self, plog, start: int, end: int, stats: CleanerStats) -> OffsetMap:
        """Map each key of ``[start, end)`` to its last offset (Kafka's ``buildOffsetMap``)."""
        offset_map = OffsetMap(self.config.max_map_entries)
        segments = plog.segments
        dirty = [
            s
            for s, e in zip(segments, _segment_ends(segments))
            if s.base_offset < end and e > start
        ]
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(_collect_aborted(plog, start, end))
        for i, seg in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            position = seg.offset_index.lookup(start).position
            for _, batch in seg.log.full_batches_from(position):
                stats.map_bytes_read += batch.size_in_bytes
                if batch.is_control:
                    txn.on_control_batch_read(batch)
                    stats.map_records_read += 1
                elif txn.on_batch_read(batch):
                    stats.map_records_read += batch.record_count  # aborted: not mapped
                else:
                    # Whole batches only: a round always ends at a batch boundary, and at
                    # least one batch is mapped even if it alone overfills the map.
                    if offset_map.latest_offset >= start and not offset_map.can_take(
                        batch.record_count
                    ):
                        return offset_map
                    for record in batch.records():
                        if record.key is not None and record.offset >= start:
                            offset_map.put(record.key, record.offset)
                        stats.map_records_read += 1
                if batch.last_offset >= start:
                    offset_map.latest_offset = batch.last_offset
            # An offset gap at the end of the segment (compacted away) is covered too.
            offset_map.latest_offset = max(offset_map.latest_offset, next_start - 1)
        return offset_map

    def _clean_group(self, plog, group: list[LogSegment], round_: _Round) -> None:
        """Clean ``group`` into one new segment and swap it in (Kafka's ``cleanSegments``)."""
        cleaned = CleanedSegment(plog.dir, group[0].base_offset, plog.segment_config)
        txn, stats = round_.txn, round_.stats
        txn.cleaned_index = cleaned.txn_index
        try:
            for i, seg in enumerate(group):
                # The whole segment's range: the new transaction index is rebuilt from it.
                upper = group[i + 1].base_offset if i + 1 < len(group) else seg.next_offset()
                txn.add_aborted_transactions(_collect_aborted(plog, seg.base_offset, upper))
                end = 0
                for position, batch in seg.log.full_batches_from(0):
                    end = position + batch.size_in_bytes
                    stats.bytes_read += batch.size_in_bytes
                    out = self._filter_batch(batch, round_)
                    if out is not None:
                        kept = RecordBatch(out)
                        cleaned.append(out, kept.last_offset, kept.max_timestamp)
                        stats.bytes_written += len(out)
                if end != seg.size:
                    raise LogError(
                        f"{seg.log.path}: {seg.size - end} bytes after byte {end} are not a "
                        "whole record batch; the segment cannot be cleaned"
                    )
                stats.segments_read += 1
            cleaned.finish()
        except BaseException:
            cleaned.delete()
            raise
        finally:
            txn.cleaned_index = None
        self._swap(plog, group, cleaned, round_.now_ms)
        stats.segments_written += 1

    def _filter_batch(self, batch: RecordBatch, round_: _Round):
        """The bytes to write for ``batch`` (itself, rebuilt, or empty), or None to drop it
        (Kafka's ``checkBatchRetention`` and ``filterTo``)."""
        txn, stats, now_ms = round_.txn, round_.stats, round_.now_ms
        is_control = batch.is_control
        if is_control:
            can_discard = txn.on_control_batch_read(batch)
            horizon = batch.delete_horizon_ms
            discard_records = can_discard and batch.has_delete_horizon and horizon <= now_ms
        else:
            can_discard = discard_records = txn.on_batch_read(batch)
        # Keep what producer state needs: the batch with an active producer's last data
        # offset, or its last marker when it has no data left (the epoch, for fencing).
        last_of_producer = False
        if has_producer_id(batch.producer_id):
            last = round_.active_producers.get(batch.producer_id)
            if last is not None:
                last_data_offset, epoch = last
                if last_data_offset is not None:
                    last_of_producer = batch.last_offset == last_data_offset
                else:
                    last_of_producer = is_control and batch.producer_epoch == epoch
        # And the last batch of the round, so that its last offset is not lost.
        retain_empty = last_of_producer or batch.next_offset == round_.upper_bound
        if discard_records and not retain_empty:
            stats.records_read += batch.record_count
            return None
        records = list(batch.records())
        stats.records_read += len(records)
        if discard_records:
            kept: list[Record] = []
        elif is_control:
            kept = records
        else:
            kept = [r for r in records if self._keep_record(batch, r, round_)]
        stats.records_written += len(kept)
        if kept:
            has_tombstone = any(r.value is None for r in kept)
            marker_may_go = can_discard and is_control
            needs_horizon = (has_tombstone or marker_may_go) and not batch.has_delete_horizon
            if len(kept) == len(records) and not needs_horizon:
                return bytes(batch.buffer)
            horizon = (
                now_ms + round_.delete_retention_ms
                if needs_horizon
                else (batch.delete_horizon_ms if batch.has_delete_horizon else None)
            )
            return rebuild_batch(batch, kept, horizon)
        if retain_empty:
            return build_empty_batch(batch)
        return None

    @staticmethod
    def _keep_record(batch: RecordBatch, record: Record, round_: _Round) -> bool:
        """Kafka's ``shouldRetainRecord`` for a record of a data batch."""
        if record.offset > round_.offset_map.latest_offset:
            return True  # beyond what the map covers
        if record.key is None:
            round_.stats.invalid_records += 1
            return False
        if record.offset < round_.offset_map.get(record.key):
            return False  # a later record has the key
        if record.value is not None:
            return True
        return not batch.has_delete_horizon or round_.now_ms < batch.delete_horizon_ms

    def _swap(self, plog, group: list[LogSegment], cleaned: CleanedSegment, now_ms: int):
        """Replace ``group`` by ``cleaned`` on disk and in ``plog`` (see the module docstring)."""
        directory = plog.dir
        base = cleaned.base_offset
        deleted = files.DELETED_FILE_SUFFIX
        first = group[0]
        first.offset_index.rename_to(files.index_file(directory, base, deleted))
        files.fsync_dir(directory)
        cleaned.rename_log(files.SWAP_FILE_SUFFIX)  # the commit point
        files.fsync_dir(directory)
        cleaned.rename_indexes(files.SWAP_FILE_SUFFIX)
        files.fsync_dir(directory)
        due = now_ms + plog.config.file_delete_delay_ms
        for seg in group:
            b = seg.base_offset
            seg.log.rename_to(files.log_file(directory, b, deleted))
            if seg is not first:
                seg.offset_index.rename_to(files.index_file(directory, b, deleted))
            seg.time_index.rename_to(files.time_index_file(directory, b, deleted))
            seg.txn_index.rename_to(files.txn_index_file(directory, b, deleted))
            plog._pending_deletes.append((due, RetiredSegment(seg)))
        files.fsync_dir(directory)
        cleaned.rename_indexes("")
        cleaned.rename_log("")
        files.fsync_dir(directory)
        first_ts = cleaned.first_batch_timestamp
        cleaned.close()

        segment = LogSegment(directory, base, plog.segment_config, created_ms=now_ms)
        segment.on_become_inactive()
        segment.rolling_based_timestamp = first_ts
        i = plog._bases.index(base)
        plog.segments[i : i + len(group)] = [segment]
        plog._bases[i : i + len(group)] = [base]
        return segment


def _segment_ends(segments: list[LogSegment]) -> list[int]:
    """For each segment, a bound above its offsets: the next segment's base (or none)."""
    return [s.base_offset for s in segments[1:]] + [1 << 63]


def _first_batch_timestamp(seg: LogSegment) -> int:
    first = seg.log.batch_at(0) if seg.size else None
    return first.max_timestamp if first is not None else NO_TIMESTAMP


def _group_segments(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Consecutive segments whose log and indexes together fit one segment (Kafka's
    ``groupSegmentsBySize``); a group also spans at most 2**31 - 1 offsets."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes
        time_index_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < len(segments):
            seg = segments[i]
            # The last offset seg may hold: bounded by the next base (or the round's end).
            last = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if (
                log_size + seg.size > max_size
                or index_size + seg.offset_index.size_in_bytes > max_index_size
                or time_index_size + seg.time_index.size_in_bytes > max_index_size
                or (seg.size > 0 and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.offset_index.size_in_bytes
            time_index_size += seg.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups
