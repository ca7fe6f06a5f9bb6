"""The replica sets of a partition reassignment: Kafka's ``PartitionReassignmentReplicas`` and
``PartitionReassignmentRevert``. Pure arithmetic on broker ids, no image.

A reassignment from ``current`` to ``target`` runs in two records:

1. *start*: ``replicas = target + removing`` (the target's order first, so that its first
   replica is the preferred one, then the replicas leaving, in id order), ``adding = target −
   current`` and ``removing = current − target`` (both in id order). The adding replicas
   become followers and copy the log;
2. *complete*, once every replica that stays (the target) is in the ISR: ``replicas = target``,
   ``ISR = ISR − removing``, adding and removing emptied. Any change to the partition checks
   for it (an AlterPartition from the leader, mostly), as Kafka's ``PartitionChangeBuilder``
   does; a reassignment that only removes or reorders replicas completes in its first record.

A cancellation reverts to the original replicas (``replicas − adding``) and an ISR without the
adding replicas; when only adding replicas were in the ISR, the first original replica becomes
the ISR, which is an unclean election (the caller refuses it unless
``unclean.leader.election.enable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ReassignmentReplicas", "Revert", "revert"]


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @classmethod
    def start(cls, current: Sequence[int], target: Sequence[int]) -> ReassignmentReplicas:
        """The replica sets while moving from ``current`` to ``target`` (step 1 above)."""
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls(tuple(target) + removing, adding, removing)

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def completed(self, isr: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """``(replicas, isr)`` once the reassignment can complete with ``isr`` (step 2), else
        ``None`` (nothing in progress, or a staying replica not in sync yet)."""
        if not self.in_progress:
            return None
        replicas = tuple(r for r in self.replicas if r not in self.removing)
        new_isr = tuple(r for r in isr if r not in self.removing)
        if not replicas or not new_isr or not set(replicas) <= set(new_isr):
            return None
        return replicas, new_isr


@dataclass(frozen=True, slots=True)
class Revert:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool


def revert(ongoing: ReassignmentReplicas, isr: Sequence[int]) -> Revert:
    """What cancelling ``ongoing`` leaves (see the module docstring). Raises ``ValueError`` if
    every replica is an adding one (no registration the controller writes can be so)."""
    replicas = ongoing.original_replicas
    kept = tuple(r for r in isr if r not in ongoing.adding)
    if kept:
        return Revert(replicas, kept, False)
    if not replicas:
        raise ValueError("Invalid replica assignment: addingReplicas contains all replicas.")
    return Revert(replicas, (replicas[0],), True)
