"""Control records: transaction markers, KRaft records, and kcore's MIRROR_PID_RESET.

Theory of operation
-------------------
A control batch (attribute bit 5) holds one control record that consumers never see. Its key
says what it is; its value's schema depends on that::

    key    int16 version (0) | int16 type                                    4 bytes

    type                  value
    0 ABORT, 1 COMMIT     EndTransactionMarker: int16 version (0) | int32 coordinator epoch
    2 LEADER_CHANGE       LeaderChangeMessage     (KRaft; decoded by kcore.raft)
    3 SNAPSHOT_HEADER     SnapshotHeaderRecord    (KRaft snapshots)
    4 SNAPSHOT_FOOTER     SnapshotFooterRecord
    5 KRAFT_VERSION       KRaftVersionRecord
    6 KRAFT_VOTERS        VotersRecord
    7 MIRROR_PID_RESET    MirrorPidResetRecord    (kcore, decision D-03; spec section 8.2)

Readers recognise a type by number and must skip the ones they do not know, as Kafka's
``ControlRecordType.parse`` does (it maps them to UNKNOWN): :func:`read_control_record` returns
``ControlRecordType.UNKNOWN`` for those, with the raw id kept for diagnostics.

Both kinds of batch kcore writes itself are built here: transaction markers (the transaction
coordinator's WriteTxnMarkers, and the ABORTs of the mirror's STOPPING sequence) and
MIRROR_PID_RESET (the mirror's STOPPING sequence, spec M-59).

Pure: no I/O.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from kcore.protocol.primitives import (
    MalformedMessage,
    read_string_body,
    read_uvarint,
    skip_tagged,
    uvarint_bytes,
)
from kcore.record.batch import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE, RecordBatch
from kcore.record.errors import CorruptRecordError
from kcore.record.records import RecordBatchBuilder

__all__ = [
    "CONTROL_KEY_VERSION",
    "ControlRecord",
    "ControlRecordType",
    "EndTransactionMarker",
    "MirrorPidResetRecord",
    "build_control_batch",
    "build_end_txn_marker_batch",
    "build_mirror_pid_reset_batch",
    "decode_control_key",
    "encode_control_key",
    "read_control_record",
]

CONTROL_KEY_VERSION = 0
_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
_INT16 = struct.Struct(">h")


class ControlRecordType(enum.IntEnum):
    """The type in a control record's key. ``UNKNOWN`` (-1) stands for any id not listed."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    MIRROR_PID_RESET = 7  # kcore's (D-03): after Kafka's last assigned type

    @classmethod
    def from_id(cls, type_id: int) -> ControlRecordType:
        """The type for ``type_id``; ``UNKNOWN`` for an id this build does not know."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


def encode_control_key(control_type: ControlRecordType | int) -> bytes:
    """The 4-byte key: int16 version 0, int16 type."""
    if control_type == ControlRecordType.UNKNOWN:
        raise ValueError("UNKNOWN is not a control record type that can be written")
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def decode_control_key(key) -> tuple[int, int]:
    """``(key version, type id)`` of a control record key.

    As Kafka does, a key version above 0 is read as version 0 (later versions may only append
    fields), and extra bytes are ignored.

    Raises:
        CorruptRecordError: a null or short key, or a negative version.
    """
    if key is None or len(key) < _KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(f"control record key is {size}, not at least {_KEY.size}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key has invalid version {version}")
    return version, type_id


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker's content.

    Value layout (6 bytes)::

        int16 version (0) | int32 coordinator epoch

    The coordinator epoch fences markers from a zombie transaction coordinator.
    """

    commit: bool
    coordinator_epoch: int

    VERSION = 0

    @property
    def control_type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.commit else ControlRecordType.ABORT

    def encode_value(self) -> bytes:
        return _END_TXN_VALUE.pack(self.VERSION, self.coordinator_epoch)

    @classmethod
    def decode(cls, control_type: ControlRecordType, value) -> EndTransactionMarker:
        """Read a marker's value; as Kafka does, later versions are read as version 0.

        Raises:
            CorruptRecordError: not a COMMIT/ABORT type, or a short value, or a negative version.
        """
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise CorruptRecordError(f"{control_type.name} is not a transaction marker type")
        if value is None or len(value) < _END_TXN_VALUE.size:
            size = "null" if value is None else f"{len(value)} bytes"
            raise CorruptRecordError(
                f"end transaction marker value is {size}, not at least {_END_TXN_VALUE.size}"
            )
        version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value, 0)
        if version < 0:
            raise CorruptRecordError(f"end transaction marker has invalid version {version}")
        return cls(control_type is ControlRecordType.COMMIT, coordinator_epoch)


@dataclass(frozen=True, slots=True)
class MirrorPidResetRecord:
    """The value of a MIRROR_PID_RESET control record (spec section 8.2, M-89).

    The spec declares it a data schema with ``"flexibleVersions": "0+"`` whose first field is
    ``Version``, the way Kafka's ``LeaderChangeMessage`` is written; so version 0 is::

        int16            Version (0)
        compact string   SourceClusterId: unsigned varint (length + 1), then UTF-8 bytes
        tagged fields    unsigned varint count (0 when written), then per field:
                         unsigned varint tag, unsigned varint size, bytes

    For a 22-character cluster id that is 2 + 1 + 22 + 1 = 26 bytes. SourceClusterId is not
    nullable (a compact length of 0, null, is refused). Unknown tagged fields are skipped, so a
    later version adding tagged fields stays readable.
    """

    source_cluster_id: str
    version: int = 0

    def encode_value(self) -> bytes:
        cluster_id = self.source_cluster_id.encode("utf-8")
        return b"".join(
            (
                _INT16.pack(self.version),
                uvarint_bytes(len(cluster_id) + 1),
                cluster_id,
                b"\x00",  # no tagged fields
            )
        )

    @classmethod
    def decode(cls, value) -> MirrorPidResetRecord:
        """Read the value; raises ``CorruptRecordError`` if it does not parse."""
        if value is None:
            raise CorruptRecordError("MIRROR_PID_RESET record has a null value")
        buf = memoryview(value)
        try:
            if len(buf) < _INT16.size:
                raise MalformedMessage("value is shorter than its version")
            (version,) = _INT16.unpack_from(buf, 0)
            if version < 0:
                raise MalformedMessage(f"invalid version {version}")
            n, pos = read_uvarint(buf, _INT16.size)
            if n == 0:
                raise MalformedMessage("SourceClusterId is null")
            source_cluster_id, pos = read_string_body(buf, pos, n - 1)
            tag_count, pos = read_uvarint(buf, pos)
            for _ in range(tag_count):
                _tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                pos = skip_tagged(buf, pos, size)
        except MalformedMessage as e:
            raise CorruptRecordError(f"MIRROR_PID_RESET record is corrupt: {e}") from None
        return cls(source_cluster_id, version)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The control record of a control batch, with its key decoded.

    ``type`` is ``UNKNOWN`` for ids this build does not know (``type_id`` keeps the number);
    callers skip those. ``value`` is the raw value, decoded with :meth:`end_txn_marker` or
    :meth:`mirror_pid_reset`, or by the KRaft code for the KRaft types.
    """

    type: ControlRecordType
    type_id: int
    key_version: int
    value: bytes | None
    offset: int
    timestamp: int

    @property
    def is_transaction_marker(self) -> bool:
        return self.type in (ControlRecordType.COMMIT, ControlRecordType.ABORT)

    def end_txn_marker(self) -> EndTransactionMarker:
        return EndTransactionMarker.decode(self.type, self.value)

    def mirror_pid_reset(self) -> MirrorPidResetRecord:
        if self.type is not ControlRecordType.MIRROR_PID_RESET:
            raise CorruptRecordError(f"{self.type.name} is not a MIRROR_PID_RESET record")
        return MirrorPidResetRecord.decode(self.value)


def read_control_record(batch: RecordBatch) -> ControlRecord | None:
    """The control record of a control batch, or ``None`` for an empty one.

    Only the first record is read, as Kafka does: a control batch holds one. An empty control
    batch can exist after compaction (the cleaner keeps empty batches to preserve producer
    state).

    Raises:
        ValueError: ``batch`` is not a control batch (a caller's mistake).
        CorruptRecordError: the record or its key does not parse.
    """
    if not batch.is_control:
        raise ValueError(f"batch at offset {batch.base_offset} is not a control batch")
    record = next(iter(batch.records()), None)
    if record is None:
        return None
    key_version, type_id = decode_control_key(record.key)
    return ControlRecord(
        ControlRecordType.from_id(type_id),
        type_id,
        key_version,
        record.value,
        record.offset,
        record.timestamp,
    )


def build_control_batch(
    control_type: ControlRecordType | int,
    value: bytes,
    *,
    producer_id: int,
    producer_epoch: int,
    is_transactional: bool,
    base_offset: int,
    partition_leader_epoch: int,
    timestamp: int,
) -> bytearray:
    """One uncompressed control batch holding one control record, as Kafka's
    ``MemoryRecords.withEndTransactionMarker`` / ``withLeaderChangeMessage`` write it
    (CREATE_TIME, base sequence -1, record attributes 0, no headers)."""
    builder = RecordBatchBuilder(
        base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=is_transactional,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(timestamp, encode_control_key(control_type), value)
    return builder.build()


def build_end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp: int = -1,
) -> bytearray:
    """A COMMIT (``commit=True``) or ABORT marker batch for one producer's transaction.

    The batch is transactional and a control batch (attributes 0x30), carries the producer's id
    and epoch, and one record: key ``(0, 1|0)``, value ``(0, coordinator_epoch)``.
    """
    marker = EndTransactionMarker(commit, coordinator_epoch)
    return build_control_batch(
        marker.control_type,
        marker.encode_value(),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        timestamp=timestamp,
    )


def build_mirror_pid_reset_batch(
    source_cluster_id: str,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp: int = -1,
) -> bytearray:
    """A MIRROR_PID_RESET control batch (spec M-59/M-89, decision D-03).

    Not transactional and without a producer (id -1, epoch -1), like Kafka's other
    broker-written control batches (LEADER_CHANGE); attributes 0x20.
    """
    return build_control_batch(
        ControlRecordType.MIRROR_PID_RESET,
        MirrorPidResetRecord(source_cluster_id).encode_value(),
        producer_id=-1,
        producer_epoch=-1,
        is_transactional=False,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        timestamp=timestamp,
    )
