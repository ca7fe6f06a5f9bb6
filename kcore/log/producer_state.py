"""Producer state of one partition: idempotence, transactions and the last stable offset.

Theory of operation
-------------------
For every producer id that wrote to the partition the manager keeps a
:class:`ProducerStateEntry`: the producer epoch, the metadata of its last five batches (for
duplicate detection, as Kafka keeps ``max.in.flight.requests.per.connection`` ≤ 5), the
coordinator epoch of its last transaction marker, and the first offset of its ongoing
transaction, if any.

An append goes through *validate, then commit* (Kafka's ``prepareUpdate`` → ``update``): the
log asks :meth:`ProducerStateManager.prepare_update` for a :class:`ProducerAppendInfo`, feeds it
every batch of the append (which may raise a :class:`~kcore.protocol.errors.KafkaError` with the
code the produce response carries), and only once the bytes are in the segment calls
:meth:`ProducerStateManager.update`. A refused append changes nothing.

Checks depend on who appends (:class:`AppendOrigin`): a CLIENT append is checked for epoch
fencing, sequence continuity and transactional consistency; a REPLICATION append (a follower, or
the mirror fetcher copying a source cluster's batches) is trusted and only recorded, exactly as
Kafka's followers do; a COORDINATOR append (transaction markers written by the coordinator) is
checked for coordinator-epoch fencing.

Transactions: a transactional data batch opens a transaction for its producer at the batch's
first offset; a COMMIT/ABORT control batch completes it (:class:`CompletedTxn`). The *first
unstable offset* is the first offset of the earliest transaction that is still open or whose
marker is not yet below the high watermark; the log's last stable offset is the smaller of it and
the high watermark. Aborted transactions go to the transaction index (``last_stable_offset`` of
:meth:`ProducerStateManager.last_stable_offset_after` is the value Kafka records there).

Mirroring (decisions D-17, D-03): mirrored batches carry producer ids rewritten to
``-(id + 2)``, so **every id except -1 is a real producer id** here — unlike Kafka's
``hasProducerId`` (``id > -1``). A MIRROR_PID_RESET control record calls :meth:`reset_producers`,
expiring every producer so producers writing after a failover start fresh.

Transaction verification (KIP-890 part 1, Kafka's ``VerificationStateEntry``): before the first
transactional batch of a producer's transaction is appended, the produce path asks the
transaction coordinator whether the partition is in the transaction. It first takes a
*verification guard* (:meth:`ProducerStateManager.maybe_start_transaction_verification`), a
fresh object per producer, and appends only if the guard is still the producer's one when the
answer is in (:meth:`ProducerStateManager.check_verified`). Any transactional batch or marker
of that producer clears the guard (in :meth:`ProducerStateManager.update`), so an ABORT marker
written while the question was out makes the stale "yes" useless: without the guard the data
would open a transaction the coordinator has already finished -- a hanging transaction (the
ABA case Kafka's ``UnifiedLog`` comment describes). Once the transaction's first batch is in,
``current_txn_first_offset`` says the transaction is open and later batches need no guard.
Guards are in memory only: a restart or a new leader just verifies again.

Snapshots: :meth:`take_snapshot` writes the entries to ``<offset>.snapshot`` (format in
``producer_snapshot.py``) at segment roll and clean shutdown; recovery loads the newest snapshot
at or below the recovery point and replays the log from there (``truncate_and_reload``).
Ongoing transactions are rebuilt from the entries' ``current_txn_first_offset``.

Only the owning partition log calls this class, under its lock.
"""

from __future__ import annotations

import enum
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kcore.log.errors import CorruptSnapshotError
from kcore.log.producer_snapshot import ProducerSnapshotEntry, read_snapshot, write_snapshot
from kcore.protocol.errors import ErrorCode, KafkaError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 0x7FFFFFFF
#: Batches remembered per producer for duplicate detection (Kafka's NUM_BATCHES_TO_RETAIN).
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
SNAPSHOT_SUFFIX = ".snapshot"


class AppendOrigin(enum.Enum):
    """Who writes a batch; it decides which checks the log applies.

    ``REPLICATION`` and ``MIRROR`` are trusted: their batches were validated where they were
    first written (the leader, the source cluster), so producer epochs and coordinator epochs
    are only recorded. ``MIRROR`` is the cluster mirror's own writes to a read-only mirror
    topic (mirrored batches, the ABORT markers and MIRROR_PID_RESET of STOPPING): the only
    origin the mirror write guard lets in (decision D-18).
    """

    CLIENT = "client"
    REPLICATION = "replication"  # followers: trusted, only recorded
    COORDINATOR = "coordinator"  # transaction markers
    MIRROR = "mirror"  # the cluster mirror: trusted like replication, and allowed on mirrors


#: Origins whose producer and coordinator epochs are recorded, never checked.
TRUSTED_ORIGINS = frozenset({AppendOrigin.REPLICATION, AppendOrigin.MIRROR})


def has_producer_id(producer_id: int) -> bool:
    """True for every id but -1: mirrored producers have negative ids (D-17)."""
    return producer_id != NO_PRODUCER_ID


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Sequences wrap from INT32_MAX to 0 (Kafka's DefaultRecordBatch.decrementSequence)."""
    return sequence - decrement if sequence >= decrement else INT32_MAX - (decrement - sequence) + 1


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, delta: int, ts: int) -> None:
        if epoch != self.producer_epoch:  # a new epoch starts a new sequence space
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        self.last_timestamp = ts

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class VerificationGuard:
    """A token compared by identity: one per verification started (Kafka's
    ``VerificationGuard``). The produce path holds it across the coordinator round trip."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"VerificationGuard({id(self):#x})"


@dataclass(slots=True)
class VerificationStateEntry:
    """A verification in progress for one producer (Kafka's ``VerificationStateEntry``).

    ``timestamp`` (ms) lets :meth:`ProducerStateManager.remove_expired_producers` forget an
    entry whose verification failed and was never retried. Kafka also keeps the lowest sequence
    seen during verification to refuse an out-of-order first batch; kcore does not (yet).
    """

    timestamp: int
    verification_guard: VerificationGuard = field(default_factory=VerificationGuard)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the marker
    is_aborted: bool


@dataclass(slots=True)
class _TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None  # the marker's offset once completed


class ProducerAppendInfo:
    """The pending update of one producer's entry during one append (validate, then commit)."""

    def __init__(
        self, partition: str, producer_id: int, current: ProducerStateEntry | None, origin
    ) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.origin = origin
        self.current = current
        self.entry = current.copy() if current else ProducerStateEntry(producer_id)
        self.started_transactions: list[_TxnMetadata] = []
        self.completed_transactions: list[CompletedTxn] = []
        #: A transactional batch or a marker was recorded: the producer's verification guard,
        #: if any, is spent (Kafka's ``UnifiedLog.updateProducers``).
        self.saw_transactional = False

    def _check_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self.entry.producer_epoch and self.origin not in TRUSTED_ORIGINS:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"epoch {producer_epoch} of producer {self.producer_id} at offset {offset} in "
                f"{self.partition} is older than its current epoch {self.entry.producer_epoch}",
            )

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        entry = self.entry
        if producer_epoch != entry.producer_epoch:
            # A new (bumped) epoch must start at sequence 0, unless we know no epoch at all
            # (the producer's state was removed by retention, DeleteRecords or expiry).
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {self.producer_id} in {self.partition}: a new epoch "
                    f"{producer_epoch} must start at sequence 0, got {first_seq} at {offset}",
                )
            return
        current_last = entry.last_seq
        if current_last == NO_SEQUENCE and self.current is not None:
            current_last = self.current.last_seq
        if entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(current_last, first_seq):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {self.producer_id} in {self.partition}: sequence {first_seq} at "
                f"offset {offset} does not follow {current_last} (epoch {producer_epoch})",
            )

    def append_data_batch(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Validate and record a data batch of this producer: the epoch for every origin but
        replication (a coordinator's transactional offset commit from a fenced producer is
        refused too, as in Kafka), sequences and transaction state for CLIENT only."""
        self._check_epoch(producer_epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
            if not is_transactional and self.entry.current_txn_first_offset is not None:
                raise KafkaError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"producer {self.producer_id} wrote a non-transactional batch to "
                    f"{self.partition} while its transaction is open",
                )
        self.entry.add_batch(
            producer_epoch, last_seq, last_offset, last_offset - first_offset, timestamp
        )
        if is_transactional:
            self.saw_transactional = True
        if is_transactional and self.entry.current_txn_first_offset is None:
            self.entry.current_txn_first_offset = first_offset
            self.started_transactions.append(_TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self,
        commit: bool,
        coordinator_epoch: int,
        producer_epoch: int,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn:
        """Record a COMMIT/ABORT marker at ``offset``; returns the transaction it completes."""
        self._check_epoch(producer_epoch, offset)
        if self.entry.coordinator_epoch > coordinator_epoch and self.origin not in TRUSTED_ORIGINS:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {self.producer_id} in {self.partition} has coordinator "
                f"epoch {coordinator_epoch}, older than {self.entry.coordinator_epoch}",
            )
        entry = self.entry
        if producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = producer_epoch
        first = entry.current_txn_first_offset
        completed = CompletedTxn(
            self.producer_id, offset if first is None else first, offset, not commit
        )
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        self.completed_transactions.append(completed)
        self.saw_transactional = True
        return completed


class ProducerStateManager:
    """All producer state of one partition (see the module docstring)."""

    def __init__(
        self,
        partition_dir: Path | str,
        partition: str = "",
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = Path(partition_dir)
        self.partition = partition or self.dir.name
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> txn, in offset order (appends only ever add larger first offsets).
        self._ongoing: dict[int, _TxnMetadata] = {}
        self._unreplicated: dict[int, _TxnMetadata] = {}  # completed, marker not below the HW
        # producer id -> the verification in progress (module docstring); in memory only.
        self._verifications: dict[int, VerificationStateEntry] = {}
        #: The offset up to which this state reflects the log (exclusive).
        self.map_end_offset = 0

    # -- appends ---------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        return ProducerAppendInfo(
            self.partition, producer_id, self.producers.get(producer_id), origin
        )

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def update(self, info: ProducerAppendInfo) -> None:
        """Commit a validated append (call after the bytes are in the log)."""
        self.producers[info.producer_id] = info.entry
        for txn in info.started_transactions:
            self._ongoing[txn.first_offset] = txn
        if info.saw_transactional and self._verifications:
            # The transaction's first batch is in (it is ongoing now) or a marker ended it:
            # either way the guard has served, and a verification racing the marker must fail.
            self._verifications.pop(info.producer_id, None)

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            # A marker without data from this producer in the log (an empty transaction):
            # nothing was unstable, so nothing waits for the high watermark either.
            return
        txn.last_offset = completed.last_offset
        self._unreplicated[txn.first_offset] = txn

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction in the transaction index.

        It is the first offset of the earliest *other* ongoing transaction, or the marker's
        offset + 1 when none is open (Kafka's ``lastStableOffset(completedTxn)``).
        """
        for first, txn in self._ongoing.items():
            if txn.producer_id != completed.producer_id:
                return first
        return completed.last_offset + 1

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -- transaction verification (KIP-890 part 1) ------------------------------------------

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """True when this producer's transaction at this epoch already has data here: its
        later batches need no verification (Kafka's ``UnifiedLog.hasOngoingTransaction``)."""
        entry = self.producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer_epoch
        )

    def maybe_start_transaction_verification(
        self, producer_id: int, producer_epoch: int, now_ms: int
    ) -> VerificationGuard | None:
        """The guard to hold while the coordinator is asked about this partition, or None when
        the producer's transaction is already ongoing here (nothing to ask).

        A verification already in progress for the producer is joined (its guard returned), as
        Kafka's ``maybeCreateVerificationStateEntry``: concurrent requests of one producer share
        it, and the first append or marker spends it for all of them.
        """
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return None
        entry = self._verifications.get(producer_id)
        if entry is None:
            entry = self._verifications[producer_id] = VerificationStateEntry(now_ms)
        return entry.verification_guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        entry = self._verifications.get(producer_id)
        return None if entry is None else entry.verification_guard

    def check_verified(
        self, producer_id: int, producer_epoch: int, guard: VerificationGuard | None
    ) -> None:
        """Raise INVALID_TXN_STATE unless a transactional batch of this producer may be
        appended now: its transaction is ongoing here, or ``guard`` is still its guard (no
        marker or other transactional append came in since the verification started).

        Call it with no checkpoint between it and the append, so nothing can slip in.
        """
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return
        if guard is None or self.verification_guard(producer_id) is not guard:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id} in {self.partition}: Record was not part of an "
                "ongoing transaction",
            )

    # -- the last stable offset ------------------------------------------------------------

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is below the high watermark are stable for everyone."""
        done = [k for k, t in self._unreplicated.items() if t.last_offset < high_watermark]
        for k in done:
            del self._unreplicated[k]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open or not-yet-replicated transaction."""
        # _ongoing is in first-offset order (transactions open in offset order), but
        # _unreplicated is in completion order: markers may complete them in any order.
        candidates = [next(iter(self._ongoing))] if self._ongoing else []
        if self._unreplicated:
            candidates.append(min(self._unreplicated))
        return min(candidates) if candidates else None

    @property
    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every open transaction, oldest first."""
        return [(t.producer_id, t.first_offset) for t in self._ongoing.values()]

    # -- expiry and reset ------------------------------------------------------------------

    def _idle_too_long(self, timestamp: int, now_ms: int) -> bool:
        """Kafka's isProducerExpired clock: idle for ``producer.id.expiration.ms`` or more
        (expired at that very millisecond, not one later)."""
        return now_ms - timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open transaction."""
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset is None and self._idle_too_long(e.last_timestamp, now_ms)
        ]
        for pid in expired:
            del self.producers[pid]
        # A verification that failed and was never retried (Kafka expires these on the same
        # producer.id.expiration.ms).
        stale = [
            pid
            for pid, v in self._verifications.items()
            if self._idle_too_long(v.timestamp, now_ms)
        ]
        for pid in stale:
            del self._verifications[pid]
        return expired

    def reset_producers(self) -> None:
        """MIRROR_PID_RESET (D-03): expire all producer state at failover.

        Open transactions were resolved by the ABORT markers STOPPING writes first (D-15); any
        still tracked stay in the LSO computation, so no uncommitted data is exposed.
        """
        self.producers.clear()
        self._verifications.clear()

    def truncate_fully(self) -> None:
        """Drop all state (the log was emptied or restarted at a new offset)."""
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._verifications.clear()
        self.map_end_offset = 0

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX) and name[:-9].isdigit():
                out.append(int(name[:-9]))
        return sorted(out)

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self) -> Path:
        """Write the state as of ``map_end_offset`` (at roll and at clean shutdown)."""
        entries = [
            ProducerSnapshotEntry(
                producer_id=e.producer_id,
                producer_epoch=e.producer_epoch,
                last_sequence=e.last_seq,
                last_offset=e.last_data_offset,
                offset_delta=e.batches[-1].offset_delta if e.batches else 0,
                timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_first_offset=(
                    -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
                ),
            )
            for e in self.producers.values()
        ]
        path = self.snapshot_path(self.map_end_offset)
        write_snapshot(path, entries)
        return path

    def delete_snapshots_before(self, offset: int) -> None:
        for o in self.snapshot_offsets():
            if o < offset:
                self.snapshot_path(o).unlink(missing_ok=True)

    def delete_snapshots_after(self, offset: int) -> None:
        for o in self.snapshot_offsets():
            if o > offset:
                self.snapshot_path(o).unlink(missing_ok=True)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> int:
        """Load the newest valid snapshot at or below ``log_end_offset``.

        Snapshots beyond the log end are deleted (they describe data that is gone), as are
        corrupt ones (the caller rebuilds from an older snapshot or the log start). Returns the
        offset from which the caller must replay the log to complete the state.
        """
        self.delete_snapshots_after(log_end_offset)
        self.truncate_fully()
        for offset in reversed(self.snapshot_offsets()):
            try:
                entries = read_snapshot(self.snapshot_path(offset))
            except (CorruptSnapshotError, OSError):
                self.snapshot_path(offset).unlink(missing_ok=True)
                continue
            if offset < log_start_offset:
                break
            self._load_entries(entries, now_ms)
            self.map_end_offset = offset
            return offset
        self.map_end_offset = log_start_offset
        return log_start_offset

    def _load_entries(self, entries: list[ProducerSnapshotEntry], now_ms: int) -> None:
        for s in entries:
            txn_first = None if s.current_txn_first_offset < 0 else s.current_txn_first_offset
            if txn_first is None and self._idle_too_long(s.timestamp, now_ms):
                continue  # expired while we were down
            entry = ProducerStateEntry(
                s.producer_id,
                s.producer_epoch,
                coordinator_epoch=s.coordinator_epoch,
                last_timestamp=s.timestamp,
                current_txn_first_offset=txn_first,
            )
            if s.last_offset >= 0:
                entry.batches.append(
                    BatchMetadata(s.last_sequence, s.last_offset, s.offset_delta, s.timestamp)
                )
            self.producers[s.producer_id] = entry
            if txn_first is not None:
                self._ongoing[txn_first] = _TxnMetadata(s.producer_id, txn_first)
        self._ongoing = dict(sorted(self._ongoing.items()))
