"""Issue #12 part 2: no replication factor above 1 until replication exists (issue #17).

On three brokers kcore used to accept RF=3, report three in-sync replicas for every partition
and never replicate: the high watermark stayed put and acks=all producers timed out. Now real
clients get INVALID_REPLICATION_FACTOR for every request that would give a partition a second
replica (CreateTopics, CreatePartitions with assignments, AlterPartitionReassignments), and the
internal topics come up with one replica under Kafka's default
``offsets.topic.replication.factor=3``, so consumer groups work on the three brokers.
"""

from __future__ import annotations

import logging
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.errors import InvalidReplicationFactorError, NoReassignmentInProgressError

from kcore.client import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(180)

NOT_AVAILABLE = (
    ", but replication is not available yet: kcore does not copy partitions between brokers "
    "(issue #17), so a partition can have at most 1 replica."
)
LIMIT_LOGGED = (
    "Creating __consumer_offsets with replication factor 1, not 3 "
    "(offsets.topic.replication.factor): kcore.replication.enable is not set"
)


@pytest.fixture(scope="module")
def cluster():
    # Kafka's defaults for a production cluster: three replicas everywhere.
    config = {
        "default.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "6",
    }
    with EmbeddedCluster(brokers=3, config=config) as c:
        yield c


@pytest.fixture
def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_error(admin: AdminClient, topic: NewTopic) -> KafkaError:
    with pytest.raises(KafkaException) as err:
        admin.create_topics([topic])[topic.topic].result(30)
    return err.value.args[0]


def _single_replica_in_sync(admin: AdminClient, topic: str, partitions: int) -> None:
    metadata = admin.list_topics(timeout=10).topics[topic]
    assert len(metadata.partitions) == partitions
    for p in metadata.partitions.values():
        assert p.replicas == [p.leader] and p.isrs == [p.leader], p


def test_create_topics_with_replication_factor_3_is_refused_on_three_brokers(cluster, admin):
    assert len(admin.list_topics(timeout=10).brokers) == 3
    topic = _name("rf3")
    error = _create_error(admin, NewTopic(topic, num_partitions=3, replication_factor=3))
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error.str() == "Replication factor 3 was requested" + NOT_AVAILABLE
    assert topic not in admin.list_topics(timeout=10).topics


def test_create_topics_with_an_assignment_of_three_replicas_is_refused(cluster, admin):
    topic = _name("assigned")
    error = _create_error(
        admin, NewTopic(topic, num_partitions=2, replica_assignment=[[1, 2, 3], [2, 3, 1]])
    )
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error.str() == (
        "The manual partition assignment includes a partition with 3 replicas" + NOT_AVAILABLE
    )
    assert topic not in admin.list_topics(timeout=10).topics


def test_create_topics_with_a_default_replication_factor_of_3_is_refused_not_capped(cluster, admin):
    topic = _name("defaulted")
    error = _create_error(admin, NewTopic(topic, num_partitions=1))  # RF -1: the default
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error.str() == (
        "The default replication factor is 3 (default.replication.factor)" + NOT_AVAILABLE
    )


def test_a_single_replica_topic_on_three_brokers_acknowledges_acks_all(cluster, admin):
    topic = _name("single")
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    _single_replica_in_sync(admin, topic, 3)
    leaders = {p.leader for p in admin.list_topics(timeout=10).topics[topic].partitions.values()}
    assert leaders == {1, 2, 3}  # one partition on each broker
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    delivered = []
    for i in range(30):
        producer.produce(
            topic,
            value=b"%d" % i,
            partition=i % 3,
            on_delivery=lambda err, msg: delivered.append(err),
        )
    assert producer.flush(30) == 0
    assert len(delivered) == 30 and all(e is None for e in delivered)


def test_create_partitions_with_an_assignment_of_two_replicas_is_refused(cluster, admin):
    topic = _name("grow")
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    grow = NewPartitions(topic, 2, replica_assignment=[[2, 3]])
    with pytest.raises(KafkaException) as err:
        admin.create_partitions([grow])[topic].result(30)
    error = err.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error.str() == (
        "The manual partition assignment includes a partition with 2 replicas" + NOT_AVAILABLE
    )
    admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[3]])])[topic].result(30)
    _single_replica_in_sync(admin, topic, 2)
    assert admin.list_topics(timeout=10).topics[topic].partitions[1].leader == 3


def test_alter_partition_reassignments_refuses_second_replicas_and_moves(cluster, admin):
    topic = _name("reassign")
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    leader = admin.list_topics(timeout=10).topics[topic].partitions[0].leader
    other = next(b for b in (1, 2, 3) if b != leader)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        tp = KafkaPythonTopicPartition(topic, 0)
        assert client.alter_partition_reassignments({tp: [leader, other]}) == {
            tp: InvalidReplicationFactorError
        }
        assert client.alter_partition_reassignments({tp: [other]}) == {
            tp: InvalidReplicationFactorError
        }
        assert client.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
        assert client.alter_partition_reassignments({tp: [leader]}) == {tp: None}  # as it is
        assert client.list_partition_reassignments() == {}
    finally:
        client.close()
    _single_replica_in_sync(admin, topic, 1)

    async def messages():  # the same refusals on the wire, for their messages
        R = m.AlterPartitionReassignmentsRequest
        request = R(
            topics=[
                R.ReassignableTopic(
                    name=topic,
                    partitions=[
                        R.ReassignablePartition(partition_index=0, replicas=[leader, other]),
                        R.ReassignablePartition(partition_index=0, replicas=[other]),
                    ],
                )
            ]
        )
        async with await BrokerConnection.connect("127.0.0.1", cluster.port) as conn:
            response = await conn.request(request)
        return [(p.error_code, p.error_message) for p in response.responses[0].partitions]

    assert trio.run(messages) == [
        (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "The manual partition assignment includes a partition with 2 replicas" + NOT_AVAILABLE,
        ),
        (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Reassigning {topic}-0 from replicas [{leader}] to [{other}] takes 2 "
            "replicas while the new ones copy the log" + NOT_AVAILABLE,
        ),
    ]


def test_consumer_offsets_comes_up_with_one_replica_and_serves_a_group(cluster, admin, caplog):
    topic, group = _name("grouped"), _name("group")
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    with caplog.at_level(logging.WARNING, logger="kcore.server.internal_topics"):
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
            }
        )
        try:
            offsets = [TopicPartition(topic, p, 10 + p) for p in range(3)]
            committed = consumer.commit(offsets=offsets, asynchronous=False)
            assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [
                (p, 10 + p, None) for p in range(3)
            ]
            fetched = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
            assert [(tp.partition, tp.offset) for tp in fetched] == [(p, 10 + p) for p in range(3)]
        finally:
            consumer.close()
    _single_replica_in_sync(admin, "__consumer_offsets", 6)
    logged = [r.getMessage() for r in caplog.records if "__consumer_offsets" in r.getMessage()]
    assert logged and set(logged) == {LIMIT_LOGGED}
    assert len(logged) <= 3  # once per broker at most, not per request


def test_reassign_partitions_tool_prints_the_controllers_refusal(cluster, admin, tmp_path):
    topic = _name("tool")
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    leader = admin.list_topics(timeout=10).topics[topic].partitions[0].leader
    other = next(b for b in (1, 2, 3) if b != leader)
    plan = tmp_path / "plan.json"
    plan.write_text(f'{{"partitions":[{{"topic":"{topic}","partition":0,"replicas":[{other}]}}]}}')
    out = kcore("reassign-partitions", "--bootstrap-server", cluster.bootstrap_servers,
                "--execute", "--reassignment-json-file", str(plan))  # fmt: skip
    assert out.returncode == 1
    assert out.stdout.endswith(
        "Save this to use as the --reassignment-json-file option during rollback\n"
        f"Error reassigning partition(s):\n{topic}-0: Reassigning {topic}-0 from replicas "
        f"[{leader}] to [{other}] takes 2 replicas while the new ones copy the log"
        + NOT_AVAILABLE
        + "\n"
    )
