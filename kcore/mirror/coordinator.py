"""The ClusterMirrorCoordinator, sans-IO: the persisted state of every mirror partition.

Theory of operation
-------------------
Each mirror has exactly one coordinator: the leader of the ``__mirror_state`` partition its
name hashes to (decision D-08, :meth:`ClusterMirrorCoordinator.partition_for`, the group
coordinator's rule). That broker keeps, per mirror it owns, the latest
:class:`~kcore.mirror.records.MirrorPartitionStateRecord` of every mirror partition (state,
previous state, retry attempt, FAILED reason) and the last mirror epochs (LME, D-09), and
answers ReadMirrorStates / WriteMirrorStates (spec §7.13, §7.14) for them. The brokers that
lead mirror partitions drive the state machine; they persist each transition here before it
takes effect (M-46): by calling this object directly when they are the coordinator, over
WriteMirrorStates otherwise (M-11).

Ownership follows the shell (M-10): ``begin_loading(p)`` (requests for its mirrors answer
COORDINATOR_LOAD_IN_PROGRESS), ``replay(p, record)`` of every record of the partition from its
log start in offset order (the topic is never compacted, D-07), ``finish_loading(p, now)``, and
``unload(p)`` when leadership moves (its state is dropped at once, so nothing stale is served).
A mirror whose partition is neither loading nor owned answers NOT_COORDINATOR.

Writes: validate the whole request first (codes that name a state, never UNKNOWN — M-35 —,
partition indexes, retry counts), then build the records, call ``append(partition, records)``
(one batch, synchronous, raises :class:`KafkaError`), and only after it returned apply those
same records with the code :meth:`replay` runs. So memory never holds what the log does not,
and a reload reproduces exactly what was served. A refused append leaves memory as it was and
is mapped as Kafka's coordinators map log errors (:mod:`kcore.coordinator.append_errors`).

WriteMirrorStates carries no PreviousState or RetryAttempt (spec §20 A-7): kcore's brokers send
them (tagged fields), and when absent the coordinator derives them (:func:`derive`).
``StoppedTopics`` (the source topic is gone, M-19/T11) moves every partition of those topics
that the coordinator knows to STOPPED.

**Fencing by leader epoch** (D-14): a broker that lost a partition's leadership may still have
a write in flight, and it must not overwrite what the new leader wrote. Each write carries the
writer's partition leader epoch (kcore's tagged ``LeaderEpoch``; -1 when a writer does not
say), each state record keeps the greatest epoch written so far, and a write below it is
refused whole with FENCED_LEADER_EPOCH, as a partition leader refuses a stale epoch. One
exception: a Start of a STOPPED partition (to LOG_TRUNCATION) is not fenced, since a topic
deleted and created again under the same name starts its epochs at 0 again, and a stale
leader cannot start anything (it learns of the Start from the same metadata that takes its
leadership away). Deleting a mirror writes a tombstone of both its keys
(D-29); the replay drops it.

**Snapshots** (D-07's optional compaction): the core counts the records of each partition from
its log start. Once a write takes the count to ``snapshot_after_records`` and past twice the
size of the partition's live state, it appends the whole state of the partition's mirrors as
one batch (every partition state, and all last mirror epochs, of every mirror) and calls
``delete_before(partition, base offset of that batch)``: the shell deletes the older records
(DeleteRecords) once the snapshot is durable. Replaying the older records and then the snapshot
gives the same state as the snapshot alone, so a snapshot that is written but whose deletion
never happens (a crash, a leadership change) is harmless. A partition whose mirrors were all
deleted has no state to snapshot and keeps its records until a later snapshot.

Pure: no I/O; time only as passed in. Not thread-safe: the shell calls it from one task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kcore.coordinator.append_errors import coordinator_error
from kcore.mirror import records as rec
from kcore.mirror.records import (
    LastMirrorEpochsRecord,
    MirrorPartitionStateRecord,
    MirrorSyncedAclsRecord,
    MirrorTombstone,
    Record,
)
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "Append",
    "ClusterMirrorCoordinator",
    "MirrorCoordinatorConfig",
    "PartitionMirrorState",
    "StateUpdate",
    "derive",
    "write_mirror_states_answer",
]

S = MirrorPartitionState
E = ErrorCode
TopicPartition = tuple[str, int]

# append(__mirror_state partition, records) -> the batch's base offset (None: not known): one
# batch, synchronously; raises KafkaError.
Append = Callable[[int, list[Record]], int | None]
# delete_before(partition, offset): records below ``offset`` are no longer needed (a snapshot).
DeleteBefore = Callable[[int, int], None]

_INT16_MAX = 2**15 - 1
# A settled state ends a recovery cycle: the retry count and the old reason are cleared.
_SETTLED = frozenset({S.MIRRORING, S.PAUSED, S.STOPPED})


@dataclass(frozen=True)
class MirrorCoordinatorConfig:
    """``mirror.state.topic.num.partitions`` (D-08) and ``mirror.state.snapshot.records``
    (0: never snapshot)."""

    state_topic_partitions: int = 50
    snapshot_after_records: int = 10_000


@dataclass(frozen=True, slots=True)
class PartitionMirrorState:
    """What ReadMirrorStates answers for one mirror partition (UNKNOWN: nothing recorded)."""

    state: MirrorPartitionState = S.UNKNOWN
    previous_state: MirrorPartitionState = S.UNKNOWN
    retry_attempt: int = 0
    reason: str | None = None
    last_mirror_epoch: int = rec.NO_LAST_MIRROR_EPOCH


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """One partition's transition to persist.

    ``state`` is a code (an int, or a :class:`MirrorPartitionState`). ``last_mirror_epoch`` >= 0
    is persisted too (a LastMirrorEpochs record in the same batch, D-09). ``previous_state`` and
    ``retry_attempt`` None: derived by the coordinator (:func:`derive`); ``reason``: why it
    FAILED; ``leader_epoch``: the writer's partition leader epoch (-1: not fenced).
    """

    topic: str
    partition: int
    state: int
    last_mirror_epoch: int = rec.NO_LAST_MIRROR_EPOCH
    previous_state: int | None = None
    retry_attempt: int | None = None
    reason: str | None = None
    leader_epoch: int = -1


@dataclass
class _Mirror:
    states: dict[TopicPartition, MirrorPartitionStateRecord] = field(default_factory=dict)
    epochs: dict[TopicPartition, int] = field(default_factory=dict)
    synced_acls: frozenset | None = None  # D-22: what the metadata sync created

    def empty(self) -> bool:
        return not self.states and not self.epochs and self.synced_acls is None


def derive(
    current: MirrorPartitionStateRecord | None, state: MirrorPartitionState
) -> tuple[MirrorPartitionState, int]:
    """(previous state, retry attempt) of a transition to ``state`` whose writer did not say.

    * previous state: the current state when the state changes, else the current previous
      state (a rewrite, e.g. a FAILED with a new reason, keeps what it was);
    * retry attempt (D-13): leaving FAILED is an automatic recovery attempt (T13), so the count
      goes up by one; entering or staying in FAILED keeps it; reaching a settled state
      (MIRRORING, PAUSED, STOPPED) ends the cycle at 0; any other step keeps it.
    """
    if current is None:
        return S.UNKNOWN, 0
    previous = current.state if state is not current.state else current.previous_state
    if current.state is S.FAILED and state is not S.FAILED:
        retry = min(current.retry_attempt + 1, _INT16_MAX)
    elif state in _SETTLED:
        retry = 0
    else:
        retry = current.retry_attempt
    return previous, retry


class ClusterMirrorCoordinator:
    """The coordinator of the mirrors whose ``__mirror_state`` partitions this broker leads.

    ``append(partition, records)`` persists records (see :mod:`kcore.mirror.records`) as one
    batch or raises KafkaError. See the module docstring for the contract.
    """

    def __init__(
        self,
        config: MirrorCoordinatorConfig,
        append: Append,
        *,
        delete_before: DeleteBefore | None = None,
    ) -> None:
        self.config = config
        self._append = append
        self._delete_before = delete_before
        self._partitions: dict[int, dict[str, _Mirror]] = {}  # loading or owned
        self._loading: set[int] = set()
        self._owned: set[int] = set()
        self._records: dict[int, int] = {}  # partition -> records from its log start

    def partition_for(self, mirror_name: str) -> int:
        """The ``__mirror_state`` partition of ``mirror_name`` (D-08)."""
        return rec.partition_for(mirror_name, self.config.state_topic_partitions)

    # -- ownership -----------------------------------------------------------------------------

    def begin_loading(self, partition: int) -> None:
        """Start loading ``partition``; whatever was held for it before is dropped first."""
        self.unload(partition)
        self._partitions[partition] = {}
        self._records[partition] = 0
        self._loading.add(partition)

    def replay(self, partition: int, record: Record | None) -> None:
        """Apply one record read from ``partition``, in offset order (None, a record type this
        broker does not know, is skipped)."""
        if partition not in self._loading:
            raise ValueError(f"__mirror_state-{partition} is not loading")
        self._records[partition] += 1
        if record is not None:
            self._apply(self._partitions[partition], record)

    def finish_loading(self, partition: int, now_ms: int) -> None:
        """``partition`` is loaded: serve its mirrors."""
        if partition not in self._loading:
            raise ValueError(f"__mirror_state-{partition} is not loading")
        self._loading.discard(partition)
        self._owned.add(partition)

    def unload(self, partition: int) -> None:
        """Leadership of ``partition`` moved (or its load failed): drop its state (M-10)."""
        self._partitions.pop(partition, None)
        self._records.pop(partition, None)
        self._loading.discard(partition)
        self._owned.discard(partition)

    def owned_partitions(self) -> set[int]:
        return set(self._owned)

    def loading_partitions(self) -> set[int]:
        return set(self._loading)

    def owned_mirrors(self) -> list[str]:
        """The mirrors with recorded state in the owned partitions, sorted."""
        return sorted(name for p in self._owned for name in self._partitions[p])

    # -- the clock: nothing is timed yet (D-07 snapshots would be) ------------------------------

    def next_deadline_ms(self) -> int | None:
        return None

    def tick(self, now_ms: int) -> None:
        """Nothing is due: the coordinator only answers requests."""

    # -- reads ---------------------------------------------------------------------------------

    def read_states(
        self, mirror_name: str, topics: Mapping[str, Iterable[int]] | None = None
    ) -> dict[TopicPartition, PartitionMirrorState]:
        """The state of the given partitions of ``mirror_name`` (every recorded one when
        ``topics`` is None); a partition with nothing recorded is UNKNOWN (M-35), with its LME if
        one is recorded. Raises KafkaError NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, or
        INVALID_REQUEST for an empty mirror name."""
        mirror = self._lookup(mirror_name).get(mirror_name, _Mirror())
        if topics is None:
            wanted = sorted(set(mirror.states) | set(mirror.epochs))
        else:
            wanted = [(t, p) for t, parts in topics.items() for p in parts]
        out = {}
        for tp in wanted:
            epoch = mirror.epochs.get(tp, rec.NO_LAST_MIRROR_EPOCH)
            current = mirror.states.get(tp)
            if current is None:
                out[tp] = PartitionMirrorState(last_mirror_epoch=epoch)
            else:
                out[tp] = PartitionMirrorState(
                    current.state,
                    current.previous_state,
                    current.retry_attempt,
                    current.reason,
                    epoch,
                )
        return out

    # -- writes --------------------------------------------------------------------------------

    def write_states(
        self,
        mirror_name: str,
        updates: Iterable[StateUpdate],
        stopped_topics: Iterable[str] = (),
    ) -> None:
        """Persist the transitions (all or none), then hold them.

        Raises KafkaError: INVALID_REQUEST naming every invalid entry (nothing written),
        FENCED_LEADER_EPOCH naming every partition written with an older leader epoch than
        recorded (nothing written), NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, or a failed
        append's coordinator error.
        """
        mirrors = self._lookup(mirror_name)
        updates = list(updates)
        _validate(updates)
        mirror = mirrors.get(mirror_name, _Mirror())
        _check_fencing(mirror, updates)
        records: list[Record] = []
        epochs = {
            (u.topic, u.partition): u.last_mirror_epoch
            for u in updates
            if u.last_mirror_epoch != rec.NO_LAST_MIRROR_EPOCH
        }
        for u in updates:
            records.append(self._transition(mirror_name, mirror, u))
        if epochs:  # after the transitions, which may clear an older LME (see _apply)
            records.append(LastMirrorEpochsRecord(mirror_name, epochs))
        updated = {(u.topic, u.partition) for u in updates}
        for topic in dict.fromkeys(stopped_topics):
            for (t, p), current in sorted(mirror.states.items()):
                if t == topic and (t, p) not in updated and current.state is not S.STOPPED:
                    records.append(
                        self._transition(mirror_name, mirror, StateUpdate(t, p, S.STOPPED))
                    )
        self._write(mirror_name, records)

    def write_last_mirror_epochs(self, mirror_name: str, epochs: Mapping[TopicPartition, int]):
        """Persist last mirror epochs (D-09) without a state change; merged on replay."""
        self._lookup(mirror_name)  # raises unless we coordinate it
        bad = [f"{t}-{p}: {e}" for (t, p), e in epochs.items() if e < 0 or p < 0 or not t]
        if bad:
            raise KafkaError(E.INVALID_REQUEST, f"invalid last mirror epochs: {', '.join(bad)}")
        if epochs:
            self._write(mirror_name, [LastMirrorEpochsRecord(mirror_name, dict(epochs))])

    def delete_mirror(self, mirror_name: str) -> None:
        """Tombstone all of the mirror's state (D-29, M-65); nothing to do when none is held."""
        mirrors = self._lookup(mirror_name)
        if mirror_name in mirrors:
            self._write(mirror_name, rec.deletion_records(mirror_name))

    def synced_acls(self, mirror_name: str) -> frozenset:
        """The ACLs the mirror's metadata sync created (D-22); empty when it created none."""
        mirror = self._lookup(mirror_name).get(mirror_name)
        return frozenset() if mirror is None or mirror.synced_acls is None else mirror.synced_acls

    def write_synced_acls(self, mirror_name: str, acls: Iterable) -> None:
        """Persist the whole set of ACLs the sync created (replacing the last); nothing is
        written when it did not change."""
        acls = frozenset(acls)
        if acls != self.synced_acls(mirror_name):
            self._write(mirror_name, [MirrorSyncedAclsRecord(mirror_name, acls)])

    def _transition(self, name: str, mirror: _Mirror, u: StateUpdate) -> MirrorPartitionStateRecord:
        state = S(u.state)
        current = mirror.states.get((u.topic, u.partition))
        previous, retry = derive(current, state)
        if u.previous_state is not None:
            previous = S(u.previous_state)
        if u.retry_attempt is not None:
            retry = u.retry_attempt
        reason = u.reason
        # Kept through FAILED and its recovery attempts (D-13), until a settled state.
        keep = state is S.FAILED or (retry > 0 and state not in _SETTLED)
        if reason is None and current is not None and keep:
            reason = current.reason
        epoch = max(u.leader_epoch, -1 if current is None else current.leader_epoch)
        return MirrorPartitionStateRecord(
            name, u.topic, u.partition, state, previous, retry, reason, epoch
        )

    def _write(self, mirror_name: str, records: list[Record]) -> None:
        """Append, then apply the same records (the replay path)."""
        if not records:
            return
        partition = self.partition_for(mirror_name)
        try:
            self._append(partition, records)
        except KafkaError as e:
            raise coordinator_error(e) from e
        mirrors = self._partitions.get(partition)
        if mirrors is None:
            return  # unloaded by the append itself (a leadership change): the log has them
        for record in records:
            self._apply(mirrors, record)
        self._records[partition] += len(records)
        self._maybe_snapshot(partition, mirrors)

    def _maybe_snapshot(self, partition: int, mirrors: dict[str, _Mirror]) -> None:
        """Write the partition's whole state once its log has grown enough (D-07)."""
        threshold = self.config.snapshot_after_records
        count = self._records[partition]
        if not threshold or count < threshold:
            return
        snapshot = _full_state(mirrors)
        if not snapshot or count < 2 * len(snapshot):
            return
        try:
            base = self._append(partition, snapshot)
        except KafkaError:
            return  # the state is as it was; the next write tries again
        self._records[partition] = len(snapshot)
        if base is not None and self._delete_before is not None:
            self._delete_before(partition, base)

    # -- applying records ----------------------------------------------------------------------

    @staticmethod
    def _apply(mirrors: dict[str, _Mirror], record: Record) -> None:
        if isinstance(record, MirrorPartitionStateRecord):
            mirror = mirrors.setdefault(record.mirror_name, _Mirror())
            tp = (record.topic, record.partition)
            before = mirror.states.get(tp)
            if record.state is S.STOPPING and (before is None or before.state is not S.STOPPING):
                # A stop that begins forgets the LME of an earlier one: from here on a recorded
                # LME is this stop's own (D-09), which is how a STOPPING resumed after a crash
                # knows whether step 2 was done (kcore.mirror.machine).
                mirror.epochs.pop(tp, None)
            mirror.states[tp] = record
        elif isinstance(record, LastMirrorEpochsRecord):
            mirrors.setdefault(record.mirror_name, _Mirror()).epochs.update(record.epochs)
        elif isinstance(record, MirrorSyncedAclsRecord):
            mirrors.setdefault(record.mirror_name, _Mirror()).synced_acls = record.acls
        elif isinstance(record, MirrorTombstone):
            mirror = mirrors.get(record.mirror_name)
            if mirror is None:
                return
            if record.record_type == rec.PARTITION_STATE:
                mirror.states.clear()
            elif record.record_type == rec.LAST_MIRROR_EPOCHS:
                mirror.epochs.clear()
            elif record.record_type == rec.SYNCED_ACLS:
                mirror.synced_acls = None
            if mirror.empty():
                del mirrors[record.mirror_name]
        else:
            raise TypeError(f"not a __mirror_state record: {record!r}")

    def _lookup(self, mirror_name: str) -> dict[str, _Mirror]:
        """The mirrors of ``mirror_name``'s partition when we coordinate it; else raises."""
        if not mirror_name:
            raise KafkaError(E.INVALID_REQUEST, "the mirror name must not be empty")
        partition = self.partition_for(mirror_name)
        if partition in self._loading:
            raise KafkaError(
                E.COORDINATOR_LOAD_IN_PROGRESS, f"{rec.MIRROR_STATE}-{partition} is loading"
            )
        if partition not in self._owned:
            raise KafkaError(
                E.NOT_COORDINATOR, f"not the coordinator of mirror {mirror_name!r} ({partition})"
            )
        return self._partitions[partition]

    # -- the wire (ReadMirrorStates / WriteMirrorStates) ---------------------------------------

    def read_mirror_states(self, req: m.ReadMirrorStatesRequest) -> m.ReadMirrorStatesResponse:
        """Handle ReadMirrorStates. An empty ``Topics`` asks for every recorded partition of the
        mirror (kcore's reading: the proposal is silent). Errors are top-level."""
        R = m.ReadMirrorStatesResponse
        topics = None
        if req.topics:
            topics = {}
            for t in req.topics:
                topics.setdefault(t.name, []).extend(p.partition_index for p in t.partitions)
        try:
            states = self.read_states(req.mirror_name, topics)
        except KafkaError as e:
            return R(error_code=int(e.code), error_message=e.message)
        by_topic: dict[str, list] = {}
        for (topic, index), s in states.items():
            by_topic.setdefault(topic, []).append(
                R.PartitionResult(
                    partition_index=index,
                    last_mirror_epoch=s.last_mirror_epoch,
                    state=int(s.state),
                    previous_state=int(s.previous_state),
                    retry_attempt=s.retry_attempt,
                    reason=s.reason,
                )
            )
        return R(topics=[R.TopicResult(name=t, partitions=ps) for t, ps in by_topic.items()])

    def write_mirror_states(self, req: m.WriteMirrorStatesRequest) -> m.WriteMirrorStatesResponse:
        """Handle WriteMirrorStates: all or nothing; an error is top-level and on every
        partition (nothing was written)."""
        updates = [
            StateUpdate(
                t.name,
                p.partition_index,
                p.state,
                p.last_mirror_epoch,
                None if p.previous_state == -1 else p.previous_state,
                None if p.retry_attempt == -1 else p.retry_attempt,
                p.reason,
                p.leader_epoch,
            )
            for t in req.topics
            for p in t.partitions
        ]
        try:
            self.write_states(req.mirror_name, updates, req.stopped_topics)
        except KafkaError as e:
            return write_mirror_states_answer(req, e)
        return write_mirror_states_answer(req)


def write_mirror_states_answer(
    req: m.WriteMirrorStatesRequest, error: KafkaError | None = None
) -> m.WriteMirrorStatesResponse:
    """The WriteMirrorStates answer to ``req``: success, or ``error`` at the top level and on
    every partition (a write is all or nothing)."""
    R = m.WriteMirrorStatesResponse
    code = 0 if error is None else int(error.code)
    return R(
        error_code=code,
        error_message=None if error is None else error.message,
        topics=[
            R.TopicResult(
                name=t.name,
                partitions=[
                    R.PartitionResult(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ],
    )


def _full_state(mirrors: dict[str, _Mirror]) -> list[Record]:
    """Records that rebuild ``mirrors`` from nothing: per mirror, its states, then its epochs."""
    out: list[Record] = []
    for name, mirror in sorted(mirrors.items()):
        out += [mirror.states[tp] for tp in sorted(mirror.states)]
        if mirror.epochs:  # after the states: entering STOPPING clears an LME (see _apply)
            out.append(LastMirrorEpochsRecord(name, dict(mirror.epochs)))
        if mirror.synced_acls is not None:
            out.append(MirrorSyncedAclsRecord(name, mirror.synced_acls))
    return out


def _validate(updates: list[StateUpdate]) -> None:
    """Raise INVALID_REQUEST naming every entry that cannot be written."""
    bad: list[str] = []
    seen: set[TopicPartition] = set()
    for u in updates:
        where = f"{u.topic}-{u.partition}"
        problems = []
        if not u.topic:
            problems.append("no topic name")
        if u.partition < 0:
            problems.append("a negative partition")
        if (u.topic, u.partition) in seen:
            problems.append("given twice")
        seen.add((u.topic, u.partition))
        problems += _code_problems("state", u.state, allow_unknown=False)
        if u.previous_state is not None:
            problems += _code_problems("previous state", u.previous_state, allow_unknown=True)
        if u.retry_attempt is not None and not 0 <= u.retry_attempt <= _INT16_MAX:
            problems.append(f"retry attempt {u.retry_attempt}")
        if u.last_mirror_epoch < rec.NO_LAST_MIRROR_EPOCH:
            problems.append(f"last mirror epoch {u.last_mirror_epoch}")
        if problems:
            bad.append(f"{where} ({', '.join(problems)})")
    if bad:
        raise KafkaError(E.INVALID_REQUEST, f"cannot write mirror states: {'; '.join(bad)}")


def _check_fencing(mirror: _Mirror, updates: list[StateUpdate]) -> None:
    """Raise FENCED_LEADER_EPOCH naming every update from an older leader than recorded (see
    the module docstring)."""
    fenced = []
    for u in updates:
        current = mirror.states.get((u.topic, u.partition))
        if current is None or u.leader_epoch < 0 or u.leader_epoch >= current.leader_epoch:
            continue
        if current.state is S.STOPPED and S(u.state) is S.LOG_TRUNCATION:
            continue  # a Start: a topic created again has its epochs from 0 again
        fenced.append(
            f"{u.topic}-{u.partition} (leader epoch {u.leader_epoch} < {current.leader_epoch})"
        )
    if fenced:
        raise KafkaError(
            E.FENCED_LEADER_EPOCH,
            f"mirror state written by a former partition leader: {', '.join(fenced)}",
        )


def _code_problems(what: str, code: int, *, allow_unknown: bool) -> list[str]:
    try:
        state = S.from_code(int(code))
    except ValueError:
        return [f"{what} {code} is no state code"]
    if state is S.UNKNOWN and not allow_unknown:
        return [f"{what} UNKNOWN is the absence of state and is never written (M-35)"]
    return []
