"""The metadata quorum: KRaft's Raft as a pure core, plus its persistence pieces.

Modules, inside out:

* :mod:`~kcore.raft.config`: ``controller.quorum.*`` (static voters, timeouts).
* :mod:`~kcore.raft.state`: the roles and the one table of legal transitions; the persisted
  :class:`ElectionState`.
* :mod:`~kcore.raft.log` / :mod:`~kcore.raft.snapshots`: what the core needs from the log and
  the snapshot store, with memory implementations.
* :mod:`~kcore.raft.records` / :mod:`~kcore.raft.rpc`: log entries as record batches, and the
  KRaft messages for the single ``__cluster_metadata-0`` partition.
* :mod:`~kcore.raft.core`: :class:`RaftCore`, no I/O: the public calls, timers, transitions;
  with :mod:`~kcore.raft.election` (Vote, BeginQuorumEpoch, EndQuorumEpoch),
  :mod:`~kcore.raft.serving` (the leader's Fetch, FetchSnapshot, DescribeQuorum),
  :mod:`~kcore.raft.follower` (fetching, truncating, installing snapshots),
  :mod:`~kcore.raft.leader` (replica progress, high watermark, check-quorum) and
  :mod:`~kcore.raft.requests` (one request in flight per node, timeouts, backoff).
* :mod:`~kcore.raft.outputs`: what the core asks its driver to do.
* :mod:`~kcore.raft.quorum_state`: the ``quorum-state`` file (the only file I/O here).
"""

from kcore.raft.config import RaftConfig, VoterAddress, parse_quorum_voters
from kcore.raft.core import RaftCore
from kcore.raft.errors import NotLeaderError, RaftInvariantError
from kcore.raft.log import LogEntry, MemoryRaftLog, OffsetAndEpoch, RaftLog, RaftRecord
from kcore.raft.outputs import (
    HighWatermarkAdvanced,
    LeaderAndEpoch,
    LeaderChanged,
    LogAppended,
    LogTruncated,
    Output,
    PersistQuorumState,
    Poll,
    SendRequest,
    SendResponse,
    ShutdownComplete,
    SnapshotLoaded,
)
from kcore.raft.quorum_state import QuorumStateError, QuorumStateFile
from kcore.raft.snapshots import MemorySnapshotStore, SnapshotStore, SnapshotWriter
from kcore.raft.state import ElectionState, IllegalTransition, QuorumRole

__all__ = [
    "ElectionState",
    "HighWatermarkAdvanced",
    "IllegalTransition",
    "LeaderAndEpoch",
    "LeaderChanged",
    "LogAppended",
    "LogEntry",
    "LogTruncated",
    "MemoryRaftLog",
    "MemorySnapshotStore",
    "NotLeaderError",
    "OffsetAndEpoch",
    "Output",
    "PersistQuorumState",
    "Poll",
    "QuorumRole",
    "QuorumStateError",
    "QuorumStateFile",
    "RaftConfig",
    "RaftCore",
    "RaftInvariantError",
    "RaftLog",
    "RaftRecord",
    "SendRequest",
    "SendResponse",
    "ShutdownComplete",
    "SnapshotLoaded",
    "SnapshotStore",
    "SnapshotWriter",
    "VoterAddress",
    "parse_quorum_voters",
]
