"""Bad input over raw sockets: oversize bodies, slow clients, malformed HTTP and JSON, odd path
parameters, a thousand concurrent requests, and (hypothesis) any topic name and any config
patch body. None crashes the broker or stalls it: each gets a JSON answer of the client's
class, the admin endpoint answers a normal request beside them, and a confluent-kafka producer
writing through the tests gets every record acknowledged and read back."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import threading
import time
import urllib.parse
import uuid

import httpx
import pytest
import trio
from confluent_kafka import Consumer, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(300)

LIMIT = 16384  # admin.max.request.bytes of the cluster under test
FUZZED_TOPIC = "fuzzed"


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(admin=True, config={"admin.max.request.bytes": str(LIMIT)}) as cluster:
        cluster.create_topic(FUZZED_TOPIC)
        yield cluster


@pytest.fixture
def address(cluster) -> tuple[str, int]:
    host, port = cluster.admin_url.removeprefix("http://").split(":")
    return host, int(port)


class KafkaTraffic:
    """Produces numbered records to a fresh topic from a thread until stopped; :meth:`check`
    asserts that every one was acknowledged and reads them all back."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.topic = f"traffic-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(self.topic, partitions=2)
        self.sent = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-traffic", daemon=True)

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all", "linger.ms": 0}
        )

        def delivered(err, _msg):
            if err is not None:
                self.failed.append(str(err))

        while not self._stop.is_set() or self.sent < 20:
            producer.produce(self.topic, value=str(self.sent).encode(), on_delivery=delivered)
            self.sent += 1
            producer.poll(0)
            time.sleep(0.005)
        if producer.flush(60) != 0:
            self.failed.append("not flushed")

    def __enter__(self) -> KafkaTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(90)
        if exc[0] is None:
            self.check()

    def check(self) -> None:
        assert not self._thread.is_alive()
        assert self.failed == []
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "group.id": f"check-{self.topic}",
                "auto.offset.reset": "earliest",
            }
        )
        seen: set[int] = set()
        try:
            consumer.subscribe([self.topic])
            deadline = time.monotonic() + 60
            while len(seen) < self.sent and time.monotonic() < deadline:
                message = consumer.poll(1)
                if message is not None and not message.error():
                    seen.add(int(message.value()))
        finally:
            consumer.close()
        assert seen == set(range(self.sent))


@pytest.fixture
def traffic(cluster):
    with KafkaTraffic(cluster) as traffic:
        yield traffic


def served(cluster) -> None:
    """The admin endpoint answers a normal request."""
    answer = httpx.get(f"{cluster.admin_url}/v1/cluster", timeout=60)
    assert answer.status_code == 200
    assert answer.json()["cluster_id"] == cluster.broker.cluster_id


def connect(address, timeout: float = 60) -> socket.socket:
    s = socket.create_connection(address, timeout=timeout)
    s.settimeout(timeout)
    return s


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one HTTP/1.1 response with a Content-Length; status 0 when the
    server closed the connection without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return 0, {}, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def exchange(address, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with connect(address) as s:
        s.sendall(raw)
        return read_response(s)


def post_head(path: str, length: int | None, *, chunked: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: kcore\r\nContent-Type: application/json\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    elif length is not None:
        head += f"Content-Length: {length}\r\n"
    return (head + "\r\n").encode()


def test_a_body_announced_over_the_limit_is_413_before_any_of_it_is_sent(cluster, address, traffic):
    with connect(address) as s:
        s.sendall(post_head("/v1/topics", 100 * 1024 * 1024))  # 100 MiB announced, none sent
        status, headers, body = read_response(s)
    assert status == 413
    assert json.loads(body)["error"] == "REQUEST_ENTITY_TOO_LARGE"
    assert headers.get("connection") == "close"
    served(cluster)


def test_a_chunked_body_growing_past_the_limit_is_413_once_past_it(cluster, address, traffic):
    chunk = b"x" * 4096
    with connect(address) as s:
        s.sendall(post_head("/v1/topics", None, chunked=True))
        sent = 0
        answered = None
        for _ in range(200):  # up to 800 KiB, 50 times the limit
            try:
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:  # the server closed: its answer is in the socket
                break
            sent += len(chunk)
            s.settimeout(0.05)
            try:
                peek = s.recv(1, socket.MSG_PEEK)
            except (TimeoutError, BlockingIOError):
                continue
            finally:
                s.settimeout(60)
            if peek:
                answered = sent
                break
        status, _, body = read_response(s)
    assert status == 413
    assert json.loads(body)["error"] == "REQUEST_ENTITY_TOO_LARGE"
    assert answered is not None and LIMIT < answered < 100 * 4096
    served(cluster)


def test_a_body_at_the_limit_is_read(cluster, address):
    body = json.dumps({"name": "x" * (LIMIT - 20)}).encode()
    assert len(body) <= LIMIT
    status, _, answer = exchange(address, post_head("/v1/topics", len(body)) + body)
    assert status == 400  # read and judged by the Kafka API: the name is too long
    assert json.loads(answer)["error"] == "INVALID_TOPIC_EXCEPTION"


def test_slow_heads_and_bodies_hold_nothing_up(cluster, address, traffic):
    slow_heads, slow_bodies = [], []
    try:
        for _ in range(50):
            s = connect(address)
            s.sendall(b"GET /v1/cluster HTTP/1.1\r\nHost: k")  # a head that never ends
            slow_heads.append(s)
        for _ in range(50):
            s = connect(address)
            s.sendall(post_head("/v1/topics", 1000) + b'{"name": ')  # a body that never ends
            slow_bodies.append(s)
        for _ in range(5):  # trickle a byte each, as slowloris does
            for s in slow_heads + slow_bodies:
                s.sendall(b"x")
            served(cluster)
            time.sleep(0.2)
    finally:
        for s in slow_heads + slow_bodies:
            s.close()
    served(cluster)


def test_a_response_before_the_body_is_in_keeps_the_connection_usable(cluster, address):
    # A route that reads no body answers at once; the body follows; then a second request.
    with connect(address) as s:
        for _ in range(3):
            s.sendall(b"GET /v1/brokers HTTP/1.1\r\nHost: k\r\nContent-Length: 2\r\n\r\n")
            time.sleep(0.3)
            s.sendall(b"{}")
            status, _, body = read_response(s)
            assert status == 200 and json.loads(body)["brokers"]


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\xff\xfe garbage \r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),  # a TLS hello
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\nHost: k\r\n\r\n",  # a bad request line
        b"GET /v1/cluster HTTP/1.1\r\n\r\n",  # no Host
        b"GET /v1/cluster HTTP/1.1\r\nHost: k\r\nBad Header\r\n\r\n",
        b"GET /v1/cluster HTTP/1.1\r\nHost: k\r\nX: " + b"a" * 100_000 + b"\r\n\r\n",
        b"GET /v1/cluster HTTP/1.1\r\nHost: k\r\n" + b"X-A: b\r\n" * 50_000 + b"\r\n",
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: k\r\n\r\n",
        post_head("/v1/topics", None, chunked=True) + b"zz\r\nabc\r\n0\r\n\r\n",
        post_head("/v1/topics", None, chunked=True) + b"5\r\nabcdefghij\r\n0\r\n\r\n",
        post_head("/v1/topics", 10) + b"0123456789" + b"trailing junk",
        b"POST /v1/topics HTTP/1.1\r\nHost: k\r\nContent-Length: -5\r\n\r\n",
        b"POST /v1/topics HTTP/1.1\r\nHost: k\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
    ],
    ids=lambda raw: repr(raw[:24]),
)
def test_malformed_http_is_refused_and_the_endpoint_serves_on(cluster, address, raw):
    with connect(address) as s:
        try:
            s.sendall(raw)
            status, _, _ = read_response(s)
        except (ConnectionResetError, BrokenPipeError):
            status = 0  # closed on us: a refusal too
    assert status == 0 or 400 <= status < 500, status
    served(cluster)


@pytest.mark.parametrize(
    "body,error",
    [
        (b'{"name": "t", ', "INVALID_JSON"),
        (b"\xff\xfe{}", "INVALID_JSON"),
        (b"[" * 5000 + b"]" * 5000, "INVALID_JSON"),
        (b'{"name": "t", "name": 5}', "INVALID_REQUEST"),  # the last one wins: a number
        (b'{"name": "t", "partitions": 1e400}', "INVALID_REQUEST"),
        (b'{"name": "t", "partitions": 99999999999999999999999}', "INVALID_REQUEST"),
        (b'{"name": "t", "partitions": true}', "INVALID_REQUEST"),
        (b'{"name": null}', "INVALID_REQUEST"),
        (b'"just a string"', "INVALID_REQUEST"),
        (b"null", "INVALID_REQUEST"),
        (b'{"name": "t", "surprise": {}}', "INVALID_REQUEST"),
    ],
    ids=lambda x: repr(x[:20]) if isinstance(x, bytes) else x,
)
def test_bad_json_bodies_are_400_with_a_message(cluster, address, body, error):
    status, _, answer = exchange(address, post_head("/v1/topics", len(body)) + body)
    assert status == 400, answer
    parsed = json.loads(answer)
    assert parsed["error"] == error and parsed["message"]
    served(cluster)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/topics/a%2Fb",
        "/v1/topics/%ff%fe",
        "/v1/topics/%00",
        "/v1/topics/" + "x" * 300,
        "/v1/topics/" + "%E6%97%A5" * 50,
        "/v1/topics/a%0d%0aX-Injected:%201",
        "/v1/groups/" + "g" * 5000,
        "/v1/groups/%ff",
        "/v1/topics/x/configs/../../../etc",
    ],
)
def test_odd_path_parameters_are_json_errors(cluster, address, path):
    status, headers, answer = exchange(address, f"GET {path} HTTP/1.1\r\nHost: k\r\n\r\n".encode())
    assert 400 <= status < 500, (status, answer)
    assert "x-injected" not in headers
    assert json.loads(answer)["error"]
    served(cluster)


def test_a_thousand_concurrent_requests_are_all_answered(cluster, address, traffic):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 4096  # a thousand client sockets and the server's thousand, in one process
    if soft < needed and (hard == resource.RLIM_INFINITY or hard >= needed):
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    statuses: list[int] = []

    async def one(path: str) -> None:
        stream = await trio.open_tcp_stream(*address)
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: k\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
            statuses.append(int(data.split(b" ", 2)[1]) if data else 0)

    async def main() -> None:
        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                for i in range(1000):
                    nursery.start_soon(one, "/v1/cluster" if i % 2 else "/health/live")

    trio.run(main)
    assert len(statuses) == 1000
    assert set(statuses) == {200}
    served(cluster)


def test_the_broker_is_whole_after_the_abuse(cluster):
    with contextlib.closing(httpx.Client(base_url=cluster.admin_url, timeout=60)) as http:
        assert http.get("/health/ready").status_code == 200
        name = f"after-{uuid.uuid4().hex[:8]}"
        assert http.post("/v1/topics", json={"name": name}).status_code == 201
        assert http.get(f"/v1/topics/{name}").json()["partitions"][0]["leader"] == 1


# -- any name, any body: always an answer of the client's class, never the server's -----------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
CONFIG_NAMES = st.sampled_from(["retention.ms", "cleanup.policy", "segment.bytes", "no.such"])


def assert_json_answer(answer: httpx.Response, allowed: set[int]) -> None:
    assert answer.status_code in allowed, (answer.status_code, answer.text)
    if answer.status_code >= 400:
        body = answer.json()
        assert body["error"] and body["message"]


@pytest.fixture(scope="module")
def shared_http(cluster):
    with httpx.Client(base_url=cluster.admin_url, timeout=60) as http:
        yield http


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.text(max_size=300))
def test_any_topic_name_gets_a_json_answer(shared_http, name):
    created = shared_http.post(
        "/v1/topics", json={"name": name, "partitions": 1, "validate_only": True}
    )
    assert_json_answer(created, {200, 400, 409})
    quoted = urllib.parse.quote(name, safe="")
    for path in (f"/v1/topics/{quoted}", f"/v1/topics/{quoted}/configs"):
        assert_json_answer(shared_http.get(path), {200, 404})
    assert_json_answer(shared_http.get(f"/v1/groups/{quoted}"), {200, 404})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "set": st.dictionaries(CONFIG_NAMES, JSON, max_size=3),
            "delete": st.lists(CONFIG_NAMES | JSON, max_size=3),
            "append": st.dictionaries(CONFIG_NAMES, st.text(max_size=20), max_size=2),
            "subtract": JSON,
        },
    )
)
def test_any_config_patch_body_gets_a_json_answer(shared_http, body):
    if isinstance(body, dict):
        body = {**body, "validate_only": True}  # judged by the Kafka API, changing nothing
    answer = shared_http.patch(f"/v1/topics/{FUZZED_TOPIC}/configs", json=body)
    assert_json_answer(answer, {200, 400})
    if answer.status_code == 200:
        assert answer.json()["validate_only"] is True
