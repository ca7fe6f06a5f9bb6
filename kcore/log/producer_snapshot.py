"""Producer state snapshots (``<20-digit offset>.snapshot``).

Byte layout (big-endian; the ``ProducerSnapshot`` schema, version 1, not flexible)::

    offset 0   int16  version             (1)
    offset 2   uint32 CRC-32C of bytes [6, end)
    offset 6   int32  entry count
    offset 10  entries, 46 bytes each:
                 int64 producer id          (may be negative: a mirrored producer is
                                             rewritten to -(pid + 2))
                 int16 producer epoch
                 int32 last sequence
                 int64 last offset
                 int32 offset delta         (last sequence - first sequence of the last batch)
                 int64 timestamp            (max timestamp of the last batch)
                 int32 coordinator epoch
                 int64 current txn first offset (-1 when no transaction is open)

A snapshot named after offset N holds the producer state of the log up to N (exclusive): the
producer state manager loads the newest snapshot not above the recovery point and replays the
log from there.

After a crash: ``write_snapshot`` replaces the file atomically (``.tmp``, fsync, rename, fsync the
directory), so a snapshot is whole or absent; a damaged one fails the CRC or length checks with
``CorruptSnapshotError`` and the caller falls back to an older snapshot or a full rebuild.

Who may call it: the producer state manager of the partition (and tools that dump snapshots).
"""

from __future__ import annotations

import os
import struct
from dataclasses import astuple, dataclass
from pathlib import Path

from crc32c import crc32c

from kcore.log.errors import CorruptSnapshotError
from kcore.log.files import atomic_write_bytes

SNAPSHOT_VERSION = 1
NO_TXN_FIRST_OFFSET = -1

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
HEADER_SIZE = _HEADER.size  # 10
ENTRY_SIZE = _ENTRY.size  # 46
_CRC_OFFSET = 2
_CRC_START = 6  # the CRC covers everything after the version and the CRC itself


@dataclass(slots=True)
class ProducerSnapshotEntry:
    """The state of one producer as saved in a snapshot (field order = on-disk order)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int = NO_TXN_FIRST_OFFSET


def encode_snapshot(entries: list[ProducerSnapshotEntry]) -> bytes:
    """The snapshot file's bytes for ``entries``.

    Raises ``ValueError`` if a field does not fit its on-disk type.
    """
    buffer = bytearray(HEADER_SIZE + ENTRY_SIZE * len(entries))
    for i, entry in enumerate(entries):
        try:
            _ENTRY.pack_into(buffer, HEADER_SIZE + i * ENTRY_SIZE, *astuple(entry))
        except struct.error as exc:
            raise ValueError(f"snapshot entry {i} does not fit the format: {exc}") from None
    struct.pack_into(">i", buffer, _CRC_START, len(entries))
    crc = crc32c(memoryview(buffer)[_CRC_START:])
    _HEADER.pack_into(buffer, 0, SNAPSHOT_VERSION, crc, len(entries))
    return bytes(buffer)


def decode_snapshot(data: bytes, source: object = "snapshot") -> list[ProducerSnapshotEntry]:
    """Parse a snapshot's bytes; ``source`` names it in error messages.

    Raises:
        CorruptSnapshotError: too short, unknown version, CRC mismatch, or a size that does not
            match the entry count.
    """
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes is too short for a snapshot")
    version, stored_crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"{source}: snapshot is corrupt (CRC is 0x{stored_crc:08x}, computed 0x{computed:08x})"
        )
    if count < 0 or len(data) != HEADER_SIZE + count * ENTRY_SIZE:
        raise CorruptSnapshotError(
            f"{source}: {len(data)} bytes do not hold the {count} entries the header announces"
        )
    return [
        ProducerSnapshotEntry(*fields)
        for fields in _ENTRY.iter_unpack(memoryview(data)[HEADER_SIZE:])
    ]


def write_snapshot(path: str | os.PathLike[str], entries: list[ProducerSnapshotEntry]) -> None:
    """Write a snapshot atomically and durably (see the module docstring)."""
    atomic_write_bytes(path, encode_snapshot(entries))


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    """Read and verify a snapshot file.

    Raises:
        CorruptSnapshotError: bad CRC, version or length (the message names the file).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    return decode_snapshot(path.read_bytes(), path)
