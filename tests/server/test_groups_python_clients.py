"""kafka-python and aiokafka consumer groups against a running kcore, alone and together with
a confluent-kafka consumer in the same group (same ``consumer`` protocol type; the group agrees
on the one assignor every member supports)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config={"offsets.topic.num.partitions": "10"}) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(cluster, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for v in values:
        producer.produce(topic, value=v.encode())
    assert producer.flush(30) == 0


def _committed(cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def test_kafka_python_group_consumes_and_commits(cluster):
    topic, group = _name("kp"), _name("g")
    cluster.create_topic(topic, partitions=3)
    _produce(cluster, topic, [f"v{i}" for i in range(60)])
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    got = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < 60 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value.decode() for r in records]
        consumer.commit()
        assert sorted(got) == sorted(f"v{i}" for i in range(60))
        assignment = consumer.assignment()
        assert assignment == {KTopicPartition(topic, p) for p in range(3)}
    finally:
        consumer.close()
    assert sum(_committed(cluster, group, topic, 3).values()) == 60


def test_aiokafka_group_consumes_and_commits(cluster):
    from aiokafka import AIOKafkaConsumer

    topic, group = _name("aio"), _name("g")
    cluster.create_topic(topic, partitions=3)
    _produce(cluster, topic, [f"v{i}" for i in range(45)])

    async def consume() -> list[str]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=cluster.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(60):
                while len(got) < 45:
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [r.value.decode() for records in batches.values() for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(consume())
    assert sorted(got) == sorted(f"v{i}" for i in range(45))
    assert sum(_committed(cluster, group, topic, 3).values()) == 45


def test_three_clients_share_one_group(cluster):
    """confluent-kafka, kafka-python and aiokafka members of one group split six partitions
    (roundrobin is the only assignor all three offer by default)."""
    from aiokafka import AIOKafkaConsumer

    topic, group = _name("mixed"), _name("g")
    cluster.create_topic(topic, partitions=6)
    owned: dict[str, set[int]] = {"confluent": set(), "kafka-python": set(), "aiokafka": set()}
    stop = threading.Event()
    lock = threading.Lock()

    def set_owned(who: str, partitions: set[int]) -> None:
        with lock:
            owned[who] = partitions

    def run_confluent() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 300,
            }
        )
        consumer.subscribe([topic])
        while not stop.is_set():
            consumer.poll(0.1)
            set_owned("confluent", {tp.partition for tp in consumer.assignment()})
        consumer.close()

    def run_kafka_python() -> None:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=cluster.bootstrap_servers,
            group_id=group,
            session_timeout_ms=10000,
            heartbeat_interval_ms=300,
        )
        while not stop.is_set():
            consumer.poll(timeout_ms=100)
            set_owned("kafka-python", {tp.partition for tp in consumer.assignment()})
        consumer.close()

    def run_aiokafka() -> None:
        async def main() -> None:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=cluster.bootstrap_servers,
                group_id=group,
                session_timeout_ms=10000,
                heartbeat_interval_ms=300,
            )
            await consumer.start()
            try:
                while not stop.is_set():
                    await consumer.getmany(timeout_ms=100)
                    set_owned("aiokafka", {tp.partition for tp in consumer.assignment()})
            finally:
                await consumer.stop()

        asyncio.run(main())

    threads = [
        threading.Thread(target=fn, daemon=True)
        for fn in (run_confluent, run_kafka_python, run_aiokafka)
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 90
        while True:
            with lock:
                snapshot = {who: set(ps) for who, ps in owned.items()}
            every = sorted(p for ps in snapshot.values() for p in ps)
            if every == list(range(6)) and all(len(ps) == 2 for ps in snapshot.values()):
                break
            assert time.monotonic() < deadline, f"no balanced assignment: {snapshot}"
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def test_kafka_python_admin_lists_describes_alters_and_deletes_group_offsets(cluster):
    """kafka-python's KafkaAdminClient over the group APIs: ListGroups, DescribeGroups,
    OffsetFetch, OffsetCommit (alter), OffsetDelete and DeleteGroups."""
    from kafka import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    topic, group = _name("kpadmin"), _name("g")
    cluster.create_topic(topic, partitions=2)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.alter_group_offsets(
            group,
            {
                KTopicPartition(topic, 0): OffsetAndMetadata(5, "", None),
                KTopicPartition(topic, 1): OffsetAndMetadata(7, "", None),
            },
        )
        assert group in {g["group_id"] for g in admin.list_groups()}
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Empty" and not described["members"]

        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 5, 1: 7}

        deleted = admin.delete_group_offsets(group, [KTopicPartition(topic, 0)])
        assert deleted[KTopicPartition(topic, 0)].errno == 0
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {1: 7}

        admin.delete_groups([group])
        assert group not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
