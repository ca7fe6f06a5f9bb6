"""The fetcher framework's pure core: per-partition fetch state, Fetch requests, and outputs.

Theory of operation
-------------------
Kafka copies a partition from a leader with an ``AbstractFetcherThread``: follower replication
(``ReplicaFetcherThread``) and cluster mirroring (KIP-1279's ``MirrorFetcherThread``) are two
subclasses of it. This module is that thread's logic without the thread: a
:class:`FetcherCore` holds, for every partition it copies from one leader, a
:class:`PartitionFetchState`:

* ``fetch_offset`` — the next offset to fetch (the local log end offset);
* ``current_leader_epoch`` — the leader epoch the fetcher believes the leader has (sent as
  ``CurrentLeaderEpoch``, so a stale view is fenced rather than served);
* ``last_fetched_epoch`` — the leader epoch of the last batch appended locally (sent as
  ``LastFetchedEpoch``, Fetch v12+, KIP-595: the leader answers with a *diverging epoch* when
  its history does not contain it at that offset);
* ``status`` — one of the states below, and for DELAYED the time it may fetch again.

States (``FetchStatus``) and what moves them::

    FETCHING   --response with records------>  PENDING     (the shell appends, then appended())
    FETCHING   --diverging epoch------------->  TRUNCATING  (the shell truncates, truncated())
    FETCHING   --OFFSET_OUT_OF_RANGE--------->  TRUNCATING  (the shell asks the leader's log
                                                             start / end: restart_at() or fail)
    FETCHING   --any other partition error--->  DELAYED     (backoff doubles, capped)
    PENDING    --appended(next, epoch)------->  FETCHING
    TRUNCATING --truncated(offset, epoch)---->  FETCHING
    TRUNCATING --restart_at(offset)---------->  FETCHING    (an empty log at the new offset)
    any        --delay(until)---------------->  DELAYED     (the shell's own failures)
    DELAYED    --now >= until---------------->  FETCHING

A partition in PENDING or TRUNCATING is never in a request: its fetch offset is about to move.
A response is applied to a partition only if it answers the request that partition was in at
its current fetch offset and epoch (Kafka's check in ``processFetchRequest``): a partition
removed and re-added, truncated or moved to a new epoch meanwhile ignores a stale answer.

Pure: no I/O, time passed in (``now`` in seconds, any monotonic clock). The Trio shell
(:mod:`kcore.replica.fetcher`) sends the requests through a ``LeaderEndpoint``, turns each
output into local log operations, and reports back with the methods above.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from kcore.protocol.errors import ErrorCode

__all__ = [
    "AppendRecords",
    "FetchPartitionRequest",
    "FetchPlan",
    "FetchStatus",
    "FetcherConfig",
    "FetcherCore",
    "HandleOutOfRange",
    "PartitionError",
    "PartitionFetchState",
    "PartitionResponse",
    "TruncateOnDivergence",
]

TopicPartition = tuple[str, int]

#: Partition errors that mean "the leader is elsewhere or at another epoch": the shell
#: refreshes the leader's metadata and moves the partition to the right fetcher.
LEADER_CHANGE_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


class FetchStatus(enum.Enum):
    FETCHING = "fetching"
    PENDING = "pending"  # records handed to the shell, not yet appended
    TRUNCATING = "truncating"  # divergence or out of range, being resolved by the shell
    DELAYED = "delayed"  # after an error, until delayed_until


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """How one fetcher fetches (Kafka's ``replica.fetch.*``; the mirror's own settings).

    ``use_last_fetched_epoch`` is False for a leader without Fetch v12 (the mirror's M-28):
    no ``LastFetchedEpoch`` is sent, so no divergence is ever reported.
    """

    max_bytes: int = 52_428_800
    partition_max_bytes: int = 10_485_760
    min_bytes: int = 1
    max_wait_ms: int = 500
    isolation_level: int = 0  # 1: READ_COMMITTED (the mirror, D-19)
    use_last_fetched_epoch: bool = True
    backoff_s: float = 0.1
    backoff_max_s: float = 5.0


@dataclass(slots=True)
class PartitionFetchState:
    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int | None = None  # None: nothing fetched at a known epoch yet
    status: FetchStatus = FetchStatus.FETCHING
    delayed_until: float = 0.0
    failures: int = 0  # consecutive errors (the backoff doubles with each)
    last_error: ErrorCode | None = None
    # Bumped on every change of fetch offset or epoch: a response is matched against it.
    version: int = 0
    # The request last built for this state (at ``version``): handed out again while nothing
    # changed, so a fetch session tells unchanged partitions apart by identity and a fetch of
    # 10,000 partitions allocates no new request objects for idle ones.
    request: FetchPartitionRequest | None = None
    request_version: int = -1


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int  # -1: not sent
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One Fetch request to build (the endpoint encodes it) and what it was built from."""

    partitions: tuple[FetchPartitionRequest, ...]
    max_bytes: int
    min_bytes: int
    max_wait_ms: int
    isolation_level: int
    # (topic, partition) -> the state version at build time.
    versions: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionResponse:
    """One partition of a Fetch response, in the endpoint-neutral shape the core reads."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: memoryview | bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), if told
    error_message: str | None = None


# -- outputs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Append these batches locally, then call :meth:`FetcherCore.appended`."""

    tp: TopicPartition
    fetch_offset: int
    records: memoryview | bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class TruncateOnDivergence:
    """The leader's history has ``epoch`` ending at ``end_offset`` where ours diverges:
    truncate (to at most that offset, Kafka truncates to the smaller of it and the local end
    offset of that epoch), then call :meth:`FetcherCore.truncated`."""

    tp: TopicPartition
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class HandleOutOfRange:
    """The leader refused ``fetch_offset`` as out of range: ask it for its log start and end
    offsets and either :meth:`FetcherCore.restart_at` / :meth:`FetcherCore.truncated`, or fail
    the partition (policy is the fetcher kind's: D-16 for the mirror)."""

    tp: TopicPartition
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class PartitionError:
    """The partition answered an error; it is DELAYED until ``retry_at``. ``leader_change``:
    refresh the leader's metadata (the partition may belong to another fetcher now)."""

    tp: TopicPartition
    error_code: int
    message: str | None
    leader_change: bool
    retry_at: float
    current_leader: tuple[int, int] | None = None


Output = AppendRecords | TruncateOnDivergence | HandleOutOfRange | PartitionError


class FetcherCore:
    """The fetch states of the partitions one fetcher copies from one leader (see the module
    docstring). Not thread-safe; one shell task drives it."""

    def __init__(self, config: FetcherConfig | None = None) -> None:
        self.config = config or FetcherConfig()
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        # The last version of each removed partition (see add_partition). Bounded by the
        # partitions this fetcher ever had, as Kafka's fetcher threads are.
        self._retired: dict[TopicPartition, int] = {}

    # -- membership ----------------------------------------------------------------------

    def add_partition(
        self,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        fetch_offset: int,
        current_leader_epoch: int,
        last_fetched_epoch: int | None,
    ) -> None:
        """Start (or restart) fetching ``tp`` at ``fetch_offset``."""
        old = self.partitions.get(tp)
        # Above every version the partition had, here or before a removal: the answer to a
        # fetch made for an earlier state must never pass for this one's.
        version = max(-1 if old is None else old.version, self._retired.pop(tp, -1)) + 1
        self.partitions[tp] = PartitionFetchState(
            topic_id, fetch_offset, current_leader_epoch, last_fetched_epoch, version=version
        )

    def remove_partition(self, tp: TopicPartition) -> PartitionFetchState | None:
        state = self.partitions.pop(tp, None)
        if state is not None:
            self._retired[tp] = state.version
        return state

    # -- requests ------------------------------------------------------------------------

    def next_wakeup(self, now: float) -> float | None:
        """When a DELAYED partition may fetch again (None: none is delayed); ``now`` if a
        fetch can be built at once."""
        soonest = None
        for state in self.partitions.values():
            if state.status is FetchStatus.FETCHING:
                return now
            if state.status is FetchStatus.DELAYED:
                if state.delayed_until <= now:
                    return now
                if soonest is None or state.delayed_until < soonest:
                    soonest = state.delayed_until
        return soonest

    def build_fetch(self, now: float) -> FetchPlan | None:
        """The Fetch of every partition that may fetch now (None if there is none). DELAYED
        partitions whose delay passed become FETCHING."""
        cfg = self.config
        parts = []
        versions = {}
        for tp, state in self.partitions.items():
            if state.status is FetchStatus.DELAYED and state.delayed_until <= now:
                state.status = FetchStatus.FETCHING
            if state.status is not FetchStatus.FETCHING:
                continue
            request = state.request
            if request is None or state.request_version != state.version:
                last = state.last_fetched_epoch
                request = state.request = FetchPartitionRequest(
                    tp[0],
                    tp[1],
                    state.topic_id,
                    state.fetch_offset,
                    state.current_leader_epoch,
                    last if cfg.use_last_fetched_epoch and last is not None else -1,
                    cfg.partition_max_bytes,
                )
                state.request_version = state.version
            parts.append(request)
            versions[tp] = state.version
        if not parts:
            return None
        return FetchPlan(
            tuple(parts),
            cfg.max_bytes,
            cfg.min_bytes,
            cfg.max_wait_ms,
            cfg.isolation_level,
            versions,
        )

    # -- responses -----------------------------------------------------------------------

    def handle_response(
        self, plan: FetchPlan, responses: dict[TopicPartition, PartitionResponse], now: float
    ) -> list[Output]:
        """Outputs for the partitions of ``plan`` that ``responses`` answers. A partition
        answered with no records and no error stays FETCHING (nothing new yet)."""
        outputs: list[Output] = []
        for req in plan.partitions:
            tp = (req.topic, req.partition)
            resp = responses.get(tp)
            state = self.partitions.get(tp)
            if resp is None or state is None or state.version != plan.versions.get(tp):
                continue  # not answered, removed, or changed since the request: stale
            if state.status is not FetchStatus.FETCHING:
                continue
            code = resp.error_code
            if code == ErrorCode.NONE:
                state.failures = 0
                state.last_error = None
                if resp.diverging_epoch is not None and resp.diverging_epoch[0] >= 0:
                    state.status = FetchStatus.TRUNCATING
                    epoch, end = resp.diverging_epoch
                    outputs.append(TruncateOnDivergence(tp, epoch, end))
                elif len(resp.records):
                    state.status = FetchStatus.PENDING
                    outputs.append(
                        AppendRecords(
                            tp,
                            state.fetch_offset,
                            resp.records,
                            resp.high_watermark,
                            resp.last_stable_offset,
                            resp.log_start_offset,
                        )
                    )
            elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                state.status = FetchStatus.TRUNCATING
                outputs.append(HandleOutOfRange(tp, state.fetch_offset))
            else:
                retry_at = self._delay(state, now, ErrorCode(code) if _known(code) else None)
                outputs.append(
                    PartitionError(
                        tp,
                        code,
                        resp.error_message,
                        code in LEADER_CHANGE_ERRORS,
                        retry_at,
                        resp.current_leader,
                    )
                )
        return outputs

    # -- the shell reports back --------------------------------------------------------------

    def appended(self, tp: TopicPartition, next_offset: int, last_epoch: int | None) -> None:
        """The records of an :class:`AppendRecords` (or part of them) are in the local log:
        fetch from ``next_offset`` on, ``last_epoch`` being the last appended batch's epoch."""
        state = self.partitions.get(tp)
        if state is None:
            return
        if next_offset < state.fetch_offset:
            raise ValueError(
                f"{tp}: an append cannot move the fetch offset back "
                f"({state.fetch_offset} -> {next_offset}); truncate instead"
            )
        self._move(
            state, next_offset, state.last_fetched_epoch if last_epoch is None else last_epoch
        )

    def truncated(self, tp: TopicPartition, offset: int, last_epoch: int | None) -> None:
        """The local log was truncated to ``offset`` (its latest epoch now ``last_epoch``)."""
        state = self.partitions.get(tp)
        if state is not None:
            self._move(state, offset, last_epoch)

    def restart_at(self, tp: TopicPartition, offset: int) -> None:
        """The local log was emptied and restarted at ``offset`` (no epoch known)."""
        state = self.partitions.get(tp)
        if state is not None:
            self._move(state, offset, None)

    def update_leader_epoch(self, tp: TopicPartition, leader_epoch: int) -> None:
        """The leader is known at a new epoch (after a metadata refresh)."""
        state = self.partitions.get(tp)
        if state is not None and state.current_leader_epoch != leader_epoch:
            state.current_leader_epoch = leader_epoch
            state.version += 1

    def delay(self, tp: TopicPartition, now: float, error: ErrorCode | None = None) -> float:
        """Back the partition off (the shell's own failure, e.g. a local append error);
        returns when it may fetch again."""
        state = self.partitions.get(tp)
        if state is None:
            return now
        return self._delay(state, now, error)

    def hold(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp`` until :meth:`resume` (the mirror's epoch fencing, D-11)."""
        state = self.partitions.get(tp)
        if state is not None:
            state.status = FetchStatus.TRUNCATING
            state.version += 1

    def resume(self, tp: TopicPartition) -> None:
        state = self.partitions.get(tp)
        if state is not None and state.status is not FetchStatus.FETCHING:
            state.status = FetchStatus.FETCHING
            state.version += 1

    # -- internals -----------------------------------------------------------------------

    def _move(self, state: PartitionFetchState, offset: int, epoch: int | None) -> None:
        state.fetch_offset = offset
        state.last_fetched_epoch = epoch
        state.status = FetchStatus.FETCHING
        state.version += 1

    def _delay(self, state: PartitionFetchState, now: float, error: ErrorCode | None) -> float:
        cfg = self.config
        state.failures += 1
        backoff = min(cfg.backoff_s * 2 ** (state.failures - 1), cfg.backoff_max_s)
        state.status = FetchStatus.DELAYED
        state.delayed_until = now + backoff
        state.last_error = error
        state.version += 1
        return state.delayed_until


def _known(code: int) -> bool:
    try:
        ErrorCode(code)
    except ValueError:
        return False
    return True
