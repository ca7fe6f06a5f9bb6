"""Rebuilding producer state (and lost transaction-index entries) from batches on disk.

Used when a log is opened (replaying the batches after the newest producer snapshot), after a
truncation, and by crash recovery, which also re-creates the transaction-index entries of the
aborted transactions whose markers are in the segments it rescans. Batches on disk were
validated when they were appended, so they are applied with the trusted REPLICATION origin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kcore.log.producer_state import AppendOrigin, ProducerStateManager, has_producer_id
from kcore.log.transaction_index import AbortedTxn
from kcore.record.batch import RecordBatch
from kcore.record.control import ControlRecordType, read_control_record

if TYPE_CHECKING:
    from kcore.log.partition_log import PartitionLog


def replay_producer_state(plog: PartitionLog, from_offset: int) -> None:
    """Rebuild producer state from the batches at and after ``from_offset``."""
    psm = plog.producer_state
    for seg in plog.segments[plog._segment_index(from_offset) :]:
        position = 0
        if seg.base_offset < from_offset:
            first = seg.translate_offset(from_offset)
            if first is None:
                continue
            position = first.position
        for _, batch in seg.log.full_batches_from(position):
            if batch.last_offset >= from_offset:
                apply_batch_to_producer_state(psm, batch)
    psm.update_map_end_offset(plog.log_end_offset)


def apply_batch_to_producer_state(
    psm: ProducerStateManager,
    batch: RecordBatch,
    on_aborted: Callable[[AbortedTxn], None] | None = None,
) -> None:
    """Record one existing batch in producer state.

    ``on_aborted`` receives the transaction-index entry of an ABORT marker (recovery writes it
    back into the rescanned segment's ``.txnindex``).
    """
    if batch.is_control:
        control = read_control_record(batch)
        if control is not None and control.type is ControlRecordType.MIRROR_PID_RESET:
            psm.reset_producers()
            psm.update_map_end_offset(batch.last_offset + 1)
            return
        if control is None or not control.is_transaction_marker:
            psm.update_map_end_offset(batch.last_offset + 1)
            return
    if not has_producer_id(batch.producer_id):
        psm.update_map_end_offset(batch.last_offset + 1)
        return
    info = psm.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
    if batch.is_control:
        completed = info.append_end_txn_marker(
            control.type is ControlRecordType.COMMIT,
            control.end_txn_marker().coordinator_epoch,
            batch.producer_epoch,
            batch.base_offset,
            batch.max_timestamp,
        )
        psm.update(info)
        if completed.is_aborted and on_aborted is not None:
            lso = psm.last_stable_offset_after(completed)
            on_aborted(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )
        psm.complete_txn(completed)
    else:
        info.append_data_batch(
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.max_timestamp,
            batch.base_offset,
            batch.last_offset,
            batch.is_transactional,
        )
        psm.update(info)
    psm.update_map_end_offset(batch.last_offset + 1)
