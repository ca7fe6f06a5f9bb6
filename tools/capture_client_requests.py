#!/usr/bin/env python3
"""Capture the first requests real Kafka clients send, as golden vectors for the codec tests.

Run from the repository root (it needs the test extras: confluent-kafka, kafka-python,
aiokafka)::

    python tools/capture_client_requests.py             # rewrite tests/protocol/golden/
    python tools/capture_client_requests.py --out DIR   # somewhere else
    python tools/capture_client_requests.py --client confluent-kafka   # one client only

For each client in turn, a :class:`CaptureServer` listens on 127.0.0.1 (a free port) and plays a
one-broker cluster just far enough for the client to bootstrap:

* ApiVersions is answered with Kafka 4.0's advertised API ranges (:data:`KAFKA_40_VERSIONS`,
  clipped to what kcore's codec declares), at the version the client asked for; a version the
  codec does not know gets the v0 ``UNSUPPORTED_VERSION`` fallback, as Kafka does;
* Metadata is answered with this broker (node 1 at the capture port) and one single-partition
  topic per requested name (``golden`` when all topics are asked for, none for an empty list);
* anything else is recorded and left unanswered (the client times out on its own).

Every request frame received is recorded (the bytes after the 4-byte size prefix). A client
repeats itself when it retries, so only the first frame of each distinct request (same bytes
apart from the correlation id) is kept. The kept frames are written as
``<client>-<n>-<ApiName>-v<version>.bin`` with a ``manifest.json`` recording the client library
versions and, per file, the API key, version, correlation id and client id.

Bounded by construction: the server's loop polls with a timeout and stops after ``lifetime``
seconds at most, each client call carries its own timeout, and a client that overruns its budget
is abandoned (its thread is a daemon), so the tool always ends by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import selectors
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kcore.protocol import (  # noqa: E402
    APIS,
    MalformedMessage,
    Request,
    UnsupportedVersion,
    api_versions_fallback_response,
    decode_request,
    encode_response_bytes,
)
from kcore.protocol import messages as m  # noqa: E402
from kcore.protocol.framing import FrameDecoder  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "protocol" / "golden"
HOST = "127.0.0.1"
NODE_ID = 1
CLUSTER_ID = "kcore-golden-capture"
GOLDEN_TOPIC = "golden"
GOLDEN_TOPIC_ID = uuid.UUID("6b636f72-652d-676f-6c64-656e2d746f70")  # fixed: stable captures

API_VERSIONS_KEY = 18
METADATA_KEY = 3

#: What an Apache Kafka 4.0 broker advertises in ApiVersions (client-facing and admin APIs;
#: ``client-api-matrix.md``). Produce still starts at 0 (KAFKA-18659: librdkafka < 2.11.1 turns
#: compression off otherwise); Fetch and ListOffsets lost their oldest versions in 4.0.
KAFKA_40_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 1),
    69: (0, 1), 74: (0, 0), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}  # fmt: skip

log = logging.getLogger("capture")


def advertised_versions() -> list[tuple[int, int, int]]:
    """``(api_key, min, max)`` for the ApiVersions answer: Kafka 4.0's ranges within the codec's."""
    out = []
    for key, (lo, hi) in sorted(KAFKA_40_VERSIONS.items()):
        api = APIS.get(key)
        if api is None:
            continue
        lo, hi = max(lo, api.min_version), min(hi, api.max_version)
        if lo <= hi:
            out.append((key, lo, hi))
    return out


def api_versions_response(version: int, correlation_id: int) -> bytes:
    """The scripted ApiVersions answer (size prefix included) at ``version``."""
    if version not in APIS[API_VERSIONS_KEY].versions:
        return api_versions_fallback_response(correlation_id)
    cls = m.ApiVersionsResponse
    body = cls(
        error_code=0,
        api_keys=[
            cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in advertised_versions()
        ],
        throttle_time_ms=0,
    )
    return encode_response_bytes(API_VERSIONS_KEY, version, correlation_id, body)


def _topic_id(name: str) -> uuid.UUID:
    """A stable id per topic name (the golden topic's is fixed)."""
    return GOLDEN_TOPIC_ID if name == GOLDEN_TOPIC else uuid.uuid5(GOLDEN_TOPIC_ID, name)


def metadata_response(request: Request, port: int) -> bytes:
    """The scripted Metadata answer: this broker, and the requested topics as one partition each.

    All topics (a null array) means the golden topic; a topic asked for by id alone (v10+) is
    known only if it is the golden topic's id, else UNKNOWN_TOPIC_ID.
    """
    version, body = request.version, request.body
    cls = m.MetadataResponse
    if body.topics is None:
        names: list[str | None] = [GOLDEN_TOPIC]
    else:
        names = [
            t.name if t.name is not None or t.topic_id != GOLDEN_TOPIC_ID else GOLDEN_TOPIC
            for t in body.topics
        ]
    topics = []
    for name in names:
        if name is None:
            topics.append(
                cls.MetadataResponseTopic(
                    error_code=100,  # UNKNOWN_TOPIC_ID
                    name=None if version >= 12 else "",
                    partitions=[],
                )
            )
            continue
        partition = cls.MetadataResponsePartition(
            error_code=0,
            partition_index=0,
            leader_id=NODE_ID,
            leader_epoch=0,
            replica_nodes=[NODE_ID],
            isr_nodes=[NODE_ID],
            offline_replicas=[],
        )
        topics.append(
            cls.MetadataResponseTopic(
                error_code=0, name=name, topic_id=_topic_id(name), partitions=[partition]
            )
        )
    resp = cls(
        throttle_time_ms=0,
        brokers=[cls.MetadataResponseBroker(node_id=NODE_ID, host=HOST, port=port, rack=None)],
        cluster_id=CLUSTER_ID,
        controller_id=NODE_ID,
        topics=topics,
    )
    return encode_response_bytes(METADATA_KEY, version, request.correlation_id, resp)


@dataclass(frozen=True, slots=True)
class Capture:
    """One request frame as received (``frame`` has no size prefix)."""

    connection: int
    api_key: int
    api_name: str
    version: int
    correlation_id: int
    client_id: str | None
    frame: bytes
    #: Bytes after the body that the strict decoder rejects (Kafka ignores them), else 0.
    trailing_bytes: int = 0
    #: Why the frame did not decode at all (unknown version, malformed), else None.
    decode_error: str | None = None

    def dedup_key(self) -> bytes:
        # The same request again apart from its correlation id (bytes 4..8) is a retry.
        return self.frame[:4] + self.frame[8:]


def decode_lenient(frame: bytes) -> tuple[Request, int]:
    """Decode like Kafka's broker does: bytes left after the body are ignored, not an error.

    Returns the request and how many bytes were left over. (``decode_request`` is stricter;
    librdkafka's all-topics Metadata v9+ request carries 3 such bytes: librdkafka #5049.)
    """
    try:
        return decode_request(frame), 0
    except UnsupportedVersion:
        raise
    except MalformedMessage:
        api_key, version = struct.unpack_from(">hh", frame, 0)
        api = APIS[api_key]
        buf = memoryview(frame)
        header, pos = m.RequestHeader.decode_from(buf, 0, api.request_header_version(version))
        body, pos = api.request.cls.decode_from(buf, pos, version)
        if pos == len(buf):
            raise
        return Request(header, api, body), len(buf) - pos


def _header_fields(frame: bytes) -> tuple[int, int, int, str | None]:
    """api key, version, correlation id and client id of any request header v1/v2."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    client_id = None
    if len(frame) >= 10:
        (n,) = struct.unpack_from(">h", frame, 8)
        if 0 <= n <= len(frame) - 10:
            client_id = frame[10 : 10 + n].decode("utf-8", "replace")
    return api_key, version, correlation_id, client_id


class CaptureServer:
    """A single-threaded scripted broker on 127.0.0.1 that records the frames it receives.

    ``start()`` binds a free port and serves in a daemon thread; ``stop()`` (also on leaving a
    ``with`` block) closes everything and joins it. The loop also ends on its own after
    ``lifetime`` seconds. ``captures`` holds the distinct frames in arrival order (at most
    ``max_captures``); ``frames_received`` counts all of them, retries included.
    """

    def __init__(
        self,
        *,
        lifetime: float = 60.0,
        max_captures: int = 32,
        answer_metadata: bool = True,
        max_connections: int = 64,
    ) -> None:
        self.lifetime = lifetime
        self.max_captures = max_captures
        self.answer_metadata = answer_metadata
        self.max_connections = max_connections
        self.captures: list[Capture] = []
        self.frames_received = 0
        self.connections_accepted = 0
        self.errors: list[str] = []
        self._seen: set[bytes] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._listener = socket.create_server((HOST, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="capture-server", daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> CaptureServer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        else:
            self._listener.close()

    def __enter__(self) -> CaptureServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_for(self, predicate: Callable[[list[Capture]], bool], timeout: float) -> bool:
        """Wait until ``predicate(captures)`` holds (True) or ``timeout`` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.captures), timeout)

    def has(self, *api_keys: int) -> Callable[[list[Capture]], bool]:
        """A predicate for :meth:`wait_for`: every one of ``api_keys`` has been captured."""
        return lambda caps: set(api_keys) <= {c.api_key for c in caps}

    # -- the loop ---------------------------------------------------------------------------

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        deadline = time.monotonic() + self.lifetime
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.05):
                    if key.data is None:
                        self._accept(sel)
                    else:
                        self._read(sel, key.fileobj, key.data)
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()
            with self._cond:
                self._cond.notify_all()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self.connections_accepted >= self.max_connections:
            conn.close()
            return
        self.connections_accepted += 1
        conn.settimeout(2.0)  # sendall of a small answer; reads only after select says ready
        sel.register(conn, selectors.EVENT_READ, (self.connections_accepted, FrameDecoder(1 << 20)))

    def _close(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        sel.unregister(conn)
        conn.close()

    def _read(self, sel: selectors.BaseSelector, conn: socket.socket, data) -> None:
        conn_no, decoder = data
        try:
            chunk = conn.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._close(sel, conn)
            return
        decoder.receive_data(chunk)
        try:
            while (frame := decoder.next_frame()) is not None:
                answer = self._handle(conn_no, frame)
                if answer:
                    conn.sendall(answer)
        except (MalformedMessage, OSError) as e:
            self.errors.append(f"connection {conn_no}: {e!r}")
            self._close(sel, conn)

    def _handle(self, conn_no: int, frame: bytes) -> bytes | None:
        api_key, version, correlation_id, client_id = _header_fields(frame)
        request, trailing, error = None, 0, None
        try:
            request, trailing = decode_lenient(frame)
            client_id = request.header.client_id
        except MalformedMessage as e:  # UnsupportedVersion too: ApiVersions gets the fallback
            error = str(e)
            self.errors.append(f"connection {conn_no}: key {api_key} v{version}: {e}")
        api = APIS.get(api_key)
        cap = Capture(
            conn_no, api_key, api.name if api else f"Api{api_key}", version, correlation_id,
            client_id, bytes(frame), trailing, error,
        )  # fmt: skip
        log.debug("conn %d: %s v%d corr %d", conn_no, cap.api_name, version, correlation_id)
        with self._cond:
            self.frames_received += 1
            key = cap.dedup_key()
            if key not in self._seen and len(self.captures) < self.max_captures:
                self._seen.add(key)
                self.captures.append(cap)
            self._cond.notify_all()
        if api_key == API_VERSIONS_KEY:
            return api_versions_response(version, correlation_id)
        if api_key == METADATA_KEY and request is not None and self.answer_metadata:
            return metadata_response(request, self.port)
        return None


# -- the clients ------------------------------------------------------------------------------


def drive_confluent_kafka(server: CaptureServer, timeout: float) -> dict:
    """librdkafka through confluent-kafka: an AdminClient bootstraps (ApiVersions, a brokers-only
    Metadata), then lists all topics, then asks for the golden topic by name."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": server.bootstrap,
            "socket.timeout.ms": int(timeout * 1000),
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
        }
    )
    try:
        admin.list_topics(timeout=timeout)
        admin.list_topics(topic=GOLDEN_TOPIC, timeout=timeout)
    except confluent_kafka.KafkaException as e:
        log.warning("confluent-kafka: list_topics: %s", e)
    finally:
        del admin
    version = confluent_kafka.version()  # a str in 2.16; a (str, int) tuple before
    return {
        "package": "confluent-kafka",
        "version": version[0] if isinstance(version, tuple) else version,
        "librdkafka": confluent_kafka.libversion()[0],
        "driver": "AdminClient: list_topics(), list_topics(topic)",
    }


def drive_kafka_python(server: CaptureServer, timeout: float) -> dict:
    """kafka-python: a KafkaConsumer negotiates (api_version unset) and lists all topics; a
    KafkaProducer asks for the golden topic's partitions."""
    import kafka

    common = {
        "bootstrap_servers": server.bootstrap,
        "request_timeout_ms": int(timeout * 1000),
        "reconnect_backoff_ms": 100,
        "reconnect_backoff_max_ms": 500,
    }
    consumer = kafka.KafkaConsumer(enable_auto_commit=False, **common)
    try:
        consumer.topics()
    except kafka.errors.KafkaError as e:
        log.warning("kafka-python: topics: %s", e)
    finally:
        consumer.close()
    producer = kafka.KafkaProducer(max_block_ms=int(timeout * 1000), **common)
    try:
        producer.partitions_for(GOLDEN_TOPIC)
    except kafka.errors.KafkaError as e:
        log.warning("kafka-python: partitions_for: %s", e)
    finally:
        producer.close(timeout=timeout)
    return {
        "package": "kafka-python",
        "version": kafka.__version__,
        "driver": "KafkaConsumer: topics(); KafkaProducer: partitions_for(topic)",
    }


def drive_aiokafka(server: CaptureServer, timeout: float) -> dict:
    """aiokafka: an AIOKafkaClient bootstraps (ApiVersions, a brokers-only Metadata), fetches all
    topics' metadata, then starts tracking the golden topic."""
    import aiokafka
    from aiokafka.client import AIOKafkaClient

    async def run() -> None:
        client = AIOKafkaClient(
            bootstrap_servers=server.bootstrap,
            request_timeout_ms=int(timeout * 1000),
            metadata_max_age_ms=60_000,
        )
        try:
            await asyncio.wait_for(client.bootstrap(), timeout)
            await asyncio.wait_for(client.fetch_all_metadata(), timeout)
            await asyncio.wait_for(client.add_topic(GOLDEN_TOPIC), timeout)
        except (aiokafka.errors.KafkaError, TimeoutError) as e:
            log.warning("aiokafka: %r", e)
        finally:
            await asyncio.wait_for(client.close(), timeout)

    asyncio.run(run())
    return {
        "package": "aiokafka",
        "version": aiokafka.__version__,
        "driver": "AIOKafkaClient: bootstrap(), fetch_all_metadata(), add_topic(topic)",
    }


CLIENTS: dict[str, Callable[[CaptureServer, float], dict]] = {
    "confluent-kafka": drive_confluent_kafka,
    "kafka-python": drive_kafka_python,
    "aiokafka": drive_aiokafka,
}


def capture_client(name: str, timeout: float = 5.0) -> tuple[dict, list[Capture]]:
    """Run one client against a fresh capture server; returns its versions and captures.

    The client runs in a daemon thread given ``3 * timeout`` seconds; if it overruns, what was
    captured so far is returned and the thread is abandoned.
    """
    drive = CLIENTS[name]
    info: dict = {"package": name}
    with CaptureServer(lifetime=4 * timeout + 10) as server:

        def target() -> None:
            try:
                info.update(drive(server, timeout))
            except Exception as e:  # a client's failure is reported, the other clients still run
                info["error"] = repr(e)

        worker = threading.Thread(target=target, name=f"client-{name}", daemon=True)
        worker.start()
        worker.join(3 * timeout)
        if worker.is_alive():
            info["error"] = f"client did not finish within {3 * timeout:.0f} s"
        captures = list(server.captures)
        info["frames_received"] = server.frames_received
        if server.errors:
            info["server_errors"] = server.errors[:10]
    return info, captures


def file_name(client: str, n: int, cap: Capture) -> str:
    return f"{client}-{n}-{cap.api_name}-v{cap.version}.bin"


def write_golden(out: Path, results: dict[str, tuple[dict, list[Capture]]]) -> dict:
    """Write the ``.bin`` files and ``manifest.json`` (merged with an existing manifest)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = {"clients": {}, "files": []}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    for client, (info, captures) in results.items():
        for old in [f for f in manifest["files"] if f["client"] == client]:
            (out / old["file"]).unlink(missing_ok=True)
        manifest["files"] = [f for f in manifest["files"] if f["client"] != client]
        client_info = {k: v for k, v in info.items() if k not in ("frames_received",)}
        manifest["clients"][client] = client_info
        for n, cap in enumerate(captures):
            name = file_name(client, n, cap)
            (out / name).write_bytes(cap.frame)
            manifest["files"].append(
                {
                    "file": name,
                    "client": client,
                    "connection": cap.connection,
                    "api_key": cap.api_key,
                    "api_name": cap.api_name,
                    "version": cap.version,
                    "correlation_id": cap.correlation_id,
                    "client_id": cap.client_id,
                    "size": len(cap.frame),
                    **({"trailing_bytes": cap.trailing_bytes} if cap.trailing_bytes else {}),
                    **({"decode_error": cap.decode_error} if cap.decode_error else {}),
                }
            )
    manifest["clients"] = dict(sorted(manifest["clients"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="where to write (%(default)s)"
    )
    parser.add_argument("--client", choices=sorted(CLIENTS), action="append", help="only these")
    parser.add_argument("--timeout", type=float, default=5.0, help="per client call (seconds)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    for noisy in ("kafka", "aiokafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)

    results = {}
    ok = True
    for client in args.client or list(CLIENTS):
        info, captures = capture_client(client, args.timeout)
        results[client] = (info, captures)
        apis = {c.api_key for c in captures}
        missing = {API_VERSIONS_KEY, METADATA_KEY} - apis
        summary = ", ".join(f"{c.api_name} v{c.version}" for c in captures)
        print(f"{client}: {summary or 'nothing'} ({info['frames_received']} frames received)")
        if "error" in info:
            print(f"  error: {info['error']}")
        if missing:
            ok = False
            print(f"  missing: {sorted(APIS[k].name for k in missing)}")
    write_golden(args.out, results)
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
