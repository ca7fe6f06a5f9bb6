"""Log entries on the wire: Fetch ``Records`` as real v2 record batches, and KRaft control values.

The leader answers a Fetch with the same bytes Kafka's controllers exchange: record batches
(magic 2) whose ``partitionLeaderEpoch`` is the epoch the entries were appended in. Data
entries are records with a null key and the entry's bytes as value; runs of entries with the
same epoch share a batch (at most :data:`MAX_RECORDS_PER_BATCH`). A control entry is a control
batch of its own holding one control record (key ``(0, type)``, value the control message), as
Kafka writes ``LeaderChangeMessage``. Timestamps are ``-1``: the core does not keep them.

Decoding checks each batch's CRC; a trailing partial batch (Fetch answers may end with one) is
ignored, as consumers do.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kcore.protocol import messages as m
from kcore.raft.log import LogEntry
from kcore.record import (
    NO_TIMESTAMP,
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    read_control_record,
)

__all__ = [
    "LEADER_CHANGE",
    "MAX_RECORDS_PER_BATCH",
    "decode_entries",
    "decode_leader_change",
    "encode_entries",
    "encode_leader_change",
]

LEADER_CHANGE = int(ControlRecordType.LEADER_CHANGE)
# Kafka's leader accumulates appends into batches of up to 1 MiB; the core appends what it is
# given at once, so it bounds batches by count to keep each CRC pass short.
MAX_RECORDS_PER_BATCH = 512


def encode_entries(entries: Sequence[LogEntry]) -> bytes:
    """Frame consecutive log entries as record batches (see the module docstring)."""
    out = bytearray()
    i = 0
    n = len(entries)
    while i < n:
        first = entries[i]
        if first.control_type is not None:
            out += build_control_batch(
                first.control_type,
                first.value,
                producer_id=-1,
                producer_epoch=-1,
                is_transactional=False,
                base_offset=first.offset,
                partition_leader_epoch=first.epoch,
                timestamp=NO_TIMESTAMP,
            )
            i += 1
            continue
        builder = RecordBatchBuilder(first.offset, partition_leader_epoch=first.epoch)
        j = i
        while (
            j < n
            and j - i < MAX_RECORDS_PER_BATCH
            and entries[j].control_type is None
            and entries[j].epoch == first.epoch
        ):
            builder.append(NO_TIMESTAMP, None, entries[j].value, offset=entries[j].offset)
            j += 1
        out += builder.build()
        i = j
    return bytes(out)


def decode_entries(data: bytes | bytearray | memoryview | None) -> list[LogEntry]:
    """The log entries in Fetch ``Records`` bytes (``None`` or empty: none).

    Raises:
        kcore.record.CorruptRecordError: a batch fails its CRC or does not parse.
    """
    if not data:
        return []
    out: list[LogEntry] = []
    for batch in iter_batches(data):
        batch.validate()
        epoch = batch.partition_leader_epoch
        if batch.is_control:
            rec = read_control_record(batch)
            if rec is not None:
                out.append(LogEntry(rec.offset, epoch, bytes(rec.value or b""), rec.type_id))
            continue
        for rec in batch.records():
            out.append(LogEntry(rec.offset, epoch, rec.value or b"", None))
    return out


def encode_leader_change(leader_id: int, voters: Iterable[int], granting: Iterable[int]) -> bytes:
    """The value of a LEADER_CHANGE control record (``LeaderChangeMessage`` version 0)."""
    voter = m.LeaderChangeMessage.Voter
    msg = m.LeaderChangeMessage(
        version=0,
        leader_id=leader_id,
        voters=[voter(voter_id=v) for v in sorted(voters)],
        granting_voters=[voter(voter_id=v) for v in sorted(granting)],
    )
    return msg.encode(0)


def decode_leader_change(value: bytes) -> m.LeaderChangeMessage:
    """Parse a LEADER_CHANGE control record's value (version 0 layout)."""
    return m.LeaderChangeMessage.decode(value, 0)
