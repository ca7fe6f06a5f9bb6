"""A decoded message as the JSON Kafka's generated ``*JsonConverter.write`` produces.

Kafka's tools print records as JSON through converters generated from the same schemas as the
codec (``kafka-dump-log.sh --cluster-metadata-decoder``, ``--offsets-decoder``, the console
consumer's formatters). :func:`message_json` gives the same object from a kcore message, so
that ``json.dumps(..., separators=(",", ":"))`` prints the line Kafka prints:

* fields in declaration order, named in camelCase (``TopicName`` -> ``topicName``);
* only the fields present at ``version``; a tagged field only when it differs from its default;
* integers and booleans as JSON numbers and booleans, strings as strings, null as null;
* a ``uuid`` as ``Uuid.toString`` (URL-safe base64 without padding, 22 characters);
* ``bytes`` as base64 with padding (Jackson's ``BinaryNode``); ``records`` as their size
  (Kafka writes ``MemoryRecords`` fields only as ``sizeInBytes`` with ``_serializeRecords``
  off, which is how every tool calls it).

Pure: no I/O.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

__all__ = ["camel_case", "message_json"]


def camel_case(name: str) -> str:
    """A declared field name as Kafka's JSON has it: ``MirrorName`` -> ``mirrorName``."""
    return name[:1].lower() + name[1:]


def _scalar(type_name: str, value: Any) -> Any:
    if value is None:
        return None
    if type_name == "uuid":
        raw = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    if type_name == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if type_name == "records":
        return len(value)
    return value


def message_json(message: Any, version: int, struct: Any = None) -> dict[str, Any]:
    """The JSON object (a dict, in field order) of ``message`` at ``version``.

    Args:
        message: a generated message (or struct) object of :mod:`kcore.protocol.messages`.
        version: the version it was read at (fields absent at that version are left out).
        struct: the struct declaration of ``message``; found from the message's type when
            ``message`` is a top-level message.
    """
    decl = struct if struct is not None else type(message)._type.decl.root
    # The generated classes keep their attributes in declaration order (messages._make_class).
    attrs = type(message)._fields
    defaults = None
    out: dict[str, Any] = {}
    for fd, attr in zip(decl.fields, attrs, strict=True):
        if version not in fd.versions:
            continue
        value = getattr(message, attr)
        if fd.tag is not None:
            if defaults is None:
                defaults = type(message)()
            if value == getattr(defaults, attr):
                continue
        name = camel_case(fd.name)
        if value is None:
            out[name] = None
        elif fd.struct is not None and fd.is_array:
            out[name] = [message_json(v, version, fd.struct) for v in value]
        elif fd.struct is not None:
            out[name] = message_json(value, version, fd.struct)
        elif fd.is_array:
            out[name] = [_scalar(fd.element_type, v) for v in value]
        else:
            out[name] = _scalar(fd.type, value)
    return out
