"""The log of one partition (Kafka's UnifiedLog): segments, offsets, producer state, epochs.

Theory of operation
-------------------
A partition log is a sequence of :class:`~kcore.log.segment.LogSegment` sorted by base offset;
the last one is *active* and takes appends. Offsets:

* **log start offset** — the first offset a reader may fetch (moved by retention and
  DeleteRecords);
* **log end offset (LEO)** — the offset the next appended record gets;
* **high watermark (HW)** — set by the replica layer (on one broker: the LEO after an
  acknowledged append); consumers read below it;
* **last stable offset (LSO)** — ``min(HW, first offset of the earliest open transaction)``;
  ``read_committed`` consumers read below it.

Two ways in, as in Kafka:

* :meth:`PartitionLog.append_as_leader` — a producer's or coordinator's batches: validated from
  their headers only (magic, CRC, size, offsets, timestamps; records are decoded only for
  compacted topics or a compression conversion), duplicate-checked, stamped with offsets and the
  leader epoch *without copying the payload* (the 61-byte headers are patched copies; the
  payloads are written straight from the request with ``pwritev``), then written. The usual
  request, one batch, is validated in a single pass over its header (``_append_single``, the
  same checks and bytes); anything else, or any failed check, by the general loop.
* :meth:`PartitionLog.append_as_follower` — batches that already have offsets and epochs (a
  follower, or the mirror fetcher copying a source cluster byte for byte): checked for CRC and
  offset continuity, written as they are (or with a replacement header: the mirror's producer
  id rewrite), and recorded in producer state and the epoch cache.

Whatever the way in, one protocol: validate everything (nothing is changed yet), choose the
segment (``_segment_for``: roll if needed), write the bytes, then commit (``_commit_append``:
epoch cache, producer state, log end offset, transaction index, flush). A change to the append
protocol is made once.

Reads return :class:`~kcore.log.file_records.FileSlice` objects (file, position, length) that the
server sends with ``os.sendfile``, plus the aborted transactions a ``read_committed`` consumer
needs to filter.

Who may call it: the replica manager (and coordinators through it). Not thread-safe: the caller
serialises calls per partition. Opening an existing log goes through
:func:`kcore.log.log_loader.load_log`, which recovers what a crash left behind.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from kcore.log.errors import TruncationError
from kcore.log.leader_epoch_cache import LeaderEpochFileCache
from kcore.log.log_reads import LogReads
from kcore.log.log_retention import LogRetention
from kcore.log.log_validator import (
    _TARGET_CODECS,
    HEADER_SIZE,
    LogValidator,
    check_crc,
    frame_batches,
    stamp_header,
)
from kcore.log.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
    has_producer_id,
)
from kcore.log.segment import LogSegment, SegmentConfig
from kcore.log.transaction_index import AbortedTxn
from kcore.log.write_behind import default_write_behind
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    CONTROL_MASK,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    RecordBatch,
    last_sequence,
)
from kcore.record.control import ControlRecordType, read_control_record
from kcore.record.errors import CompressionError, CorruptRecordError

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF

# The single-batch append path (see PartitionLog._append_single).
_unpack_header = BATCH_HEADER.unpack_from
_STAMP = struct.Struct(">qii")  # base offset, batch length, partition leader epoch: bytes 0-15
_STAMPED = _STAMP.size  # the first 16 bytes are written from the stamp, the rest from the batch
_CLIENT = AppendOrigin.CLIENT


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    log_append_time: int = NO_TIMESTAMP  # the time stamped on LogAppendTime topics, else -1
    log_start_offset: int = 0
    record_count: int = 0
    valid_bytes: int = 0
    duplicate: bool = False  # an idempotent retry: nothing was written, offsets are the original


@dataclass(slots=True)
class _ValidatedBatch:
    """One batch of an append, with the patched header to write in place of the original."""

    batch: RecordBatch
    header: bytearray | None  # None: written unchanged
    first_offset: int
    last_offset: int
    max_timestamp: int
    # The producer id as written: the batch's own, or the one a replacement header carries
    # (the mirror's rewritten id, decision D-17).
    producer_id: int


@dataclass(frozen=True, slots=True)
class FollowerHeader:
    """A replacement for the 61-byte header of one batch a follower appends: the bytes (their
    CRC already covering the new header and the batch's payload) and the producer id they
    carry. Built by :func:`kcore.record.batch.rewritten_header` for the cluster mirror."""

    header: bytes | bytearray
    producer_id: int


class PartitionLog(LogRetention, LogReads):
    """See the module docstring. Create with :meth:`create` or ``log_loader.load_log``."""

    def __init__(
        self,
        directory: Path,
        config,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        now_ms: int = 0,
    ) -> None:
        self.dir = Path(directory)
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.high_watermark = log_start_offset
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (delete at ms, segment)
        # What the append path reads from the (frozen) config, resolved once per config object.
        self._append_limits: _AppendLimits | None = None

    # -- construction ----------------------------------------------------------------------

    @property
    def segment_config(self) -> SegmentConfig:
        return SegmentConfig(self.config.index_interval_bytes, self.config.segment_index_bytes)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def name(self) -> str:
        return self.dir.name

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- offsets ---------------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to ``[log start, LEO]``; returns the value set."""
        hw = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.high_watermark = hw
        self.producer_state.on_high_watermark_updated(hw)
        return hw

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        # Data below the log start is gone (DeleteRecords, retention): so is its instability.
        return min(max(first_unstable, self.log_start_offset), self.high_watermark)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch's answer: ``(largest epoch <= epoch, its end offset)``."""
        answer = self.epoch_cache.end_offset_for(epoch, self.log_end_offset)
        return answer.epoch, answer.end_offset

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    # -- appending -------------------------------------------------------------------------

    def append_as_leader(
        self,
        records,
        leader_epoch: int,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, stamp and append a producer's (or coordinator's) batches.

        Raises :class:`KafkaError` with the code the produce response carries
        (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...); nothing is written then.
        """
        limits = self._limits()
        if limits.single_batch_path:
            info = self._append_single(records, leader_epoch, now_ms, origin, limits)
            if info is not None:
                return info
        batches = frame_batches(records, self.name)
        if origin is AppendOrigin.CLIENT and len(batches) == 1:
            dup = self._find_duplicate(batches[0])
            if dup is not None:
                return dup
        validator = LogValidator(self.config, self.name)
        append_time = now_ms if validator.log_append_time else NO_TIMESTAMP
        offset = self.log_end_offset
        validated: list[_ValidatedBatch] = []
        for batch in batches:
            batch = validator.validate(batch, origin, now_ms)
            header, max_ts = stamp_header(batch, offset, leader_epoch, append_time)
            last = offset + batch.last_offset_delta
            validated.append(
                _ValidatedBatch(batch, header, offset, last, max_ts, batch.producer_id)
            )
            offset = last + 1
        info = self._append(validated, origin, now_ms, leader_epoch=leader_epoch)
        info.log_append_time = append_time
        return info

    def _limits(self) -> _AppendLimits:
        """The append limits of the current (frozen) config, resolved once per config."""
        limits = self._append_limits
        if limits is None or limits.config is not self.config:
            self._append_limits = limits = _AppendLimits(self.config)
        return limits

    def _append_single(
        self, records, leader_epoch: int, now_ms: int, origin: AppendOrigin, limits
    ) -> LogAppendInfo | None:
        """The common produce request -- one batch, CreateTime, no recompression, not
        compacted, not a control batch -- validated and appended in one pass over its header.

        Returns None, having changed nothing, when the batch is not of that kind *or fails a
        check*: the general path then handles it and raises the same error it always did.
        The checks are :class:`LogValidator`'s (CRC, codec id, size, record count and last
        offset delta, producer id of a transactional batch, timestamps), the producer-state
        checks and the bytes written are those of the general path; only the order of the
        cheap header checks differs, and it is invisible since nothing is done before all pass.

        Why a separate path: the general one costs ~25 us per append in Python (lists of
        batches, a dozen ``struct`` calls through properties, per-append config reads), four
        times the ``pwritev`` of a 16 KiB batch; this one unpacks the header once.
        """
        view = records if type(records) is memoryview else memoryview(records)
        size = len(view)
        if size < HEADER_SIZE or view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
            return None
        (_, length, _, magic, crc, attributes, delta, first_ts, max_ts, pid, producer_epoch,
         base_sequence, count) = _unpack_header(view)  # fmt: skip
        if (
            magic != 2
            or length + 12 != size  # exactly one whole batch, nothing after it
            or size > limits.max_message_bytes
            or attributes & CONTROL_MASK
            or count < 1
            or delta != count - 1
        ):
            return None
        codec = attributes & 0x07
        if codec > 4 or (limits.target_codec >= 0 and codec != limits.target_codec):
            return None
        is_transactional = attributes & TRANSACTIONAL_MASK != 0
        if pid == NO_PRODUCER_ID:
            if is_transactional:
                return None
        elif origin is _CLIENT:
            # Before validation, as the general path: an idempotent retry gets its offsets.
            dup = self._find_duplicate(RecordBatch._framed(view))
            if dup is not None:
                return dup
        if origin is _CLIENT:
            low = now_ms - limits.timestamp_before_ms
            high = now_ms + limits.timestamp_after_ms
            if (first_ts != NO_TIMESTAMP and (first_ts < low or first_ts > high)) or (
                max_ts != NO_TIMESTAMP and (max_ts < low or max_ts > high)
            ):
                return None
        if crc32c(view[ATTRIBUTES_POS:]) != crc:
            return None

        first = self.log_end_offset
        last = first + delta
        producer = None
        if pid != NO_PRODUCER_ID:
            producer = self.producer_state.prepare_update(pid, origin)
            producer.append_data_batch(
                producer_epoch,
                base_sequence,
                last_sequence(base_sequence, delta),
                max_ts,
                first,
                last,
                is_transactional,
            )
        segment = self._segment_for(size, max_ts, first, last, now_ms, limits)
        segment.append_batch(
            _STAMP.pack(first, length, leader_epoch), view[_STAMPED:], size, last, max_ts
        )
        self._commit_append(
            last,
            count,
            now_ms,
            limits,
            leader_epoch,
            first,
            None if producer is None else (producer,),
        )
        if max_ts > NO_TIMESTAMP:  # as the general path: a timestamp <= -1 reports none
            return LogAppendInfo(
                first, last, max_ts, last, NO_TIMESTAMP, self.log_start_offset, count, size
            )
        return LogAppendInfo(
            first, last, NO_TIMESTAMP, -1, NO_TIMESTAMP, self.log_start_offset, count, size
        )

    def append_as_follower(
        self,
        records,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.REPLICATION,
        headers: list[FollowerHeader | None] | None = None,
    ) -> LogAppendInfo:
        """Append batches that already carry offsets and leader epochs (follower, mirror).

        ``records`` is a buffer of whole batches, or the list of :class:`RecordBatch` a caller
        already framed. Each batch's CRC is checked as received; nothing else about its records
        is looked at (no per-record walk, no offset assignment, no recompression): the leader
        validated them. The bytes are written as they are, except that ``headers[i]``, when
        given, replaces the first 61 bytes of batch ``i`` (the cluster mirror's producer-id
        rewrite, decision D-17: the caller computed the new CRC over the new header and the
        untouched payload); the payload is never copied. The batches' own leader epochs go to
        the epoch cache and their producer ids to producer state.

        Raises :class:`KafkaError` CORRUPT_MESSAGE on a bad batch and UNKNOWN_SERVER_ERROR
        ("unexpected append offset") when the first offset is below the log end offset or
        offsets do not increase; nothing is written then.
        """
        batches = records if type(records) is list else frame_batches(records, self.name)
        if not batches:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"no record batch to append to {self.name}")
        validated = []
        expected = self.log_end_offset
        name = self.name
        for i, batch in enumerate(batches):
            check_crc(batch, name)
            first = batch.base_offset
            if first < expected:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"unexpected append offset {first} in {name}: the log end "
                    f"offset is {self.log_end_offset} and offsets must increase",
                )
            replacement = None if headers is None else headers[i]
            last, max_ts = batch.last_offset, batch.max_timestamp
            if replacement is None:
                v = _ValidatedBatch(batch, None, first, last, max_ts, batch.producer_id)
            else:
                header, pid = replacement.header, replacement.producer_id
                v = _ValidatedBatch(batch, header, first, last, max_ts, pid)
            validated.append(v)
            expected = batch.last_offset + 1
        return self._append(validated, origin, now_ms, leader_epoch=None)

    def _find_duplicate(self, batch: RecordBatch) -> LogAppendInfo | None:
        if not has_producer_id(batch.producer_id):
            return None
        entry = self.producer_state.last_entry(batch.producer_id)
        if entry is None:
            return None
        dup = entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        if dup is None:
            return None
        return LogAppendInfo(
            dup.first_offset,
            dup.last_offset,
            max_timestamp=dup.timestamp,
            log_start_offset=self.log_start_offset,
            record_count=batch.record_count,
            duplicate=True,
        )

    def _update_producers(
        self, validated: list[_ValidatedBatch], origin: AppendOrigin
    ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn], bool]:
        """Validate every batch against producer state (nothing is committed yet)."""
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        pid_reset = False
        for v in validated:
            b = v.batch
            if b.is_control:
                control = read_control_record(b)
                if control is not None and control.type is ControlRecordType.MIRROR_PID_RESET:
                    # D-03: every producer expires; what came before it in this append too.
                    pid_reset = True
                    infos.clear()
                    continue
                if control is None or not control.is_transaction_marker:
                    continue  # other control types carry no producer state
            pid = v.producer_id
            if not has_producer_id(pid):
                continue
            info = infos.get(pid)
            if info is None:
                # A marker is never of origin CLIENT here: the validator refused it already.
                info = infos[pid] = self.producer_state.prepare_update(pid, origin)
            if b.is_control:
                completed.append(
                    info.append_end_txn_marker(
                        control.type is ControlRecordType.COMMIT,
                        control.end_txn_marker().coordinator_epoch,
                        b.producer_epoch,
                        v.first_offset,
                        v.max_timestamp,
                    )
                )
            else:
                info.append_data_batch(
                    b.producer_epoch,
                    b.base_sequence,
                    b.last_sequence,
                    v.max_timestamp,
                    v.first_offset,
                    v.last_offset,
                    b.is_transactional,
                )
        return infos, completed, pid_reset

    def _append(
        self,
        validated: list[_ValidatedBatch],
        origin: AppendOrigin,
        now_ms: int,
        leader_epoch: int | None,
    ) -> LogAppendInfo:
        try:
            infos, completed, pid_reset = self._update_producers(validated, origin)
        except (CorruptRecordError, CompressionError) as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{self.name}: {e}") from None
        size = sum(v.batch.size_in_bytes for v in validated)
        first, last = validated[0].first_offset, validated[-1].last_offset
        limits = self._limits()
        segment = self._segment_for(size, validated[0].max_timestamp, first, last, now_ms, limits)

        # Kafka's shallow offset of the max timestamp: the last offset of the batch carrying it.
        max_ts, offset_of_max = NO_TIMESTAMP, -1
        parts: list = []
        positions: list[tuple[int, int, int]] = []
        rel = 0
        count = 0
        for v in validated:
            if v.max_timestamp > max_ts:
                max_ts, offset_of_max = v.max_timestamp, v.last_offset
            positions.append((v.last_offset, rel, v.max_timestamp))
            rel += v.batch.size_in_bytes
            count += v.batch.record_count
            if v.header is None:
                parts.append(v.batch.buffer)
            else:
                parts += [v.header, v.batch.buffer[HEADER_SIZE:]]
        # The mirror's appends are written behind (kcore/log/write_behind.py): a crash loses
        # nothing the mirror does not fetch again, byte for byte, from the log end offset.
        behind = default_write_behind() if origin is AppendOrigin.MIRROR else None
        segment.append(last, _Gather(parts, size), positions, behind)

        # The bytes are in: the same commit as the single-batch path, with the epoch of every
        # batch (a follower's and the mirror's keep theirs), a MIRROR_PID_RESET, and the
        # transactions the markers complete.
        if leader_epoch is not None:
            self._commit_append(
                last, count, now_ms, limits, leader_epoch, first, infos.values(), pid_reset,
                completed, segment,
            )  # fmt: skip
        else:
            for v in validated:
                self._assign_epoch(v.batch.partition_leader_epoch, v.first_offset)
            self._commit_append(
                last, count, now_ms, limits, -1, first, infos.values(), pid_reset, completed,
                segment,
            )  # fmt: skip
        return LogAppendInfo(
            first,
            last,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_start_offset=self.log_start_offset,
            record_count=count,
            valid_bytes=size,
        )

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        latest = self.epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.epoch_cache.assign(epoch, start_offset)

    def _segment_for(
        self, size: int, max_ts: int, first: int, last: int, now_ms: int, limits
    ) -> LogSegment:
        """The segment an append of ``size`` bytes from offset ``first`` to ``last`` goes to:
        the active one, or a new one when one of Kafka's roll conditions (its
        ``LogSegment.shouldRoll``) holds. Decided once, here, for every append."""
        segment = self.segments[-1]
        seg_size = segment.log.size
        reason = None
        # An empty segment takes any batch: rolling it would only leave an empty file behind.
        if seg_size > 0:
            if seg_size + size > limits.segment_size:
                reason = "segment.bytes"
            elif segment.is_full:
                reason = "index full"
            else:
                # segment.ms, Kafka's timeWaitedForRoll: from the first batch's timestamp when
                # there is one, else from the segment's creation.
                rolling_ts = segment.rolling_based_timestamp
                waited = now_ms - segment.created_ms if rolling_ts is None else max_ts - rolling_ts
                if waited > limits.roll_ms:
                    reason = "segment.ms"
        if reason is None:
            if last - segment.base_offset <= INT32_MAX:
                return segment
            reason = "offset overflow"  # the index stores offsets as 32 bits above the base
        # At the append's first offset, as Kafka's maybeRoll: a follower's (or the mirror's) batch
        # may start far past the log end (a compacted source), so far that its offsets would not
        # fit a segment based at the log end either.
        log.debug("%s: rolling segment at %d (%s)", self.name, first, reason)
        return self.roll(now_ms, first)

    def _commit_append(
        self,
        last: int,
        count: int,
        now_ms: int,
        limits: _AppendLimits,
        epoch: int,
        first: int,
        producers=None,
        pid_reset: bool = False,
        completed: list[CompletedTxn] | None = None,
        segment: LogSegment | None = None,
    ) -> None:
        """The second half of every append, once its bytes are in the segment (the one place
        the append protocol commits, for the leader's single-batch and general paths and the
        follower's): the leader ``epoch`` starting at ``first`` into the epoch cache (-1: the
        caller assigned the batches' own), producer state (a MIRROR_PID_RESET first expires
        every producer, D-03), the log end offset, the aborted transactions into the
        transaction index, and the flush that ``flush.messages`` / ``flush.ms`` ask for."""
        if epoch >= 0:
            latest = self.epoch_cache.latest_epoch
            if latest is None or epoch > latest:
                self.epoch_cache.assign(epoch, first)
        psm = self.producer_state
        if pid_reset:
            psm.reset_producers()
        if producers is not None:
            for info in producers:
                psm.update(info)
        self.log_end_offset = last + 1
        if completed:
            for txn in completed:
                if txn.is_aborted:
                    lso = psm.last_stable_offset_after(txn)
                    segment.txn_index.append(
                        AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
                    )
                psm.complete_txn(txn)
        psm.update_map_end_offset(last + 1)
        unflushed = self._unflushed_messages = self._unflushed_messages + count
        if unflushed >= limits.flush_messages or now_ms - self._last_flush_ms >= limits.flush_ms:
            self.flush(now_ms=now_ms)

    # -- rolling and flushing --------------------------------------------------------------

    def roll(self, now_ms: int, next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``next_offset`` (the offset the next append starts
        at), never below the log end offset. An empty active segment already based there is
        kept; one based lower stays behind, empty, as in Kafka."""
        old = self.active_segment
        base = self.log_end_offset if next_offset is None else max(next_offset, self.log_end_offset)
        if old.size == 0 and old.base_offset == base:
            return old
        # Appends written behind reach the file before the segment is left: after a crash,
        # only the last segment may be short of its data (the loader recovers it).
        old.log.settle()
        old.on_become_inactive()
        self.producer_state.take_snapshot()
        seg = LogSegment(self.dir, base, self.segment_config, created_ms=now_ms)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        return seg

    def flush(self, *, now_ms: int | None = None) -> None:
        """fsync every segment holding data above the recovery point and the leader-epoch
        checkpoint if an append changed it, then advance the recovery point.

        The epoch checkpoint goes first: after a crash, recovery trusts it below the recovery
        point and rebuilds it from the batches above (``LeaderEpochFileCache``).
        """
        self.epoch_cache.flush_if_dirty()
        for seg in self.segments[self._segment_index(self.recovery_point) :]:
            seg.flush()
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms

    # -- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above ``offset`` (a follower diverged, a mirror failed
        back); returns whether anything was removed.

        Raises :class:`~kcore.log.errors.TruncationError` for an offset below the log start
        offset (nothing is removed): the caller wanted :meth:`truncate_fully_and_start_at`.
        """
        if offset >= self.log_end_offset:
            return False
        if offset < self.log_start_offset:
            raise TruncationError(
                f"cannot truncate {self.name} to {offset}: below its log start offset "
                f"{self.log_start_offset} (truncate fully and restart the log instead)"
            )
        keep = self._segment_index(offset)
        if self.segments[keep].base_offset == offset and keep > 0:
            keep -= 1  # the segment starting at offset goes entirely
        for seg in self.segments[keep + 1 :]:
            seg.delete()
        del self.segments[keep + 1 :]
        del self._bases[keep + 1 :]
        self.active_segment.truncate_to(offset)
        # Offsets below the target stay used even where a gap leaves no batch for them (a
        # follower's copy of a compacted log): the next append starts at the target, as in
        # Kafka. A batch straddling the target is kept whole, so the end may lie above it.
        self.log_end_offset = max(self.active_segment.next_offset(), offset)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self._rebuild_producer_state(now_ms=0)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int = 0) -> None:
        """Drop every segment and restart the log empty at ``offset`` (decision D-16)."""
        if not (
            len(self.segments) == 1
            and self.segments[0].base_offset == offset == self.log_end_offset
        ):
            for seg in self.segments:
                seg.delete()
            self.segments = [LogSegment(self.dir, offset, self.segment_config, created_ms=now_ms)]
            self._bases = [offset]
        # else: the one segment is empty and starts at ``offset`` already (a new partition a
        # mirror starts at its source's log start offset): deleting and creating its files
        # again would change nothing but cost a directory fsync per partition.
        self.log_start_offset = self.log_end_offset = offset
        self.recovery_point = self.high_watermark = offset
        self.epoch_cache.clear()
        self.producer_state.truncate_fully()
        self.producer_state.delete_snapshots_after(-1)
        self.producer_state.update_map_end_offset(offset)

    def _rebuild_producer_state(self, now_ms: int) -> None:
        """Reload the newest snapshot at or below the LEO and replay the log after it."""
        from kcore.log.producer_replay import replay_producer_state

        replay_from = self.producer_state.truncate_and_reload(
            self.log_start_offset, self.log_end_offset, now_ms
        )
        replay_producer_state(self, replay_from)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Clean shutdown: snapshot producer state, trim indexes, close every file.

        Each atomic write is two fsyncs, and a broker closes every log it holds: what is
        already on disk is not written again. The epoch checkpoint is written only if dirty,
        and an empty log with no producer and no snapshot gets none (the loader, finding no
        snapshot, replays the log from its start, which is nothing: the same empty state)."""
        state = self.producer_state
        if (
            state.producers
            or self.log_end_offset != self.log_start_offset
            or state.snapshot_offsets()
        ):
            state.take_snapshot()
        self.epoch_cache.flush_if_dirty()
        for seg in self.segments:
            seg.flush()
            seg.close()
        self.delete_pending_segments(0, force=True)
        self.recovery_point = self.log_end_offset

    def delete(self) -> None:
        """Remove the partition's files (topic deletion)."""
        for seg in self.segments:
            seg.delete()
        self.delete_pending_segments(0, force=True)
        for name in os.listdir(self.dir):
            os.unlink(self.dir / name)
        os.rmdir(self.dir)


class _Gather:
    """A list of buffers written with one ``pwritev``: the payloads are never joined."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list, size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size


class _AppendLimits:
    """What the single-batch append path reads from a topic's config, resolved once per
    (frozen) :class:`~kcore.log.config.LogConfig` object instead of once per append."""

    __slots__ = (
        "config",
        "single_batch_path",
        "max_message_bytes",
        "timestamp_before_ms",
        "timestamp_after_ms",
        "target_codec",
        "segment_size",
        "roll_ms",
        "flush_messages",
        "flush_ms",
    )

    def __init__(self, config) -> None:
        self.config = config
        # LogAppendTime rewrites the header and CRC, a compacted topic needs every record's
        # key: both stay on the general path.
        self.single_batch_path = (
            str(config.message_timestamp_type) != "LogAppendTime"
            and "compact" not in config.cleanup_policy
        )
        self.max_message_bytes = config.max_message_bytes
        self.timestamp_before_ms = config.message_timestamp_before_max_ms
        self.timestamp_after_ms = config.message_timestamp_after_max_ms
        target = _TARGET_CODECS.get(config.compression_type)
        self.target_codec = -1 if target is None else int(target)
        self.segment_size = config.segment_size
        self.roll_ms = config.max_segment_ms - config.segment_jitter_ms
        self.flush_messages = config.flush_messages
        self.flush_ms = config.flush_ms
