"""The Raft core's exceptions."""

from __future__ import annotations

from kcore.raft.outputs import LeaderAndEpoch

__all__ = ["NotLeaderError", "RaftInvariantError"]


class RaftInvariantError(RuntimeError):
    """A message contradicts Raft's safety invariants (two leaders in one epoch, a truncation
    below the high watermark): a bug here or in a peer. Continuing could lose committed data."""


class NotLeaderError(RuntimeError):
    """``propose`` or ``describe_quorum`` on a node that is not the leader (``leader`` says who
    is, as far as this node knows)."""

    def __init__(self, message: str, leader: LeaderAndEpoch) -> None:
        super().__init__(message)
        self.leader = leader
