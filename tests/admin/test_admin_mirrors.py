"""``/v1/mirrors`` against two real clusters: a mirror created, started, paused, resumed,
stopped (also after waiting for sync) and deleted over HTTP alone, its data read on the
destination with a real client; the errors (404, 409, 400) and the bearer tokens."""

from __future__ import annotations

import httpx
import pytest

from kcore.testing import EmbeddedCluster

from .mirror_http import (
    consume_all,
    finished,
    produce,
    source_and_destination,
    wait_for,
    wait_in_sync,
    wait_states,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def clusters():
    with source_and_destination() as both:
        yield both


@pytest.fixture
def http(clusters):
    with httpx.Client(base_url=clusters[1].admin_url, timeout=60) as client:
        yield client


def _create(http, source, name: str) -> None:
    answer = http.post("/v1/mirrors", json={"name": name, "bootstrap_servers": source})
    assert answer.status_code == 201, answer.text
    assert answer.headers["Location"] == f"/v1/mirrors/{name}"


def test_a_mirror_from_create_to_delete_over_http(clusters, http):
    source, destination = clusters
    source.create_topic("orders", 2)
    produce(source.bootstrap_servers, "orders", 40, partitions=2)

    answer = http.post(
        "/v1/mirrors",
        json={
            "name": "web",
            "bootstrap_servers": source.bootstrap_servers,
            "configs": {"request.timeout.ms": "20000"},
        },
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["mirror"] == "web"
    listed = http.get("/v1/mirrors").json()["mirrors"]
    (web,) = [x for x in listed if x["mirror"] == "web"]
    assert web["source_bootstrap_servers"] == source.bootstrap_servers
    assert web["source_cluster_id"]  # recorded from the source at creation (D-24)

    started = finished(http, http.post("/v1/mirrors/web/start", json={"topics": ["orders"]}))
    assert started["status"] == "done" and started["action"] == "start"
    assert started["topics"] == [
        {"topic": "orders", "error": None, "error_code": 0, "message": None}
    ]
    seen = wait_in_sync(http, "web", 2)
    assert sum(p["destination_log_end_offset"] for p in seen.values()) == 40
    assert all(p["source_high_watermark"] == p["destination_log_end_offset"] for p in seen.values())

    paused = finished(http, http.post("/v1/mirrors/web/pause", json={"include": ["ord.*"]}))
    assert [t["topic"] for t in paused["topics"]] == ["orders"]
    wait_states(http, "web", "PAUSED", 2)
    finished(http, http.post("/v1/mirrors/web/resume", json={"topics": ["orders"]}))
    produce(source.bootstrap_servers, "orders", 20, partitions=2, start=40)
    wait_in_sync(http, "web", 2)

    stopped = finished(http, http.post("/v1/mirrors/web/stop", json={"include": ["orders"]}))
    assert stopped["status"] == "done" and stopped["topics"][0]["topic"] == "orders"
    wait_states(http, "web", "STOPPED", 2)
    values = consume_all(destination.bootstrap_servers, "orders", 2)
    assert sorted(values) == sorted(f"record-{i}".encode() for i in range(60))

    assert http.delete("/v1/mirrors/web").status_code == 204
    gone = http.get("/v1/mirrors/web")
    assert gone.status_code == 404 and gone.json()["error"] == "MIRROR_NOT_FOUND"


def test_stop_waits_for_sync_in_an_operation_polled_at_its_location(clusters, http):
    source, _ = clusters
    source.create_topic("payments", 1)
    produce(source.bootstrap_servers, "payments", 10, partitions=1)
    _create(http, source.bootstrap_servers, "planned")
    finished(http, http.post("/v1/mirrors/planned/start", json={"topics": ["payments"]}))
    wait_states(http, "planned", "MIRRORING", 1)

    answer = http.post(
        "/v1/mirrors/planned/stop", json={"topics": ["payments"], "wait_for_sync_ms": 60000}
    )
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    assert location == f"/v1/mirrors/planned/operations/{answer.json()['id']}"
    assert answer.json()["status"] == "running"
    doc = finished(http, answer)
    assert doc["status"] == "done" and doc["warning"] is None, doc
    assert doc["finished_ms"] >= doc["started_ms"]
    wait_states(http, "planned", "STOPPED", 1)
    values = consume_all(clusters[1].bootstrap_servers, "payments", 1)
    assert values == [f"record-{i}".encode() for i in range(10)]  # all of it, before the stop
    listed = http.get("/v1/mirrors/planned/operations").json()["operations"]
    assert [op["action"] for op in listed] == ["start", "stop"]
    # Asked to answer at once, any operation answers 202 and runs on.
    later = http.post(
        "/v1/mirrors/planned/stop", json={"topics": ["payments"]},
        headers={"Prefer": "respond-async"},
    )  # fmt: skip
    assert later.status_code == 202
    assert finished(http, later)["status"] == "done"  # stopping a stopped topic succeeds
    missing = http.get("/v1/mirrors/planned/operations/0123")
    assert missing.status_code == 404 and missing.json()["error"] == "NOT_FOUND"


def test_errors_are_json_with_the_kafka_error(clusters, http):
    source, _ = clusters
    source.create_topic("refunds", 1)
    _create(http, source.bootstrap_servers, "errs")
    duplicate = http.post(
        "/v1/mirrors", json={"name": "errs", "bootstrap_servers": source.bootstrap_servers}
    )
    assert duplicate.status_code == 409
    assert duplicate.json()["error"] == "MIRROR_ALREADY_EXISTS"
    assert duplicate.json()["error_code"] > 0

    for method, path in (
        ("GET", "/v1/mirrors/nope"),
        ("DELETE", "/v1/mirrors/nope"),
        ("POST", "/v1/mirrors/nope/pause"),
        ("POST", "/v1/mirrors/nope/start"),
        ("POST", "/v1/mirrors/nope/stop"),
    ):
        answer = http.request(method, path, json={"topics": ["refunds"]})
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"] == "MIRROR_NOT_FOUND", path

    bad_bodies = [
        ("/v1/mirrors", {"name": "x", "bootstrap_servers": "h:1", "color": "red"}, "color"),
        ("/v1/mirrors", {"name": "x"}, "bootstrap_servers"),
        (
            "/v1/mirrors",
            {"name": "x", "bootstrap_servers": "h:1", "configs": {"a": 1}},
            "configs.a",
        ),
        (
            "/v1/mirrors",
            {"name": "x", "bootstrap_servers": "h:1", "configs": {"bootstrap.servers": "h"}},
            "bootstrap_servers",
        ),
        ("/v1/mirrors/errs/start", {"topics": "refunds"}, "topics"),
        ("/v1/mirrors/errs/start", {}, "name topics or give include patterns"),
        ("/v1/mirrors/errs/start", {"include": ["("]}, "not a valid regular expression"),
        ("/v1/mirrors/errs/pause", {"topics": ["refunds"], "exclude": ["x"]}, "exclude"),
        ("/v1/mirrors/errs/stop", {"topics": ["refunds"], "wait_for_sync_ms": -1}, "wait_for"),
    ]
    for path, body, named in bad_bodies:
        answer = http.post(path, json=body)
        assert answer.status_code == 400, (path, body, answer.text)
        assert answer.json()["error"] == "INVALID_REQUEST"
        assert named in answer.json()["message"], answer.json()
    not_json = http.post("/v1/mirrors", content=b"{", headers={"Content-Type": "text/plain"})
    assert not_json.status_code == 400

    # Wrong partition states refuse the whole request (D-26): 409 naming them.
    finished(http, http.post("/v1/mirrors/errs/start", json={"topics": ["refunds"]}))
    wait_states(http, "errs", "MIRRORING", 1)
    busy = http.delete("/v1/mirrors/errs")
    assert busy.status_code == 409 and busy.json()["error"] == "MIRROR_NOT_EMPTY"
    finished(http, http.post("/v1/mirrors/errs/stop", json={"topics": ["refunds"]}))
    wait_states(http, "errs", "STOPPED", 1)
    for action in ("pause", "resume"):
        refused = http.post(f"/v1/mirrors/errs/{action}", json={"topics": ["refunds"]})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "INVALID_MIRROR_STATE"
        assert "refunds-0 is STOPPED" in refused.json()["message"]
    unmatched = http.post("/v1/mirrors/errs/pause", json={"include": ["nothing-.*"]})
    assert unmatched.status_code == 404
    # A topic the source does not have is refused alone, in the result.
    partial = finished(http, http.post("/v1/mirrors/errs/start", json={"topics": ["ghost"]}))
    assert partial["status"] == "done"
    assert partial["topics"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert "ghost" in partial["topics"][0]["message"]
    assert http.delete("/v1/mirrors/errs").status_code == 204


def test_openapi_documents_every_mirror_endpoint(http):
    doc = http.get("/v1/openapi.json").json()
    paths = doc["paths"]
    for path, methods in {
        "/v1/mirrors": {"get", "post"},
        "/v1/mirrors/{mirror}": {"get", "delete"},
        "/v1/mirrors/{mirror}/start": {"post"},
        "/v1/mirrors/{mirror}/stop": {"post"},
        "/v1/mirrors/{mirror}/pause": {"post"},
        "/v1/mirrors/{mirror}/resume": {"post"},
        "/v1/mirrors/{mirror}/operations/{op_id}": {"get"},
    }.items():
        assert methods <= set(paths[path]), path
    stop = paths["/v1/mirrors/{mirror}/stop"]["post"]
    assert {"200", "202", "400", "401", "404", "409"} <= set(stop["responses"])
    error = stop["responses"]["409"]["content"]["application/json"]["schema"]
    assert set(error["properties"]) == {"error", "message", "error_code"}
    assert "requestBody" in stop
    assert {"PartitionStatus", "OperationStatus"} <= set(doc["components"]["schemas"])


def test_bearer_tokens_guard_the_mirror_api(tmp_path, clusters):
    source, _ = clusters
    tokens = tmp_path / "tokens"
    tokens.write_text("User:ops s3cret\n")
    with (
        EmbeddedCluster(admin=True, config={"admin.auth.token.file": str(tokens)}) as secured,
        httpx.Client(base_url=secured.admin_url, timeout=60) as http,
    ):
        body = {"name": "guarded", "bootstrap_servers": source.bootstrap_servers}
        for method, path in (("GET", "/v1/mirrors"), ("POST", "/v1/mirrors")):
            refused = http.request(method, path, json=body)
            assert refused.status_code == 401 and refused.json()["error"] == "UNAUTHENTICATED"
        auth = {"Authorization": "Bearer s3cret"}
        assert http.post("/v1/mirrors", json=body, headers=auth).status_code == 201
        listed = http.get("/v1/mirrors", headers=auth)
        assert [x["mirror"] for x in listed.json()["mirrors"]] == ["guarded"]
        described = wait_for(
            lambda: (r := http.get("/v1/mirrors/guarded", headers=auth)).status_code == 200 and r,
            "describe",
        )
        assert described.json()["topics"] == []
        assert http.get("/v1/mirrors/guarded").status_code == 401


def test_a_refused_request_with_a_body_leaves_its_connection_usable(http):
    # Answered before the body is read (no route, no such method): the next request on the same
    # keep-alive connection is answered too (it used to hang in Hypercorn).
    for method, path in (("POST", "/v1/nothing"), ("PUT", "/v1/mirrors"), ("POST", "/health/live")):
        assert http.request(method, path, json={"a": 1}).status_code in (404, 405)
        assert http.get("/health/live").status_code == 200
