"""KRaft metadata records in Kafka's framing (``MetadataRecordSerde``).

Byte layout
-----------
Every entry of the ``__cluster_metadata`` log that is not a Raft control record is one metadata
record, framed exactly as Kafka's ``AbstractApiMessageSerde`` frames it::

    unsigned varint   frame version        always 1
    unsigned varint   record type          the record's api key (TopicRecord = 2, ...)
    unsigned varint   record version
    bytes             the record body      the record's schema at that version (all are flexible)

So a ``TopicRecord`` v0 for topic ``"a"`` is ``01 02 00`` then the body (a compact string, the
16 bytes of the topic ID, an empty tagged-field section).

Which records exist
-------------------
The record types are the declared messages that carry a ``key`` (``kcore/protocol/defs``), plus
any type a later part of kcore registers with :func:`register_record_type` (cluster mirroring
adds its own records this way). Decoding a type nobody registered raises
:class:`UnknownRecordTypeError`, never a silent skip: a broker that cannot understand its
metadata log must stop rather than build a wrong image.

``PartitionChangeRecord`` v3 (spec M-88)
----------------------------------------
Cluster mirroring's BumpLeaderEpochs needs ``PartitionChangeRecord.MinLeaderEpoch`` (int32,
version 3+, default -1, not tagged): the partition's leader epoch becomes at least this value
when the record is applied. Until the protocol declarations carry version 3, this module builds
that version locally from the imported declaration (the same fields plus ``MinLeaderEpoch``), so
:data:`PartitionChangeRecord` here may differ from ``kcore.protocol.messages.PartitionChangeRecord``:
code that builds or inspects metadata records takes the classes from this module. A record is
written at version 3 only when it sets ``MinLeaderEpoch``; every other change record stays at
version 2, byte-identical to Kafka's.

Who calls this: the controller driver (encoding what the controller returns), the metadata
loader and ``kafka-dump-log``-style tools (decoding). Pure: no I/O.
"""

from __future__ import annotations

import copy

from kcore.protocol import messages as m
from kcore.protocol.declarations import FieldDecl, VersionRange
from kcore.protocol.messages import MESSAGES, Message, MessageType
from kcore.protocol.primitives import MalformedMessage, read_uvarint, uvarint_bytes

__all__ = [
    "FRAME_VERSION",
    "MalformedRecordError",
    "MetadataRecordError",
    "PartitionChangeRecord",
    "RECORD_TYPES",
    "UnknownRecordTypeError",
    "UnsupportedFrameVersionError",
    "UnsupportedRecordVersionError",
    "api_key_of",
    "decode_record",
    "default_version",
    "encode_record",
    "record_type",
    "register_record_type",
]

FRAME_VERSION = 1


class MetadataRecordError(ValueError):
    """A metadata record that cannot be framed or unframed."""


class UnsupportedFrameVersionError(MetadataRecordError):
    def __init__(self, frame_version: int) -> None:
        self.frame_version = frame_version
        super().__init__(
            f"Could not deserialize metadata record due to unknown frame version "
            f"{frame_version} (only frame version {FRAME_VERSION} is supported)"
        )


class UnknownRecordTypeError(MetadataRecordError):
    """A record type (api key) that no declaration or registration knows."""

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        super().__init__(f"Unknown metadata record type {api_key}")


class UnsupportedRecordVersionError(MetadataRecordError):
    def __init__(self, name: str, version: int, valid: VersionRange) -> None:
        self.name = name
        self.version = version
        super().__init__(f"{name} has no version {version} (valid: {valid})")


class MalformedRecordError(MetadataRecordError):
    """The frame or the body does not parse."""


# -- the registry -----------------------------------------------------------------------------

RECORD_TYPES: dict[int, MessageType] = {}  # api key -> message type; read-only outside here
_BY_CLASS: dict[type, MessageType] = {}


def register_record_type(mt: MessageType, *, replace: bool = False) -> None:
    """Make ``mt`` (a message declared with ``key N``) a metadata record type.

    Raises ``ValueError`` if it has no key, or if the key is taken and ``replace`` is false.
    """
    key = mt.decl.api_key
    if key is None or mt.decl.kind != "message":
        raise ValueError(f"{mt.name} is not a keyed message declaration")
    old = RECORD_TYPES.get(key)
    if old is not None and old is not mt and not replace:
        raise ValueError(f"record type {key} is already {old.name}")
    if old is not None:
        _BY_CLASS.pop(old.cls, None)
    RECORD_TYPES[key] = mt
    _BY_CLASS[mt.cls] = mt


def _partition_change_record_v3() -> MessageType:
    """PartitionChangeRecord with spec M-88's v3 ``MinLeaderEpoch`` (see the module docstring)."""
    imported = MESSAGES["PartitionChangeRecord"]
    if 3 in imported.versions:  # the protocol declarations caught up: use them as they are
        return imported
    decl = copy.deepcopy(imported.decl)
    decl.versions = VersionRange(0, 3)
    decl.root.fields.append(
        FieldDecl(name="MinLeaderEpoch", type="int32", versions=VersionRange(3, None), default="-1")
    )
    decl.structs = {decl.root.name: decl.root}
    return m._build_message(decl)  # the codec's own builder, so the class behaves like the rest


for _mt in MESSAGES.values():
    if _mt.decl.kind == "message" and _mt.decl.api_key is not None:
        register_record_type(_mt)
_PCR = _partition_change_record_v3()
register_record_type(_PCR, replace=True)
# The protocol's own (v0-2) class still frames and replays as type 5, written at most at v2.
_BY_CLASS[MESSAGES["PartitionChangeRecord"].cls] = _PCR

#: The ``PartitionChangeRecord`` class metadata code must use (it has ``min_leader_epoch``).
PartitionChangeRecord = _PCR.cls
PARTITION_CHANGE_MIN_LEADER_EPOCH_VERSION = 3


def record_type(api_key: int) -> MessageType:
    """The message type of record type ``api_key``; raises :class:`UnknownRecordTypeError`."""
    mt = RECORD_TYPES.get(api_key)
    if mt is None:
        raise UnknownRecordTypeError(api_key)
    return mt


def _type_of(record: Message) -> MessageType:
    mt = _BY_CLASS.get(type(record))
    if mt is None:
        raise TypeError(f"{type(record).__qualname__} is not a registered metadata record type")
    return mt


def api_key_of(record: Message) -> int:
    """The record type id of ``record`` (its declaration's api key)."""
    return _type_of(record).decl.api_key


def default_version(record: Message) -> int:
    """The version kcore writes ``record`` at: the highest it knows, except that a
    ``PartitionChangeRecord`` without ``MinLeaderEpoch`` stays at v2 (Kafka's bytes)."""
    mt = _type_of(record)
    if mt is _PCR and getattr(record, "min_leader_epoch", -1) == -1:
        return 2
    return mt.versions.hi if mt.versions.hi is not None else mt.versions.lo


def encode_record(record: Message, version: int | None = None) -> bytes:
    """Frame ``record``: frame version, type, version, body.

    ``version`` defaults to :func:`default_version`. Raises ``TypeError`` for a message that is
    not a metadata record, :class:`UnsupportedRecordVersionError` for a version the type lacks,
    and ``ValueError`` if ``MinLeaderEpoch`` is set on a change record below version 3 (it would
    be dropped silently).
    """
    mt = _type_of(record)
    if version is None:
        version = default_version(record)
    elif version not in mt.versions:
        raise UnsupportedRecordVersionError(mt.name, version, mt.versions)
    if (
        mt is _PCR
        and version < PARTITION_CHANGE_MIN_LEADER_EPOCH_VERSION
        and getattr(record, "min_leader_epoch", -1) != -1
    ):
        raise ValueError("MinLeaderEpoch needs PartitionChangeRecord version 3")
    out = bytearray(uvarint_bytes(FRAME_VERSION))
    out += uvarint_bytes(mt.decl.api_key)
    out += uvarint_bytes(version)
    record.encode_into(out, version)
    return bytes(out)


def decode_record(data: bytes | bytearray | memoryview) -> tuple[Message, int]:
    """Unframe one record: returns ``(record, version)``.

    Raises :class:`UnsupportedFrameVersionError`, :class:`UnknownRecordTypeError`,
    :class:`UnsupportedRecordVersionError` or :class:`MalformedRecordError` (truncated frame,
    bad body, trailing bytes); all are :class:`MetadataRecordError`.
    """
    buf = data if isinstance(data, memoryview) else memoryview(data)
    try:
        frame_version, pos = read_uvarint(buf, 0)
        if frame_version != FRAME_VERSION:
            raise UnsupportedFrameVersionError(frame_version)
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
    except MalformedMessage as e:
        raise MalformedRecordError(f"truncated metadata record frame: {e}") from None
    mt = record_type(api_key)
    if version not in mt.versions:
        raise UnsupportedRecordVersionError(mt.name, version, mt.versions)
    try:
        record = mt.cls.decode(buf[pos:], version)
    except MalformedMessage as e:
        raise MalformedRecordError(f"malformed {mt.name} v{version}: {e}") from None
    return record, version
