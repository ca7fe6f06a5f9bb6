"""Building ``PartitionChangeRecord``s: Kafka's ``PartitionChangeBuilder``, without ELR (kcore's
controller does not run eligible leader replicas yet; it keeps the fields a log may carry).

Rules
-----
* Leader election. ONLINE (the default): keep the current leader if it is in the target ISR
  and acceptable (active, and not the broker being fenced or shut down); else the first replica,
  in replica order, that is in the target ISR and acceptable; else none (-1). PREFERRED tries
  the first replica before the current leader. UNCLEAN (the topic's
  ``unclean.leader.election.enable``) falls back to any acceptable replica, and then sets the
  ISR to that one leader and the leader recovery state to RECOVERING: data may be lost.
* The ISR becomes the target ISR, except that an empty target leaves the ISR alone: the last
  member stays in it while the partition has no leader, so that it can come back cleanly when
  that broker returns (Kafka's behaviour without ELR).
* Naming a leader in the record, even the same one, bumps the leader epoch on replay; that is
  how ``bump_leader_epoch`` works. ``min_leader_epoch`` (spec M-88, decision D-10) also names
  the current leader and carries the floor, so the new epoch is ``max(current + 1, floor)``.
* Reassignment (``kcore.metadata.reassignment_replicas``): the target replicas, adding and
  removing replicas default to the registration's. Every change first checks whether an
  ongoing reassignment can complete with the target ISR (every staying replica in it); then
  the replicas become the target, the removing ones leave the ISR, adding and removing are
  emptied, and the leader is elected among the remaining replicas, in their order. A change
  whose replicas do not include all the current ones names the leader (an epoch bump), so
  that a removed replica's fetches are fenced.
* A change that changes nothing returns ``None``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from kcore.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kcore.metadata.reassignment_replicas import ReassignmentReplicas
from kcore.metadata.records import PartitionChangeRecord

__all__ = ["Election", "build_partition_change", "validate_isr"]


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def validate_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's ``Replicas.validateIsr``: every ISR member is a replica, none twice, none < 0."""
    if not isr:
        return True
    return len(set(isr)) == len(isr) and all(r >= 0 and r in replicas for r in isr)


def build_partition_change(
    topic_id: uuid.UUID,
    partition_id: int,
    reg: PartitionRegistration,
    *,
    is_acceptable_leader: Callable[[int], bool],
    target_isr: Sequence[int] | None = None,
    target_replicas: Sequence[int] | None = None,
    target_adding: Sequence[int] | None = None,
    target_removing: Sequence[int] | None = None,
    target_leader_recovery_state: int | None = None,
    election: Election = Election.ONLINE,
    bump_leader_epoch: bool = False,
    min_leader_epoch: int = -1,
) -> PartitionChangeRecord | None:
    """The record that moves ``reg`` to the target state, or ``None`` if nothing changes."""
    isr = list(reg.isr) if target_isr is None else list(target_isr)
    reassignment = ReassignmentReplicas(
        tuple(reg.replicas if target_replicas is None else target_replicas),
        tuple(reg.adding_replicas if target_adding is None else target_adding),
        tuple(reg.removing_replicas if target_removing is None else target_removing),
    )
    completed = reassignment.completed(isr)
    if completed is not None:
        reassignment = ReassignmentReplicas(completed[0], (), ())
        isr = list(completed[1])
    replicas = list(reassignment.replicas)
    rec = PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id)

    def valid(r: int) -> bool:
        return r in isr and is_acceptable_leader(r)

    leader, unclean = _elect(reg, replicas, valid, is_acceptable_leader, election)
    if leader != reg.leader:
        rec.leader = leader
        if unclean:
            rec.isr = [leader]
            if reg.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                rec.leader_recovery_state = LeaderRecoveryState.RECOVERING
    elif bump_leader_epoch or min_leader_epoch >= 0 or not set(reg.replicas) <= set(replicas):
        rec.leader = reg.leader
    if min_leader_epoch >= 0:
        rec.min_leader_epoch = min_leader_epoch
    if rec.isr is None and isr and isr != list(reg.isr):
        rec.isr = isr
    if (
        target_leader_recovery_state is not None
        and rec.leader_recovery_state == -1
        and target_leader_recovery_state != reg.leader_recovery_state
    ):
        rec.leader_recovery_state = target_leader_recovery_state
    if replicas and replicas != list(reg.replicas):
        rec.replicas = replicas
    if reassignment.removing != tuple(reg.removing_replicas):
        rec.removing_replicas = list(reassignment.removing)
    if reassignment.adding != tuple(reg.adding_replicas):
        rec.adding_replicas = list(reassignment.adding)
    if (
        rec.isr is None
        and rec.replicas is None
        and rec.removing_replicas is None
        and rec.adding_replicas is None
        and rec.leader == NO_LEADER_CHANGE
        and rec.leader_recovery_state == -1
        and rec.min_leader_epoch == -1
    ):
        return None
    return rec


def _elect(
    reg: PartitionRegistration,
    replicas: Sequence[int],
    valid: Callable[[int], bool],
    acceptable: Callable[[int], bool],
    election: Election,
) -> tuple[int, bool]:
    if election is Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if reg.leader >= 0 and valid(reg.leader):
        return reg.leader, False
    for r in replicas:
        if valid(r):
            return r, False
    if election is Election.UNCLEAN:
        for r in replicas:
            if acceptable(r):
                return r, True
    return NO_LEADER, False
