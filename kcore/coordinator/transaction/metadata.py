"""The in-memory state of one transactional id, changed only through checked transitions.

Theory of operation
-------------------
A :class:`TransactionMetadata` is what the coordinator knows about one transactional id: its
producer id and epoch, the open transaction's partitions, timestamps, and the
:class:`~kcore.coordinator.transaction.state.TransactionState`.

Every change is *validate, then commit*, as Kafka's ``TransactionMetadata``:

1. a ``prepare_*`` method checks the transition against the table, computes the complete new
   state as a :class:`~kcore.coordinator.transaction.records.TransactionLogRecord` (the very
   record to persist) and marks the metadata with ``pending_state``;
2. the coordinator appends that record to ``__transaction_state``;
3. on success :meth:`complete_transition` makes the record the current state; on failure
   :meth:`abort_transition` clears ``pending_state`` and nothing else has changed.

While a transition is pending, no other may start (``prepare_*`` raises
:class:`IllegalTransition`); requests that find one answer CONCURRENT_TRANSACTIONS. In kcore the
append is synchronous, so the only transition that stays pending between calls is
``COMPLETE_COMMIT``/``COMPLETE_ABORT`` while the markers are being written.

Epochs: a producer may never use ``32767`` (``Short.MaxValue``) so that the coordinator can
always fence it by one more bump; an epoch of ``32766`` or more is *exhausted* and the next
InitProducerId moves to a new producer id at epoch 0 (:data:`MAX_CLIENT_EPOCH`).

``previous_producer_id`` is the producer id used before the latest producer id rotation (-1 if
none); it lets a retried KIP-360 InitProducerId that carries the old id be recognised.
``next_producer_id`` belongs to transaction version 2 and stays -1 here.

Pure: no I/O; time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kcore.coordinator.transaction.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionLogRecord,
)
from kcore.coordinator.transaction.state import (
    IllegalTransition,
    TransactionState,
    check_transition,
)
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "MAX_CLIENT_EPOCH",
    "ProducerIdAndEpoch",
    "TopicPartition",
    "TransactionMetadata",
    "is_epoch_exhausted",
]

# Short.MaxValue - 1: the highest epoch handed to a client; Short.MaxValue is kept for fencing.
MAX_CLIENT_EPOCH = 32766
_MAX_EPOCH = 32767

TopicPartition = tuple[str, int]

_S = TransactionState


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    """A producer id with one of its epochs (what InitProducerId hands out)."""

    producer_id: int
    producer_epoch: int


def is_epoch_exhausted(epoch: int) -> bool:
    """True when ``epoch`` may not be bumped for a client any more (>= 32766)."""
    return epoch >= MAX_CLIENT_EPOCH


def _group(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        out.setdefault(topic, []).append(partition)
    return out


def _flatten(partitions: dict[str, list[int]]) -> set[TopicPartition]:
    return {(topic, p) for topic, ids in partitions.items() for p in ids}


@dataclass(eq=False)
class TransactionMetadata:
    """Mutable state of one transactional id. Change it only through ``prepare_*`` followed by
    :meth:`complete_transition` or :meth:`abort_transition`."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    state: TransactionState = _S.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None
    # A fence whose PrepareAbort append failed left the bumped epoch in memory (see the
    # coordinator); the next fence reuses it instead of bumping again.
    has_failed_epoch_fence: bool = False

    # -- conversion ---------------------------------------------------------------------------

    @classmethod
    def from_record(cls, record: TransactionLogRecord) -> TransactionMetadata:
        """The metadata a loaded record describes (no pending state)."""
        return cls(
            transactional_id=record.transactional_id,
            producer_id=record.producer_id,
            previous_producer_id=record.previous_producer_id,
            next_producer_id=record.next_producer_id,
            producer_epoch=record.producer_epoch,
            last_producer_epoch=record.last_producer_epoch,
            timeout_ms=record.timeout_ms,
            state=record.state,
            partitions=_flatten(record.partitions),
            start_ms=record.start_ms,
            last_update_ms=record.last_update_ms,
            client_transaction_version=record.client_transaction_version,
        )

    def to_record(self) -> TransactionLogRecord:
        """The current state as the record that would persist it."""
        return self._target(self.state)

    def _target(self, state: TransactionState, **changes) -> TransactionLogRecord:
        values = dict(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=state,
            partitions=_group(self.partitions),
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            client_transaction_version=self.client_transaction_version,
        )
        values.update(changes)
        return TransactionLogRecord(**values)

    # -- queries ------------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_open_transaction(self) -> bool:
        """Ongoing or being completed: at most one such transaction exists per id."""
        return self.state in (_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT)

    # -- prepare: validate and compute the record to persist ---------------------------------

    def _prepare(self, target: TransactionLogRecord) -> TransactionLogRecord:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: cannot prepare "
                f"{target.state.kafka_name} while {self.pending_state.kafka_name} is pending"
            )
        if target.producer_id < 0:
            raise IllegalTransition(f"illegal producer id {target.producer_id}")
        if target.state is not _S.DEAD and not 0 <= target.producer_epoch <= _MAX_EPOCH:
            raise IllegalTransition(f"illegal producer epoch {target.producer_epoch}")
        check_transition(self.transactional_id, self.state, target.state)
        self.pending_state = target.state
        return target

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TransactionLogRecord:
        """InitProducerId on the same producer id: to EMPTY with the epoch bumped.

        ``expected_epoch`` is the epoch a KIP-360 request carries (None for a plain
        InitProducerId). When it is the current epoch (or none was ever given out) the epoch
        is bumped and the old one remembered as the last epoch; when it is the last epoch this
        is a retry of a bump whose answer was lost, so the current epoch is returned again;
        otherwise the caller was fenced: :class:`KafkaError` PRODUCER_FENCED.
        """
        if expected_epoch is None:
            epoch, last = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise KafkaError(
                ErrorCode.PRODUCER_FENCED,
                f"expected epoch {expected_epoch} is neither the current epoch "
                f"{self.producer_epoch} nor the last epoch {self.last_producer_epoch}",
            )
        if epoch != self.producer_epoch and self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"no epoch left to bump for producer id {self.producer_id}")
        return self._prepare(
            self._target(
                _S.EMPTY,
                producer_epoch=epoch,
                last_producer_epoch=last,
                timeout_ms=timeout_ms,
                partitions={},
                start_ms=-1,
                last_update_ms=now_ms,
            )
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TransactionLogRecord:
        """InitProducerId once the epoch is exhausted: to EMPTY with a new producer id at epoch
        0. With ``record_last_epoch`` (a KIP-360 request) the old epoch is kept as the last
        epoch so that a retry carrying the old id and epoch is recognised."""
        if self.has_open_transaction:
            raise IllegalTransition("cannot rotate the producer id of an open transaction")
        return self._prepare(
            self._target(
                _S.EMPTY,
                producer_id=new_producer_id,
                previous_producer_id=self.producer_id,
                producer_epoch=0,
                last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms,
                partitions={},
                start_ms=-1,
                last_update_ms=now_ms,
            )
        )

    def prepare_add_partitions(
        self, added: Iterable[TopicPartition], now_ms: int
    ) -> TransactionLogRecord:
        """AddPartitionsToTxn / AddOffsetsToTxn: to ONGOING with the union of partitions. The
        first add of a transaction sets its start time (what the timeout counts from)."""
        start = now_ms if self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT) else None
        return self._prepare(
            self._target(
                _S.ONGOING,
                partitions=_group(self.partitions | set(added)),
                start_ms=self.start_ms if start is None else start,
                last_update_ms=now_ms,
            )
        )

    def prepare_abort_or_commit(
        self, target: TransactionState, now_ms: int
    ) -> TransactionLogRecord:
        """EndTxn: to PREPARE_COMMIT or PREPARE_ABORT, partitions unchanged."""
        if not target.is_prepare:
            raise IllegalTransition(f"{target.kafka_name} is not a prepare state")
        return self._prepare(self._target(target, last_update_ms=now_ms))

    def prepare_fence_epoch(self) -> TransactionLogRecord:
        """Fence the producer of the open transaction: pending PREPARE_EPOCH_FENCE at epoch + 1
        (never persisted; the coordinator follows it with the PREPARE_ABORT that is). After a
        failed fence the already-bumped epoch is reused, so a fence bumps at most once."""
        if self.producer_epoch >= _MAX_EPOCH and not self.has_failed_epoch_fence:
            raise IllegalTransition(f"cannot fence producer id {self.producer_id} at epoch 32767")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            self._target(
                _S.PREPARE_EPOCH_FENCE, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH
            )
        )

    def begin_fenced_abort(self, fence: TransactionLogRecord, now_ms: int) -> TransactionLogRecord:
        """Turn a pending epoch fence into the PREPARE_ABORT to persist.

        As Kafka, the bumped epoch is taken into memory *before* the append: if the append fails
        (its outcome then unknown) the zombie producer stays fenced; ``has_failed_epoch_fence``
        is then set by :meth:`fence_failed` so the next fence does not bump again."""
        if self.pending_state is not _S.PREPARE_EPOCH_FENCE:
            raise IllegalTransition("no epoch fence is pending")
        self.pending_state = None
        self.producer_epoch = fence.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        # The table's PREPARE_EPOCH_FENCE -> PREPARE_ABORT edge: the state itself stays ONGOING.
        check_transition(self.transactional_id, _S.PREPARE_EPOCH_FENCE, _S.PREPARE_ABORT)
        return self.prepare_abort_or_commit(_S.PREPARE_ABORT, now_ms)

    def fence_failed(self) -> None:
        """The PREPARE_ABORT of a fence could not be appended."""
        self.abort_transition()
        self.has_failed_epoch_fence = True

    def prepare_complete(self, now_ms: int) -> TransactionLogRecord:
        """All markers written: PREPARE_X -> COMPLETE_X, partitions forgotten."""
        target = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._prepare(self._target(target, partitions={}, last_update_ms=now_ms))

    def prepare_dead(self) -> TransactionLogRecord:
        """Expiration of an idle transactional id (a tombstone is written for it)."""
        return self._prepare(self._target(_S.DEAD, partitions={}))

    # -- commit or roll back ------------------------------------------------------------------

    def complete_transition(self, record: TransactionLogRecord) -> None:
        """Make the appended ``record`` the current state. Checks, as Kafka does, that it is
        the pending transition and that it keeps the producer id/epoch rules."""
        target = record.state
        if self.pending_state is not target or target in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: completing "
                f"{target.kafka_name} but pending is "
                f"{self.pending_state.kafka_name if self.pending_state else None}"
            )
        same_producer = (
            record.producer_id == self.producer_id and record.producer_epoch == self.producer_epoch
        )
        new_partitions = _flatten(record.partitions)
        if target is _S.EMPTY:
            bumped = record.producer_epoch == self.producer_epoch + 1 or (
                record.producer_epoch == 0 and record.producer_id != self.producer_id
            )
            ok = (same_producer or bumped) and not new_partitions and record.start_ms == -1
        elif target is _S.ONGOING:
            ok = same_producer and self.partitions <= new_partitions
        elif target.is_prepare:
            ok = same_producer and self.partitions == new_partitions
        else:  # complete
            ok = same_producer and not new_partitions and record.start_ms != -1
        if not ok:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: unexpected {record} for {self}"
            )
        self.producer_id = record.producer_id
        self.previous_producer_id = record.previous_producer_id
        self.next_producer_id = record.next_producer_id
        self.producer_epoch = record.producer_epoch
        self.last_producer_epoch = record.last_producer_epoch
        self.timeout_ms = record.timeout_ms
        self.partitions = new_partitions
        self.start_ms = record.start_ms
        self.last_update_ms = record.last_update_ms
        self.client_transaction_version = record.client_transaction_version
        # The log now holds this epoch again, which ends any failed-fence episode.
        self.has_failed_epoch_fence = False
        self.state = target
        self.pending_state = None

    def abort_transition(self) -> None:
        """The append failed: forget the pending transition; nothing else changed."""
        self.pending_state = None
