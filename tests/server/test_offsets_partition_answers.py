"""ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers answer per partition.

The four share one loop in :mod:`kcore.server.handlers.offsets`; these tests pin what it sends on
the wire against a running kcore: one entry per requested partition in request order, a refused
topic's partitions TOPIC_AUTHORIZATION_FAILED whether the topic exists or not (a refused
principal learns nothing about it), an unknown partition UNKNOWN_TOPIC_OR_PARTITION, a newer
current leader epoch UNKNOWN_LEADER_EPOCH, and a failed partition never failing the others.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.metadata.acls import AclOperation as Op
from kcore.metadata.acls import ResourceType as Rt
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode as E
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


class DenyingAuthorizer:
    """Allows everything except the denied ``(operation, resource type, name)`` triples."""

    def __init__(self) -> None:
        self.denied: set[tuple[Op, Rt, str]] = set()

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) not in self.denied

    def authorize_by_resource_type(self, principal, host, operation, resource_type) -> bool:
        return (operation, resource_type, "*") not in self.denied


def with_topics(test):
    """Run ``test(client, authorizer, topic, refused, missing)`` on a fresh broker: ``topic``
    exists with 2 partitions, ``refused`` exists too, ``missing`` does not."""

    def run():
        async def main():
            async with EmbeddedCluster() as cluster:
                topic, refused, missing = (f"{p}-{uuid.uuid4().hex[:8]}" for p in "trm")
                await cluster.acreate_topic(topic, partitions=2)
                await cluster.acreate_topic(refused)
                authorizer = DenyingAuthorizer()
                cluster.broker.authorizer = authorizer
                async with KafkaClient([cluster.bootstrap_servers]) as client:
                    await client.refresh_metadata()
                    await test(client, authorizer, topic, refused, missing)

        trio.run(main)

    run.__name__ = test.__name__
    return run


def _errors(response, name_of=lambda t: t.name, index_of=lambda p: p.partition_index):
    return [(name_of(t), index_of(p), p.error_code) for t in response.topics for p in t.partitions]


def _deny_all_on(authorizer, operation: Op, *topics: str) -> None:
    authorizer.denied |= {(operation, Rt.TOPIC, t) for t in topics}


def _expected(topic, refused, missing):
    """The errors of ``_asked``'s partitions when ``refused`` and ``missing`` are refused."""
    return [
        (topic, 0, 0),
        (topic, 7, E.UNKNOWN_TOPIC_OR_PARTITION),
        (refused, 0, E.TOPIC_AUTHORIZATION_FAILED),
        (missing, 0, E.TOPIC_AUTHORIZATION_FAILED),
        (topic, 1, 0),
    ]


# (topic, partition) in the order every test asks for them: a refused and a missing topic
# between two topics' entries of the same topic, so that the order is visible.
def _asked(topic, refused, missing):
    return [(topic, [0, 7]), (refused, [0]), (missing, [0]), (topic, [1])]


@with_topics
async def test_list_offsets_answers_each_partition_in_request_order(
    client, authorizer, topic, refused, missing
):
    _deny_all_on(authorizer, Op.DESCRIBE, refused, missing)
    L = m.ListOffsetsRequest
    request = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=name,
                partitions=[L.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in ps],
            )
            for name, ps in _asked(topic, refused, missing)
        ],
    )
    response = await client.request("any", request, version=7)
    assert _errors(response) == _expected(topic, refused, missing)
    denied = response.topics[1].partitions[0]
    assert (denied.offset, denied.timestamp, denied.leader_epoch) == (-1, -1, -1)
    # v0 answers in old_style_offsets as well.
    response = await client.request("any", request, version=0)
    assert response.topics[0].partitions[0].old_style_offsets == [0]
    assert response.topics[1].partitions[0].old_style_offsets == []


@with_topics
async def test_list_offsets_newer_current_leader_epoch_is_unknown_leader_epoch(
    client, authorizer, topic, refused, missing
):
    L = m.ListOffsetsRequest
    request = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[
                    L.ListOffsetsPartition(partition_index=0, current_leader_epoch=9, timestamp=-1)
                ],
            )
        ],
    )
    response = await client.request("any", request, version=7)
    assert _errors(response) == [(topic, 0, E.UNKNOWN_LEADER_EPOCH)]


def _epoch_request(topic, refused, missing) -> m.OffsetForLeaderEpochRequest:
    O = m.OffsetForLeaderEpochRequest  # noqa: E741
    return O(
        replica_id=-1,
        topics=[
            O.OffsetForLeaderTopic(
                topic=name,
                partitions=[O.OffsetForLeaderPartition(partition=i, leader_epoch=0) for i in ps],
            )
            for name, ps in _asked(topic, refused, missing)
        ],
    )


@with_topics
async def test_offset_for_leader_epoch_needs_describe_or_cluster_action(
    client, authorizer, topic, refused, missing
):
    def errors(response):
        return _errors(response, lambda t: t.topic, lambda p: p.partition)

    request = _epoch_request(topic, refused, missing)
    _deny_all_on(authorizer, Op.DESCRIBE, refused, missing)
    # A follower (CLUSTER_ACTION on the cluster) is not asked about each topic.
    response = await client.request("any", request, version=4)
    assert errors(response) == [
        (topic, 0, 0),
        (topic, 7, E.UNKNOWN_TOPIC_OR_PARTITION),
        (refused, 0, 0),
        (missing, 0, E.UNKNOWN_TOPIC_OR_PARTITION),
        (topic, 1, 0),
    ]
    # A consumer (KIP-320) needs DESCRIBE on each topic.
    authorizer.denied.add((Op.CLUSTER_ACTION, Rt.CLUSTER, "kafka-cluster"))
    response = await client.request("any", request, version=4)
    assert errors(response) == _expected(topic, refused, missing)


@with_topics
async def test_delete_records_answers_each_partition_in_request_order(
    client, authorizer, topic, refused, missing
):
    _deny_all_on(authorizer, Op.DELETE, refused, missing)
    D = m.DeleteRecordsRequest
    request = D(
        topics=[
            D.DeleteRecordsTopic(
                name=name,
                partitions=[D.DeleteRecordsPartition(partition_index=i, offset=-1) for i in ps],
            )
            for name, ps in _asked(topic, refused, missing)
        ],
        timeout_ms=5000,
    )
    response = await client.request("any", request, version=2)
    assert _errors(response) == _expected(topic, refused, missing)
    low_watermarks = [p.low_watermark for t in response.topics for p in t.partitions]
    assert low_watermarks == [0, -1, -1, -1, 0]


@with_topics
async def test_describe_producers_answers_each_partition_with_its_error_message(
    client, authorizer, topic, refused, missing
):
    _deny_all_on(authorizer, Op.READ, refused, missing)
    D = m.DescribeProducersRequest
    request = D(
        topics=[
            D.TopicRequest(name=name, partition_indexes=ps)
            for name, ps in _asked(topic, refused, missing)
        ]
    )
    response = await client.request("any", request, version=0)
    assert _errors(response) == _expected(topic, refused, missing)
    messages = [p.error_message for t in response.topics for p in t.partitions]
    assert messages[0] is None and messages[4] is None
    assert messages[1] == f"this server does not host {topic}-7"
    assert all(messages[2:4])
