"""The ``kcore_dr_clusters`` fixture as another project's test suite uses it: an application
writes to the source, the mirror copies it, the test fails over, and the application's
consumer group resumes on the destination at the offsets it committed on the source (offsets
are identical on both sides, so its own copy of them is valid there too).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

pytestmark = pytest.mark.timeout(180)


def _consume(bootstrap: str, topic: str, count: int, start: int | None = None) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "billing",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    offset = start if start is not None else 0
    consumer.assign([TopicPartition(topic, 0, offset)])
    out = []
    try:
        while len(out) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(out)} of {count} records arrived"
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_dr_fixture_failover_keeps_offsets_and_makes_the_topic_writable(kcore_dr_clusters):
    dr = kcore_dr_clusters
    dr.source.create_topic("orders")
    assert dr.mirror_topics("orders") == ["orders"]
    producer = Producer({"bootstrap.servers": dr.source.bootstrap_servers, "acks": "all"})
    for i in range(50):
        producer.produce("orders", f"order-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    seen = _consume(dr.source.bootstrap_servers, "orders", 20)  # the application read 20

    dr.wait_in_sync()
    assert dr.describe()[("orders", 0)].state == "MIRRORING"
    assert dr.failover() == ["orders"]
    assert dr.describe()[("orders", 0)].state == "STOPPED"

    # The application moves to the destination and continues after the last record it read.
    rest = _consume(dr.destination.bootstrap_servers, "orders", 30, start=seen[-1][0] + 1)
    assert [v for _, v in seen + rest] == [f"order-{i}".encode() for i in range(50)]
    writer = Producer({"bootstrap.servers": dr.destination.bootstrap_servers})
    writer.produce("orders", b"order-50", partition=0)
    assert writer.flush(30) == 0
    # Offset 50 holds the failover's MIRROR_PID_RESET control record (M-59): consumers skip it.
    assert _consume(dr.destination.bootstrap_servers, "orders", 1, start=50) == [(51, b"order-50")]
