"""Log compaction (``cleanup.policy=compact``): Kafka's LogCleaner.

Theory of operation
-------------------
A compacted log is split by the **first dirty offset** (the cleaner checkpoint, kept per log in
:attr:`LogCleaner.checkpoints`; the log manager persists it in ``cleaner-offset-checkpoint``)
into a *clean* head, already deduplicated, and a *dirty* tail. One round of the cleaner
(:meth:`LogCleaner.clean`; steps 2 and 3 may run in another thread, see below):

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

4. **Swaps** each group's new segment in, crash-safely (see below), once it has checked that
   the log still holds every segment the round read, unchanged; reopens it as a
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

A round off the owning thread
-----------------------------
Steps 2 and 3 read only inactive segments (immutable) and write only new files, so, as
Kafka's cleaner threads, they need not hold up the log: :meth:`LogCleaner.prepare` (step 1,
on the thread that owns the log) returns a :class:`~kcore.log.cleaner_round.CleaningRound`
holding its own handles on the segments to read, whose ``run()`` does steps 2 and 3 in any
thread, and :meth:`LogCleaner.commit` (back on the owning thread) does step 4 — or discards
the round when retention, truncation, deletion or a config change altered those segments
meanwhile. :meth:`LogCleaner.clean` does the three in a row.

What is not implemented: Kafka's legacy (magic < 2) delete horizon, the I/O throttle, several
cleaner threads and the pause states of the cleaner manager (the log manager runs one round
at a time, and a log's deletion aborts its round), and splitting a segment whose offsets
overflow.

Who may call it: the log manager. ``prepare`` and ``commit`` on the thread that owns the log
(nothing else may append, truncate or delete segments while they run); ``CleaningRound.run``
anywhere. Pure: no trio; time is passed in as ``now_ms``.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Hashable, Mapping, MutableMapping
from dataclasses import dataclass

from kcore.log import files
from kcore.log.cleaner_output import CleanedSegment, RetiredSegment
from kcore.log.cleaner_round import CleaningRound, SegmentView
from kcore.log.errors import LogError
from kcore.log.segment import LogSegment
from kcore.log.transaction_index import AbortedTxn
from kcore.record.batch import NO_TIMESTAMP

log = logging.getLogger(__name__)


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
    discarded: bool = False  # the log changed while the round ran: nothing was swapped

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_written


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
        """Clean the compacted log with the highest dirty ratio among those due, on this
        thread; None if none is. Raises :class:`LogCleaningError` naming the log."""
        prepared = self.prepare_filthiest(logs, now_ms)
        if prepared is None:
            return None
        prepared.run()
        try:
            return prepared.key, self.commit(logs[prepared.key], prepared)
        except Exception as e:
            raise LogCleaningError(prepared.key, e) from e

    def prepare_filthiest(
        self, logs: Mapping[Hashable, object], now_ms: int
    ) -> CleaningRound | None:
        """:meth:`prepare` a round of the compacted log with the highest dirty ratio among
        those due (Kafka's ``grabFilthiestCompactedLog``); None if none is. Raises
        :class:`LogCleaningError` naming the log."""
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
            prepared = self.prepare(plog, now_ms, key=key)
        except Exception as e:
            raise LogCleaningError(key, e) from e
        return prepared if isinstance(prepared, CleaningRound) else None

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
        """Compact ``plog`` if it is due (or ``force``) and return what was done: the three
        steps of a round (:meth:`prepare`, ``CleaningRound.run``, :meth:`commit`) on this
        thread.

        ``stats.cleaned`` says whether segments were rewritten; ``stats.end_offset`` is the new
        first dirty offset, also stored in :attr:`checkpoints` under ``key``. Raises
        :class:`~kcore.log.errors.LogError` or ``CorruptRecordError`` on a segment that cannot
        be read: nothing is swapped and the checkpoint does not move. An ``OSError`` in the
        middle of a swap leaves files that :func:`complete_interrupted_swaps` resolves at the
        next start (take the log offline).
        """
        prepared = self.prepare(plog, now_ms, key=key, force=force)
        if isinstance(prepared, CleanerStats):
            return prepared
        prepared.run()
        return self.commit(plog, prepared)

    def prepare(
        self, plog, now_ms: int, *, key: Hashable | None = None, force: bool = False
    ) -> CleaningRound | CleanerStats:
        """Step 1 of a round, on the thread that owns ``plog``: a :class:`CleaningRound` of
        the log as it is now, for ``run()`` in any thread; or, when the log is not due (or not
        compacted), the stats saying nothing was done."""
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
        upper = info.first_uncleanable_offset
        segments = [s for s in plog.segments[:-1] if s.base_offset < upper]
        views = []
        try:
            for seg in segments:
                views.append(
                    SegmentView(
                        seg,
                        seg.base_offset,
                        seg.log.duplicate(),
                        seg.size,
                        seg.offset_index.size_in_bytes,
                        seg.time_index.size_in_bytes,
                        seg.next_offset(),
                        seg.offset_index.lookup(info.first_dirty_offset).position,
                    )
                )
            aborted = _collect_aborted(plog, segments[0].base_offset, upper) if segments else []
        except BaseException:
            for view in views:
                view.records.close()
            raise
        stats.duration_ms = (time.monotonic() - started) * 1000
        return CleaningRound(
            key=key,
            directory=plog.dir,
            segment_config=plog.segment_config,
            views=views,
            first_dirty_offset=info.first_dirty_offset,
            first_uncleanable_offset=upper,
            aborted=aborted,
            active_producers={
                pid: (None if e.last_data_offset < 0 else e.last_data_offset, e.producer_epoch)
                for pid, e in plog.producer_state.producers.items()
            },
            now_ms=now_ms,
            delete_retention_ms=plog.config.delete_retention_ms,
            max_segment_bytes=plog.config.segment_size,
            max_index_bytes=plog.config.segment_index_bytes,
            max_map_entries=self.config.max_map_entries,
            stats=stats,
        )

    def commit(self, plog, prepared: CleaningRound, now_ms: int | None = None) -> CleanerStats:
        """Step 3 of a round, on the thread that owns ``plog``, after ``prepared.run()``: swap
        the cleaned segments in and move the checkpoint; or, when the log changed while the
        round ran (``CleaningRound.is_current``) or the round was aborted, delete them and
        return stats with ``discarded`` set. Raises the error that stopped ``run`` (as
        :meth:`clean` says) when the log did not change meanwhile. ``now_ms`` (default: the
        round's) dates the swapped segments and the old files' deletion."""
        stats = prepared.stats
        now_ms = prepared.now_ms if now_ms is None else now_ms
        started = time.monotonic()
        try:
            if not prepared.ran:
                raise RuntimeError("commit of a cleaning round that did not run")
            if prepared.aborted_flag or not prepared.is_current(plog):
                prepared.delete_outputs()
                stats.discarded = True
                log.info(
                    "%s: the log changed while it was cleaned (or the clean was aborted); "
                    "the cleaned segments are discarded",
                    plog.name,
                )
                return stats
            if prepared.error is not None:
                raise prepared.error
            for i, (group, cleaned) in enumerate(prepared.outputs):
                try:
                    self._swap(plog, [v.segment for v in group], cleaned, now_ms)
                except BaseException:
                    prepared.delete_outputs(i + 1)  # untouched; group i is the swap's to finish
                    raise
                stats.segments_written += 1
        finally:
            prepared.close()
            swap_ms = (time.monotonic() - started) * 1000
            stats.duration_ms += swap_ms
        stats.end_offset = prepared.end_offset
        stats.cleaned = True
        self.checkpoints[prepared.key] = prepared.end_offset
        log.info(
            "%s: cleaned offsets [%d, %d) in %d group(s): %d of %d records kept, %d -> %d bytes "
            "(%.0f ms, the swap %.1f ms of it)",
            plog.name,
            prepared.first_dirty_offset,
            prepared.end_offset,
            len(prepared.outputs),
            stats.records_written,
            stats.records_read,
            stats.bytes_read,
            stats.bytes_written,
            stats.duration_ms,
            swap_ms,
        )
        return stats

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
