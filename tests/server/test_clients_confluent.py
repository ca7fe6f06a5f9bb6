"""confluent-kafka (librdkafka) against a running kcore: admin, produce, consume, restart."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _produce(cluster, topic, messages, **config):
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **config})
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)

    for m in messages:
        producer.produce(topic, on_delivery=report, **m)
    remaining = producer.flush(30)
    assert remaining == 0, "messages were not delivered"
    return errors


def _consume_all(cluster, topic, partitions=1, expected=None, timeout=30.0):
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and (expected is None or len(got) < expected):
            msg = consumer.poll(0.5)
            if msg is None:
                if expected is None:
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


def test_confluent_admin_creates_describes_and_deletes_topics(cluster):
    admin = _admin(cluster)
    topic = _name("admin")
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(30)
    metadata = admin.list_topics(timeout=10)
    assert topic in metadata.topics
    assert len(metadata.topics[topic].partitions) == 3
    # Creating it again is refused with TOPIC_ALREADY_EXISTS.
    again = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as e:
        again[topic].result(30)
    assert e.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    assert len(admin.list_topics(timeout=10).topics[topic].partitions) == 5
    admin.delete_topics([topic])[topic].result(30)
    assert topic not in admin.list_topics(timeout=10).topics


def test_confluent_admin_describes_and_alters_configs(cluster):
    admin = _admin(cluster)
    topic = _name("configs")
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "3600000"})])[topic].result(
        30
    )
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    set_op = AlterConfigOpType.SET
    alter = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "7200000", incremental_operation=set_op)],
    )
    admin.incremental_alter_configs([alter])[alter].result(30)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "7200000"
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=set_op)],
    )
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert e.value.args[0].name() == "INVALID_CONFIG"


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_produce_and_consume_every_acks_and_codec(cluster, acks, compression):
    topic = _name(f"p-{acks}-{compression}")
    cluster.create_topic(topic)
    messages = [
        {"key": f"k{i}".encode(), "value": f"value-{i}".encode() * 10, "headers": [("h", b"v")]}
        for i in range(50)
    ]
    messages.append({"key": b"null-value", "value": None})
    messages.append({"key": None, "value": b"ts", "timestamp": 1_700_000_000_000})
    errors = _produce(cluster, topic, messages, acks=acks, **{"compression.type": compression})
    assert errors == []
    got = _consume_all(cluster, topic, expected=len(messages))
    assert [(m.key(), m.value()) for m in got] == [(m.get("key"), m.get("value")) for m in messages]
    assert [m.offset() for m in got] == list(range(len(messages)))
    assert got[0].headers() == [("h", b"v")]
    assert got[-1].timestamp()[1] == 1_700_000_000_000


def test_confluent_message_over_max_message_bytes_is_refused_and_not_stored(cluster):
    topic = _name("big")
    cluster.create_topic(topic, config={"max.message.bytes": "20000"})
    near = b"x" * 15_000
    assert _produce(cluster, topic, [{"value": near}]) == []
    errors = _produce(
        cluster, topic, [{"value": b"y" * 40_000}], **{"message.max.bytes": 1_000_000}
    )
    assert len(errors) == 1 and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    got = _consume_all(cluster, topic, expected=1, timeout=5)
    assert [m.value() for m in got] == [near]


def test_confluent_list_offsets_and_delete_records(cluster):
    admin = _admin(cluster)
    topic = _name("offsets")
    cluster.create_topic(topic)
    base = int(time.time() * 1000) - 60_000  # recent: far inside retention.ms
    _produce(cluster, topic, [{"value": b"v", "timestamp": base + i * 1000} for i in range(10)])
    tp = TopicPartition(topic, 0)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30)
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30)
    by_time = admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 4500)})[tp].result(30)
    assert (earliest.offset, latest.offset, by_time.offset) == (0, 10, 5)
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
    assert deleted[TopicPartition(topic, 0, 4)].result(30).low_watermark == 4
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30)
    assert earliest.offset == 4


def test_confluent_consumer_reads_everything_back_after_a_broker_restart(tmp_path):
    with EmbeddedCluster(data_dir=tmp_path) as cluster:
        topic = _name("restart")
        cluster.create_topic(topic, partitions=2)
        messages = [{"value": f"m{i}".encode(), "partition": i % 2} for i in range(200)]
        assert _produce(cluster, topic, messages, acks="all") == []
        cluster.restart()
        got = _consume_all(cluster, topic, partitions=2, expected=200)
        assert sorted(m.value() for m in got) == sorted(m["value"] for m in messages)
        more = _produce(cluster, topic, [{"value": b"after", "partition": 0}], acks="all")
        assert more == []
        # The restarted log takes appends after what it recovered, and serves them.
        again = _consume_all(cluster, topic, partitions=2, expected=201)
        assert len(again) == 201
        (after,) = [m for m in again if m.value() == b"after"]
        assert (after.partition(), after.offset()) == (0, 100)
        by_partition = {p: [m.offset() for m in again if m.partition() == p] for p in (0, 1)}
        assert by_partition == {0: list(range(101)), 1: list(range(100))}
