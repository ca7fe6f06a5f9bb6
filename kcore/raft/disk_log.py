"""The replicated metadata log on disk: the :class:`~kcore.raft.log.RaftLog` protocol on a kcore
partition log in ``<metadata.log.dir>/__cluster_metadata-0`` (Kafka's ``KafkaMetadataLog``).

Byte layout
-----------
The folder is an ordinary partition folder of kcore's storage engine (``kcore/log``):
``<20-digit base offset>.log`` segments of record batches v2 with their ``.index`` /
``.timeindex`` / ``.txnindex`` files, and ``leader-epoch-checkpoint``. Each
:meth:`DiskRaftLog.append` writes its entries as :func:`kcore.raft.records.encode_entries`
frames them for Fetch: data entries as records (null key, the entry as value) of one batch (up
to 512 records), a control entry (the ``LeaderChangeMessage`` a new leader appends) as a
control batch of its own; every batch's partition leader epoch is the epoch of the append, so
the partition's leader-epoch cache is exactly Raft's epoch cache. The same folder holds the
``quorum-state`` file and the ``.checkpoint`` snapshots (:mod:`kcore.raft.snapshot_files`),
which the storage engine ignores.

Settings (:func:`metadata_log_config`): segments roll at ``metadata.log.segment.bytes`` (1 GiB;
``internal.segment.bytes`` lets tests roll every few KiB); no retention by time or size — only
a snapshot moves the log start (:meth:`delete_before`), as in Kafka; no background flush — the
Raft core calls :meth:`flush` (fsync) before it counts or acknowledges entries.

Flushing off the event loop (:attr:`DiskRaftLog.defer_flush`, set by the driver): an fsync of
this small file costs 0.2 ms on an idle disk but 50-140 ms on the bench VM while the page
cache holds a few hundred MB of produced data (ext4 commits its journal, data=ordered), and
the driver runs on the broker's only event-loop thread. With ``defer_flush`` on,
:meth:`flush` only notes that the log needs one; the driver then takes a :class:`FlushJob`
(:meth:`begin_flush`: duplicated descriptors of the segments to sync and the end offset they
cover), runs it in a worker thread, and :meth:`finish_flush` advances the recovery point. The
driver lets nothing the core decided leave the process (responses, requests, commits handed
to listeners, :meth:`~kcore.raft.driver.RaftDriver.propose` returning) and calls the core no
more until that job is done, so every entry is still durable before this node acknowledges or
counts it.

After a crash
-------------
The log is always opened as after an **unclean** shutdown, with recovery point 0, as Kafka opens
its metadata log (``lastShutdownClean = false``): every segment is rescanned, CRCs checked, a
torn or unflushed tail cut, the indexes and the epoch cache rebuilt from the batches. The
metadata log is small (a snapshot bounds it), so the scan is cheap, and no clean-shutdown
marker has to be trusted. Because of that, :meth:`flush` fsyncs only the ``.log`` files: the
indexes are never trusted after a restart.

The log start is not checkpointed either: it is the latest snapshot's end offset, which
:meth:`DiskRaftLog.open` receives. If that snapshot is ahead of the log (a follower crashed
between installing a fetched snapshot and resetting its log), the log is reset to the snapshot,
as Kafka's ``truncateToLatestSnapshot`` does.

Who may call it: the Raft core only (through the protocol), and the driver to open and close
it. Not thread-safe.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kcore.log.config import LogConfig
from kcore.log.log_loader import load_log
from kcore.log.log_reads import FetchIsolation
from kcore.log.partition_log import PartitionLog
from kcore.raft.log import LogEntry, OffsetAndEpoch, RaftRecord
from kcore.raft.records import decode_entries, encode_entries
from kcore.record import iter_batches

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "DiskRaftLog",
    "FlushJob",
    "METADATA_LOG_DIR_NAME",
    "metadata_log_config",
]

log = logging.getLogger(__name__)

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
# Kafka's metadata.log.segment.bytes default.
DEFAULT_SEGMENT_BYTES = 1 << 30


def metadata_log_config(
    segment_bytes: int | None = None, *, extra: Mapping[str, str] | None = None
) -> LogConfig:
    """The storage settings of the metadata log (see the module docstring).

    ``segment_bytes`` below 1 MiB (``segment.bytes``' floor) goes to ``internal.segment.bytes``,
    Kafka's testing-only key; ``extra`` adds topic-level overrides.
    """
    size = DEFAULT_SEGMENT_BYTES if segment_bytes is None else int(segment_bytes)
    overrides = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        # Segments below a snapshot go at once: no fetch can hold a slice of them (reads are
        # synchronous and copied into Fetch answers).
        "file.delete.delay.ms": "0",
    }
    if size >= 1 << 20:
        overrides["segment.bytes"] = str(size)
    else:
        overrides["internal.segment.bytes"] = str(size)
    overrides.update(extra or {})
    return LogConfig.from_layers(overrides)


class FlushJob:
    """An fsync of the metadata log's segments, safe to run in a worker thread (it touches
    only its own duplicated descriptors); see :meth:`DiskRaftLog.begin_flush`."""

    __slots__ = ("fds", "end_offset", "generation")

    def __init__(self, fds: list[int], end_offset: int, generation: int) -> None:
        self.fds = fds
        self.end_offset = end_offset
        self.generation = generation

    def run(self) -> None:
        """fsync every segment, then close the duplicates (also when an fsync fails)."""
        try:
            for fd in self.fds:
                os.fsync(fd)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []


class DiskRaftLog:
    """A :class:`~kcore.raft.log.RaftLog` on a :class:`~kcore.log.partition_log.PartitionLog`.

    Open it with :meth:`open`; see the module docstring for the layout and crash behaviour.
    """

    def __init__(self, plog: PartitionLog, start_epoch: int) -> None:
        self.plog = plog
        # The epoch of the snapshot the log starts at (0 for a log starting at offset 0): the
        # last fetched epoch of an empty log, and the floor of end_offset_for_epoch.
        self._start_epoch = start_epoch
        # flush() only records the need (see the module docstring); the owner then runs
        # begin_flush() / FlushJob.run() / finish_flush().
        self.defer_flush = False
        self.flush_pending = False
        # Bumped by every truncation: a flush job that began before one must not move the
        # recovery point past what the truncation left.
        self._generation = 0

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        latest_snapshot: OffsetAndEpoch | None = None,
        config: LogConfig | None = None,
        segment_bytes: int | None = None,
    ) -> DiskRaftLog:
        """Open (or create) the log in ``directory`` (``.../__cluster_metadata-0``).

        ``latest_snapshot`` is the id of the newest complete snapshot (the log starts at its
        end offset). ``config`` defaults to :func:`metadata_log_config(segment_bytes)
        <metadata_log_config>`.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if config is None:
            config = metadata_log_config(segment_bytes)
        start = latest_snapshot.offset if latest_snapshot is not None else 0
        plog = load_log(
            directory, config, recovery_point=0, log_start_offset=start, had_clean_shutdown=False
        )
        self = cls(plog, latest_snapshot.epoch if latest_snapshot is not None else 0)
        if latest_snapshot is not None:
            self._align_with_snapshot(latest_snapshot)
        return self

    def _align_with_snapshot(self, sid: OffsetAndEpoch) -> None:
        plog = self.plog
        last_epoch = plog.epoch_cache.latest_epoch
        if plog.log_end_offset > plog.log_start_offset and last_epoch is not None:
            behind = sid.epoch > last_epoch or (
                sid.epoch == last_epoch and sid.offset > plog.log_end_offset
            )
        else:
            behind = sid.offset != plog.log_start_offset
        if behind or sid.offset > plog.log_end_offset:
            log.info(
                "%s: the log [%d, %d) is behind snapshot %s: restarting it at the snapshot",
                plog.name,
                plog.log_start_offset,
                plog.log_end_offset,
                sid,
            )
            self.reset_to_snapshot(sid)
        elif plog.log_start_offset < sid.offset:
            self.delete_before(sid)

    # -- RaftLog ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.plog.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.plog.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        if self.plog.log_end_offset > self.plog.log_start_offset:
            latest = self.plog.epoch_cache.latest_epoch
            if latest is not None:
                return latest
        return self._start_epoch

    def append(self, records: Sequence[RaftRecord], epoch: int) -> range:
        if epoch < self.last_fetched_epoch:
            raise ValueError(
                f"epoch {epoch} is below the log's last epoch {self.last_fetched_epoch}"
            )
        first = self.end_offset
        if not records:
            return range(first, first)
        entries = [
            LogEntry(first + i, epoch, bytes(rec.value), rec.control_type)
            for i, rec in enumerate(records)
        ]
        self.plog.append_as_follower(encode_entries(entries), now_ms=0)
        return range(first, first + len(entries))

    def read(self, from_offset: int, max_bytes: int) -> list[LogEntry]:
        start, end = self.start_offset, self.end_offset
        if not start <= from_offset <= end:
            raise ValueError(f"offset {from_offset} is outside the log [{start}, {end}]")
        if from_offset == end:
            return []
        info = self.plog.read(from_offset, max(1, max_bytes), FetchIsolation.LOG_END)
        data = b"".join(s.read() for s in info.records)
        # The first batch may begin before from_offset (a cut head, or a read mid-batch).
        return [e for e in decode_entries(data) if e.offset >= from_offset]

    def truncate_to(self, offset: int) -> None:
        start = self.start_offset
        if offset < start:
            raise ValueError(f"cannot truncate to {offset}, below the log start {start}")
        if offset >= self.end_offset:
            return
        # The storage engine cuts whole batches only; Raft needs the exact offset (a follower
        # appends a fetched run of one epoch as one batch, and a leader's epoch may end inside
        # it). So the batch holding `offset` goes whole and its entries below `offset` are
        # written back, with their epoch.
        self._generation += 1
        base = self._batch_base(offset)
        if base >= offset:
            self.plog.truncate_to(offset)
            return
        keep = self._entries_between(max(base, start), offset)
        if base < start:
            # The batch also straddles the log start (cut by a snapshot): below the start
            # nothing may be truncated, so the log restarts at it.
            self.plog.truncate_fully_and_start_at(start)
        else:
            self.plog.truncate_to(base)
        if keep:
            self.plog.append_as_follower(encode_entries(keep), now_ms=0)

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        offset = snapshot_id.offset
        plog = self.plog
        if offset <= plog.log_start_offset:
            return
        if offset > self.end_offset:
            raise ValueError(f"cannot cut the head at {offset}, past the log end {self.end_offset}")
        # As DeleteRecords does: the log start moves (the epoch cache is cut there), then every
        # segment wholly below it is deleted. The partition's own high watermark is unused by
        # Raft; it only has to let the start move.
        plog.update_high_watermark(max(plog.high_watermark, offset))
        plog.increment_log_start_offset(offset)
        plog.delete_old_segments(now_ms=0)
        plog.delete_pending_segments(0, force=True)
        self._start_epoch = snapshot_id.epoch

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self._generation += 1
        self.plog.truncate_fully_and_start_at(snapshot_id.offset)
        self._start_epoch = snapshot_id.epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        # The same answers as MemoryRaftLog (see the protocol's docstring), from the partition's
        # leader-epoch cache. An entry starting at the log end (a log emptied by a snapshot)
        # describes no entry: it is left out.
        end = self.end_offset
        last = self.last_fetched_epoch
        if epoch >= last:
            return OffsetAndEpoch(end, last)
        cache = [e for e in self.plog.epoch_cache.epoch_entries() if e.start_offset < end]
        epochs = [e.epoch for e in cache]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return OffsetAndEpoch(end, last)
        higher_start = cache[higher].start_offset
        if higher == 0:
            if self._start_epoch <= epoch and self.start_offset > 0:
                return OffsetAndEpoch(higher_start, self._start_epoch)
            return OffsetAndEpoch(higher_start, epoch)
        return OffsetAndEpoch(higher_start, epochs[higher - 1])

    def flush(self) -> None:
        """fsync the ``.log`` files written since the last flush (the indexes are rebuilt after
        any restart, see the module docstring), then advance the recovery point.

        With :attr:`defer_flush` on, only note that a flush is needed: the owner makes it with
        :meth:`begin_flush` before anything depending on it happens."""
        if self.defer_flush:
            self.flush_pending = True
            return
        plog = self.plog
        for seg in plog.segments[self._unflushed_from() :]:
            seg.log.flush()
        plog.recovery_point = plog.log_end_offset
        self.flush_pending = False

    def begin_flush(self) -> FlushJob | None:
        """The pending flush as a job a worker thread may run (None when nothing is pending).

        The job holds duplicates of the segments' descriptors, so a segment closed or deleted
        meanwhile (a snapshot cutting the head) does not disturb it, and it covers everything
        appended before this call. Call :meth:`finish_flush` with it once it ran."""
        if not self.flush_pending:
            return None
        self.flush_pending = False
        plog = self.plog
        fds = []
        try:
            for seg in plog.segments[self._unflushed_from() :]:
                fds.append(os.dup(seg.log.fd))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return FlushJob(fds, plog.log_end_offset, self._generation)

    def finish_flush(self, job: FlushJob) -> None:
        """Record that ``job`` ran: the recovery point moves to the end it covered, unless the
        log was truncated meanwhile (then the next flush starts from the truncation)."""
        if job.generation == self._generation:
            plog = self.plog
            plog.recovery_point = max(plog.recovery_point, min(job.end_offset, plog.log_end_offset))

    def _unflushed_from(self) -> int:
        """Index of the first segment holding data above the recovery point."""
        plog = self.plog
        bases = [seg.base_offset for seg in plog.segments]
        return max(bisect.bisect_right(bases, plog.recovery_point) - 1, 0)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every file (the log is rescanned at the next open anyway)."""
        self.plog.close()  # fsyncs every segment, a pending deferred flush included
        self.flush_pending = False

    # -- helpers ---------------------------------------------------------------------------

    def _batch_base(self, offset: int) -> int:
        """The base offset of the batch holding ``offset`` (``start <= offset < end``)."""
        info = self.plog.read(offset, 1, FetchIsolation.LOG_END)
        for file_slice in info.records:
            for batch in iter_batches(file_slice.read()):
                return batch.base_offset
        return offset

    def _entries_between(self, lo: int, hi: int) -> list[LogEntry]:
        out: list[LogEntry] = []
        pos = lo
        while pos < hi:
            got = self.read(pos, 1 << 20)
            got = [e for e in got if e.offset < hi]
            if not got:
                break
            out += got
            pos = got[-1].offset + 1
        return out

    def entries(self) -> list[LogEntry]:
        """Every entry held, in offset order (for tests and tools)."""
        return self._entries_between(self.start_offset, self.end_offset)

    def epoch_cache(self) -> list[OffsetAndEpoch]:
        """The epoch cache as ``(start offset, epoch)`` pairs (entries of a non-empty log)."""
        end = self.end_offset
        return [
            OffsetAndEpoch(e.start_offset, e.epoch)
            for e in self.plog.epoch_cache.epoch_entries()
            if e.start_offset < end
        ]

    def __repr__(self) -> str:
        return (
            f"DiskRaftLog({self.plog.dir}, start={self.start_offset}, end={self.end_offset}, "
            f"epochs={self.epoch_cache()})"
        )
