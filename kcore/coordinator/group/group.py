"""A classic (pre-KIP-848) consumer group: its state machine, its members and its offsets.

Theory of operation
-------------------
A classic group rebalances in two phases. In the *join* phase (``PreparingRebalance``) every
member sends JoinGroup with the protocols it supports; the coordinator parks each request until
all known members have rejoined or the rebalance timeout passes. It then bumps the generation,
picks the protocol every member supports (by vote), names a leader and answers every parked
JoinGroup (``CompletingRebalance``). In the *sync* phase the leader computes the assignment and
sends it in its SyncGroup; once persisted, every parked SyncGroup is answered with the member's
own assignment and the group is ``Stable``. A group with no members is ``Empty`` (it may still
hold committed offsets); a group being deleted or unloaded is ``Dead``.

The legal transitions are the table :data:`VALID_PREVIOUS_STATES` (as Kafka's
``ClassicGroupState``), read "target: the states it may be entered from"::

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Stable, CompletingRebalance, Empty
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- every state (including Dead)

This module holds data and the small, local rules (protocol selection, leader election among
the members that rejoined, static member replacement). The coordinator drives it; nothing here
writes to the log or reads the clock: times are passed in.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kcore.protocol import messages as m
from kcore.protocol.primitives import MalformedMessage

__all__ = [
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "CommittedOffset",
    "GroupState",
    "IllegalStateTransition",
    "MemberMetadata",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    """The states of a classic group; the value is Kafka's name (ListGroups, DescribeGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(_S),
}


class IllegalStateTransition(Exception):
    """Raised by :meth:`ClassicGroup.transition_to` for a transition not in the table: a bug."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A committed offset as the coordinator keeps it in memory (one per topic-partition)."""

    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # -1: expires by group emptiness (KIP-211), not explicitly
    # Where the offset's record stands in its partition's log, relative to the other offset
    # records (a counter the coordinator keeps, not the log offset; -1 unknown). A committed
    # transaction's offsets replace a committed offset only if written after it (Kafka compares
    # record offsets). Not part of equality: it says when, not what.
    record_order: int = field(default=-1, compare=False)


# A parked JoinGroup/SyncGroup: the response callback and the request's API version, which the
# response's shape depends on (nullable protocol fields from v7/v5, group_instance_id from v5...).
Pending = tuple[Callable[[Any], None], int]


@dataclass(eq=False)
class MemberMetadata:
    """One member of a classic group.

    ``protocols`` is the member's (name, metadata) list in its order of preference.
    ``join_pending`` / ``sync_pending`` hold the parked JoinGroup / SyncGroup, if any.
    ``heartbeat_deadline_ms`` is when the session expires unless the member shows signs of life;
    None when no expiry is scheduled (Kafka's timer already fired while the member was parked).
    ``is_new`` marks a member added by JoinGroup that has not yet received a JoinGroup
    response: it is expired by the new-member join timeout even while parked.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_pending: Pending | None = None
    sync_pending: Pending | None = None
    heartbeat_deadline_ms: int | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_pending is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_pending is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """True when the member rejoins with exactly its current protocols (same order)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether an expiring session is forgiven: parked members are alive by definition,
        except new members, which must complete their first join within the join timeout."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


@dataclass(eq=False)
class ClassicGroup:
    """A classic group and everything the coordinator knows about it.

    Timers are fields holding absolute deadlines (ms); the coordinator's ``tick`` fires them:

    * ``join_deadline_ms``: end of the join phase (``join_timer_initial`` when it is the
      initial-rebalance delay, with ``initial_delay_ms``/``initial_remaining_ms`` its state);
    * ``sync_deadline_ms``/``sync_generation``: members that have not sent SyncGroup by then are
      removed (the pending-sync timeout of KIP-814's era, equal to the rebalance timeout);
    * each member's ``heartbeat_deadline_ms`` and each pending member's deadline in
      ``pending_members``.
    """

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member
    pending_members: dict[str, int] = field(default_factory=dict)  # KIP-394: id -> deadline
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline_ms: int | None = None
    join_timer_initial: bool = False
    initial_delay_ms: int = 0
    initial_remaining_ms: int = 0
    sync_deadline_ms: int | None = None
    sync_generation: int = -1

    # ---- state machine -------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to ``target``; raises :class:`IllegalStateTransition` if the table forbids it."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # ---- membership ----------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def add(self, member: MemberMetadata) -> None:
        """Add ``member`` (its ``join_pending`` already set by the caller, if any)."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> MemberMetadata | None:
        """Remove a member or pending member; a departing leader is replaced by the first member
        left. The caller answers the member's parked requests before calling this."""
        member = self.members.pop(member_id, None)
        if (
            member is not None
            and member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """Give the static member ``instance_id`` the member id ``new_id`` (KIP-345).

        The returned member is a copy of the old one under the new id, with no parked
        requests; the caller fences the old member's parked requests before calling this.
        """
        old = self.members.pop(old_id)
        new = MemberMetadata(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        self.pending_sync_members.discard(old_id)
        return new

    def num_awaiting_join(self) -> int:
        return sum(1 for mem in self.members.values() if mem.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [mem for mem in self.members.values() if not mem.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout among the members: how long the join phase may last."""
        return max((mem.rebalance_timeout_ms for mem in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did. False when no
        member rejoined (or there is no leader at all)."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ---- protocols -----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with these protocols may join: any protocol type/names in an Empty
        group (as long as there are some), else the group's type and one protocol that every
        current member supports."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name in names)

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        sets = [{name for name, _ in mem.protocols} for mem in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol among those every
        member supports; the most votes wins. Ties (which Kafka leaves to hash order) go to the
        protocol whose first vote came earliest, so the choice is deterministic."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for the empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def init_next_generation(self, now_ms: int) -> None:
        """Bump the generation at the end of the join phase: CompletingRebalance with a
        selected protocol, or Empty without one when nobody is left."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    # ---- subscriptions (consumer protocol) -------------------------------------------------------

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members subscribe to, when the group uses the consumer protocol and
        every subscription parses; an empty set for a group without members; else None
        (unknown: Kafka then treats no topic as subscribed)."""
        if not self.members:
            return set()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(_subscription_topics(member.metadata_for(self.protocol_name)))
            except (KeyError, ValueError):
                return None
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        topics = self.subscribed_topics()
        return topics is not None and topic in topics

    # ---- persistence -----------------------------------------------------------------------------

    def metadata_value(self, assignment: dict[str, bytes] | None = None) -> m.GroupMetadataValue:
        """The GroupMetadataValue for the current generation (members' metadata for the selected
        protocol, and ``assignment`` or the members' current assignments)."""
        members = []
        for mem in self.members.values():
            members.append(
                m.GroupMetadataValue.MemberMetadata(
                    member_id=mem.member_id,
                    group_instance_id=mem.group_instance_id,
                    client_id=mem.client_id,
                    client_host=mem.client_host,
                    rebalance_timeout=mem.rebalance_timeout_ms,
                    session_timeout=mem.session_timeout_ms,
                    subscription=mem.metadata_for(self.protocol_name or ""),
                    assignment=(assignment or {}).get(mem.member_id, mem.assignment),
                )
            )
        return m.GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=(
                -1 if self.state_timestamp_ms is None else self.state_timestamp_ms
            ),
            members=members,
        )

    @classmethod
    def from_metadata(
        cls, group_id: str, value: m.GroupMetadataValue, offsets: dict | None = None
    ) -> ClassicGroup:
        """Rebuild a group from its last GroupMetadataValue: Stable with the recorded members,
        or Empty without any. Loaded members have no session timer until loading finishes."""
        group = cls(
            group_id=group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=(
                None if value.current_state_timestamp == -1 else value.current_state_timestamp
            ),
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
            offsets=offsets if offsets is not None else {},
        )
        for rec in value.members:
            group.members[rec.member_id] = MemberMetadata(
                member_id=rec.member_id,
                group_instance_id=rec.group_instance_id,
                client_id=rec.client_id,
                client_host=rec.client_host,
                # Before v1 there was no rebalance timeout: Kafka used the session timeout.
                rebalance_timeout_ms=(
                    rec.session_timeout if rec.rebalance_timeout == -1 else rec.rebalance_timeout
                ),
                session_timeout_ms=rec.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", bytes(rec.subscription))],
                assignment=bytes(rec.assignment),
            )
            if rec.group_instance_id is not None:
                group.static_members[rec.group_instance_id] = rec.member_id
        return group


_INT16 = struct.Struct(">h")


def _subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a consumer-protocol subscription (int16 version + ConsumerProtocolSubscription).

    Versions above the highest known are read as the highest (Kafka's forward compatibility:
    newer versions only append fields)."""
    if len(metadata) < 2:
        raise ValueError("subscription too short")
    version = min(_INT16.unpack_from(metadata)[0], 3)
    if version < 0:
        raise ValueError("negative subscription version")
    try:
        sub, _ = m.ConsumerProtocolSubscription.decode_from(memoryview(metadata), 2, version)
    except MalformedMessage as e:
        raise ValueError(str(e)) from None
    return list(sub.topics)
