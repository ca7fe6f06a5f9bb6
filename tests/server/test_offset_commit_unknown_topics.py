"""OffsetCommit and TxnOffsetCommit for a topic the cluster does not have, or a partition index
beyond the topic's partitions: UNKNOWN_TOPIC_OR_PARTITION for those partitions and nothing
stored for them, while the rest of the request is committed (Kafka's ``KafkaApis``)."""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "offsets.topic.num.partitions": "1",
    # The TxnOffsetCommit below comes from a producer id no transaction coordinator knows.
    "transaction.partition.verification.enable": "false",
}
RETRIABLE = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
)
UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config=CONFIG) as c:
        c.create_topic("two", partitions=2)
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_offset_commit_confluent_unknown_topic_and_partition_fail_alone(cluster):
    results = []
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": _name("g"),
            "on_commit": lambda err, partitions: results.append((err, partitions)),
        }
    )
    try:
        offsets = [
            TopicPartition("two", 0, 5),
            TopicPartition("two", 7, 3),  # beyond the topic's 2 partitions
            TopicPartition("no-such-topic", 0, 9),
        ]
        with pytest.raises(KafkaException) as failed:
            consumer.commit(offsets=offsets, asynchronous=False)
        assert failed.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        consumer.commit(offsets=offsets, asynchronous=True)  # answers per partition
        for _ in range(60):  # the callback is served by poll()
            if results:
                break
            consumer.poll(0.5)
        ((_, answered),) = results
        # librdkafka gives the first partition error to every partition of the commit; what
        # the broker stored is what tells (below).
        errors = {(tp.topic, tp.partition): tp.error for tp in answered}
        assert errors[("two", 7)].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert errors[("no-such-topic", 0)].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        committed = consumer.committed(
            [TopicPartition("two", 0), TopicPartition("no-such-topic", 0)], timeout=30
        )
        assert [tp.offset for tp in committed] == [5, OFFSET_INVALID]
    finally:
        consumer.close()


async def _coordinator(client: KafkaClient, group: str) -> int:
    with trio.fail_after(30):
        while True:
            resp = await client.request("any", m.FindCoordinatorRequest(key=group), version=3)
            if resp.error_code == 0:
                return resp.node_id
            await trio.sleep(0.05)


async def _send(client, node, request, version):
    with trio.fail_after(30):
        while True:
            resp = await client.request(node, request, version=version)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            if not codes & set(RETRIABLE):
                return {
                    (t.name, p.partition_index): p.error_code
                    for t in resp.topics
                    for p in t.partitions
                }
            await trio.sleep(0.05)


async def _stored(client, node, group) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group`` (OffsetFetch of all topics)."""
    resp = await client.request(node, m.OffsetFetchRequest(group_id=group, topics=None), version=7)
    assert resp.error_code == 0, resp
    return {
        (t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions
    }


def _topics(Topic, Partition, offsets):
    by_topic: dict[str, list] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            Partition(partition_index=index, committed_offset=offset)
        )
    return [Topic(name=t, partitions=ps) for t, ps in by_topic.items()]


OFFSETS = {("two", 1): 11, ("two", 2): 12, ("gone", 0): 13}


@pytest.mark.parametrize(
    "version, offsets, expected_codes, expected_stored",
    [
        (v, OFFSETS, {("two", 1): 0, ("two", 2): UNKNOWN, ("gone", 0): UNKNOWN}, {("two", 1): 11})
        for v in (2, 9)
    ]
    # Nothing left to commit: the coordinator is not asked, nothing is stored.
    + [(9, {("gone", 0): 1, ("gone", 1): 2}, {("gone", 0): UNKNOWN, ("gone", 1): UNKNOWN}, {})],
)
def test_offset_commit_wire_unknown_partitions_answered_and_not_stored(
    cluster, version, offsets, expected_codes, expected_stored
):
    C = m.OffsetCommitRequest
    group = _name("g")

    async def main():
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            node = await _coordinator(client, group)
            request = C(
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=_topics(C.OffsetCommitRequestTopic, C.OffsetCommitRequestPartition, offsets),
            )
            codes = await _send(client, node, request, version)
            return codes, await _stored(client, node, group)

    codes, stored = trio.run(main)
    assert codes == expected_codes
    assert stored == expected_stored


def test_txn_offset_commit_wire_unknown_partitions_answered_and_not_stored(cluster):
    T = m.TxnOffsetCommitRequest
    group = _name("g")

    async def main():
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            node = await _coordinator(client, group)
            request = T(
                transactional_id=_name("tid"),
                group_id=group,
                producer_id=8001,
                producer_epoch=0,
                topics=_topics(
                    T.TxnOffsetCommitRequestTopic, T.TxnOffsetCommitRequestPartition, OFFSETS
                ),
            )
            codes = await _send(client, node, request, 3)
            # The pending offsets of producer 8001: commit them with a real marker.
            W = m.WriteTxnMarkersRequest
            marker = W(
                markers=[
                    W.WritableTxnMarker(
                        producer_id=8001,
                        producer_epoch=0,
                        transaction_result=True,
                        topics=[
                            W.WritableTxnMarkerTopic(
                                name="__consumer_offsets", partition_indexes=[0]
                            )
                        ],
                        coordinator_epoch=0,
                    )
                ]
            )
            await client.request(node, marker, version=1)
            return codes, await _stored(client, node, group)

    codes, stored = trio.run(main)
    assert codes == {("two", 1): 0, ("two", 2): UNKNOWN, ("gone", 0): UNKNOWN}
    assert stored == {("two", 1): 11}
