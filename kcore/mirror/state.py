"""The states of a mirror partition (spec §5.1) and their numeric codes (decision D-05).

This module holds the vocabulary every part of cluster mirroring shares: the coordinator
persists :class:`MirrorPartitionState` codes in ``__mirror_state`` and in ReadMirrorStates /
WriteMirrorStates (an ``int8``, spec M-47), DescribeClusterMirrors reports the names, and the
operations validate against them (D-12, D-26). The transition table lives beside the enum.

Pure: no I/O.
"""

from __future__ import annotations

import enum

__all__ = ["MirrorPartitionState"]


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
