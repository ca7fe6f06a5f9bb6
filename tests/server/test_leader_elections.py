"""Leader elections on three in-process brokers (#17 part 2), with real clients and tools.

* ElectLeaders PREFERRED from confluent-kafka's AdminClient and ``kcore leader-election``
  (``kafka-leader-election.sh``: ``--topic/--partition``, ``--all-topic-partitions``,
  ``--path-to-json-file``, Kafka's output lines) moves leadership back to the first replica.
* ``unclean.leader.election.enable``: with it off, a partition whose only in-sync replica died
  stays leaderless while an out-of-sync replica is alive; turned on dynamically for the topic,
  the out-of-sync replica is elected (what only the dead one had is lost, as Kafka warns);
  ``--election-type UNCLEAN`` does the same for one partition on request. The dead replica
  comes back as a follower of the new leader's log.
* ``auto.leader.rebalance.enable`` with a short ``leader.imbalance.check.interval.seconds``:
  leaderships go back to their preferred replicas on their own.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from kcore.client import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster
from tests.metadata.harness import assigned_topic_request
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until
from tests.tools.tool import kcore, wrapper

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    config = {**REPLICATED_CONFIG, "auto.leader.rebalance.enable": "false"}
    with EmbeddedCluster(brokers=3, config=config) as c:
        yield c


def _admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _create(cluster, name: str, assignment: list[list[int]], **configs) -> None:
    request = assigned_topic_request(name, assignment, configs)

    async def create():
        return await cluster.broker.controller_call(lambda c, now: c.create_topics(request))

    assert cluster._call(create).topics[0].error_code == 0
    wait_until(
        lambda: all(
            len(registration(cluster, (name, p)).isr) == len(r) for p, r in enumerate(assignment)
        ),
        "full ISRs",
    )


def _off_preferred(cluster, topic: str, broker: int) -> None:
    """Broker ``broker`` stops (controlled shutdown: its leaderships move) and comes back
    into every ISR of ``topic``, leading nothing of it."""
    cluster.stop_node(broker)
    cluster.start_node(broker)
    parts = cluster.broker.metadata_image.topics.by_name[topic].partitions
    wait_until(
        lambda: all(broker in registration(cluster, (topic, p)).isr for p in parts),
        f"broker {broker} back in sync",
    )


def _election(cluster, *argv: str):
    return kcore("leader-election", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def test_preferred_elections_from_the_admin_client_and_the_tool(cluster, tmp_path):
    topic = unique("pref")
    _create(cluster, topic, [[2, 3, 1], [3, 2, 1], [2, 1, 3]])
    _off_preferred(cluster, topic, 2)
    assert registration(cluster, (topic, 0)).leader != 2
    assert registration(cluster, (topic, 2)).leader != 2

    # The tool, one partition.
    done = _election(cluster, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
    )
    assert registration(cluster, (topic, 0)).leader == 2
    again = _election(cluster, "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert again.stdout == f"Valid replica already elected for partitions {topic}-0\n"

    # confluent-kafka's AdminClient.
    admin = _admin(cluster)  # held: a collected client fails its futures
    result = admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition(topic, 2)]).result(60)
    assert [(tp.topic, tp.partition, e) for tp, e in result.items()] == [(topic, 2, None)]
    assert registration(cluster, (topic, 2)).leader == 2

    # The JSON file: one needs nothing, one is unknown.
    path = tmp_path / "election.json"
    path.write_text(
        json.dumps(
            {"partitions": [{"topic": topic, "partition": 1}, {"topic": topic, "partition": 9}]}
        )
    )
    mixed = _election(cluster, "--election-type", "PREFERRED", "--path-to-json-file", str(path))
    assert mixed.returncode == 1
    assert mixed.stdout.splitlines() == [
        f"Valid replica already elected for partitions {topic}-1",
        f"Error completing leader election (PREFERRED) for partition: {topic}-9: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        f"No such partition as {topic}-9",
    ]
    assert mixed.stderr == "1 replica(s) could not be elected\n"

    # Every partition: nothing left to do for this topic (others are not reported either).
    every = _election(cluster, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert every.returncode == 0, every.stderr
    assert topic not in every.stdout

    # A broker-only node forwards ElectLeaders to the controller (node 1) and answers it.
    E = m.ElectLeadersRequest
    request = E(election_type=0, topic_partitions=[E.TopicPartitions(topic=topic, partitions=[1])])

    async def ask_node_2():
        async with await BrokerConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            return await conn.request(request, 2)

    [result] = cluster._call(ask_node_2).replica_election_results[0].partition_result
    assert result.error_code == ErrorCode.ELECTION_NOT_NEEDED

    # A producer follows the new leaders.
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for p in range(3):
        producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(60) == 0


def test_the_tool_refuses_bad_option_combinations(cluster):
    both = _election(
        cluster, "--election-type", "PREFERRED", "--topic", "t", "--all-topic-partitions"
    )
    assert both.returncode == 1
    assert both.stderr == (
        "One and only one of the following options is required: topic, all-topic-partitions, "
        "path-to-json-file\n"
    )
    no_partition = _election(cluster, "--election-type", "PREFERRED", "--topic", "t")
    assert no_partition.stderr == "Missing required option(s): partition\n"
    bad_type = _election(cluster, "--election-type", "random", "--all-topic-partitions")
    assert bad_type.returncode == 1 and "PREFERRED and UNCLEAN" in bad_type.stderr
    helped = wrapper("kafka-leader-election.sh", "--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("This tool attempts to elect a new leader for a set of topic")
    assert "--path-to-json-file <String: Path to" in helped.stdout
    unreadable = _election(
        cluster, "--election-type", "PREFERRED", "--all-topic-partitions",
        "--admin.config", "/nonexistent/admin.properties",
    )  # fmt: skip
    assert unreadable.returncode == 1
    assert unreadable.stderr.startswith("--admin.config: cannot read /nonexistent/")
    missing = kcore("leader-election", "--all-topic-partitions")
    assert missing.stderr == "Missing required option(s): bootstrap-server, election-type\n"


def _leader(cluster, tp) -> int:
    return registration(cluster, tp).leader


def test_unclean_election_only_when_enabled(cluster):
    # Two topics on brokers 2 and 3, min.insync.replicas=1 so that one replica can take writes.
    strict, relaxed = unique("strict"), unique("relaxed")
    for name in (strict, relaxed):
        _create(cluster, name, [[2, 3]], **{"min.insync.replicas": "1"})
    cluster.stop_node(3, graceful=False)
    for name in (strict, relaxed):
        wait_until(lambda n=name: registration(cluster, (n, 0)).isr == (2,), "3 out of the ISR")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for name in (strict, relaxed):
        producer.produce(name, value=b"only on 2", partition=0)
    assert producer.flush(60) == 0

    cluster.stop_node(2, graceful=False)  # the only in-sync replica dies
    for name in (strict, relaxed):
        wait_until(lambda n=name: _leader(cluster, (n, 0)) == -1, "leaderless")
    cluster.start_node(3)  # out of sync: not eligible while unclean election is off
    wait_until(lambda: cluster.broker.metadata_image.cluster.brokers[3].active, "3 is back")
    time.sleep(2)
    assert _leader(cluster, (strict, 0)) == -1 and _leader(cluster, (relaxed, 0)) == -1

    # Turned on dynamically for one topic: its partition gets broker 3 at once.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        relaxed,
        incremental_configs=[
            ConfigEntry(
                "unclean.leader.election.enable",
                "true",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    admin = _admin(cluster)
    admin.incremental_alter_configs([resource])[resource].result(60)
    wait_until(lambda: _leader(cluster, (relaxed, 0)) == 3, "an unclean leader")
    assert _leader(cluster, (strict, 0)) == -1

    # On request, whatever the config.
    done = _election(cluster, "--election-type", "UNCLEAN", "--topic", strict, "--partition", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"Successfully completed leader election (UNCLEAN) for partitions {strict}-0\n"
    )
    assert _leader(cluster, (strict, 0)) == 3
    again = _election(cluster, "--election-type", "UNCLEAN", "--topic", strict, "--partition", "0")
    assert again.stdout == f"Valid replica already elected for partitions {strict}-0\n"

    # The record only 2 had is gone; the new leader takes writes; 2 comes back as its follower.
    for name in (strict, relaxed):
        producer.produce(name, value=b"after", partition=0)
    assert producer.flush(60) == 0
    cluster.start_node(2)
    for name in (strict, relaxed):
        wait_until(lambda n=name: registration(cluster, (n, 0)).isr == (3, 2) or
                   sorted(registration(cluster, (n, 0)).isr) == [2, 3], "2 rejoins")  # fmt: skip
        leader = cluster.leader_partition((name, 0))
        assert leader.log.log_end_offset == 1  # "after" alone
        follower = cluster.node(2).replica_manager.partitions[(name, 0)]
        wait_until(lambda f=follower: f.log.log_end_offset == 1, "2 truncated and caught up")


def test_auto_leader_rebalance_moves_leaders_back_to_preferred_replicas():
    config = {
        **REPLICATED_CONFIG,
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with EmbeddedCluster(brokers=3, config=config) as c:
        topic = unique("auto")
        _create(c, topic, [[2, 1, 3], [3, 1, 2], [1, 2, 3]])
        c.stop_node(2)  # its leadership moves away
        assert _leader(c, (topic, 0)) != 2
        c.start_node(2)
        wait_until(lambda: 2 in registration(c, (topic, 0)).isr, "2 back in sync")
        wait_until(lambda: _leader(c, (topic, 0)) == 2, "leadership back on 2")
        assert [_leader(c, (topic, p)) for p in range(3)] == [2, 3, 1]
