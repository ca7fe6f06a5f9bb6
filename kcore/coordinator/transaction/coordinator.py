"""The transaction coordinator, sans-IO: typed operations, partition ownership, markers, time.

Theory of operation
-------------------
One :class:`TransactionCoordinator` per broker holds the :class:`TransactionMetadata` of every
transactional id whose ``__transaction_state`` partition this broker leads. It does no I/O:

* **Persistence** is the injected ``append(partition, entries)``: it must durably append the
  records (``acks=all``) or raise :class:`KafkaError`. Every state change is validate, append,
  then commit: the record is computed first, appended, and only then made the in-memory state.
  A failed append leaves memory as it was (one exception, Kafka's: a failed epoch fence keeps
  its bumped epoch, see :meth:`TransactionMetadata.begin_fenced_abort`) and its error becomes
  Kafka's coordinator error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...).
* **Producer ids** come from the injected ``next_producer_id()``; see the package docstring.
* **Ownership**: ``begin_loading`` / ``replay`` / ``finish_loading`` / ``unload`` follow the
  leadership of ``__transaction_state`` partitions. An id whose partition is not led here gets
  NOT_COORDINATOR; one whose partition is still loading gets COORDINATOR_LOAD_IN_PROGRESS.
  Each partition carries its *coordinator epoch* (the partition's leader epoch), which goes into
  every marker so that partition leaders can refuse markers from a deposed coordinator.
* **Markers** are outputs (:mod:`~kcore.coordinator.transaction.markers`): the coordinator
  answers EndTxn as soon as PREPARE_X is persisted (Kafka does not wait for markers), queues
  marker work, and persists COMPLETE_X when the shell reports every marker written.
* **Time** is ``now_ms`` on every call; :meth:`tick` runs the periodic jobs (abort of
  timed-out transactions every ``abort_timed_out_transactions_interval_ms``, expiration of idle
  transactional ids every ``remove_expired_transactional_ids_interval_ms``, retries) and
  :meth:`next_deadline_ms` says when to call it next.

The typed operations raise :class:`KafkaError` carrying the code Kafka's coordinator returns;
the wire-level ``handle_*`` methods (:mod:`~kcore.coordinator.transaction.handlers`) turn
requests into responses around them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kcore.coordinator.append_errors import coordinator_error
from kcore.coordinator.transaction.handlers import RequestHandlers
from kcore.coordinator.transaction.markers import MarkerJob, MarkerRequest
from kcore.coordinator.transaction.metadata import (
    ProducerIdAndEpoch,
    TopicPartition,
    TransactionMetadata,
    is_epoch_exhausted,
)
from kcore.coordinator.transaction.records import (
    LogEntry,
    TransactionLogRecord,
    TransactionLogTombstone,
    partition_for,
)
from kcore.coordinator.transaction.state import (
    EXPIRABLE_STATES,
    IllegalTransition,
    TransactionState,
)
from kcore.metadata.topic_names import CONSUMER_OFFSETS_TOPIC
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["CONSUMER_OFFSETS", "ProducerIdAndEpoch", "TransactionConfig", "TransactionCoordinator"]

CONSUMER_OFFSETS = CONSUMER_OFFSETS_TOPIC
_S = TransactionState


@dataclass(frozen=True)
class TransactionConfig:
    """The coordinator's settings, named and defaulted as Kafka's ``transaction.*`` configs
    (``transaction.max.timeout.ms``, ``transactional.id.expiration.ms``,
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``,
    ``transaction.remove.expired.transaction.cleanup.interval.ms``,
    ``transaction.state.log.num.partitions``). ``retry_backoff_ms`` spaces out retries of
    failed markers and of failed COMPLETE_X appends."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_transactions_interval_ms: int = 10_000
    remove_expired_transactional_ids_interval_ms: int = 3_600_000
    state_log_partitions: int = 50
    retry_backoff_ms: int = 100


@dataclass
class _Partition:
    """One ``__transaction_state`` partition this broker leads (or is loading)."""

    coordinator_epoch: int
    loading: bool = True
    loaded: dict[str, TransactionLogRecord] = field(default_factory=dict)
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionCoordinator(RequestHandlers):
    """See the module docstring and the package docstring for the API contract."""

    def __init__(
        self,
        config: TransactionConfig,
        append: Callable[[int, list[LogEntry]], None],
        next_producer_id: Callable[[], int],
        group_partition: Callable[[str], int],
    ) -> None:
        self.config = config
        self._append = append
        self._next_producer_id = next_producer_id
        self._group_partition = group_partition
        self._partitions: dict[int, _Partition] = {}
        self._jobs: dict[str, MarkerJob] = {}
        # 0: the first tick runs both scans, then they follow their intervals.
        self._next_abort_scan_ms = 0
        self._next_expiration_scan_ms = 0

    # -- ownership -----------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id`` (FindCoordinator)."""
        return partition_for(transactional_id, self.config.state_log_partitions)

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This broker became leader of ``partition`` at leader epoch ``coordinator_epoch``.
        Whatever was known of the partition is dropped; requests for its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until :meth:`finish_loading`. A call with an epoch older
        than the current one is stale and ignored."""
        current = self._partitions.get(partition)
        if current is not None and coordinator_epoch < current.coordinator_epoch:
            return
        self._drop(partition)
        self._partitions[partition] = _Partition(coordinator_epoch)

    def replay(self, partition: int, entry: LogEntry | None) -> None:
        """Apply one record read from ``partition`` during loading, in log order (None, an
        unknown key version from :func:`decode`, is skipped). The latest record per id wins;
        a tombstone removes the id."""
        p = self._partitions.get(partition)
        if p is None or not p.loading:
            raise ValueError(f"__transaction_state-{partition} is not loading")
        if entry is None:
            return
        if isinstance(entry, TransactionLogTombstone):
            p.loaded.pop(entry.transactional_id, None)
        else:
            p.loaded[entry.transactional_id] = entry

    def finish_loading(self, partition: int, now_ms: int) -> None:
        """The whole partition was replayed: serve its ids. Transactions found in
        PREPARE_COMMIT / PREPARE_ABORT get their markers (re)sent (see :meth:`drain_markers`)
        and complete once written, exactly as if this coordinator had decided them."""
        p = self._partitions.get(partition)
        if p is None or not p.loading:
            raise ValueError(f"__transaction_state-{partition} is not loading")
        p.txns = {tid: TransactionMetadata.from_record(r) for tid, r in p.loaded.items()}
        p.loaded = {}
        p.loading = False
        for txn in p.txns.values():
            if txn.state.is_prepare:
                self._start_markers(txn, p, now_ms)

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """This broker no longer leads ``partition``: forget its ids and their marker work.
        With ``coordinator_epoch``, only if it is not older than the loaded epoch."""
        current = self._partitions.get(partition)
        if current is None:
            return
        if coordinator_epoch is not None and coordinator_epoch < current.coordinator_epoch:
            return
        self._drop(partition)

    def _drop(self, partition: int) -> None:
        p = self._partitions.pop(partition, None)
        if p is not None:
            for tid in p.txns:
                self._jobs.pop(tid, None)

    def owned_partitions(self) -> dict[int, int]:
        """Partition -> coordinator epoch of every partition led here (loaded or loading)."""
        return {n: p.coordinator_epoch for n, p in self._partitions.items()}

    def _owner(self, transactional_id: str) -> tuple[int, _Partition]:
        n = self.partition_for(transactional_id)
        p = self._partitions.get(n)
        if p is None:
            raise KafkaError(
                ErrorCode.NOT_COORDINATOR, f"__transaction_state-{n} is not led by this broker"
            )
        if p.loading:
            raise KafkaError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"__transaction_state-{n} is loading"
            )
        return n, p

    def lookup(self, transactional_id: str) -> TransactionMetadata | None:
        """The metadata of ``transactional_id`` (None if unknown); raises NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS if this broker cannot answer for it."""
        return self._owner(transactional_id)[1].txns.get(transactional_id)

    def loading_partitions(self) -> list[int]:
        """The partitions still being loaded."""
        return sorted(n for n, p in self._partitions.items() if p.loading)

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        """The metadata of ``transactional_id`` if this broker serves it (for inspection)."""
        p = self._partitions.get(self.partition_for(transactional_id))
        return None if p is None or p.loading else p.txns.get(transactional_id)

    def all_metadata(self) -> dict[str, TransactionMetadata]:
        """Every transactional id served here (loaded partitions only)."""
        return {
            tid: txn
            for p in self._partitions.values()
            if not p.loading
            for tid, txn in p.txns.items()
        }

    # -- persistence -----------------------------------------------------------------------------

    def _persist(self, partition: int, txn: TransactionMetadata, record: TransactionLogRecord):
        """Append the prepared ``record``; commit it to memory on success, roll back on error."""
        try:
            self._append(partition, [record])
        except KafkaError as e:
            txn.abort_transition()
            raise coordinator_error(e) from e
        txn.complete_transition(record)

    # -- InitProducerId ----------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        now_ms: int,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        """A producer id and epoch for a producer.

        Without a transactional id (an idempotent producer) a fresh producer id at epoch 0.
        With one: a new id gets a new producer id at epoch 0; a known one gets its epoch bumped
        (which fences any older instance), or a new producer id once the epoch is exhausted.
        ``expected`` is KIP-360's producer id and epoch (InitProducerId v3+), sent by a producer
        that wants to continue after an abortable error: it is honoured only if it is still the
        current (or, for a lost answer, the just-replaced) one, else PRODUCER_FENCED.

        Errors: INVALID_REQUEST (empty id), INVALID_TRANSACTION_TIMEOUT (not in
        1..transaction_max_timeout_ms), NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS,
        CONCURRENT_TRANSACTIONS (a transaction is completing; also returned after this call
        aborted the id's open transaction: the client retries and then gets its epoch),
        PRODUCER_FENCED, the producer-id source's error, an append error.
        """
        if transactional_id is None:
            return ProducerIdAndEpoch(self._next_producer_id(), 0)
        if transactional_id == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            raise KafkaError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction timeout {transaction_timeout_ms} ms is not in 1.."
                f"{self.config.transaction_max_timeout_ms} ms",
            )
        partition, p = self._owner(transactional_id)
        txn = p.txns.get(transactional_id)
        created = txn is None
        if txn is None:
            txn = TransactionMetadata(
                transactional_id,
                producer_id=self._next_producer_id(),
                timeout_ms=transaction_timeout_ms,
                last_update_ms=now_ms,
            )
        if txn.pending_transition_in_progress:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in progress")
        if expected is not None and not _expected_is_plausible(txn, expected):
            raise KafkaError(
                ErrorCode.PRODUCER_FENCED,
                f"producer id {expected.producer_id} is not the current producer id "
                f"{txn.producer_id} of {transactional_id!r}",
            )
        if txn.state.is_prepare:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transaction is completing")
        if txn.state is _S.ONGOING:
            # Abort the open transaction first with a bumped epoch, which fences its producer.
            # That epoch is never returned: the client retries, the epoch is bumped again (or a
            # new producer id is taken if the fence used up the epochs).
            self._fence_and_abort(partition, p, txn, now_ms)
            raise KafkaError(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"aborting the open transaction of {transactional_id!r}; retry",
            )
        if txn.state not in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            raise IllegalTransition(f"{transactional_id!r} is {txn.state.kafka_name}")
        if txn.is_producer_epoch_exhausted and (
            expected is None or expected.producer_epoch == txn.producer_epoch
        ):
            record = txn.prepare_producer_id_rotation(
                self._next_producer_id(), transaction_timeout_ms, now_ms, expected is not None
            )
        else:
            record = txn.prepare_increment_epoch(
                transaction_timeout_ms,
                None if expected is None else expected.producer_epoch,
                now_ms,
            )
        self._persist(partition, txn, record)
        if created:
            p.txns[transactional_id] = txn
        return ProducerIdAndEpoch(txn.producer_id, txn.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------

    def _checked(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[int, _Partition, TransactionMetadata]:
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        partition, p = self._owner(transactional_id)
        txn = p.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not the one of {transactional_id!r}",
            )
        if txn.producer_epoch != producer_epoch:
            raise KafkaError(
                ErrorCode.PRODUCER_FENCED,
                f"epoch {producer_epoch} is not the current epoch {txn.producer_epoch}",
            )
        return partition, p, txn

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> None:
        """Add ``partitions`` to the transaction (opening it if none is open).

        Errors: INVALID_REQUEST, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS,
        INVALID_PRODUCER_ID_MAPPING (unknown id or another producer id), PRODUCER_FENCED (another
        epoch), CONCURRENT_TRANSACTIONS (the previous transaction is still completing), an
        append error.
        """
        partition, _, txn = self._checked(transactional_id, producer_id, producer_epoch)
        added = set(partitions)
        if txn.pending_transition_in_progress or txn.state.is_prepare:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transaction is completing")
        if txn.state is _S.ONGOING and added <= txn.partitions:
            return  # already in: nothing to persist
        self._persist(partition, txn, txn.prepare_add_partitions(added, now_ms))

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn ``verify_only`` (KIP-890 part 1, asked by partition leaders before
        accepting transactional data): NONE for each partition in the open transaction,
        TRANSACTION_ABORTABLE for the others. Whole-request errors as :meth:`add_partitions`
        raise instead; a pending completion does not matter here (Kafka neither checks it)."""
        _, _, txn = self._checked(transactional_id, producer_id, producer_epoch)
        if txn.state.is_prepare:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transaction is completing")
        return {
            tp: ErrorCode.NONE if tp in txn.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions
        }

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> None:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition, so that the
        transaction's offset commits get a marker too. Errors as :meth:`add_partitions`."""
        partition = (CONSUMER_OFFSETS, self._group_partition(group_id))
        self.add_partitions(transactional_id, producer_id, producer_epoch, [partition], now_ms)

    # -- EndTxn ----------------------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> None:
        """Commit or abort the open transaction: PREPARE_X is persisted before returning, the
        markers follow (:meth:`drain_markers`). A retry of an EndTxn that already completed
        with the same outcome succeeds.

        Errors: INVALID_REQUEST, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS,
        INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (still
        completing), INVALID_TXN_STATE (no transaction open, or the other outcome was decided),
        an append error.
        """
        partition, p, txn = self._checked(transactional_id, producer_id, producer_epoch)
        if txn.pending_transition_in_progress:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transaction is completing")
        state = txn.state
        decided = {_S.PREPARE_COMMIT: True, _S.PREPARE_ABORT: False}
        completed = {_S.COMPLETE_COMMIT: True, _S.COMPLETE_ABORT: False}
        if state is _S.ONGOING:
            target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            self._persist(partition, txn, txn.prepare_abort_or_commit(target, now_ms))
            self._start_markers(txn, p, now_ms)
            return
        if state in completed and completed[state] == commit:
            return  # a retry of the EndTxn that completed it
        if state in decided and decided[state] == commit:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction is completing")
        if state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise IllegalTransition(f"{transactional_id!r} is {state.kafka_name}")
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"cannot {'commit' if commit else 'abort'}: the transaction is {state.kafka_name}",
        )

    def _fence_and_abort(
        self, partition: int, p: _Partition, txn: TransactionMetadata, now_ms: int
    ) -> None:
        """Bump the epoch of an ONGOING transaction and persist its PREPARE_ABORT with it."""
        fence = txn.prepare_fence_epoch()
        record = txn.begin_fenced_abort(fence, now_ms)
        try:
            self._append(partition, [record])
        except KafkaError as e:
            txn.fence_failed()
            raise coordinator_error(e) from e
        txn.complete_transition(record)
        self._start_markers(txn, p, now_ms)

    # -- markers -----------------------------------------------------------------------------------------

    def _start_markers(self, txn: TransactionMetadata, p: _Partition, now_ms: int) -> None:
        """PREPARE_X is persisted: mark COMPLETE_X pending and queue the markers."""
        complete = txn.prepare_complete(now_ms)
        job = MarkerJob(
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            coordinator_epoch=p.coordinator_epoch,
            commit=txn.state is _S.PREPARE_COMMIT,
            complete_record=complete,
            remaining=set(txn.partitions),
            unsent=set(txn.partitions),
            retry_at_ms=now_ms,
        )
        self._jobs[txn.transactional_id] = job
        if job.done:
            self._try_complete(job, now_ms)

    def drain_markers(self, now_ms: int) -> list[MarkerRequest]:
        """The marker work due now: one :class:`MarkerRequest` per transaction, covering the
        partitions not yet sent (first sends and retries whose backoff has passed). Each
        handed-out partition is in flight until reported with :meth:`markers_written`."""
        out = []
        for job in self._jobs.values():
            marker = job.take(now_ms)
            if marker is not None:
                out.append(marker)
        return out

    def markers_written(
        self,
        marker: MarkerRequest,
        now_ms: int,
        errors: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Report the outcome of ``marker``: ``errors`` maps (topic, partition) to the error code
        of its WriteTxnMarkers result; a partition missing from it, or ``errors=None``, means
        written. When every partition is written, COMPLETE_X is persisted (if that append fails
        it is retried from :meth:`tick`). Stale reports are ignored."""
        job = self._jobs.get(marker.transactional_id)
        if job is None or not job.matches(marker):
            return
        if not job.report(marker, errors, now_ms, self.config.retry_backoff_ms):
            del self._jobs[marker.transactional_id]  # a newer coordinator owns it
            return
        if job.done:
            self._try_complete(job, now_ms)

    def _try_complete(self, job: MarkerJob, now_ms: int) -> None:
        tid = job.transactional_id
        try:
            partition, p = self._owner(tid)
        except KafkaError:
            self._jobs.pop(tid, None)
            return
        txn = p.txns.get(tid)
        if txn is None or p.coordinator_epoch != job.coordinator_epoch:
            self._jobs.pop(tid, None)
            return
        record = dataclasses.replace(job.complete_record, last_update_ms=now_ms)
        try:
            self._append(partition, [record])
        except KafkaError:
            # Kafka retries COORDINATOR_NOT_AVAILABLE and leaves the rest to the next leader;
            # retrying everything is the same here, as unload() drops the job on leader change.
            job.complete_retry_at_ms = now_ms + self.config.retry_backoff_ms
            return
        txn.complete_transition(record)
        del self._jobs[tid]

    def pending_markers(self) -> dict[str, MarkerJob]:
        """Transactional id -> its outstanding marker work (for inspection and tests)."""
        return dict(self._jobs)

    # -- time ----------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Run what is due at ``now_ms``: the abort of timed-out transactions, the expiration of
        idle transactional ids, retries of COMPLETE_X appends. Marker retries need no tick:
        :meth:`drain_markers` hands them out once due."""
        if now_ms >= self._next_abort_scan_ms:
            self._next_abort_scan_ms = now_ms + self.config.abort_timed_out_transactions_interval_ms
            self.abort_timed_out_transactions(now_ms)
        if now_ms >= self._next_expiration_scan_ms:
            self._next_expiration_scan_ms = (
                now_ms + self.config.remove_expired_transactional_ids_interval_ms
            )
            self.expire_transactional_ids(now_ms)
        for job in list(self._jobs.values()):
            if job.complete_retry_at_ms is not None and job.complete_retry_at_ms <= now_ms:
                job.complete_retry_at_ms = None
                self._try_complete(job, now_ms)

    def next_deadline_ms(self) -> int:
        """When :meth:`tick` (and :meth:`drain_markers`) should next run."""
        deadlines = [self._next_abort_scan_ms, self._next_expiration_scan_ms]
        deadlines += [d for job in self._jobs.values() if (d := job.next_deadline_ms()) is not None]
        return min(deadlines)

    def abort_timed_out_transactions(self, now_ms: int) -> list[str]:
        """Abort every ONGOING transaction open longer than its timeout, fencing its producer
        with an epoch bump (the producer learns it with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
        on its next call). Returns the transactional ids whose abort was persisted; a failed
        append is retried at the next scan."""
        aborted = []
        for n, p in list(self._partitions.items()):
            if p.loading:
                continue
            for tid, txn in list(p.txns.items()):
                if (
                    txn.state is _S.ONGOING
                    and not txn.pending_transition_in_progress
                    and txn.start_ms + txn.timeout_ms < now_ms
                ):
                    try:
                        self._fence_and_abort(n, p, txn, now_ms)
                    except KafkaError:
                        continue
                    aborted.append(tid)
        return aborted

    def expire_transactional_ids(self, now_ms: int) -> list[str]:
        """Remove transactional ids idle (no transaction open, no update) for
        ``transactional_id_expiration_ms``: one batch of tombstones per partition; an id is
        removed only if its partition's batch was appended. Returns the removed ids."""
        expired = []
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for n, p in list(self._partitions.items()):
            if p.loading:
                continue
            victims = [
                txn
                for txn in p.txns.values()
                if txn.state in EXPIRABLE_STATES
                and not txn.pending_transition_in_progress
                and txn.last_update_ms <= horizon
            ]
            if not victims:
                continue
            for txn in victims:
                txn.prepare_dead()
            try:
                self._append(n, [TransactionLogTombstone(t.transactional_id) for t in victims])
            except KafkaError:
                for txn in victims:
                    txn.abort_transition()
                continue
            for txn in victims:
                del p.txns[txn.transactional_id]
                expired.append(txn.transactional_id)
        return expired


def _expected_is_plausible(txn: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
    """Whether a KIP-360 request may proceed (its epoch is checked by the epoch bump):
    the id was just created (no epoch yet), or it names the current producer id, or it names
    the previous producer id with an exhausted epoch (a retry of a producer id rotation whose
    answer was lost)."""
    return (
        txn.producer_epoch == -1
        or expected.producer_id == txn.producer_id
        or (
            expected.producer_id == txn.previous_producer_id
            and is_epoch_exhausted(expected.producer_epoch)
        )
    )
