"""Golden vectors: the first requests real clients sent, decoded and re-encoded byte for byte.

The ``golden/*.bin`` frames (no size prefix) were captured by ``tools/capture_client_requests.py``
from confluent-kafka (librdkafka), kafka-python and aiokafka bootstrapping against a scripted
broker; ``golden/manifest.json`` records the client versions and each frame's header. Each
frame's expected content is written out below by hand (read from the hex, not from the codec), so
a codec change that misreads a real client's bytes fails here.

One live test runs the capture server in a thread and lets confluent-kafka connect, so the
stored bytes are checked against what the installed client sends today.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import struct
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kcore.protocol import (
    APIS,
    decode_request,
    decode_response,
    encode_request,
)
from kcore.protocol import messages as m

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
ZERO_UUID = uuid.UUID(int=0)

API_VERSIONS, METADATA, INIT_PRODUCER_ID = 18, 3, 22


def _load_tool():
    """``tools/capture_client_requests.py`` as a module (``tools/`` is not a package)."""
    name = "capture_client_requests"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Expect:
    """What one captured frame holds: header, body fields, and stray bytes after the body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any] = field(default_factory=dict)
    stray: bytes = b""  # bytes after the body that Kafka's broker ignores


def _metadata(topics, allow_auto, correlation_id, client_id, version=13, stray=b""):
    return Expect(
        METADATA,
        version,
        correlation_id,
        client_id,
        {
            "topics": topics,
            "allow_auto_topic_creation": allow_auto,
            "include_topic_authorized_operations": False,
        },
        stray,
    )


GOLDEN_TOPIC = [(ZERO_UUID, "golden")]  # by name: topic id all zeros from v10

#: Every captured frame, read by hand from its bytes.
EXPECTED: dict[str, Expect] = {
    # librdkafka 2.16.0: ApiVersions v3 (not v4), then Metadata v13 on the same connection.
    "confluent-kafka-0-ApiVersions-v3.bin": Expect(
        API_VERSIONS,
        3,
        1,
        "rdkafka",
        {
            "client_software_name": "confluent-kafka-python",
            "client_software_version": "2.16.1-rdkafka-2.16.0",
        },
    ),
    # Brokers only (empty topic array), auto-creation off.
    "confluent-kafka-1-Metadata-v13.bin": _metadata([], False, 2, "rdkafka"),
    # All topics: librdkafka leaves its 4-byte array-count placeholder in the frame (librdkafka
    # #5049), so the compact-null varint 0x00 is followed by three zero bytes. Kafka reads
    # topics=null, AllowAutoTopicCreation=false, IncludeTopicAuthorizedOperations=false, no
    # tags, and ignores the 3 bytes left (librdkafka meant AllowAutoTopicCreation=true).
    "confluent-kafka-2-Metadata-v13.bin": _metadata(
        None, False, 3, "rdkafka", stray=b"\x01\x00\x00"
    ),
    "confluent-kafka-3-Metadata-v13.bin": _metadata(GOLDEN_TOPIC, True, 4, "rdkafka"),
    # kafka-python 3.0.12: ApiVersions v4; the consumer's client id carries the version.
    "kafka-python-0-ApiVersions-v4.bin": Expect(
        API_VERSIONS,
        4,
        1,
        "kafka-python-3.0.12",
        {"client_software_name": "kafka-python", "client_software_version": "3.0.12"},
    ),
    "kafka-python-1-Metadata-v13.bin": _metadata([], True, 2, "kafka-python-3.0.12"),
    "kafka-python-2-Metadata-v13.bin": _metadata(None, True, 2, "kafka-python-3.0.12"),
    # The producer's client id is "kafka-python-producer-<n>", not versioned.
    "kafka-python-3-ApiVersions-v4.bin": Expect(
        API_VERSIONS,
        4,
        1,
        "kafka-python-producer-1",
        {"client_software_name": "kafka-python", "client_software_version": "3.0.12"},
    ),
    "kafka-python-4-Metadata-v13.bin": _metadata([], True, 2, "kafka-python-producer-1"),
    # Idempotence is on by default in kafka-python 3: InitProducerId v4 before any produce,
    # with TransactionTimeoutMs 0 (not the Java client's 60000).
    "kafka-python-5-InitProducerId-v4.bin": Expect(
        INIT_PRODUCER_ID,
        4,
        2,
        "kafka-python-producer-1",
        {
            "transactional_id": None,
            "transaction_timeout_ms": 0,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    ),
    "kafka-python-6-Metadata-v13.bin": _metadata(GOLDEN_TOPIC, True, 3, "kafka-python-producer-1"),
    # aiokafka 0.14.0: ApiVersions v0 (empty body), then Metadata v5 (non-flexible).
    "aiokafka-0-ApiVersions-v0.bin": Expect(API_VERSIONS, 0, 1, "aiokafka-0.14.0"),
    "aiokafka-1-Metadata-v5.bin": _metadata([], True, 2, "aiokafka-0.14.0", version=5),
    "aiokafka-2-Metadata-v5.bin": _metadata(None, True, 2, "aiokafka-0.14.0", version=5),
    "aiokafka-3-Metadata-v5.bin": _metadata(GOLDEN_TOPIC, True, 3, "aiokafka-0.14.0", version=5),
}

STRAY_FILE = "confluent-kafka-2-Metadata-v13.bin"


def _frame(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def _decode_allowing_stray(frame: bytes):
    """Header and body as Kafka's broker reads them, and whatever follows the body."""
    api_key, version = struct.unpack_from(">hh", frame, 0)
    api = APIS[api_key]
    buf = memoryview(frame)
    header, pos = m.RequestHeader.decode_from(buf, 0, api.request_header_version(version))
    body, pos = api.request.cls.decode_from(buf, pos, version)
    return header, body, bytes(buf[pos:])


def _normalize(name: str, value):
    if name == "topics" and value is not None:
        return [(getattr(t, "topic_id", ZERO_UUID), t.name) for t in value]
    return value


# -- the stored vectors -----------------------------------------------------------------------


def test_golden_manifest_lists_exactly_the_stored_frames():
    listed = [f["file"] for f in MANIFEST["files"]]
    assert sorted(listed) == sorted(p.name for p in GOLDEN.glob("*.bin"))
    assert set(listed) == set(EXPECTED), "every capture needs its expectation written out here"


def test_golden_manifest_covers_api_versions_and_metadata_per_client():
    assert set(MANIFEST["clients"]) == {"confluent-kafka", "kafka-python", "aiokafka"}
    for client in MANIFEST["clients"]:
        apis = {f["api_key"] for f in MANIFEST["files"] if f["client"] == client}
        assert {API_VERSIONS, METADATA} <= apis, client
        assert "error" not in MANIFEST["clients"][client]


def test_golden_manifest_records_the_versions_the_clients_announce():
    clients = MANIFEST["clients"]
    cf, kp, aio = clients["confluent-kafka"], clients["kafka-python"], clients["aiokafka"]
    assert (cf["version"], cf["librdkafka"]) == ("2.16.1", "2.16.0")
    assert kp["version"] == "3.0.12"
    assert aio["version"] == "0.14.0"
    # ... and the frames agree with the manifest about who sent them.
    _, body, _ = _decode_allowing_stray(_frame("confluent-kafka-0-ApiVersions-v3.bin"))
    assert body.client_software_version == f"{cf['version']}-rdkafka-{cf['librdkafka']}"
    header, body, _ = _decode_allowing_stray(_frame("kafka-python-0-ApiVersions-v4.bin"))
    assert header.client_id == f"kafka-python-{kp['version']}"
    assert body.client_software_version == kp["version"]
    header, _, _ = _decode_allowing_stray(_frame("aiokafka-0-ApiVersions-v0.bin"))
    assert header.client_id == f"aiokafka-{aio['version']}"


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"])
def test_golden_manifest_header_matches_frame(entry):
    frame = _frame(entry["file"])
    header, _, _ = _decode_allowing_stray(frame)
    assert len(frame) == entry["size"]
    assert header.request_api_key == entry["api_key"]
    assert APIS[entry["api_key"]].name == entry["api_name"]
    assert header.request_api_version == entry["version"]
    assert header.correlation_id == entry["correlation_id"]
    assert header.client_id == entry["client_id"]
    same_client = [f["file"] for f in MANIFEST["files"] if f["client"] == entry["client"]]
    n = same_client.index(entry["file"])
    assert entry["file"] == f"{entry['client']}-{n}-{entry['api_name']}-v{entry['version']}.bin"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_request_decodes_to_what_the_client_sent(name):
    expect = EXPECTED[name]
    header, body, stray = _decode_allowing_stray(_frame(name))
    assert (header.request_api_key, header.request_api_version) == (expect.api_key, expect.version)
    assert header.correlation_id == expect.correlation_id
    assert header.client_id == expect.client_id
    assert {k: _normalize(k, getattr(body, k)) for k in expect.body} == expect.body
    assert stray == expect.stray


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {STRAY_FILE}))
def test_golden_decode_request_accepts_frame(name):
    expect = EXPECTED[name]
    request = decode_request(_frame(name))
    assert request.api.key == expect.api_key
    assert request.version == expect.version
    assert request.correlation_id == expect.correlation_id
    assert {k: _normalize(k, getattr(request.body, k)) for k in expect.body} == expect.body


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_request_reencodes_to_captured_bytes(name):
    frame = _frame(name)
    header, body, stray = _decode_allowing_stray(frame)
    encoded = encode_request(
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        body,
    )
    assert struct.unpack(">i", encoded[:4])[0] == len(encoded) - 4
    assert encoded[4:] + stray == frame


def test_golden_aiokafka_api_versions_v0_has_an_empty_body():
    frame = _frame("aiokafka-0-ApiVersions-v0.bin")
    client_id = b"aiokafka-0.14.0"
    assert frame == struct.pack(">hhih", API_VERSIONS, 0, 1, len(client_id)) + client_id


def test_golden_librdkafka_all_topics_metadata_carries_the_array_placeholder():
    # topics: varint 0 (null) + 3 zero bytes of the unfinalized 4-byte placeholder, then
    # AllowAutoTopicCreation=1, IncludeTopicAuthorizedOperations=0, empty tagged fields.
    frame = _frame(STRAY_FILE)
    assert frame.endswith(b"rdkafka\x00" + b"\x00\x00\x00\x00" + b"\x01\x00\x00")


def test_golden_decode_request_accepts_librdkafka_all_topics_metadata_like_kafka():
    """librdkafka #5049 leaves 3 stray bytes after the body; Kafka ignores them, so do we."""
    request = decode_request(_frame(STRAY_FILE))
    assert request.body.topics is None
    assert request.header.client_id == "rdkafka"


# -- the capture server's scripted answers ----------------------------------------------------


def _exchange(port: int, request: bytes) -> bytes:
    """Send one size-prefixed request, return the response frame (without its prefix)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "capture server closed the connection"
            data += chunk
    return data[4:]


def test_capture_server_answers_api_versions_with_kafka_40_ranges():
    tool = _load_tool()
    body = m.ApiVersionsRequest(client_software_name="kcore-test", client_software_version="1")
    with tool.CaptureServer(lifetime=10) as server:
        response = _exchange(server.port, encode_request(API_VERSIONS, 3, 7, "t", body))
    correlation_id, decoded = decode_response(API_VERSIONS, 3, response)
    assert correlation_id == 7
    assert decoded.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert ranges[0] == (0, 12)  # Produce from v0 (KAFKA-18659)
    assert ranges[1] == (4, 17)  # Fetch 0-3 removed in 4.0
    assert ranges[3] == (0, 13)
    assert ranges[18] == (0, 4)
    assert decoded.finalized_features_epoch == -1
    # A default-valued tagged field is not written: no tagged section beyond the count byte.
    assert response.endswith(b"\x00\x00\x00\x00\x00")


def test_capture_server_answers_unknown_api_versions_version_with_v0_fallback():
    tool = _load_tool()
    client_id = b"t"
    # ApiVersions v9 (unknown): header v2, then an empty tagged-field section for the body.
    frame = struct.pack(">hhih", API_VERSIONS, 9, 11, len(client_id)) + client_id + b"\x00\x00"
    with tool.CaptureServer(lifetime=10) as server:
        response = _exchange(server.port, struct.pack(">i", len(frame)) + frame)
        assert server.wait_for(lambda caps: len(caps) == 1, 5)
        assert server.captures[0].version == 9
    correlation_id, decoded = decode_response(API_VERSIONS, 0, response)
    assert correlation_id == 11
    assert decoded.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 4)]


# -- live: the installed confluent-kafka against the capture server ---------------------------


@pytest.mark.timeout(30)
def test_golden_live_confluent_kafka_api_versions_request_decodes():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    tool = _load_tool()
    with tool.CaptureServer(lifetime=15) as server:
        admin = AdminClient(
            {
                "bootstrap.servers": server.bootstrap,
                "socket.timeout.ms": 5000,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
            }
        )
        try:
            metadata = admin.list_topics(timeout=5)
        finally:
            del admin
        assert server.wait_for(server.has(API_VERSIONS, METADATA), 5)
        captures = list(server.captures)
        port = server.port

    # librdkafka accepted the codec's ApiVersions v3 and Metadata v13 answers.
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [(1, "127.0.0.1", port)]
    assert set(metadata.topics) == {"golden"}

    first = captures[0]
    request = decode_request(first.frame)
    assert (request.api.key, request.version, request.correlation_id) == (API_VERSIONS, 3, 1)
    assert request.header.client_id == "rdkafka"
    assert request.body.client_software_name == "confluent-kafka-python"
    version = confluent_kafka.version()
    version = version[0] if isinstance(version, tuple) else version
    librdkafka = confluent_kafka.libversion()[0]
    assert request.body.client_software_version == f"{version}-rdkafka-{librdkafka}"
    reencoded = encode_request(API_VERSIONS, 3, 1, "rdkafka", request.body)
    assert reencoded[4:] == first.frame

    stored = MANIFEST["clients"]["confluent-kafka"]
    if (stored["version"], stored["librdkafka"]) == (version, librdkafka):
        assert first.frame == _frame("confluent-kafka-0-ApiVersions-v3.bin")
        assert captures[1].frame == _frame("confluent-kafka-1-Metadata-v13.bin")
