"""The declarations (``kcore/protocol/defs``) against Kafka's own JSON schemas.

Every declared message that has a reference schema is compared, version by version, on its
*effective wire layout*: the ordered fields present at that version, recursively through structs,
each with its type, nullability, tag (only in flexible versions), normalised default and
``flexibleVersions: none``. Versions that the Kafka 4.x schemas define are compared against them;
older versions (removed by KIP-896 but still sent by some clients) against the 2024 snapshot.
Versions that neither defines (added in Kafka 4.1-4.3) are compared against kcore's own
transcription of the newer schemas in ``tools/kafka_schemas_newer`` (a third reference for those
versions only).

kcore's own differences are spelled out here and nowhere else:

* decision D-02: CreateTopics v8 adds ``Topics[].MirrorInfo`` and Fetch v19 adds the tagged
  ``MirrorLeaderEpoch`` (request tag 2, response tag 3); asserted to be the *only* differences;
* ``RequestHeader`` is declared from version 1, as Kafka 4.x has it (``NARROWED``);
* ReadShareGroupStateSummaryResponse v0 is Kafka 4.x's, changed in place after the 2024 snapshot
  (``SUPERSEDED``);
* the hand-written cluster-mirroring APIs (keys 94-104, D-01) and share-group offset APIs (90, 91)
  have no reference schema (``test_mirror_declarations.py`` covers them).

The references live in ``../shared/reference`` beside the repository; without them (a user's
clone) these tests skip, and under ``CI=true`` they fail (``shared_reference.require``).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import PRIMITIVE_TYPES, MessageDecl, VersionRange, load_all
from kcore.protocol.messages import MESSAGES
from kcore.protocol.mirror_apis import MIRROR_API_KEYS

from .shared_reference import SHARED, require

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = SHARED / "reference"
NEW_DIR = REFERENCE / "kafka-protocol-4x"
OLD_DIR = REFERENCE / "kafka-protocol" / "clients" / "src" / "main" / "resources" / "common"
OLD_DIR = OLD_DIR / "message"
MATRIX = REFERENCE / "client-api-matrix.md"
NEWER_DIR = ROOT / "tools" / "kafka_schemas_newer"  # kcore's transcription of newer schemas

DECLS = load_all()
DECLARED: dict[str, MessageDecl] = {m.name: m for m in DECLS.messages}
APIS_BY_KEY = {a.key: a for a in DECLS.apis}

# Declarations written by hand, with no schema in either reference folder.
SHARE_GROUP_OFFSET_API_KEYS = frozenset({90, 91})  # DescribeShareGroupOffsets, AlterShare...
HANDWRITTEN_API_KEYS = frozenset(MIRROR_API_KEYS.values()) | SHARE_GROUP_OFFSET_API_KEYS
# The __mirror_state records (spec §8.3, defs/MirrorStateRecords.def): no Kafka schema either;
# tests/mirror/test_records.py checks their bytes against the spec's dump example.
HANDWRITTEN_RECORDS = frozenset(
    {
        "LastMirrorEpochsKey",
        "LastMirrorEpochsValue",
        "MirrorPartitionStateKey",
        "MirrorPartitionStateValue",
        "MirrorSyncedAclsKey",  # kcore's type 3: the metadata sync's ACL provenance (D-22)
        "MirrorSyncedAclsValue",
    }
)
# ZooKeeper-era inter-broker APIs: in the 2024 snapshot, gone from Kafka 4.x, not declared.
ZOOKEEPER_API_KEYS = frozenset({4, 5, 6, 7})

# Decision D-02: the versions kcore adds above Kafka 4.x's highest, and what they add.
# name -> (the version kcore adds, the Kafka version it extends, struct path, added layout rows)
EXTENSIONS: dict[str, tuple[int, int, str, list[tuple]]] = {
    "CreateTopicsRequest": (
        8,
        7,
        "Topics",
        [
            ("Topics.MirrorInfo", "MirrorInfo", True, None, None, False),
            ("Topics.MirrorInfo.TopicId", "uuid", False, None, uuid.UUID(int=0), False),
        ],
    ),
    "CreateTopicsResponse": (8, 7, "Topics", []),
    "FetchRequest": (
        19,
        18,
        "Topics.Partitions",
        [("Topics.Partitions.MirrorLeaderEpoch", "int32", False, 2, -1, False)],
    ),
    "FetchResponse": (
        19,
        18,
        "Responses.Partitions",
        [("Responses.Partitions.MirrorLeaderEpoch", "int32", False, 3, -1, False)],
    ),
    # Spec M-88: the floor BumpLeaderEpochs sets, a plain field at the end of the record.
    "PartitionChangeRecord": (3, 2, "", [("MinLeaderEpoch", "int32", False, None, -1, False)]),
}

# Declared narrower than the references' union, on purpose. RequestHeader v0 (no ClientId) only
# ever framed ControlledShutdown v0, a ZooKeeper-era API kcore does not declare; Kafka 4.x's schema
# dropped it (validVersions 1-2) and the importer takes a non-API message's range from 4.x.
NARROWED: dict[str, VersionRange] = {"RequestHeader": VersionRange(1, 2)}

# Versions Kafka changed in place after the 2024 snapshot, while they were still unstable: the
# snapshot's draft never shipped, so the transcription (what Kafka 4.x sends) is their reference.
# v0 gained LeaderEpoch before Kafka 4.0 (the snapshot lacks it).
SUPERSEDED: dict[str, set[int]] = {"ReadShareGroupStateSummaryResponse": {0}}


def _require_reference() -> None:
    require(REFERENCE, "reference schemas")


_json_cache: dict[Path, dict | None] = {}


def _load_json(path: Path) -> dict | None:
    """A schema with its ``//`` comment lines removed, or None when the file does not exist."""
    if path not in _json_cache:
        if path.exists():
            text = re.sub(r"^\s*//.*$", "", path.read_text(encoding="utf-8"), flags=re.M)
            _json_cache[path] = json.loads(text)
            _normalize_versions(_json_cache[path])
        else:
            _json_cache[path] = None
    return _json_cache[path]


# Record schemas beyond the client protocol (KRaft metadata, coordinator records, quorum state):
# the 2024 snapshot is their only reference.
RECORD_DIRS = [
    REFERENCE / "kafka-protocol" / p / "src" / "main" / "resources" / "common" / leaf
    for p, leaf in (
        ("metadata", "metadata"),
        ("group-coordinator", "message"),
        ("transaction-coordinator", "message"),
        ("share-coordinator", "message"),
        ("raft", "message"),
    )
]


def _normalize_versions(node: dict) -> None:
    """A field without ``versions`` exists in its ``taggedVersions`` (Kafka's generator rule)."""
    for f in node.get("fields", []) + node.get("commonStructs", []):
        if "versions" not in f and "taggedVersions" in f:
            f["versions"] = f["taggedVersions"]
        if "default" in f and f["default"] is None:  # a JSON null: one schema spells it so
            f["default"] = "null"
        _normalize_versions(f)


def _schemas(name: str) -> tuple[dict | None, dict | None]:
    """(4.x schema, 2024 snapshot schema) of a message, either possibly None."""
    old = _load_json(OLD_DIR / f"{name}.json")
    for directory in RECORD_DIRS:
        if old is not None:
            break
        old = _load_json(directory / f"{name}.json")
    return _load_json(NEW_DIR / f"{name}.json"), old


def _newer(name: str) -> dict | None:
    """kcore's transcription of a newer schema of the message (tools/kafka_schemas_newer)."""
    return _load_json(NEWER_DIR / f"{name}.json")


def _vr(text: str | None) -> VersionRange:
    return VersionRange.parse(text or "none")


def _union(a: VersionRange, b: VersionRange) -> VersionRange:
    if a.empty:
        return b
    if b.empty:
        return a
    hi = None if a.hi is None or b.hi is None else max(a.hi, b.hi)
    return VersionRange(min(a.lo, b.lo), hi)


# --- the effective wire layout -----------------------------------------------------------------

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}


def normalise_default(type_: str, default: object) -> object:
    """A default as the value it denotes, Kafka's implicit default when none is given.

    Both sides go through here: the JSON's (``"0x7fffffff"``, ``-1``, ``false``, ``"null"``) and
    the declaration's literal string.
    """
    if default == "null":
        return None
    if type_.startswith("[]"):
        return ()
    if type_ in _INT_TYPES:
        if default is None:
            return 0
        return default if isinstance(default, int) else int(str(default), 0)
    if type_ == "float64":
        return 0.0 if default is None else float(default)
    if type_ == "bool":
        if default is None:
            return False
        return default if isinstance(default, bool) else {"true": True, "false": False}[default]
    if type_ == "string":
        return "" if default is None else str(default)
    if type_ == "uuid":
        return uuid.UUID(int=0) if default is None else default
    if type_ in ("bytes", "records"):
        return b"" if default is None else default
    return "<default struct>" if default is None else default  # a struct


def json_layout(schema: dict, version: int) -> list[tuple]:
    """The wire layout of a Kafka JSON schema at ``version``: one row per field present."""
    flexible = version in _vr(schema["flexibleVersions"])
    common = {cs["name"]: cs["fields"] for cs in schema.get("commonStructs", [])}
    rows: list[tuple] = []

    def walk(fields: list[dict], prefix: str) -> None:
        for f in fields:
            if version not in _vr(f["versions"]):
                continue
            tagged = "tag" in f and version in _vr(f.get("taggedVersions")) and flexible
            path = prefix + f["name"]
            rows.append(
                (
                    path,
                    f["type"],
                    version in _vr(f.get("nullableVersions")),
                    int(f["tag"]) if tagged else None,  # one schema writes "tag": "0"
                    normalise_default(f["type"], f.get("default")),
                    f.get("flexibleVersions") == "none",
                )
            )
            element = f["type"].removeprefix("[]")
            if element not in PRIMITIVE_TYPES:
                walk(f.get("fields") or common[element], path + ".")

    walk(schema["fields"], "")
    return rows


def decl_layout(msg: MessageDecl, version: int) -> list[tuple]:
    """The wire layout of a declaration at ``version``, in the same shape as :func:`json_layout`."""
    flexible = version in msg.flexible
    rows: list[tuple] = []

    def walk(fields, prefix: str) -> None:
        for f in fields:
            if version not in f.versions:
                continue
            path = prefix + f.name
            rows.append(
                (
                    path,
                    f.type,
                    version in f.nullable,
                    f.tag if f.tag is not None and flexible else None,
                    normalise_default(f.type, f.default),
                    f.flexible_never,
                )
            )
            if f.struct is not None:
                walk(f.struct.fields, path + ".")

    walk(msg.root.fields, "")
    return rows


def _with_extension(rows: list[tuple], struct_path: str, added: list[tuple]) -> list[tuple]:
    """``rows`` with ``added`` appended at the end of the struct at ``struct_path`` (``""``:
    the top level)."""
    if not struct_path:
        return rows + added
    inside = [i for i, r in enumerate(rows) if r[0].startswith(struct_path + ".")]
    assert inside, f"no struct {struct_path} in the reference layout"
    at = inside[-1] + 1
    return rows[:at] + added + rows[at:]


def _diff(expected: list[tuple], actual: list[tuple]) -> str:
    return "\n".join(
        difflib.unified_diff(
            [repr(r) for r in expected],
            [repr(r) for r in actual],
            "reference",
            "declaration",
            lineterm="",
        )
    )


# --- which messages are checked ------------------------------------------------------------------


def _is_handwritten(msg: MessageDecl) -> bool:
    return msg.api_key in HANDWRITTEN_API_KEYS or msg.name in HANDWRITTEN_RECORDS


CHECKED = sorted(name for name, m in DECLARED.items() if not _is_handwritten(m))


def test_conformance_only_handwritten_declarations_lack_a_reference_schema():
    _require_reference()
    lacking = {name for name in DECLARED if _schemas(name) == (None, None)}
    handwritten = {name for name, m in DECLARED.items() if _is_handwritten(m)}
    assert lacking == handwritten
    # Eleven mirror APIs and two share-group offset APIs, a request and a response each, and
    # the six __mirror_state record messages.
    apis = 2 * (len(MIRROR_API_KEYS) + len(SHARE_GROUP_OFFSET_API_KEYS))
    assert len(handwritten) == apis + len(HANDWRITTEN_RECORDS)


def test_conformance_every_reference_api_is_declared():
    _require_reference()
    referenced: dict[int, set[str]] = {}
    for directory in (NEW_DIR, OLD_DIR):
        for path in directory.glob("*Request.json"):
            schema = _load_json(path)
            if schema.get("type") == "request" and schema.get("apiKey") is not None:
                referenced.setdefault(schema["apiKey"], set()).add(path.stem)
    missing = {
        key: names
        for key, names in referenced.items()
        if key not in ZOOKEEPER_API_KEYS
        and (key not in APIS_BY_KEY or APIS_BY_KEY[key].request.name not in names)
    }
    assert not missing
    assert not ZOOKEEPER_API_KEYS & APIS_BY_KEY.keys()


@pytest.mark.parametrize("name", CHECKED)
def test_conformance_declared_versions_are_the_union_of_the_references(name):
    _require_reference()
    msg = DECLARED[name]
    new, old = _schemas(name)
    newer = _newer(name)
    expected = VersionRange(1, 0)
    for schema in (new, old, newer):
        if schema is not None:
            expected = _union(expected, _vr(schema["validVersions"]))
    if name in EXTENSIONS:  # D-02: exactly one version above Kafka 4.x's highest
        added, extends, _, _ = EXTENSIONS[name]
        assert expected.hi == extends
        expected = VersionRange(expected.lo, added)
    if name in NARROWED:
        new_range = _vr(new["validVersions"])
        assert NARROWED[name] == new_range and new_range.lo > expected.lo
        expected = new_range
    assert msg.versions == expected
    # The flexible range is the references' (all agree where several have the message).
    for schema in (new, old, newer):
        if schema is not None:
            assert msg.flexible == _vr(schema["flexibleVersions"])
            assert msg.api_key == schema.get("apiKey")


@pytest.mark.parametrize("name", CHECKED)
def test_conformance_wire_layout_matches_the_reference_at_every_version(name):
    _require_reference()
    msg = DECLARED[name]
    new, old = _schemas(name)
    newer = _newer(name)
    extension = EXTENSIONS.get(name)
    failures = []
    for version in range(msg.versions.lo, msg.versions.hi + 1):
        if extension is not None and version == extension[0]:
            _, extends, struct_path, added = extension
            schema = new or old
            expected = json_layout(schema, extends)
            if added:
                expected = _with_extension(expected, struct_path, added)
        else:
            if version in SUPERSEDED.get(name, ()):
                assert json_layout(old, version) != json_layout(newer, version), "not superseded"
                schema = newer
            elif new is not None and version in _vr(new["validVersions"]):
                schema = new
            elif old is not None and version in _vr(old["validVersions"]):
                schema = old
            elif newer is not None and version in _vr(newer["validVersions"]):
                schema = newer
            else:
                failures.append(f"v{version}: no reference schema defines this version")
                continue
            expected = json_layout(schema, version)
        actual = decl_layout(msg, version)
        if actual != expected:
            failures.append(f"v{version}:\n{_diff(expected, actual)}")
        if (version in msg.flexible) != (version in _vr(schema["flexibleVersions"])):
            failures.append(f"v{version}: flexible differs")
    assert not failures, f"{name}:\n" + "\n".join(failures)


def test_conformance_extensions_are_absent_below_their_version():
    """D-02's fields exist only in the version kcore adds (so Kafka's versions stay Kafka's)."""
    for name, (added, _, _, rows) in EXTENSIONS.items():
        paths = {r[0] for r in rows}
        msg = DECLARED[name]
        for version in range(msg.versions.lo, added):
            assert not paths & {r[0] for r in decl_layout(msg, version)}, (name, version)
        assert paths <= {r[0] for r in decl_layout(msg, added)}


def test_conformance_api_request_and_response_share_versions_and_flexibility():
    for api in DECLS.apis:
        assert api.request.versions == api.response.versions == api.versions, api.name
        assert api.request.flexible == api.response.flexible == api.flexible, api.name
        assert api.request.api_key == api.response.api_key == api.key, api.name


# --- the generated classes keep Kafka's defaults -------------------------------------------------


def _python_default(fd) -> object:
    """The value a generated constructor should give a field, from its normalised default."""
    value = normalise_default(fd.type, fd.default)
    if fd.is_array:
        return None if value is None else []
    if fd.type == "records":
        return None  # Kafka's generated code starts records at null, whatever the schema says
    if fd.type == "bytes":
        return None if value is None else b""
    return value


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_conformance_generated_constructors_use_the_declared_defaults(name):
    mt = MESSAGES[name]
    for sd in mt.decl.structs.values():
        obj = mt.classes[id(sd)]()
        for fd in sd.fields:
            got = getattr(obj, snake_case(fd.name))
            if fd.is_struct and not fd.is_array:
                expected_struct = _python_default(fd)
                if expected_struct is None:
                    assert got is None, (sd.name, fd.name)
                else:
                    assert got == mt.classes[id(fd.struct)](), (sd.name, fd.name)
                continue
            expected = _python_default(fd)
            assert got == expected and type(got) is type(expected), (sd.name, fd.name, got)


# --- the importer has not drifted ----------------------------------------------------------------


def test_conformance_import_check_reports_no_drift():
    _require_reference()
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_kafka_schemas.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the versions real clients and Kafka 4.x use are declared ------------------------------------

# client-api-matrix.md columns (1-based as in the table): 4 and 5 are what Apache Kafka 4.0 / 4.3
# advertise, 7-10 what each client sends.
ADVERTISED_COLUMNS = {4: "AK 4.0", 5: "AK 4.3"}
CLIENT_COLUMNS = {7: "librdkafka", 8: "kafka-python", 9: "aiokafka", 10: "kafkajs"}

# Versions the matrix lists that no reference schema defines (neither reference folder nor kcore's
# transcription in tools/kafka_schemas_newer), so kcore cannot declare them from facts it has.
# Each entry is (api key, column, version). The test fails when an entry stops being a gap
# (declared at last, or gone from the matrix), so this list only shrinks. Empty since the
# transcription added ConsumerGroupDescribe v1, the share-group APIs' v1-2, WriteShareGroupState
# v1, ReadShareGroupStateSummary v1 and AddRaftVoter v1.
ALLOWED_GAPS: frozenset[tuple[int, str, int]] = frozenset()

# The matrix names APIs as Kafka 4.0 did; where 4.x renamed one, the declaration has the new name.
RENAMED = {74: "ListConfigResources"}  # was ListClientMetricsResources (KIP-1142)


def parse_versions(cell: str) -> set[int]:
    """The versions a matrix cell names: ``0-16``, ``≤9`` (0 to 9), ``0,1,2,5``, ``2``, ``''``.

    Parenthesised notes (``(schema)``, ``(0-6)`` deprecated versions) are dropped.
    """
    cell = re.sub(r"\(.*?\)", "", cell).strip()
    if not cell:
        return set()
    out: set[int] = set()
    for part in cell.split(","):
        part = part.strip()
        if part.startswith("≤"):
            out |= set(range(int(part[1:]) + 1))
        elif "-" in part:
            lo, hi = part.split("-")
            out |= set(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return out


def test_conformance_parse_versions_reads_every_cell_form():
    assert parse_versions("0-16") == set(range(17))
    assert parse_versions("≤9") == set(range(10))
    assert parse_versions("0,1,2,5") == {0, 1, 2, 5}
    assert parse_versions("≤13 (schema)") == set(range(14))
    assert parse_versions("0-17 (0-3)") == set(range(18))
    assert parse_versions("2") == {2}
    assert parse_versions("") == set()


def _matrix_rows() -> list[list[str]]:
    rows = []
    for line in MATRIX.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells[0].isdigit():
            continue  # the header and the separator
        assert len(cells) == 10, line
        rows.append(cells)
    return rows


def _matrix_gaps() -> set[tuple[int, str, int]]:
    gaps = set()
    for cells in _matrix_rows():
        key = int(cells[0])
        api = APIS_BY_KEY.get(key)
        for column, label in {**ADVERTISED_COLUMNS, **CLIENT_COLUMNS}.items():
            for version in parse_versions(cells[column - 1]):
                if api is None or version not in api.versions:
                    gaps.add((key, label, version))
    return gaps


def test_conformance_every_api_kafka_4x_advertises_is_declared():
    _require_reference()
    rows = _matrix_rows()
    assert len(rows) > 80  # the table was read
    for cells in rows:
        key, name = int(cells[0]), cells[1]
        if not any(cells[c - 1] for c in ADVERTISED_COLUMNS):
            continue
        assert key in APIS_BY_KEY, f"{key} {name} is advertised by Kafka 4.x but not declared"
        assert APIS_BY_KEY[key].name == RENAMED.get(key, name)


def test_conformance_every_version_clients_and_kafka_4x_use_is_declared():
    _require_reference()
    gaps = _matrix_gaps()
    unexpected = sorted(gaps - ALLOWED_GAPS)
    assert not unexpected, f"versions used but not declared: {unexpected}"
    stale = sorted(ALLOWED_GAPS - gaps)
    assert not stale, f"ALLOWED_GAPS entries that are no longer gaps, remove them: {stale}"


def test_conformance_allowed_gaps_are_versions_no_reference_defines():
    """A gap is only allowed when the references give us nothing to declare it from."""
    _require_reference()
    for key, _, version in sorted(ALLOWED_GAPS):
        name = APIS_BY_KEY[key].name
        for suffix in ("Request", "Response"):
            for schema in (*_schemas(name + suffix), _newer(name + suffix)):
                if schema is not None:
                    assert version not in _vr(schema["validVersions"]), (name, version)
