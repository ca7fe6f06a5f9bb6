"""What the mirror partition machine is told: the event types of :meth:`handle`.

Each event is a fact the Trio shell learnt (from the metadata image, the coordinator, the
source cluster, the controller, the local log) or the answer to one of the machine's outputs.
Answers name the output's ``op`` (see :mod:`kcore.mirror.outputs`); an answer whose op the
machine no longer waits for (it timed out, the state moved on, leadership was lost) is
ignored, so the shell never has to cancel anything.

Facts about the partition:

* :class:`BecameLeader` / :class:`StoppedBeingLeader` / :class:`LeaderEpochChanged`: from the
  metadata image. Only a leader mirrors; the leader epoch is the controller's, which
  EPOCH_FENCING and STOPPING bump.
* :class:`MirrorNameChanged`: the topic's ``mirror.name`` config changed (the operator's
  Start, Pause, Resume, Stop arrive this way, spec M-04).
* :class:`RecoveryRequested`: StartMirrorTopics or StopMirrorTopics was accepted for a FAILED
  partition whose ``mirror.name`` did not change (manual recovery, D-13): the config carries
  no news, so the operation must reach the leader's machine this way.
* :class:`SourceTopicDeleted`: the metadata sync saw the source topic disappear (M-19).
* :class:`MirroredEpochAhead`: the fetcher holds a batch whose partition leader epoch is
  above the partition's leader epoch and did not append it (D-11).
* :class:`SourceFailed`: fetching from the source gave up: unreachable, cluster id mismatch
  (D-24), fetch offset above the source's log end with no divergence (D-16), ...

Answers: :class:`StateLoaded`, :class:`LastMirrorEpochFetched`, :class:`OpCompleted`,
:class:`OpFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcore.mirror.state import MirrorPartitionState
from kcore.protocol.errors import ErrorCode

__all__ = [
    "BecameLeader",
    "Event",
    "LastMirrorEpochFetched",
    "LeaderEpochChanged",
    "MirrorNameChanged",
    "MirroredEpochAhead",
    "OpCompleted",
    "OpFailed",
    "PersistedState",
    "RecoveryRequested",
    "SourceFailed",
    "SourceTopicDeleted",
    "StateLoaded",
    "StoppedBeingLeader",
]


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What the coordinator keeps for one mirror partition (``__mirror_state``, spec §8.3).

    Attributes:
        state: the state this record moved the partition to.
        previous_state: the state before it (``UNKNOWN`` when not recorded); for ``FAILED``,
            the state an automatic retry returns to (D-13).
        retry_attempt: automatic retries made since the partition last made progress (D-13).
        last_mirror_epoch: the partition's LME (a ``LastMirrorEpochs`` entry, M-56), ``-1``
            when none is recorded. A STOPPING that starts writes ``-1``: from then on a
            recorded LME is that stop's own, which is how a resumed STOPPING knows it must not
            compute it again (by then its own markers may be in the log). The coordinator must
            store the value as given, ``-1`` included.
        reason: why the partition failed (D-13: kept and shown by Describe), kept through the
            automatic retries until the partition makes progress; ``None`` otherwise.
    """

    state: MirrorPartitionState
    previous_state: MirrorPartitionState = MirrorPartitionState.UNKNOWN
    retry_attempt: int = 0
    last_mirror_epoch: int = -1
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class BecameLeader:
    """This broker now leads the partition, at ``leader_epoch``."""

    leader_epoch: int


@dataclass(frozen=True, slots=True)
class StoppedBeingLeader:
    """This broker no longer leads the partition (another leads, or it is shutting down)."""


@dataclass(frozen=True, slots=True)
class LeaderEpochChanged:
    """The metadata image holds a new leader epoch for the partition (this broker leads)."""

    leader_epoch: int


@dataclass(frozen=True, slots=True)
class MirrorNameChanged:
    """The topic's ``mirror.name`` is now ``value`` (``None``: removed)."""

    value: str | None


@dataclass(frozen=True, slots=True)
class RecoveryRequested:
    """The operator's Start or Stop for a FAILED partition whose ``mirror.name`` stayed the
    same: retry at once with the count reset (a Start truncates afresh, a Stop stops)."""


@dataclass(frozen=True, slots=True)
class SourceTopicDeleted:
    """The source topic is gone (M-19): the partition stops, through STOPPING."""


@dataclass(frozen=True, slots=True)
class MirroredEpochAhead:
    """A fetched batch carries ``batch_leader_epoch`` > the partition's leader epoch (D-11).

    The fetcher must not have appended it (:meth:`MirrorPartitionMachine.may_append`).
    """

    batch_leader_epoch: int


@dataclass(frozen=True, slots=True)
class SourceFailed:
    """Fetching from the source failed for good this round; the partition moves to FAILED."""

    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class StateLoaded:
    """The answer to :class:`~kcore.mirror.outputs.ReadState`; ``stored`` None: nothing kept."""

    op: int
    stored: PersistedState | None


@dataclass(frozen=True, slots=True)
class LastMirrorEpochFetched:
    """The answer to :class:`~kcore.mirror.outputs.FetchLastMirrorEpoch`.

    Attributes:
        last_mirror_epoch: the LME the source recorded for this partition under the mirror's
            name, ``-1`` when it has none (first mirroring, no LME tracking: M-37).
        source_log_start_offset: the source partition's log start offset: with no LME the
            destination restarts its log there, so offsets stay the source's (D-16).
        source_leader_epoch: the source partition's latest leader epoch, ``-1`` if unknown;
            above the destination's leader epoch, it sends the partition to EPOCH_FENCING
            before any fetch (D-11).
    """

    op: int
    last_mirror_epoch: int
    source_log_start_offset: int
    source_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OpCompleted:
    """The output ``op`` is done (for the epoch bump: the controller accepted it)."""

    op: int


@dataclass(frozen=True, slots=True)
class OpFailed:
    """The output ``op`` failed with ``error`` (a timeout is the machine's own business)."""

    op: int
    error: ErrorCode
    message: str = ""


Event = (
    BecameLeader
    | StoppedBeingLeader
    | LeaderEpochChanged
    | MirrorNameChanged
    | RecoveryRequested
    | SourceTopicDeleted
    | MirroredEpochAhead
    | SourceFailed
    | StateLoaded
    | LastMirrorEpochFetched
    | OpCompleted
    | OpFailed
)
