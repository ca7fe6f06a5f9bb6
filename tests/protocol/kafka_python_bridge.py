"""A bridge between kcore's messages and kafka-python's, for the byte-agreement tests.

kafka-python 3.x builds its protocol classes from Kafka's JSON schemas (its own copy, Kafka 4.x),
independently of kcore's declarations and codec. This module

* finds kafka-python's class for an API and direction (``kp_class``);
* pairs each kcore field with kafka-python's (``pairing``), and lists the differences between
  the two declarations at a version (``schema_differences``);
* converts a kcore message to kafka-python's representation (``Bridge.to_kp``) and back
  (``Bridge.from_kp``).

Representation differences bridged here (none of them changes a byte on the wire):

* ``uuid``: kafka-python decodes the all-zero UUID as ``None``; kcore keeps ``UUID(int=0)``.
* ``records``: kcore decodes to a ``memoryview``; kafka-python to ``bytes``.
* ``AuthorizedOperations`` fields: kafka-python patches them into a ``bitfield`` type (a
  ``set`` of bit numbers, ``None`` for ``INT32_MIN``, "not requested") and renames some of
  them; kcore keeps Kafka's ``int32``. The pairing falls back to the field's position.
* Tagged fields at their default are omitted on the wire by both sides; kafka-python's default
  for a tagged struct is ``None`` where kcore's (and Kafka's) is a default-valued struct, so a
  kcore tagged struct equal to its default is handed to kafka-python as "not set".

kafka-python writes the value of a tagged field with ``tagged=None``: a struct inside a tagged
field always ends with an *empty* tagged-field section, so it cannot represent a tagged field
set inside a tagged field's value. No message kafka-python knows declares one; ``to_kp`` raises
``NotRepresentable`` should one appear.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from dataclasses import dataclass
from typing import Any

# kafka-python loads its schemas with importlib.resources.read_text, deprecated since Python
# 3.11: one DeprecationWarning per class, ~220 in all, none of them about kcore.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.api_header import RequestHeader as KpRequestHeader
    from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.schemas.fields.codecs import BitField
    from kafka.protocol.schemas.fields.simple import SimpleField
    from kafka.protocol.schemas.fields.struct import StructField

from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import FieldDecl, StructDecl
from kcore.protocol.messages import MessageType
from kcore.protocol.primitives import ZERO_UUID

# -- kafka-python's classes -------------------------------------------------------------------


def _load_kp_classes() -> dict[tuple[int, str], type]:
    import kafka.protocol as kp

    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        # ``old`` is the pre-3.0 hand-written protocol; ``generate_stubs`` is a script.
        if ".old" in mod.name or mod.name.endswith("generate_stubs"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module(mod.name)

    def subclasses(cls: type):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    found: dict[tuple[int, str], type] = {}
    for cls in subclasses(ApiMessage):
        if cls._class_version is None:  # the primary class, not a ``Cls[v]`` wrapper
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP_CLASSES: dict[tuple[int, str], type] = _load_kp_classes()


def kp_class(api_key: int, direction: str) -> type | None:
    """kafka-python's class for an API's ``"request"`` or ``"response"``, or None."""
    return KP_CLASSES.get((api_key, direction))


def kp_data_class(name: str) -> type:
    """kafka-python's class for a non-API schema (``ConsumerProtocolAssignment``, ...)."""
    from kafka.protocol.consumer import metadata

    return getattr(metadata, name)


# -- pairing the two declarations -------------------------------------------------------------


def _kp_fields(kp_struct: StructField) -> tuple:
    return kp_struct._fields or ()


@dataclass(frozen=True, slots=True)
class Pair:
    """A kcore field and kafka-python's field for it."""

    decl: FieldDecl
    attr: str  # kcore attribute
    kp: Any  # kafka-python's field object, None if it has none
    bitfield: bool  # kafka-python represents this int32 as a set of bits

    def kp_inner_struct(self) -> StructField:
        return self.kp.array_of if self.decl.is_array else self.kp


_PAIRINGS: dict[tuple[int, int], list[Pair]] = {}


def pairing(sd: StructDecl, kp_struct: StructField) -> list[Pair]:
    """Pair every field of ``sd`` with kafka-python's field of the same Kafka name.

    kafka-python renames the ``AuthorizedOperations`` fields it turns into bitfields, so a field
    without a namesake is paired with kafka-python's field at the same position, if that one has
    no namesake in kcore either. A field with no counterpart (a kcore-only field, such as the
    mirroring fields of Fetch v19) is paired with ``None``.
    """
    key = (id(sd), id(kp_struct))
    cached = _PAIRINGS.get(key)
    if cached is not None:
        return cached
    kp_fields = _kp_fields(kp_struct)
    by_name = {f._name: f for f in kp_fields}
    kcore_names = {fd.name for fd in sd.fields}
    pairs = []
    for i, fd in enumerate(sd.fields):
        kf = by_name.get(fd.name)
        if kf is None and i < len(kp_fields) and kp_fields[i]._name not in kcore_names:
            kf = kp_fields[i]
        bitfield = isinstance(kf, SimpleField) and kf._type is BitField
        pairs.append(Pair(fd, snake_case(fd.name), kf, bitfield))
    _PAIRINGS[key] = pairs
    return pairs


def _kp_type(kf: Any) -> str:
    return kf._json["type"]


def schema_differences(
    sd: StructDecl, kp_struct: StructField, version: int, flexible: bool
) -> list:
    """Differences between kcore's and kafka-python's declarations of a struct at ``version``.

    Compares which fields exist, their order, types, nullability and tags. An empty list means
    the two declarations describe the same bytes (up to the bitfield renaming).
    """
    diffs: list[str] = []
    present = [fd for fd in sd.fields if version in fd.versions]
    pairs = {p.decl.name: p for p in pairing(sd, kp_struct)}
    missing = [fd.name for fd in present if pairs[fd.name].kp is None]
    if missing:
        return [f"{sd.name} v{version}: kafka-python has no field {missing}"]
    kp_present = [f for f in _kp_fields(kp_struct) if f.for_version_q(version)]
    paired_kp = [pairs[fd.name].kp for fd in present]
    if [id(f) for f in paired_kp] != [id(f) for f in kp_present]:
        diffs.append(
            f"{sd.name} v{version}: kcore fields {[fd.name for fd in present]} vs "
            f"kafka-python {[f._name for f in kp_present]}"
        )
        return diffs
    for fd in present:
        p = pairs[fd.name]
        kf = p.kp
        kt = _kp_type(kf)
        if kt != fd.type and not (p.bitfield and fd.type == "int32"):
            diffs.append(f"{sd.name}.{fd.name} v{version}: type {fd.type} vs {kt}")
        if (version in fd.nullable) != kf.nullable_for_version_q(version):
            diffs.append(f"{sd.name}.{fd.name} v{version}: nullability differs")
        kcore_tagged = fd.tag is not None and flexible
        kp_tagged = kf.tagged_field_q(version) and flexible
        if kcore_tagged != kp_tagged or (kcore_tagged and fd.tag != kf.tag):
            diffs.append(f"{sd.name}.{fd.name} v{version}: tag {fd.tag} vs {kf.tag}")
        if fd.struct is not None and not diffs:
            diffs += schema_differences(fd.struct, p.kp_inner_struct(), version, flexible)
    return diffs


# -- converting values ------------------------------------------------------------------------


def int32_to_bits(value: int) -> set[int] | None:
    """An int32 as kafka-python's bitfield (``None`` is INT32_MIN, "not requested")."""
    if value == -(2**31):
        return None
    return BitField.from_32_bit_field(value)


def bits_to_int32(bits: set[int] | None) -> int:
    raw = BitField.to_32_bit_field({31} if bits is None else bits)
    return raw - 2**32 if raw >= 2**31 else raw


class NotRepresentable(ValueError):
    """A kcore message that kafka-python has no way to express."""


class Bridge:
    """Converts one kcore message type at one version to kafka-python's objects and back."""

    def __init__(self, mt: MessageType, kp_cls: type, version: int) -> None:
        self.mt = mt
        self.kp_cls = kp_cls
        self.version = version
        self.flexible = version in mt.flexible
        # A default instance per struct: the values tagged fields are compared against.
        self._defaults = {name: mt.classes[id(sd)]() for name, sd in mt.decl.structs.items()}

    def differences(self) -> list[str]:
        return schema_differences(
            self.mt.decl.root, self.kp_cls._struct, self.version, self.flexible
        )

    # kcore -> kafka-python

    def to_kp(self, msg: Any) -> Any:
        """The kafka-python object with the same values as kcore's ``msg``."""
        kwargs = self._kp_kwargs(msg, self.mt.decl.root, self.kp_cls._struct, False)
        return self.kp_cls(version=self.version, **kwargs)

    def _kp_kwargs(
        self, obj: Any, sd: StructDecl, kp_struct: StructField, in_tag: bool
    ) -> dict[str, Any]:
        kwargs = {}
        default = self._defaults[sd.name]
        for p in pairing(sd, kp_struct):
            fd = p.decl
            if self.version not in fd.versions:
                continue
            value = getattr(obj, p.attr)
            tagged = fd.tag is not None and self.flexible
            if tagged and value == getattr(default, p.attr):
                continue  # tagged and at its default: kafka-python's default (not written)
            if tagged and in_tag:
                raise NotRepresentable(f"{sd.name}.{fd.name}: a tagged field in a tagged value")
            kwargs[p.kp.name] = self._value_to_kp(value, p, in_tag or tagged)
        return kwargs

    def _value_to_kp(self, value: Any, p: Pair, in_tag: bool) -> Any:
        fd = p.decl
        if value is None:
            return None
        if fd.is_struct:
            inner = p.kp_inner_struct()
            make = inner.data_class
            if fd.is_array:
                return [
                    make(version=self.version, **self._kp_kwargs(v, fd.struct, inner, in_tag))
                    for v in value
                ]
            return make(version=self.version, **self._kp_kwargs(value, fd.struct, inner, in_tag))
        if fd.is_array:
            return [self._scalar_to_kp(v, fd.element_type, p.bitfield) for v in value]
        return self._scalar_to_kp(value, fd.type, p.bitfield)

    @staticmethod
    def _scalar_to_kp(value: Any, type_: str, bitfield: bool) -> Any:
        if bitfield:
            return int32_to_bits(value)
        if type_ in ("records", "bytes") and isinstance(value, memoryview):
            return value.tobytes()
        return value

    # kafka-python -> kcore

    def from_kp(self, kp_obj: Any) -> Any:
        """The kcore message with the same values as kafka-python's ``kp_obj``."""
        return self._from_kp_struct(kp_obj, self.mt.decl.root, self.kp_cls._struct)

    def _from_kp_struct(self, kp_obj: Any, sd: StructDecl, kp_struct: StructField) -> Any:
        kwargs = {}
        for p in pairing(sd, kp_struct):
            fd = p.decl
            if self.version not in fd.versions:
                continue
            value = getattr(kp_obj, p.kp.name)
            tagged = fd.tag is not None and self.flexible
            if tagged and value is None and fd.is_struct and self.version not in fd.nullable:
                continue  # kafka-python's "not set" for a tagged struct: kcore's default
            kwargs[p.attr] = self._value_from_kp(value, p)
        return self.mt.classes[id(sd)](**kwargs)

    def _value_from_kp(self, value: Any, p: Pair) -> Any:
        fd = p.decl
        if value is None and not (fd.type == "uuid" or p.bitfield):
            return None
        if fd.is_struct:
            inner = p.kp_inner_struct()
            if fd.is_array:
                return [self._from_kp_struct(v, fd.struct, inner) for v in value]
            return self._from_kp_struct(value, fd.struct, inner)
        if fd.is_array:
            return [self._scalar_from_kp(v, fd.element_type, p.bitfield) for v in value]
        return self._scalar_from_kp(value, fd.type, p.bitfield)

    @staticmethod
    def _scalar_from_kp(value: Any, type_: str, bitfield: bool) -> Any:
        if bitfield:
            return bits_to_int32(value)
        if type_ == "uuid" and value is None:
            return ZERO_UUID
        return value


def kp_decode(kp_cls: type, data: bytes, version: int, **kwargs: Any) -> Any:
    """kafka-python's decoding of ``data`` at ``version`` (``header=``/``framed=`` pass through).

    For ApiVersionsResponse this skips kafka-python's override of ``decode``, which reads every
    response with a nonzero error code as v0 (a known deviation, pinned by its own test).
    """
    if kp_cls.__name__ == "ApiVersionsResponse":
        return super(kp_cls, kp_cls).decode(data, version=version, **kwargs)
    return kp_cls.decode(data, version=version, **kwargs)


def kp_decode_whole(kp_cls: type, data: bytes, version: int) -> tuple[Any, int]:
    """kafka-python's compiled decoder run directly: the object and the bytes it consumed.

    ``ApiMessage.decode`` ignores trailing bytes; this tells whether kafka-python read exactly
    the body kcore wrote.
    """
    flexible = kp_cls.flexible_version_q(version)
    decode = kp_cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=kp_cls[None]
    )
    return decode(memoryview(data), 0)


__all__ = [
    "Bridge",
    "KpRequestHeader",
    "KpResponseHeader",
    "NotRepresentable",
    "KP_CLASSES",
    "bits_to_int32",
    "int32_to_bits",
    "kp_class",
    "kp_data_class",
    "kp_decode",
    "kp_decode_whole",
    "pairing",
    "schema_differences",
]
