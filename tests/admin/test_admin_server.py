"""The admin endpoint's shell: served by the broker over real sockets, health probes, bearer
tokens, one JSON error shape, and a shutdown that no HTTP client can hold up."""

from __future__ import annotations

import os
import socket
import threading
import time

import httpx
import pytest

from kcore.log.config import InvalidConfigError
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(admin=True) as cluster:
        yield cluster


def test_admin_endpoint_serves_health_and_the_openapi_document(cluster):
    assert cluster.broker.admin_urls == [cluster.admin_url]
    with httpx.Client(base_url=cluster.admin_url) as http:
        live = http.get("/health/live")
        assert live.status_code == 200 and live.json() == {"status": "live"}
        ready = http.get("/health/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        doc = http.get("/v1/openapi.json")
        assert doc.status_code == 200
        assert doc.json()["info"]["title"] == "kcore admin API"
        assert doc.json()["openapi"].startswith("3.")


def test_unknown_path_and_method_get_json_errors(cluster):
    with httpx.Client(base_url=cluster.admin_url) as http:
        missing = http.get("/v1/no-such-thing")
        assert missing.status_code == 404
        assert missing.json()["error"] == "NOT_FOUND"
        wrong = http.delete("/health/live")
        assert wrong.status_code == 405
        assert wrong.json()["error"] == "METHOD_NOT_ALLOWED"


def test_admin_endpoint_is_off_unless_configured():
    with EmbeddedCluster() as cluster:
        assert cluster.broker.admin_server is None
        assert cluster.broker.admin_urls == []
        with pytest.raises(ValueError, match="admin=True"):
            _ = cluster.admin_url


def test_bearer_tokens_guard_everything_but_health(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("# operators\nfirst-token\nUser:ops second-token\n")
    config = {"admin.auth.token.file": str(tokens)}
    with (
        EmbeddedCluster(admin=True, config=config) as cluster,
        httpx.Client(base_url=cluster.admin_url) as http,
    ):
        assert http.get("/health/live").status_code == 200
        assert http.get("/health/ready").status_code == 200
        refused = http.get("/v1/openapi.json")
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert refused.json()["error"] == "UNAUTHENTICATED"
        for header in ("Bearer wrong", "Basic Zmlyc3QtdG9rZW4=", "Bearer", "first-token"):
            assert (
                http.get("/v1/openapi.json", headers={"Authorization": header}).status_code == 401
            )
        for token in ("first-token", "second-token"):
            ok = http.get("/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200
        # Rotated without a restart: the old token is refused at once, the new one works.
        tokens.write_text("third-token\n")
        bump = time.time() + 5
        os.utime(tokens, (bump, bump))
        old = http.get("/v1/openapi.json", headers={"Authorization": "Bearer first-token"})
        assert old.status_code == 401
        new = http.get("/v1/openapi.json", headers={"Authorization": "Bearer third-token"})
        assert new.status_code == 200


@pytest.mark.parametrize("text,reason", [(None, "No such file"), ("# nothing\n", "no token")])
def test_unusable_token_file_fails_startup(tmp_path, text, reason):
    tokens = tmp_path / "tokens"
    if text is not None:
        tokens.write_text(text)
    cluster = EmbeddedCluster(admin=True, config={"admin.auth.token.file": str(tokens)})
    with pytest.raises(InvalidConfigError, match=reason) as err:
        cluster.start()
    assert err.value.key == "admin.auth.token.file"


def test_ready_is_503_while_the_node_catches_up(tmp_path):
    config = {"kcore.testing.metadata.replay.delay.ms": "1500"}
    with EmbeddedCluster(admin=True, config=config, data_dir=tmp_path) as cluster:
        cluster.create_topic("t")
        cluster.stop()
        starter = threading.Thread(target=cluster.start, name="restart")
        starter.start()
        seen = set()
        try:
            deadline = time.monotonic() + 60
            while starter.is_alive() and time.monotonic() < deadline:
                try:
                    answer = httpx.get(f"{cluster.admin_url}/health/ready", timeout=5)
                except httpx.TransportError:
                    time.sleep(0.01)
                    continue
                seen.add((answer.status_code, answer.json().get("reason")))
                time.sleep(0.01)
        finally:
            starter.join(60)
        assert (503, "catching up with the metadata log") in seen
        assert httpx.get(f"{cluster.admin_url}/health/ready").status_code == 200


def test_stalled_http_clients_do_not_hold_up_shutdown():
    cluster = EmbeddedCluster(admin=True)
    cluster.start()
    host, port = cluster.admin_url.removeprefix("http://").split(":")
    stalled = []
    try:
        for _ in range(20):  # a request head that never ends, and idle keep-alive sockets
            s = socket.create_connection((host, int(port)))
            s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
            stalled.append(s)
        with httpx.Client(base_url=cluster.admin_url) as http:
            assert http.get("/health/live").status_code == 200  # served beside them
        stopper = threading.Thread(target=cluster.stop)
        stopper.start()
        stopper.join(30)
        assert not stopper.is_alive(), "the broker's stop waited on its HTTP clients"
    finally:
        for s in stalled:
            s.close()
