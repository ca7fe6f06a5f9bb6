"""Reads of a partition log: fetches bounded by the isolation level, aborted transactions for
read_committed, and the look-ups by timestamp.

:class:`LogReads` is a mixin of :class:`~kcore.log.partition_log.PartitionLog` (it uses its
``segments``, ``_bases``, ``log_start_offset``, ``log_end_offset``, ``high_watermark``,
``last_stable_offset`` and ``name``), kept apart from the append protocol as
:mod:`kcore.log.log_retention` is: a read changes nothing, so it can be read without the rest.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field

from kcore.log.file_records import FileSlice
from kcore.log.segment import LogSegment
from kcore.log.transaction_index import AbortedTxn
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import NO_TIMESTAMP

__all__ = ["FetchDataInfo", "FetchIsolation", "LogReads"]


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"  # followers (and the mirror's destination followers)
    HIGH_WATERMARK = "high_watermark"  # read_uncommitted consumers
    TXN_COMMITTED = "txn_committed"  # read_committed consumers


_LOG_END = FetchIsolation.LOG_END
_HIGH_WATERMARK = FetchIsolation.HIGH_WATERMARK


@dataclass(slots=True)
class FetchDataInfo:
    fetch_offset: int
    records: list[FileSlice] = field(default_factory=list)
    aborted_transactions: list[AbortedTxn] | None = None  # only for TXN_COMMITTED

    @property
    def size(self) -> int:
        return sum(s.length for s in self.records)


class LogReads:
    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (the last one at or below it)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        *,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Batches from ``fetch_offset`` up to ``max_bytes`` (a whole first batch when
        ``min_one_batch``), bounded by the LEO, HW or LSO for the isolation level.

        Raises :class:`KafkaError` OFFSET_OUT_OF_RANGE outside ``[log start, LEO]``.
        """
        leo = self.log_end_offset
        if (
            isolation is _LOG_END or (isolation is _HIGH_WATERMARK and self.high_watermark == leo)
        ) and self.log_start_offset <= fetch_offset < leo:
            # The common case, straight: a read bounded by the log end (followers; consumers
            # once the high watermark is the LEO) that the segment holding the offset answers.
            # Otherwise (or if that segment has nothing for it), the general loop below.
            i = bisect.bisect_right(self._bases, fetch_offset) - 1
            got = self.segments[i if i > 0 else 0].read(
                fetch_offset, max_bytes, None, min_one_batch
            )
            if got is not None:
                return FetchDataInfo(fetch_offset, [got[0]])
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} is out of range for {self.name}: log start offset "
                f"{self.log_start_offset}, log end offset {leo}",
            )
        if isolation is _LOG_END:
            max_offset = leo
        elif isolation is FetchIsolation.HIGH_WATERMARK:
            max_offset = self.high_watermark
        else:
            max_offset = self.last_stable_offset
        committed = isolation is FetchIsolation.TXN_COMMITTED
        if fetch_offset < max_offset:
            segments = self.segments
            last = len(segments) - 1
            # _segment_index, inline (every fetch).
            i = bisect.bisect_right(self._bases, fetch_offset) - 1
            if i < 0:
                i = 0
            offset = fetch_offset
            while i <= last:
                seg = segments[i]
                if seg.base_offset >= max_offset:
                    break
                max_position = None
                # Bound the read by the position of max_offset when it lies inside this segment
                # (a bound at the log end needs no lookup: the segment ends there).
                if max_offset < leo and (i == last or segments[i + 1].base_offset > max_offset):
                    bound = seg.translate_offset(max_offset)
                    max_position = bound.position if bound is not None else None
                got = seg.read(offset, max_bytes, max_position, min_one_batch)
                if got is not None:
                    slice_ = got[0]
                    if not committed:
                        return FetchDataInfo(fetch_offset, [slice_])
                    end = self._offset_after(seg, slice_)
                    aborted = self._collect_aborted(fetch_offset, end, i)
                    return FetchDataInfo(fetch_offset, [slice_], aborted)
                if i < last:
                    offset = segments[i + 1].base_offset
                i += 1
        return FetchDataInfo(fetch_offset, [], [] if committed else None)

    def _offset_after(self, seg: LogSegment, slice_: FileSlice) -> int:
        last = None
        for b in seg.log.batches_from(slice_.position, slice_.position + slice_.length):
            last = b
        return self.log_end_offset if last is None else last.last_offset + 1

    def _collect_aborted(self, fetch_offset: int, upper_bound: int, start: int) -> list[AbortedTxn]:
        out: list[AbortedTxn] = []
        for seg in self.segments[start:]:
            result = seg.collect_aborted_txns(fetch_offset, upper_bound)
            out += result.aborted
            if result.is_complete:
                break
        return out

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """ListOffsets by timestamp: the first offset with a timestamp >= ``timestamp``."""
        for seg in self.segments[self._segment_index(self.log_start_offset) :]:
            if seg.max_timestamp < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP: the largest timestamp and the offset that carried it."""
        best = (NO_TIMESTAMP, -1)
        for seg in self.segments:
            if seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg.offset_of_max_timestamp)
        return best
