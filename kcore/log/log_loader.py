"""Opening a partition log from its directory, and recovering what a crash left behind.

Steps (Kafka's LogLoader, simplified where kcore has no swap-based cleaning yet):

1. Leftovers of interrupted operations are resolved: a cleaner swap that passed its commit point
   (``<base>.log.swap``) is completed, replacing every segment it covers; ``.deleted`` and
   ``.cleaned`` files are removed.
2. Every ``<base>.log`` becomes a :class:`LogSegment`; an index file that is missing or fails
   its sanity check is rebuilt from the ``.log``.
3. After an **unclean** shutdown every segment from the one holding the recovery point onward is
   rescanned (:meth:`LogSegment.recover`): CRCs checked, a torn or corrupt tail truncated, and
   every segment after a corrupt one deleted, since data after a hole cannot be trusted. Producer
   state is first loaded from the newest snapshot below the rescan and replayed up to it; the
   rescan then rebuilds the leader-epoch cache, producer state and the transaction index (the
   aborted transactions whose markers it meets) from the batches themselves: the
   ``leader-epoch-checkpoint`` may be older than the log (the append path does not write it;
   only entries below the recovery point are sure to be in it), so every epoch the rescanned
   batches carry above the cache's latest is assigned again. What was cut is
   logged. After a **clean** shutdown nothing is scanned: indexes were trimmed and producer
   state snapshotted at close.
4. The leader-epoch cache is cut to ``[log start, LEO)`` and written (durably) if the rescan or
   the cut changed it, before the recovered LEO becomes the recovery point; after a clean
   shutdown producer state
   is loaded from the newest snapshot at or below the LEO and the batches after it replayed.

Who may call it: the log manager, once per partition at startup or when a partition is created.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kcore.log import files
from kcore.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from kcore.log.cleaner_output import complete_interrupted_swaps
from kcore.log.errors import LogError
from kcore.log.leader_epoch_cache import LeaderEpochFileCache
from kcore.log.partition_log import PartitionLog
from kcore.log.producer_replay import apply_batch_to_producer_state, replay_producer_state
from kcore.log.producer_state import ProducerStateManager
from kcore.log.segment import LogSegment, SegmentConfig

log = logging.getLogger(__name__)


def _segment_config(config) -> SegmentConfig:
    return SegmentConfig(config.index_interval_bytes, config.segment_index_bytes)


def _producer_state(directory: Path, config) -> ProducerStateManager:
    expiration = getattr(config, "producer_id_expiration_ms", 86_400_000)
    return ProducerStateManager(directory, directory.name, expiration)


def create_log(directory: Path | str, config, *, start_offset: int = 0, now_ms: int = 0):
    """A new, empty partition log in ``directory`` (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    segment = LogSegment(directory, start_offset, _segment_config(config), created_ms=now_ms)
    epoch_cache = LeaderEpochFileCache(
        LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
    )
    psm = _producer_state(directory, config)
    psm.update_map_end_offset(start_offset)
    return PartitionLog(
        directory,
        config,
        [segment],
        log_start_offset=start_offset,
        log_end_offset=start_offset,
        recovery_point=start_offset,
        epoch_cache=epoch_cache,
        producer_state=psm,
        now_ms=now_ms,
    )


def _clean_leftovers(directory: Path) -> None:
    # A clean interrupted after its commit point (a .log.swap exists) is finished first: the
    # old segments it replaces are removed so that no two segments overlap.
    complete_interrupted_swaps(directory)
    for name in sorted(os.listdir(directory)):
        path = directory / name
        if name.endswith((files.DELETED_FILE_SUFFIX, files.CLEANED_FILE_SUFFIX, ".tmp")):
            log.info("%s: removing leftover %s", directory.name, name)
            path.unlink(missing_ok=True)
        elif name.endswith(files.SWAP_FILE_SUFFIX):
            target = directory / name.removesuffix(files.SWAP_FILE_SUFFIX)
            log.info("%s: completing interrupted swap of %s", directory.name, target.name)
            os.replace(path, target)


def load_log(
    directory: Path | str,
    config,
    *,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    had_clean_shutdown: bool,
    now_ms: int = 0,
) -> PartitionLog:
    """Open the partition log in ``directory`` (see the module docstring)."""
    directory = Path(directory)
    _clean_leftovers(directory)
    bases = sorted(
        files.offset_from_file_name(n)
        for n in os.listdir(directory)
        if n.endswith(files.LOG_FILE_SUFFIX)
    )
    if not bases:
        return create_log(directory, config, start_offset=log_start_offset, now_ms=now_ms)
    seg_config = _segment_config(config)
    segments: list[LogSegment] = []
    needs_rebuild: list[bool] = []
    for base in bases:
        missing_index = not files.index_file(directory, base).exists()
        seg = LogSegment(directory, base, seg_config, created_ms=now_ms)
        broken = missing_index
        if not broken:
            try:
                seg.sanity_check()
            except LogError as e:
                log.warning("%s: %s; rebuilding the indexes", directory.name, e)
                broken = True
        segments.append(seg)
        needs_rebuild.append(broken)

    # After a crash, every segment from the one holding the recovery point is rescanned.
    rescan = len(segments)
    if not had_clean_shutdown:
        rescan = max(
            (i for i, s in enumerate(segments) if s.base_offset <= recovery_point), default=0
        )
    for seg, broken in zip(segments[:rescan], needs_rebuild):
        if broken:  # data below the recovery point is intact: only its indexes are rebuilt
            seg.recover(reset_txn_index=False)

    epoch_cache = LeaderEpochFileCache(
        LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
    )
    psm = _producer_state(directory, config)
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    if rescan < len(segments):
        rescan_from = segments[rescan].base_offset
        # Written once, at the end (below), with the epochs the rescan rebuilds.
        epoch_cache.truncate_from_end(rescan_from, flush=False)
        replay_from = psm.truncate_and_reload(log_start_offset, rescan_from, now_ms)
        _replay(segments[:rescan], psm, replay_from)
        segments = _recover_segments(directory, segments, rescan, epoch_cache, psm)

    for seg in segments[:-1]:
        seg.on_become_inactive()
    log_end_offset = segments[-1].next_offset()
    log_start_offset = min(log_start_offset, log_end_offset)
    epoch_cache.truncate_from_end(log_end_offset, flush=False)
    epoch_cache.truncate_from_start(log_start_offset, flush=False)
    # After a crash the recovery point becomes the log end offset (below), so every epoch the
    # rescan re-assigned must be durable first: the checkpoint holds every entry below the
    # recovery point (see LeaderEpochFileCache). After a clean shutdown nothing is dirty.
    epoch_cache.flush_if_dirty()
    plog = PartitionLog(
        directory,
        config,
        segments,
        log_start_offset=log_start_offset,
        log_end_offset=log_end_offset,
        recovery_point=min(recovery_point, log_end_offset)
        if had_clean_shutdown
        else log_end_offset,
        epoch_cache=epoch_cache,
        producer_state=psm,
        now_ms=now_ms,
    )
    for seg in segments:
        first = seg.log.batch_at(0) if seg.size else None
        seg.rolling_based_timestamp = first.max_timestamp if first else None
    if rescan == len(segments):
        replay_from = psm.truncate_and_reload(log_start_offset, log_end_offset, now_ms)
        replay_producer_state(plog, replay_from)
    psm.update_map_end_offset(log_end_offset)
    return plog


def _replay(segments: list[LogSegment], psm: ProducerStateManager, from_offset: int) -> None:
    """Apply the batches of ``segments`` at or after ``from_offset`` to producer state."""
    for seg in segments:
        if seg.next_offset() <= from_offset:
            continue
        for _, batch in seg.log.full_batches_from(0):
            if batch.last_offset >= from_offset:
                apply_batch_to_producer_state(psm, batch)


def _recover_segments(
    directory: Path,
    segments: list[LogSegment],
    start: int,
    epoch_cache: LeaderEpochFileCache,
    psm: ProducerStateManager,
) -> list[LogSegment]:
    """Rescan ``segments[start:]``: validate every batch, rebuild indexes, epochs, producer
    state and aborted-transaction entries, and cut the log at the first bad byte."""
    for i in range(start, len(segments)):
        seg = segments[i]

        def on_batch(batch, seg=seg) -> None:
            latest = epoch_cache.latest_epoch
            epoch = batch.partition_leader_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                epoch_cache.assign(epoch, batch.base_offset)
            apply_batch_to_producer_state(psm, batch, on_aborted=seg.txn_index.append)

        truncated = seg.recover(on_batch)
        if truncated and i + 1 < len(segments):
            doomed = segments[i + 1 :]
            log.warning(
                "%s: deleting %d segment(s) after the corruption in %s (offsets from %d)",
                directory.name,
                len(doomed),
                seg.log.path.name,
                doomed[0].base_offset,
            )
            for d in doomed:
                d.delete()
            return segments[: i + 1]
    return segments
