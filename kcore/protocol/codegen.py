"""Generate the Python source of a message's reader and writer for one version.

Theory of operation
-------------------
For each (message, version) pair the generator walks the declaration and emits one reader
``r_<Struct>(buf, pos) -> (obj, pos)`` and one writer ``w_<Struct>(obj, out)`` per struct present
at that version. The code is straight-line: versions are resolved here, not at run time, so a
reader for Fetch v16 contains no test of the version at all. Two tricks keep it fast:

* consecutive fixed-width fields share one precompiled ``struct.Struct`` (``pack``/``unpack_from``
  of ``>iqh`` instead of three calls);
* one-byte unsigned varints (nearly every compact length and tag count) are decoded inline.

The generated functions assume the caller (``messages.py``) catches ``struct.error``,
``IndexError`` and friends and turns them into :class:`~kcore.protocol.primitives.MalformedMessage`:
fixed-width reads are bounds-checked by ``struct`` itself, and every length read from the wire is
checked before it is used (``primitives.read_*_body``, ``check_array_count``).

``tools/show_codec.py Fetch 16`` prints what this module generates, for reading and debugging.
"""

from __future__ import annotations

import keyword
import re
import struct

from kcore.protocol.declarations import FieldDecl, MessageDecl, StructDecl

FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
}

# Method names of the generated classes; no field may shadow them.
RESERVED_NAMES = frozenset({"encode", "encode_into", "decode", "decode_from"})


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as a Python attribute (``ThrottleTimeMs`` → ``throttle_time_ms``)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) or s in RESERVED_NAMES else s


def default_value_source(fd: FieldDecl, struct_ref: str | None = None) -> str:
    """A Python expression for the field's default (evaluated per object for mutable values)."""
    d = fd.default
    if fd.is_array:
        return "None" if d == "null" else "[]"
    t = fd.type
    if fd.is_struct:
        return "None" if d == "null" else f"{struct_ref}()"
    if d == "null":
        return "None"
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return str(int(d, 0)) if d else "0"
    if t == "float64":
        return repr(float(d)) if d else "0.0"
    if t == "bool":
        return "True" if d == "true" else "False"
    if t == "string":
        return repr(d or "")
    if t == "uuid":
        return "_ZERO_UUID"
    if t == "bytes":
        return "b''"
    if t == "records":
        return "None"
    raise AssertionError(t)


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.structs: dict[str, str] = {}  # struct format -> name of its Struct constant
        self._tmp = 0

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def fixed_struct(self, fmt: str) -> str:
        name = self.structs.get(fmt)
        if name is None:
            name = f"_S{len(self.structs)}"
            self.structs[fmt] = name
        return name

    def tmp(self, prefix: str) -> str:
        self._tmp += 1
        return f"{prefix}{self._tmp}"


def _fields_at(sd: StructDecl, version: int) -> list[FieldDecl]:
    return [f for f in sd.fields if version in f.versions]


def _field_runs(fields: list[FieldDecl]):
    """Consecutive fixed-width fields as one list (one ``struct`` call each), others alone."""
    i = 0
    while i < len(fields):
        if fields[i].type in FIXED_FORMATS:
            j = i
            while j < len(fields) and fields[j].type in FIXED_FORMATS:
                j += 1
            yield fields[i:j]
            i = j
        else:
            yield fields[i]
            i += 1


def _struct_fn(sd: StructDecl) -> str:
    return sd.name


class Generator:
    """Emits the source for one message at one version."""

    def __init__(self, msg: MessageDecl, version: int) -> None:
        self.msg = msg
        self.version = version
        self.flexible = version in msg.flexible
        self.e = _Emitter()

    # -- helpers -----------------------------------------------------------------------------

    def _compact(self, fd: FieldDecl) -> bool:
        return self.flexible and not fd.flexible_never

    def _nullable(self, fd: FieldDecl) -> bool:
        return self.version in fd.nullable

    def _split(self, sd: StructDecl) -> tuple[list[FieldDecl], list[FieldDecl]]:
        """The struct's fields present at this version: (regular in wire order, tagged by tag).
        Tagged fields exist only in flexible versions; elsewhere a field is written in place."""
        present = _fields_at(sd, self.version)
        regular = [f for f in present if f.tag is None or not self.flexible]
        tagged = [f for f in present if f.tag is not None and self.flexible]
        return regular, sorted(tagged, key=lambda f: f.tag)

    def generate(self) -> str:
        done: set[str] = set()
        body: list[str] = []

        def visit(sd: StructDecl) -> None:
            if sd.name in done:
                return
            done.add(sd.name)
            self.e.lines = []
            self._reader(sd)
            self._writer(sd)
            body.extend(self.e.lines)
            for fd in _fields_at(sd, self.version):
                if fd.struct is not None:
                    visit(fd.struct)

        visit(self.msg.root)
        consts = [f"{name} = _Struct({fmt!r})" for fmt, name in self.e.structs.items()]
        return "\n".join(consts + body) + "\n"

    # -- reading -----------------------------------------------------------------------------

    def _read_uvarint(self, depth: int, target: str) -> None:
        e = self.e
        e.emit(depth, f"{target} = buf[pos]")
        e.emit(depth, f"if {target} < 128:")
        e.emit(depth + 1, "pos += 1")
        e.emit(depth, "else:")
        e.emit(depth + 1, f"{target}, pos = _ruv(buf, pos)")

    def _read_length(self, depth: int, fd: FieldDecl, kind: str) -> str:
        """Emit code leaving a length (or count) in a temp, ``-1`` meaning null; return its name.

        A negative length on a non-nullable field, or one below -1, is refused here.
        """
        e = self.e
        n = e.tmp("n")
        if self._compact(fd):
            self._read_uvarint(depth, n)
            e.emit(depth, f"{n} -= 1")
        else:
            short = kind == "string"
            e.emit(depth, f"{n}, = {'_I16' if short else '_I32'}.unpack_from(buf, pos)")
            e.emit(depth, f"pos += {2 if short else 4}")
        if self._nullable(fd):
            e.emit(depth, f"if {n} < -1:")
            e.emit(depth + 1, f"raise _M('negative length {{}} for {fd.name}'.format({n}))")
        else:
            e.emit(depth, f"if {n} < 0:")
            e.emit(depth + 1, f"raise _M('null or negative length for non-nullable {fd.name}')")
        return n

    def _read_nullable(self, depth: int, fd: FieldDecl, n: str, target: str) -> int:
        """Emit the null branch of a nullable field; return the depth for the non-null branch."""
        if not self._nullable(fd):
            return depth
        self.e.emit(depth, f"if {n} < 0:")
        self.e.emit(depth + 1, f"{target} = None")
        self.e.emit(depth, "else:")
        return depth + 1

    def _read_value(self, depth: int, fd: FieldDecl, target: str) -> None:
        """Emit code reading one field's value into ``target``."""
        e = self.e
        t = fd.type
        if fd.is_array:
            n = self._read_length(depth, fd, "array")
            d = self._read_nullable(depth, fd, n, target)
            e.emit(d, f"_chk(buf, pos, {n})")
            el = fd.element_type
            if el in FIXED_FORMATS:
                code = FIXED_FORMATS[el]
                size = struct.calcsize(">" + code)
                e.emit(d, f"{target} = list(_unpack_from('>%d{code}' % {n}, buf, pos))")
                e.emit(d, f"pos += {size} * {n}")
            else:
                lst = e.tmp("lst")
                e.emit(d, f"{lst} = []")
                e.emit(d, f"for _ in range({n}):")
                item = e.tmp("v")
                if fd.is_struct:
                    e.emit(d + 1, f"{item}, pos = r_{_struct_fn(fd.struct)}(buf, pos)")
                else:
                    elem = FieldDecl(fd.name, el, fd.versions, flexible_never=fd.flexible_never)
                    self._read_value(d + 1, elem, item)
                e.emit(d + 1, f"{lst}.append({item})")
                e.emit(d, f"{target} = {lst}")
            return
        if fd.is_struct:
            fn = f"r_{_struct_fn(fd.struct)}"
            if self._nullable(fd):
                # The marker is an int8: Kafka reads any negative one as null (writing -1) and
                # anything else as present (writing 1).
                e.emit(depth, "if buf[pos] >= 128:")
                e.emit(depth + 1, f"{target} = None")
                e.emit(depth + 1, "pos += 1")
                e.emit(depth, "else:")
                e.emit(depth + 1, f"{target}, pos = {fn}(buf, pos + 1)")
            else:
                e.emit(depth, f"{target}, pos = {fn}(buf, pos)")
            return
        if t in FIXED_FORMATS:
            name = e.fixed_struct(">" + FIXED_FORMATS[t])
            e.emit(depth, f"{target}, = {name}.unpack_from(buf, pos)")
            e.emit(depth, f"pos += {struct.calcsize('>' + FIXED_FORMATS[t])}")
            return
        if t == "uuid":
            e.emit(depth, f"{target}, pos = _ruuid(buf, pos)")
            return
        reader = {"string": "_rstr", "bytes": "_rbytes", "records": "_rrec"}[t]
        n = self._read_length(depth, fd, "string" if t == "string" else "bytes")
        d = self._read_nullable(depth, fd, n, target)
        e.emit(d, f"{target}, pos = {reader}(buf, pos, {n})")

    def _reader(self, sd: StructDecl) -> None:
        e = self.e
        regular, tagged = self._split(sd)
        e.emit(0, "")
        e.emit(0, f"def r_{_struct_fn(sd)}(buf, pos):")
        e.emit(1, f"o = _new(C_{_struct_fn(sd)})")
        # Fields absent at this version (and tagged ones, until read) get their defaults.
        for fd in sd.fields:
            if fd in regular:
                continue
            e.emit(
                1,
                f"o.{snake_case(fd.name)} = {default_value_source(fd, 'C_' + fd.struct.name if fd.struct else None)}",
            )
        for run in _field_runs(regular):
            if isinstance(run, list):
                fmt = ">" + "".join(FIXED_FORMATS[g.type] for g in run)
                name = e.fixed_struct(fmt)
                targets = ", ".join(f"o.{snake_case(g.name)}" for g in run)
                e.emit(1, f"{targets}, = {name}.unpack_from(buf, pos)")
                e.emit(1, f"pos += {struct.calcsize(fmt)}")
            else:
                self._read_value(1, run, f"o.{snake_case(run.name)}")
        if self.flexible:
            e.emit(1, "if buf[pos] == 0:")
            e.emit(2, "pos += 1")
            e.emit(1, "else:")
            e.emit(2, "nt, pos = _ruv(buf, pos)")
            e.emit(2, "_chk(buf, pos, nt)")
            e.emit(2, "for _ in range(nt):")
            e.emit(3, "tag, pos = _ruv(buf, pos)")
            e.emit(3, "size, pos = _ruv(buf, pos)")
            e.emit(3, "end = pos + size")
            kw = "if"
            for fd in tagged:
                e.emit(3, f"{kw} tag == {fd.tag}:")
                self._read_value(4, fd, f"o.{snake_case(fd.name)}")
                kw = "elif"
            if tagged:
                e.emit(3, "else:")
                e.emit(4, "pos = _skip(buf, pos, size)")
            else:
                e.emit(3, "pos = _skip(buf, pos, size)")
            e.emit(3, "if pos != end:")
            e.emit(
                4,
                "raise _M('tagged field {} declared {} bytes but used {}'.format(tag, size, pos - end + size))",
            )
        e.emit(1, "return o, pos")

    # -- writing -----------------------------------------------------------------------------

    def _write_length(self, depth: int, fd: FieldDecl, kind: str, n: str) -> None:
        if self._compact(fd):
            self.e.emit(depth, f"out += _uvb({n} + 1)")
        elif kind == "string":
            self.e.emit(depth, f"out += _I16.pack({n})")
        else:
            self.e.emit(depth, f"out += _I32.pack({n})")

    def _write_null(self, depth: int, fd: FieldDecl, kind: str) -> None:
        if not self._nullable(fd):
            self.e.emit(depth, f"raise _null_error({fd.name!r}, {self.version})")
        elif self._compact(fd):
            self.e.emit(depth, "out.append(0)")
        elif kind == "string":
            self.e.emit(depth, "out += b'\\xff\\xff'")
        else:
            self.e.emit(depth, "out += b'\\xff\\xff\\xff\\xff'")

    def _write_value(self, depth: int, fd: FieldDecl, src: str) -> None:
        e = self.e
        t = fd.type
        if fd.is_array:
            v = e.tmp("a")
            e.emit(depth, f"{v} = {src}")
            e.emit(depth, f"if {v} is None:")
            self._write_null(depth + 1, fd, "array")
            e.emit(depth, "else:")
            self._write_length(depth + 1, fd, "array", f"len({v})")
            el = fd.element_type
            if el in FIXED_FORMATS:
                e.emit(depth + 1, f"out += _pack('>%d{FIXED_FORMATS[el]}' % len({v}), *{v})")
            else:
                item = e.tmp("x")
                e.emit(depth + 1, f"for {item} in {v}:")
                if fd.is_struct:
                    e.emit(depth + 2, f"w_{_struct_fn(fd.struct)}({item}, out)")
                else:
                    elem = FieldDecl(fd.name, el, fd.versions, flexible_never=fd.flexible_never)
                    self._write_value(depth + 2, elem, item)
            return
        if fd.is_struct:
            fn = f"w_{_struct_fn(fd.struct)}"
            if self._nullable(fd):
                v = e.tmp("s")
                e.emit(depth, f"{v} = {src}")
                e.emit(depth, f"if {v} is None:")
                e.emit(depth + 1, "out += b'\\xff'")
                e.emit(depth, "else:")
                e.emit(depth + 1, "out += b'\\x01'")
                e.emit(depth + 1, f"{fn}({v}, out)")
            else:
                e.emit(depth, f"{fn}({src}, out)")
            return
        if t in FIXED_FORMATS:
            name = e.fixed_struct(">" + FIXED_FORMATS[t])
            e.emit(depth, f"out += {name}.pack({src})")
            return
        if t == "uuid":
            e.emit(depth, f"out += {src}.bytes")
            return
        v = e.tmp("b")
        e.emit(depth, f"{v} = {src}")
        e.emit(depth, f"if {v} is None:")
        self._write_null(depth + 1, fd, t)
        e.emit(depth, "else:")
        if t == "string":
            e.emit(depth + 1, f"{v} = {v}.encode()")
        if t == "records":
            e.emit(depth + 1, f"{'_wrec_c' if self._compact(fd) else '_wrec'}(out, {v})")
            return
        self._write_length(depth + 1, fd, t, f"len({v})")
        e.emit(depth + 1, f"out += {v}")

    def _writer(self, sd: StructDecl) -> None:
        e = self.e
        regular, tagged = self._split(sd)
        e.emit(0, "")
        e.emit(0, f"def w_{_struct_fn(sd)}(o, out):")
        for run in _field_runs(regular):
            if isinstance(run, list):
                fmt = ">" + "".join(FIXED_FORMATS[g.type] for g in run)
                args = ", ".join(f"o.{snake_case(g.name)}" for g in run)
                e.emit(1, f"out += {e.fixed_struct(fmt)}.pack({args})")
            else:
                self._write_value(1, run, f"o.{snake_case(run.name)}")
        if self.flexible:
            if not tagged:
                e.emit(1, "out.append(0)")
            else:
                # A tagged field is written only when it differs from its default: librdkafka
                # before 2.2.0 misreads default-valued tagged fields (client-notes.md).
                e.emit(1, "tags = []")
                for fd in tagged:
                    attr = f"o.{snake_case(fd.name)}"
                    e.emit(1, f"if {attr} != D_{_struct_fn(sd)}.{snake_case(fd.name)}:")
                    e.emit(2, "outer, out = out, bytearray()")
                    self._write_value(2, fd, attr)
                    e.emit(2, f"tags.append(({fd.tag}, out))")
                    e.emit(2, "out = outer")
                e.emit(1, "out += _uvb(len(tags))")
                e.emit(1, "for tag, data in tags:")
                e.emit(2, "out += _uvb(tag)")
                e.emit(2, "out += _uvb(len(data))")
                e.emit(2, "out += data")
        if not regular and not self.flexible:
            e.emit(1, "pass")
