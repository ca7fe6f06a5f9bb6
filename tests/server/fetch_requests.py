"""A one-partition Fetch from offset 0, as the wire tests send it."""

from __future__ import annotations

from kcore.protocol import messages as m


def fetch_request(topic, topic_id, partition=0, *, replica_id=-1, rack_id="") -> m.FetchRequest:
    """A Fetch of ``topic``-``partition`` from offset 0 without a session: ``replica_id`` -1
    for a consumer, ``rack_id`` its ``client.rack`` (Fetch v11+)."""
    F = m.FetchRequest
    return F(
        replica_id=replica_id,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[
                    F.FetchPartition(
                        partition=partition, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id=rack_id,
    )
