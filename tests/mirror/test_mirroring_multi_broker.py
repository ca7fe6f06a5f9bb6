"""Cluster mirroring into a destination of three brokers: the mirror partitions are led by
different brokers, each broker's mirror manager runs the ones it leads, and the state of all of
them lives with one coordinator the others reach over the wire (M-11).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kcore.testing import MirroredClusters

from .clusters import CLUSTER_CONFIG, wait_until
from .test_mirror_fetcher import _assert_identical_batches

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
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
