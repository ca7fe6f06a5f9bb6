"""The /v1 REST API of the cluster, brokers, topics, configs and groups against a running
broker over real sockets (httpx), with real Kafka clients producing and consuming beside it;
confluent-kafka's AdminClient and the REST API see one cluster: a topic made over HTTP is
listed and described by the AdminClient with the same partitions and configs, one made by the
AdminClient is described over HTTP the same way, and a config changed on one side reads back
on the other."""

from __future__ import annotations

import base64
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

import kcore
from kcore.metadata.context import uuid_text
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30  # confluent-kafka's request timeouts


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(admin=True) as cluster:
        yield cluster


@pytest.fixture
def http(cluster):
    with httpx.Client(base_url=cluster.admin_url, timeout=60) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(cluster, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def test_cluster_names_the_cluster_its_controller_and_kcores_version(cluster, http):
    answer = http.get("/v1/cluster")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["cluster_id"] == cluster.broker.cluster_id
    assert body["active_controller_id"] == 1
    assert body["controller_id"] == 1
    assert body["version"] == kcore.__version__
    assert body["broker_count"] == 1 and body["fenced_broker_count"] == 0
    image = cluster.broker.metadata_image
    assert body["finalized_features"] == dict(image.features.finalized)
    assert body["finalized_features"]["metadata.version"] > 0
    assert body["finalized_features_epoch"] >= 0


def test_brokers_lists_each_with_its_client_address(cluster, http):
    body = http.get("/v1/brokers").json()
    assert body == {
        "brokers": [
            {
                "id": 1,
                "host": "127.0.0.1",
                "port": cluster.port,
                "rack": None,
                "fenced": False,
                "is_controller": True,
                "is_voter": True,
            }
        ]
    }


def test_topic_created_listed_described_and_deleted(cluster, http):
    name = unique("orders")
    created = http.post(
        "/v1/topics", json={"name": name, "partitions": 3, "configs": {"retention.ms": "3600000"}}
    )
    assert created.status_code == 201, created.text
    assert created.headers["Location"] == f"/v1/topics/{name}"
    body = created.json()
    assert (body["name"], body["partitions"], body["replication_factor"]) == (name, 3, 1)
    assert body["configs"]["retention.ms"] == "3600000"
    assert body["validate_only"] is False
    topic_id = body["topic_id"]
    assert topic_id == uuid_text(cluster.broker.metadata_image.topics.by_name[name].topic_id)

    listed = {t["name"]: t for t in http.get("/v1/topics").json()["topics"]}
    assert listed[name] == {
        "name": name,
        "topic_id": topic_id,
        "partitions": 3,
        "replication_factor": 1,
        "internal": False,
        "mirror": None,
        "mirror_mode": None,
    }

    produce(cluster, name, 5, partition=1)
    described = http.get(f"/v1/topics/{name}")
    assert described.status_code == 200, described.text
    body = described.json()
    assert (body["name"], body["topic_id"], body["internal"]) == (name, topic_id, False)
    assert [p["partition"] for p in body["partitions"]] == [0, 1, 2]
    one = body["partitions"][1]
    assert (one["leader"], one["replicas"], one["isr"], one["offline_replicas"]) == (
        1,
        [1],
        [1],
        [],
    )
    assert one["leader_epoch"] >= 0
    assert (one["log_start_offset"], one["log_end_offset"]) == (0, 5)
    assert (one["high_watermark"], one["last_stable_offset"]) == (5, 5)
    assert one["offsets_error"] is None
    assert body["partitions"][0]["log_end_offset"] == 0

    deleted = http.delete(f"/v1/topics/{name}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"name": name, "topic_id": topic_id}
    gone = http.get(f"/v1/topics/{name}")
    assert gone.status_code == 404
    assert gone.json()["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert gone.json()["error_code"] == 3
    assert name not in {t["name"] for t in http.get("/v1/topics").json()["topics"]}


def test_an_open_transaction_holds_the_last_stable_offset_back(cluster, http):
    name = unique("txn")
    assert http.post("/v1/topics", json={"name": name}).status_code == 201
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": unique("tid")}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(name, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    [open_] = http.get(f"/v1/topics/{name}").json()["partitions"]
    assert (open_["high_watermark"], open_["last_stable_offset"]) == (3, 0)
    producer.commit_transaction(60)
    [done] = http.get(f"/v1/topics/{name}").json()["partitions"]
    assert done["high_watermark"] == done["last_stable_offset"] == done["log_end_offset"] == 4


def test_internal_topics_are_flagged(http):
    # A group's look-up (FindCoordinator) creates __consumer_offsets, as for any client.
    http.get(f"/v1/groups/{unique('g')}")
    deadline = time.monotonic() + 60
    topics: dict = {}
    while "__consumer_offsets" not in topics and time.monotonic() < deadline:
        topics = {t["name"]: t for t in http.get("/v1/topics").json()["topics"]}
        time.sleep(0.1)
    assert topics["__consumer_offsets"]["internal"] is True


def test_create_validate_only_creates_nothing(http):
    name = unique("dry")
    answer = http.post("/v1/topics", json={"name": name, "partitions": 2, "validate_only": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["validate_only"] is True and answer.json()["topic_id"] is None
    assert answer.json()["partitions"] == 2
    assert http.get(f"/v1/topics/{name}").status_code == 404


@pytest.mark.parametrize(
    "body,status,error",
    [
        ({"name": "bad/name"}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": "x" * 300}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": "ok-name", "partitions": 0}, 400, "INVALID_PARTITIONS"),
        ({"name": "ok-name", "replication_factor": 3}, 400, "INVALID_REPLICATION_FACTOR"),
        ({"name": "ok-name", "configs": {"retention.ms": "soon"}}, 400, "INVALID_CONFIG"),
        ({"name": "ok-name", "configs": {"no.such.config": "1"}}, 400, "INVALID_CONFIG"),
    ],
)
def test_create_refusals_are_kafkas(http, body, status, error):
    answer = http.post("/v1/topics", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error
    assert answer.json()["error_code"] > 0 and answer.json()["message"]


def test_create_existing_topic_is_409(cluster, http):
    name = unique("twice")
    assert http.post("/v1/topics", json={"name": name}).status_code == 201
    again = http.post("/v1/topics", json={"name": name})
    assert again.status_code == 409
    assert again.json()["error"] == "TOPIC_ALREADY_EXISTS"


@pytest.mark.parametrize(
    "body,where",
    [
        ({"name": "t", "partitions": "3"}, "partitions"),
        ({"name": 7}, "name"),
        ({"name": "t", "colour": "red"}, "colour"),
        ({"partitions": 1}, "name"),
        ({"name": "t", "configs": {"retention.ms": 1000}}, "configs.retention.ms"),
        ({"name": "t", "validate_only": "yes"}, "validate_only"),
        ([{"name": "t"}], "body"),
    ],
)
def test_bodies_that_do_not_match_the_schema_are_400_naming_the_field(http, body, where):
    answer = http.post("/v1/topics", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "INVALID_REQUEST"
    assert answer.json()["message"].startswith(where) or where in answer.json()["message"]


def test_malformed_json_is_400_saying_so(http):
    answer = http.post(
        "/v1/topics", content=b'{"name": "t",', headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "INVALID_JSON"
    assert "not valid JSON" in answer.json()["message"]


def test_unknown_topic_is_404_everywhere(http):
    name = unique("missing")
    for answer in (
        http.get(f"/v1/topics/{name}"),
        http.delete(f"/v1/topics/{name}"),
        http.get(f"/v1/topics/{name}/configs"),
        http.patch(f"/v1/topics/{name}/configs", json={"set": {"retention.ms": "1"}}),
    ):
        assert answer.status_code == 404, (answer.request.method, answer.text)
        assert answer.json()["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("name", ["a/b", "x" * 300, "caf\u00e9", "\u65e5\u672c", "..", "%00"])
def test_odd_topic_names_in_the_path_are_json_errors(http, name):
    for path in (f"/v1/topics/{name}", f"/v1/topics/{name}/configs"):
        answer = http.get(path)
        assert answer.status_code in (400, 404), (path, answer.text)
        assert answer.json()["error"] in ("NOT_FOUND", "UNKNOWN_TOPIC_OR_PARTITION")


def test_topic_configs_described_with_source_and_patched(cluster, http):
    name = unique("conf")
    created = http.post("/v1/topics", json={"name": name, "configs": {"cleanup.policy": "compact"}})
    assert created.status_code == 201
    answer = http.get(f"/v1/topics/{name}/configs")
    assert answer.status_code == 200, answer.text
    configs = answer.json()["configs"]
    assert configs["cleanup.policy"] == {
        "value": "compact",
        "source": "DYNAMIC_TOPIC_CONFIG",
        "is_sensitive": False,
        "read_only": False,
    }
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"

    patched = http.patch(
        f"/v1/topics/{name}/configs",
        json={"set": {"retention.ms": "1000"}, "delete": ["cleanup.policy"]},
    )
    assert patched.status_code == 200, patched.text
    after = patched.json()["configs"]
    assert after["retention.ms"]["value"] == "1000"
    assert after["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert after["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    assert after["cleanup.policy"]["value"] == "delete"
    assert http.get(f"/v1/topics/{name}/configs").json()["configs"] == after

    dry = http.patch(
        f"/v1/topics/{name}/configs",
        json={"set": {"retention.ms": "5"}, "validate_only": True},
    )
    assert dry.status_code == 200 and dry.json()["validate_only"] is True
    assert dry.json()["configs"]["retention.ms"]["value"] == "1000"

    bad = http.patch(f"/v1/topics/{name}/configs", json={"set": {"retention.ms": "x"}})
    assert bad.status_code == 400 and bad.json()["error"] == "INVALID_CONFIG"
    assert http.get(f"/v1/topics/{name}/configs").json()["configs"]["retention.ms"]["value"] == (
        "1000"
    )
    unknown = http.patch(f"/v1/topics/{name}/configs", json={"sett": {"retention.ms": "1"}})
    assert unknown.status_code == 400 and "sett" in unknown.json()["message"]


def test_groups_listed_and_described_with_members_offsets_and_lag(cluster, http):
    topic, group = unique("work"), unique("workers")
    assert http.post("/v1/topics", json={"name": topic, "partitions": 2}).status_code == 201
    produce(cluster, topic, 7, partition=0)
    produce(cluster, topic, 4, partition=1)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "client.id": "lag-checker",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 3 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error() and message.partition() == 0:
                seen += 1
                if seen == 3:
                    consumer.commit(message=message, asynchronous=False)  # offset 3 of 7
        assert seen == 3
        listed = {g["group_id"]: g for g in http.get("/v1/groups").json()["groups"]}
        assert listed[group] == {
            "group_id": group,
            "type": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
        }
        answer = http.get(f"/v1/groups/{group}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["group_id"], body["state"], body["protocol_type"]) == (
            group,
            "Stable",
            "consumer",
        )
        assert body["protocol"] in ("range", "roundrobin", "cooperative-sticky")
        assert body["coordinator"] == 1
        [member] = body["members"]
        assert member["client_id"] == "lag-checker"
        assert member["client_host"]
        assert member["assignment"] == {topic: [0, 1]}
        committed, assigned = body["offsets"]  # partition 1: assigned, nothing committed
        assert committed == {
            "topic": topic,
            "partition": 0,
            "committed_offset": 3,
            "committed_leader_epoch": committed["committed_leader_epoch"],
            "metadata": committed["metadata"],
            "log_end_offset": 7,
            "lag": 4,
            "member_id": member["member_id"],
            "error": None,
        }
        assert (assigned["topic"], assigned["partition"], assigned["committed_offset"]) == (
            topic,
            1,
            -1,
        )
        assert (assigned["log_end_offset"], assigned["lag"]) == (4, None)
        assert assigned["member_id"] == member["member_id"]
    finally:
        consumer.close()
    after = http.get(f"/v1/groups/{group}").json()
    assert after["state"] == "Empty" and after["members"] == []
    [left] = after["offsets"]  # only what was committed, once no one is assigned anything
    assert (left["partition"], left["lag"], left["member_id"]) == (0, 4, None)


def test_unknown_group_is_404(http):
    for group in (unique("nobody"), f"team/{unique('nobody')}"):  # a group id may hold a "/"
        answer = http.get(f"/v1/groups/{group}")
        assert answer.status_code == 404
        assert answer.json()["error"] == "GROUP_ID_NOT_FOUND"
        assert group in answer.json()["message"]


def test_openapi_document_covers_every_endpoint_with_its_schemas(http):
    doc = http.get("/v1/openapi.json").json()
    paths = doc["paths"]
    expected = {
        "/v1/cluster": {"get"},
        "/v1/brokers": {"get"},
        "/v1/topics": {"get", "post"},
        "/v1/topics/{topic}": {"get", "delete"},
        "/v1/topics/{topic}/configs": {"get", "patch"},
        "/v1/groups": {"get"},
        "/v1/groups/{group}": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
        for method in methods:
            responses = paths[path][method]["responses"]
            ok = responses.get("200") or responses.get("201")
            assert ok["content"]["application/json"]["schema"], (path, method)
            assert "401" in responses or "400" in responses, (path, method)
    for path, method, title in (
        ("/v1/topics", "post", "NewTopic"),
        ("/v1/topics/{topic}/configs", "patch", "ConfigChanges"),
    ):
        schema = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        assert schema["title"] == title and schema["additionalProperties"] is False
    described = paths["/v1/topics/{topic}"]["get"]["responses"]["200"]["content"]
    assert described["application/json"]["schema"]["title"] == "TopicDescription"
    assert "PartitionInfo" in doc["components"]["schemas"]


# -- confluent-kafka's AdminClient sees what the REST API made, and the other way round ----


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
