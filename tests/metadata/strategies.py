"""Hypothesis strategies for metadata records, from their declarations.

Like ``tests/protocol/strategies.py`` but over any :class:`MessageType`, so that record types
that exist only in :mod:`kcore.metadata.records` (``PartitionChangeRecord`` v3) are drawn too.
Every field present at the version gets a random value of its type; absent fields keep their
defaults, so ``decode(encode(x)) == x`` must hold.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import FieldDecl, StructDecl
from kcore.protocol.messages import MessageType

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)


def _primitive(type_: str) -> st.SearchStrategy:
    if type_ in _INTS:
        lo, hi = _INTS[type_]
        return st.integers(lo, hi) | st.sampled_from((lo, hi, 0, -1 if lo < 0 else 1))
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False, allow_infinity=False),
        "string": _TEXT,
        "bytes": st.binary(max_size=16),
        "uuid": st.uuids(allow_nil=True),
    }[type_]


def _field(mt: MessageType, fd: FieldDecl, version: int) -> st.SearchStrategy:
    if fd.is_struct:
        element = _struct(mt, fd.struct, version)
    else:
        element = _primitive(fd.element_type)
    value = st.lists(element, max_size=3) if fd.is_array else element
    if version in fd.nullable:
        value = st.none() | value
    return value


def _struct(mt: MessageType, sd: StructDecl, version: int) -> st.SearchStrategy:
    cls = mt.classes[id(sd)]
    kwargs = {}
    for fd in sd.fields:
        if version not in fd.versions:
            continue
        value = _field(mt, fd, version)
        if fd.tag is not None:
            attr = snake_case(fd.name)
            value = st.builds(lambda a=attr: getattr(cls(), a)) | value
        kwargs[snake_case(fd.name)] = value
    return st.builds(cls, **kwargs)


def record_strategy(mt: MessageType, version: int) -> st.SearchStrategy:
    return _struct(mt, mt.decl.root, version)
