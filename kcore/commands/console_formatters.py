"""``kcore console-consumer --formatter``: Kafka's message formatters by their class names.

:class:`DefaultMessageFormatter` is Kafka's (``org.apache.kafka.tools.consumer``), byte for byte:
with ``print.timestamp``, ``print.partition``, ``print.offset``, ``print.headers`` and
``print.key`` a record prints as::

    CreateTime:1700000000000<TAB>Partition:0<TAB>Offset:5<TAB>h1:v1,h2:v2<TAB>key<TAB>value

fields in that order, each followed by ``key.separator`` (a tab) when a later field is printed
and the last by ``line.separator``; a null key, value or header value prints ``null.literal``
(``null``); no headers prints ``NO_HEADERS``. ``print.epoch`` and ``print.delivery`` print
``Epoch:NOT_PRESENT`` / ``Delivery:NOT_PRESENT``, because Kafka's console consumer hands the
formatter a copy of the record without them. ``key.deserializer`` / ``value.deserializer`` /
``headers.deserializer`` take the Kafka deserializers of :data:`DESERIALIZERS`.

The formatters of Kafka's internal topics (offsets, transaction log) and of ``__mirror_state``
(spec §11.6, M-109) are the decoders of :mod:`kcore.inspect.decoders` (``format_offsets(key,
value) -> str`` ...), found by name when first used: a build without that module says so.

Every property a formatter does not know is refused (:class:`FormatterError`), not ignored.
"""

from __future__ import annotations

import importlib
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kcore.record import TimestampType

__all__ = [
    "DESERIALIZERS",
    "FORMATTERS",
    "DefaultMessageFormatter",
    "FormatterError",
    "make_formatter",
]


class FormatterError(ValueError):
    """A formatter that does not exist or cannot be configured, or a record it cannot show."""


class Formatter(Protocol):
    def format(self, record: Any) -> bytes: ...


# -- Kafka's deserializers, as their toString() shows the value ----------------------------------


def _sized(name: str, size: int, unpack: Callable[[bytes], Any]) -> Callable[[bytes], str]:
    def run(data: bytes) -> str:
        if len(data) != size:
            raise FormatterError(f"Size of data received by {name} is not {size}")
        return str(unpack(data))

    return run


def _string(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _bytes(data: bytes) -> str:
    # Kafka's Bytes.toString: printable ASCII as is (but backslash), the rest as \xNN.
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x5C else f"\\x{b:02X}" for b in data)


def _uuid(data: bytes) -> str:
    try:
        return str(uuid.UUID(data.decode("utf-8")))
    except ValueError:
        raise FormatterError("Error parsing data into UUID") from None


_PKG = "org.apache.kafka.common.serialization."
DESERIALIZERS: Mapping[str, Callable[[bytes], str]] = {
    _PKG + "StringDeserializer": _string,
    _PKG + "IntegerDeserializer": _sized(
        "IntegerDeserializer", 4, lambda b: struct.unpack(">i", b)[0]
    ),
    _PKG + "LongDeserializer": _sized("LongDeserializer", 8, lambda b: struct.unpack(">q", b)[0]),
    _PKG + "ShortDeserializer": _sized("ShortDeserializer", 2, lambda b: struct.unpack(">h", b)[0]),
    _PKG + "UUIDDeserializer": _uuid,
    _PKG + "BytesDeserializer": _bytes,
}


def _deserializer(props: Mapping[str, str], name: str) -> Callable[[bytes], str] | None:
    cls = props.get(name)
    if cls is None or not cls.strip():
        return None
    found = DESERIALIZERS.get(cls.strip())
    if found is None:
        known = ", ".join(sorted(DESERIALIZERS))
        raise FormatterError(f"{name} {cls} is not supported; kcore knows {known}")
    return found


# -- DefaultMessageFormatter ---------------------------------------------------------------------

_TIMESTAMP_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
_FLAGS = (
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.delivery",
    "print.epoch",
    "print.headers",
    "print.key",
    "print.value",
)
_SEPARATORS = ("key.separator", "line.separator", "headers.separator", "null.literal")
_DESERIALIZER_PROPS = ("key.deserializer", "value.deserializer", "headers.deserializer")


class DefaultMessageFormatter:
    """Kafka's ``DefaultMessageFormatter`` (see the module docstring). ``props`` are the
    ``--property`` settings; an unknown one raises :class:`FormatterError`."""

    KNOWN = frozenset((*_FLAGS, *_SEPARATORS, *_DESERIALIZER_PROPS))

    def __init__(self, props: Mapping[str, str]) -> None:
        unknown = sorted(k for k in props if k not in self.KNOWN)
        if unknown:
            raise FormatterError(
                f"Unknown property '{unknown[0]}' for DefaultMessageFormatter; it takes "
                + ", ".join(sorted(self.KNOWN))
            )
        flags = {f: props[f].strip().lower() == "true" for f in _FLAGS if f in props}
        self.print_timestamp = flags.get("print.timestamp", False)
        self.print_partition = flags.get("print.partition", False)
        self.print_offset = flags.get("print.offset", False)
        self.print_delivery = flags.get("print.delivery", False)
        self.print_epoch = flags.get("print.epoch", False)
        self.print_headers = flags.get("print.headers", False)
        self.print_key = flags.get("print.key", False)
        self.print_value = flags.get("print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()
        self.key_deserializer = _deserializer(props, "key.deserializer")
        self.value_deserializer = _deserializer(props, "value.deserializer")
        self.headers_deserializer = _deserializer(props, "headers.deserializer")

    def _show(self, data: bytes | None, deserializer: Callable[[bytes], str] | None) -> bytes:
        raw = self.null_literal if data is None else bytes(data)
        return raw if deserializer is None else deserializer(raw).encode()

    def format(self, record: Any) -> bytes:
        """The bytes printed for ``record`` (a :class:`~kcore.client.consumer.ConsumerRecord`)."""
        # Each field is followed by the column separator when any later field is printed.
        fields: list[bytes] = []
        if self.print_timestamp:
            name = _TIMESTAMP_NAMES.get(record.timestamp_type)
            fields.append(f"{name}:{record.timestamp}".encode() if name else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_delivery:
            fields.append(b"Delivery:NOT_PRESENT")
        if self.print_epoch:
            fields.append(b"Epoch:NOT_PRESENT")
        if self.print_headers:
            if not record.headers:
                fields.append(b"NO_HEADERS")
            else:
                fields.append(
                    self.headers_separator.join(
                        k.encode() + b":" + self._show(v, self.headers_deserializer)
                        for k, v in record.headers
                    )
                )
        if self.print_key:
            fields.append(self._show(record.key, self.key_deserializer))
        out = self.key_separator.join(fields)
        if self.print_value:
            if fields:
                out += self.key_separator
            return out + self._show(record.value, self.value_deserializer) + self.line_separator
        # Without the value, the last field ends with the line separator instead.
        return out + self.line_separator if fields else b""


class NoOpMessageFormatter:
    """Kafka's ``NoOpMessageFormatter``: prints nothing (to count or drain a topic)."""

    def __init__(self, props: Mapping[str, str]) -> None:
        if props:
            raise FormatterError(
                f"NoOpMessageFormatter takes no properties, not '{next(iter(props))}'"
            )

    def format(self, record: Any) -> bytes:
        return b""


class DecoderFormatter:
    """A formatter that prints ``decoder(key, value)`` and a newline per record; the decoder is
    ``module:function``, imported when the formatter is made."""

    def __init__(self, class_name: str, decoder: str, props: Mapping[str, str]) -> None:
        if props:
            raise FormatterError(f"{class_name} takes no properties, not '{next(iter(props))}'")
        module, _, function = decoder.partition(":")
        try:
            self._decode = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError):
            raise FormatterError(
                f"The formatter {class_name} is not available in this build of kcore "
                f"(its decoder {decoder} is missing)"
            ) from None

    def format(self, record: Any) -> bytes:
        text = self._decode(record.key, record.value)
        return (text + "\n").encode() if text else b""


_DECODERS = "kcore.inspect.decoders"
_OFFSETS = f"{_DECODERS}:format_offsets"
_TXN_LOG = f"{_DECODERS}:format_transaction_log"
_MIRROR_STATE = f"{_DECODERS}:format_mirror_state"

# Class name -> how to make it: a formatter class taking the properties, or the decoder.
FORMATTERS: Mapping[str, type | str] = {
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter": DefaultMessageFormatter,
    "kafka.tools.DefaultMessageFormatter": DefaultMessageFormatter,  # before Kafka 4.0
    "org.apache.kafka.tools.consumer.NoOpMessageFormatter": NoOpMessageFormatter,
    "kafka.tools.NoOpMessageFormatter": NoOpMessageFormatter,
    "org.apache.kafka.tools.consumer.OffsetsMessageFormatter": _OFFSETS,
    "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter": _OFFSETS,
    "kafka.coordinator.group.OffsetsMessageFormatter": _OFFSETS,
    "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter": _TXN_LOG,
    "kafka.coordinator.transaction.TransactionLog$TransactionLogMessageFormatter": _TXN_LOG,
    "kafka.coordinator.transaction.TransactionLogMessageFormatter": _TXN_LOG,
    "org.apache.kafka.tools.consumer.MirrorStateMessageFormatter": _MIRROR_STATE,
}

DEFAULT_FORMATTER = "org.apache.kafka.tools.consumer.DefaultMessageFormatter"


def make_formatter(class_name: str, props: Mapping[str, str]) -> Formatter:
    """The formatter Kafka names ``class_name``, configured with ``props``;
    :class:`FormatterError` for an unknown class, a property it does not take, or a decoder
    missing from this build."""
    made = FORMATTERS.get(class_name)
    if made is None:
        raise FormatterError(
            f"Unknown formatter class {class_name}; kcore has " + ", ".join(sorted(FORMATTERS))
        )
    if isinstance(made, str):
        return DecoderFormatter(class_name, made, props)
    return made(props)
