"""The quorum states of one node and the one table of legal transitions between them.

Theory of operation
-------------------
Every node is, at any moment, in exactly one :class:`QuorumRole` within one *epoch* (Raft's
term). The roles and their names are KRaft's (Kafka's ``QuorumState`` and its ``EpochState``
classes, with KIP-996's pre-vote):

* ``UNATTACHED``: the epoch is known but not its leader, and this node has not voted in it.
* ``VOTED``: as unattached, but this node granted its (binding) vote in the epoch; it may not
  vote for anyone else in that epoch, ever, which is why the vote is persisted first.
* ``PROSPECTIVE``: the election timer fired; the node asks the voters for a *pre-vote*
  (``VoteRequest`` with ``PreVote``) without bumping the epoch. Pre-votes bind nobody, so a
  node cut off from the quorum can fail them forever without disturbing anyone.
* ``CANDIDATE``: a majority granted the pre-vote; the node bumped the epoch by one, voted for
  itself, and asks for real votes.
* ``LEADER``: a majority voted for it; it appends a ``LeaderChangeMessage``, announces itself
  with ``BeginQuorumEpoch`` and serves ``Fetch``.
* ``FOLLOWER``: the leader of the epoch is known; the node pulls the log from it with
  ``Fetch``. Observers (nodes that are not voters) use only ``UNATTACHED`` and ``FOLLOWER``.
* ``RESIGNED``: a leader that gave up (graceful shutdown, or check-quorum failed); it sends
  ``EndQuorumEpoch`` and will not lead or vote again in this epoch. A node that restarts and
  finds itself the persisted leader starts here too: it cannot know what it wrote before the
  crash, so it must not hand out a vote in an epoch it led.

Epochs never go down. A transition either stays in the epoch (``SAME``), moves to a higher one
(``HIGHER``: learnt from a message), allows both (``SAME_OR_HIGHER``), or is the candidate's
bump by exactly one (``NEXT``). :data:`TRANSITIONS` lists every legal (from, to) pair with its
epoch rule and the event that causes it; :func:`check_transition` raises
:class:`IllegalTransition` for everything else, so the core cannot drift into a state the
table does not show. The reasons are documentation and appear in error messages.

A vote given in an epoch higher than the current one is two transitions (to ``UNATTACHED`` in
the new epoch, then to ``VOTED``), exactly as Kafka does it; the core persists only the last.

:class:`ElectionState` is what survives a crash (the ``quorum-state`` file): epoch, leader,
vote. :func:`initial_state` turns it back into a role at start-up.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "EpochRule",
    "ElectionState",
    "IllegalTransition",
    "InitialState",
    "OBSERVER_ROLES",
    "QuorumRole",
    "TRANSITIONS",
    "Transition",
    "check_transition",
    "initial_state",
]


class QuorumRole(enum.Enum):
    UNATTACHED = "unattached"
    VOTED = "voted"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


class EpochRule(enum.Enum):
    SAME = "same epoch"
    HIGHER = "a higher epoch"
    SAME_OR_HIGHER = "the same or a higher epoch"
    NEXT = "the epoch plus one"

    def allows(self, old: int, new: int) -> bool:
        if self is EpochRule.SAME:
            return new == old
        if self is EpochRule.HIGHER:
            return new > old
        if self is EpochRule.SAME_OR_HIGHER:
            return new >= old
        return new == old + 1


class Transition(NamedTuple):
    epoch: EpochRule
    reason: str


class IllegalTransition(RuntimeError):
    """A transition the table does not allow: a bug in the caller, never a peer's fault."""


_R = QuorumRole
_E = EpochRule

# The whole state machine. Keys are (from, to); a pair that is not here is illegal.
TRANSITIONS: dict[tuple[QuorumRole, QuorumRole], Transition] = {
    (_R.UNATTACHED, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.UNATTACHED, _R.VOTED): Transition(_E.SAME, "granted a vote"),
    (_R.UNATTACHED, _R.PROSPECTIVE): Transition(_E.SAME, "election timeout expired"),
    (_R.UNATTACHED, _R.FOLLOWER): Transition(_E.SAME_OR_HIGHER, "discovered the leader"),
    #
    (_R.VOTED, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.VOTED, _R.PROSPECTIVE): Transition(_E.SAME, "election timeout expired"),
    (_R.VOTED, _R.FOLLOWER): Transition(_E.SAME_OR_HIGHER, "discovered the leader"),
    #
    (_R.PROSPECTIVE, _R.UNATTACHED): Transition(
        _E.SAME_OR_HIGHER, "learnt of a higher epoch, or lost the pre-vote with no leader known"
    ),
    (_R.PROSPECTIVE, _R.VOTED): Transition(
        _E.SAME, "granted a vote, or lost the pre-vote having voted in this epoch"
    ),
    (_R.PROSPECTIVE, _R.CANDIDATE): Transition(_E.NEXT, "a majority granted the pre-vote"),
    (_R.PROSPECTIVE, _R.FOLLOWER): Transition(
        _E.SAME_OR_HIGHER, "discovered the leader, or lost the pre-vote and returns to it"
    ),
    #
    (_R.CANDIDATE, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.CANDIDATE, _R.PROSPECTIVE): Transition(
        _E.SAME, "election timed out or was lost; after the backoff, pre-vote again"
    ),
    (_R.CANDIDATE, _R.LEADER): Transition(_E.SAME, "a majority granted the vote"),
    (_R.CANDIDATE, _R.FOLLOWER): Transition(_E.SAME_OR_HIGHER, "another candidate won"),
    #
    (_R.LEADER, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.LEADER, _R.FOLLOWER): Transition(_E.HIGHER, "discovered the leader of a higher epoch"),
    (_R.LEADER, _R.RESIGNED): Transition(
        _E.SAME, "graceful shutdown, or no fetch from a majority within the check-quorum timeout"
    ),
    #
    (_R.FOLLOWER, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.FOLLOWER, _R.PROSPECTIVE): Transition(_E.SAME, "fetch timeout expired (voters only)"),
    (_R.FOLLOWER, _R.FOLLOWER): Transition(_E.HIGHER, "discovered the leader of a higher epoch"),
    #
    (_R.RESIGNED, _R.UNATTACHED): Transition(_E.HIGHER, "learnt of a higher epoch, no leader"),
    (_R.RESIGNED, _R.PROSPECTIVE): Transition(_E.SAME, "election timeout expired"),
    (_R.RESIGNED, _R.FOLLOWER): Transition(_E.HIGHER, "discovered the leader of a higher epoch"),
}

# Observers never vote, campaign or lead (Kafka's QuorumState: "Observers follow a simpler
# state machine").
OBSERVER_ROLES = frozenset({QuorumRole.UNATTACHED, QuorumRole.FOLLOWER})


def check_transition(
    old: QuorumRole, new: QuorumRole, old_epoch: int, new_epoch: int, *, is_voter: bool
) -> Transition:
    """Return the table's row for ``old -> new`` or raise :class:`IllegalTransition`.

    Raises when the pair is not in :data:`TRANSITIONS`, when the epochs break the row's rule,
    or when an observer would enter a voter-only role.
    """
    row = TRANSITIONS.get((old, new))
    if row is None:
        raise IllegalTransition(f"no transition from {old.value} to {new.value}")
    if not row.epoch.allows(old_epoch, new_epoch):
        raise IllegalTransition(
            f"{old.value} -> {new.value} ({row.reason}) needs {row.epoch.value}: "
            f"epoch {old_epoch} -> {new_epoch}"
        )
    if not is_voter and new not in OBSERVER_ROLES:
        raise IllegalTransition(f"an observer cannot become {new.value}")
    return row


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The durable part of the quorum state: Kafka's ``ElectionState`` / ``QuorumStateData``.

    ``leader_id`` and ``voted_id`` are ``None`` when unknown / not given. Both may be set (a
    voter that voted and then learnt who won).
    """

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"negative epoch {self.epoch}")
        for name in ("leader_id", "voted_id"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"negative {name} {value}")


class InitialState(NamedTuple):
    role: QuorumRole
    epoch: int
    leader_id: int | None
    voted_id: int | None


def initial_state(
    stored: ElectionState | None, node_id: int, *, is_voter: bool, log_last_epoch: int
) -> InitialState:
    """The role a node starts in, from its persisted election state and its log.

    Like Kafka's ``QuorumState.initialize``:

    * the log holds a higher epoch than the file, or there is no file (lost, or a node wiped
      of all but its log): unattached in the log's epoch, forgetting leader and vote;
    * nothing stored and an empty log: unattached in epoch 0;
    * this node was the leader: resigned in that epoch (see the module docstring); that
      includes a vote for itself with the log already holding entries of that epoch;
    * this node voted for itself: candidate in that epoch (it will time out into a pre-vote);
    * another leader is known: follower of it (keeping the vote, if any);
    * a vote was given: voted;
    * otherwise unattached.

    Observers ignore votes (they cannot have given any) and never start as candidate/resigned.
    """
    if stored is None:
        stored = ElectionState(0)
    if stored.epoch < log_last_epoch:
        return InitialState(QuorumRole.UNATTACHED, log_last_epoch, None, None)
    epoch, leader, voted = stored.epoch, stored.leader_id, stored.voted_id
    if not is_voter:
        if leader is not None and leader != node_id:
            return InitialState(QuorumRole.FOLLOWER, epoch, leader, None)
        return InitialState(QuorumRole.UNATTACHED, epoch, None, None)
    if leader == node_id:
        return InitialState(QuorumRole.RESIGNED, epoch, node_id, voted)
    if leader is not None:
        return InitialState(QuorumRole.FOLLOWER, epoch, leader, voted)
    if voted == node_id:
        if log_last_epoch == epoch:
            # A candidate's log never holds its own epoch, so this node won the election and
            # appended its LeaderChangeMessage; the file lags because the core writes the log
            # itself while the driver writes the file after the poll. It led: resigned.
            return InitialState(QuorumRole.RESIGNED, epoch, node_id, node_id)
        return InitialState(QuorumRole.CANDIDATE, epoch, None, node_id)
    if voted is not None:
        return InitialState(QuorumRole.VOTED, epoch, None, voted)
    return InitialState(QuorumRole.UNATTACHED, epoch, None, None)
