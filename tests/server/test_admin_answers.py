"""Admin APIs answered as Apache Kafka 4.x answers them, where kcore differed (issue #20, the
audit after item 4): DescribeCluster's endpoint type, DeleteRecords on a topic without the
delete policy, ListOffsets for a partition asked twice and the leader epoch of LATEST, and
OffsetDelete for topics and partitions that do not exist."""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode as E
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def on_broker(test):
    """Run ``test(cluster, client)`` against a fresh single-node kcore."""

    def run():
        async def main():
            async with (
                EmbeddedCluster() as cluster,
                KafkaClient([cluster.bootstrap_servers]) as client,
            ):
                await test(cluster, client)

        trio.run(main)

    run.__name__ = test.__name__
    return run


@on_broker
async def test_describe_cluster_refuses_endpoint_types_a_broker_does_not_serve(cluster, client):
    D = m.DescribeClusterRequest
    for endpoint_type, code in ((2, E.MISMATCHED_ENDPOINT_TYPE), (7, E.UNSUPPORTED_ENDPOINT_TYPE)):
        response = await client.request("any", D(endpoint_type=endpoint_type), version=1)
        assert response.error_code == code, endpoint_type
        assert response.error_message and response.brokers == []
    response = await client.request(
        "any", D(endpoint_type=1, include_fenced_brokers=True), version=2
    )
    assert response.error_code == 0 and response.endpoint_type == 1
    assert [(b.broker_id, b.is_fenced) for b in response.brokers] == [(1, False)]


@on_broker
async def test_delete_records_is_a_policy_violation_on_a_compact_only_topic(cluster, client):
    compacted, both = _name("compacted"), _name("compact-delete")
    await cluster.acreate_topic(compacted, config={"cleanup.policy": "compact"})
    await cluster.acreate_topic(both, config={"cleanup.policy": "compact,delete"})
    D = m.DeleteRecordsRequest
    request = D(
        topics=[
            D.DeleteRecordsTopic(
                name=t, partitions=[D.DeleteRecordsPartition(partition_index=0, offset=-1)]
            )
            for t in (compacted, both)
        ],
        timeout_ms=5000,
    )
    response = await client.request("any", request, version=2)
    answers = [
        (t.name, p.error_code, p.low_watermark) for t in response.topics for p in t.partitions
    ]
    assert answers == [(compacted, E.POLICY_VIOLATION, -1), (both, 0, 0)]


def test_delete_records_policy_violation_reaches_the_admin_client():
    topic = _name("compacted")
    with EmbeddedCluster() as cluster:
        cluster.create_topic(topic, config={"cleanup.policy": "compact"})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        future = admin.delete_records([TopicPartition(topic, 0, 0)])[TopicPartition(topic, 0, 0)]
        with pytest.raises(Exception) as info:
            future.result(30)
        assert "POLICY_VIOLATION" in str(info.value) or "policy" in str(info.value).lower()


def _list_offsets(topic: str, asks) -> m.ListOffsetsRequest:
    L = m.ListOffsetsRequest
    return L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[
                    L.ListOffsetsPartition(partition_index=i, timestamp=ts) for i, ts in asks
                ],
            )
        ],
    )


@on_broker
async def test_list_offsets_answers_a_partition_asked_twice_invalid_request(cluster, client):
    topic = _name("t")
    await cluster.acreate_topic(topic, partitions=2)
    response = await client.request(
        "any", _list_offsets(topic, [(0, -1), (1, -1), (0, -2)]), version=7
    )
    answers = [(p.partition_index, p.error_code) for p in response.topics[0].partitions]
    assert answers == [(0, E.INVALID_REQUEST), (1, 0), (0, E.INVALID_REQUEST)]


async def _produce_one(client, topic: str) -> None:
    from kcore.record import RecordBatchBuilder

    b = RecordBatchBuilder()
    b.append(timestamp=1, key=b"k", value=b"v")
    P = m.ProduceRequest
    request = P(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=topic,
                partition_data=[P.PartitionProduceData(index=0, records=bytes(b.build()))],
            )
        ],
    )
    response = await client.request("any", request, version=9)
    assert response.responses[0].partition_responses[0].error_code == 0


def test_list_offsets_latest_carries_the_partition_leader_epoch():
    """A leader elected after the last append (here: the node restarted) answers LATEST with
    its own epoch, as Kafka, not the epoch of the last batch: a consumer validating its
    position (KIP-320) compares it with the leader epoch in the metadata."""
    topic = _name("t")

    async def epochs(cluster) -> tuple[int, int]:
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            await client.refresh_metadata([topic])
            metadata = client.metadata.partition(topic, 0)
            response = await client.request("any", _list_offsets(topic, [(0, -1)]), version=7)
            return metadata.leader_epoch, response.topics[0].partitions[0].leader_epoch

    async def produce(cluster) -> None:
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            await client.refresh_metadata([topic])
            await _produce_one(client, topic)

    with EmbeddedCluster() as cluster:
        cluster.create_topic(topic)
        trio.run(produce, cluster)
        first, listed = trio.run(epochs, cluster)
        assert listed == first
        cluster.restart()  # the same data, a new leader epoch
        again, listed = trio.run(epochs, cluster)
        assert again > first, "the restart did not elect the leader again"
        assert listed == again


@on_broker
async def test_offset_delete_answers_unknown_topics_and_partitions(cluster, client):
    topic, missing, group = _name("t"), _name("missing"), _name("g")
    await cluster.acreate_topic(topic)
    C = m.OffsetCommitRequest
    commit = C(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            C.OffsetCommitRequestTopic(
                name=topic,
                partitions=[C.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)],
            )
        ],
    )
    with trio.fail_after(30):  # the first FindCoordinator creates __consumer_offsets
        while True:
            found = await client.request("any", m.FindCoordinatorRequest(key=group), version=3)
            response = await client.request("any", commit, version=8)
            if found.error_code == 0 and response.topics[0].partitions[0].error_code == 0:
                break
            await trio.sleep(0.1)
    D = m.OffsetDeleteRequest
    request = D(
        group_id=group,
        topics=[
            D.OffsetDeleteRequestTopic(
                name=topic,
                partitions=[D.OffsetDeleteRequestPartition(partition_index=i) for i in (0, 5)],
            ),
            D.OffsetDeleteRequestTopic(
                name=missing, partitions=[D.OffsetDeleteRequestPartition(partition_index=0)]
            ),
        ],
    )
    response = await client.request("any", request, version=0)
    assert response.error_code == 0
    answers = sorted(
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    )
    assert answers == sorted(
        [
            (topic, 0, 0),
            (topic, 5, E.UNKNOWN_TOPIC_OR_PARTITION),
            (missing, 0, E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
    )
    assert len({t.name for t in response.topics}) == len(response.topics)  # one entry a topic
