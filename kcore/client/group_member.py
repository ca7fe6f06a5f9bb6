"""A member of a classic consumer group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the
range assignor, with the ``consumer`` protocol type's embedded encodings.

Theory of operation
-------------------
The classic protocol (Kafka's ``ConsumerCoordinator`` / ``AbstractCoordinator``) is a loop of
generations. A member **joins** (JoinGroup: its subscription, as a ConsumerProtocolSubscription
under the protocol name ``range``); the coordinator waits for every member, picks a leader and
answers each with the new generation — the leader also gets every member's subscription. The
leader **assigns** (:func:`range_assign`) and every member **syncs** (SyncGroup; the leader
sends the assignments), getting back its own ConsumerProtocolAssignment. From then on the member
**heartbeats** every ``heartbeat.interval.ms``; an answer of REBALANCE_IN_PROGRESS means another
generation is forming and the member must join again (after committing, so that the next owner
of its partitions starts where it stopped); UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION mean it was
removed and joins as a new member. On close it **leaves** (LeaveGroup), so the others rebalance
at once instead of after ``session.timeout.ms``; a static member (``group.instance.id``) does
not leave, as in Kafka, so that a restart keeps its partitions.

Every request goes to the group's coordinator, found with FindCoordinator and looked up again
when the answer says it moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS) or the connection breaks.

The member is driven by its caller (:class:`~kcore.client.consumer.Consumer` runs the heartbeat
loop); :func:`range_assign` and the encoders are pure.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import NetworkError, RequestTimeout
from kcore.client.groups import (
    COORDINATOR_ERRORS,
    backoff_s,
    decode_assignment,
    decode_subscription,
    find_coordinator,
    offset_commit,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "PROTOCOL_TYPE",
    "RANGE",
    "ClassicGroupMember",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
]

PROTOCOL_TYPE = "consumer"
RANGE = "range"
_CONSUMER_PROTOCOL_VERSION = 3  # what Kafka 3.x and 4.x clients write
_JOIN_KEY, _SYNC_KEY, _HEARTBEAT_KEY, _LEAVE_KEY = 11, 14, 12, 13
_MAX_JOIN_ROUNDS = 50

TopicPartition = tuple[str, int]


# -- the consumer protocol's embedded data -------------------------------------------------------


def encode_subscription(
    topics: Iterable[str],
    *,
    owned: Mapping[str, Iterable[int]] | None = None,
    generation: int = -1,
    rack: str | None = None,
    version: int = _CONSUMER_PROTOCOL_VERSION,
) -> bytes:
    """A ConsumerProtocolSubscription (JoinGroup's protocol metadata): int16 version, then the
    body at that version (topics sorted, as Kafka writes them)."""
    S = m.ConsumerProtocolSubscription
    body = S(
        topics=sorted(set(topics)),
        user_data=None,
        owned_partitions=[
            S.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in (owned or {}).items()
        ],
        generation_id=generation,
        rack_id=rack,
    )
    return struct.pack(">h", version) + body.encode(version)


def encode_assignment(
    assignment: Mapping[str, Iterable[int]], *, version: int = _CONSUMER_PROTOCOL_VERSION
) -> bytes:
    """A ConsumerProtocolAssignment (SyncGroup's assignment): int16 version, then the body."""
    A = m.ConsumerProtocolAssignment
    body = A(
        assigned_partitions=[
            A.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items())
        ],
        user_data=None,
    )
    return struct.pack(">h", version) + body.encode(version)


def range_assign(
    subscriptions: Mapping[str, Iterable[str]],
    partition_counts: Mapping[str, int],
    instance_ids: Mapping[str, str | None] | None = None,
) -> dict[str, dict[str, list[int]]]:
    """Kafka's ``RangeAssignor``: ``{member_id: {topic: [partitions]}}``.

    Per topic, the members subscribed to it are ordered (static members by
    ``group.instance.id`` first, then the others by member id) and each gets a consecutive
    range; the first ``partitions % members`` get one extra. Topics missing from
    ``partition_counts`` (unknown to the metadata) are left out. Every member gets an entry.
    """
    ids = instance_ids or {}

    def order(member: str) -> tuple[int, str]:
        instance = ids.get(member)
        return (0, instance) if instance else (1, member)

    out: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        count = partition_counts.get(topic)
        if not count:
            continue
        members = sorted((mid for mid, ts in subscriptions.items() if topic in ts), key=order)
        per, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                out[member][topic] = list(range(start, start + length))
    return out


# -- the member --------------------------------------------------------------------------------


class RebalanceNeeded(Exception):
    """The member must join the group again (its generation ended)."""


class ClassicGroupMember:
    """One member of ``group_id`` (see module docstring). ``partition_counts(topics)`` is
    awaited by the leader to learn how many partitions each subscribed topic has."""

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        group_instance_id: str | None = None,
        rack: str | None = None,
        partition_counts: Callable[[list[str]], Awaitable[dict[str, int]]],
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.group_instance_id = group_instance_id or None
        self.rack = rack
        self._partition_counts = partition_counts
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.assignment: dict[str, list[int]] = {}
        self._coordinator: int | None = None

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader

    @property
    def in_generation(self) -> bool:
        return self.generation >= 0

    def assigned_partitions(self) -> list[TopicPartition]:
        return sorted((t, p) for t, ps in self.assignment.items() for p in ps)

    # -- coordinator routing -------------------------------------------------------------------

    async def _request(
        self, api_key: int, build: Callable[[int], Message], *, timeout: float | None = None
    ) -> Any:
        """Send ``build(version)`` to the coordinator; a COORDINATOR_ERRORS answer or a broken
        connection finds it again and retries (the client's backoff, 10 attempts)."""
        for attempt in range(1, 11):
            try:
                if self._coordinator is None:
                    found = await find_coordinator(self.client, self.group_id)
                    self._coordinator = found.node_id
                conn = await self.client.connection(self._coordinator)
                version = conn.version_for(api_key)
                kwargs = {} if timeout is None else {"timeout": timeout}
                response = await conn.request(build(version), version, **kwargs)
                if response.error_code not in COORDINATOR_ERRORS:
                    return response
                error: BaseException = KafkaError(response.error_code)
            except (NetworkError, RequestTimeout) as e:
                error = e
            except KafkaError as e:
                if not e.retriable:
                    raise
                error = e
            self._coordinator = None
            if attempt == 10:
                raise error
            await trio.sleep(backoff_s(self.client, attempt))
        raise AssertionError("unreachable")

    # -- join and sync -------------------------------------------------------------------------

    async def join(self, topics: Iterable[str]) -> dict[str, list[int]]:
        """Join (or rejoin) the group subscribed to ``topics`` and return this member's
        assignment ``{topic: [partitions]}``. Raises KafkaError for a fatal answer
        (GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID, INVALID_SESSION_TIMEOUT ...)."""
        subscription = sorted(set(topics))
        for _ in range(_MAX_JOIN_ROUNDS):
            joined = await self._join_group(subscription)
            if joined is None:
                continue
            assignment = await self._sync_group(joined)
            if assignment is not None:
                self.assignment = assignment
                return assignment
        raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.group_id} never settled")

    async def _join_group(self, topics: list[str]) -> Any | None:
        J = m.JoinGroupRequest
        metadata = encode_subscription(topics, generation=self.generation, rack=self.rack)

        def build(version: int) -> Message:
            return J(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[J.JoinGroupRequestProtocol(name=RANGE, metadata=metadata)],
                reason=None,
            )

        # The answer comes when the generation is complete: up to the rebalance timeout.
        timeout = self.rebalance_timeout_ms / 1000 + (self.client.request_timeout or 30)
        response = await self._request(_JOIN_KEY, build, timeout=timeout)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: again, with this id
            self.member_id = response.member_id
            return None
        if not self._generation_ok(response.error_code, "JoinGroup"):
            return None
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.leader = response.leader
        return response

    async def _sync_group(self, joined: Any) -> dict[str, list[int]] | None:
        S = m.SyncGroupRequest
        assignments: list[Any] = []
        if joined.leader == joined.member_id:
            assignments = [
                S.SyncGroupRequestAssignment(member_id=member, assignment=encode_assignment(a))
                for member, a in (await self._assign(joined.members)).items()
            ]

        def build(version: int) -> Message:
            return S(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=RANGE,
                assignments=assignments,
            )

        timeout = self.rebalance_timeout_ms / 1000 + (self.client.request_timeout or 30)
        response = await self._request(_SYNC_KEY, build, timeout=timeout)
        if not self._generation_ok(response.error_code, "SyncGroup"):
            return None
        return decode_assignment(response.assignment)

    async def _assign(self, members: list[Any]) -> dict[str, dict[str, list[int]]]:
        subscriptions = {mb.member_id: decode_subscription(mb.metadata) for mb in members}
        instances = {mb.member_id: getattr(mb, "group_instance_id", None) for mb in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts = await self._partition_counts(topics)
        return range_assign(subscriptions, counts, instances)

    def _generation_ok(self, code: int, what: str) -> bool:
        """Whether a JoinGroup/SyncGroup answer is a success; False when the member must join
        again (as a new member after UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION); raises the rest."""
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset()
            return False
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return False
        if code:
            raise KafkaError(code, f"{what} of group {self.group_id}")
        return True

    def _reset(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.assignment = {}

    # -- while in the group ----------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """One Heartbeat. Raises :class:`RebalanceNeeded` when the member must join again (and
        forgets its member id when it was removed); KafkaError for a fatal answer."""
        H = m.HeartbeatRequest

        def build(version: int) -> Message:
            return H(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )

        code = (await self._request(_HEARTBEAT_KEY, build)).error_code
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            raise RebalanceNeeded("the group is rebalancing")
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset()
            raise RebalanceNeeded(f"the member left generation: {KafkaError(code)}")
        if code:
            raise KafkaError(code, f"Heartbeat of group {self.group_id}")

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """OffsetCommit as this member (its generation and id); ``{tp: error code}`` of the
        partitions that failed (empty when all were committed)."""
        if not offsets:
            return {}
        response = await offset_commit(
            self.client,
            self.group_id,
            dict(offsets),
            self.generation,
            self.member_id,
            group_instance_id=self.group_instance_id,
        )
        return {
            (t.name, p.partition_index): p.error_code
            for t in response.topics
            for p in t.partitions
            if p.error_code
        }

    async def leave(self) -> None:
        """LeaveGroup, unless static or not a member; errors are not raised (the session
        timeout removes the member anyway)."""
        if not self.member_id or self.group_instance_id:
            self._reset()
            return
        L = m.LeaveGroupRequest
        member_id = self.member_id

        def build(version: int) -> Message:
            if version >= 3:
                return L(group_id=self.group_id, members=[L.MemberIdentity(member_id=member_id)])
            return L(group_id=self.group_id, member_id=member_id)

        with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
            await self._request(_LEAVE_KEY, build)
        self._reset()
