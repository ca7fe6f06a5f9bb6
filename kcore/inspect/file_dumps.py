"""The other files of a log directory as ``kafka-dump-log.sh`` prints them, and which kind a
file is.

========================  ===================================================================
kind (:func:`file_kind`)  lines
========================  ===================================================================
``.index``                ``offset: 41 position: 4102`` (Kafka's); with ``--verify-index-only``
                          none, only the mismatches; stops at the first zero entry after the
                          first (the preallocated tail of an active or crashed segment)
``.timeindex``            ``timestamp: 1700000000123 offset: 41`` (Kafka's), each checked
                          against the batch it names
``.txnindex``             ``version: 0 producerId: 7 firstOffset: 10 lastOffset: 14
                          lastStableOffset: 15`` (Kafka's)
``.snapshot``             ``producerId: 7 producerEpoch: 0 coordinatorEpoch: 0
                          currentTxnFirstOffset: OptionalLong.empty lastTimestamp: ...
                          firstSequence: 0 lastSequence: 4 lastOffset: 4 offsetDelta: 4
                          timestamp: ...`` (Kafka's)
checkpoints               ``leaderEpoch: 3 startOffset: 120`` (``leader-epoch-checkpoint``),
                          ``topic: t partition: 0 offset: 42`` (the four per-directory offset
                          checkpoints): kcore's lines in Kafka's style — Kafka's tool does not
                          read these files
========================  ===================================================================

The check of an index entry is Kafka's: an offset index entry must name the *last* offset of
the batch at its position; a time index entry's timestamp must be the largest timestamp of the
batch whose last offset it names, and timestamps must increase. Mismatches are returned to the
caller, which prints them on stderr after every file, in Kafka's words.

Pure: the callers read the files (read-only) and pass entries and bytes in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kcore.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from kcore.log.producer_snapshot import ProducerSnapshotEntry
from kcore.log.transaction_index import CURRENT_VERSION, AbortedTxn
from kcore.record.batch import NO_TIMESTAMP, iter_batches
from kcore.record.errors import CompressionError, CorruptRecordError, DecompressionLimitExceeded

__all__ = [
    "KINDS",
    "OFFSET_CHECKPOINTS",
    "IndexCheck",
    "check_offset_index",
    "check_time_index",
    "checkpoint_fields",
    "file_kind",
    "producer_snapshot_fields",
    "producer_snapshot_line",
    "txn_index_fields",
    "used_entries",
]

OFFSET_CHECKPOINTS = (
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)
_SUFFIXES = {
    ".log": "log",
    ".checkpoint": "snapshot",  # a KRaft snapshot of __cluster_metadata (or the bootstrap)
    ".index": "index",
    ".timeindex": "timeindex",
    ".txnindex": "txnindex",
    ".snapshot": "producer-snapshot",
}
#: Every kind, for the message about a file of none of them.
KINDS = (
    ".log, .index, .timeindex, .txnindex, .snapshot (producer state), .checkpoint (KRaft "
    f"snapshot), {LEADER_EPOCH_CHECKPOINT}, " + ", ".join(OFFSET_CHECKPOINTS)
)
_INT32_MAX = 0x7FFFFFFF


def file_kind(name: str) -> str | None:
    """The kind of the file called ``name`` (a base name): ``"log"``, ``"snapshot"``,
    ``"index"``, ``"timeindex"``, ``"txnindex"``, ``"producer-snapshot"``,
    ``"leader-epoch-checkpoint"``, ``"offset-checkpoint"``; None for any other file. As in
    Kafka, the suffix after the last dot decides (``00….log.deleted`` is not a segment)."""
    if name == LEADER_EPOCH_CHECKPOINT:
        return "leader-epoch-checkpoint"
    if name in OFFSET_CHECKPOINTS:
        return "offset-checkpoint"
    dot = name.rfind(".")
    return None if dot < 0 else _SUFFIXES.get(name[dot:])


# -- .txnindex, .snapshot, checkpoints ---------------------------------------------------------


def txn_index_fields(txn: AbortedTxn) -> dict[str, int]:
    """An aborted transaction's fields, in the order of Kafka's line."""
    return {
        "version": CURRENT_VERSION,
        "producerId": txn.producer_id,
        "firstOffset": txn.first_offset,
        "lastOffset": txn.last_offset,
        "lastStableOffset": txn.last_stable_offset,
    }


def _first_sequence(last_seq: int, offset_delta: int) -> int:
    # Kafka's DefaultRecordBatch.decrementSequence: sequences wrap at 2**31 - 1.
    if last_seq < offset_delta:
        return _INT32_MAX - (offset_delta - last_seq) + 1
    return last_seq - offset_delta


def producer_snapshot_fields(entry: ProducerSnapshotEntry) -> dict[str, int | None]:
    """A producer's fields, in the order of Kafka's line; ``currentTxnFirstOffset`` is None
    without an open transaction, and the batch fields are there only when the snapshot has a
    last batch for the producer (``lastOffset >= 0``)."""
    txn = entry.current_txn_first_offset
    fields: dict[str, int | None] = {
        "producerId": entry.producer_id,
        "producerEpoch": entry.producer_epoch,
        "coordinatorEpoch": entry.coordinator_epoch,
        "currentTxnFirstOffset": txn if txn >= 0 else None,
        "lastTimestamp": entry.timestamp,
    }
    if entry.last_offset >= 0:
        fields["firstSequence"] = _first_sequence(entry.last_sequence, entry.offset_delta)
        fields["lastSequence"] = entry.last_sequence
        fields["lastOffset"] = entry.last_offset
        fields["offsetDelta"] = entry.offset_delta
        fields["timestamp"] = entry.timestamp
    return fields


def producer_snapshot_line(entry: ProducerSnapshotEntry) -> str:
    """Kafka's line for one producer of a ``.snapshot``: the transaction's first offset as
    Java prints an ``OptionalLong``, and Kafka's space after ``lastTimestamp`` even when no
    batch part follows."""
    fields = producer_snapshot_fields(entry)
    txn = fields.pop("currentTxnFirstOffset")
    texts = [f"{k}: {v}" for k, v in fields.items()]
    texts.insert(
        3,
        "currentTxnFirstOffset: "
        + ("OptionalLong.empty" if txn is None else f"OptionalLong[{txn}]"),
    )
    head, tail = texts[:5], texts[5:]
    return " ".join(head) + " " + " ".join(tail)


def checkpoint_fields(entries) -> list[dict]:
    """The entries of a checkpoint as fields: a list of ``EpochEntry`` (leader epochs)
    or a ``{(topic, partition): offset}`` mapping (the offset checkpoints), in file order."""
    if isinstance(entries, dict):
        return [{"topic": t, "partition": p, "offset": o} for (t, p), o in entries.items()]
    return [{"leaderEpoch": e.epoch, "startOffset": e.start_offset} for e in entries]


# -- index checks ------------------------------------------------------------------------------


@dataclass(slots=True)
class IndexCheck:
    """The lines of an index dump and what its check found (Kafka's error lists)."""

    lines: list[str] = field(default_factory=list)
    # (index offset, log offset): an offset index entry that does not name its batch's last
    # offset; Kafka's "Mismatches in :FILE".
    mismatches: list[tuple[int, int]] = field(default_factory=list)
    # (index timestamp, log timestamp) / (index timestamp, previous index timestamp) /
    # (indexed offset, found log offset) for a time index.
    timestamp_mismatches: list[tuple[int, int]] = field(default_factory=list)
    out_of_order: list[tuple[int, int]] = field(default_factory=list)
    not_found: list[tuple[int, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def used_entries(entries: Iterable[tuple[int, int]], base_offset: int, offset_field: int):
    """The entries before the zero tail of a preallocated (active, or crash-left) index, as a
    list; ``entries`` is read no further than that tail (a preallocated 10 MiB offset index
    holds 1.3M entries, nearly all zero).

    Kafka's tool stops at the first entry after the first whose offset is the base offset. An
    index with no entry in use at all starts with its zero tail: its first two entries are
    equal, which two used entries never are (offsets increase), so it has none — where
    Kafka's tool shows the zero entry and reports it as a mismatch.
    """
    used: list[tuple[int, int]] = []
    for i, entry in enumerate(entries):
        if i > 0 and entry[offset_field] == base_offset:
            return [] if i == 1 and used[0] == entry else used
        used.append(entry)
    return used


def _first_batch_at(log, position: int, max_bytes: int):
    batches = iter_batches(memoryview(log)[position : position + max_bytes])
    return next(batches, None)


def check_offset_index(
    entries: Sequence[tuple[int, int]],
    log,
    *,
    max_message_size: int,
    verify_only: bool,
) -> IndexCheck:
    """Dump and check an offset index: ``entries`` are its used ``(offset, position)``
    entries, ``log`` the bytes of the segment it indexes (None when the ``.log`` is missing:
    nothing can be checked)."""
    out = IndexCheck()
    for offset, position in entries:
        if log is not None:
            try:
                batch = _first_batch_at(log, position, max_message_size)
            except CorruptRecordError as e:
                batch = None
                out.problems.append(f"index entry offset {offset} position {position}: {e}")
            last = -1 if batch is None else batch.last_offset
            if last != offset:
                out.mismatches.append((offset, last))
        if not verify_only:
            out.lines.append(f"offset: {offset} position: {position}")
    return out


def check_time_index(
    entries: Sequence[tuple[int, int]],
    offset_index: Sequence[tuple[int, int]],
    log,
    *,
    verify_only: bool,
) -> IndexCheck:
    """Dump and check a time index: ``entries`` are its used ``(timestamp, offset)`` entries,
    ``offset_index`` the used entries of the segment's offset index (to find positions),
    ``log`` the segment's bytes (None when missing)."""
    out = IndexCheck()
    index_offsets = [o for o, _ in offset_index]
    previous = NO_TIMESTAMP
    for timestamp, offset in entries:
        if log is not None:
            slot = bisect.bisect_right(index_offsets, offset) - 1
            position = offset_index[slot][1] if slot >= 0 else 0
            found = None
            try:
                for batch in iter_batches(memoryview(log)[position:]):
                    if batch.last_offset >= offset:
                        found = batch
                        break
            except CorruptRecordError as e:
                out.problems.append(f"time index entry offset {offset}: {e}")
            if found is None:
                out.not_found.append((offset, -1))
            elif found.last_offset != offset:
                out.not_found.append((offset, found.last_offset))
            else:
                try:
                    largest = max((r.timestamp for r in found.records()), default=NO_TIMESTAMP)
                except (CorruptRecordError, CompressionError, DecompressionLimitExceeded) as e:
                    largest = found.max_timestamp
                    out.problems.append(f"time index entry offset {offset}: {e}")
                if largest != timestamp:
                    out.timestamp_mismatches.append((timestamp, largest))
                if previous >= timestamp:
                    out.out_of_order.append((timestamp, previous))
        if not verify_only:
            out.lines.append(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp
    return out
