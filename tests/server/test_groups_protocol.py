"""The group APIs on the wire, request by request, against a running kcore (async form).

What real clients never send on purpose: joins with the wrong protocol type, commits from a
fenced generation, heartbeats of unknown members, oversize member metadata. Each gets the error
Kafka returns, and the group keeps serving its well-behaved members throughout.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

CONFIG = {"offsets.topic.num.partitions": "3", "group.min.session.timeout.ms": "100"}
J = m.JoinGroupRequest


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


async def _coordinator(client: KafkaClient, group: str) -> int:
    with trio.fail_after(30):
        while True:
            resp = await client.request("any", m.FindCoordinatorRequest(key=group), version=3)
            if resp.error_code == 0:
                return resp.node_id
            assert resp.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            await trio.sleep(0.05)


def _join(group, member_id="", protocol_type="consumer", metadata=b"m", instance=None, **kw):
    return J(
        group_id=group,
        session_timeout_ms=kw.pop("session_timeout_ms", 10000),
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 10000),
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        **kw,
    )


async def _stable_member(client, node, group) -> tuple[str, int]:
    """Join as the only member and sync: returns (member id, generation)."""
    first = await client.request(node, _join(group), version=9)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    joined = await client.request(node, _join(group, first.member_id), version=9)
    assert joined.error_code == 0 and joined.leader == joined.member_id == first.member_id
    synced = await client.request(
        node,
        m.SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=joined.member_id, assignment=b"assigned"
                )
            ],
        ),
        version=5,
    )
    assert synced.error_code == 0 and synced.assignment == b"assigned"
    return joined.member_id, joined.generation_id


async def _heartbeat(client, node, group, member_id, generation) -> int:
    resp = await client.request(
        node,
        m.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id),
        version=4,
    )
    return resp.error_code


def with_broker(test):
    """Run ``test(env)`` under Trio with ``env = (cluster, client)`` on a fresh broker."""

    def run():
        async def main():
            async with (
                EmbeddedCluster(config=CONFIG) as cluster,
                KafkaClient([cluster.bootstrap_servers]) as client,
            ):
                await client.refresh_metadata()
                await test((cluster, client))

        trio.run(main)

    run.__name__ = test.__name__  # pytest must not see the wrapped test's ``env`` parameter
    return run


@with_broker
async def test_join_with_another_protocol_type_is_refused_and_the_group_goes_on(env):
    cluster, client = env
    group = _group()
    node = await _coordinator(client, group)
    member, generation = await _stable_member(client, node, group)
    other = await client.request(node, _join(group, protocol_type="connect"), version=9)
    assert other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await _heartbeat(client, node, group, member, generation) == 0


@with_broker
async def test_heartbeat_of_an_unknown_member_and_a_stale_generation(env):
    cluster, client = env
    group = _group()
    node = await _coordinator(client, group)
    member, generation = await _stable_member(client, node, group)
    assert await _heartbeat(client, node, group, "nobody", generation) == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert await _heartbeat(client, node, group, member, generation + 1) == (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert await _heartbeat(client, node, _group(), member, generation) in (
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NOT_COORDINATOR,  # another group may live on another partition's leader
    )
    assert await _heartbeat(client, node, group, member, generation) == 0


@with_broker
async def test_commit_from_a_fenced_generation_is_refused_and_changes_nothing(env):
    cluster, client = env
    topic, group = f"t-{uuid.uuid4().hex[:8]}", _group()
    await cluster.acreate_topic(topic, partitions=1)
    node = await _coordinator(client, group)
    member, generation = await _stable_member(client, node, group)
    C = m.OffsetCommitRequest

    def commit(gen, offset):
        return C(
            group_id=group,
            generation_id_or_member_epoch=gen,
            member_id=member,
            topics=[
                C.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        C.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                    ],
                )
            ],
        )

    ok = await client.request(node, commit(generation, 7), version=8)
    assert ok.topics[0].partitions[0].error_code == 0
    fenced = await client.request(node, commit(generation - 1, 99), version=8)
    assert fenced.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    fetched = await client.request(
        node,
        m.OffsetFetchRequest(
            groups=[
                m.OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        m.OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[0]
                        )
                    ],
                )
            ]
        ),
        version=8,
    )
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7
    assert await _heartbeat(client, node, group, member, generation) == 0


@with_broker
async def test_oversize_member_metadata_gets_an_error_and_the_broker_keeps_serving(env):
    cluster, client = env
    group = _group()
    node = await _coordinator(client, group)
    big = b"x" * (2 * 1024 * 1024)  # over __consumer_offsets' max.message.bytes (1 MiB)
    first = await client.request(node, _join(group, metadata=big), version=9)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = await client.request(node, _join(group, first.member_id, metadata=big), version=9)
    assert joined.error_code == 0
    synced = await client.request(
        node,
        m.SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=joined.member_id, assignment=b"a"
                )
            ],
        ),
        version=5,
    )
    assert synced.error_code != 0  # the group record cannot be written: not acknowledged
    other = _group()
    other_node = await _coordinator(client, other)
    await _stable_member(client, other_node, other)


@with_broker
async def test_find_coordinator_batched_and_single_forms(env):
    cluster, client = env
    groups = [_group() for _ in range(4)]
    await _coordinator(client, groups[0])
    batched = await client.request(
        "any", m.FindCoordinatorRequest(key_type=0, coordinator_keys=groups), version=4
    )
    assert [c.key for c in batched.coordinators] == groups
    assert all(c.error_code == 0 and c.node_id == 1 for c in batched.coordinators)
    assert {c.port for c in batched.coordinators} == {cluster.port}
    single = await client.request("any", m.FindCoordinatorRequest(key=groups[0]), version=0)
    assert single.error_code == 0 and single.port == cluster.port
    bad = await client.request(
        "any", m.FindCoordinatorRequest(key_type=7, coordinator_keys=["x"]), version=4
    )
    assert bad.coordinators[0].error_code == ErrorCode.INVALID_REQUEST
