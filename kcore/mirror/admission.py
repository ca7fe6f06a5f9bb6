"""Which partition states each mirror operation accepts, and the interfaces the broker reads
partition states and numbers through.

The rule (decisions D-12, D-13, D-26, D-29; spec M-49, M-52, M-62, M-63, M-64)
-----------------------------------------------------------------------------------------------
The broker that receives Start, Stop, Pause, Resume or Delete reads the state of every target
partition from the ClusterMirrorCoordinator and refuses the whole request — one top-level
INVALID_MIRROR_STATE whose message names every offending partition and its state (D-26) —
unless each is accepted:

==========  =====================================================================================
Start       UNKNOWN (never mirrored), STOPPED (restart), FAILED (manual recovery, D-13)
Stop        every state (D-12: failover is always possible; STOPPING and STOPPED are no-ops)
Pause       MIRRORING (M-62)
Resume      PAUSED (M-63)
Delete      STOPPED (D-29)
==========  =====================================================================================

The controller then re-checks what it can see, the ``mirror.name`` suffixes, atomically. This
table is :data:`ACCEPTED_STATES`; the transition table of the state machine lives in
:mod:`kcore.mirror.state` and the two are meant to be folded together.

Interfaces: :class:`MirrorStateReader` (the coordinator implements it; until it is wired, the
broker's :class:`UnknownMirrorStates` answers UNKNOWN for everything, which is what a coordinator
that never wrote a mirror's state answers) and :class:`MirrorStatsProvider` (the mirror fetcher's
per-partition numbers for DescribeClusterMirrors; -1 where unknown, spec M-67).

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kcore.mirror.state import MirrorPartitionState
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ACCEPTED_STATES",
    "MirrorOperation",
    "MirrorPartitionStats",
    "MirrorStateReader",
    "MirrorStatsProvider",
    "UnknownMirrorStates",
    "UnknownMirrorStats",
    "check_admission",
]

S = MirrorPartitionState
TopicPartition = tuple[str, int]


class MirrorOperation(enum.Enum):
    START = "start"
    STOP = "stop"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"


ACCEPTED_STATES: dict[MirrorOperation, frozenset[MirrorPartitionState]] = {
    MirrorOperation.START: frozenset({S.UNKNOWN, S.STOPPED, S.FAILED}),
    MirrorOperation.STOP: frozenset(S),
    MirrorOperation.PAUSE: frozenset({S.MIRRORING}),
    MirrorOperation.RESUME: frozenset({S.PAUSED}),
    MirrorOperation.DELETE: frozenset({S.STOPPED}),
}


def check_admission(
    operation: MirrorOperation,
    mirror: str,
    states: Mapping[TopicPartition, MirrorPartitionState],
) -> None:
    """Raise INVALID_MIRROR_STATE naming every partition of ``states`` that ``operation``
    does not accept (sorted by topic and partition), or return."""
    accepted = ACCEPTED_STATES[operation]
    refused = sorted((tp, s) for tp, s in states.items() if s not in accepted)
    if not refused:
        return
    listed = ", ".join(f"{t}-{p} is {s.name}" for (t, p), s in refused)
    wanted = " or ".join(sorted(s.name for s in accepted))
    raise KafkaError(
        ErrorCode.INVALID_MIRROR_STATE,
        f"Cannot {operation.value} in mirror '{mirror}': {listed} (needs {wanted}).",
    )


class MirrorStateReader(Protocol):
    """Reads partition states from the ClusterMirrorCoordinator (ReadMirrorStates when it is on
    another broker). Returns a state for every partition asked; UNKNOWN where it holds none."""

    async def read_states(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, MirrorPartitionState]: ...


class UnknownMirrorStates:
    """The broker's reader until the coordinator is wired: what a coordinator that never wrote
    this mirror's state answers — UNKNOWN for every partition."""

    async def read_states(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, MirrorPartitionState]:
        return {tp: S.UNKNOWN for tp in partitions}


@dataclass(frozen=True, slots=True)
class MirrorPartitionStats:
    """What DescribeClusterMirrors reports for one partition besides its state (-1: unknown).

    ``source_offset`` is the source leader's high watermark and ``source_lso`` its last stable
    offset (D-19); ``destination_offset`` the local log end offset; ``last_fetch_age_ms`` the
    age of the last successful fetch; ``retry_count`` the FAILED retries (D-13) and
    ``failed_reason`` why it failed.
    """

    source_offset: int = -1
    source_lso: int = -1
    destination_offset: int = -1
    last_fetch_age_ms: int = -1
    retry_count: int = -1
    failed_reason: str | None = None
    last_mirror_epoch: int = -1

    @property
    def lag(self) -> int:
        """Source offset minus destination offset, or -1 if either is unknown (M-67)."""
        if self.source_offset < 0 or self.destination_offset < 0:
            return -1
        return max(0, self.source_offset - self.destination_offset)


class MirrorStatsProvider(Protocol):
    """The mirror fetcher's numbers for one partition of a mirror."""

    def partition_stats(self, mirror: str, topic: str, partition: int) -> MirrorPartitionStats: ...


class UnknownMirrorStats:
    """Every number unknown (-1)."""

    def partition_stats(self, mirror: str, topic: str, partition: int) -> MirrorPartitionStats:
        return MirrorPartitionStats()
