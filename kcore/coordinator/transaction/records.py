"""The ``__transaction_state`` topic: which partition owns a transactional id, and its records.

Theory of operation
-------------------
Every transactional id lives in exactly one partition of the compacted ``__transaction_state``
topic (50 partitions by default), chosen as Kafka chooses it so that a Kafka client's
FindCoordinator answer and kcore's agree: ``abs(javaHashCode(id)) % partitions``
(:func:`partition_for`). The leader of that partition is the id's transaction coordinator.

Each change of a transactional id's state is one record in that partition:

* key = ``int16`` key version (0) + ``TransactionLogKey`` (``TransactionalId``, a classic
  int16-length string);
* value = ``int16`` value version + ``TransactionLogValue``; version 0 is the classic layout,
  version 1 (flexible) adds the tagged ``PreviousProducerId`` (tag 0), ``NextProducerId``
  (tag 1) and ``ClientTransactionVersion`` (tag 2). Kafka 4.x writes version 1 once
  ``transaction.version`` >= 1, which is the default here (:data:`DEFAULT_VALUE_VERSION`);
* a null value (tombstone) removes the id: compaction then forgets it.

Only the latest record per key matters, so the coordinator always writes the *whole* state of
the id, never a delta. ``TransactionPartitions`` is null for ``Empty`` (Kafka writes it so) and
a list otherwise; topics and partitions are written sorted, which makes the bytes
deterministic. Kafka does not persist the last producer epoch (used to recognise a retried
KIP-360 InitProducerId); :class:`TransactionLogRecord` carries it for the in-memory side, and a
decoded record always has ``-1`` there, exactly as Kafka reloads it.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kcore.coordinator.partitioning import java_string_hash, partition_for
from kcore.coordinator.transaction.state import TransactionState
from kcore.metadata.topic_names import TRANSACTION_STATE_TOPIC
from kcore.protocol import messages as m
from kcore.protocol.primitives import MalformedMessage

__all__ = [
    "DEFAULT_VALUE_VERSION",
    "KEY_VERSION",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TRANSACTION_STATE",
    "LogEntry",
    "TransactionLogRecord",
    "TransactionLogTombstone",
    "decode",
    "encode",
    "java_string_hash",
    "partition_for",
]

TRANSACTION_STATE = TRANSACTION_STATE_TOPIC
KEY_VERSION = 0
DEFAULT_VALUE_VERSION = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

_INT16 = struct.Struct(">h")
_VALUE_VERSIONS = m.message_type("TransactionLogValue").versions


@dataclass(frozen=True)
class TransactionLogRecord:
    """The whole persisted state of one transactional id (one ``__transaction_state`` record).

    ``partitions`` maps topic -> partition ids (empty for ``EMPTY`` and the complete states).
    ``start_ms`` is -1 until the first partition of a transaction is added.
    ``last_producer_epoch`` is in-memory only: not on the wire, -1 after :func:`decode`.
    ``client_transaction_version`` is 0 for the transaction-version-1 protocol kcore speaks.
    """

    transactional_id: str
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    client_transaction_version: int = 0


@dataclass(frozen=True)
class TransactionLogTombstone:
    """The removal of an expired transactional id (null value)."""

    transactional_id: str


LogEntry = TransactionLogRecord | TransactionLogTombstone


def _key_bytes(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + m.TransactionLogKey(transactional_id=transactional_id).encode(
        KEY_VERSION
    )


def encode(
    record: LogEntry, value_version: int = DEFAULT_VALUE_VERSION
) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of ``record``; value is None for a tombstone.

    ``value_version`` 0 drops the fields it cannot carry (previous/next producer id, client
    transaction version), as Kafka does when ``transaction.version`` is 0.
    """
    key = _key_bytes(record.transactional_id)
    if isinstance(record, TransactionLogTombstone):
        return key, None
    if record.state is TransactionState.EMPTY and any(record.partitions.values()):
        raise ValueError(f"an Empty transaction has no partitions: {record}")
    if record.state is TransactionState.EMPTY:
        schemas = None
    else:
        schemas = [
            m.TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=sorted(ids))
            for topic, ids in sorted(record.partitions.items())
            if ids
        ]
    value = m.TransactionLogValue(
        producer_id=record.producer_id,
        previous_producer_id=record.previous_producer_id,
        next_producer_id=record.next_producer_id,
        producer_epoch=record.producer_epoch,
        transaction_timeout_ms=record.timeout_ms,
        transaction_status=record.state.id,
        transaction_partitions=schemas,
        transaction_last_update_timestamp_ms=record.last_update_ms,
        transaction_start_timestamp_ms=record.start_ms,
        client_transaction_version=record.client_transaction_version,
    )
    return key, _INT16.pack(value_version) + value.encode(value_version)


def decode(key: bytes | memoryview, value: bytes | memoryview | None) -> LogEntry | None:
    """The record stored as (``key``, ``value``); a tombstone when ``value`` is None.

    Returns None for a key version this broker does not know (Kafka skips such records on
    load). Raises :class:`MalformedMessage` for bytes that do not parse, and for an unknown
    value version (Kafka refuses to load those too: guessing would corrupt the state).
    """
    key = memoryview(key)
    if len(key) < 2:
        raise MalformedMessage("__transaction_state key shorter than its version")
    (key_version,) = _INT16.unpack_from(key, 0)
    if key_version != KEY_VERSION:
        return None
    tid = m.TransactionLogKey.decode(key[2:], KEY_VERSION).transactional_id
    if value is None:
        return TransactionLogTombstone(tid)
    value = memoryview(value)
    if len(value) < 2:
        raise MalformedMessage("__transaction_state value shorter than its version")
    (value_version,) = _INT16.unpack_from(value, 0)
    if value_version not in _VALUE_VERSIONS:
        raise MalformedMessage(f"unknown __transaction_state value version {value_version}")
    v = m.TransactionLogValue.decode(value[2:], value_version)
    try:
        state = TransactionState.from_id(v.transaction_status)
    except ValueError:
        raise MalformedMessage(f"unknown transaction state id {v.transaction_status}") from None
    partitions: dict[str, list[int]] = {}
    # Kafka ignores the partitions of an Empty record; a null list elsewhere means none.
    if state is not TransactionState.EMPTY:
        for schema in v.transaction_partitions or ():
            partitions.setdefault(schema.topic, []).extend(schema.partition_ids)
    return TransactionLogRecord(
        transactional_id=tid,
        producer_id=v.producer_id,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        producer_epoch=v.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=v.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        last_update_ms=v.transaction_last_update_timestamp_ms,
        start_ms=v.transaction_start_timestamp_ms,
        client_transaction_version=v.client_transaction_version,
    )
