"""kafka-python and aiokafka against a running kcore: produce, consume, list and create topics."""

import asyncio
import uuid

import pytest

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_python_creates_lists_produces_and_consumes(cluster):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    topic = _name("kp")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        futures = [
            producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
            for i in range(40)
        ]
        offsets = sorted((f.get(timeout=30).partition, f.get().offset) for f in futures)
    finally:
        producer.close()
    assert offsets == sorted([(p, o) for p in range(2) for o in range(20)])
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        got = sorted((m.partition, m.offset, m.key, m.value) for m in consumer)
    finally:
        consumer.close()
    # Each record where it was sent, in the order sent, with its own key and value.
    assert got == sorted((i % 2, i // 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(40))


def test_aiokafka_produces_and_consumes(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = _name("aio")
    cluster.create_topic(topic)

    def key(i: int) -> bytes | None:
        return None if i % 3 == 0 else f"key-{i}".encode()  # null keys too

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        await producer.start()
        try:
            for i in range(30):
                await producer.send_and_wait(topic, f"a{i}".encode(), key=key(i))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 30:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for messages in batch.values():
                    got += [(m.offset, m.key, m.value) for m in messages]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [(i, key(i), f"a{i}".encode()) for i in range(30)]


def test_aiokafka_admin_creates_and_lists_topics(cluster):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = _name("aio-admin")

    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            return await admin.list_topics()
        finally:
            await admin.close()

    assert topic in asyncio.run(main())
    assert sorted(p for t, p in cluster.broker.replica_manager.partitions if t == topic) == [0, 1]
