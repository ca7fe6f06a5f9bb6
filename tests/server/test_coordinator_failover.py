"""Internal topics replicated and coordinators that move with their leadership (#17 part 2).

With ``kcore.replication.enable``: ``__consumer_offsets``, ``__transaction_state`` and
``__mirror_state`` are created with their replication-factor configs (3 by default; refused
with COORDINATOR_NOT_AVAILABLE, which clients retry, while fewer brokers are alive), and
``__transaction_state`` carries ``transaction.state.log.min.isr``. Coordinator writes are
acks=all: an offset commit is refused (COORDINATOR_NOT_AVAILABLE, retriable) while the offsets
partition's ISR is below ``min.insync.replicas``. When the broker leading a
coordinator partition dies (its tasks cancelled, no controlled shutdown: fenced after
``broker.session.timeout.ms``), a member of the ISR leads it, loads it, and confluent-kafka's
consumer group and transactional producer carry on there: the group resumes from its
committed offsets, the open transaction commits or aborts cleanly, and a read_committed
consumer sees every committed record once.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from kcore.client import BrokerConnection
from kcore.coordinator.group.records import CONSUMER_OFFSETS
from kcore.coordinator.transaction.records import TRANSACTION_STATE
from kcore.metadata.topic_names import MIRROR_STATE_TOPIC
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.protocol.errors import KafkaError as KafkaCoreError
from kcore.server.internal_topics import CLUSTER_MIRROR, GROUP, TRANSACTION
from kcore.testing import EmbeddedCluster
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster():
    with EmbeddedCluster(brokers=3, config=REPLICATED_CONFIG) as c:
        yield c


def coordinator_of(cluster, key_type: int, key: str) -> int:
    """The node leading ``key``'s coordinator partition (creating the topic if needed)."""

    def ask():
        try:
            return cluster._call(cluster.broker.internal_topics.coordinator, key_type, key)
        except KafkaCoreError as e:
            assert e.code == ErrorCode.COORDINATOR_NOT_AVAILABLE, e
            return None

    return wait_until(ask, f"a coordinator for {key!r}")


def key_led_off_the_controller(cluster, key_type: int, prefix: str) -> tuple[str, int]:
    """A key whose coordinator is a broker-only node (node 1, the controller, cannot stop),
    once its internal topic's partitions have full ISRs."""
    coordinator_of(cluster, key_type, prefix)
    topic = {GROUP: CONSUMER_OFFSETS, TRANSACTION: TRANSACTION_STATE}[key_type]
    for p in range(3):
        wait_until(lambda p=p: len(registration(cluster, (topic, p)).isr) == 3, "full ISR")
    for _ in range(1000):
        key = unique(prefix)
        node = coordinator_of(cluster, key_type, key)
        if node != 1:
            return key, node
    raise AssertionError("no key led by a broker-only node")


def test_internal_topics_get_their_replication_factor_and_min_isr(cluster):
    for key_type, name in (
        (GROUP, CONSUMER_OFFSETS),
        (TRANSACTION, TRANSACTION_STATE),
        (CLUSTER_MIRROR, MIRROR_STATE_TOPIC),
    ):
        coordinator_of(cluster, key_type, "k")
        topic = cluster.broker.metadata_image.topics.by_name[name]
        assert {len(reg.replicas) for reg in topic.partitions.values()} == {3}, name
    configs = cluster.broker.metadata_image.configs.topic(TRANSACTION_STATE)
    assert configs["min.insync.replicas"] == "2"  # transaction.state.log.min.isr's default


def test_internal_topic_creation_waits_for_enough_live_brokers(cluster):
    cluster.stop_node(3)  # controlled shutdown: no longer a live broker
    wait_until(lambda: not cluster.broker.metadata_image.cluster.brokers[3].active, "fenced")
    with pytest.raises(KafkaCoreError) as refused:
        cluster._call(cluster.broker.internal_topics.coordinator, GROUP, "g")
    assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "needs 3 live brokers" in refused.value.message
    assert CONSUMER_OFFSETS not in cluster.broker.metadata_image.topics.by_name
    cluster.start_node(3)
    assert coordinator_of(cluster, GROUP, "g") in (1, 2, 3)
    topic = cluster.broker.metadata_image.topics.by_name[CONSUMER_OFFSETS]
    assert {len(reg.replicas) for reg in topic.partitions.values()} == {3}


def _produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % 3)
    assert producer.flush(60) == 0


def _consumer(cluster, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def _poll(consumer: Consumer, count: int, timeout: float = 90.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    return got


def _commit(consumer: Consumer, timeout: float = 90.0) -> None:
    """Commit synchronously, retrying what the client gives up on while the coordinator
    moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a timed-out request)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as e:
            if not e.args[0].retriable() and "COORDINATOR" not in e.args[0].name():
                raise
            if time.monotonic() > deadline:
                raise
            consumer.poll(0.2)


def _committed(consumer: Consumer, topic: str) -> dict[int, int]:
    """partition -> committed offset (0 for none yet)."""
    asked = [CTopicPartition(topic, p) for p in range(3)]
    return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(asked, timeout=30)}


def test_a_consumer_group_survives_the_death_of_its_coordinator(cluster):
    topic = unique("grp")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    group, coordinator = key_led_off_the_controller(cluster, GROUP, "group")
    values = [f"v{i}".encode() for i in range(300)]
    _produce(cluster, topic, values)

    consumer = _consumer(cluster, group)
    consumer.subscribe([topic])
    first = _poll(consumer, 150)
    assert len(first) >= 150
    _commit(consumer)
    committed_before = _committed(consumer, topic)

    cluster.stop_node(coordinator, graceful=False)
    offsets_partition = cluster.broker.internal_topics.partition_for(GROUP, group)
    tp = (CONSUMER_OFFSETS, offsets_partition)
    wait_until(lambda: registration(cluster, tp).leader not in (-1, coordinator), "new leader")
    assert coordinator_of(cluster, GROUP, group) != coordinator

    # The member finds the new coordinator, consumes the rest and commits there.
    rest = _poll(consumer, len(values) - len(first))
    assert sorted(first + rest) == sorted(values)
    _commit(consumer)
    consumer.close()

    # A new member of the group resumes from the committed offsets: only what comes next.
    resumed = _consumer(cluster, group)
    committed_after = _committed(resumed, topic)
    assert sum(committed_before.values()) == len(first)
    assert sum(committed_after.values()) == len(values)
    resumed.subscribe([topic])
    later = [f"later{i}".encode() for i in range(30)]
    _produce(cluster, topic, later)
    got = _poll(resumed, len(later))
    got += _poll(resumed, 1, timeout=3)  # anything more would be a replay of old records
    resumed.close()
    assert sorted(got) == sorted(later)

    # The dead coordinator comes back as a follower of the offsets partition.
    cluster.start_node(coordinator)
    wait_until(lambda: coordinator in registration(cluster, tp).isr, "back in the ISR")


def transactional_producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 0,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    return producer


def run_transaction(
    producer: Producer,
    topic: str,
    tag: str,
    committed: list[bytes],
    *,
    count: int = 30,
    before_commit=None,
) -> None:
    """One transaction of ``count`` records over three partitions, flushed, then
    ``before_commit()`` (a coordinator's death), then committed: its records go to
    ``committed`` if the commit succeeds. Whatever the client makes of a coordinator move, it
    must end cleanly: an abortable error is aborted, and nothing of it is ever read."""
    values = [f"{tag}-{i}".encode() for i in range(count)]
    producer.begin_transaction()
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % 3)
    producer.flush(60)
    if before_commit is not None:
        before_commit()
    try:
        producer.commit_transaction(180)
        committed.extend(values)
    except KafkaException as e:
        assert e.args[0].txn_requires_abort(), e
        producer.abort_transaction(180)


def test_a_transactional_producer_survives_the_death_of_its_coordinator(cluster):
    topic = unique("txn")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    for p in range(3):
        wait_until(lambda p=p: len(registration(cluster, (topic, p)).isr) == 3, "full ISR")
    tid, coordinator = key_led_off_the_controller(cluster, TRANSACTION, "tid")
    producer = transactional_producer(cluster.bootstrap_servers, tid)
    committed: list[bytes] = []
    run_transaction(producer, topic, "before", committed)
    run_transaction(
        producer, topic, "during", committed,
        before_commit=lambda: cluster.stop_node(coordinator, graceful=False),
    )  # fmt: skip
    tp = (TRANSACTION_STATE, cluster.broker.internal_topics.partition_for(TRANSACTION, tid))
    wait_until(lambda: registration(cluster, tp).leader not in (-1, coordinator), "new leader")
    run_transaction(producer, topic, "after", committed)

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique("reader"),
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(3)])
    got = _poll(consumer, len(committed))
    got += _poll(consumer, 1, timeout=3)
    consumer.close()
    assert sorted(got) == sorted(committed)  # each committed record once, nothing else
    assert len(set(got)) == len(got)
    assert any(v.startswith(b"after") for v in got)


def _offset_commit(cluster, group: str, topic: str, offset: int) -> int:
    """A simple (memberless) OffsetCommit of ``topic``-0 at node 1; its error code."""
    C = m.OffsetCommitRequest
    request = C(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[
            C.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                           committed_metadata="")])],
    )  # fmt: skip

    async def commit():
        async with await BrokerConnection.connect("127.0.0.1", cluster.ports[0]) as conn:
            response = await conn.request(request, 8)
        return response.topics[0].partitions[0].error_code

    return cluster._call(commit)


def test_coordinator_writes_are_refused_below_min_insync_replicas(cluster):
    topic = unique("minisr")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    # A group coordinated by node 1 (the controller, which stays up).
    coordinator_of(cluster, GROUP, "g")
    for p in range(3):
        wait_until(lambda p=p: len(registration(cluster, (CONSUMER_OFFSETS, p)).isr) == 3, "ISR")
    group = next(
        g for g in (unique("g") for _ in range(1000)) if coordinator_of(cluster, GROUP, g) == 1
    )
    assert _offset_commit(cluster, group, topic, 1) == 0
    tp = (CONSUMER_OFFSETS, cluster.broker.internal_topics.partition_for(GROUP, group))
    cluster.stop_node(2, graceful=False)
    cluster.stop_node(3, graceful=False)
    wait_until(lambda: registration(cluster, tp).isr == (1,), "the ISR down to node 1")
    # min.insync.replicas=2: the write is refused, and the client is told to retry.
    assert _offset_commit(cluster, group, topic, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    cluster.start_node(2)
    wait_until(lambda: 2 in registration(cluster, tp).isr, "node 2 back in the ISR")
    assert _offset_commit(cluster, group, topic, 3) == 0
