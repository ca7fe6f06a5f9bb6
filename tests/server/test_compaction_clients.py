"""Compaction as a client expects it: a compacted topic with short timers is cleaned by the
running broker (time-based roll on the next append, the cleaner every ``log.cleaner.backoff.ms``,
``min.cleanable.dirty.ratio`` and ``max.compaction.lag.ms`` honoured), and a consumer reading
from the start then sees only the latest value of each key."""

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)

KEYS = 20
ROUNDS = 3
VALUE_BYTES = 60_000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "500",
    "min.cleanable.dirty.ratio": "0.01",
    "max.compaction.lag.ms": "100",
}


def _read_all(cluster, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50_000_000,
        }
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value()))
            if msg.offset() == end - 1:
                break
        return got
    finally:
        consumer.close()


def test_compaction_keeps_only_the_latest_value_per_key_for_a_consumer():
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(config={"log.cleaner.backoff.ms": "1000"}) as cluster:
        cluster.create_topic(topic, config=TOPIC_CONFIG)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
        for round_ in range(ROUNDS):
            for k in range(KEYS):
                value = bytes([round_]) * VALUE_BYTES
                producer.produce(topic, key=b"key-%d" % k, value=value, partition=0)
            assert producer.flush(30) == 0
            time.sleep(0.2)  # past max.compaction.lag.ms: the next append rolls the segment
        for i in range(3):  # a few more: the last round's segment rolls and becomes cleanable
            producer.produce(topic, key=b"tail-%d" % i, value=b"t", partition=0)
            assert producer.flush(30) == 0
            time.sleep(0.2)

        deadline = time.monotonic() + 60
        while True:
            records = _read_all(cluster, topic)
            counts = Counter(key for key, _ in records)
            if all(counts[b"key-%d" % k] == 1 for k in range(KEYS)) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert {counts[b"key-%d" % k] for k in range(KEYS)} == {1}, counts
        latest = {key: value for key, value in records}
        assert all(latest[b"key-%d" % k] == bytes([ROUNDS - 1]) * VALUE_BYTES for k in range(KEYS))
        assert [key for key, _ in records[-3:]] == [b"tail-0", b"tail-1", b"tail-2"]
