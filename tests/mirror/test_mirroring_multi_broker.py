"""Cluster mirroring into a destination of three brokers: the mirror partitions are led by
different brokers, each broker's mirror manager runs the ones it leads, and the state of all of
them lives with one coordinator the others reach over the wire (M-11).
"""

from __future__ import annotations

import signal

import pytest
import trio
from confluent_kafka import Producer

from kcore.client.mirrors import create_cluster_mirror, start_mirror_topics
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.testing import MirroredClusters, ProcessCluster

from . import test_mirroring_faults as faults
from .clusters import CLUSTER_CONFIG, wait_until
from .test_mirror_fetcher import _assert_identical_batches

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT,
    # The broker asked may not have the just-created mirror in its metadata image yet.
    ErrorCode.MIRROR_NOT_FOUND,
}
PARTITIONS = 3


def _produce(cluster, count: int, prefix: str = "order") -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        producer.produce(TOPIC, f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _leaders(cluster) -> dict[int, int]:
    return {p: cluster.leader_of((TOPIC, p)).node_id for p in range(PARTITIONS)}


def test_mirroring_into_three_brokers_then_failover():
    with MirroredClusters(
        source_config=CLUSTER_CONFIG, destination_config=CLUSTER_CONFIG, destination_brokers=3
    ) as dr:
        dr.source.create_topic(TOPIC, partitions=PARTITIONS)
        _produce(dr.source, 300)
        assert dr.mirror_topics(TOPIC) == [TOPIC]
        dr.wait_in_sync()
        leaders = _leaders(dr.destination)
        assert sorted(leaders.values()) == [1, 2, 3], leaders
        for p in range(PARTITIONS):
            _assert_identical_batches(dr.source, dr.destination, TOPIC, p, 100)
        described = dr.describe()
        assert {d.state for d in described.values()} == {"MIRRORING"}
        # Every broker's numbers, whichever broker is asked (merged by the Admin helper).
        for p in range(PARTITIONS):
            d = described[(TOPIC, p)]
            assert (d.source_offset, d.destination_offset, d.lag) == (100, 100, 0), d
            assert d.last_fetch_age_ms >= 0

        # Read-only on every broker.
        producer = Producer({"bootstrap.servers": dr.destination.bootstrap_servers, "retries": 0})
        errors = []
        for p in range(PARTITIONS):
            producer.produce(TOPIC, b"x", partition=p, on_delivery=lambda e, m: errors.append(e))
        producer.flush(30)
        assert [e.code() for e in errors] == [157] * PARTITIONS  # TOPIC_IS_MIRROR

        _produce(dr.source, 30, "late")
        dr.wait_in_sync()
        assert dr.failover(TOPIC) == [TOPIC]
        for p in range(PARTITIONS):
            leader = dr.destination.leader_partition((TOPIC, p))
            assert leader.last_stable_offset == leader.high_watermark
        writer = Producer({"bootstrap.servers": dr.destination.bootstrap_servers})
        for p in range(PARTITIONS):
            writer.produce(TOPIC, b"after", partition=p)
        assert writer.flush(30) == 0
        wait_until(
            lambda: all(
                dr.destination.leader_partition((TOPIC, p)).high_watermark >= 112
                for p in range(PARTITIONS)
            ),
            30,
            "the writes after failover",
        )


def _leader_nodes(cluster, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's leader, once the metadata names them all (a new topic's may lag)."""

    async def main(client):
        with trio.fail_after(30):
            while True:
                metadata = await client.refresh_metadata([topic])
                try:
                    return {p: metadata.leader_for(topic, p) for p in range(partitions)}
                except KafkaError:
                    await trio.sleep(0.1)

    return faults._admin(cluster, main)


def _start_retrying(destination, topic: str) -> None:
    """StartMirrorTopics, again while the fresh cluster's __mirror_state is still loading or
    the broker asked has not seen the mirror's creation yet."""
    seen = []

    def started() -> bool:
        response = faults._admin(destination, lambda c: start_mirror_topics(c, "dr", [topic]))
        seen.append((response.error_code, response.error_message))
        if response.error_code in RETRIABLE:
            return False
        assert response.error_code == 0, response.error_message
        assert [t.error_code for t in response.topics] == [0], response.topics
        return True

    wait_until(started, 60, f"StartMirrorTopics accepted (answers: {seen[-3:]})")


def test_mirroring_kill_9_of_a_destination_broker_that_leads_mirror_partitions(tmp_path):
    # Three destination processes (each broker and controller voter): the broker killed leads
    # mirror partitions while the source takes writes; the others go on mirroring theirs, and
    # after its restart its partitions resume on it with no gap and no duplicate (D-14).
    with (
        ProcessCluster(tmp_path / "source", config=CLUSTER_CONFIG) as source,
        ProcessCluster(tmp_path / "destination", 3, config=CLUSTER_CONFIG) as destination,
    ):
        faults._admin(source, faults._create_topic)
        created = faults._admin(
            destination,
            lambda c: create_cluster_mirror(
                c, "dr", {"bootstrap.servers": source.bootstrap_servers}
            ),
        )
        assert created.error_code == 0, created.error_message
        with faults.Load(source.bootstrap_servers) as load:
            wait_until(lambda: load.sent > 2000, 30, "a first backlog")
            _start_retrying(destination, faults.TOPIC)
            leaders = _leader_nodes(destination, faults.TOPIC, faults.PARTITIONS)
            assert len(set(leaders.values())) > 1, leaders
            wait_until(
                lambda: min(faults._ends(destination).values()) > 300, 60, "mirroring under way"
            )
            victim = leaders[0]
            destination.node(victim).kill(signal.SIGKILL)
            wait_until(lambda: load.sent > 8000, 60, "more writes while it is down")
            destination.node(victim).start()
        _leader_nodes(destination, faults.TOPIC, faults.PARTITIONS)  # the victim leads again
        faults._in_sync(source, destination, "dr")
        assert _leader_nodes(destination, faults.TOPIC, faults.PARTITIONS)[0] == victim


def test_mirroring_the_operators_start_recovers_failed_partitions_on_every_broker():
    # D-13 through the metadata log: the Start goes to broker 1 only, and the FAILED partitions
    # that brokers 2 and 3 lead recover too.
    config = {
        **CLUSTER_CONFIG,
        "mirror.failed.max.retries": "0",
        "mirror.source.unavailable.timeout.ms": "1000",
    }
    with MirroredClusters(
        source_config=CLUSTER_CONFIG, destination_config=config, destination_brokers=3
    ) as dr:
        dr.source.create_topic(TOPIC, partitions=PARTITIONS)
        _produce(dr.source, 30)
        dr.mirror_topics(TOPIC)
        dr.wait_in_sync()
        assert sorted(_leaders(dr.destination).values()) == [1, 2, 3]

        dr.source.stop()
        wait_until(
            lambda: {d.state for d in dr.describe().values()} == {"FAILED"}, 60, "all FAILED"
        )
        dr.source.start()
        _produce(dr.source, 30, "late")
        response = dr._admin(
            dr.destination, lambda c: start_mirror_topics(c, dr.mirror, [TOPIC], target=1)
        )
        assert [(t.name, t.error_code) for t in response.topics] == [(TOPIC, 0)]
        dr.wait_in_sync()
        for p in range(PARTITIONS):
            assert dr.destination.leader_partition((TOPIC, p)).log_end_offset == 20
            assert dr.describe()[(TOPIC, p)].failed_reason is None
