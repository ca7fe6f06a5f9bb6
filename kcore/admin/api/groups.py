"""``GET /v1/groups`` and ``GET /v1/groups/{group}``: ListGroups; FindCoordinator,
DescribeGroups, OffsetFetch and ListOffsets.

A group lives on its coordinator, and any node's endpoint answers for the whole cluster, as
Kafka's admin clients do (they ask every broker's ListGroups, and a group's coordinator):

* ``/v1/groups``: ListGroups as the caller here, and ListGroups to every other broker over its
  inter-broker listener as this node (:func:`kcore.admin.cluster_view.ask_peers`); the groups
  the others list are kept only where this node's DescribeGroups *as the caller* does not
  answer GROUP_AUTHORIZATION_FAILED (a non-coordinator answers NOT_COORDINATOR to a caller it
  authorizes), so a caller sees the groups it would see asking each broker itself. A broker
  that does not answer is named in ``unreachable_brokers``.
* ``/v1/groups/{group}``: FindCoordinator and DescribeGroups as the caller here (the
  authorizer's answer); on another coordinator's group, DescribeGroups and OffsetFetch are
  then sent to the coordinator as this node, and the committed offsets of topics the caller
  may not describe (this node's Metadata as the caller says so) are left out, as Kafka's
  OffsetFetch leaves them out. A coordinator that does not answer is a 503.

The lag of a partition is its log end offset (ListOffsets LATEST as a consumer, the high
watermark: what kafka-consumer-groups.sh shows as LOG-END-OFFSET, asked of the partition's
leader) minus the committed offset.
"""

from __future__ import annotations

from quart import Blueprint, current_app
from quart_schema import validate_response

from kcore.admin.api import common
from kcore.admin.api.common import Reply, errors
from kcore.admin.cluster_view import PEERS_KEY, ask_peers, other_brokers
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
    notes: list[str] = []  # the brokers that did not answer: their groups are missing


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
    """ListGroups of every broker (this node's as the caller; see the module docstring)."""
    response = await kafka(m.ListGroupsRequest())
    raise_for(response.error_code)
    listed = {g.group_id: g for g in response.groups}
    others = other_brokers(broker())
    notes: list[str] = []
    if others:
        answers, failed = await ask_peers(_peers(), dict.fromkeys(others, m.ListGroupsRequest()))
        notes = [failed[n] for n in sorted(failed)]
        remote = {}
        for peer, answer in sorted(answers.items()):
            if answer.error_code:
                notes.append(f"broker {peer} answered {common.error_name(answer.error_code)}")
                continue
            for g in answer.groups:
                if g.group_id not in listed:
                    remote.setdefault(g.group_id, g)
        if remote:
            allowed = await _describable(list(remote))
            listed.update((k, g) for k, g in remote.items() if k in allowed)
    return GroupList(
        groups=[
            GroupSummary(
                group_id=g.group_id,
                type=g.group_type,
                state=g.group_state,
                protocol_type=g.protocol_type,
            )
            for _, g in sorted(listed.items())
        ],
        notes=notes,
    )


def _peers():
    return current_app.extensions[PEERS_KEY]


async def _describable(group_ids: list[str]) -> set[str]:
    """The groups the caller may DESCRIBE: this node's DescribeGroups as the caller refuses
    the others with GROUP_AUTHORIZATION_FAILED (and answers NOT_COORDINATOR for the rest)."""
    response = await kafka(m.DescribeGroupsRequest(groups=group_ids))
    denied = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return {g.group_id for g in response.groups if g.error_code != denied}


async def _coordinator(group: str) -> int:
    """The group's coordinator (FindCoordinator as the caller)."""
    found = await kafka(m.FindCoordinatorRequest(key_type=GROUP_KEY, coordinator_keys=[group]))
    c = found.coordinators[0]
    raise_for(c.error_code, c.error_message)
    return c.node_id


async def _at(coordinator: int, body):
    """``body``'s answer from the group's coordinator, another broker, asked as this node."""
    answers, failed = await ask_peers(_peers(), {coordinator: body})
    if coordinator not in answers:
        raise AdminError(
            503,
            "COORDINATOR_NOT_AVAILABLE",
            f"the group's coordinator: {failed[coordinator]}",
            int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        )
    return answers[coordinator]


async def _visible(committed: list) -> list:
    """The committed offsets of the topics the caller may describe (Metadata as the caller),
    as Kafka's OffsetFetch of a whole group shows them; a deleted topic's stay."""
    names = sorted({topic for topic, _ in committed})
    if not names:
        return committed
    metadata = await common.topic_metadata(names)
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    hidden = {t.name for t in metadata.topics if t.error_code == denied}
    return [(topic, p) for topic, p in committed if topic not in hidden]


def _assignment(protocol_type: str, data) -> dict[str, list[int]] | None:
    if protocol_type != "consumer":
        return None
    try:
        return decode_assignment(data)
    except MalformedMessage:
        return None


async def _committed(group: str, coordinator: int | None = None) -> list:
    """The group's committed offsets: OffsetFetch here as the caller, or at ``coordinator``."""
    F = m.OffsetFetchRequest
    body = F(groups=[F.OffsetFetchRequestGroup(group_id=group, topics=None)])
    response = await (kafka(body) if coordinator is None else _at(coordinator, body))
    result = response.groups[0]
    raise_for(result.error_code)
    return [(t.name, p) for t in result.topics for p in t.partitions]


@groups.get("/v1/groups/<path:group>")  # a group id may hold a "/"
@validate_response(GroupDescription)
@errors(401, 403, 404, 503)
async def describe_group(group: str):
    """A group: its members and assignments, committed offsets, log end offsets and lag."""
    coordinator = await _coordinator(group)
    body = m.DescribeGroupsRequest(groups=[group])
    described = (await kafka(body)).groups[0]  # as the caller: the authorizer's answer
    # NOT_COORDINATOR: the caller may describe it, and another broker holds it.
    if described.error_code == ErrorCode.NOT_COORDINATOR and coordinator != broker().node_id:
        described = (await _at(coordinator, body)).groups[0]
        raise_for(described.error_code, described.error_message)
        committed = await _visible(await _committed(group, coordinator))
    else:
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
