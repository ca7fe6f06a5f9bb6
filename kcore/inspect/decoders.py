"""One record of an internal topic, rendered as Kafka's tools render it.

Two families, because Kafka has two:

**dump-log decoders** (``kafka-dump-log.sh --offsets-decoder`` and friends). A decoder turns a
record into the ``(key, payload)`` strings of a dump line (``| offset: ... key: K payload: P``);
either may be None (then that part of the line is left out). :data:`DECODERS` maps the option
name to the decoder:

==============================  =======================================================
``--offsets-decoder``           key ``{"type":"1","data":{"group":...}}`` (the key version as a
                                string), payload ``{"version":"3","data":{...}}`` or ``<DELETE>``;
                                the members' subscription and assignment of a ``consumer``
                                group are decoded too, as Kafka does
``--transaction-log-decoder``   key ``transaction_metadata::transactionalId=T``, payload
                                ``producerId:5,producerEpoch:0,state=Ongoing,partitions=[t-0],
                                txnLastUpdateTimestamp=...,txnTimeoutMs=...`` or ``<DELETE>``
``--cluster-metadata-decoder``  no key, payload ``{"type":"TOPIC_RECORD","version":0,"data":...}``
``--mirror-state-decoder``      spec §11.5 (M-108): key ``{"type":"2","data":{...}}``, payload
                                ``{"version":"0","data":{...}}`` (``kcore.mirror.records``)
(none)                          Kafka's StringDecoder: key and value as UTF-8 text
==============================  =======================================================

A record a decoder cannot read gives Kafka's ``Error at offset N, skipping. <why>`` (or
``Unknown record type N at offset O, skipping.``) as its key, never an exception: one bad
record must not hide the rest of the segment.

**console formatters** (``kafka-console-consumer.sh --formatter``): ``format_offsets``,
``format_transaction_log`` and ``format_mirror_state`` take a record's key and value bytes and
return its one JSON line, ``{"key":{"version":1,"data":{...}},"value":{"version":3,"data":
{...}}}``, as Kafka's ``OffsetsMessageFormatter`` / ``TransactionLogMessageFormatter`` and the
spec's ``MirrorStateMessageFormatter`` (§11.6, numbers for the type and version) print it.

Pure: no I/O.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from kcore.coordinator.transaction import records as txn_records
from kcore.metadata import records as metadata_records
from kcore.mirror.records import dump_key as mirror_dump_key
from kcore.mirror.records import dump_value as mirror_dump_value
from kcore.protocol import messages as m
from kcore.protocol.message_json import message_json
from kcore.protocol.primitives import MalformedMessage
from kcore.record.records import Record

__all__ = [
    "DECODERS",
    "DELETE",
    "Decoder",
    "decode_string",
    "format_mirror_state",
    "format_offsets",
    "format_transaction_log",
    "metadata_record_type_name",
]

DELETE = "<DELETE>"  # Kafka's payload for a tombstone of a coordinator topic
_INT16 = struct.Struct(">h")

Decoder = Callable[[Record], tuple[str | None, str | None]]


def _compact(obj: Any) -> str:
    """JSON as Jackson's ``JsonNode.toString`` writes it: no spaces, non-ASCII kept."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def decode_string(record: Record) -> tuple[str | None, str | None]:
    """Kafka's default ``StringDecoder`` for keys and values: UTF-8 text, None when null
    (malformed UTF-8 is replaced, as Java's ``new String(bytes, UTF_8)`` does)."""
    key, value = record.key, record.value
    return (
        None if key is None else key.decode("utf-8", "replace"),
        None if value is None else value.decode("utf-8", "replace"),
    )


def _split(data: bytes | memoryview) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < 2:
        raise MalformedMessage(f"{len(view)} bytes is too short for an int16 version")
    return _INT16.unpack_from(view, 0)[0], view[2:]


# -- __consumer_offsets ------------------------------------------------------------------------

# The group coordinator's record types: the key version is the type (0 and 1 are both offset
# commits); the value class is the key's with Value for Key. kcore writes 0-2; a partition
# written by Kafka may hold the KIP-848 and share group types, declared in kcore/protocol/defs.
_GROUP_KEYS: dict[int, type] = {}
for _mt in m.MESSAGES.values():
    _name = _mt.name
    if (
        _mt.decl.kind == "message"
        and _name.endswith("Key")
        and (
            _name in ("OffsetCommitKey", "GroupMetadataKey")
            or _name.startswith(("ConsumerGroup", "ShareGroup"))
        )
    ):
        for _v in range(_mt.versions.lo, (_mt.versions.hi or _mt.versions.lo) + 1):
            _GROUP_KEYS[_v] = _mt.cls
_CONSUMER_PROTOCOL = "consumer"


def _group_value_class(key_cls: type) -> type:
    return m.message_type(key_cls.__name__[: -len("Key")] + "Value").cls


def _embedded(data: Any, cls: type) -> Any:
    """A member's subscription or assignment (int16 version + body) as JSON; the raw bytes
    (base64) when they do not decode, as Kafka keeps them."""
    try:
        version, body = _split(data)
        return message_json(cls.decode(body, version), version)
    except MalformedMessage:
        return None


def _group_metadata_json(value: Any, version: int) -> dict[str, Any]:
    out = message_json(value, version)
    if value.protocol_type == _CONSUMER_PROTOCOL:
        for member, member_json in zip(value.members, out.get("members", []), strict=True):
            for field, cls in (
                ("subscription", m.ConsumerProtocolSubscription),
                ("assignment", m.ConsumerProtocolAssignment),
            ):
                decoded = _embedded(getattr(member, field), cls)
                if decoded is not None:
                    member_json[field] = decoded
    return out


def _offsets_key(key: bytes) -> tuple[int, Any]:
    version, body = _split(key)
    cls = _GROUP_KEYS.get(version)
    if cls is None:
        raise LookupError(version)
    return version, cls.decode(body, version)


def _offsets_value(key_version: int, value: bytes) -> tuple[int, dict[str, Any]]:
    cls = _group_value_class(_GROUP_KEYS[key_version])
    version, body = _split(value)
    decoded = cls.decode(body, version)
    if cls is m.GroupMetadataValue:
        return version, _group_metadata_json(decoded, version)
    return version, message_json(decoded, version)


def decode_offsets(record: Record) -> tuple[str | None, str | None]:
    """``--offsets-decoder`` (Kafka's ``OffsetsMessageParser``)."""
    if record.key is None:
        return (
            f"Failed to decode message at offset {record.offset} using offset topic decoder "
            "(message had a missing key)",
            None,
        )
    try:
        key_version, key = _offsets_key(record.key)
        key_text = _compact({"type": str(key_version), "data": message_json(key, key_version)})
        if record.value is None:
            return key_text, DELETE
        version, data = _offsets_value(key_version, record.value)
        return key_text, _compact({"version": str(version), "data": data})
    except LookupError as e:
        return f"Unknown record type {e.args[0]} at offset {record.offset}, skipping.", None
    except (MalformedMessage, ValueError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def format_offsets(key: bytes | None, value: bytes | None) -> str:
    """One ``__consumer_offsets`` record as Kafka's ``OffsetsMessageFormatter`` prints it:
    ``{"key":{"version":1,"data":{"group":"g","topic":"t","partition":0}},"value":{"version":3,
    "data":{"offset":5,...}}}``.

    As in Kafka, the formatter shows offset commits only: a group metadata record (key version
    2) gives ``""`` (print nothing for it), and a key of a type it does not know shows
    ``"data":"unknown"``. A null value (tombstone) is ``"value":null``.
    """
    out: dict[str, Any] = {}
    if key is None:
        out["key"] = None
        key_version = None
    else:
        key_version = _split(key)[0]
        if key_version == 2:
            return ""
        try:
            _, decoded = _offsets_key(key)
            out["key"] = {"version": key_version, "data": message_json(decoded, key_version)}
        except (LookupError, MalformedMessage):
            out["key"] = {"version": key_version, "data": "unknown"}
            key_version = None
    if value is None:
        out["value"] = None
    else:
        value_version, body = _split(value)
        try:
            data: Any = message_json(m.OffsetCommitValue.decode(body, value_version), value_version)
        except MalformedMessage:
            data = "unknown"
        out["value"] = {"version": value_version, "data": data}
    return _compact(out)


# -- __transaction_state -----------------------------------------------------------------------


def decode_transaction_log(record: Record) -> tuple[str | None, str | None]:
    """``--transaction-log-decoder`` (Kafka's ``TransactionLog.formatRecordKeyAndValue``);
    the partitions are listed sorted (Kafka lists its hash set's order)."""
    try:
        if record.key is None:
            raise MalformedMessage("the record has no key")
        entry = txn_records.decode(record.key, record.value)
        if entry is None:
            return f"unknown::version={_split(record.key)[0]}", None
        key_text = f"transaction_metadata::transactionalId={entry.transactional_id}"
        if isinstance(entry, txn_records.TransactionLogTombstone):
            return key_text, DELETE
        partitions = ",".join(
            f"{topic}-{p}" for topic, ids in sorted(entry.partitions.items()) for p in sorted(ids)
        )
        return key_text, (
            f"producerId:{entry.producer_id},producerEpoch:{entry.producer_epoch},"
            f"state={entry.state.kafka_name},partitions=[{partitions}],"
            f"txnLastUpdateTimestamp={entry.last_update_ms},txnTimeoutMs={entry.timeout_ms}"
        )
    except (MalformedMessage, ValueError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def _versioned_json(data: bytes, cls: type) -> dict[str, Any]:
    version, body = _split(data)
    try:
        payload: Any = message_json(cls.decode(body, version), version)
    except MalformedMessage:
        payload = "unknown"
    return {"version": version, "data": payload}


def format_transaction_log(key: bytes | None, value: bytes | None) -> str:
    """One ``__transaction_state`` record as Kafka's ``TransactionLogMessageFormatter`` prints
    it: ``{"key":{"version":0,"data":{"transactionalId":"t"}},"value":{"version":1,"data":
    {"producerId":5,...}}}``; ``"value":null`` for a tombstone, ``"data":"unknown"`` for a
    version it does not know."""
    return _compact(
        {
            "key": None if key is None else _versioned_json(key, m.TransactionLogKey),
            "value": None if value is None else _versioned_json(value, m.TransactionLogValue),
        }
    )


# -- __cluster_metadata ------------------------------------------------------------------------


def metadata_record_type_name(name: str) -> str:
    """Kafka's ``MetadataRecordType`` name of a record: ``TopicRecord`` -> ``TOPIC_RECORD``
    (the generator's snake case: ``_`` before a capital that follows a lower-case letter)."""
    out = []
    previous_upper = True
    for c in name:
        if c.isupper():
            if not previous_upper:
                out.append("_")
            previous_upper = True
        else:
            previous_upper = False
        out.append(c.upper())
    return "".join(out)


def decode_cluster_metadata(record: Record) -> tuple[str | None, str | None]:
    """``--cluster-metadata-decoder``: every registered metadata record type, cluster
    mirroring's included (``kcore.metadata.records``)."""
    try:
        if record.value is None:
            raise MalformedMessage("the record has a null value")
        message, version = metadata_records.decode_record(record.value)
        name = type(message)._type.name
        payload = {
            "type": metadata_record_type_name(name),
            "version": version,
            "data": message_json(message, version),
        }
        return None, _compact(payload)
    except (metadata_records.MetadataRecordError, MalformedMessage) as e:
        return None, f"Error at {record.offset}, skipping. {e}"


# -- __mirror_state ----------------------------------------------------------------------------


def decode_mirror_state(record: Record) -> tuple[str | None, str | None]:
    """``--mirror-state-decoder`` (spec §11.5, M-108; the example of §8.4 exactly)."""
    try:
        if record.key is None:
            raise MalformedMessage("the record has no key")
        return (
            mirror_dump_key(record.key),
            mirror_dump_value(record.key, record.value),
        )
    except MalformedMessage as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def format_mirror_state(key: bytes | None, value: bytes | None) -> str:
    """One ``__mirror_state`` record as the spec's ``MirrorStateMessageFormatter`` prints it
    (§11.6, M-109): ``{"key":{"type":2,"data":{"mirrorName":"m"}},"value":{"version":0,"data":
    {...}}}``, numbers for the type and the version. A tombstone is ``"value":null`` (the spec
    leaves it open; Kafka's formatters print it so); an unknown type or version has
    ``"data":null``. Raises ``MalformedMessage`` for bytes that do not decode."""
    out: dict[str, Any] = {}
    if key is None:
        out["key"] = None
    else:
        parsed = json.loads(mirror_dump_key(key))
        out["key"] = {"type": int(parsed["type"]), "data": parsed["data"]}
    if value is None or key is None:
        out["value"] = None
    else:
        parsed = json.loads(mirror_dump_value(key, value))
        out["value"] = {"version": int(parsed["version"]), "data": parsed["data"]}
    return _compact(out)


#: ``--<option>`` -> decoder; ``None`` is the default StringDecoder.
DECODERS: dict[str | None, Decoder] = {
    None: decode_string,
    "offsets-decoder": decode_offsets,
    "transaction-log-decoder": decode_transaction_log,
    "cluster-metadata-decoder": decode_cluster_metadata,
    "mirror-state-decoder": decode_mirror_state,
}
