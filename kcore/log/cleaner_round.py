"""One round of log compaction as work that may leave the thread that owns the log.

Kafka's cleaner threads read and rewrite segments without the log's lock: the segments a
round reads are inactive, so no one writes them, and the round's output only replaces them
at the end, after a check. kcore does the same in three steps (the first and the last in
:class:`~kcore.log.cleaner.LogCleaner`, the middle one here):

1. ``LogCleaner.prepare`` (the thread that owns the log): choose the range, and take what
   the round needs from the log *as it is then* into a :class:`CleaningRound` — a
   :class:`SegmentView` of every inactive segment the round may read (its own duplicate of
   the ``.log`` file descriptor, the sizes, the next offset, where the map's scan starts),
   the aborted transactions overlapping the range, the active producers and the settings;
2. :meth:`CleaningRound.run` (any one thread, once): build the offset map, filter every group
   of segments into a new ``<base>.*.cleaned`` segment and make it durable. It touches no
   object of the log: it reads through its duplicated descriptors (still valid when the log
   closes, renames or deletes the originals) and writes only files of its own;
3. ``LogCleaner.commit`` (the owning thread again): if every segment the round read is still
   in the log, inactive and of the size read, swap the new segments in; otherwise (retention,
   truncation, deletion of the log, a change of ``cleanup.policy`` meanwhile) discard them.
   The map may have dropped a record because of a later one that is no longer there, so a
   round is swapped in whole or not at all.

:meth:`CleaningRound.abort` (any thread) makes ``run`` stop at its next batch; the round is
then discarded. A crash at any point before the swap leaves only ``.cleaned`` files, which the
log loader deletes.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from kcore.log.cleaner_output import CleanedSegment, build_empty_batch, rebuild_batch
from kcore.log.errors import LogError
from kcore.log.file_records import FileRecords
from kcore.log.producer_state import has_producer_id
from kcore.log.segment import LogSegment, SegmentConfig
from kcore.log.transaction_index import AbortedTxn, TransactionIndex
from kcore.record.batch import RecordBatch
from kcore.record.control import ControlRecordType, read_control_record
from kcore.record.records import Record

INT32_MAX = 0x7FFFFFFF


class CleaningAborted(LogError):
    """:meth:`CleaningRound.abort` was called: the round stopped and its output was deleted."""


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


def _overlapping(txns: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    """The transactions of ``txns`` overlapping ``[start, upper)`` (the transaction index's
    own rule, ``TransactionIndex.search_aborted``)."""
    return [t for t in txns if t.last_offset >= start and t.first_offset < upper]


# -- the round -------------------------------------------------------------------------------


@dataclass(slots=True)
class SegmentView:
    """An inactive segment as a round saw it when prepared. ``records`` is the round's own
    handle on the ``.log`` file (a duplicated descriptor, closed by the round)."""

    segment: LogSegment
    base_offset: int
    records: FileRecords
    size: int
    index_bytes: int
    time_index_bytes: int
    next_offset: int  # the offset after its last batch
    map_position: int  # where the offset map's scan of it starts


@dataclass(slots=True)
class CleaningRound:
    """The work of one round (see the module docstring); made by ``LogCleaner.prepare``.

    After :meth:`run`: ``outputs`` holds each group of views with its finished cleaned
    segment, ``end_offset`` the new first dirty offset, ``error`` what stopped the round (the
    outputs are then deleted), ``stats`` what was read and written.
    """

    key: object
    directory: object
    segment_config: SegmentConfig
    views: list[SegmentView]  # every inactive segment below the first uncleanable offset
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: list[AbortedTxn]  # overlapping [first view's base, first uncleanable offset)
    # producer id -> (last data offset or None, epoch) of every producer in producer state
    active_producers: dict[int, tuple[int | None, int]]
    now_ms: int
    delete_retention_ms: int
    max_segment_bytes: int
    max_index_bytes: int
    max_map_entries: int
    stats: object  # a CleanerStats
    outputs: list[tuple[list[SegmentView], CleanedSegment]] = field(default_factory=list)
    end_offset: int = -1
    error: BaseException | None = None
    aborted_flag: bool = False
    ran: bool = False
    offset_map: OffsetMap | None = None
    txn: CleanedTransactionMetadata = field(default_factory=CleanedTransactionMetadata)

    def abort(self) -> None:
        """Stop :meth:`run` at its next batch (any thread); the round will be discarded."""
        self.aborted_flag = True

    def _check_abort(self) -> None:
        if self.aborted_flag:
            raise CleaningAborted(f"cleaning {self.key} was aborted")

    def run(self) -> None:
        """Build the offset map and write every group's cleaned segment, durably. Never
        raises: what went wrong is in ``error`` (and nothing of the output is left)."""
        if self.ran:
            raise RuntimeError("a cleaning round runs once")
        self.ran = True
        started = time.monotonic()
        try:
            self.offset_map = self._build_offset_map()
            self.end_offset = self.offset_map.latest_offset + 1
            self.stats.map_entries = len(self.offset_map)
            for group in self._groups(self.end_offset):
                self.outputs.append((group, self._clean_group(group)))
        except BaseException as e:  # noqa: BLE001 - handed to the owning thread in ``error``
            self.error = e
            self.delete_outputs()
        finally:
            self.stats.duration_ms += (time.monotonic() - started) * 1000

    # -- what the owning thread does after run -----------------------------------------------

    def is_current(self, plog) -> bool:
        """Whether every segment the round read is still ``plog``'s, inactive, unchanged."""
        if not plog.config.compact:
            return False
        read = [v for group, _ in self.outputs for v in group]
        if not read:
            return True
        segments = plog.segments
        try:
            first = next(i for i, s in enumerate(segments) if s is read[0].segment)
        except StopIteration:
            return False
        if first + len(read) > len(segments) - 1:  # the last one is the active segment
            return False
        return all(
            segments[first + i] is v.segment and v.segment.size == v.size
            for i, v in enumerate(read)
        )

    def delete_outputs(self, start: int = 0) -> None:
        """Delete the cleaned segments of groups ``start`` onward (not swapped in)."""
        for _, cleaned in self.outputs[start:]:
            cleaned.delete()
        del self.outputs[start:]

    def close(self) -> None:
        """Close the round's handles on the original segments."""
        for view in self.views:
            view.records.close()

    # -- the offset map ------------------------------------------------------------------

    def _build_offset_map(self) -> OffsetMap:
        """Map each key of the dirty range to its last offset (Kafka's ``buildOffsetMap``)."""
        start, end = self.first_dirty_offset, self.first_uncleanable_offset
        stats = self.stats
        offset_map = OffsetMap(self.max_map_entries)
        dirty = [
            v for i, v in enumerate(self.views) if v.base_offset < end and self._bound(i) > start
        ]
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(_overlapping(self.aborted, start, end))
        for i, view in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            for _, batch in view.records.full_batches_from(view.map_position):
                self._check_abort()
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

    def _bound(self, i: int) -> int:
        """A bound above the offsets of view ``i``: the next segment's base (or the range's
        end, where the active segment or an uncleanable one begins)."""
        views = self.views
        return views[i + 1].base_offset if i + 1 < len(views) else self.first_uncleanable_offset

    # -- rewriting -----------------------------------------------------------------------

    def _groups(self, end_offset: int) -> list[list[SegmentView]]:
        """Consecutive segments below ``end_offset`` whose log and indexes together fit one
        segment (Kafka's ``groupSegmentsBySize``); a group spans at most 2**31 - 1 offsets."""
        views = [v for v in self.views if v.base_offset < end_offset]
        groups: list[list[SegmentView]] = []
        i = 0
        while i < len(views):
            group = [views[i]]
            log_size, index_size, time_size = (
                views[i].size,
                views[i].index_bytes,
                views[i].time_index_bytes,
            )
            i += 1
            while i < len(views):
                view = views[i]
                last = self._bound(i) - 1  # the last offset it may hold
                if (
                    log_size + view.size > self.max_segment_bytes
                    or index_size + view.index_bytes > self.max_index_bytes
                    or time_size + view.time_index_bytes > self.max_index_bytes
                    or (view.size > 0 and last - group[0].base_offset > INT32_MAX)
                ):
                    break
                group.append(view)
                log_size += view.size
                index_size += view.index_bytes
                time_size += view.time_index_bytes
                i += 1
            groups.append(group)
        return groups

    def _clean_group(self, group: list[SegmentView]) -> CleanedSegment:
        """Filter ``group`` into one new durable segment (Kafka's ``cleanSegments``)."""
        cleaned = CleanedSegment(self.directory, group[0].base_offset, self.segment_config)
        txn, stats = self.txn, self.stats
        txn.cleaned_index = cleaned.txn_index
        try:
            for i, view in enumerate(group):
                # The whole segment's range: the new transaction index is rebuilt from it.
                upper = group[i + 1].base_offset if i + 1 < len(group) else view.next_offset
                txn.add_aborted_transactions(_overlapping(self.aborted, view.base_offset, upper))
                end = 0
                for position, batch in view.records.full_batches_from(0):
                    self._check_abort()
                    end = position + batch.size_in_bytes
                    stats.bytes_read += batch.size_in_bytes
                    out = self._filter_batch(batch)
                    if out is not None:
                        kept = RecordBatch(out)
                        cleaned.append(out, kept.last_offset, kept.max_timestamp)
                        stats.bytes_written += len(out)
                if end != view.size:
                    raise LogError(
                        f"{view.records.path}: {view.size - end} bytes after byte {end} are not "
                        "a whole record batch; the segment cannot be cleaned"
                    )
                stats.segments_read += 1
            cleaned.finish()
        except BaseException:
            cleaned.delete()
            raise
        finally:
            txn.cleaned_index = None
        return cleaned

    def _filter_batch(self, batch: RecordBatch):
        """The bytes to write for ``batch`` (itself, rebuilt, or empty), or None to drop it
        (Kafka's ``checkBatchRetention`` and ``filterTo``)."""
        txn, stats, now_ms = self.txn, self.stats, self.now_ms
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
            last = self.active_producers.get(batch.producer_id)
            if last is not None:
                last_data_offset, epoch = last
                if last_data_offset is not None:
                    last_of_producer = batch.last_offset == last_data_offset
                else:
                    last_of_producer = is_control and batch.producer_epoch == epoch
        # And the last batch of the round, so that its last offset is not lost.
        retain_empty = last_of_producer or batch.next_offset == self.first_uncleanable_offset
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
            kept = [r for r in records if self._keep_record(batch, r)]
        stats.records_written += len(kept)
        if kept:
            has_tombstone = any(r.value is None for r in kept)
            marker_may_go = can_discard and is_control
            needs_horizon = (has_tombstone or marker_may_go) and not batch.has_delete_horizon
            if len(kept) == len(records) and not needs_horizon:
                return bytes(batch.buffer)
            horizon = (
                now_ms + self.delete_retention_ms
                if needs_horizon
                else (batch.delete_horizon_ms if batch.has_delete_horizon else None)
            )
            return rebuild_batch(batch, kept, horizon)
        if retain_empty:
            return build_empty_batch(batch)
        return None

    def _keep_record(self, batch: RecordBatch, record: Record) -> bool:
        """Kafka's ``shouldRetainRecord`` for a record of a data batch."""
        offset_map = self.offset_map
        if record.offset > offset_map.latest_offset:
            return True  # beyond what the map covers
        if record.key is None:
            self.stats.invalid_records += 1
            return False
        if record.offset < offset_map.get(record.key):
            return False  # a later record has the key
        if record.value is not None:
            return True
        return not batch.has_delete_horizon or self.now_ms < batch.delete_horizon_ms
