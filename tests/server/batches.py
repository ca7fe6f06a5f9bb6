"""Record batches the wire tests produce, and the Produce request that carries them: one
builder of each instead of one per test module."""

from __future__ import annotations

import time

from kcore.protocol import messages as m
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


def produce_request(topic: str, records: dict, *, transactional_id=None) -> m.ProduceRequest:
    """One Produce with acks=all carrying ``records`` (partition -> bytes, as they are)."""
    P = m.ProduceRequest
    return P(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=topic,
                partition_data=[
                    P.PartitionProduceData(index=i, records=data) for i, data in records.items()
                ],
            )
        ],
    )


async def produce_raw(
    conn, topic: str, records: dict, *, transactional_id=None, version: int = 9
) -> dict:
    """Send :func:`produce_request` on a ``BrokerConnection``; returns
    ``{partition: PartitionProduceResponse}``."""
    request = produce_request(topic, records, transactional_id=transactional_id)
    resp = await conn.request(request, version)
    return {p.index: p for p in resp.responses[0].partition_responses}
