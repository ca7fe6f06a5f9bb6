"""What the mirror partition machine asks its shell to do: the output types of ``poll``.

The shell executes a poll's outputs **in order**. Outputs with an ``op`` are answered later
with an event naming that op (:class:`~kcore.mirror.events.OpCompleted` /
:class:`~kcore.mirror.events.OpFailed`, or the typed answers :class:`StateLoaded` and
:class:`LastMirrorEpochFetched`); the machine times each op out itself after
``request_timeout_ms`` and then ignores a late answer. Outputs without one are done at once.

One rule makes the machine safe (spec M-46):

    A state takes effect only after its :class:`PersistState` is acknowledged. The machine
    emits the persist, waits for :class:`OpCompleted`, and only then emits what the new state
    does (add a fetcher, bump the epoch, make the partition writable, ...).

So whatever the shell and the coordinator lose or delay, a restarted leader that reads the
persisted state resumes from a state whose effects had not yet begun, or had begun and are
safe to repeat. At most one write (:class:`PersistState` or :class:`PersistLastMirrorEpoch`)
is outstanding at any time, so writes reach the coordinator in the order they were made.

The outputs, in the order a partition usually meets them:

* :class:`SetWriteAccess`: the write guard of the partition (D-18): ``READ_ONLY`` refuses
  local writes with TOPIC_IS_MIRROR, ``LOADING`` with a retriable error while the state is
  not known yet, ``WRITABLE`` lets them in (only once STOPPED is persisted). The mirror's own
  appends (fetched batches, ABORT markers, MIRROR_PID_RESET) always pass.
* :class:`ReadState`: ask the coordinator for the partition's persisted state.
* :class:`PersistState` / :class:`PersistLastMirrorEpoch`: write to ``__mirror_state``.
* :class:`FetchLastMirrorEpoch`: ask the source for the LME and its log start (M-37).
* :class:`TruncateTo` / :class:`TruncateFullyAndStartAt`: truncate the local log; complete
  when the leader has and every ISR member has too (M-38).
* :class:`AddFetcher` / :class:`RemoveFetcher`: start / stop fetching from the source.
* :class:`RequestEpochBump`: BumpLeaderEpochs to the controller (D-10); complete when the
  controller accepted it. The machine then waits for the new epoch in its metadata.
* :class:`AppendAbortMarkers` / :class:`AppendMirrorPidReset`: the STOPPING appends (D-15).
* :class:`Transitioned`: the partition entered a state (its persist was acknowledged): for
  logs, metrics and Describe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from kcore.mirror.events import PersistedState
from kcore.mirror.state import MirrorPartitionState

__all__ = [
    "AddFetcher",
    "AppendAbortMarkers",
    "AppendMirrorPidReset",
    "FetchLastMirrorEpoch",
    "Output",
    "PersistLastMirrorEpoch",
    "PersistState",
    "Poll",
    "ReadState",
    "RemoveFetcher",
    "RequestEpochBump",
    "SetWriteAccess",
    "Transitioned",
    "TruncateFullyAndStartAt",
    "TruncateTo",
    "WriteAccess",
]


class WriteAccess(enum.Enum):
    """Whether local clients may write to the partition (D-18, spec M-05)."""

    READ_ONLY = "read-only"  # TOPIC_IS_MIRROR, naming the mirror
    LOADING = "loading"  # the state is being read: a retriable error
    WRITABLE = "writable"


@dataclass(frozen=True, slots=True)
class SetWriteAccess:
    """Set the partition's write guard; executed at once, before any later output."""

    access: WriteAccess


@dataclass(frozen=True, slots=True)
class ReadState:
    """Read the persisted state (ReadMirrorStates); answer with ``StateLoaded(op, ...)``."""

    op: int


@dataclass(frozen=True, slots=True)
class PersistState:
    """Write ``record`` for the partition to ``__mirror_state`` (WriteMirrorStates)."""

    op: int
    record: PersistedState


@dataclass(frozen=True, slots=True)
class PersistLastMirrorEpoch:
    """Write the partition's LME (a ``LastMirrorEpochs`` entry, M-56): STOPPING's step 2."""

    op: int
    last_mirror_epoch: int


@dataclass(frozen=True, slots=True)
class FetchLastMirrorEpoch:
    """Ask the source (DescribeClusterMirrors, ListOffsets): ``LastMirrorEpochFetched``."""

    op: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Truncate the log to ``offset`` (a no-op when it ends there); wait for the ISR."""

    op: int
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """Empty the log and restart it at ``offset`` (the source's log start); wait for the ISR."""

    op: int
    offset: int


@dataclass(frozen=True, slots=True)
class AddFetcher:
    """Start fetching from the source at ``fetch_offset`` (the local log end offset)."""

    fetch_offset: int


@dataclass(frozen=True, slots=True)
class RemoveFetcher:
    """Stop fetching; complete once no fetched batch can be appended any more."""

    op: int


@dataclass(frozen=True, slots=True)
class RequestEpochBump:
    """BumpLeaderEpochs: the new epoch is ``max(current + 1, min_leader_epoch)`` (D-10)."""

    op: int
    min_leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendAbortMarkers:
    """Append an ABORT marker at ``leader_epoch`` for every ongoing transaction (M-58)."""

    op: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendMirrorPidReset:
    """Append the MIRROR_PID_RESET control record at ``leader_epoch`` (M-59)."""

    op: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Transitioned:
    """The partition entered ``new`` from ``old`` (``row`` / ``reason`` from the table)."""

    old: MirrorPartitionState
    new: MirrorPartitionState
    row: str
    reason: str


Output = (
    SetWriteAccess
    | ReadState
    | PersistState
    | PersistLastMirrorEpoch
    | FetchLastMirrorEpoch
    | TruncateTo
    | TruncateFullyAndStartAt
    | AddFetcher
    | RemoveFetcher
    | RequestEpochBump
    | AppendAbortMarkers
    | AppendMirrorPidReset
    | Transitioned
)


class Poll(NamedTuple):
    """The outputs to execute, in order, and when to call ``poll`` again at the latest
    (``None``: only when an event arrives)."""

    outputs: list[Output]
    deadline: int | None
