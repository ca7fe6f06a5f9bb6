"""The interfaces through which the broker reads mirror partition states and numbers.

Which states each operation accepts is the state module's table
(:data:`kcore.mirror.state.ADMISSION`, :func:`~kcore.mirror.state.check_operation`): the broker
that receives Start, Stop, Pause, Resume or Delete reads the state of every target partition
through a :class:`MirrorStateReader` and refuses the whole request with one INVALID_MIRROR_STATE
naming every offending partition (D-26); the controller then re-checks what it can see, the
``mirror.name`` suffixes, atomically.

* :class:`MirrorStateReader`: the ClusterMirrorCoordinator (ReadMirrorStates when it is on
  another broker); :class:`UnknownMirrorStates` answers UNKNOWN for everything, which is what a
  coordinator that never wrote a mirror's state answers.
* :class:`MirrorStatsProvider`: the mirror fetcher's per-partition numbers for
  DescribeClusterMirrors; -1 where unknown (spec M-67).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from kcore.mirror.coordinator import PartitionMirrorState
from kcore.mirror.state import MirrorPartitionState

__all__ = [
    "MirrorPartitionStats",
    "MirrorStateReader",
    "MirrorStatsProvider",
    "UnknownMirrorStates",
    "UnknownMirrorStats",
]

S = MirrorPartitionState
TopicPartition = tuple[str, int]


class MirrorStateReader(Protocol):
    """Reads partition states from the ClusterMirrorCoordinator (ReadMirrorStates when it is on
    another broker). Returns an entry for every partition asked; UNKNOWN where it holds none."""

    async def read_states(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, MirrorPartitionState]: ...

    async def read_full(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionMirrorState]:
        """Everything recorded: state, previous state, retries, FAILED reason, LME."""
        ...


class UnknownMirrorStates:
    """What a coordinator that never wrote this mirror's state answers: UNKNOWN everywhere."""

    async def read_states(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, MirrorPartitionState]:
        return {tp: S.UNKNOWN for tp in partitions}

    async def read_full(
        self, mirror: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionMirrorState]:
        return {tp: PartitionMirrorState() for tp in partitions}


@dataclass(frozen=True, slots=True)
class MirrorPartitionStats:
    """This broker's numbers of one mirror partition for DescribeClusterMirrors (-1: unknown);
    its state, LME, retries and FAILED reason come from the coordinator's record.

    ``source_offset`` is the source leader's high watermark and ``source_lso`` its last stable
    offset (D-19); ``destination_offset`` the local log end offset; ``last_fetch_age_ms`` the
    age of the last successful fetch.
    """

    source_offset: int = -1
    source_lso: int = -1
    destination_offset: int = -1
    last_fetch_age_ms: int = -1

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
