#!/usr/bin/env python3
"""Import Kafka's JSON message schemas into kcore's own declaration format (``.def`` files).

Run from the repository root with the shared reference beside it::

    python tools/import_kafka_schemas.py            # (re)write kcore/protocol/defs/*.def
    python tools/import_kafka_schemas.py --check    # exit 1 if the committed files would change

What is taken: names, types, version ranges, nullability, tags and defaults — the facts of the
wire format. What is not: prose, entity types, license headers. Each API is declared at the union
of the versions the Kafka 4.x schemas and the 2024 snapshot define (old versions that Kafka 4.x
removed are still sent by some clients: see ``client-api-matrix.md``). Fields come from the 4.x
schema when it has the API (it keeps the old fields), else from the snapshot. A third source,
``tools/kafka_schemas_newer/`` (kcore's own facts-only transcription of schemas newer than both
references; see its README), is preferred over both where it has the message.

kcore's own additions (decision D-02: CreateTopics v8 ``MirrorInfo``, Fetch v19
``MirrorLeaderEpoch``; spec M-88: PartitionChangeRecord v3 ``MinLeaderEpoch``) are applied here, so a re-import reproduces the committed files exactly.
Hand-written declarations (the cluster-mirroring APIs, newer share-group APIs) are not touched.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcore.protocol.declarations import VersionRange, format_default  # noqa: E402

SHARED = ROOT.parent / "shared" / "reference"
OLD_DIR = (
    SHARED / "kafka-protocol" / "clients" / "src" / "main" / "resources" / "common" / "message"
)
NEW_DIR = SHARED / "kafka-protocol-4x"
NEWER_DIR = ROOT / "tools" / "kafka_schemas_newer"  # kcore's transcription, preferred when present
DEFS = ROOT / "kcore" / "protocol" / "defs"
# Record schemas outside the client protocol: KRaft metadata records (each with its record type
# id), the coordinators' __consumer_offsets / __transaction_state / __share_group_state records,
# and the quorum-state file. Imported whole, each record a `message`.
RECORD_DIRS = [
    SHARED / "kafka-protocol" / p / "src" / "main" / "resources" / "common" / leaf
    for p, leaf in (
        ("metadata", "metadata"),
        ("group-coordinator", "message"),
        ("transaction-coordinator", "message"),
        ("share-coordinator", "message"),
        ("raft", "message"),
    )
]

# ZooKeeper-era inter-broker APIs: gone from Kafka 4.x, never served by kcore.
SKIPPED_API_KEYS = {4, 5, 6, 7}
# ZooKeeper-migration state: gone with ZooKeeper in Kafka 4.x.
SKIPPED_RECORDS = {"ZkMigrationStateRecord"}
# Non-API messages kcore needs: headers, the consumer protocol, KRaft control records.
DATA_MESSAGES = [
    "RequestHeader",
    "ResponseHeader",
    "ConsumerProtocolSubscription",
    "ConsumerProtocolAssignment",
    "LeaderChangeMessage",
    "SnapshotHeaderRecord",
    "SnapshotFooterRecord",
    "KRaftVersionRecord",
    "VotersRecord",
    "DefaultPrincipalData",
]

GENERATED_NOTE = (
    "# Imported from Kafka's JSON schema by tools/import_kafka_schemas.py: do not edit by hand."
)


def load_json(path: Path) -> dict:
    text = re.sub(r"^\s*//.*$", "", path.read_text(encoding="utf-8"), flags=re.M)
    schema = json.loads(text)
    normalize_versions(schema.get("fields", []))
    for cs in schema.get("commonStructs", []):
        normalize_versions(cs["fields"])
    return schema


def normalize_versions(fields: list[dict]) -> None:
    """A field without ``versions`` exists in its ``taggedVersions`` (Kafka's generator rule)."""
    for f in fields:
        if "versions" not in f and "taggedVersions" in f:
            f["versions"] = f["taggedVersions"]
        if "default" in f and f["default"] is None:  # a JSON null: one schema spells it so
            f["default"] = "null"
        normalize_versions(f.get("fields", []))


def union(a: VersionRange, b: VersionRange) -> VersionRange:
    if a.empty:
        return b
    if b.empty:
        return a
    hi = None if a.hi is None or b.hi is None else max(a.hi, b.hi)
    return VersionRange(min(a.lo, b.lo), hi)


# --- kcore's additions (decisions.md D-02) ---------------------------------------------------


def _add_field(fields: list[dict], after_struct_path: list[str], new_field: dict) -> None:
    """Append ``new_field`` to the struct reached by following ``after_struct_path`` names."""
    for name in after_struct_path:
        fields = next(f for f in fields if f["name"] == name)["fields"]
    fields.append(new_field)


def apply_extensions(name: str, kind: str, schema: dict) -> dict:
    if name == "PartitionChangeRecord":
        # Spec M-88: BumpLeaderEpochs sets a floor for the partition's next leader epoch.
        schema["validVersions"] = "0-3"
        schema["fields"].append(
            {"name": "MinLeaderEpoch", "type": "int32", "versions": "3+", "default": "-1"}
        )
    elif name == "CreateTopics":
        schema["validVersions"] = "0-8"
        if kind == "request":
            _add_field(
                schema["fields"],
                ["Topics"],
                {
                    "name": "MirrorInfo",
                    "type": "MirrorInfo",
                    "versions": "8+",
                    "nullableVersions": "8+",
                    "default": "null",
                    "fields": [{"name": "TopicId", "type": "uuid", "versions": "8+"}],
                },
            )
    elif name == "Fetch":
        schema["validVersions"] = "0-19"
        path, tag = (
            (["Topics", "Partitions"], 2)
            if kind == "request"
            else (
                ["Responses", "Partitions"],
                3,
            )
        )
        _add_field(
            schema["fields"],
            path,
            {
                "name": "MirrorLeaderEpoch",
                "type": "int32",
                "versions": "19+",
                "default": "-1",
                "taggedVersions": "19+",
                "tag": tag,
            },
        )
    return schema


# --- writing ----------------------------------------------------------------------------------


def field_line(f: dict, name_width: int, type_width: int) -> str:
    parts = [f["name"].ljust(name_width), f["type"].ljust(type_width), f["versions"]]
    nullable = f.get("nullableVersions")
    if nullable and nullable != "none":
        parts += ["nullable", nullable]
    if "tag" in f:
        if f.get("taggedVersions", f["versions"]) != f["versions"]:
            raise SystemExit(f"{f['name']}: taggedVersions differ from versions; extend the format")
        parts += ["tag", str(f["tag"])]
    if "default" in f:
        d = f["default"]
        d = ("true" if d else "false") if isinstance(d, bool) else str(d)
        parts += ["default", "null" if d == "null" else format_default(d)]
    if f.get("flexibleVersions") == "none":
        parts += ["flexible", "none"]
    if f.get("mapKey"):
        parts.append("mapkey")
    return " ".join(parts).rstrip()


def write_fields(fields: list[dict], depth: int, out: list[str]) -> None:
    name_width = max((len(f["name"]) for f in fields), default=0)
    type_width = max((len(f["type"]) for f in fields), default=0)
    for f in fields:
        out.append("  " * depth + field_line(f, name_width, type_width))
        if f.get("fields"):
            write_fields(f["fields"], depth + 1, out)


def write_common_structs(schemas: list[dict], out: list[str]) -> None:
    seen: dict[str, list] = {}
    for schema in schemas:
        for cs in schema.get("commonStructs", []):
            if cs["name"] in seen:
                if seen[cs["name"]] != cs["fields"]:
                    raise SystemExit(f"common struct {cs['name']} differs between messages")
                continue
            seen[cs["name"]] = cs["fields"]
            out += ["", f"struct {cs['name']}"]
            write_fields(cs["fields"], 1, out)


def pick(name: str) -> tuple[dict | None, dict | None, dict | None]:
    """(2024 snapshot, Kafka 4.x, kcore's newer transcription) schemas of a message, or None."""
    paths = [d / f"{name}.json" for d in (OLD_DIR, NEW_DIR, NEWER_DIR)]
    old, new, newer = (load_json(p) if p.exists() else None for p in paths)
    return old, new, newer


def merged_schema(name: str, kind: str) -> dict:
    old, new, newer = pick(name)
    base = newer or new or old
    assert base is not None, name
    versions = VersionRange.parse(base["validVersions"])
    for other in (old, new, newer):
        if other is not None:
            versions = union(versions, VersionRange.parse(other["validVersions"]))
    schema = dict(base, validVersions=str(versions))
    return apply_extensions(name.removesuffix(kind.capitalize()), kind, schema)


def render_api(api_name: str) -> str:
    req = merged_schema(api_name + "Request", "request")
    resp = merged_schema(api_name + "Response", "response")
    if req["validVersions"] != resp["validVersions"]:
        raise SystemExit(f"{api_name}: request and response versions differ")
    if req["flexibleVersions"] != resp["flexibleVersions"]:
        raise SystemExit(f"{api_name}: request and response flexible versions differ")
    out = [
        GENERATED_NOTE,
        f"api {req['apiKey']} {api_name} versions {req['validVersions']} "
        f"flexible {req['flexibleVersions']}",
        "",
        "request",
    ]
    write_fields(req["fields"], 1, out)
    out += ["", "response"]
    write_fields(resp["fields"], 1, out)
    write_common_structs([req, resp], out)
    return "\n".join(out) + "\n"


def render_message(name: str, schema: dict | None = None) -> str:
    if schema is None:
        old, new, newer = pick(name)
        schema = newer or new or old
    assert schema is not None, name
    key = f" key {schema['apiKey']}" if schema.get("apiKey") is not None else ""
    out = [
        GENERATED_NOTE,
        f"message {name} versions {schema['validVersions']} "
        f"flexible {schema['flexibleVersions']}{key}",
    ]
    write_fields(schema["fields"], 1, out)
    write_common_structs([schema], out)
    return "\n".join(out) + "\n"


def api_names() -> list[str]:
    names: dict[int, str] = {}
    for directory in (OLD_DIR, NEW_DIR):  # the 4.x name wins (ListClientMetricsResources → …)
        for path in sorted(directory.glob("*Request.json")):
            schema = load_json(path)
            key = schema.get("apiKey")
            if key is None or key in SKIPPED_API_KEYS or schema.get("type") != "request":
                continue
            names[key] = path.name.removesuffix("Request.json")
    return [names[k] for k in sorted(names)]


def render_all() -> dict[str, str]:
    files = {f"{name}.def": render_api(name) for name in api_names()}
    files.update({f"{name}.def": render_message(name) for name in DATA_MESSAGES})
    for directory in RECORD_DIRS:
        for path in sorted(directory.glob("*.json")):
            schema = load_json(path)
            if schema["name"] not in SKIPPED_RECORDS:
                schema = apply_extensions(schema["name"], "message", schema)
                files[f"{schema['name']}.def"] = render_message(schema["name"], schema)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    args = parser.parse_args()
    if not SHARED.exists():
        print(f"reference schemas not found at {SHARED}", file=sys.stderr)
        return 2
    files = render_all()
    drift = []
    for name, text in files.items():
        path = DEFS / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            drift.append(name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and drift:
        print("declarations differ from a fresh import: " + ", ".join(drift), file=sys.stderr)
        return 1
    print(f"{len(files)} declaration files {'checked' if args.check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
