"""Record batches the wire tests produce: one builder instead of one per test module."""

from __future__ import annotations

import time

from kcore.record import RecordBatchBuilder


def producer_batch(values, pid=-1, epoch=-1, sequence=-1, transactional=False) -> bytearray:
    """A batch of ``values`` (no keys, stamped now) from producer ``pid``/``epoch``."""
    builder = RecordBatchBuilder(
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    now = int(time.time() * 1000)
    for v in values:
        builder.append(now, key=None, value=v)
    return builder.build()
