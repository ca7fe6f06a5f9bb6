"""The hand-written declarations: cluster mirroring (KIP-1279) and the newer share-group APIs.

The mirror declarations (``kcore/protocol/defs/<Api>.def``) are checked field by field against
the RPC tables of the spec (``shared/spec/cluster-mirroring.md`` §7.4–7.14), and their API keys
against decision D-01 (``shared/spec/decisions.md``) and ``MIRROR_API_KEYS``. The spec lives
outside the repository, in ``../shared``; the tests that read it skip where it is absent, and
fail under ``CI=true`` (``shared_reference.require``).

Reading the tables: a row's path names the field (``Topics[].Name``; a leading ``…`` continues the
nearest ``Partitions`` array above it), the "Versions" column holds the version range or
``tagged R, tag N``, and the "Default / flags" column holds ``;``-separated ``mapKey``,
``nullable R``, ``default V`` and ``entity=…`` (documentation only, not declared).

Versions are compared as the set of the API's valid versions a field exists in: the proposal
writes nested fields as ``0`` or ``0+`` interchangeably, which §7.1 says mean the same while only
version 0 exists (also §20.5 A-34). kcore declares every mirror field open-ended (``0+``), so
that adding a version 1 later cannot drop a field by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from kcore.protocol.declarations import (
    DEFS_DIR,
    ApiDecl,
    FieldDecl,
    StructDecl,
    VersionRange,
    parse_default,
    parse_text,
)
from kcore.protocol.mirror_apis import MIRROR_API_KEYS

from .shared_reference import SHARED, require

SPEC = SHARED / "spec" / "cluster-mirroring.md"
DECISIONS = SHARED / "spec" / "decisions.md"

# Fields kcore adds to a mirror message beyond the spec's tables, by (API, "request"/"response"):
# path -> the decision that requires it. Each must be a tagged field, so that the spec's layout
# of version 0 stays exactly as written.
_TOPIC_MESSAGE = {"Topics[].ErrorMessage": "D-26: a per-topic error says why"}
EXTENSIONS: dict[tuple[str, str], dict[str, str]] = {
    ("StartMirrorTopics", "request"): {
        "Topics[].Configs": "D-27: the source topic configs the broker looked up",
        "SourceClusterId": "D-24: the source cluster id the broker saw",
    },
    ("StartMirrorTopics", "response"): _TOPIC_MESSAGE,
    ("StopMirrorTopics", "response"): _TOPIC_MESSAGE,
    ("PauseMirrorTopics", "response"): _TOPIC_MESSAGE,
    ("ResumeMirrorTopics", "response"): _TOPIC_MESSAGE,
    ("DescribeClusterMirrors", "response"): {
        "Mirrors[].ErrorMessage": "D-26: a per-mirror error says why",
        "Mirrors[].Topics[].Partitions[].SourceLastStableOffset": "D-19, D-32: source LSO",
        "Mirrors[].Topics[].Partitions[].LastFetchAgeMs": "D-32: last successful fetch age",
        "Mirrors[].Topics[].Partitions[].RetryCount": "D-13, D-32: FAILED retry count",
        "Mirrors[].Topics[].Partitions[].FailedReason": "D-13: the kept FAILED reason",
        "Mirrors[].LastSyncTimeMs": "issue #15: when the last metadata sync round completed",
        "Mirrors[].LastSyncAgeMs": "issue #15: its age",
        "Mirrors[].SyncErrors": "issue #15, D-24: the last round's errors",
        "Mirrors[].SyncChanges": "issue #15: what the last changing round changed",
        "Mirrors[].SyncNotes": "issue #15, D-23, M-21: what was skipped and why",
        "Mirrors[].LastChangeTimeMs": "issue #15: when that round ran",
    },
    # A remote writer says what the local coordinator path knows, and the FAILED reason
    # travels to the coordinator and back to Describe (D-13).
    ("WriteMirrorStates", "request"): {
        "Topics[].Partitions[].PreviousState": "A-7",
        "Topics[].Partitions[].RetryAttempt": "A-7",
        "Topics[].Partitions[].Reason": "D-13",
        "Topics[].Partitions[].LeaderEpoch": "D-14: a former partition leader is fenced",
    },
    ("ReadMirrorStates", "response"): {"Topics[].Partitions[].Reason": "D-13"},
}

SHARE_GROUP_APIS = {"DescribeShareGroupOffsets": 90, "AlterShareGroupOffsets": 91}


# --- the spec's tables -------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecField:
    path: str
    type: str
    versions: VersionRange
    tag: int | None
    nullable: VersionRange
    default: str | None
    map_key: bool


_CAPTION = re.compile(r"^`(\w+(?:Request|Response))`")
_TAGGED = re.compile(r"tagged (\S+), tag (\d+)")


def _resolve_path(path: str, earlier: list[str]) -> str:
    """Expand ``…Partitions[].X`` to the full path of the nearest earlier ``Partitions`` field."""
    if not path.startswith(("…", "...")):
        return path
    rest = path.lstrip("….")
    head = rest.split("[]", 1)[0]
    for candidate in reversed(earlier):
        if candidate.split("[].")[-1] == head:
            return candidate + rest[len(head) :]
    raise AssertionError(f"spec path {path!r}: no earlier field named {head!r}")


def _spec_field(cells: list[str], earlier: list[str]) -> SpecField:
    path, type_, versions, flags = cells[:4]
    tag = None
    m = _TAGGED.fullmatch(versions)
    if m:
        versions, tag = m.group(1), int(m.group(2))
    nullable, default, map_key = VersionRange.parse("none"), None, False
    for flag in filter(None, (f.strip() for f in flags.split(";"))):
        if flag == "mapKey":
            map_key = True
        elif flag.startswith("nullable "):
            nullable = VersionRange.parse(flag.removeprefix("nullable "))
        elif flag.startswith("default "):
            default = parse_default(flag.removeprefix("default ").strip())
        elif not flag.startswith("entity="):
            raise AssertionError(f"spec field {path!r}: unknown flag {flag!r}")
    return SpecField(
        path=_resolve_path(path, earlier),
        type=type_,
        versions=VersionRange.parse(versions),
        tag=tag,
        nullable=nullable,
        default=default,
        map_key=map_key,
    )


def parse_spec_tables(text: str) -> dict[str, list[SpecField]]:
    """The field tables of §7.4–7.14, by message name (``CreateClusterMirrorRequest``...)."""
    start = text.index("\n### 7.4 ")
    end = text.index("\n### 7.15 ", start)
    tables: dict[str, list[SpecField]] = {}
    current: list[SpecField] | None = None
    for line in text[start:end].splitlines():
        caption = _CAPTION.match(line)
        if caption:
            name = caption.group(1)
            assert name not in tables, f"spec: {name} has two tables"
            current = tables[name] = []
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Field" or not cells[0].strip("-: "):
            continue  # header or separator row
        current.append(_spec_field(cells, [f.path for f in current]))
    return tables


@pytest.fixture(scope="module")
def spec_tables() -> dict[str, list[SpecField]]:
    require(SPEC, "shared spec")
    return parse_spec_tables(SPEC.read_text(encoding="utf-8"))


# --- our declarations --------------------------------------------------------------------------


def load_api(name: str) -> ApiDecl:
    path = DEFS_DIR / f"{name}.def"
    assert path.is_file(), f"missing declaration {path}"
    parsed = parse_text(path.read_text(encoding="utf-8"), path.name)
    assert [a.name for a in parsed.apis] == [name], f"{path.name} must declare exactly API {name}"
    return parsed.apis[0]


def flatten(struct: StructDecl, prefix: str = "") -> list[tuple[str, FieldDecl]]:
    """Every field of ``struct``, depth first in wire order, with its ``Topics[].Name`` path."""
    out: list[tuple[str, FieldDecl]] = []
    for fd in struct.fields:
        path = prefix + fd.name
        out.append((path, fd))
        if fd.struct is not None:
            out += flatten(fd.struct, path + ("[]." if fd.is_array else "."))
    return out


def span(r: VersionRange, api: ApiDecl) -> frozenset[int]:
    """The valid versions of ``api`` that ``r`` covers."""
    assert api.versions.hi is not None
    return frozenset(v for v in range(api.versions.lo, api.versions.hi + 1) if v in r)


# --- API keys (D-01) ---------------------------------------------------------------------------


def test_mirror_api_keys_are_the_d01_block():
    assert list(MIRROR_API_KEYS.values()) == list(range(94, 105))
    assert list(MIRROR_API_KEYS)[0] == "CreateClusterMirror"
    assert list(MIRROR_API_KEYS)[-1] == "WriteMirrorStates"


def test_mirror_api_keys_match_decision_d01():
    require(DECISIONS, "shared decisions")
    text = DECISIONS.read_text(encoding="utf-8")
    start = text.index("**D-01")
    end = text.index("- **D-", start)
    d01 = {name: int(key) for name, key in re.findall(r"\b([A-Z]\w+) (\d+)\b", text[start:end])}
    assert list(d01.items()) == list(MIRROR_API_KEYS.items())


@pytest.mark.parametrize("name", list(MIRROR_API_KEYS))
def test_mirror_declaration_header(name):
    api = load_api(name)
    assert api.key == MIRROR_API_KEYS[name]
    assert api.versions == VersionRange(0, 0), "D-01: version 0 only"
    assert api.flexible == VersionRange(0, None), "D-01: flexible from version 0"
    first_line = (DEFS_DIR / f"{name}.def").read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith("#") and "MIRROR_API_KEYS" in first_line, (
        "the file's comment must say where its key comes from"
    )


def test_no_other_declaration_takes_these_keys():
    wanted = {**MIRROR_API_KEYS, **SHARE_GROUP_APIS}
    owners: dict[int, list[str]] = {}
    for path in sorted(DEFS_DIR.glob("*.def")):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = re.match(r"api\s+(\d+)\s+(\w+)\s", line)
            if m and int(m.group(1)) in wanted.values():
                owners.setdefault(int(m.group(1)), []).append(m.group(2))
    assert owners == {key: [name] for name, key in wanted.items()}


# --- fields against the spec (§7.4–7.14) -------------------------------------------------------


def test_spec_has_a_table_pair_for_every_mirror_api(spec_tables):
    expected = {f"{name}{kind}" for name in MIRROR_API_KEYS for kind in ("Request", "Response")}
    assert set(spec_tables) == expected
    assert spec_tables["ListClusterMirrorsRequest"] == []  # "no fields"
    described = [f.path for f in spec_tables["DescribeClusterMirrorsResponse"]]
    assert "Mirrors[].Topics[].Partitions[].LastMirrorEpoch" in described


@pytest.mark.parametrize("kind", ["request", "response"])
@pytest.mark.parametrize("name", list(MIRROR_API_KEYS))
def test_mirror_fields_match_spec(spec_tables, name, kind):
    api = load_api(name)
    spec = spec_tables[f"{name}{kind.capitalize()}"]
    message = api.request if kind == "request" else api.response
    extensions = EXTENSIONS.get((name, kind), {})
    ours = []
    for path, fd in flatten(message.root):
        if path in extensions:
            assert fd.tag is not None, f"{path}: a kcore extension must be a tagged field"
            continue
        if any(path.startswith(f"{e}[].") for e in extensions):
            continue  # a field of an extension's struct: the extension itself is tagged
        ours.append((path, fd))

    assert [p for p, _ in ours] == [f.path for f in spec], "field names or wire order differ"
    for (path, fd), want in zip(ours, spec):
        where = f"{name}{kind.capitalize()} {path}"
        assert fd.type == want.type, f"{where}: type"
        assert span(fd.versions, api) == span(want.versions, api), f"{where}: versions"
        assert fd.versions == VersionRange(0, None), f"{where}: declare mirror fields as 0+"
        assert span(fd.nullable, api) == span(want.nullable, api), f"{where}: nullability"
        assert fd.default == want.default, f"{where}: default"
        assert fd.tag == want.tag, f"{where}: tag"
        assert fd.map_key == want.map_key, f"{where}: mapKey"


# --- the share-group offset APIs (Kafka 4.1 / 4.2) ---------------------------------------------


@pytest.mark.parametrize(("name", "key"), list(SHARE_GROUP_APIS.items()))
def test_share_group_declaration_parses(name, key):
    api = load_api(name)
    assert api.key == key
    assert api.flexible == VersionRange(0, None)
    comment = (DEFS_DIR / f"{name}.def").read_text(encoding="utf-8").splitlines()[0]
    assert re.search(r"Kafka 4\.\d", comment), "the comment must name the schema's Kafka version"


def test_describe_share_group_offsets_v1_adds_lag():
    api = load_api("DescribeShareGroupOffsets")
    assert api.versions == VersionRange(0, 1)
    request = dict(flatten(api.request.root))
    assert span(request["Groups[].Topics"].nullable, api) == {0, 1}  # null: every topic
    response = dict(flatten(api.response.root))
    lag = response["Groups[].Topics[].Partitions[].Lag"]
    assert (lag.type, lag.versions, lag.default) == ("int64", VersionRange(1, None), "-1")
    assert [p for p in response if p.startswith("Groups[].Topics[].Partitions[].")] == [
        f"Groups[].Topics[].Partitions[].{n}"
        for n in (
            "PartitionIndex",
            "StartOffset",
            "LeaderEpoch",
            "Lag",
            "ErrorCode",
            "ErrorMessage",
        )
    ]


def test_alter_share_group_offsets_has_top_level_error():
    api = load_api("AlterShareGroupOffsets")
    assert api.versions == VersionRange(0, 0)
    assert [f.name for f in api.response.root.fields] == [
        "ThrottleTimeMs",
        "ErrorCode",
        "ErrorMessage",
        "Responses",
    ]
    request = dict(flatten(api.request.root))
    assert list(request) == [
        "GroupId",
        "Topics",
        "Topics[].TopicName",
        "Topics[].Partitions",
        "Topics[].Partitions[].PartitionIndex",
        "Topics[].Partitions[].StartOffset",
    ]
