"""A mirror topic's partition reassigned on a replicated destination (issue #17): the move
away from the leading broker to one that had no replica keeps the partition mirroring; only
the new leader runs the mirror fetcher, the removed broker stops it and drops its log, and
every replica ends with the source's batches."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kcore.client.admin import alter_partition_reassignments
from kcore.client.cluster import KafkaClient
from kcore.testing import MirroredClusters
from tests.server.replicated import REPLICATED_CONFIG, registration, wait_until
from tests.server.test_replication import replicas_identical

from .clusters import CLUSTER_CONFIG
from .test_mirroring_replicated import _wait_mirroring

pytestmark = pytest.mark.timeout(300)

TOPIC = "moved"


def _produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + count):
        producer.produce(TOPIC, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_a_reassigned_mirror_partition_keeps_mirroring_from_its_new_leader_only():
    config = {**REPLICATED_CONFIG, "default.replication.factor": "3",
              "mirror.state.topic.num.partitions": "1"}  # fmt: skip
    with MirroredClusters(
        source_config=CLUSTER_CONFIG, destination_config=config, destination_brokers=4
    ) as dr:
        dest = dr.destination
        dr.source.create_topic(TOPIC, partitions=1)
        _produce(dr.source.bootstrap_servers, 0, 200)
        assert dr.mirror_topics(TOPIC) == [TOPIC]
        _wait_mirroring(dr, "the start")
        dr.wait_in_sync()
        tp = (TOPIC, 0)
        before = registration(dest, tp)
        leaving = before.leader
        if leaving == 1:  # node 1 is the controller; any replica may leave, take another
            leaving = next(r for r in before.replicas if r != 1)
        spare = next(n for n in (1, 2, 3, 4) if n not in before.replicas)
        target = [r for r in before.replicas if r != leaving] + [spare]

        async def move():
            async with KafkaClient(dest.bootstrap_servers) as client:
                return await alter_partition_reassignments(client, {tp: target})

        assert dest._call(move) == {tp: (0, None)}
        wait_until(
            lambda: list(registration(dest, tp).replicas) == target, "the reassignment to complete"
        )
        _produce(dr.source.bootstrap_servers, 200, 200)
        _wait_mirroring(dr, "after the move")
        dr.wait_in_sync()
        leader = registration(dest, tp).leader
        assert leader in target
        for node in dest.brokers:
            drivers = set(node.mirror_manager.drivers)
            assert drivers == ({tp} if node.node_id == leader else set()), node.node_id
        assert tp not in dest.node(leaving).replica_manager.partitions
        wait_until(lambda: replicas_identical(dest, tp, target), "every replica identical")
        assert dest.leader_partition(tp).log_end_offset >= 400
