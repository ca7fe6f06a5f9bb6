"""Hypothesis strategies for the protocol messages, built from the declarations.

``message_strategy(message_type, version)`` draws an instance of a generated message class that
is valid at ``version``: every field present at that version gets a random value of its type
(nullable ones are sometimes ``None``, tagged ones are often left at their default so both the
written and the omitted form are exercised), and every field absent at that version keeps its
constructor default, so ``decode(encode(x), v) == x`` must hold for whatever is drawn.

Sizes are kept small (arrays of 0-3 elements, short strings and byte strings) so that hundreds of
(message, version) pairs can be exercised in a test run of a minute or so.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import FieldDecl, StructDecl
from kcore.protocol.messages import MESSAGES, MessageType

__all__ = ["message_strategy", "value_strategy"]

MAX_ARRAY = 3
MAX_TEXT = 12  # characters
MAX_BYTES = 24

_INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

# Any Unicode scalar value except surrogates (which UTF-8 cannot encode): non-ASCII included.
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=MAX_TEXT)


def _primitive(type_: str) -> st.SearchStrategy:
    if type_ in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[type_]
        # The bounds themselves are drawn often: they are where width mistakes show.
        return st.integers(lo, hi) | st.sampled_from((lo, hi, 0, -1 if lo < 0 else 1))
    if type_ == "bool":
        return st.booleans()
    if type_ == "float64":
        # Finite only: NaN != NaN would break the equality the round trip checks.
        return st.floats(allow_nan=False, allow_infinity=False)
    if type_ == "string":
        return _TEXT
    if type_ in ("bytes", "records"):
        return st.binary(max_size=MAX_BYTES)
    if type_ == "uuid":
        return st.uuids(allow_nil=True)
    raise AssertionError(f"no strategy for type {type_!r}")


def value_strategy(mt: MessageType, fd: FieldDecl, version: int) -> st.SearchStrategy:
    """A strategy for one field's value at ``version`` (the field must be present there)."""
    if fd.is_array:
        if fd.is_struct:
            element = _struct_strategy(mt, fd.struct, version)
        else:
            element = _primitive(fd.element_type)
        value = st.lists(element, max_size=MAX_ARRAY)
    elif fd.is_struct:
        value = _struct_strategy(mt, fd.struct, version)
    else:
        value = _primitive(fd.type)
    if version in fd.nullable:
        value = st.none() | value
    return value


def _default_of(mt: MessageType, sd: StructDecl, fd: FieldDecl) -> st.SearchStrategy:
    """The constructor's default for ``fd``, fresh on every draw (defaults may be mutable)."""
    cls = mt.classes[id(sd)]
    attr = snake_case(fd.name)
    return st.builds(lambda: getattr(cls(), attr))


def _struct_strategy(mt: MessageType, sd: StructDecl, version: int) -> st.SearchStrategy:
    flexible = version in mt.flexible
    kwargs = {}
    for fd in sd.fields:
        if version not in fd.versions:
            continue  # absent at this version: keeps its default
        value = value_strategy(mt, fd, version)
        if fd.tag is not None and flexible:
            # Tagged: written only when not at its default, so draw the default often.
            value = _default_of(mt, sd, fd) | value
        kwargs[snake_case(fd.name)] = value
    return st.builds(mt.classes[id(sd)], **kwargs)


@functools.cache
def _cached(name: str, version: int) -> st.SearchStrategy:
    mt = MESSAGES[name]
    return _struct_strategy(mt, mt.decl.root, version)


def message_strategy(message_type: MessageType | str, version: int) -> st.SearchStrategy:
    """Instances of ``message_type`` (a :class:`MessageType` or its name) valid at ``version``."""
    name = message_type if isinstance(message_type, str) else message_type.name
    mt = MESSAGES[name]
    if version not in mt.versions:
        raise ValueError(f"{name} has no version {version} (valid: {mt.versions})")
    return _cached(name, version)
