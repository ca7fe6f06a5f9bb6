"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance.

Theory of operation
-------------------
This is the rebalance protocol of Kafka's classic group coordinator, as a mixin of
:class:`~kcore.coordinator.group.coordinator.GroupCoordinator` (which owns the groups, the
partitions and the clock). Nothing blocks: a JoinGroup or SyncGroup that must wait is *parked*
on its member (``join_pending`` / ``sync_pending``: the ``respond`` callback and the request
version) and answered later, from another request or from ``tick``. Every parked request is
answered exactly once: by the end of its phase, by an error that ends it (a new rebalance, the
member's removal, fencing by a newer static member, the partition being unloaded), or, when the
same member parks a second request, the first is answered REBALANCE_IN_PROGRESS (Kafka would
drop it; a client never has two in flight, so only a dead connection's request is affected).

The join phase ends (``_complete_join``) when every member has rejoined and no KIP-394 pending
member is outstanding, or when the join timer fires: the rebalance timeout (the longest of the
members'), or for a group leaving Empty the initial-rebalance delay, which restarts while new
members keep arriving until the rebalance timeout is used up. Dynamic members that did not
rejoin are removed; static ones (KIP-345) keep their place until their session expires.

Timers are deadlines stored on the group and its members (see ``ClassicGroup``); a handler here
is called by ``tick`` at the deadline's time. The group metadata written to the log is the
group at the end of a sync phase (the leader's assignment), the group becoming Empty, a new group,
and a static member's new member id; a failed write leaves the group as it was and the error goes
to the member that asked (mapped as Kafka maps log errors to coordinator errors).
"""

from __future__ import annotations

import contextlib

from kcore.coordinator.group.group import ClassicGroup, GroupState, MemberMetadata
from kcore.coordinator.group.records import GroupMetadataRecord
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["MembershipMixin", "NEW_MEMBER_JOIN_TIMEOUT_MS"]

E = ErrorCode
S = GroupState

# Kafka's group.classic.new.member.join.timeout: a member whose first JoinGroup is parked this
# long is dropped (its client may have disconnected; it will retry if still alive).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


def join_response(
    version: int,
    error: ErrorCode = E.NONE,
    *,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = "",
    leader: str | None = "",
    members: list | None = None,
    skip_assignment: bool = False,
) -> m.JoinGroupResponse:
    """A JoinGroupResponse shaped for ``version`` (ProtocolName is only nullable from v7)."""
    if protocol_name is None and version < 7:
        protocol_name = ""
    return m.JoinGroupResponse(
        error_code=int(error),
        generation_id=generation_id,
        protocol_type=protocol_type if version >= 7 else None,
        protocol_name=protocol_name,
        leader=leader or "",
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=members or [],
    )


def sync_response(
    version: int,
    error: ErrorCode = E.NONE,
    *,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> m.SyncGroupResponse:
    return m.SyncGroupResponse(
        error_code=int(error),
        protocol_type=protocol_type if version >= 5 else None,
        protocol_name=protocol_name if version >= 5 else None,
        assignment=assignment,
    )


def _inconsistent(requested: str | None, actual: str | None) -> bool:
    return requested is not None and actual is not None and requested != actual


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
    """Kafka's member check: a static member is known by its instance id and fenced when it
    presents another member id; a dynamic one must be a member."""
    if instance_id is None:
        return E.NONE if group.has_member(member_id) else E.UNKNOWN_MEMBER_ID
    existing = group.static_member_id(instance_id)
    if existing is None:
        return E.UNKNOWN_MEMBER_ID
    return E.NONE if existing == member_id else E.FENCED_INSTANCE_ID


class MembershipMixin:
    """JoinGroup / SyncGroup / Heartbeat / LeaveGroup for :class:`GroupCoordinator`."""

    # ---- JoinGroup -----------------------------------------------------------------------------

    def join_group(self, req, version, client_id, client_host, now_ms, respond) -> None:
        """Handle JoinGroup; ``respond(JoinGroupResponse)`` is called exactly once, now or later.

        Errors: INVALID_GROUP_ID (empty id), INVALID_SESSION_TIMEOUT, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID, MEMBER_ID_REQUIRED (v4+, carrying the
        new member id), GROUP_MAX_SIZE_REACHED, INCONSISTENT_GROUP_PROTOCOL, FENCED_INSTANCE_ID,
        and the coordinator errors of a failed write.
        """

        def fail(code: ErrorCode, member_id: str = req.member_id) -> None:
            respond(join_response(version, code, member_id=member_id))

        if not req.group_id:
            return fail(E.INVALID_GROUP_ID)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT)
        error, groups = self._lookup(req.group_id)
        if error:
            return fail(error)
        group = groups.get(req.group_id)
        is_unknown = req.member_id == ""
        if group is None:
            if not is_unknown:
                return fail(E.UNKNOWN_MEMBER_ID)
            # Kafka persists a new group at once (an empty GroupMetadata record), so that the
            # group exists in the log even if its first members never complete a rebalance.
            group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
            try:
                self._append_group(
                    group, GroupMetadataRecord(group.group_id, group.metadata_value())
                )
            except KafkaError as e:
                return fail(self._map_write_error(e))
            groups[req.group_id] = group

        # v0 has no rebalance timeout: the session timeout serves as both.
        rebalance_timeout = req.session_timeout_ms if version == 0 else req.rebalance_timeout_ms
        join = _Join(req, version, client_id, client_host, rebalance_timeout, respond)
        if not self._accept_joining_member(group, req.member_id):
            self._remove_member(group, req.member_id)
            return fail(E.GROUP_MAX_SIZE_REACHED, "")
        if is_unknown:
            self._join_new_member(group, join, now_ms)
        else:
            self._join_existing_member(group, join, now_ms)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or (
                group.num_awaiting_join() < max_size
            )
        return group.has_member(member_id) or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, join: _Join, now_ms: int) -> None:
        req = join.req
        if group.is_in(S.DEAD):
            return join.fail(E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, join.protocol_names):
            return join.fail(E.INCONSISTENT_GROUP_PROTOCOL)
        instance_id = req.group_instance_id
        new_id = self._member_id_factory(instance_id if instance_id is not None else join.client_id)
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return self._replace_static_member(group, join, old_id, new_id, now_ms)
            return self._add_member_and_rebalance(group, join, new_id, now_ms)
        if join.version >= 4:
            # KIP-394: hand out the id and wait for the member to come back with it, so that a
            # client that never sees this answer does not leave a ghost member behind.
            group.pending_members[new_id] = now_ms + req.session_timeout_ms
            return join.fail(E.MEMBER_ID_REQUIRED, new_id)
        self._add_member_and_rebalance(group, join, new_id, now_ms)

    def _join_existing_member(self, group: ClassicGroup, join: _Join, now_ms: int) -> None:
        req = join.req
        member_id = req.member_id
        if group.is_in(S.DEAD):
            return join.fail(E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, join.protocol_names):
            return join.fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:  # pending members are dynamic by construction
                return join.fail(E.UNKNOWN_SERVER_ERROR)
            return self._add_member_and_rebalance(group, join, member_id, now_ms)
        error = validate_member(group, member_id, req.group_instance_id)
        if error:
            return join.fail(error)
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, join, now_ms)
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(join.protocols):
                # The member lost our JoinGroup answer: give it again.
                join.respond(self._current_generation_response(group, member_id, join.version))
            else:
                self._update_member_and_rebalance(group, member, join, now_ms)
        elif group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(join.protocols):
                # A leader's JoinGroup asks for a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, join, now_ms)
            else:
                join.respond(
                    self._current_generation_response(group, member_id, join.version, False)
                )
        else:  # Empty: the member's generation is gone; it must join afresh.
            join.fail(E.UNKNOWN_MEMBER_ID)

    def _current_generation_response(
        self, group: ClassicGroup, member_id: str, version: int, with_members: bool = True
    ) -> m.JoinGroupResponse:
        members = self._join_members(group) if with_members and group.is_leader(member_id) else []
        return join_response(
            version,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id,
            members=members,
        )

    @staticmethod
    def _join_members(group: ClassicGroup) -> list:
        cls = m.JoinGroupResponse.JoinGroupResponseMember
        return [
            cls(
                member_id=mem.member_id,
                group_instance_id=mem.group_instance_id,
                metadata=mem.metadata_for(group.protocol_name),
            )
            for mem in group.members.values()
        ]

    def _add_member_and_rebalance(
        self, group: ClassicGroup, join: _Join, member_id: str, now_ms: int
    ) -> None:
        req = join.req
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=join.client_id,
            client_host=join.client_host,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=join.protocols,
            join_pending=(join.respond, join.version),
            is_new=True,
        )
        if group.is_in(S.PREPARING_REBALANCE) and group.previous_state is S.EMPTY:
            group.new_member_added = True  # extends the initial-rebalance delay
        group.add(member)
        # A new member cannot heartbeat (it has no id yet); bound its parked JoinGroup instead.
        member.heartbeat_deadline_ms = now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: MemberMetadata, join: _Join, now_ms: int
    ) -> None:
        self._answer_join(member, E.REBALANCE_IN_PROGRESS)  # a superseded parked JoinGroup
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.req.session_timeout_ms
        member.join_pending = (join.respond, join.version)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: ClassicGroup, join: _Join, old_id: str, new_id: str, now_ms: int
    ) -> None:
        """A known group.instance.id joins with no member id (KIP-345): the new id replaces the
        old one, whose parked requests are fenced. A Stable group whose protocol would not change
        does not rebalance: the new id is persisted and the member resumes its assignment."""
        instance_id = join.req.group_instance_id
        current_leader = group.leader_id
        old = group.members[old_id]
        self._answer_join(old, E.FENCED_INSTANCE_ID, member_id=old_id, protocol_name=None)
        self._answer_sync(old, E.FENCED_INSTANCE_ID)
        was_pending_sync = old_id in group.pending_sync_members
        member = group.replace_static_member(instance_id, old_id, new_id)
        if was_pending_sync:
            group.pending_sync_members.add(new_id)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.req.session_timeout_ms

        if group.is_in(S.STABLE):
            if (group.protocol_name or "") != group.select_protocol():
                member.join_pending = (join.respond, join.version)
                return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            try:
                self._append_group(
                    group, GroupMetadataRecord(group.group_id, group.metadata_value())
                )
            except KafkaError as e:
                # Undo: the log still names the old member id, so must memory.
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved
                restored = group.replace_static_member(instance_id, new_id, old_id)
                if was_pending_sync:
                    group.pending_sync_members.discard(new_id)
                    group.pending_sync_members.add(old_id)
                restored.heartbeat_deadline_ms = now_ms + restored.session_timeout_ms
                return join.respond(
                    join_response(
                        join.version,
                        self._map_write_error(e),
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader,
                    )
                )
            if join.version >= 9:
                # The rejoining leader gets the member list but must keep its old assignment.
                is_leader = group.is_leader(new_id)
                response = self._current_generation_response(group, new_id, join.version)
                response.skip_assignment = is_leader
            else:
                # Older clients would recompute an assignment: do not tell them they lead.
                response = join_response(
                    join.version,
                    member_id=new_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=current_leader,
                )
            return join.respond(response)

        member.join_pending = (join.respond, join.version)
        if group.is_in(S.COMPLETING_REBALANCE):
            # The leader may already hold the old id in its assignment: rebalance again.
            self._prepare_rebalance(group, now_ms)
        else:  # PreparingRebalance (Empty/Dead cannot have a static member)
            self._maybe_complete_join_phase(group, now_ms)

    # ---- the join phase --------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, E.REBALANCE_IN_PROGRESS, now_ms)
        group.sync_deadline_ms = None
        initial = group.is_in(S.EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.join_timer_initial = True
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline_ms = now_ms + delay
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        if not initial:
            self._maybe_complete_join_else_schedule(group, now_ms)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, now_ms: int) -> None:
        if group.has_all_members_joined():
            self._complete_join(group, now_ms)
        else:
            group.join_timer_initial = False
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        # The initial rebalance of a group that was Empty always waits for its delay.
        if (
            group.is_in(S.PREPARING_REBALANCE)
            and group.has_all_members_joined()
            and group.previous_state is not S.EMPTY
        ):
            self._complete_join(group, now_ms)

    def _on_join_deadline(self, group: ClassicGroup, now_ms: int) -> None:
        group.join_deadline_ms = None
        if group.join_timer_initial and group.new_member_added and group.initial_remaining_ms:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline_ms = now_ms + delay
            return
        self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """End the join phase: drop dynamic members that did not rejoin, bump the generation and
        answer every parked JoinGroup (the leader gets the member list)."""
        group.join_deadline_ms = None
        group.join_timer_initial = False
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._remove_member(group, member.member_id)
        if group.is_in(S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or for their
            # sessions to expire).
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.init_next_generation(now_ms)
        if group.is_in(S.EMPTY):
            # A failed write is ignored, as Kafka: the log keeps the previous generation, whose
            # members will time out after a reload; nothing else depends on this record.
            with contextlib.suppress(KafkaError):
                self._append_group(
                    group, GroupMetadataRecord(group.group_id, group.metadata_value())
                )
            return
        for member in group.members.values():
            self._answer_join_response(
                member,
                self._current_generation_response(group, member.member_id, _version(member)),
            )
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.sync_generation = group.generation_id

    def _on_sync_deadline(self, group: ClassicGroup, now_ms: int) -> None:
        """Members that never sent SyncGroup for this generation are removed (KIP-814 era)."""
        group.sync_deadline_ms = None
        if group.sync_generation != group.generation_id:
            return
        if group.is_in(S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync_members:
            for member_id in sorted(group.pending_sync_members):
                self._remove_member(group, member_id)
            self._prepare_rebalance(group, now_ms)

    def _on_heartbeat_deadline(self, group: ClassicGroup, member: MemberMetadata, now_ms: int):
        member.heartbeat_deadline_ms = None
        if not member.has_satisfied_heartbeat():
            self._remove_member_and_update(group, member, now_ms)

    def _on_pending_member_deadline(self, group: ClassicGroup, member_id: str, now_ms: int):
        del group.pending_members[member_id]
        if group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now_ms)

    def _remove_member_and_update(self, group: ClassicGroup, member: MemberMetadata, now_ms: int):
        self._remove_member(group, member.member_id)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now_ms)

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID (so that a
        client still alive rejoins from scratch)."""
        member = group.members.get(member_id)
        if member is not None:
            self._answer_join(member, E.UNKNOWN_MEMBER_ID)
            self._answer_sync(member, E.UNKNOWN_MEMBER_ID)
        group.remove(member_id)

    # ---- SyncGroup -------------------------------------------------------------------------------

    def sync_group(self, req, version, now_ms, respond) -> None:
        """Handle SyncGroup; ``respond(SyncGroupResponse)`` is called exactly once.

        Followers are parked until the leader's assignment is persisted; the leader's own
        request is answered with everyone's. Errors: INVALID_GROUP_ID, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
        INCONSISTENT_GROUP_PROTOCOL (v5), REBALANCE_IN_PROGRESS, and write errors.
        """

        def fail(code: ErrorCode) -> None:
            respond(sync_response(version, code))

        if not req.group_id:
            return fail(E.INVALID_GROUP_ID)
        error, groups = self._lookup(req.group_id)
        if error:
            return fail(error)
        group = groups.get(req.group_id)
        if group is None or group.is_in(S.EMPTY):
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        error = validate_member(group, req.member_id, req.group_instance_id)
        if error:
            return fail(error)
        if req.generation_id != group.generation_id:
            return fail(E.ILLEGAL_GENERATION)
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
            req.protocol_name, group.protocol_name
        ):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(S.PREPARING_REBALANCE):
            return fail(E.REBALANCE_IN_PROGRESS)
        member = group.members[req.member_id]
        if group.is_in(S.STABLE):
            self._received_sync(group, member.member_id)
            return respond(
                sync_response(
                    version,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                )
            )
        # CompletingRebalance: park until the leader's assignment is stored.
        self._answer_sync(member, E.REBALANCE_IN_PROGRESS)  # a superseded parked SyncGroup
        member.sync_pending = (respond, version)
        self._received_sync(group, member.member_id)
        if not group.is_leader(member.member_id):
            return
        given = {a.member_id: bytes(a.assignment) for a in req.assignments}
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        try:
            self._append_group(
                group, GroupMetadataRecord(group.group_id, group.metadata_value(assignment))
            )
        except KafkaError as e:
            self._reset_and_propagate_assignment(group, self._map_write_error(e), now_ms)
            return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        for mid, mem in group.members.items():
            mem.assignment = assignment[mid]
        self._propagate_assignment(group, E.NONE, now_ms)
        group.transition_to(S.STABLE, now_ms)

    @staticmethod
    def _received_sync(group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_deadline_ms = None

    def _reset_and_propagate_assignment(self, group, error: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error == E.NONE
        for member in group.members.values():
            if member.sync_pending is None:
                continue
            respond, version = member.sync_pending
            member.sync_pending = None
            respond(
                sync_response(
                    version,
                    error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                )
            )
            # Its session may have lapsed while parked (and been forgiven): start a new one.
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    # ---- Heartbeat -------------------------------------------------------------------------------

    def heartbeat(self, req, version, now_ms) -> m.HeartbeatResponse:
        """Handle Heartbeat: extends the member's session. REBALANCE_IN_PROGRESS tells the
        member to rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID as Kafka."""

        def answer(code: ErrorCode) -> m.HeartbeatResponse:
            return m.HeartbeatResponse(error_code=int(code))

        if not req.group_id:
            return answer(E.INVALID_GROUP_ID)
        error, groups = self._lookup(req.group_id)
        if error:
            return answer(error)
        group = groups.get(req.group_id)
        if group is None:
            return answer(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return answer(E.COORDINATOR_NOT_AVAILABLE)
        error = validate_member(group, req.member_id, req.group_instance_id)
        if error:
            return answer(error)
        if req.generation_id != group.generation_id:
            return answer(E.ILLEGAL_GENERATION)
        if group.is_in(S.EMPTY):
            return answer(E.UNKNOWN_MEMBER_ID)
        member = group.members[req.member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_in(S.PREPARING_REBALANCE):
            return answer(E.REBALANCE_IN_PROGRESS)
        return answer(E.NONE)

    # ---- LeaveGroup ------------------------------------------------------------------------------

    def leave_group(self, req, version, now_ms) -> m.LeaveGroupResponse:
        """Handle LeaveGroup. v0-2 name one member and answer with one error code; v3+ name
        several (a static member may be removed by its group.instance.id alone) and answer
        per member."""
        if version <= 2:
            identities = [(req.member_id, None)]
        else:
            identities = [(x.member_id, x.group_instance_id) for x in req.members]

        def top_level(code: ErrorCode) -> m.LeaveGroupResponse:
            return m.LeaveGroupResponse(error_code=int(code))

        if not req.group_id:
            return top_level(E.INVALID_GROUP_ID)
        error, groups = self._lookup(req.group_id)
        if error:
            return top_level(error)
        group = groups.get(req.group_id)
        if group is None:
            return top_level(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return top_level(E.COORDINATOR_NOT_AVAILABLE)

        results: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in identities:
            if member_id == "":
                # Removal by group.instance.id alone (an administrator's request).
                static_id = group.static_member_id(instance_id)
                if static_id is None:
                    results.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                    continue
                self._remove_member(group, static_id)
            elif group.is_pending_member(member_id):
                group.remove(member_id)
            else:
                error = validate_member(group, member_id, instance_id)
                if error:
                    results.append((member_id, instance_id, error))
                    continue
                self._remove_member(group, member_id)
            results.append((member_id, instance_id, E.NONE))

        if any(code == E.NONE for _, _, code in results):
            if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.is_in(S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, now_ms)

        if version <= 2:
            return top_level(results[0][2])
        cls = m.LeaveGroupResponse.MemberResponse
        return m.LeaveGroupResponse(
            members=[
                cls(member_id=mid, group_instance_id=iid, error_code=int(code))
                for mid, iid, code in results
            ]
        )

    # ---- answering parked requests ---------------------------------------------------------------

    @staticmethod
    def _answer_join(member: MemberMetadata, error: ErrorCode, **fields) -> None:
        """Answer the member's parked JoinGroup, if any, with an error."""
        if member.join_pending is not None:
            respond, version = member.join_pending
            member.join_pending = None
            respond(join_response(version, error, **fields))

    @staticmethod
    def _answer_join_response(member: MemberMetadata, response: m.JoinGroupResponse) -> None:
        if member.join_pending is not None:
            respond, _ = member.join_pending
            member.join_pending = None
            respond(response)

    @staticmethod
    def _answer_sync(member: MemberMetadata, error: ErrorCode) -> None:
        if member.sync_pending is not None:
            respond, version = member.sync_pending
            member.sync_pending = None
            respond(sync_response(version, error))


def _version(member: MemberMetadata) -> int:
    return member.join_pending[1] if member.join_pending is not None else 0


class _Join:
    """One JoinGroup request in flight through the handlers."""

    __slots__ = ("req", "version", "client_id", "client_host", "rebalance_timeout_ms", "respond")

    def __init__(self, req, version, client_id, client_host, rebalance_timeout_ms, respond):
        self.req = req
        self.version = version
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.respond = respond

    @property
    def protocols(self) -> list[tuple[str, bytes]]:
        return [(p.name, bytes(p.metadata)) for p in self.req.protocols]

    @property
    def protocol_names(self) -> list[str]:
        return [p.name for p in self.req.protocols]

    def fail(self, code: ErrorCode, member_id: str | None = None) -> None:
        member_id = self.req.member_id if member_id is None else member_id
        self.respond(join_response(self.version, code, member_id=member_id))
