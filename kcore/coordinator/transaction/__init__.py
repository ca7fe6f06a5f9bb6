"""The transaction coordinator (``__transaction_state``), as a pure core for a Trio shell.

What it is
----------
Kafka's transaction coordinator without I/O: it owns the state machine of every transactional
id whose ``__transaction_state`` partition this broker leads, decides InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions, and
tells the shell which COMMIT/ABORT markers to write. The shell moves bytes and time.

Modules: :mod:`.state` (the states and the transition table), :mod:`.records` (partition
choice, the ``__transaction_state`` record codec), :mod:`.metadata` (one id's state and its
checked transitions), :mod:`.markers` (marker work), :mod:`.coordinator` (the typed
operations, ownership, time), :mod:`.handlers` (request/response messages).

Driving it (the shell's contract)
---------------------------------
Construct once per broker::

    coordinator = TransactionCoordinator(
        TransactionConfig(...),            # Kafka's transaction.* settings
        append=append,                     # (partition, list[LogEntry]) -> None, raises KafkaError
        next_producer_id=next_producer_id, # () -> int, raises KafkaError
        group_partition=group_partition,   # group id -> its __consumer_offsets partition
    )

``append(partition, entries)`` encodes each entry with :func:`encode` (one record each, key and
value bytes; a tombstone has a null value), appends them as one batch to
``__transaction_state-<partition>`` with ``acks=all`` and returns once they are committed; on
failure it raises :class:`KafkaError` with the produce error (NOT_LEADER_OR_FOLLOWER,
NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...), which the coordinator maps to Kafka's coordinator
errors. The coordinator is synchronous: the shell must not call it again while an ``append``
is running (one lock around every call, or a single task owning it).

Producer ids: ``next_producer_id()`` returns the next id of a block the shell already holds and
never blocks. The shell fetches blocks from the controller (AllocateProducerIds) in the
background and keeps the next block prefetched; when it has none it raises
``KafkaError(COORDINATOR_LOAD_IN_PROGRESS)``, which reaches the client, who retries. This is
exactly Kafka's ``RPCProducerIdManager`` behaviour, and it keeps every operation a single
synchronous step: no operation has to be suspended half-done waiting for an id, so there is no
"needs a producer id" outcome to resume and no state to hold across it.

Leadership of ``__transaction_state`` partitions::

    coordinator.begin_loading(partition, leader_epoch)   # became leader
    for key, value in the partition's records, in offset order:
        coordinator.replay(partition, decode(key, value))
    coordinator.finish_loading(partition, now_ms)        # serve; recovers PrepareX (markers)
    coordinator.unload(partition, leader_epoch)          # lost leadership

Requests: each ``handle_*`` returns the response message and never raises a Kafka error::

    handle_init_producer_id(request, version, now_ms)      -> InitProducerIdResponse
    handle_add_partitions_to_txn(request, version, now_ms, rejected=None)
                                                           -> AddPartitionsToTxnResponse
    handle_add_offsets_to_txn(request, version, now_ms)    -> AddOffsetsToTxnResponse
    handle_end_txn(request, version, now_ms)               -> EndTxnResponse
    handle_describe_transactions(request, version)         -> DescribeTransactionsResponse
    handle_list_transactions(request, version, now_ms)     -> ListTransactionsResponse

(The typed operations under them — ``init_producer_id``, ``add_partitions``,
``verify_partitions``, ``add_offsets``, ``end_txn``, ``describe_transaction`` — raise
:class:`KafkaError` instead.) FindCoordinator uses ``coordinator.partition_for(id)``.

Markers and time: after every call, and whenever ``next_deadline_ms()`` is reached::

    coordinator.tick(now_ms)                     # timeouts, expiration, retries
    for marker in coordinator.drain_markers(now_ms):
        # send marker.to_writable_marker(partitions_of_that_leader) to each partition leader
        # (WriteTxnMarkers, or locally), then report every partition's outcome:
        coordinator.markers_written(marker, now_ms, errors)   # {(topic, p): error code}

Report a partition whose topic no longer exists as written (error 0). A marker lost with its
connection is reported with a retriable error (e.g. REQUEST_TIMED_OUT) and is handed out again
after ``retry_backoff_ms``.
"""

from kcore.coordinator.transaction.coordinator import (
    CONSUMER_OFFSETS,
    TransactionConfig,
    TransactionCoordinator,
)
from kcore.coordinator.transaction.markers import MarkerRequest, errors_from_marker_result
from kcore.coordinator.transaction.metadata import (
    ProducerIdAndEpoch,
    TopicPartition,
    TransactionMetadata,
)
from kcore.coordinator.transaction.records import (
    TRANSACTION_STATE,
    LogEntry,
    TransactionLogRecord,
    TransactionLogTombstone,
    decode,
    encode,
    partition_for,
)
from kcore.coordinator.transaction.state import IllegalTransition, TransactionState

__all__ = [
    "CONSUMER_OFFSETS",
    "TRANSACTION_STATE",
    "IllegalTransition",
    "LogEntry",
    "MarkerRequest",
    "ProducerIdAndEpoch",
    "TopicPartition",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionLogRecord",
    "TransactionLogTombstone",
    "TransactionMetadata",
    "TransactionState",
    "decode",
    "encode",
    "errors_from_marker_result",
    "partition_for",
]
