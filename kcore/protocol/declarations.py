"""The message declarations: kcore's own format for Kafka's messages, and its parser.

Every message kcore speaks is declared once, in a ``.def`` file under ``kcore/protocol/defs/``;
the codec (``codegen.py``, ``messages.py``) is built from these declarations and nothing else.
Most files were imported from Kafka's JSON schemas by ``tools/import_kafka_schemas.py`` (names,
types and versions are facts of the protocol; no prose is carried over) and are checked against
those schemas by ``tests/protocol/test_conformance.py``. Messages that exist only in kcore
(cluster mirroring, decisions D-01/D-02) are written by hand in the same format.

The format
----------
::

    # comment
    api 1 Fetch versions 0-19 flexible 12+      # an API: a request and a response section

    request
      ClusterId string 12+ nullable 12+ tag 0 default null
      ReplicaId int32 0-14 default -1
      Topics []FetchTopic 0+                      # children, indented, declare the struct
        Topic string 0-12
        Partitions []int32 0+

    response
      ...

    struct Shared                                  # a common struct, usable by name in the file
      Name string 0+

    message RequestHeader versions 0-2 flexible 2+   # a message that is not an API body
      ClientId string 1+ nullable 1+ flexible none

    message TopicRecord versions 0 flexible 0+ key 2  # a KRaft metadata record and its type id

A field line is ``Name type versions`` then attributes: ``nullable RANGE``, ``tag N`` (a tagged
field; tagged in all the versions it exists in), ``default VALUE`` (``null``, a number, ``true``
/``false``, or a JSON-quoted string), ``flexible none`` (never use the compact encoding), and
``mapkey`` (documentation only: the field keys a map in Kafka's generated code). Version ranges
are ``N``, ``N-M``, ``N+`` or ``none``. Types are Kafka's: ``bool int8 int16 int32 int64 uint16
uint32 float64 uuid string bytes records``, ``[]T`` for arrays, and struct names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "uuid"}
    | {"string", "bytes", "records"}
)


class DeclarationError(ValueError):
    """A ``.def`` file that does not follow the format (raised at import: a programming error)."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; ``hi is None`` means open-ended, ``lo > hi`` empty."""

    lo: int
    hi: int | None

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        text = text.strip()
        if text == "none":
            return cls(1, 0)  # empty: lo > hi
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.hi < self.lo

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


NO_VERSIONS = VersionRange(1, 0)


@dataclass(slots=True)
class FieldDecl:
    name: str
    type: str  # "int32", "[]int32", "FetchTopic", "[]FetchTopic"
    versions: VersionRange
    nullable: VersionRange = NO_VERSIONS
    tag: int | None = None
    default: str | None = None  # the literal as written; None when not given
    flexible_never: bool = False
    map_key: bool = False
    struct: StructDecl | None = None  # resolved for struct and []struct types

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in PRIMITIVE_TYPES


@dataclass(slots=True)
class StructDecl:
    name: str
    fields: list[FieldDecl] = field(default_factory=list)


@dataclass(slots=True)
class MessageDecl:
    """A top-level message: an API request or response body, a header, or a data record."""

    name: str
    kind: str  # "request", "response" or "message"
    api_key: int | None
    versions: VersionRange
    flexible: VersionRange
    root: StructDecl
    structs: dict[str, StructDecl]  # every struct of the message by name, nested included


@dataclass(slots=True)
class ApiDecl:
    key: int
    name: str
    versions: VersionRange
    flexible: VersionRange
    request: MessageDecl
    response: MessageDecl


@dataclass(slots=True)
class DeclFile:
    apis: list[ApiDecl] = field(default_factory=list)
    messages: list[MessageDecl] = field(default_factory=list)


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\S+')


def _tokens(line: str) -> list[str]:
    return _TOKEN.findall(line)


def parse_default(token: str) -> str:
    return json.loads(token) if token.startswith('"') else token


def format_default(value: str) -> str:
    """Inverse of :func:`parse_default`: bare when unambiguous, JSON-quoted otherwise."""
    if re.fullmatch(r"-?[\w.]+", value) and value != "null":
        return value
    return json.dumps(value)


def _parse_field(tokens: list[str], where: str) -> FieldDecl:
    if len(tokens) < 3:
        raise DeclarationError(f"{where}: a field needs a name, a type and versions")
    f = FieldDecl(name=tokens[0], type=tokens[1], versions=VersionRange.parse(tokens[2]))
    i = 3
    while i < len(tokens):
        attr = tokens[i]
        if attr == "mapkey":
            f.map_key = True
            i += 1
            continue
        if i + 1 >= len(tokens):
            raise DeclarationError(f"{where}: attribute {attr!r} needs a value")
        value = tokens[i + 1]
        if attr == "nullable":
            f.nullable = VersionRange.parse(value)
        elif attr == "tag":
            f.tag = int(value)
        elif attr == "default":
            f.default = value if value == "null" else parse_default(value)
        elif attr == "flexible":
            if value != "none":
                raise DeclarationError(f"{where}: only 'flexible none' is supported")
            f.flexible_never = True
        else:
            raise DeclarationError(f"{where}: unknown attribute {attr!r}")
        i += 2
    return f


def parse_text(text: str, source: str = "<string>") -> DeclFile:
    """Parse the text of one ``.def`` file."""
    lines: list[tuple[int, int, list[str]]] = []  # (line number, indent, tokens)
    for n, raw in enumerate(text.splitlines(), 1):
        toks = _tokens(raw)
        for k, tok in enumerate(toks):
            if tok.startswith("#"):  # a comment runs to the end of the line
                del toks[k:]
                break
        if not toks:
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if indent % 2:
            raise DeclarationError(f"{source}:{n}: indentation must be a multiple of two spaces")
        lines.append((n, indent // 2, toks))

    out = DeclFile()
    common: dict[str, StructDecl] = {}
    pending_messages: list[MessageDecl] = []
    api_header: tuple[int, str, VersionRange, VersionRange] | None = None
    sections: dict[str, MessageDecl] = {}

    i = 0

    def read_block(level: int, into: StructDecl) -> None:
        """Read field lines at ``level`` (and their children) into ``into``."""
        nonlocal i
        while i < len(lines) and lines[i][1] >= level:
            n, depth, toks = lines[i]
            where = f"{source}:{n}"
            if depth != level:
                raise DeclarationError(f"{where}: unexpected indentation")
            fd = _parse_field(toks, where)
            i += 1
            if i < len(lines) and lines[i][1] > level:
                fd.struct = StructDecl(fd.element_type)
                read_block(level + 1, fd.struct)
            into.fields.append(fd)

    while i < len(lines):
        n, depth, toks = lines[i]
        where = f"{source}:{n}"
        if depth != 0:
            raise DeclarationError(f"{where}: unexpected indentation")
        head = toks[0]
        i += 1
        if head == "api":
            # api KEY NAME versions R flexible R
            if len(toks) != 7 or toks[3] != "versions" or toks[5] != "flexible":
                raise DeclarationError(f"{where}: expected 'api KEY NAME versions R flexible R'")
            api_header = (
                int(toks[1]),
                toks[2],
                VersionRange.parse(toks[4]),
                VersionRange.parse(toks[6]),
            )
        elif head in ("request", "response"):
            if api_header is None:
                raise DeclarationError(f"{where}: {head} section before the 'api' line")
            key, name, versions, flexible = api_header
            root = StructDecl(name + head.capitalize())
            read_block(1, root)
            sections[head] = MessageDecl(root.name, head, key, versions, flexible, root, {})
        elif head == "message":
            # message NAME versions R flexible R [key N]   (N: a metadata record's type id)
            if (
                len(toks) not in (6, 8)
                or toks[2] != "versions"
                or toks[4] != "flexible"
                or (len(toks) == 8 and toks[6] != "key")
            ):
                raise DeclarationError(
                    f"{where}: expected 'message NAME versions R flexible R [key N]'"
                )
            root = StructDecl(toks[1])
            read_block(1, root)
            msg = MessageDecl(
                toks[1],
                "message",
                int(toks[7]) if len(toks) == 8 else None,
                VersionRange.parse(toks[3]),
                VersionRange.parse(toks[5]),
                root,
                {},
            )
            pending_messages.append(msg)
        elif head == "struct":
            if len(toks) != 2:
                raise DeclarationError(f"{where}: expected 'struct NAME'")
            sd = StructDecl(toks[1])
            read_block(1, sd)
            common[sd.name] = sd
        else:
            raise DeclarationError(f"{where}: unknown declaration {head!r}")

    if api_header is not None:
        missing = {"request", "response"} - sections.keys()
        if missing:
            raise DeclarationError(f"{source}: api {api_header[1]} lacks {sorted(missing)}")
        key, name, versions, flexible = api_header
        out.apis.append(
            ApiDecl(key, name, versions, flexible, sections["request"], sections["response"])
        )
        pending_messages += [sections["request"], sections["response"]]
    for msg in pending_messages:
        _resolve(msg, common, source)
    out.messages = pending_messages
    return out


def _resolve(msg: MessageDecl, common: dict[str, StructDecl], source: str) -> None:
    """Link struct-typed fields to their declarations and index every struct by name."""
    structs: dict[str, StructDecl] = {}

    def visit(sd: StructDecl) -> None:
        seen_tags: set[int] = set()
        for fd in sd.fields:
            if fd.tag is not None:
                if fd.tag in seen_tags:
                    raise DeclarationError(f"{source}: {sd.name}.{fd.name}: duplicate tag")
                seen_tags.add(fd.tag)
            if not fd.is_struct:
                if fd.struct is not None:
                    raise DeclarationError(f"{source}: {fd.name} has children but is {fd.type}")
                continue
            if fd.struct is None:
                fd.struct = common.get(fd.element_type)
                if fd.struct is None:
                    raise DeclarationError(f"{source}: unknown struct type {fd.element_type!r}")
            existing = structs.get(fd.struct.name)
            if existing is not None and existing is not fd.struct:
                raise DeclarationError(f"{source}: struct {fd.struct.name} declared twice")
            if existing is None:
                structs[fd.struct.name] = fd.struct
                visit(fd.struct)

    structs[msg.root.name] = msg.root
    visit(msg.root)
    msg.structs = structs


DEFS_DIR = Path(__file__).with_name("defs")


def load_all(directory: Path = DEFS_DIR) -> DeclFile:
    """Parse every ``.def`` file of ``directory`` into one :class:`DeclFile`."""
    merged = DeclFile()
    for path in sorted(directory.glob("*.def")):
        parsed = parse_text(path.read_text(encoding="utf-8"), str(path.name))
        merged.apis += parsed.apis
        merged.messages += parsed.messages
    return merged
