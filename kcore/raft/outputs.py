"""What the Raft core asks its driver to do: the output types of :meth:`RaftCore.poll`.

The driver executes a poll's outputs **in order**. One rule makes the protocol safe:

    A :class:`PersistQuorumState` must be durably written (``QuorumStateFile.write``) before
    any later output of the same list is acted on.

That is what makes a vote binding: the ``VoteResponse`` granting it comes after the persisted
vote, so a crash can never make the node forget it and vote twice in one epoch.

The other outputs:

* :class:`SendRequest` / :class:`SendResponse`: encode and send a message. The driver picks the
  API version (the highest both sides support) and, for requests, later reports the answer with
  ``handle_response(source, request_id, response, now)`` or a failure (no connection, broken
  connection) with ``handle_request_failure(destination, request_id, now)``. Timeouts are the
  core's own business (``controller.quorum.request.timeout.ms``).
* :class:`LeaderChanged`, :class:`HighWatermarkAdvanced`, :class:`SnapshotLoaded`,
  :class:`LogAppended`, :class:`LogTruncated`: events for the state machine (the metadata
  layer). The log was already written through the :class:`~kcore.raft.log.RaftLog`; entries
  below the high watermark are committed and may be applied; after ``SnapshotLoaded`` the state
  machine reloads from that snapshot (the log now starts there).
* :class:`ShutdownComplete`: after ``begin_shutdown``, the node may stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from kcore.protocol.messages import Message
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.state import ElectionState

__all__ = [
    "HighWatermarkAdvanced",
    "LeaderAndEpoch",
    "LeaderChanged",
    "LogAppended",
    "LogTruncated",
    "Output",
    "PersistQuorumState",
    "Poll",
    "SendRequest",
    "SendResponse",
    "ShutdownComplete",
    "SnapshotLoaded",
]


class LeaderAndEpoch(NamedTuple):
    """The leader as this node knows it (``None`` while unknown) and the current epoch."""

    leader_id: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    """Write ``state`` to the ``quorum-state`` file before acting on any later output."""

    state: ElectionState
    voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``message`` to node ``destination``; answer with ``handle_response(..., request_id)``."""

    destination: int
    request_id: int
    message: Message


@dataclass(frozen=True, slots=True)
class SendResponse:
    """Send ``message`` back to ``destination`` as the answer to the request ``token`` named."""

    destination: int
    token: Any
    message: Message


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """The known leader or the epoch changed (a new election, a discovered leader)."""

    leader: LeaderAndEpoch


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Entries below ``high_watermark`` are committed: the state machine may apply them."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class LogAppended:
    """Entries ``[first_offset, end_offset)`` were appended (not committed yet)."""

    first_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class LogTruncated:
    """Uncommitted entries at ``end_offset`` and above were removed (the log diverged)."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotLoaded:
    """A snapshot fetched from the leader replaced the log; reload state from it."""

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class ShutdownComplete:
    """Graceful shutdown is done (a successor leads, or the timeout passed)."""


Output = (
    PersistQuorumState
    | SendRequest
    | SendResponse
    | LeaderChanged
    | HighWatermarkAdvanced
    | LogAppended
    | LogTruncated
    | SnapshotLoaded
    | ShutdownComplete
)


class Poll(NamedTuple):
    """The outputs to execute, in order, and when to call ``poll`` again at the latest."""

    outputs: list[Output]
    deadline: int
