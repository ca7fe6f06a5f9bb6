"""The classic group protocol and committed offsets, served by the group coordinator.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups and OffsetDelete: each handler hands the request to the pure
coordinator through its Trio shell (:mod:`kcore.server.group_coordinator`), which decides, and
answers once what the decision wrote to ``__consumer_offsets`` is durable. JoinGroup and
SyncGroup may wait for the rest of the group (a rebalance). Versions are those Kafka 4.0
advertises, plus JoinGroup v0-1 (KAFKA-19444: librdkafka with Kerberos needs them) and
OffsetCommit/OffsetFetch up to 9 (v10 names topics by id, which Kafka 4.1 added).

TxnOffsetCommit (0-5, as Kafka 4.0) may first be checked against the transaction coordinator:
if the shell's ``verify_txn_offset_commit`` is set (an ``async (request, version) -> ErrorCode``
the transactions code installs: is the group's ``__consumer_offsets`` partition in this
producer's ongoing transaction, at this epoch? KIP-890's verification), a non-NONE answer fails
every partition with it and nothing is written.
"""

from __future__ import annotations

from kcore.protocol import messages as m
from kcore.server.registry import HandlerRegistry


def register(registry: HandlerRegistry) -> None:
    @registry.register(11, 0, 9)
    async def join_group(ctx, body: m.JoinGroupRequest) -> m.JoinGroupResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        client_id = ctx.client_id or ""
        return await svc.deferred(
            lambda now, respond: svc.core.join_group(
                body, version, client_id, ctx.client_host, now, respond
            )
        )

    @registry.register(14, 0, 5)
    async def sync_group(ctx, body: m.SyncGroupRequest) -> m.SyncGroupResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        return await svc.deferred(
            lambda now, respond: svc.core.sync_group(body, version, now, respond)
        )

    @registry.register(12, 0, 4)
    async def heartbeat(ctx, body: m.HeartbeatRequest) -> m.HeartbeatResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.heartbeat(body, ctx.version, now))

    @registry.register(13, 0, 5)
    async def leave_group(ctx, body: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.leave_group(body, ctx.version, now))

    @registry.register(8, 2, 9)
    async def offset_commit(ctx, body: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.commit_offsets(body, ctx.version, now))

    @registry.register(28, 0, 5)
    async def txn_offset_commit(ctx, body: m.TxnOffsetCommitRequest) -> m.TxnOffsetCommitResponse:
        svc = ctx.server.group_coordinator
        version = ctx.version
        verify = getattr(svc, "verify_txn_offset_commit", None)
        if verify is not None:
            error = await verify(body, version)
            if error:
                return _txn_offset_commit_error(body, error)
        return await svc.call(lambda now: svc.core.txn_commit_offsets(body, version, now))

    @registry.register(9, 1, 9)
    async def offset_fetch(ctx, body: m.OffsetFetchRequest) -> m.OffsetFetchResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.fetch_offsets(body, ctx.version, now))

    @registry.register(16, 0, 5)
    async def list_groups(ctx, body: m.ListGroupsRequest) -> m.ListGroupsResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.list_groups(body, ctx.version))

    @registry.register(15, 0, 6)
    async def describe_groups(ctx, body: m.DescribeGroupsRequest) -> m.DescribeGroupsResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.describe_groups(body, ctx.version))

    @registry.register(42, 0, 2)
    async def delete_groups(ctx, body: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.delete_groups(body, ctx.version, now))

    @registry.register(47, 0, 0)
    async def offset_delete(ctx, body: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
        svc = ctx.server.group_coordinator
        return await svc.call(lambda now: svc.core.delete_offsets(body, ctx.version, now))


def _txn_offset_commit_error(body: m.TxnOffsetCommitRequest, error) -> m.TxnOffsetCommitResponse:
    """Every partition of the request answered ``error``."""
    R = m.TxnOffsetCommitResponse
    return R(
        topics=[
            R.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    R.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=int(error)
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ]
    )
