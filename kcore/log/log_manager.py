"""The log manager: every partition log of this broker across its ``log.dirs``.

Theory of operation
-------------------
Each entry of ``log.dirs`` holds ``meta.properties`` (which cluster and node it belongs to),
four checkpoint files, an optional clean-shutdown marker and one folder per partition
(``<topic>-<partition>``, with ``partition.metadata`` naming the topic id).

* :meth:`LogManager.startup` checks every directory belongs to the same cluster and node, reads
  the checkpoints, notes whether the last shutdown was clean (and removes the marker: a crash
  from now on must be detected next time) and loads every partition folder with
  :func:`~kcore.log.log_loader.load_log` — scanning nothing after a clean shutdown, recovering
  from the recovery point after an unclean one.
* :meth:`LogManager.tick` is called with the time: it flushes logs whose ``flush.ms`` passed,
  applies retention every ``log.retention.check.interval.ms``, compacts the dirtiest compacted
  log that is due (the log cleaner, when enabled: one log per call, and after a call that found
  none due, again ``log.cleaner.backoff.ms`` later), writes the recovery-point, log-start,
  high-watermark and cleaner checkpoints every ``log.flush.offset.checkpoint.interval.ms``,
  and removes segments whose ``file.delete.delay.ms`` expired. By default nothing is fsynced
  on the append path: like Kafka, kcore relies on the page cache and on replication.
* The server does not compact on its event loop (a round over 150 MB took 6 s): as Kafka's
  cleaner thread, it runs the cleaner apart from the rest of the maintenance, in three steps,
  :meth:`LogManager.begin_cleaning` (on the thread that owns the logs), the round's ``run()``
  (in a worker thread: it reads only inactive segments, through its own descriptors, and
  writes new files), and :meth:`LogManager.finish_cleaning` (the owner again: the swap, or
  the round discarded when the log changed meanwhile; see ``kcore/log/cleaner_round.py``).
* The checkpoints cost 6 fsyncs per directory (2.1 ms idle, 13-35 ms with dirty data in the
  page cache), so the server does not write them on its event loop: :meth:`LogManager.maintain`
  is ``tick`` without the cleaner and without the write, returning a :class:`CheckpointWrite`
  (the offsets, read on the caller's thread) whose ``write()`` may run in a worker thread.
  Writes are serialised by a lock and numbered: a write never overwrites the files of a newer
  snapshot (shutdown's own checkpoint may overtake a slow one), so the files only move
  forward. A file whose offsets are what this manager last wrote is not written again (Kafka
  rewrites them every interval; an idle broker need not pay 6 fsyncs a minute for nothing).
* :meth:`LogManager.shutdown` closes every log (producer snapshots, trimmed indexes), writes the
  checkpoints, and writes the clean-shutdown marker last.

Who may call it: the replica manager and the server's maintenance and cleaner tasks, one at a
time, on the thread that owns the logs (only a cleaning round's ``run()`` may go elsewhere).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from kcore.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from kcore.log.cleaner import CleanerStats, LogCleaner, LogCleaningError
from kcore.log.cleaner_round import CleaningRound
from kcore.log.errors import LogError
from kcore.log.log_dirs import (
    PARTITION_METADATA,
    MetaProperties,
    parse_partition_dir_name,
    random_uuid,
    read_partition_metadata,
    take_clean_shutdown,
    write_clean_shutdown,
    write_partition_metadata,
)
from kcore.log.log_loader import create_log, load_log
from kcore.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
# Logs beside the partitions that other owners open (the metadata quorum's log).
INTERNAL_LOG_TOPICS = frozenset({"__cluster_metadata"})

TopicPartition = tuple[str, int]


class _CheckpointWriter:
    """Serialises checkpoint writes of one log manager (any thread) and drops stale ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_sequence = 0
        self.written_sequence = -1  # the newest snapshot written; older ones are skipped
        # What each file holds on disk (durably) since this manager wrote it: an unchanged file
        # is not written again. An idle broker otherwise paid 6 fsyncs (and a worker thread,
        # Trio's idle ones exit after 10 s) every checkpoint interval for nothing.
        self.on_disk: dict[Path, dict[TopicPartition, int]] = {}


class CheckpointWrite:
    """The recovery-point, log-start and high-watermark offsets of every log directory, read at
    one moment (``LogManager.checkpoint_snapshot``), to be written by ``write()``.

    ``write()`` touches only the checkpoint files (no log state), so it may run in a worker
    thread while the event loop goes on. Thread safety: writes of one manager are serialised
    by its lock, and a snapshot older than one already written is skipped, whichever thread
    gets there first.
    """

    __slots__ = ("_writer", "_sequence", "_files")

    def __init__(
        self,
        writer: _CheckpointWriter,
        sequence: int,
        files: list[tuple[OffsetCheckpointFile, dict[TopicPartition, int]]],
    ) -> None:
        self._writer = writer
        self._sequence = sequence
        self._files = files

    def write(self) -> bool:
        """Write every file whose offsets changed since this manager last wrote it (atomically
        and durably: 2 fsyncs each). Returns False, writing nothing, when a newer snapshot was
        written already. Raises ``OSError`` as the writes do.
        """
        writer = self._writer
        with writer.lock:
            if self._sequence < writer.written_sequence:
                return False
            for checkpoint, offsets in self._files:
                if writer.on_disk.get(checkpoint.path) == offsets:
                    continue
                writer.on_disk.pop(checkpoint.path, None)  # unknown until the write is done
                checkpoint.write(offsets)
                writer.on_disk[checkpoint.path] = offsets
            writer.written_sequence = self._sequence
            return True


class LogManager:
    """See the module docstring."""

    def __init__(
        self,
        log_dirs: list[Path | str],
        config_for: Callable[[str], object],
        *,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        cleaner_backoff_ms: int | None = None,
    ) -> None:
        """``config_for(topic)`` returns the topic's resolved ``LogConfig``;
        ``cleaner_backoff_ms`` (``log.cleaner.backoff.ms``) runs the log cleaner, None does
        not (``log.cleaner.enable=false``)."""
        if not log_dirs:
            raise ValueError("log.dirs is empty")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config_for = config_for
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._counts: dict[Path, int] = {}  # partitions per directory (where new ones go)
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.meta: MetaProperties | None = None
        self.had_clean_shutdown = False
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        self._checkpoint_writer = _CheckpointWriter()
        # First dirty offsets keyed by (topic, partition), as cleaner-offset-checkpoint holds.
        self.cleaner = LogCleaner(checkpoints={})
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self._next_clean_ms = 0
        self._uncleanable: set[TopicPartition] = set()
        self._cleaning: CleaningRound | None = None  # the round begun and not finished

    # -- formatting and startup -------------------------------------------------------------

    def format(self, cluster_id: str, node_id: int) -> None:
        """Write ``meta.properties`` into every directory that has none (``kcore format``)."""
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            existing = MetaProperties.read(d)
            if existing is None:
                MetaProperties(cluster_id, node_id, random_uuid()).write(d)
            elif (existing.cluster_id, existing.node_id) != (cluster_id, node_id):
                raise LogError(
                    f"{d} is formatted for cluster {existing.cluster_id} node {existing.node_id}, "
                    f"not cluster {cluster_id} node {node_id}"
                )

    def startup(self, now_ms: int) -> None:
        metas = []
        for d in self.log_dirs:
            meta = MetaProperties.read(d)
            if meta is None:
                raise LogError(f"{d} is not formatted (no meta.properties): run `kcore format`")
            metas.append(meta)
        if len({(m.cluster_id, m.node_id) for m in metas}) != 1:
            raise LogError(
                "log.dirs belong to different clusters or nodes: "
                + ", ".join(
                    f"{d}: {m.cluster_id}/{m.node_id}" for d, m in zip(self.log_dirs, metas)
                )
            )
        self.meta = metas[0]
        clean = [take_clean_shutdown(d) for d in self.log_dirs]
        self.had_clean_shutdown = all(clean)
        for d, was_clean in zip(self.log_dirs, clean):
            self._load_dir(d, was_clean, now_ms)
        self._last_retention_ms = self._last_checkpoint_ms = now_ms
        log.info(
            "loaded %d partition logs from %s (%s shutdown)",
            len(self.logs),
            ", ".join(map(str, self.log_dirs)),
            "clean" if self.had_clean_shutdown else "unclean",
        )

    def _load_dir(self, d: Path, was_clean: bool, now_ms: int) -> None:
        recovery = OffsetCheckpointFile(d / RECOVERY_POINT_OFFSET_CHECKPOINT)
        starts = OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT)
        cleaned = OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT)
        recovery_points = recovery.read() if recovery.path.exists() else {}
        start_offsets = starts.read() if starts.path.exists() else {}
        if cleaned.path.exists():
            self.cleaner.checkpoints.update(cleaned.read())
        for name in sorted(os.listdir(d)):
            path = d / name
            if not path.is_dir():
                continue
            if name.endswith(DELETE_DIR_SUFFIX):  # a deletion interrupted by a crash
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_partition_dir_name(name)
            if tp is None or tp[0] in INTERNAL_LOG_TOPICS:
                continue
            try:
                topic_id = read_partition_metadata(path)
            except LogError as e:  # not fsynced: a crash may leave it empty; it is rewritten
                log.warning("%s; the topic id will be rewritten from the metadata", e)
                topic_id = None
            if topic_id is not None:
                self.topic_ids[tp[0]] = topic_id
            self.logs[tp] = load_log(
                path,
                self.config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                had_clean_shutdown=was_clean,
                now_ms=now_ms,
            )
            self._dir_of[tp] = d
            self._counts[d] = self._counts.get(d, 0) + 1

    # -- partitions --------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, topic_id: uuid.UUID, now_ms: int
    ) -> PartitionLog:
        """The partition's log, created empty (in the least-loaded directory) if missing."""
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            if (
                self.topic_ids.get(topic) != topic_id
                or not (existing.dir / PARTITION_METADATA).exists()
            ):
                write_partition_metadata(existing.dir, topic_id)
                self.topic_ids[topic] = topic_id
            return existing
        d = min(self.log_dirs, key=lambda x: self._counts.get(x, 0))
        path = d / f"{topic}-{partition}"
        plog = create_log(path, self.config_for(topic), now_ms=now_ms)
        write_partition_metadata(path, topic_id)
        self.logs[tp] = plog
        self._dir_of[tp] = d
        self._counts[d] = self._counts.get(d, 0) + 1
        self.topic_ids[topic] = topic_id
        return plog

    def delete_log(self, topic: str, partition: int) -> None:
        """Remove a partition's log (its topic was deleted or the replica moved away)."""
        tp = (topic, partition)
        plog = self.logs.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if plog is None or d is None:
            return
        self.cleaner.forget(tp)
        self._uncleanable.discard(tp)
        if self._cleaning is not None and self._cleaning.key == tp:
            self._cleaning.abort()  # its finish_cleaning finds the log gone and discards it
        self._counts[d] -= 1
        for seg in plog.segments:
            seg.close()
        doomed = d / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(plog.dir, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        if not any(t == topic for t, _ in self.logs):
            self.topic_ids.pop(topic, None)

    def update_configs(self, topics: Iterable[str] | None = None) -> None:
        """Re-read the configs of ``topics`` (every topic when None: a broker default changed)
        into their open logs, in one pass over the logs (one pass per topic was topics x logs:
        10 million steps for a broker of 10,000 partitions over 1,000 topics)."""
        wanted = None if topics is None else set(topics)
        configs: dict[str, object] = {}
        for (topic, _), plog in self.logs.items():
            if wanted is not None and topic not in wanted:
                continue
            config = configs.get(topic)
            if config is None:
                config = configs[topic] = self.config_for(topic)
            plog.config = config

    # -- maintenance -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """``maintain``, a round of the log cleaner when it is due (all of it on this thread,
        as ``clean_filthiest``), and write the checkpoints (on this thread) when they are due."""
        job = self._maintain(now_ms, clean=True)
        if job is not None:
            job.write()

    def maintain(self, now_ms: int) -> CheckpointWrite | None:
        """Flush, retention and pending deletes as ``tick``; when the checkpoints are due,
        return their snapshot for the caller to ``write()`` (in a worker thread if it likes),
        else None. The log cleaner is not run: see :meth:`begin_cleaning`."""
        return self._maintain(now_ms, clean=False)

    def _maintain(self, now_ms: int, *, clean: bool) -> CheckpointWrite | None:
        for plog in self.logs.values():
            if now_ms - plog._last_flush_ms >= plog.config.flush_ms:
                plog.flush(now_ms=now_ms)
            plog.delete_pending_segments(now_ms)
        if now_ms - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now_ms
            for plog in self.logs.values():
                plog.delete_old_segments(now_ms)
        if clean:
            prepared = self.begin_cleaning(now_ms)
            if prepared is not None:
                prepared.run()
                self.finish_cleaning(prepared, now_ms)
        if now_ms - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self._last_checkpoint_ms = now_ms
            return self.checkpoint_snapshot()
        return None

    # -- the log cleaner ---------------------------------------------------------------------

    def cleaner_wait_ms(self, now_ms: int) -> int | None:
        """How long until :meth:`begin_cleaning` may find work (0: now); None when the cleaner
        is disabled."""
        if self.cleaner_backoff_ms is None:
            return None
        return max(0, self._next_clean_ms - now_ms)

    def begin_cleaning(self, now_ms: int) -> CleaningRound | None:
        """One round of Kafka's cleaner thread, first step (on the thread that owns the logs):
        a round of the dirtiest compacted log that is due (by ``min.cleanable.dirty.ratio`` or
        ``max.compaction.lag.ms``), for the caller to ``run()`` — in a worker thread, the
        logs going on meanwhile — and hand to :meth:`finish_cleaning`. None when the cleaner
        is disabled, not due yet (``cleaner_wait_ms``), busy with a round, or finds no log
        due (it then backs off for ``log.cleaner.backoff.ms``)."""
        if (
            self.cleaner_backoff_ms is None
            or now_ms < self._next_clean_ms
            or self._cleaning is not None
        ):
            return None
        logs = {tp: p for tp, p in self.logs.items() if tp not in self._uncleanable}
        try:
            prepared = self.cleaner.prepare_filthiest(logs, now_ms)
        except LogCleaningError as e:
            self._mark_uncleanable(e)
            prepared = None
        if prepared is None:
            self._next_clean_ms = now_ms + self.cleaner_backoff_ms
        self._cleaning = prepared
        return prepared

    def finish_cleaning(self, prepared: CleaningRound, now_ms: int) -> CleanerStats | None:
        """The last step of a round from :meth:`begin_cleaning`, after its ``run()`` (on the
        thread that owns the logs): swap the cleaned segments in, or discard them if the log
        changed or went away meanwhile. When the round cleaned, the cleaner looks again at
        the next call; a log whose round failed is left alone, as Kafka's uncleanable logs."""
        if prepared is not self._cleaning:
            raise ValueError("not the cleaning round in progress")
        self._cleaning = None
        plog = self.logs.get(prepared.key)
        try:
            if plog is None:  # deleted meanwhile (a new log of the same name fails is_current)
                prepared.delete_outputs()
                prepared.close()
                return None
            return self.cleaner.commit(plog, prepared, now_ms)
        except Exception as e:
            self._mark_uncleanable(LogCleaningError(prepared.key, e))
            self._next_clean_ms = now_ms + self.cleaner_backoff_ms
            return None

    def abort_cleaning(self) -> None:
        """Make the round in progress stop at its next batch (any thread): shutdown need not
        wait for a long clean. Its ``finish_cleaning`` then discards it."""
        if self._cleaning is not None:
            self._cleaning.abort()

    def _mark_uncleanable(self, e: LogCleaningError) -> None:
        # As Kafka: the log is left alone (until a restart) rather than failed again and
        # again; its data stays readable, only compaction stops.
        log.error("%s; the log is marked uncleanable", e, exc_info=e.__cause__)
        self._uncleanable.add(e.key)

    def maintenance_period_ms(self) -> int:
        """The shortest period :meth:`maintain` serves: the retention check, the checkpoints,
        and each log's ``flush.ms`` and ``file.delete.delay.ms``. Calling ``maintain`` less often
        delays some of that work; more often finds nothing due."""
        period_ms = min(self.retention_check_interval_ms, self.checkpoint_interval_ms)
        for plog in self.logs.values():
            period_ms = min(period_ms, plog.config.flush_ms, plog.config.file_delete_delay_ms)
        return period_ms

    def checkpoint_snapshot(self) -> CheckpointWrite:
        """The recovery-point, log-start and high-watermark offsets of every dir, as they are
        now, ready to be written (see ``CheckpointWrite``). Reads log state: call it on the
        thread that owns the logs."""
        writer = self._checkpoint_writer
        sequence = writer.next_sequence
        writer.next_sequence += 1
        jobs: list[tuple[OffsetCheckpointFile, dict[TopicPartition, int]]] = []
        for d in self.log_dirs:
            mine = {tp: plog for tp, plog in self.logs.items() if self._dir_of.get(tp) == d}
            jobs.append(
                (
                    OffsetCheckpointFile(d / RECOVERY_POINT_OFFSET_CHECKPOINT),
                    {tp: p.recovery_point for tp, p in mine.items()},
                )
            )
            jobs.append(
                (
                    OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT),
                    {tp: p.log_start_offset for tp, p in mine.items() if p.log_start_offset > 0},
                )
            )
            jobs.append(
                (
                    OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT),
                    {tp: p.high_watermark for tp, p in mine.items()},
                )
            )
            dirty = self.cleaner.checkpoints
            jobs.append(
                (
                    OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT),
                    {tp: dirty[tp] for tp in mine if tp in dirty},
                )
            )
        return CheckpointWrite(writer, sequence, jobs)

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and high-watermark checkpoints of every dir, on
        this thread (waiting for a write in progress in another one)."""
        self.checkpoint_snapshot().write()

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            f = OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT)
            if f.path.exists():
                out.update(f.read())
        return out

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: close every log, checkpoint, then mark the directories clean."""
        for plog in self.logs.values():
            plog.close()
        self.checkpoint()
        for d in self.log_dirs:
            write_clean_shutdown(d, broker_epoch)
        self.logs.clear()
        self._dir_of.clear()
        self._counts.clear()
