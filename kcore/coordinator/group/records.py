"""The ``__consumer_offsets`` record format: what the classic group coordinator writes and reads.

Theory of operation
-------------------
Every change the group coordinator must survive a restart is a record appended to one partition
of the internal topic ``__consumer_offsets``. A group lives in exactly one partition, chosen by
:func:`partition_for` (Kafka's ``abs(groupId.hashCode()) % partitions``), so one broker, the
leader of that partition, is the group's coordinator. On becoming leader it replays the partition
from the start; the last record per key wins and a null value (a tombstone) deletes the key. The
topic is compacted, so only the latest record per key survives in the long run.

Byte layout (all integers big-endian; strings are int16 length + UTF-8, classic encoding)::

    key   = int16 key_version + key struct
    value = int16 value_version + value struct        (absent: null value = tombstone)

    key_version 0, 1  OffsetCommitKey    group, topic, partition   (Kafka 4 writes 1)
    key_version 2     GroupMetadataKey   group
    key_version >= 3  KIP-848 consumer/share/streams group records: not used by kcore, skipped

    OffsetCommitValue  versions 0-4; Kafka 4 writes 3, or 1 when the commit carries an explicit
                       expire timestamp (OffsetCommit v2-v4 ``retention_time_ms``)
    GroupMetadataValue versions 0-4; Kafka 4 writes 3

The value structs are declared once in ``kcore/protocol/defs`` and encoded by the generated
codec; this module only adds the version prefixes and maps them to small frozen dataclasses, the
vocabulary the coordinator and its shell exchange (``append`` receives these, ``replay`` gets
them back from :func:`decode`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kcore.coordinator.partitioning import java_string_hash, partition_for
from kcore.metadata.topic_names import CONSUMER_OFFSETS_TOPIC
from kcore.protocol import messages as m
from kcore.protocol.primitives import MalformedMessage

__all__ = [
    "CONSUMER_OFFSETS",
    "GroupMetadataRecord",
    "GroupTombstone",
    "OffsetCommitRecord",
    "OffsetTombstone",
    "Record",
    "decode",
    "encode",
    "java_string_hash",
    "partition_for",
]

CONSUMER_OFFSETS = CONSUMER_OFFSETS_TOPIC

# The versions Kafka 4.x writes (GroupCoordinatorRecordHelpers): the highest non-flexible ones.
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1  # the only version with an expireTimestamp field
GROUP_VALUE_VERSION = 3
_MAX_VALUE_VERSION = 4

_INT16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """A committed offset. ``leader_epoch`` -1 means unknown; ``expire_timestamp`` -1 means none
    (the offset then expires by the group's emptiness, KIP-211)."""

    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    """Deletes the committed offset of one partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """A classic group's generation, protocol, leader and members with their assignments."""

    group: str
    value: m.GroupMetadataValue


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    """Deletes a group's metadata (written when a group is deleted or expires)."""

    group: str


Record = OffsetCommitRecord | OffsetTombstone | GroupMetadataRecord | GroupTombstone


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """Encode ``record`` as (key bytes, value bytes or None for a tombstone).

    An offset with an expire timestamp is written as value v1, which has no leader epoch
    field: as in Kafka, its leader epoch reads back as -1 (such commits come from OffsetCommit
    v2-v4, which carry no leader epoch anyway).
    """
    if isinstance(record, OffsetCommitRecord | OffsetTombstone):
        key = _INT16.pack(OFFSET_KEY_VERSION) + m.OffsetCommitKey(
            group=record.group, topic=record.topic, partition=record.partition
        ).encode(OFFSET_KEY_VERSION)
        if isinstance(record, OffsetTombstone):
            return key, None
        version = (
            OFFSET_VALUE_VERSION
            if record.expire_timestamp == -1
            else OFFSET_VALUE_VERSION_WITH_EXPIRY
        )
        value = m.OffsetCommitValue(
            offset=record.offset,
            leader_epoch=record.leader_epoch,
            metadata=record.metadata,
            commit_timestamp=record.commit_timestamp,
            expire_timestamp=record.expire_timestamp,
        )
        return key, _INT16.pack(version) + value.encode(version)
    if isinstance(record, GroupMetadataRecord | GroupTombstone):
        key = _INT16.pack(GROUP_KEY_VERSION) + m.GroupMetadataKey(group=record.group).encode(
            GROUP_KEY_VERSION
        )
        if isinstance(record, GroupTombstone):
            return key, None
        return key, _INT16.pack(GROUP_VALUE_VERSION) + record.value.encode(GROUP_VALUE_VERSION)
    raise TypeError(f"not a __consumer_offsets record: {record!r}")


def decode(key: bytes, value: bytes | None) -> Record | None:
    """Decode one ``__consumer_offsets`` record.

    Returns None for record types kcore does not use (key versions 3 and up: the KIP-848
    consumer, share and streams group records), which a partition written by Kafka may hold.
    Raises ``ValueError`` naming the problem when the bytes are corrupt.
    """
    key_version, key_body = _split_version(key, "key")
    if key_version < 0:
        raise ValueError(f"__consumer_offsets key has negative version {key_version}")
    if key_version >= 3:
        return None
    if key_version in (0, 1):
        k = _decode(m.OffsetCommitKey, key_body, 1, "OffsetCommitKey")
        if value is None:
            return OffsetTombstone(k.group, k.topic, k.partition)
        value_version, value_body = _split_version(value, "OffsetCommitValue")
        v = _decode(m.OffsetCommitValue, value_body, value_version, "OffsetCommitValue")
        return OffsetCommitRecord(
            group=k.group,
            topic=k.topic,
            partition=k.partition,
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp=v.commit_timestamp,
            expire_timestamp=v.expire_timestamp,
        )
    k = _decode(m.GroupMetadataKey, key_body, 2, "GroupMetadataKey")
    if value is None:
        return GroupTombstone(k.group)
    value_version, value_body = _split_version(value, "GroupMetadataValue")
    v = _decode(m.GroupMetadataValue, value_body, value_version, "GroupMetadataValue")
    return GroupMetadataRecord(k.group, v)


def _split_version(data: bytes, what: str) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise ValueError(f"__consumer_offsets {what} too short for its version ({len(data)} bytes)")
    return _INT16.unpack_from(data)[0], memoryview(data)[2:]


def _decode(cls, body: memoryview, version: int, what: str):
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"{what} has unknown version {version}")
    try:
        return cls.decode(body, version)
    except MalformedMessage as e:
        raise ValueError(f"corrupt {what} v{version}: {e}") from None
