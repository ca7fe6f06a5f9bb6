"""No duplicates under retries: a confluent-kafka idempotent producer behind a proxy that loses
the broker's Produce responses (after the records were appended) retries them, and the broker
recognises the retries by producer id and sequence — each record is in the log once, in order.

The proxy (``kafka_proxy.py``) sits between the client and kcore, and kcore advertises the
proxy's address, so every connection of the producer goes through it.
"""

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .kafka_proxy import ProduceResponseDropper

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 2
RECORDS = 300


def _cluster_behind(proxy: ProduceResponseDropper, factory):
    cluster = factory(config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.start(("127.0.0.1", cluster.port))
    return cluster


def _producer(proxy: ProduceResponseDropper, **config) -> Producer:
    return Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{proxy.port}",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 20,  # many batches, several in flight at once
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "message.timeout.ms": 60_000,
            **config,
        }
    )


def _produce_all(producer: Producer, topic: str) -> list[str]:
    errors: list[str] = []

    def delivered(err, msg):
        if err is not None:
            errors.append(str(err))

    for i in range(RECORDS):
        producer.produce(
            topic, value=f"{i:05d}".encode(), partition=i % PARTITIONS, on_delivery=delivered
        )
        if i % 50 == 49:
            producer.poll(0)
            time.sleep(0.02)  # let batches go out in several requests
    assert producer.flush(60) == 0, "records left undelivered"
    return errors


def _log(cluster, topic: str) -> dict[int, list[str]]:
    """Every record of ``topic`` (read_uncommitted), by partition, in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    ends = {}
    for p in range(PARTITIONS):
        _, ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    positions = dict.fromkeys(range(PARTITIONS), 0)
    deadline = time.monotonic() + 30
    try:
        while any(positions[p] < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, f"read {positions} of {ends}"
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out[msg.partition()].append(msg.value().decode())
            positions[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return out


def _expected() -> dict[int, list[str]]:
    return {p: [f"{i:05d}" for i in range(p, RECORDS, PARTITIONS)] for p in range(PARTITIONS)}


@pytest.mark.parametrize("drop", [1, 3])
def test_idempotent_retries_after_lost_connections_write_each_record_once(
    kcore_cluster_factory, drop
):
    proxy = ProduceResponseDropper(drop=drop, mode="close")
    try:
        cluster = _cluster_behind(proxy, kcore_cluster_factory)
        topic = f"idem-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=PARTITIONS)
        producer = _producer(proxy)
        assert _produce_all(producer, topic) == []
        assert proxy.dropped == drop, "the proxy lost that many Produce answers"
        assert _log(cluster, topic) == _expected()
    finally:
        proxy.close()


def test_idempotent_retries_after_request_timeouts_write_each_record_once(kcore_cluster_factory):
    proxy = ProduceResponseDropper(drop=2, mode="swallow")
    try:
        cluster = _cluster_behind(proxy, kcore_cluster_factory)
        topic = f"idem-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=PARTITIONS)
        # librdkafka gives up on an unanswered request after socket.timeout.ms and retries
        producer = _producer(proxy, **{"socket.timeout.ms": 2000, "request.timeout.ms": 2000})
        assert _produce_all(producer, topic) == []
        assert proxy.dropped == 2
        assert _log(cluster, topic) == _expected()
    finally:
        proxy.close()


def test_idempotent_retries_a_producer_without_idempotence_duplicates_through_the_proxy(
    kcore_cluster_factory,
):
    """The control: the same proxy makes a plain producer write records twice, so the test
    above does lose answers after the append (it would pass vacuously otherwise)."""
    proxy = ProduceResponseDropper(drop=1, mode="close")
    try:
        cluster = _cluster_behind(proxy, kcore_cluster_factory)
        topic = f"plain-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, partitions=PARTITIONS)
        producer = _producer(proxy, **{"enable.idempotence": False, "acks": "all"})
        assert _produce_all(producer, topic) == []
        assert proxy.dropped == 1
        log = _log(cluster, topic)
        assert sum(map(len, log.values())) > RECORDS, "a retried batch was written again"
    finally:
        proxy.close()
