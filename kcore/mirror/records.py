"""The ``__mirror_state`` records: what the ClusterMirrorCoordinator writes and replays.

Theory of operation
-------------------
Every mirror's per-partition state lives in one partition of the internal topic
``__mirror_state``, the one its name hashes to (decision D-08, :func:`partition_for`); the
leader of that partition is the mirror's coordinator. Each change is one record there:

* **type 2, MirrorPartitionState** (spec M-92): the state of one mirror partition, written on
  every transition (M-46);
* **type 1, LastMirrorEpochs** (spec M-91): the last mirrored leader epoch of some partitions,
  written while STOPPING (D-09);
* **type 3, MirrorSyncedAcls** (kcore's, decision D-22): the ACLs the mirror's metadata sync
  created on this cluster, the whole set in each record (the last one wins on replay), so the
  sync deletes only those when the source drops them, across restarts and coordinator moves;
* **tombstones** (null values) of every key: the mirror is deleted (D-29, M-65).

Byte layout, the proposal's, so that the dump example of spec §8.4 comes out exactly
(``keySize: 13 valueSize: 17``; with the example's timestamps even the batch CRCs agree)::

    key   = int16 record type + {Type}Key        classic: MirrorName as int16 length + UTF-8
    value = int16 version (0) + {Type}Value       flexible: compact strings, tagged fields

    MirrorPartitionStateValue v0: TopicName, Partition int32, State int8, then tagged
        PreviousState (tag 0, default 16 = UNKNOWN), RetryAttempt (tag 1, default 0) and, kcore's
        own, Reason (tag 2, nullable, default null): the FAILED reason that decision D-13 asks
        Describe to show, and LeaderEpoch (tag 3, default -1): the partition leader epoch of
        the broker that wrote it, which fences a writer that lost leadership. A tagged field is
        written only when it differs from its default, so a value without them is the spec's
        17 bytes and a reader that does not know tags 2 and 3 skips them.
    LastMirrorEpochsValue v0: Topics[Name, Partitions[PartitionIndex, LastMirrorEpoch]]

Both keys hold only the mirror name (spec §20 A-2), so the topic is **not compacted** (D-07):
the state is rebuilt by replaying a partition from its start. Replay rules: a state record
replaces that (topic, partition)'s state; a LastMirrorEpochs record *merges* its partitions into
the mirror's epochs (one STOPPING writes only the partitions it stopped); a tombstone drops
everything of that key's type for the mirror.

The declarations are ``kcore/protocol/defs/MirrorStateRecords.def``, encoded by the generated
codec; this module adds the type/version prefixes, the mapping to small frozen dataclasses (what
the coordinator core's ``append`` receives and ``replay`` gets back), and the JSON rendering of
``kafka-dump-log.sh --mirror-state-decoder`` (spec M-108). Pure: no I/O.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from kcore.coordinator.partitioning import partition_for
from kcore.metadata.image import StandardAcl
from kcore.metadata.topic_names import MIRROR_STATE_TOPIC
from kcore.mirror.metadata_sync import acl_sort_key
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol import messages as m
from kcore.protocol.message_json import message_json
from kcore.protocol.primitives import MalformedMessage

__all__ = [
    "LAST_MIRROR_EPOCHS",
    "MIRROR_STATE",
    "SYNCED_ACLS",
    "NO_LAST_MIRROR_EPOCH",
    "PARTITION_STATE",
    "VALUE_VERSION",
    "CorruptMirrorStateRecord",
    "LastMirrorEpochsRecord",
    "MirrorPartitionStateRecord",
    "MirrorSyncedAclsRecord",
    "MirrorTombstone",
    "Record",
    "decode",
    "deletion_records",
    "dump_key",
    "dump_value",
    "encode",
    "partition_for",
]

MIRROR_STATE = MIRROR_STATE_TOPIC
LAST_MIRROR_EPOCHS = 1  # record types: the int16 that opens the key
PARTITION_STATE = 2
SYNCED_ACLS = 3
VALUE_VERSION = 0
NO_LAST_MIRROR_EPOCH = -1

S = MirrorPartitionState
_INT16 = struct.Struct(">h")
_KEYS = {
    LAST_MIRROR_EPOCHS: m.LastMirrorEpochsKey,
    PARTITION_STATE: m.MirrorPartitionStateKey,
    SYNCED_ACLS: m.MirrorSyncedAclsKey,
}
_VALUES = {
    LAST_MIRROR_EPOCHS: m.LastMirrorEpochsValue,
    PARTITION_STATE: m.MirrorPartitionStateValue,
    SYNCED_ACLS: m.MirrorSyncedAclsValue,
}


class CorruptMirrorStateRecord(MalformedMessage):
    """A ``__mirror_state`` record whose bytes do not decode: too short, an unknown value
    version, a state code no state has, UNKNOWN as a state (never written, M-35), trailing
    bytes. Loading stops on it rather than guess (a guess would corrupt mirror state)."""


@dataclass(frozen=True, slots=True)
class MirrorPartitionStateRecord:
    """The state of one mirror partition after a transition (type 2).

    ``previous_state`` is the state before it (UNKNOWN when not recorded); ``retry_attempt``
    counts automatic recoveries while FAILED (D-13); ``reason`` says why it FAILED (None when
    not FAILED or not known); ``leader_epoch`` is the partition leader epoch of the broker that
    wrote it (-1: not known), below which writes are fenced.
    """

    mirror_name: str
    topic: str
    partition: int
    state: MirrorPartitionState
    previous_state: MirrorPartitionState = MirrorPartitionState.UNKNOWN
    retry_attempt: int = 0
    reason: str | None = None
    leader_epoch: int = -1


@dataclass(frozen=True)
class LastMirrorEpochsRecord:
    """Last mirrored leader epochs (type 1): ``epochs[(topic, partition)]`` (D-09)."""

    mirror_name: str
    epochs: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class MirrorSyncedAclsRecord:
    """The ACLs the mirror's metadata sync created (type 3, D-22): ``acls`` holds
    :class:`~kcore.metadata.image.StandardAcl` bindings; it replaces any earlier set."""

    mirror_name: str
    acls: frozenset = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class MirrorTombstone:
    """A null value on the mirror's key of ``record_type``: drops all of that type (D-29)."""

    mirror_name: str
    record_type: int


Record = (
    MirrorPartitionStateRecord | LastMirrorEpochsRecord | MirrorSyncedAclsRecord | MirrorTombstone
)


def deletion_records(mirror_name: str) -> list[MirrorTombstone]:
    """The records that delete a mirror (D-29): a tombstone of each key, states first."""
    return [
        MirrorTombstone(mirror_name, PARTITION_STATE),
        MirrorTombstone(mirror_name, LAST_MIRROR_EPOCHS),
        MirrorTombstone(mirror_name, SYNCED_ACLS),
    ]


# -- encoding ----------------------------------------------------------------------------------


def _key(record_type: int, mirror_name: str) -> bytes:
    return _INT16.pack(record_type) + _KEYS[record_type](mirror_name=mirror_name).encode(0)


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of ``record``; value is None for a tombstone.

    Raises ValueError for what must never be written: UNKNOWN as a state (M-35), a retry count
    outside int16, an unknown tombstone type.
    """
    if isinstance(record, MirrorPartitionStateRecord):
        if record.state is S.UNKNOWN:
            raise ValueError(f"UNKNOWN is the absence of state and is never written: {record}")
        value = m.MirrorPartitionStateValue(
            topic_name=record.topic,
            partition=record.partition,
            state=int(record.state),
            previous_state=int(record.previous_state),
            retry_attempt=record.retry_attempt,
            reason=record.reason,
            leader_epoch=record.leader_epoch,
        )
        key = _key(PARTITION_STATE, record.mirror_name)
        return key, _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)
    if isinstance(record, LastMirrorEpochsRecord):
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, index), epoch in sorted(record.epochs.items()):
            by_topic.setdefault(topic, []).append((index, epoch))
        V = m.LastMirrorEpochsValue
        value = V(
            topics=[
                V.Topic(
                    name=topic,
                    partitions=[
                        V.Partition(partition_index=i, last_mirror_epoch=e) for i, e in parts
                    ],
                )
                for topic, parts in by_topic.items()
            ]
        )
        key = _key(LAST_MIRROR_EPOCHS, record.mirror_name)
        return key, _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)
    if isinstance(record, MirrorSyncedAclsRecord):
        V = m.MirrorSyncedAclsValue
        value = V(
            acls=[
                V.SyncedAcl(
                    resource_type=a.resource_type,
                    resource_name=a.resource_name,
                    pattern_type=a.pattern_type,
                    principal=a.principal,
                    host=a.host,
                    operation=a.operation,
                    permission_type=a.permission_type,
                )
                for a in sorted(record.acls, key=acl_sort_key)
            ]
        )
        key = _key(SYNCED_ACLS, record.mirror_name)
        return key, _INT16.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)
    if isinstance(record, MirrorTombstone):
        if record.record_type not in _KEYS:
            raise ValueError(f"no __mirror_state record type {record.record_type}")
        return _key(record.record_type, record.mirror_name), None
    raise TypeError(f"not a __mirror_state record: {record!r}")


# -- decoding ----------------------------------------------------------------------------------


def _split(data: bytes | memoryview, what: str) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < 2:
        raise CorruptMirrorStateRecord(f"__mirror_state {what} shorter than its int16 prefix")
    return _INT16.unpack_from(view, 0)[0], view[2:]


def _state(code: int, what: str) -> MirrorPartitionState:
    try:
        return S.from_code(code)
    except ValueError:
        raise CorruptMirrorStateRecord(f"__mirror_state {what} {code} is no state code") from None


def decode(key: bytes | memoryview, value: bytes | memoryview | None) -> Record | None:
    """The record stored as (``key``, ``value``); a :class:`MirrorTombstone` when ``value`` is
    None. Returns None for a record type this broker does not know (a newer broker's, skipped
    on replay as Kafka's coordinators skip unknown types). Raises
    :class:`CorruptMirrorStateRecord` for bytes that do not decode."""
    record_type, key_body = _split(key, "key")
    key_cls = _KEYS.get(record_type)
    if key_cls is None:
        return None
    mirror_name = _decode_checked(key_cls, key_body).mirror_name
    if value is None:
        return MirrorTombstone(mirror_name, record_type)
    version, value_body = _split(value, "value")
    if version != VALUE_VERSION:
        raise CorruptMirrorStateRecord(
            f"unknown __mirror_state value version {version} (type {record_type})"
        )
    v = _decode_checked(_VALUES[record_type], value_body)
    if record_type == LAST_MIRROR_EPOCHS:
        epochs = {
            (t.name, p.partition_index): p.last_mirror_epoch for t in v.topics for p in t.partitions
        }
        return LastMirrorEpochsRecord(mirror_name, epochs)
    if record_type == SYNCED_ACLS:
        acls = frozenset(
            StandardAcl(
                a.resource_type,
                a.resource_name,
                a.pattern_type,
                a.principal,
                a.host,
                a.operation,
                a.permission_type,
            )  # fmt: skip
            for a in v.acls
        )
        return MirrorSyncedAclsRecord(mirror_name, acls)
    state = _state(v.state, "state")
    if state is S.UNKNOWN:
        raise CorruptMirrorStateRecord("__mirror_state state UNKNOWN is never written (M-35)")
    if v.partition < 0 or v.retry_attempt < 0:
        raise CorruptMirrorStateRecord(
            f"__mirror_state record of {v.topic_name}-{v.partition} has a negative "
            f"partition or retry attempt ({v.retry_attempt})"
        )
    return MirrorPartitionStateRecord(
        mirror_name=mirror_name,
        topic=v.topic_name,
        partition=v.partition,
        state=state,
        previous_state=_state(v.previous_state, "previous state"),
        retry_attempt=v.retry_attempt,
        reason=v.reason,
        leader_epoch=v.leader_epoch,
    )


# -- kafka-dump-log.sh --mirror-state-decoder (M-108) ------------------------------------------


def dump_key(key: bytes | memoryview) -> str:
    """The ``key:`` of the dump-log line: ``{"type":"2","data":{"mirrorName":"my-mirror"}}``
    (the type as a JSON string, as the proposal's decoder prints it). Raises
    CorruptMirrorStateRecord; an unknown type prints as ``{"type":"N","data":null}``."""
    record_type, body = _split(key, "key")
    key_cls = _KEYS.get(record_type)
    data = None if key_cls is None else message_json(_decode_checked(key_cls, body), 0)
    return _compact({"type": str(record_type), "data": data})


def dump_value(key: bytes | memoryview, value: bytes | memoryview | None) -> str:
    """The ``payload:`` of the dump-log line: ``{"version":"0","data":{...}}``; ``null`` for a
    tombstone."""
    if value is None:
        return "null"
    record_type, _ = _split(key, "key")
    version, body = _split(value, "value")
    value_cls = _VALUES.get(record_type)
    if value_cls is None or version != VALUE_VERSION:
        return _compact({"version": str(version), "data": None})
    return _compact(
        {"version": str(version), "data": message_json(_decode_checked(value_cls, body), version)}
    )


def _decode_checked(cls, body: memoryview):
    try:
        return cls.decode(body, 0)
    except MalformedMessage as e:
        raise CorruptMirrorStateRecord(f"corrupt __mirror_state {cls.__name__}: {e}") from None


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))
