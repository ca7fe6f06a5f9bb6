"""Marker work: the COMMIT/ABORT markers a decided transaction still owes its partitions.

Theory of operation
-------------------
Once PREPARE_COMMIT or PREPARE_ABORT is persisted, the outcome is final and every partition of
the transaction must receive a control record (a *marker*) saying so, written with the
producer id and epoch of the transaction and the *coordinator epoch* (the leader epoch of the
``__transaction_state`` partition that decided it; partition leaders refuse markers from an
older coordinator epoch). Only when all are written may the coordinator persist
COMPLETE_COMMIT / COMPLETE_ABORT.

A :class:`MarkerJob` tracks that for one transaction: which partitions are not yet confirmed
(``remaining``), which of those are waiting to be handed to the shell (``unsent``, the rest
are in flight), and when a retry may go out. The shell takes work with
``TransactionCoordinator.drain_markers(now_ms)`` — one :class:`MarkerRequest` per transaction —
sends it (grouping partitions by leader into WriteTxnMarkers requests; :meth:`MarkerRequest.
to_writable_marker` builds the entry), and reports the outcome with
``markers_written(marker, now_ms, errors)``. Per partition:

* NONE: written. A partition whose topic was deleted must be reported as NONE too (Kafka skips
  markers for partitions with no leader).
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: a newer coordinator (or producer
  epoch) owns this transaction; this coordinator stops working on it, as Kafka does. The
  metadata keeps its pending completion until the partition is unloaded.
* anything else (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, a lost connection, ...): retried
  after ``retry_backoff_ms``.

A report whose marker does not match the job (stale coordinator epoch, another producer epoch)
is ignored, so a late answer can never complete the wrong transaction.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kcore.coordinator.transaction.metadata import TopicPartition
from kcore.coordinator.transaction.records import TransactionLogRecord
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

__all__ = ["ABANDON_ERRORS", "MarkerJob", "MarkerRequest", "errors_from_marker_result"]

# Errors after which Kafka stops sending a transaction's markers: someone newer owns it.
ABANDON_ERRORS = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)


@dataclass(frozen=True)
class MarkerRequest:
    """Markers to write for one transaction: ``commit`` says COMMIT or ABORT; ``partitions``
    are (topic, partition) pairs, sorted. Hand the same object back to ``markers_written``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    transaction_version: int = 0

    def to_writable_marker(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> m.WriteTxnMarkersRequest.WritableTxnMarker:
        """The WriteTxnMarkers entry for ``partitions`` (default: all of them); the shell calls
        this once per destination broker with that broker's share of the partitions."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions if partitions is None else partitions):
            by_topic.setdefault(topic, []).append(partition)
        return m.WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_result=self.commit,
            topics=[
                m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                for t, ps in by_topic.items()
            ],
            coordinator_epoch=self.coordinator_epoch,
            transaction_version=self.transaction_version,
        )


def errors_from_marker_result(
    result: m.WriteTxnMarkersResponse.WritableTxnMarkerResult,
) -> dict[TopicPartition, int]:
    """The per-partition error codes of one WriteTxnMarkers response entry, in the form
    ``markers_written`` takes."""
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in result.topics
        for p in topic.partitions
    }


@dataclass
class MarkerJob:
    """The marker work still owed by one decided transaction (internal to the coordinator)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    # The COMPLETE_X record to persist once ``remaining`` is empty.
    complete_record: TransactionLogRecord
    remaining: set[TopicPartition] = field(default_factory=set)
    unsent: set[TopicPartition] = field(default_factory=set)
    retry_at_ms: int = 0
    # Set when appending the COMPLETE_X record failed: when to try again.
    complete_retry_at_ms: int | None = None

    def matches(self, marker: MarkerRequest) -> bool:
        return (
            marker.transactional_id == self.transactional_id
            and marker.producer_id == self.producer_id
            and marker.producer_epoch == self.producer_epoch
            and marker.coordinator_epoch == self.coordinator_epoch
            and marker.commit == self.commit
        )

    def take(self, now_ms: int) -> MarkerRequest | None:
        """Hand out the unsent partitions if their retry time has come."""
        if not self.unsent or now_ms < self.retry_at_ms:
            return None
        partitions = tuple(sorted(self.unsent))
        self.unsent.clear()
        return MarkerRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            coordinator_epoch=self.coordinator_epoch,
            commit=self.commit,
            partitions=partitions,
        )

    def report(
        self,
        marker: MarkerRequest,
        errors: Mapping[TopicPartition, int] | None,
        now_ms: int,
        retry_backoff_ms: int,
    ) -> bool:
        """Apply a report; returns False when the job must be abandoned."""
        retry = False
        for tp in marker.partitions:
            if tp not in self.remaining:
                continue  # already confirmed by an earlier (duplicate) report
            code = int(errors.get(tp, ErrorCode.NONE)) if errors else int(ErrorCode.NONE)
            if code == ErrorCode.NONE:
                self.remaining.discard(tp)
                self.unsent.discard(tp)
            elif code in ABANDON_ERRORS:
                return False
            else:
                self.unsent.add(tp)
                retry = True
        if retry:
            self.retry_at_ms = now_ms + retry_backoff_ms
        return True

    @property
    def done(self) -> bool:
        return not self.remaining

    def next_deadline_ms(self) -> int | None:
        if self.complete_retry_at_ms is not None:
            return self.complete_retry_at_ms
        return self.retry_at_ms if self.unsent else None
