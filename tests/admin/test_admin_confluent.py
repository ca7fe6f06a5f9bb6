"""The REST API and confluent-kafka's AdminClient see one cluster: a topic made over HTTP is
listed and described by the AdminClient with the same partitions and configs, and one made
by the AdminClient is described over HTTP the same way; a config changed on one side reads
back on the other."""

from __future__ import annotations

import base64
import uuid

import httpx
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(admin=True) as cluster:
        yield cluster


@pytest.fixture
def http(cluster):
    with httpx.Client(base_url=cluster.admin_url, timeout=60) as client:
        yield client


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def confluent_configs(admin, topic: str) -> dict[str, tuple[str | None, str]]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    return {name: (e.value, e.source) for name, e in entries.items()}


SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}


def assert_same_configs(http, admin, topic: str) -> None:
    ours = http.get(f"/v1/topics/{topic}/configs").json()["configs"]
    theirs = confluent_configs(admin, topic)
    assert set(ours) == set(theirs)
    for name, (value, source) in theirs.items():
        assert ours[name]["value"] == value, name
        assert ours[name]["source"] == SOURCES.get(source, ours[name]["source"]), name


def test_a_topic_made_over_http_is_the_admin_clients(http, admin):
    name = f"rest-{uuid.uuid4().hex[:8]}"
    created = http.post(
        "/v1/topics",
        json={"name": name, "partitions": 4, "configs": {"retention.ms": "7200000"}},
    )
    assert created.status_code == 201, created.text
    listed = admin.list_topics(timeout=TIMEOUT).topics
    assert name in listed
    assert sorted(listed[name].partitions) == [0, 1, 2, 3]
    described = admin.describe_topics(TopicCollection([name]), request_timeout=TIMEOUT)[
        name
    ].result(TIMEOUT)
    # The same id: Kafka's text form (URL-safe base64) over HTTP, standard base64 in confluent.
    ours_id = base64.urlsafe_b64decode(created.json()["topic_id"] + "==")
    assert base64.b64decode(str(described.topic_id) + "==") == ours_id
    ours = http.get(f"/v1/topics/{name}").json()["partitions"]
    assert [
        (p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
        for p in (described.partitions)
    ] == [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in ours]
    assert confluent_configs(admin, name)["retention.ms"] == ("7200000", 1)
    assert_same_configs(http, admin, name)


def test_a_topic_made_by_the_admin_client_is_described_over_http(http, admin):
    name = f"client-{uuid.uuid4().hex[:8]}"
    future = admin.create_topics(
        [NewTopic(name, 3, 1, config={"cleanup.policy": "compact"})], request_timeout=TIMEOUT
    )[name]
    future.result(TIMEOUT)
    listed = {t["name"]: t for t in http.get("/v1/topics").json()["topics"]}
    assert listed[name]["partitions"] == 3 and listed[name]["replication_factor"] == 1
    configs = http.get(f"/v1/topics/{name}/configs").json()["configs"]
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert_same_configs(http, admin, name)

    # Changed over HTTP, read by the client; changed by the client, read over HTTP.
    patched = http.patch(f"/v1/topics/{name}/configs", json={"set": {"segment.ms": "60000"}})
    assert patched.status_code == 200
    assert confluent_configs(admin, name)["segment.ms"] == ("60000", 1)
    resource = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    configs = http.get(f"/v1/topics/{name}/configs").json()["configs"]
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    assert_same_configs(http, admin, name)

    assert http.delete(f"/v1/topics/{name}").status_code == 200
    assert name not in admin.list_topics(timeout=TIMEOUT).topics
