"""Message classes and their codecs, built from the declarations at import time.

Every declared message becomes a class in this module's namespace (``FetchRequest``,
``FetchResponse``, ``RequestHeader``, ``ConsumerProtocolSubscription``, ...). Nested structs are
attributes of their message class (``FetchRequest.FetchTopic``). Field names are the declared
ones in snake case (``ThrottleTimeMs`` → ``throttle_time_ms``); a field absent from a version
keeps its default. Classes use ``__slots__`` and keyword-only constructors::

    req = FetchRequest(max_wait_ms=500, topics=[FetchRequest.FetchTopic(topic="t")])
    data = req.encode(11)                    # bytes of the body at version 11
    assert FetchRequest.decode(data, 11) == req

The reader and writer of a (message, version) are generated on first use (``codegen.py``) and
cached; identical versions share one compiled function. Decoding never raises anything but
:class:`~kcore.protocol.primitives.MalformedMessage`.

``records`` fields decode to a ``memoryview`` into the input (no copy). On encode they accept any
object with ``len()``: bytes-likes are copied into the output unless the output is a
:class:`ScatterBuffer`, which keeps large payloads (and non-buffer objects such as file slices
to be sent with ``os.sendfile``) as separate parts.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

from kcore.protocol import primitives as p
from kcore.protocol.codegen import Generator, default_value_source, snake_case
from kcore.protocol.declarations import MessageDecl, StructDecl, load_all
from kcore.protocol.primitives import MalformedMessage

__all__ = ["MESSAGES", "ScatterBuffer", "Message", "message_type"]

# Payloads at least this large are kept as their own part in a ScatterBuffer instead of copied.
ZERO_COPY_MIN_BYTES = 16 * 1024


class ScatterBuffer(bytearray):
    """An output buffer that keeps large ``records`` payloads out of line.

    ``parts()`` returns the encoded message as a list of bytes-like objects (and any non-buffer
    records objects) whose concatenation is the message; the server writes them in order.
    """

    __slots__ = ("_parts",)

    def __init__(self, initial: bytes = b"") -> None:
        super().__init__(initial)
        self._parts: list[Any] = []

    def append_part(self, payload: Any) -> None:
        if self:
            self._parts.append(bytes(self))
            self.clear()
        self._parts.append(payload)

    def parts(self) -> list[Any]:
        out = self._parts + ([bytes(self)] if self else [])
        return out

    @property
    def total_size(self) -> int:
        return sum(len(x) for x in self._parts) + len(self)


def _write_records(out: bytearray, value: Any, length: bytes) -> None:
    out += length
    if type(out) is ScatterBuffer and (
        len(value) >= ZERO_COPY_MIN_BYTES or not isinstance(value, bytes | bytearray | memoryview)
    ):
        out.append_part(value)
    else:
        out += value


def _wrec(out: bytearray, value: Any) -> None:
    _write_records(out, value, p.INT32.pack(len(value)))


def _wrec_c(out: bytearray, value: Any) -> None:
    _write_records(out, value, p.uvarint_bytes(len(value) + 1))


def _null_error(field: str, version: int) -> ValueError:
    return ValueError(f"{field} is not nullable in version {version}")


_RUNTIME = {
    "_Struct": struct.Struct,
    "_new": object.__new__,
    "_M": MalformedMessage,
    "_I16": p.INT16,
    "_I32": p.INT32,
    "_ruv": p.read_uvarint,
    "_uvb": p.uvarint_bytes,
    "_rstr": p.read_string_body,
    "_rbytes": p.read_bytes_body,
    "_rrec": p.read_records_body,
    "_ruuid": p.read_uuid,
    "_chk": p.check_array_count,
    "_skip": p.skip_tagged,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_wrec": _wrec,
    "_wrec_c": _wrec_c,
    "_null_error": _null_error,
    "_ZERO_UUID": p.ZERO_UUID,
}

# Errors a generated reader can raise on hostile input, all turned into MalformedMessage.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError, RecursionError)


class Message:
    """Base class of every generated message and struct class."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _type: MessageType | None = None  # set on top-level message classes

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        for f in self._fields:
            v = getattr(self, f)
            if isinstance(v, memoryview):
                v = f"<{len(v)} bytes>"
            parts.append(f"{f}={v!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    # -- codec entry points (top-level messages only) -------------------------------------

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Message:
        """Decode a whole body; trailing bytes are an error."""
        buf = data if isinstance(data, memoryview) else memoryview(data)
        obj, pos = cls.decode_from(buf, 0, version)
        if pos != len(buf):
            raise MalformedMessage(f"{len(buf) - pos} unexpected bytes after {cls.__name__}")
        return obj

    @classmethod
    def decode_from(cls, buf: memoryview, pos: int, version: int) -> tuple[Message, int]:
        """Decode from ``buf[pos:]``; returns the message and the position after it."""
        reader = cls._type.reader(version)
        try:
            return reader(buf, pos)
        except MalformedMessage:
            raise
        except _DECODE_ERRORS as e:
            raise MalformedMessage(f"malformed {cls.__name__} v{version}: {e}") from None

    def encode(self, version: int) -> bytes:
        out = bytearray()
        self._type.writer(version)(self, out)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int) -> None:
        """Append the encoding to ``out`` (a ``bytearray`` or a :class:`ScatterBuffer`)."""
        self._type.writer(version)(self, out)


class MessageType:
    """A declared message, its class, and its per-version codecs (built lazily)."""

    def __init__(self, decl: MessageDecl, classes: dict[int, type[Message]]) -> None:
        self.decl = decl
        self.name = decl.name
        self.versions = decl.versions
        self.flexible = decl.flexible
        self.classes = classes  # id(StructDecl) -> class
        self.cls = classes[id(decl.root)]
        self._readers: dict[int, Any] = {}
        self._writers: dict[int, Any] = {}

    def source(self, version: int) -> str:
        return Generator(self.decl, version).generate()

    def _build(self, version: int) -> None:
        if version not in self.versions:
            raise p.UnsupportedVersion(
                f"{self.name} has no version {version} (valid: {self.versions})",
                version=version,
            )
        src = self.source(version)
        ns = _compiled.get(src)
        if ns is None:
            ns = dict(_RUNTIME)
            for sd in self.decl.structs.values():
                cls = self.classes[id(sd)]
                ns[f"C_{sd.name}"] = cls
                ns[f"D_{sd.name}"] = cls()
            filename = f"<kcore codec {self.name} v{version}>"
            _register_source(filename, src)
            exec(compile(src, filename, "exec"), ns)
            _compiled[src] = ns
        root = self.decl.root.name
        self._readers[version] = ns[f"r_{root}"]
        self._writers[version] = ns[f"w_{root}"]

    def reader(self, version: int):
        r = self._readers.get(version)
        if r is None:
            self._build(version)
            r = self._readers[version]
        return r

    def writer(self, version: int):
        w = self._writers.get(version)
        if w is None:
            self._build(version)
            w = self._writers[version]
        return w


_compiled: dict[str, dict] = {}


def _register_source(filename: str, src: str) -> None:
    """Make tracebacks through generated code show its lines."""
    import linecache

    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)


def _make_class(sd: StructDecl, qualname: str, module_ns: dict[str, Any]) -> type[Message]:
    names = tuple(snake_case(f.name) for f in sd.fields)
    if len(set(names)) != len(names):
        raise AssertionError(f"{qualname}: two fields map to one attribute name")
    params, body = [], []
    for f, attr in zip(sd.fields, names):
        default = default_value_source(f, f"C_{f.struct.name}" if f.struct else None)
        if default in ("[]",) or default.endswith("()"):
            params.append(f"{attr}=_UNSET")
            body.append(f"    self.{attr} = {default} if {attr} is _UNSET else {attr}")
        else:
            params.append(f"{attr}={default}")
            body.append(f"    self.{attr} = {attr}")
    src = f"def __init__(self, *, {', '.join(params)}):\n" if params else "def __init__(self):\n"
    src += "\n".join(body) if body else "    pass"
    ns = dict(module_ns)
    exec(compile(src, f"<kcore class {qualname}>", "exec"), ns)
    cls = type(
        sd.name,
        (Message,),
        {"__slots__": names, "_fields": names, "__init__": ns["__init__"], "__module__": __name__},
    )
    cls.__qualname__ = qualname
    return cls


_UNSET = object()


def _build_message(decl: MessageDecl) -> MessageType:
    classes: dict[int, type[Message]] = {}
    # Constructors refer to nested classes by name, so nested ones are created first.
    init_ns: dict[str, Any] = {"_UNSET": _UNSET, "_ZERO_UUID": p.ZERO_UUID}
    order: list[StructDecl] = []

    def postorder(sd: StructDecl, seen: set[int]) -> None:
        if id(sd) in seen:
            return
        seen.add(id(sd))
        for f in sd.fields:
            if f.struct is not None:
                postorder(f.struct, seen)
        order.append(sd)

    postorder(decl.root, set())
    for sd in order:
        qual = decl.name if sd is decl.root else f"{decl.name}.{sd.name}"
        cls = _make_class(sd, qual, init_ns)
        init_ns[f"C_{sd.name}"] = cls
        classes[id(sd)] = cls
    mt = MessageType(decl, classes)
    root = mt.cls
    for sd in order:
        if sd is not decl.root:
            setattr(root, sd.name, classes[id(sd)])
    root._type = mt
    return mt


def _build_all() -> dict[str, MessageType]:
    out: dict[str, MessageType] = {}
    declared = load_all()
    for decl in declared.messages:
        if decl.name in out:
            raise AssertionError(f"message {decl.name} declared twice")
        out[decl.name] = _build_message(decl)
    return out


MESSAGES: dict[str, MessageType] = _build_all()

_module = sys.modules[__name__]
for _name, _mt in MESSAGES.items():
    setattr(_module, _name, _mt.cls)


def message_type(name: str) -> MessageType:
    return MESSAGES[name]


def __getattr__(name: str) -> Any:  # for type checkers and clear errors
    raise AttributeError(f"kcore.protocol.messages has no message {name!r}")
