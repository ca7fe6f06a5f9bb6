"""Secured inter-broker and controller listeners (#18): a replicated three-node cluster whose
nodes reach each other only over SASL_SSL (SCRAM between brokers, PLAIN to the controller),
the Raft and controller APIs authorized with CLUSTER_ACTION, and a node with the wrong
password kept out."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from tests.security.conftest import make_pki
from tests.security.internal_cluster import InternalSecureCluster, internal_config
from tests.security.sasl_cluster import RawSasl, plain_login
from tests.server.replicated import registration

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki-internal"))


@pytest.fixture(scope="module")
def cluster(pki):
    with InternalSecureCluster(pki, 3) as c:
        yield c


def _wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_three_nodes_over_sasl_ssl_replicate_acks_all_and_serve_consumers(cluster):
    from confluent_kafka import Consumer, Producer

    # Brokers 2 and 3 registered through the controller listener (SASL_SSL, PLAIN as broker).
    _wait(lambda: len(cluster.broker.metadata_image.cluster.brokers) == 3, "3 registrations")
    topic = f"isec-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    # Every follower fetches over INTERNAL (SASL_SSL, SCRAM as broker): the ISR fills up.
    _wait(
        lambda: all(len(registration(cluster, (topic, p)).isr) == 3 for p in range(3)),
        "a full ISR",
    )
    producer = Producer(cluster.client_conf(acks="all", **{"enable.idempotence": True}))
    errors = []
    for i in range(60):
        producer.produce(
            topic, key=b"k%d" % i, value=b"v%d" % i, on_delivery=lambda e, _: errors.append(e)
        )
    assert producer.flush(60) == 0
    assert errors == [None] * 60  # each acknowledged by all three replicas
    consumer = Consumer(
        cluster.client_conf(**{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    )
    try:
        consumer.subscribe([topic])
        got, deadline = set(), time.monotonic() + 60
        while len(got) < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add(msg.value())
        assert got == {b"v%d" % i for i in range(60)}
    finally:
        consumer.close()
    # The followers' replicas hold the records too (fetched over the secured listener).
    for node in (2, 3):
        broker = cluster.node(node)
        ends = [broker.replica_manager.partitions[(topic, p)].log.log_end_offset for p in range(3)]
        assert sum(ends) == 60, (node, ends)


def _controller_connection(cluster, pki, user: str, password: str):
    """A kcore client connection to node 1's CONTROLLER listener (SASL_SSL, PLAIN)."""
    from kcore.client.connection import BrokerConnection
    from kcore.security.sasl_client import SaslClientSettings
    from kcore.security.tls_config import build_client_context

    context = build_client_context(
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)}
    )
    return BrokerConnection.connect(
        "127.0.0.1",
        cluster.controller_port,
        client_id="mallory",
        ssl_context=context,
        sasl=SaslClientSettings("PLAIN", user, password),
    )


def test_a_principal_without_cluster_action_is_refused_on_raft_and_controller_apis(cluster, pki):
    import trio

    from kcore.raft import rpc
    from kcore.raft.log import OffsetAndEpoch

    quorum = cluster.broker.quorum
    before = quorum.leader_and_epoch
    cluster_id = cluster.broker.cluster_id

    async def as_mallory():
        async with await _controller_connection(cluster, pki, "mallory", "mallory-secret") as c:
            vote = rpc.vote_request(
                cluster_id,
                candidate_epoch=before.epoch + 5,
                candidate_id=2,
                voter_id=1,
                last_offset=OffsetAndEpoch(10**9, before.epoch + 4),
                pre_vote=False,
            )
            begin = rpc.begin_quorum_epoch_request(
                cluster_id, leader_id=2, epoch=before.epoch + 5, voter_id=1
            )
            fetch = rpc.fetch_request(
                cluster_id,
                replica_id=2,
                epoch=before.epoch,
                fetch_offset=0,
                last_fetched_epoch=0,
                log_start_offset=0,
                max_wait_ms=0,
                max_bytes=1 << 20,
            )
            heartbeat = m.BrokerHeartbeatRequest(
                broker_id=2, broker_epoch=-1, current_metadata_offset=0, want_shut_down=True
            )
            return [await c.request(body) for body in (vote, begin, fetch, heartbeat)]

    answers = trio.run(as_mallory)
    refused = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert [a.error_code for a in answers] == [refused] * 4
    # Nothing changed: the leader kept its epoch, no vote was granted, no fetch recorded.
    assert quorum.leader_and_epoch == before

    # A super user (the node principal) gets through the same authorizer.
    async def as_broker():
        async with await _controller_connection(cluster, pki, "broker", "broker-secret") as c:
            return await c.request(m.DescribeQuorumRequest(topics=[_describe_topic()]))

    assert trio.run(as_broker).error_code == 0


def _describe_topic():
    from kcore.raft.rpc import METADATA_PARTITION, METADATA_TOPIC

    return m.DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC,
        partitions=[m.DescribeQuorumRequest.PartitionData(partition_index=METADATA_PARTITION)],
    )


def test_a_replica_fetch_from_a_non_super_principal_is_refused(cluster):
    from confluent_kafka import Producer

    topic = f"isec-fetch-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    topic_id = cluster.broker.metadata_image.topics.by_name[topic].topic_id
    producer = Producer(cluster.client_conf(acks="all"))
    producer.produce(topic, value=b"secret")
    assert producer.flush(30) == 0
    leader = registration(cluster, (topic, 0)).leader
    port = cluster.ports[leader - 1]
    request = m.FetchRequest(
        replica_id=2,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[
            m.FetchRequest.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[
                    m.FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    with RawSasl(port) as raw:
        assert plain_login(raw, "mallory", "mallory-secret").error_code == 0
        response = raw.call(1, 13, request)
    # Kafka's KafkaApis answers a follower without CLUSTER_ACTION TOPIC_AUTHORIZATION_FAILED
    # in every partition (not CLUSTER_AUTHORIZATION_FAILED), and reads nothing.
    parts = [p for t in response.responses for p in t.partitions]
    assert [p.error_code for p in parts] == [int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert not parts[0].records


def test_a_node_with_a_wrong_inter_broker_password_does_not_join(cluster, pki, caplog):
    import trio

    from kcore.server.config import BrokerConfig
    from kcore.server.node import start_node
    from kcore.testing.embedded import free_ports

    bad = internal_config(pki, broker_password="not-the-password")
    props = cluster.node_properties(3)
    client, internal = free_ports(2)
    props.update(bad)
    props.update(
        {
            "node.id": "4",
            "listeners": f"CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}",
            "log.dirs": str(cluster.data_dir / "logs-4"),
        }
    )
    config = BrokerConfig(props)
    outcome: list[BaseException | None] = []
    scope = trio.CancelScope()

    async def launch():
        from kcore.server.broker import ensure_formatted

        ensure_formatted(config, cluster.broker.cluster_id)

        async def run():
            try:
                with scope:
                    await start_node(config)
                outcome.append(None)
            except Exception as e:  # a crash: the test says so instead of the cluster dying
                outcome.append(e)

        cluster._nursery.start_soon(run)

    with caplog.at_level(logging.ERROR):
        cluster._call(launch)
        _wait(
            lambda: any("authentication to" in r.getMessage() for r in caplog.records),
            "the failed login's log line",
        )
    lines = [r.getMessage() for r in caplog.records if "authentication to" in r.getMessage()]
    assert any("as broker failed" in line for line in lines), lines
    assert "not-the-password" not in " ".join(lines)
    assert 4 not in cluster.broker.metadata_image.cluster.brokers  # never registered
    assert outcome == []  # still running, retrying: no crash

    async def stop():
        scope.cancel()

    cluster._call(stop)
    _wait(lambda: outcome, "node 4 to stop")
    assert outcome == [None]


def test_follower_fetchers_reauthenticate_on_the_inter_broker_listener(pki):
    """KIP-368 on the internal connections: the INTERNAL listener ends SCRAM sessions after
    2 s; the followers keep their fetch connections open for several lifetimes by logging in
    again on them, and every acks=all record is acknowledged."""
    from confluent_kafka import Producer

    lifetime_ms = 2000
    reauth = {
        "listener.name.internal.scram-sha-256.connections.max.reauth.ms": str(lifetime_ms),
        # The long poll must end well before the session does: the next request re-logs in.
        "replica.fetch.wait.max.ms": "100",
    }
    nodes = {n: reauth for n in (1, 2)}
    with InternalSecureCluster(pki, 2, node_config=nodes) as c:
        topic = f"isec-reauth-{uuid.uuid4().hex[:8]}"
        c.create_topic(topic, partitions=1, replication_factor=2)
        _wait(lambda: len(registration(c, (topic, 0)).isr) == 2, "a full ISR")
        leader = registration(c, (topic, 0)).leader
        follower = c.node(3 - leader)

        def fetch_connections():
            fetchers = follower.replica_fetchers.manager.fetchers.values()
            return [f.endpoint._conn for f in fetchers if f.endpoint._conn is not None]

        _wait(fetch_connections, "the follower's fetch connection")
        first = fetch_connections()
        producer = Producer(c.client_conf(acks="all"))
        errors = []
        end = time.monotonic() + 3 * lifetime_ms / 1000
        sent = 0
        while time.monotonic() < end:
            producer.produce(topic, value=b"%d" % sent, on_delivery=lambda e, _: errors.append(e))
            producer.poll(0)
            sent += 1
            time.sleep(0.05)
        assert producer.flush(60) == 0
        assert errors == [None] * sent
        now = fetch_connections()
        assert now == first and not now[0].closed  # the same connection all along
        assert now[0].reauthentications >= 2
