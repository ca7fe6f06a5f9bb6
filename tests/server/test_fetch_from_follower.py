"""Fetch from followers (KIP-392) on three in-process brokers in racks a, b and c, RF=3.

With ``replica.selector.class`` Kafka's RackAwareReplicaSelector, a consumer with
``client.rack=b`` (confluent-kafka, kafka-python, aiokafka) reads every record, and the records come from
the rack-b broker: the leaders of the other partitions answer with the preferred read replica
and no records, the rack-b follower serves up to its high watermark. read_committed works from
the follower (its LSO and aborted transactions are its own). When the broker the consumer reads
from, or that broker's leader, is killed, the consumer carries on and reads everything once.
Racks are in Metadata and DescribeCluster; an unknown selector class stops the broker at start.
"""

from __future__ import annotations

import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from kcore.protocol.errors import ErrorCode
from kcore.server.config import BrokerConfig
from kcore.server.request_metrics import TopicTraffic
from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_ports
from tests.server.fetch_requests import fetch_request
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until
from tests.server.test_process import run_refused

pytestmark = pytest.mark.timeout(240)

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACKS = {1: "a", 2: "b", 3: "c"}
READER = 2  # the broker of rack b


def racked_cluster() -> EmbeddedCluster:
    return EmbeddedCluster(
        brokers=3,
        config={**REPLICATED_CONFIG, "replica.selector.class": RACK_AWARE},
        node_config={n: {"broker.rack": rack} for n, rack in RACKS.items()},
    )


@pytest.fixture(scope="module")
def cluster():
    with racked_cluster() as c:
        yield c


@pytest.fixture
def own_cluster():
    with racked_cluster() as c:
        yield c


def consumer_bytes(cluster, topic: str) -> dict[int, int]:
    """node id -> the bytes of ``topic`` that node served to consumers (not to followers)."""

    async def read():
        return {
            node.node_id: node.topic_traffic.topics.get(topic, [0, 0, 0, 0])[TopicTraffic.BYTES_OUT]
            for node in cluster.brokers
        }

    return cluster._call(read)


def served_by_the_reader_only(cluster, topic: str) -> dict[int, int]:
    """Assert that only the rack-b broker served ``topic`` to consumers; the bytes per node."""
    served = consumer_bytes(cluster, topic)
    assert served[READER] > 0 and served[1] == 0 and served[3] == 0, served
    return served


def in_sync_everywhere(cluster, topic: str, partitions: int) -> bool:
    """Every partition has its full ISR and every replica has the leader's log and HW (so
    the rack-b follower is a candidate for every offset)."""
    for p in range(partitions):
        if sorted(registration(cluster, (topic, p)).isr) != [1, 2, 3]:
            return False
        ends = {
            (n.replica_manager.partitions[(topic, p)].log_end_offset,
             n.replica_manager.partitions[(topic, p)].high_watermark)
            for n in cluster.brokers
        }  # fmt: skip
        if len(ends) != 1:
            return False
    return True


def produce(cluster, topic: str, values, partition: int | None = None) -> None:
    """acks=all to ``partition``, or round-robin over every partition of the topic (so that
    each leader, in whichever rack, has records to redirect)."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    count = len(cluster.broker.metadata_image.topics.by_name[topic].partitions)
    errors = []
    for i, v in enumerate(values):
        producer.produce(
            topic,
            value=v,
            partition=i % count if partition is None else partition,
            on_delivery=lambda e, m: e and errors.append(e),
        )
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]


def confluent_consumer(cluster, **extra) -> Consumer:
    config = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": unique("g"),
        "enable.auto.commit": False,
        "client.rack": "b",
        "fetch.wait.max.ms": 100,
    }
    config.update(extra)
    return Consumer(config)


def poll_values(
    consumer: Consumer, count: int, timeout: float = 60
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of the next ``count`` records; fails on a duplicate offset."""
    got: list[tuple[int, int, bytes]] = []
    seen = set()
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        key = (msg.partition(), msg.offset())
        assert key not in seen, f"offset {key} read twice"
        seen.add(key)
        got.append((msg.partition(), msg.offset(), msg.value()))
    return got


def test_a_confluent_consumer_in_rack_b_reads_everything_from_the_rack_b_broker(cluster):
    topic = unique("ffr")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    values = [f"v{i}".encode() for i in range(900)]
    produce(cluster, topic, values)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")
    leaders = {registration(cluster, (topic, p)).leader for p in range(3)}
    assert leaders - {READER}, "some partition must be led by another rack's broker"

    consumer = confluent_consumer(cluster)
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(3)])
        got = poll_values(consumer, len(values))
    finally:
        consumer.close()
    assert sorted(v for _, _, v in got) == sorted(values)
    served_by_the_reader_only(cluster, topic)


def test_a_kafka_python_consumer_in_rack_b_reads_everything_from_the_rack_b_broker(cluster):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic = unique("ffr-kp")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    values = [f"k{i}".encode() for i in range(600)]
    produce(cluster, topic, values)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        client_rack="b",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([KTopicPartition(topic, p) for p in range(3)])
        consumer.seek_to_beginning()
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"read {len(got)} of {len(values)}"
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    assert (r.partition, r.offset) not in got, "read twice"
                    got[(r.partition, r.offset)] = r.value
    finally:
        consumer.close()
    assert sorted(got.values()) == sorted(values)
    served_by_the_reader_only(cluster, topic)


def test_an_aiokafka_consumer_in_rack_b_reads_everything_from_the_rack_b_broker(cluster):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    topic = unique("ffr-aio")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    values = [f"o{i}".encode() for i in range(600)]
    produce(cluster, topic, values)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")

    async def consume() -> dict[tuple[int, int], bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers,
            client_rack="b",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, p) for p in range(3)])
            await consumer.seek_to_beginning()
            got: dict[tuple[int, int], bytes] = {}
            async with asyncio.timeout(60):
                while len(got) < len(values):
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        for r in records:
                            assert (r.partition, r.offset) not in got, "read twice"
                            got[(r.partition, r.offset)] = r.value
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(consume())
    assert sorted(got.values()) == sorted(values)
    served_by_the_reader_only(cluster, topic)


def test_read_committed_from_the_follower_skips_aborted_transactions(cluster):
    topic = unique("ffr-txn")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    # A partition the rack-b broker follows, so the follower's LSO is what is read.
    p = next(p for p in range(3) if registration(cluster, (topic, p)).leader != READER)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": unique("t")}
    )
    producer.init_transactions(60)
    for txn, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, value=f"{txn}-{i}".encode(), partition=p)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")

    consumer = confluent_consumer(cluster, **{"isolation.level": "read_committed"})
    try:
        consumer.assign([CTopicPartition(topic, p, 0)])
        got = poll_values(consumer, 100)
        assert consumer.poll(1.0) is None  # nothing of the aborted one follows
    finally:
        consumer.close()
    expected = [f"{t}-{i}".encode() for t in ("c1", "c2") for i in range(50)]
    assert [v for _, _, v in got] == expected
    served_by_the_reader_only(cluster, topic)


def raw_fetch(cluster, node_id: int, topic: str, partition: int, *, version: int, rack=""):
    """One consumer Fetch of ``topic``-``partition`` from offset 0, sent to node ``node_id``:
    its partition answer."""
    from kcore.client.connection import BrokerConnection

    topic_id = cluster.broker.metadata_image.topics.by_name[topic].topic_id
    request = fetch_request(topic, topic_id, partition, rack_id=rack)

    async def send():
        conn = await BrokerConnection.connect("127.0.0.1", cluster.ports[node_id - 1])
        async with conn:
            response = await conn.request(request, version, timeout=30)
        return response.responses[0].partitions[0]

    return cluster._call(send)


def test_on_the_wire_the_leader_names_the_replica_of_the_consumers_rack(cluster):
    topic = unique("ffr-wire")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    produce(cluster, topic, [b"x"] * 30)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")
    p = next(p for p in range(3) if registration(cluster, (topic, p)).leader != READER)
    leader = registration(cluster, (topic, p)).leader
    hw = cluster.leader_partition((topic, p)).high_watermark
    # Fetch v11+ from rack b: the rack-b replica's id, the offsets, no records.
    redirected = raw_fetch(cluster, leader, topic, p, version=12, rack="b")
    assert redirected.error_code == 0 and redirected.preferred_read_replica == READER
    assert redirected.high_watermark == hw and not redirected.records
    # The leader's own rack, no rack, or a Fetch before v11: the leader reads.
    for version, rack in ((12, RACKS[leader]), (12, ""), (10, "b")):
        served = raw_fetch(cluster, leader, topic, p, version=version, rack=rack)
        assert served.preferred_read_replica == -1 and served.records, (version, rack)
    # The rack-b follower serves Fetch v11+, and refuses older consumers (leader only).
    assert raw_fetch(cluster, READER, topic, p, version=12, rack="b").records
    old = raw_fetch(cluster, READER, topic, p, version=10)
    assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_broker_without_a_replica_answers_not_leader_or_follower(cluster):
    topic = unique("ffr-single")
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    leader = registration(cluster, (topic, 0)).leader
    other = next(n for n in RACKS if n != leader)
    answer = raw_fetch(cluster, other, topic, 0, version=12, rack="b")
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert answer.current_leader.leader_id == leader


def test_brokers_racks_are_in_metadata_and_describe_cluster(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = admin.describe_cluster(request_timeout=30).result(30)
    assert {n.id: n.rack for n in described.nodes} == RACKS
    # Metadata's brokers, as kafka-python's cluster view holds them.
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        client.list_topics()  # a Metadata round trip
        brokers = client._client.cluster.brokers()
    finally:
        client.close()
    assert {b.node_id: b.rack for b in brokers} == RACKS


@pytest.mark.parametrize("killed", ["reader", "leader"])
def test_the_consumer_carries_on_when_its_broker_or_the_leader_is_killed(own_cluster, killed):
    cluster = own_cluster
    topic = unique("ffr-kill")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    # A partition led by node 3 (node 1 is the only controller: it stays up), followed by the
    # rack-b broker the consumer reads from.
    p = next(p for p in range(3) if registration(cluster, (topic, p)).leader == 3)
    first = [f"a{i}".encode() for i in range(300)]
    produce(cluster, topic, first, partition=p)
    wait_until(lambda: in_sync_everywhere(cluster, topic, 3), "replicas in sync")
    consumer = confluent_consumer(cluster, **{"topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.assign([CTopicPartition(topic, p, 0)])
        got = poll_values(consumer, len(first))
        served = served_by_the_reader_only(cluster, topic)
        cluster.stop_node(READER if killed == "reader" else 3, graceful=False)
        wait_until(
            lambda: (
                len(registration(cluster, (topic, p)).isr) == 2
                and registration(cluster, (topic, p)).leader > 0
            ),
            "the ISR without the killed broker",
        )
        second = [f"b{i}".encode() for i in range(300)]
        produce(cluster, topic, second, partition=p)
        before = served  # (librdkafka may fetch the second batch before it is polled)
        got += poll_values(consumer, len(second), timeout=90)
        assert consumer.poll(1.0) is None  # and nothing twice
        after = consumer_bytes(cluster, topic)
    finally:
        consumer.close()
    if killed == "reader":
        # No replica left in rack b: the leader serves the consumer again.
        assert after[3] > before[3] and after[1] == before[1], (before, after)
    # (With the leader killed, who serves next is a race: a new leader that the rack-b
    # follower has not fetched from yet knows no position of it and serves the consumer
    # itself, as Kafka's does; what must hold is that everything is read once.)
    assert [v for _, _, v in got] == first + second
    assert [o for _, o, _ in got] == list(range(len(first) + len(second)))


def test_an_unknown_replica_selector_class_is_refused_at_startup(tmp_path):
    """``kcore server`` stops at once with one line naming the key (kcore would otherwise
    serve every consumer from the leader, ignoring the class asked for)."""
    port, controller_port = free_ports(2)
    args = [
        sys.executable,
        "-m",
        "kcore.cli",
        "server",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "--override",
        f"log.dirs={tmp_path / 'data'}",
        "--override",
        "replica.selector.class=com.example.ClosestReplicaSelector",
    ]
    returncode, err = run_refused(args)
    assert returncode != 0
    errors = [line for line in err.splitlines() if not line.startswith("[")]  # log lines
    assert len(errors) == 1 and "replica.selector.class" in errors[0], err
    assert "com.example.ClosestReplicaSelector" in errors[0]
    assert "no such replica selector" in errors[0]
    # Kafka's own selectors start.
    for name in (RACK_AWARE, "org.apache.kafka.common.replica.LeaderSelector"):
        assert BrokerConfig({"replica.selector.class": name}).replica_selector_class == name
