"""The mirror fetcher's per-batch step: what of a fetched response to append, and how.

Before the destination appends what a source partition returned, each batch goes through
:func:`prepare_mirrored_batches`, one pass over the batch headers (a ``struct`` unpack of the
61-byte header over the response's memoryview: records are never decoded and compressed
payloads never decompressed):

* batches wholly below the destination's log end offset are skipped (a source answers a fetch
  offset inside a batch with the whole batch);
* **epoch fencing** (decision D-11): the destination partition's leader epoch must stay at
  least as large as every epoch in its log, so the first batch whose partition leader epoch is
  above it ends the append there; :attr:`PreparedBatches.fenced_epoch` tells the mirror to run
  EPOCH_FENCING (BumpLeaderEpochs(minLeaderEpoch = that epoch)) before fetching on;
* a trailing partial batch (the source cut the response at ``partition_max_bytes``) is left for
  the next fetch;
* the **producer id rewrite** (D-17, spec M-29): a batch with a producer id gets a replacement
  header carrying ``-(pid + 2)`` and the CRC recomputed over the new header and the untouched
  payload (``RecordBatch.header_with_producer_id``); epochs, sequences, offsets, timestamps and
  the partition leader epoch are kept. Batches without a producer id are written as received.

The log then appends the batches the way a follower does (``PartitionLog.append_as_follower``):
each CRC checked as received, the payloads written without a copy.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcore.log.partition_log import FollowerHeader
from kcore.record.batch import (
    BATCH_HEADER,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    RecordBatch,
    mirror_producer_id,
)

__all__ = ["PreparedBatches", "prepare_mirrored_batches"]

_unpack_header = BATCH_HEADER.unpack_from
_HEADER_SIZE = BATCH_HEADER.size


@dataclass(slots=True)
class PreparedBatches:
    """What to append: ``batches`` with their replacement ``headers`` (None: unchanged);
    ``next_offset`` — the fetch offset after them (the input offset if none);
    ``last_epoch`` — the partition leader epoch of the last of them (None if none);
    ``fenced_epoch`` — the epoch of the first batch not appended because it is above the
    destination's leader epoch (D-11), else None; ``bytes`` — their total size; ``records`` —
    the records they hold, as their headers count them (control records included)."""

    batches: list[RecordBatch] = field(default_factory=list)
    headers: list[FollowerHeader | None] = field(default_factory=list)
    next_offset: int = 0
    last_epoch: int | None = None
    fenced_epoch: int | None = None
    bytes: int = 0
    records: int = 0


def prepare_mirrored_batches(
    records, fetch_offset: int, destination_leader_epoch: int
) -> PreparedBatches:
    """Frame ``records`` (a fetched partition's bytes) for the mirror's append; see the module
    docstring. Raises nothing for a short or malformed tail: what is not a whole batch is left
    out, and the log's CRC check refuses a corrupt whole one."""
    view = records if type(records) is memoryview else memoryview(records)
    out = PreparedBatches(next_offset=fetch_offset)
    batches, headers = out.batches, out.headers
    pos, end = 0, len(view)
    next_offset = fetch_offset
    total = 0
    records = 0
    while end - pos >= _HEADER_SIZE:
        (base, length, epoch, _magic, _crc, _attrs, delta, _fts, _mts, pid, _pe, _seq, count) = (
            _unpack_header(view, pos)
        )
        size = length + LOG_OVERHEAD
        if length < _HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break  # a partial batch at the end of the response: fetched again next time
        last = base + delta
        if last < next_offset:
            pos += size  # already here (the fetch offset fell inside or after this batch)
            continue
        if epoch > destination_leader_epoch:
            out.fenced_epoch = epoch
            break
        batch = RecordBatch._framed(view[pos : pos + size])
        batches.append(batch)
        if pid == NO_PRODUCER_ID:
            headers.append(None)
        else:
            mirrored = mirror_producer_id(pid)
            headers.append(FollowerHeader(batch.header_with_producer_id(mirrored), mirrored))
        out.last_epoch = epoch
        next_offset = last + 1
        total += size
        records += count
        pos += size
    out.next_offset = next_offset
    out.bytes = total
    out.records = records
    return out
