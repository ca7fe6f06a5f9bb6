"""``GET /v1/groups`` and ``GET /v1/groups/{group}``: ListGroups; FindCoordinator,
DescribeGroups, OffsetFetch and ListOffsets.

A group lives on its coordinator. ListGroups is what this node coordinates (as Kafka's
ListGroups is per broker: the admin clients ask every broker), so in a cluster of several
brokers each node's endpoint lists its own share. ``/v1/groups/{group}`` on a node that is not
the group's coordinator answers 421 NOT_COORDINATOR naming the coordinator, whose admin
endpoint has it. The lag of a partition is its log end offset (ListOffsets LATEST as a consumer,
the high watermark: what kafka-consumer-groups.sh shows as LOG-END-OFFSET) minus the committed
offset; null when the partition is led by another broker (``error`` says so).
"""

from __future__ import annotations

from quart import Blueprint
from quart_schema import validate_response

from kcore.admin.api import common
from kcore.admin.api.common import Reply, errors
from kcore.admin.context import broker, kafka
from kcore.admin.kafka import AdminError, raise_for
from kcore.client.groups import decode_assignment
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.protocol.primitives import MalformedMessage

groups = Blueprint("groups", __name__)

GROUP_KEY = 0  # FindCoordinator KeyType
DEAD = "Dead"  # DescribeGroups' state for a group that does not exist
_NOT_COMMITTED = m.OffsetFetchResponse.OffsetFetchResponsePartitions(
    committed_offset=-1, committed_leader_epoch=-1, metadata=None, error_code=0
)


class GroupSummary(Reply):
    group_id: str
    type: str
    state: str
    protocol_type: str


class GroupList(Reply):
    groups: list[GroupSummary]


class Member(Reply):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, list[int]] | None  # a consumer group's; null for other protocols


class PartitionOffsets(Reply):
    topic: str
    partition: int
    committed_offset: int  # -1: none
    committed_leader_epoch: int
    metadata: str | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None  # the member it is assigned to
    error: str | None


class GroupDescription(Reply):
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: list[Member]
    offsets: list[PartitionOffsets]


@groups.get("/v1/groups")
@validate_response(GroupList)
@errors(401, 503)
async def list_groups():
    """ListGroups: the groups this node coordinates."""
    response = await kafka(m.ListGroupsRequest())
    raise_for(response.error_code)
    return GroupList(
        groups=[
            GroupSummary(
                group_id=g.group_id,
                type=g.group_type,
                state=g.group_state,
                protocol_type=g.protocol_type,
            )
            for g in sorted(response.groups, key=lambda g: g.group_id)
        ]
    )


async def _coordinator(group: str) -> int:
    """The group's coordinator; 421 when it is another node."""
    found = await kafka(m.FindCoordinatorRequest(key_type=GROUP_KEY, coordinator_keys=[group]))
    c = found.coordinators[0]
    raise_for(c.error_code, c.error_message)
    if c.node_id != broker().node_id:
        raise AdminError(
            421,
            "NOT_COORDINATOR",
            f"group {group!r} is coordinated by broker {c.node_id} ({c.host}:{c.port}): "
            "ask that broker's admin endpoint",
            int(ErrorCode.NOT_COORDINATOR),
        )
    return c.node_id


def _assignment(protocol_type: str, data) -> dict[str, list[int]] | None:
    if protocol_type != "consumer":
        return None
    try:
        return decode_assignment(data)
    except MalformedMessage:
        return None


async def _committed(group: str) -> list:
    F = m.OffsetFetchRequest
    response = await kafka(F(groups=[F.OffsetFetchRequestGroup(group_id=group, topics=None)]))
    result = response.groups[0]
    raise_for(result.error_code)
    return [(t.name, p) for t in result.topics for p in t.partitions]


@groups.get("/v1/groups/<path:group>")  # a group id may hold a "/"
@validate_response(GroupDescription)
@errors(401, 403, 404, 421, 503)
async def describe_group(group: str):
    """A group: its members and assignments, committed offsets, log end offsets and lag."""
    coordinator = await _coordinator(group)
    described = (await kafka(m.DescribeGroupsRequest(groups=[group]))).groups[0]
    raise_for(described.error_code, described.error_message)
    committed = await _committed(group)
    if described.group_state == DEAD and not committed:
        raise AdminError.from_kafka(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group!r}")
    members = [
        Member(
            member_id=x.member_id,
            group_instance_id=x.group_instance_id,
            client_id=x.client_id,
            client_host=x.client_host,
            assignment=_assignment(described.protocol_type, x.member_assignment),
        )
        for x in described.members
    ]
    owner = {
        (topic, p): member.member_id
        for member in members
        for topic, ps in (member.assignment or {}).items()
        for p in ps
    }
    # Every partition with a committed offset, and those assigned without one yet (as
    # kafka-consumer-groups.sh lists them: committed -1, no lag).
    by_key = {(topic, p.partition_index): p for topic, p in committed}
    keys = sorted(by_key.keys() | owner.keys())
    ends = await common.list_offsets(keys, common.LATEST)
    offsets = []
    for key in keys:
        p = by_key.get(key, _NOT_COMMITTED)
        end, end_error = ends.get(key, (None, None))
        has_offset = p.committed_offset >= 0
        offsets.append(
            PartitionOffsets(
                topic=key[0],
                partition=key[1],
                committed_offset=p.committed_offset,
                committed_leader_epoch=p.committed_leader_epoch,
                metadata=p.metadata,
                log_end_offset=end,
                # Kafka's lag: negative when the log was truncated below the commit.
                lag=end - p.committed_offset if end is not None and has_offset else None,
                member_id=owner.get(key),
                error=common.error_name(p.error_code) or end_error,
            )
        )
    return GroupDescription(
        group_id=group,
        state=described.group_state,
        protocol_type=described.protocol_type,
        protocol=described.protocol_data,
        coordinator=coordinator,
        members=members,
        offsets=offsets,
    )
