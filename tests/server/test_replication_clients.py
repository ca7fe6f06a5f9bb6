"""What clients see when a replicated partition's leader moves (issue #17 part 1).

On the wire: the old leader, back as a follower, answers Produce with NOT_LEADER_OR_FOLLOWER
naming the new leader and epoch (Produce v10+); the new leader answers a Fetch carrying the
old leader epoch with FENCED_LEADER_EPOCH and one from the future with UNKNOWN_LEADER_EPOCH, as
Kafka's leader checks do. And kafka-python's acks=all producer and aiokafka's consumer carry on
across a controlled shutdown of the leader's broker with nothing lost.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kcore.client import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster
from tests.server.batches import produce_request, producer_batch
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster():
    with EmbeddedCluster(brokers=3, config=REPLICATED_CONFIG) as c:
        yield c


def _led_by_broker_only_node(cluster, topic: str, partitions: int) -> tuple[str, int]:
    for p in range(partitions):
        wait_until(lambda p=p: len(registration(cluster, (topic, p)).isr) == 3, "full ISR")
    return next(
        (topic, p) for p in range(partitions) if registration(cluster, (topic, p)).leader != 1
    )


def _fetch(topic_id: uuid.UUID, index: int, leader_epoch: int) -> m.FetchRequest:
    F = m.FetchRequest
    return F(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            F.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    F.FetchPartition(
                        partition=index,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


def test_clients_are_told_who_leads_and_stale_epochs_are_fenced(cluster):
    topic = unique("wire")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    tp = _led_by_broker_only_node(cluster, topic, 3)
    old = registration(cluster, tp)
    topic_id = cluster.broker.metadata_image.topics.by_name[topic].topic_id
    cluster.stop_node(old.leader, graceful=False)
    wait_until(lambda: registration(cluster, tp).leader not in (-1, old.leader), "new leader")
    cluster.start_node(old.leader)
    wait_until(lambda: old.leader in registration(cluster, tp).isr, "the old leader in sync")
    new = registration(cluster, tp)
    assert new.leader_epoch > old.leader_epoch

    async def ask(node_id: int, body, version: int):
        port = cluster.ports[node_id - 1]
        async with await BrokerConnection.connect("127.0.0.1", port) as conn:
            return await conn.request(body, version)

    async def run():
        produced = await ask(
            old.leader, produce_request(topic, {tp[1]: producer_batch([b"x"])}), 12
        )
        part = produced.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
            new.leader,
            new.leader_epoch,
        )
        for epoch, code in (
            (old.leader_epoch, ErrorCode.FENCED_LEADER_EPOCH),
            (new.leader_epoch + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
            (new.leader_epoch, ErrorCode.NONE),
        ):
            fetched = await ask(new.leader, _fetch(topic_id, tp[1], epoch), 17)
            assert fetched.responses[0].partitions[0].error_code == code, epoch

    cluster._call(run)  # on the cluster's Trio loop


def test_kafka_python_and_aiokafka_carry_on_across_a_controlled_shutdown(cluster):
    from kafka import KafkaProducer

    topic = unique("py")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    tp = _led_by_broker_only_node(cluster, topic, 3)
    leader = registration(cluster, tp).leader
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=20,
        retry_backoff_ms=200, request_timeout_ms=30000,
    )  # fmt: skip
    acked = {}
    for i in range(300):
        if i == 150:
            cluster.stop_node(leader, graceful=True)  # controlled shutdown: leadership moves
        meta = producer.send(topic, value=f"v{i}".encode(), partition=tp[1]).get(timeout=60)
        assert meta.offset not in acked
        acked[meta.offset] = f"v{i}".encode()
    producer.close()
    assert registration(cluster, tp).leader not in (-1, leader)

    async def consume():
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
            auto_offset_reset="earliest",
        )  # fmt: skip
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, tp[1])])
            got = {}
            while len(got) < len(acked):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 60)
                for records in batch.values():
                    for r in records:
                        assert r.offset not in got
                        got[r.offset] = r.value
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == acked
