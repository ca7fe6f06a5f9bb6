"""One mirror partition's state machine, as a pure object: events and ``now`` in, outputs out.

Theory of operation
-------------------
A :class:`MirrorPartitionMachine` lives on the destination broker that leads the partition
(one object per mirror partition). It never does I/O: the Trio shell (the mirror manager)
feeds it :mod:`~kcore.mirror.events` with ``handle(event, now)`` and then calls
``poll(now)``, which fires the machine's timers and returns a :class:`~kcore.mirror.outputs.Poll`:
the :mod:`~kcore.mirror.outputs` to execute in order, and the deadline for the next poll. The
shape is the Raft core's (``kcore/raft/core.py``); a seeded simulation
(``tests/mirror/simulation.py``) drives it against a lossy coordinator, crashes and leader
changes.

The machine is *level-triggered*: after every event it compares what the topic's
``mirror.name`` asks for (:class:`~kcore.mirror.state.MirrorMode`) and what it has learnt
with its durable state, and takes the one next step: a transition of the table in
:mod:`kcore.mirror.state`, or the next piece of work of the current state. A transition is
first persisted (:class:`~kcore.mirror.outputs.PersistState`) and takes effect only when the
coordinator acknowledges it (spec M-46); until then nothing new starts, and at most one write
is outstanding, so the coordinator sees the writes in order. A lost or failed write is sent
again after a backoff; every op the machine waits for is timed out after
``request_timeout_ms`` and its late answer ignored.

What each state does once it is in effect:

* ``LOG_TRUNCATION`` (spec M-37, D-16). After a *start* (from UNKNOWN, STOPPED or a failed
  partition), ask the source for the LME: ``-1`` truncates the whole log and restarts it at
  the source's log start offset (so offsets stay the source's); otherwise truncate at the
  start offset of the first local epoch above the LME (nothing if there is none). After a
  *resume* (a restart or new leader found MIRRORING or EPOCH_FENCING, D-14) the log already
  is a prefix of the source's, so nothing is cut: truncation-on-fetch (M-27) removes any
  divergence. Either way the truncation completes when every ISR member has truncated too
  (M-38; NOT_ENOUGH_REPLICAS from the shell is no failure: the wait is tried again after a
  backoff, as a no-op truncation to the log end). Then MIRRORING, or EPOCH_FENCING when the
  source's epoch is already above the partition's (D-11).
* ``MIRRORING``: add the fetcher at the log end offset (M-39). The fetcher asks
  :meth:`may_append` before every append; a batch whose epoch is above the partition's leader
  epoch is held back and reported (``MirroredEpochAhead``), which moves the partition to
  ``EPOCH_FENCING``.
* ``EPOCH_FENCING`` (D-10, D-11): remove the fetcher, BumpLeaderEpochs(min = the batch's
  epoch), and back to MIRRORING once the metadata shows an epoch that covers it. A failed bump
  is retried with backoff, then FAILED.
* ``PAUSING`` / ``PAUSED`` (M-62, M-63): remove the fetcher; stay read-only; a resume goes back
  to MIRRORING at the log end, with no truncation (M-42).
* ``STOPPING`` (D-15): remove the fetcher; persist the LME (the greatest epoch in the log,
  D-09); bump the epoch to at least LME + 1; append an ABORT marker at the new epoch for every
  ongoing transaction; append MIRROR_PID_RESET; persist STOPPED; then make the partition
  writable. Every step is safe to repeat, so a crash resumes the sequence (D-14). Two
  refinements of D-15's list, both for a crash between steps: the partition becomes writable
  only *after* STOPPED is persisted (M-46: otherwise a resumed STOPPING would abort the local
  transactions and expire the local producers that wrote in between), and a stop whose log
  holds no batch at all appends nothing (no producer state or transaction exists, and a
  marker would give the log an epoch a resumed stop would take for a mirrored one).
* ``FAILED`` (D-13): the reason is kept; after ``mirror.failed.retry.backoff.ms`` (doubling
  per attempt, capped at 5 minutes) the partition returns to its previous state, up to
  ``mirror.failed.max.retries`` times; then it stays FAILED until the operator's Start or
  Stop. The count restarts when the partition makes progress (or ran 5 minutes since its last
  retry without failing).
* ``STOPPED``: writable; a Start (``mirror.name`` without suffix) goes to LOG_TRUNCATION.

The write guard (:class:`~kcore.mirror.outputs.SetWriteAccess`) is read-only whenever the
topic belongs to a mirror and the partition is not STOPPED; it is set read-only at once when a
Start is seen (before the LOG_TRUNCATION write: refusing early is always safe), and writable
only after STOPPED is durable.

A ``mirror.name`` without the topic being in any mirror any more (the config removed while
the partition still mirrored) is treated as a stop: a normal topic must be writable, and only
STOPPING makes that safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kcore.mirror.events import (
    BecameLeader,
    Event,
    LastMirrorEpochFetched,
    LeaderEpochChanged,
    MirroredEpochAhead,
    MirrorNameChanged,
    OpCompleted,
    OpFailed,
    PersistedState,
    RecoveryRequested,
    SourceFailed,
    SourceTopicDeleted,
    StateLoaded,
    StoppedBeingLeader,
)
from kcore.mirror.outputs import (
    AddFetcher,
    AppendAbortMarkers,
    AppendMirrorPidReset,
    FetchLastMirrorEpoch,
    Output,
    PersistLastMirrorEpoch,
    PersistState,
    Poll,
    ReadState,
    RemoveFetcher,
    RequestEpochBump,
    SetWriteAccess,
    Transitioned,
    TruncateFullyAndStartAt,
    TruncateTo,
    WriteAccess,
)
from kcore.mirror.state import (
    RETRY_TARGETS,
    MirrorMode,
    MirrorPartitionState,
    check_transition,
    parse_mirror_name,
)
from kcore.protocol.errors import ErrorCode

__all__ = [
    "EpochCache",
    "LocalLog",
    "MachineConfig",
    "MirrorPartitionMachine",
    "lme_truncation",
]

S = MirrorPartitionState
_UNSET = object()
# Transitions that mean the partition made progress: the retry count and reason restart.
_PROGRESS = {
    (S.LOG_TRUNCATION, S.MIRRORING),
    (S.EPOCH_FENCING, S.MIRRORING),
    (S.PAUSING, S.PAUSED),
    (S.PAUSED, S.MIRRORING),
    (S.STOPPING, S.STOPPED),
    (S.UNKNOWN, S.LOG_TRUNCATION),
    (S.STOPPED, S.LOG_TRUNCATION),
}


class EpochCache(Protocol):
    """The part of :class:`~kcore.log.leader_epoch_cache.LeaderEpochFileCache` the machine reads."""

    def next_epoch(self, epoch: int) -> int | None: ...

    def epoch_entry(self, epoch: int): ...  # an EpochEntry (epoch, start_offset) or None


class LocalLog(Protocol):
    """The local partition log as the machine reads it (:class:`~kcore.log.partition_log.PartitionLog`
    satisfies it). The machine only reads; the shell truncates and appends."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int | None: ...

    @property
    def epoch_cache(self) -> EpochCache: ...


def lme_truncation(
    last_mirror_epoch: int, source_log_start_offset: int, log: LocalLog
) -> TruncateTo | TruncateFullyAndStartAt:
    """Where LOG_TRUNCATION cuts the log after a start (spec M-37, D-16), as an output (op 0).

    * LME ``-1`` (the source has none): the whole log goes, and it restarts at the source's
      log start offset so that every mirrored record lands at the source's offset.
    * Otherwise the start offset of the first local epoch greater than the LME; the log end
      offset (nothing to cut) when there is none.
    """
    if last_mirror_epoch < 0:
        return TruncateFullyAndStartAt(0, source_log_start_offset)
    later = log.epoch_cache.next_epoch(last_mirror_epoch)
    if later is None:
        return TruncateTo(0, log.log_end_offset)
    return TruncateTo(0, log.epoch_cache.epoch_entry(later).start_offset)


@dataclass(frozen=True, slots=True)
class MachineConfig:
    """The machine's settings. Defaults: decisions D-11/D-13 and Kafka's client defaults.

    Attributes:
        failed_retry_backoff_ms: ``mirror.failed.retry.backoff.ms``: the first FAILED retry's
            wait; it doubles per attempt.
        failed_retry_backoff_max_ms: the cap on that wait (5 minutes, D-13).
        failed_max_retries: ``mirror.failed.max.retries``: automatic retries before the
            partition stays FAILED; also the failed epoch bumps tolerated (D-11).
        request_timeout_ms: how long an op may stay unanswered.
        retry_backoff_ms / retry_backoff_max_ms: the wait before a failed write, read or
            epoch bump is sent again (doubling).
    """

    failed_retry_backoff_ms: int = 5_000
    failed_retry_backoff_max_ms: int = 300_000
    failed_max_retries: int = 5
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")
        if self.request_timeout_ms == 0:
            raise ValueError("request_timeout_ms must be > 0")

    def failed_backoff_ms(self, retries_made: int) -> int:
        """The wait in FAILED before automatic retry number ``retries_made + 1``."""
        return min(
            self.failed_retry_backoff_ms << min(retries_made, 40), self.failed_retry_backoff_max_ms
        )

    def retry_backoff(self, attempts: int) -> int:
        """The wait before sending again after ``attempts`` consecutive failures (>= 1)."""
        return min(self.retry_backoff_ms << min(attempts - 1, 40), self.retry_backoff_max_ms)


@dataclass(slots=True)
class _Pending:
    kind: str
    deadline: int


@dataclass(slots=True)
class _Write:
    output: PersistState | PersistLastMirrorEpoch
    row: tuple[str, str] | None  # the table row of a transition; None for the LME write
    failures: int = 0
    resend_at: int | None = None


class MirrorPartitionMachine:
    """The state machine of one mirror partition on its destination leader (module docstring).

    A shell's loop, in outline::

        machine = MirrorPartitionMachine("orders", 3, partition_log, config,
                                         mirror_name=topic_config.mirror_name, now=clock_ms())
        machine.handle(BecameLeader(leader_epoch), clock_ms())
        while True:
            poll = machine.poll(clock_ms())
            for out in poll.outputs:   # in order; answer those with an op later
                execute(out)
            event = next_event(until=poll.deadline)
            machine.handle(event, clock_ms())

    Args:
        topic, partition: the partition, for messages.
        log: the local partition log (read only: LME truncation points, log end, epochs).
        config: the settings.
        mirror_name: the topic's ``mirror.name`` value now.
        now: the current time in milliseconds.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        log: LocalLog,
        config: MachineConfig | None = None,
        *,
        mirror_name: str | None,
        now: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.config = config or MachineConfig()
        self.mirror, self.mode = parse_mirror_name(mirror_name)
        self.is_leader = False
        self.leader_epoch = -1
        self.access: WriteAccess | None = None
        self._outputs: list[Output] = []
        self._next_op = 1
        self._now = now
        self._forget()

    # ---- the state, as Describe shows it ------------------------------------------------

    @property
    def loaded(self) -> bool:
        """True once the persisted state is known (the machine acts only then)."""
        return self._loaded

    @property
    def record(self) -> PersistedState:
        """The last durable record (``UNKNOWN`` before any)."""
        return PersistedState(self.state, self._previous, self._retry, self._lme, self._reason)

    def may_append(self, batch_leader_epoch: int) -> bool:
        """May the fetcher append a fetched batch with this partition leader epoch now?

        Only a leader in MIRRORING with a fetcher, and only batches whose epoch the
        partition's own leader epoch covers (D-11): a later one must wait for EPOCH_FENCING.
        """
        return (
            self.is_leader
            and self.state is S.MIRRORING
            and self._fetcher_added
            and batch_leader_epoch <= self.leader_epoch
        )

    # ---- the two entry points ----------------------------------------------------------

    def handle(self, event: Event, now: int) -> None:
        """Take one event (see :mod:`kcore.mirror.events`); call :meth:`poll` afterwards."""
        self._now = now
        if isinstance(event, BecameLeader):
            self._became_leader(event.leader_epoch)
        elif isinstance(event, StoppedBeingLeader):
            self._stopped_being_leader()
        elif isinstance(event, LeaderEpochChanged):
            self.leader_epoch = max(self.leader_epoch, event.leader_epoch)
        elif isinstance(event, MirrorNameChanged):
            self._mirror_name_changed(event.value)
        elif isinstance(event, RecoveryRequested):
            self._recovery_requested = self.state is S.FAILED
        elif isinstance(event, SourceTopicDeleted):
            self._source_deleted = True
        elif isinstance(event, MirroredEpochAhead):
            if self.state is S.MIRRORING and event.batch_leader_epoch > self.leader_epoch:
                self._fence_target = max(self._fence_target, event.batch_leader_epoch)
        elif isinstance(event, SourceFailed):
            if self.state is S.MIRRORING and self._fetcher_added:
                self._failure = f"{event.error.name}: {event.message}"
        elif isinstance(event, StateLoaded):
            if self._take(event.op, "load"):
                self._state_loaded(event.stored)
        elif isinstance(event, LastMirrorEpochFetched):
            if self._take(event.op, "lme"):
                self._lme_fetched(event)
        elif isinstance(event, OpCompleted):
            kind = self._pending.get(event.op)
            if kind is not None and self._take(event.op, kind.kind):
                self._completed(kind.kind)
        elif isinstance(event, OpFailed):
            kind = self._pending.get(event.op)
            if kind is not None and self._take(event.op, kind.kind):
                why = f"{event.error.name}: {event.message}".rstrip(": ")
                self._failed(kind.kind, why, event.error)
        else:
            raise TypeError(f"not a mirror partition event: {event!r}")
        self._advance()

    def poll(self, now: int) -> Poll:
        """Fire due timers, take the next steps, and return the outputs and next deadline."""
        self._now = now
        for op, pending in sorted(self._pending.items()):
            if pending.deadline <= now and op in self._pending:
                del self._pending[op]
                self._failed(pending.kind, f"{ErrorCode.REQUEST_TIMED_OUT.name}: no answer")
        write = self._write
        if write is not None and write.resend_at is not None and write.resend_at <= now:
            self._send_write(write)
        if self._load_retry_at is not None and self._load_retry_at <= now:
            self._load_retry_at = None
            self._read_state()
        self._advance()
        outputs, self._outputs = self._outputs, []
        return Poll(outputs, self._deadline())

    # ---- leadership, config, load ------------------------------------------------------

    def _forget(self) -> None:
        """Drop everything but the config: a new leadership starts from the persisted state."""
        self.state = S.UNKNOWN
        self._loaded = False
        self._previous = S.UNKNOWN
        self._retry = 0
        self._lme = -1
        self._reason: str | None = None
        self._pending: dict[int, _Pending] = {}
        self._write: _Write | None = None
        self._load_retry_at: int | None = None
        self._load_failures = 0
        self._recovery_requested = False
        self._source_deleted = False
        self._fetcher_added = False
        self._retry_at: int | None = None
        self._retried_at = self._now
        self._fence_epoch = -1
        self._reset_activity()

    def _reset_activity(self) -> None:
        self._step = ""
        self._failure: str | None = None
        self._fence_target = -1
        self._source_epoch = -1
        self._resume = False
        self._stop_lme: int | None = None
        self._bump_floor = -1
        self._bump_failures = 0
        self._bump_retry_at: int | None = None
        self._truncate_waits = 0  # M-38 waits that found the replicas behind
        self._truncate_retry_at: int | None = None
        self._done = False

    def _became_leader(self, leader_epoch: int) -> None:
        if self.is_leader:
            self.leader_epoch = max(self.leader_epoch, leader_epoch)
            return
        self._forget()
        self.is_leader = True
        self.leader_epoch = leader_epoch
        if self.mode is MirrorMode.NONE:
            self._set_access(WriteAccess.WRITABLE)
            return
        self._set_access(
            WriteAccess.LOADING if self.mode is MirrorMode.STOPPED else WriteAccess.READ_ONLY
        )
        self._read_state()

    def _stopped_being_leader(self) -> None:
        if not self.is_leader:
            return
        if self._fetcher_added:
            self._emit(RemoveFetcher(self._op()))  # nobody waits: the new leader fetches
        self._forget()
        self.is_leader = False
        if self.mode is not MirrorMode.NONE:
            self._set_access(WriteAccess.LOADING)

    def _mirror_name_changed(self, value: str | None) -> None:
        mirror, mode = parse_mirror_name(value)
        moved = mirror is not None and self.mirror is not None and mirror != self.mirror
        self.mirror, self.mode = mirror if mirror is not None else self.mirror, mode
        if mode in (MirrorMode.ACTIVE, MirrorMode.PAUSED):
            self._set_access(WriteAccess.READ_ONLY)  # refusing early is always safe
        if not self.is_leader:
            return
        if moved:
            # Another mirror's state is keyed by its own name: read it afresh.
            self._became_leader_again()
        elif not self._loaded and mode is not MirrorMode.NONE and not self._loading():
            self._read_state()
        elif self._loaded:
            self._update_access()

    def _became_leader_again(self) -> None:
        epoch = self.leader_epoch
        self._stopped_being_leader()
        self._became_leader(epoch)

    def _loading(self) -> bool:
        return self._load_retry_at is not None or any(
            p.kind == "load" for p in self._pending.values()
        )

    def _read_state(self) -> None:
        op = self._track("load")
        self._emit(ReadState(op))

    def _state_loaded(self, stored: PersistedState | None) -> None:
        self._loaded = True
        self._load_failures = 0
        if stored is None or stored.state is S.UNKNOWN:
            stored = PersistedState(S.UNKNOWN)
        self.state = stored.state
        self._previous = stored.previous_state
        self._retry = stored.retry_attempt
        self._lme = stored.last_mirror_epoch
        self._reason = stored.reason
        self._retried_at = self._now
        self._enter(loaded=True)
        self._update_access()

    # ---- transitions ---------------------------------------------------------------------

    def _wants_stop(self) -> bool:
        if self.state in (S.STOPPING, S.STOPPED):
            return False
        if self.mode is MirrorMode.NONE:
            return self.state is not S.UNKNOWN  # the config vanished under a mirroring state
        return self.mode is MirrorMode.STOPPED or self._source_deleted

    def _wanted(self) -> tuple[MirrorPartitionState, int, object, int] | None:
        """The next transition as (state, retry_attempt, reason, last_mirror_epoch), if any."""
        state, retry, lme = self.state, self._retry, self._lme
        if state is S.FAILED:
            retry_due = self._retry_at is not None and self._retry_at <= self._now
            if self._wants_stop():
                if self._previous is not S.STOPPING:  # a new stop: it begins afresh
                    return S.STOPPING, 0, None, -1
                # A failed stop, retried: the same sequence goes on, with its LME.
                if self._recovery_requested:
                    return S.STOPPING, 0, None, lme
                return (S.STOPPING, retry + 1, _UNSET, lme) if retry_due else None
            if self._recovery_requested:
                return S.LOG_TRUNCATION, 0, None, lme
            if retry_due:
                target = self._previous if self._previous in RETRY_TARGETS else S.LOG_TRUNCATION
                return target, retry + 1, _UNSET, lme
            return None
        if self._wants_stop():
            return S.STOPPING, retry, _UNSET, -1  # a new stop: the earlier LME is cleared
        if self._failure is not None:
            if self._now - self._retried_at >= self.config.failed_retry_backoff_max_ms:
                retry = 0  # healthy long enough since the last retry: a first failure again
            return S.FAILED, retry, self._failure, lme
        if state in (S.UNKNOWN, S.STOPPED):
            if self.mode is MirrorMode.ACTIVE:
                return S.LOG_TRUNCATION, retry, _UNSET, lme
            return None
        if state is S.MIRRORING and self.mode is MirrorMode.PAUSED:
            return S.PAUSING, retry, _UNSET, lme
        if state in (S.MIRRORING, S.EPOCH_FENCING) and self._resume:
            return S.LOG_TRUNCATION, retry, _UNSET, lme
        if state is S.PAUSED and self.mode is MirrorMode.ACTIVE:
            return S.MIRRORING, retry, _UNSET, lme
        if state is S.MIRRORING and self._fence_target > self.leader_epoch:
            return S.EPOCH_FENCING, retry, _UNSET, lme
        if self._done:
            return self._done_target(), retry, _UNSET, lme
        return None

    def _done_target(self) -> MirrorPartitionState:
        state = self.state
        if state is S.LOG_TRUNCATION:
            if self._source_epoch > self.leader_epoch:
                return S.EPOCH_FENCING
            return S.MIRRORING
        return {
            S.EPOCH_FENCING: S.MIRRORING,
            S.PAUSING: S.PAUSED,
            S.STOPPING: S.STOPPED,
        }[state]

    def _transition(self, new: MirrorPartitionState, retry: int, reason, lme: int) -> None:
        old = self.state
        row = check_transition(old, new)
        if (old, new) in _PROGRESS:
            retry, reason = 0, None
        elif reason is _UNSET:
            reason = self._reason
        record = PersistedState(new, old, retry, lme, reason)
        if new is S.EPOCH_FENCING:
            self._fence_epoch = max(self._fence_target, self._source_epoch)
        # The ops and timers of the state being left are forgotten; late answers are ignored.
        self._retry_at = self._bump_retry_at = None
        self._pending = {op: p for op, p in self._pending.items() if p.kind == "load"}
        self._write = _Write(PersistState(0, record), (row.row, row.reason))
        self._send_write(self._write)
        self._update_access()

    def _send_write(self, write: _Write) -> None:
        op = self._track("write")
        if isinstance(write.output, PersistState):
            write.output = PersistState(op, write.output.record)
        else:
            write.output = PersistLastMirrorEpoch(op, write.output.last_mirror_epoch)
        write.resend_at = None
        self._emit(write.output)

    def _write_acknowledged(self) -> None:
        write, self._write = self._write, None
        if isinstance(write.output, PersistLastMirrorEpoch):
            self._lme = self._stop_lme = write.output.last_mirror_epoch
            self._step = "bump"
            return
        record = write.output.record
        old = self.state
        self.state = record.state
        self._previous = record.previous_state
        self._retry = record.retry_attempt
        self._lme = record.last_mirror_epoch
        self._reason = record.reason
        if old is S.FAILED:
            self._retried_at = self._now
        self._emit(Transitioned(old, record.state, *write.row))
        self._enter(loaded=False)
        self._update_access()

    def _enter(self, *, loaded: bool) -> None:
        """Set up the work of the state just entered (or just loaded, D-14)."""
        self._reset_activity()
        self._recovery_requested = False
        self._retry_at = None
        state = self.state
        if state is S.LOG_TRUNCATION:
            if self._fetcher_added:
                # A resume with the fetcher still running (the state reloaded under the same
                # leadership): it leaves before the log is cut, as a Kafka follower's fetcher
                # does, or it would append past the cut and its next fetch, from above the new
                # log end, would leave a hole. MIRRORING adds it back at the new log end.
                self._emit(RemoveFetcher(self._op()))  # nothing waits for it
                self._fetcher_added = False
            self._step = "truncate" if self._previous in (S.MIRRORING, S.EPOCH_FENCING) else "lme"
        elif state in (S.MIRRORING, S.EPOCH_FENCING) and loaded:
            self._resume = True
        elif state is S.MIRRORING:
            self._step = "add"
        elif state in (S.EPOCH_FENCING, S.PAUSING):
            self._step = "remove"
        elif state is S.STOPPING:
            self._step = "remove"
            if loaded or self._previous is S.FAILED:
                # Resumed (D-14): a recorded LME is this stop's own (the stop cleared the
                # earlier one when it began).
                self._stop_lme = self._lme if self._lme >= 0 else None
        elif state is S.STOPPED:
            self._source_deleted = False  # acted on; a later Start is a new beginning
        elif state is S.FAILED:
            if self._fetcher_added:
                self._emit(RemoveFetcher(self._op()))  # nothing waits for it
                self._fetcher_added = False
            if self._retry < self.config.failed_max_retries:
                self._retry_at = self._now + self.config.failed_backoff_ms(self._retry)

    # ---- the work of each state ----------------------------------------------------------

    def _advance(self) -> None:
        for _ in range(16):  # each round either waits or moves one step
            if not self.is_leader or not self._loaded or self._write is not None:
                return
            wanted = self._wanted()
            if wanted is not None:
                self._transition(*wanted)
                return
            if not self._work():
                return

    def _work(self) -> bool:
        """Start the next piece of the current state's work; True if something changed."""
        step = self._step
        if any(p.kind != "load" for p in self._pending.values()):
            return False  # an op of this state is still out
        if step == "lme":
            self._step = "lme-wait"
            self._emit(FetchLastMirrorEpoch(self._track("lme")))
        elif step == "truncate":  # a resume: nothing to cut, but the ISR must be level
            if self._truncate_retry_at is not None and self._truncate_retry_at > self._now:
                return False
            self._truncate_retry_at = None
            self._step = "truncate-wait"
            self._emit(TruncateTo(self._track("truncate"), self.log.log_end_offset))
        elif step == "add":
            self._step = "fetching"
            self._fetcher_added = True
            self._emit(AddFetcher(self.log.log_end_offset))
        elif step == "remove":
            self._step = "remove-wait"
            self._fetcher_added = False
            self._emit(RemoveFetcher(self._track("remove")))
        elif step == "lme-persist":
            epoch = self.log.latest_epoch
            self._write = _Write(PersistLastMirrorEpoch(0, -1 if epoch is None else epoch), None)
            self._send_write(self._write)
        elif step == "bump":
            return self._bump()
        elif step == "bump-wait":
            return self._bump_done()
        elif step == "aborts":
            self._step = "aborts-wait"
            self._emit(AppendAbortMarkers(self._track("append"), self.leader_epoch))
        elif step == "pid-reset":
            self._step = "pid-reset-wait"
            self._emit(AppendMirrorPidReset(self._track("append"), self.leader_epoch))
        else:
            return False
        return True

    def _bump_min(self) -> int:
        if self.state is S.STOPPING:
            return (self._stop_lme if self._stop_lme is not None else -1) + 1
        return self._fence_epoch

    def _bump(self) -> bool:
        if self.state is S.EPOCH_FENCING and self.leader_epoch >= self._fence_epoch >= 0:
            self._done = True  # a leader change already covered it
            return True
        if self._bump_retry_at is not None and self._bump_retry_at > self._now:
            return False
        self._bump_retry_at = None
        self._step = "bump-sent"
        self._bump_floor = self.leader_epoch
        self._emit(RequestEpochBump(self._track("bump"), self._bump_min()))
        return True

    def _bump_done(self) -> bool:
        """After the controller accepted: done once the metadata shows the new epoch."""
        if self.leader_epoch > self._bump_floor and self.leader_epoch >= self._bump_min():
            if self.state is S.STOPPING and self._stop_lme is not None and self._stop_lme >= 0:
                self._step = "aborts"
            else:  # fencing done; or a stop of a log with no batch: nothing to mark
                self._done = True
            return True
        return False

    # ---- answers -------------------------------------------------------------------------

    def _lme_fetched(self, answer: LastMirrorEpochFetched) -> None:
        if self.state is not S.LOG_TRUNCATION:
            return
        self._source_epoch = answer.source_leader_epoch
        cut = lme_truncation(answer.last_mirror_epoch, answer.source_log_start_offset, self.log)
        op = self._track("truncate")
        self._step = "truncate-wait"
        self._emit(type(cut)(op, cut.offset))

    def _completed(self, kind: str) -> None:
        if kind == "load":
            return
        if kind == "write":
            self._write_acknowledged()
        elif kind == "truncate":
            self._done = True
        elif kind == "remove":
            if self.state is S.STOPPING:
                self._step = "bump" if self._stop_lme is not None else "lme-persist"
            elif self.state is S.EPOCH_FENCING:
                self._step = "bump"
            else:
                self._done = True
        elif kind == "bump":
            self._step = "bump-wait"
            self._bump_failures = 0
        elif kind == "append":
            if self._step == "aborts-wait":
                self._step = "pid-reset"
            else:
                self._done = True

    def _failed(self, kind: str, why: str, code: ErrorCode | None = None) -> None:
        now, cfg = self._now, self.config
        if kind == "load":
            self._load_failures += 1
            self._load_retry_at = now + cfg.retry_backoff(self._load_failures)
        elif kind == "write":
            write = self._write
            if write is not None:
                write.failures += 1
                write.resend_at = now + cfg.retry_backoff(write.failures)
        elif kind == "remove":
            self._step = "remove"  # local; try again
        elif kind == "bump":
            self._bump_failures += 1
            if self._bump_failures > cfg.failed_max_retries:
                self._failure = f"BumpLeaderEpochs failed {self._bump_failures} times: {why}"
            else:
                self._step = "bump"
                self._bump_retry_at = now + cfg.retry_backoff(self._bump_failures)
        elif kind == "lme":
            self._failure = f"reading the last mirror epoch from the source failed: {why}"
        elif kind == "truncate" and code is ErrorCode.NOT_ENOUGH_REPLICAS:
            # M-38: the replicas lack the cut; tried again (a no-op cut at the log end, a wait).
            self._truncate_waits += 1
            self._step = "truncate"
            self._truncate_retry_at = now + cfg.retry_backoff(self._truncate_waits)
        elif kind == "truncate":
            self._failure = f"truncating the log failed: {why}"
        elif kind == "append":
            self._failure = f"appending the STOPPING control records failed: {why}"

    # ---- plumbing ------------------------------------------------------------------------

    def _update_access(self) -> None:
        # Writable: a normal topic, or a stopped partition whose config says stopped too.
        writable = self.state is S.STOPPED or self.state is S.UNKNOWN
        if self.mode is MirrorMode.STOPPED:
            writable = self.state is S.STOPPED
        elif self.mode is not MirrorMode.NONE:
            writable = False
        write = self._write
        if write is not None and isinstance(write.output, PersistState):
            # Sent is as good as stored: the coordinator may hold it whatever the answer.
            writable = writable and write.output.record.state is S.STOPPED
        self._set_access(WriteAccess.WRITABLE if writable else WriteAccess.READ_ONLY)

    def _set_access(self, access: WriteAccess) -> None:
        if access is not self.access:
            self.access = access
            self._emit(SetWriteAccess(access))

    def _op(self) -> int:
        op, self._next_op = self._next_op, self._next_op + 1
        return op

    def _track(self, kind: str) -> int:
        op = self._op()
        self._pending[op] = _Pending(kind, self._now + self.config.request_timeout_ms)
        return op

    def _take(self, op: int, kind: str) -> bool:
        pending = self._pending.get(op)
        if pending is None or pending.kind != kind:
            return False
        del self._pending[op]
        return True

    def _emit(self, output: Output) -> None:
        self._outputs.append(output)

    def _deadline(self) -> int | None:
        times = [p.deadline for p in self._pending.values()]
        if self._write is not None and self._write.resend_at is not None:
            times.append(self._write.resend_at)
        for t in (
            self._load_retry_at,
            self._retry_at,
            self._bump_retry_at,
            self._truncate_retry_at,
        ):
            if t is not None:
                times.append(t)
        return min(times) if times else None

    def __repr__(self) -> str:
        return (
            f"MirrorPartitionMachine({self.topic}-{self.partition}, {self.state.name}, "
            f"mode={self.mode.name}, leader_epoch={self.leader_epoch}, step={self._step!r})"
        )
