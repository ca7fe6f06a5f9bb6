"""Transactional and idempotent producers of real clients against a running kcore (issue #7).

confluent-kafka (librdkafka): commit and abort, a ``read_committed`` consumer sees exactly the
committed records in order while a ``read_uncommitted`` one sees them all, and zombie fencing (a
second producer with the same transactional id fences the first, which gets a fatal error).
kafka-python's transactional producer commits and aborts the same way; aiokafka's idempotent
producer (InitProducerId v0) writes with a producer id.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)

CONFIG = {
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
}


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config=CONFIG) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _producer(cluster, tid: str, **config) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": tid,
            "linger.ms": 5,
            **config,
        }
    )


def _send(producer: Producer, topic: str, values: list[str]) -> None:
    for v in values:
        producer.produce(topic, value=v.encode())
    producer.flush(30)


def _read_all(cluster, topic: str, isolation: str, expected: int, timeout: float = 30) -> list:
    """Every value of ``topic``-0 a consumer with ``isolation.level=isolation`` sees, read until
    ``expected`` values came or the end of the partition was reached after ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": _name("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and len(values) >= expected:
                    break
                continue
            values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def test_confluent_transactions_commit_and_abort_read_committed_sees_only_committed(cluster):
    topic = _name("txn")
    cluster.create_topic(topic)
    producer = _producer(cluster, _name("tid"))
    producer.init_transactions(30)
    producer.begin_transaction()
    _send(producer, topic, ["a1", "a2"])
    producer.commit_transaction(30)
    producer.begin_transaction()
    _send(producer, topic, ["b1", "b2"])
    producer.abort_transaction(30)
    producer.begin_transaction()
    _send(producer, topic, ["c1"])
    producer.commit_transaction(30)

    assert _read_all(cluster, topic, "read_committed", 3) == ["a1", "a2", "c1"]
    assert _read_all(cluster, topic, "read_uncommitted", 5) == ["a1", "a2", "b1", "b2", "c1"]
    # Three markers and five records: the last stable offset is the end of the log.
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    assert plog.log_end_offset == 8
    assert plog.last_stable_offset == plog.high_watermark == 8


def test_confluent_transactions_an_open_transaction_holds_back_read_committed(cluster):
    topic = _name("txn")
    cluster.create_topic(topic)
    committed = _producer(cluster, _name("tid"))
    committed.init_transactions(30)
    committed.begin_transaction()
    _send(committed, topic, ["before"])
    committed.commit_transaction(30)
    open_one = _producer(cluster, _name("tid"))
    open_one.init_transactions(30)
    open_one.begin_transaction()
    _send(open_one, topic, ["pending"])
    assert _read_all(cluster, topic, "read_committed", 1, timeout=3) == ["before"]
    assert _read_all(cluster, topic, "read_uncommitted", 2) == ["before", "pending"]
    open_one.commit_transaction(30)
    assert _read_all(cluster, topic, "read_committed", 2) == ["before", "pending"]


def test_confluent_transactions_a_second_producer_fences_the_first(cluster):
    topic, tid = _name("txn"), _name("tid")
    cluster.create_topic(topic)
    zombie = _producer(cluster, tid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    _send(zombie, topic, ["zombie"])

    successor = _producer(cluster, tid)
    successor.init_transactions(30)  # aborts the zombie's open transaction, bumps the epoch
    successor.begin_transaction()
    _send(successor, topic, ["successor"])
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"late")
        zombie.flush(10)
        zombie.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    assert _read_all(cluster, topic, "read_committed", 1) == ["successor"]
    assert _read_all(cluster, topic, "read_uncommitted", 2) == ["zombie", "successor"]


def test_kafka_python_transactions_commit_and_abort(cluster):
    kafka = pytest.importorskip("kafka")
    topic = _name("txn")
    cluster.create_topic(topic)
    producer = kafka.KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id=_name("tid")
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"k1", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"k2", partition=0)
        producer.flush()  # an abort drops what is still buffered: let k2 reach the log first
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"k3", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    assert _read_all(cluster, topic, "read_committed", 2) == ["k1", "k3"]
    assert _read_all(cluster, topic, "read_uncommitted", 3) == ["k1", "k2", "k3"]


def test_aiokafka_idempotent_producer_writes_with_a_producer_id(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    topic = _name("idem")
    cluster.create_topic(topic)

    async def produce() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, enable_idempotence=True
        )
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"v%d" % i, partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert _read_all(cluster, topic, "read_uncommitted", 5) == [f"v{i}" for i in range(5)]
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    producers = plog.producer_state.producers
    assert len(producers) == 1 and next(iter(producers)) >= 0


def test_confluent_transactions_send_offsets_commits_the_offsets_with_the_transaction(cluster):
    source, sink, group = _name("src"), _name("sink"), _name("g")
    cluster.create_topic(source)
    cluster.create_topic(sink)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(4):
        plain.produce(source, value=b"r%d" % i, partition=0)
    assert plain.flush(30) == 0

    def consumer() -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        c.assign([TopicPartition(source, 0)])
        return c

    def transform(c: Consumer, producer: Producer, n: int, commit: bool) -> None:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
        assert len(got) == n
        producer.begin_transaction()
        for msg in got:
            producer.produce(sink, value=msg.value().upper(), partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, got[-1].offset() + 1)], c.consumer_group_metadata(), 30
        )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    producer = _producer(cluster, _name("tid"))
    producer.init_transactions(30)
    c = consumer()
    transform(c, producer, 2, commit=True)
    c.close()
    c = consumer()
    transform(c, producer, 2, commit=False)  # aborted: neither records nor offsets count
    c.close()

    check = consumer()
    try:
        committed = check.committed([TopicPartition(source, 0)], 30)
        assert committed[0].offset == 2
    finally:
        check.close()
    assert _read_all(cluster, sink, "read_committed", 2) == ["R0", "R1"]


def test_list_offsets_read_committed_answers_the_last_stable_offset(cluster):
    """A read_committed consumer's high watermark (ListOffsets latest) is the LSO: it stops at
    the first record of an open transaction, and reaches the log end once it commits."""
    topic = _name("lso")
    cluster.create_topic(topic, partitions=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    plain.produce(topic, value=b"before")
    assert plain.flush(30) == 0

    def high(isolation: str) -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": _name("g"),
                "isolation.level": isolation,
            }
        )
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        finally:
            consumer.close()

    producer = _producer(cluster, _name("tid"))
    producer.init_transactions(30)
    producer.begin_transaction()
    _send(producer, topic, ["t1", "t2"])
    assert high("read_uncommitted") == 3
    assert high("read_committed") == 1  # the open transaction starts at offset 1
    producer.commit_transaction(30)
    deadline = time.monotonic() + 10
    while high("read_committed") != 4 and time.monotonic() < deadline:  # + the COMMIT marker
        time.sleep(0.05)
    assert high("read_committed") == high("read_uncommitted") == 4
