"""The states of a mirror partition, their codes, and the one table of legal transitions.

Theory of operation
-------------------
Every partition of a mirror topic is, on its destination leader, in exactly one
:class:`MirrorPartitionState` (spec §5.1). The numeric values are the codes persisted in
``__mirror_state`` and carried by ReadMirrorStates / WriteMirrorStates (an ``int8``, spec
M-47, decision D-05); DescribeClusterMirrors reports the names. ``UNKNOWN`` (16) is the
absence of state (M-35): nothing was ever recorded for the partition.

What the partition should be doing comes from the topic's ``mirror.name`` config (spec M-04),
read as a :class:`MirrorMode`: ``<m>`` asks for mirroring, ``<m>.paused`` for a pause,
``<m>.stopped`` for a failover. The per-partition machine (:mod:`kcore.mirror.machine`) moves
the state towards that mode, one transition at a time, each persisted before it takes effect
(M-46). :data:`TRANSITIONS` lists every legal (from, to) pair with the spec's row (T1-T14) and
the event that causes it; :func:`check_transition` raises :class:`IllegalTransition` for
everything else, so the machine cannot drift into a state the table does not show.

The shape of the table (spec §5.2, as settled by decisions D-09 to D-16)::

    UNKNOWN ─┐            ┌──────────── EPOCH_FENCING ◄─┐
    STOPPED ─┼► LOG_TRUNCATION ──► MIRRORING ◄──────────┘ (bump done)
    FAILED ──┘     ▲  (T1/T2/D-13)    │  ▲
                   └── restart (D-14) │  └── PAUSED ◄── PAUSING ◄── (pause)
                                      ▼
    any of LOG_TRUNCATION, MIRRORING, EPOCH_FENCING, PAUSING, PAUSED, FAILED, UNKNOWN
        ──► STOPPING ──► STOPPED          (stop, failover always possible: D-12; source
                                           topic deleted: M-19, through STOPPING)
    LOG_TRUNCATION, MIRRORING, EPOCH_FENCING, STOPPING ──► FAILED ──► the previous state
                                          (automatic retry with backoff: D-13)

Two choices the spec leaves open, made here:

* **Source topic deleted (T11) goes through STOPPING.** The partition becomes writable, so it
  must end like any failover: no hanging transaction (the ABORT markers), fresh producer state
  (MIRROR_PID_RESET), an epoch above every mirrored one, and an LME for a later failback.
  Skipping STOPPING would leave a read_committed consumer blocked on a source transaction
  that can never be decided.
* **UNKNOWN -> STOPPING.** A partition stopped before any state was recorded for it (exclude
  pattern enforcement or a source deletion racing the first start) still needs the sequence
  to become writable; on an empty log each step is trivial. The Stop *operation* accepts
  UNKNOWN for the same reason (:data:`ADMISSION`): failover is always possible (D-12).

A pause waits for a running LOG_TRUNCATION or EPOCH_FENCING to finish (there is no
LOG_TRUNCATION -> PAUSING): a resume goes straight to MIRRORING without truncating (M-42),
so a pause must never cut a truncation short.

The operations validate against the same states (decision D-26): :data:`ADMISSION` says, for
Start, Stop, Pause and Resume, which states they accept, which are a successful no-op, and
which they refuse; :func:`check_operation` builds the one top-level INVALID_MIRROR_STATE error
naming every offending topic-partition and its state.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kcore.metadata.mirrors import MirrorMode, parse_mirror_name
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ADMISSION",
    "Admission",
    "IllegalTransition",
    "MirrorMode",
    "MirrorOperation",
    "MirrorPartitionState",
    "TRANSITIONS",
    "Transition",
    "admission",
    "check_operation",
    "check_transition",
    "invalid_state_message",
    "parse_mirror_name",
]


class MirrorPartitionState(enum.IntEnum):
    """A mirror partition's state; the value is the wire and on-disk code (D-05, spec §5.4).

    ``UNKNOWN`` (16) is the absence of state (M-35): a partition the coordinator holds nothing
    for, and the "not recorded" default of ``PreviousState``. No request sets it.
    """

    LOG_TRUNCATION = 0
    MIRRORING = 1
    EPOCH_FENCING = 2
    PAUSING = 3
    PAUSED = 4
    STOPPING = 5
    STOPPED = 6
    FAILED = 7
    UNKNOWN = 16

    @classmethod
    def from_code(cls, code: int) -> MirrorPartitionState:
        """The state of a persisted or wire code; ``ValueError`` for a code no state has."""
        try:
            return cls(code)
        except ValueError:
            raise ValueError(f"{code} is not a mirror partition state code") from None


class Transition(NamedTuple):
    """A row of the table: the spec's row label (``T1``..``T14``, or the decision) and why."""

    row: str
    reason: str


class IllegalTransition(RuntimeError):
    """A transition the table does not allow: a bug in the caller, never the source's fault."""


S = MirrorPartitionState

# The states in which a partition may be told to stop (D-12, plus UNKNOWN: see the docstring).
_STOPPABLE = (S.UNKNOWN, S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING, S.PAUSING, S.PAUSED)
# The states in which work can fail (T12): each talks to the source, the controller or the log.
_FALLIBLE = (S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING, S.STOPPING)

# The whole state machine. Keys are (from, to); a pair that is not here is illegal.
TRANSITIONS: dict[tuple[MirrorPartitionState, MirrorPartitionState], Transition] = {
    (S.UNKNOWN, S.LOG_TRUNCATION): Transition(
        "T1", "mirror.name names the mirror and no state was recorded: the first start"
    ),
    (S.STOPPED, S.LOG_TRUNCATION): Transition(
        "T2", "StartMirrorTopics on a stopped partition: a restart or a failback"
    ),
    (S.FAILED, S.LOG_TRUNCATION): Transition(
        "T13/D-13",
        "StartMirrorTopics on a failed partition (manual recovery), or the automatic retry "
        "of a failure in LOG_TRUNCATION",
    ),
    (S.MIRRORING, S.LOG_TRUNCATION): Transition(
        "D-14", "a new leader or a restarted broker resumes MIRRORING through LOG_TRUNCATION"
    ),
    (S.EPOCH_FENCING, S.LOG_TRUNCATION): Transition(
        "D-14", "a new leader or a restarted broker resumes EPOCH_FENCING through LOG_TRUNCATION"
    ),
    (S.LOG_TRUNCATION, S.MIRRORING): Transition(
        "T3", "the log is truncated to the last mirror epoch and every ISR member has truncated"
    ),
    (S.LOG_TRUNCATION, S.EPOCH_FENCING): Transition(
        "T4/D-11",
        "truncation is done but the source's latest epoch is above the partition's leader epoch",
    ),
    (S.MIRRORING, S.EPOCH_FENCING): Transition(
        "T4/D-11", "a mirrored batch's leader epoch is above the partition's leader epoch"
    ),
    (S.EPOCH_FENCING, S.MIRRORING): Transition(
        "T5", "BumpLeaderEpochs succeeded: the partition's leader epoch covers the source's"
    ),
    (S.MIRRORING, S.PAUSING): Transition("T6", "mirror.name changed to <mirror>.paused"),
    (S.PAUSING, S.PAUSED): Transition("T7", "the partition's fetcher was removed"),
    (S.PAUSED, S.MIRRORING): Transition(
        "T8", "the .paused suffix was removed (resume): fetch on from the log end, no truncation"
    ),
    **{
        (state, S.STOPPING): Transition(
            "T9/T11/D-12",
            "mirror.name changed to <mirror>.stopped (StopMirrorTopics, an exclude pattern) or "
            "the source topic was deleted (M-19)",
        )
        for state in _STOPPABLE
    },
    (S.FAILED, S.STOPPING): Transition(
        "T13/D-12",
        "StopMirrorTopics on a failed partition (failover is always possible), or the "
        "automatic retry of a failure in STOPPING",
    ),
    (S.STOPPING, S.STOPPED): Transition(
        "T10", "the STOPPING sequence finished (D-15): the partition is writable"
    ),
    **{
        (state, S.FAILED): Transition("T12", "an error while mirroring or stopping")
        for state in _FALLIBLE
    },
    (S.FAILED, S.MIRRORING): Transition(
        "T13/D-13", "the automatic retry of a failure in MIRRORING, after the backoff"
    ),
    (S.FAILED, S.EPOCH_FENCING): Transition(
        "T13/D-13", "the automatic retry of a failure in EPOCH_FENCING, after the backoff"
    ),
}

# The states an automatic retry may return to (FAILED -> PreviousState, D-13).
RETRY_TARGETS = frozenset(state for (old, state) in TRANSITIONS if old is S.FAILED) - {S.FAILED}


def check_transition(old: MirrorPartitionState, new: MirrorPartitionState) -> Transition:
    """Return the table's row for ``old -> new``, or raise :class:`IllegalTransition`."""
    row = TRANSITIONS.get((old, new))
    if row is None:
        raise IllegalTransition(f"no mirror partition transition from {old.name} to {new.name}")
    return row


class MirrorOperation(enum.Enum):
    """The operator's per-topic operations that validate partition states (D-26)."""

    START = "start"
    STOP = "stop"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"  # DeleteClusterMirror: every partition of the mirror (D-29)


class Admission(enum.Enum):
    """What an operation does with a partition in a given state."""

    ACCEPT = "accept"  # the operation applies
    NOOP = "no-op"  # already done or under way: success, nothing changes
    REJECT = "reject"  # INVALID_MIRROR_STATE for the whole request


_A = Admission
# Per operation: the states it accepts and the states where it is a successful no-op; every
# other state is refused.
_ACCEPTS: dict[MirrorOperation, tuple[tuple[MirrorPartitionState, ...], ...]] = {
    # M-49 (UNKNOWN, STOPPED) plus FAILED: manual recovery (D-13).
    MirrorOperation.START: ((S.UNKNOWN, S.STOPPED, S.FAILED), ()),
    # D-12: failover is always possible; stopping twice is fine. UNKNOWN too (a partition
    # whose first state is not recorded yet): an operator in a disaster is never told to wait,
    # and UNKNOWN -> STOPPING is in the table for exactly this.
    MirrorOperation.STOP: (
        (S.UNKNOWN, S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING, S.PAUSING, S.PAUSED, S.FAILED),
        (S.STOPPING, S.STOPPED),
    ),
    # M-62: a pause applies to a mirroring partition; pausing twice is fine.
    MirrorOperation.PAUSE: ((S.MIRRORING,), (S.PAUSING, S.PAUSED)),
    # M-63: a paused partition resumes; one still pausing finishes pausing, then resumes
    # . A partition that is mirroring (or truncating or fencing on its way there) is
    # already doing what a resume asks.
    MirrorOperation.RESUME: (
        (S.PAUSING, S.PAUSED),
        (S.LOG_TRUNCATION, S.MIRRORING, S.EPOCH_FENCING),
    ),
    # D-29: a mirror is deleted only once all of it has failed over.
    MirrorOperation.DELETE: ((S.STOPPED,), ()),
}

ADMISSION: dict[MirrorOperation, dict[MirrorPartitionState, Admission]] = {
    op: {
        state: _A.ACCEPT if state in accept else _A.NOOP if state in noop else _A.REJECT
        for state in MirrorPartitionState
    }
    for op, (accept, noop) in _ACCEPTS.items()
}


def admission(operation: MirrorOperation, state: MirrorPartitionState) -> Admission:
    """What ``operation`` does with a partition in ``state`` (see :data:`ADMISSION`)."""
    return ADMISSION[operation][state]


def invalid_state_message(
    operation: MirrorOperation,
    mirror_name: str,
    offenders: Iterable[tuple[str, int, MirrorPartitionState]],
) -> str:
    """The one top-level INVALID_MIRROR_STATE message of D-26.

    Names every offending ``topic-partition`` with its state, sorted, and the states the
    operation accepts, e.g. ``"Cannot stop partitions of mirror 'm': orders-0 is UNKNOWN,
    orders-1 is UNKNOWN (stop accepts LOG_TRUNCATION, ...; STOPPING, STOPPED are no-ops)"``.
    """
    listed = ", ".join(f"{t}-{p} is {s.name}" for t, p, s in sorted(offenders))
    accept, noop = _ACCEPTS[operation]
    accepted = ", ".join(s.name for s in accept)
    tail = f"; {', '.join(s.name for s in noop)} are no-ops" if noop else ""
    return (
        f"Cannot {operation.value} partitions of mirror '{mirror_name}': {listed} "
        f"({operation.value} accepts {accepted}{tail})"
    )


def check_operation(
    operation: MirrorOperation,
    mirror_name: str,
    states: Mapping[tuple[str, int], MirrorPartitionState],
) -> set[tuple[str, int]]:
    """Validate ``operation`` against every target partition's state (D-26).

    Args:
        operation: the operation requested.
        mirror_name: the mirror, for the message.
        states: the state of every target ``(topic, partition)``, as read from the coordinator
            (``UNKNOWN`` for a partition it holds nothing for).

    Returns:
        The partitions on which the operation is a successful no-op.

    Raises:
        KafkaError: INVALID_MIRROR_STATE, naming every refused partition and its state, when
            any partition refuses; then nothing may be changed for any of them.
    """
    offenders = [
        (topic, partition, state)
        for (topic, partition), state in states.items()
        if admission(operation, state) is Admission.REJECT
    ]
    if offenders:
        raise KafkaError(
            ErrorCode.INVALID_MIRROR_STATE,
            invalid_state_message(operation, mirror_name, offenders),
        )
    return {tp for tp, state in states.items() if admission(operation, state) is Admission.NOOP}
