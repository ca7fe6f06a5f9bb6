"""The admin API acts as the bearer token's principal through the broker's own authorizer: a
principal with no ACLs is refused over HTTP exactly as over Kafka, an ACL granted over Kafka
(confluent-kafka's AdminClient) lets it in, and a super user may do anything."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
)

from kcore.testing import EmbeddedCluster
from tests.acls import allow_literal

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30
OPS, ADMIN = "ops-token", "admin-token"


def authorized_config(tmp_path_factory, tokens: str, super_users: str) -> dict[str, str]:
    """A broker config with the StandardAuthorizer and an admin token file of ``tokens``."""
    path = tmp_path_factory.mktemp("admin") / "tokens"
    path.write_text(tokens)
    return {
        "authorizer.class.name": "kcore.StandardAuthorizer",
        "super.users": super_users,
        "admin.auth.token.file": str(path),
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Kafka clients of the test (ANONYMOUS) and the admin token may do anything.
    tokens = f"User:ops {OPS}\nUser:admin {ADMIN}\n"
    config = authorized_config(tmp_path_factory, tokens, "User:admin;User:ANONYMOUS")
    with EmbeddedCluster(admin=True, config=config) as cluster:
        yield cluster


def client(cluster, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=cluster.admin_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def grant(cluster, operation, resource_type, name: str, principal="User:ops") -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    allow_literal(admin, resource_type, name, principal, operation, TIMEOUT)


def eventually(check, timeout=60):
    """``check()`` until it is true (an ACL reaches the image after its commit)."""
    deadline = time.monotonic() + timeout
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return result


def test_every_v1_endpoint_needs_a_token(cluster):
    with httpx.Client(base_url=cluster.admin_url, timeout=60) as anonymous:
        for method, path in (
            ("GET", "/v1/cluster"),
            ("GET", "/v1/brokers"),
            ("GET", "/v1/topics"),
            ("POST", "/v1/topics"),
            ("GET", "/v1/topics/t"),
            ("DELETE", "/v1/topics/t"),
            ("GET", "/v1/topics/t/configs"),
            ("PATCH", "/v1/topics/t/configs"),
            ("GET", "/v1/groups"),
            ("GET", "/v1/groups/g"),
        ):
            answer = anonymous.request(method, path, json={})
            assert answer.status_code == 401, (method, path)
            assert answer.json()["error"] == "UNAUTHENTICATED"


def test_a_principal_without_acls_is_refused_as_over_kafka_until_granted(cluster):
    name = f"ops-{uuid.uuid4().hex[:8]}"
    with client(cluster, OPS) as ops, client(cluster, ADMIN) as admin:
        refused = ops.post("/v1/topics", json={"name": name})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "TOPIC_AUTHORIZATION_FAILED"
        assert refused.json()["error_code"] == 29
        assert admin.get(f"/v1/topics/{name}").status_code == 404  # nothing was created

        grant(cluster, AclOperation.CREATE, ResourceType.TOPIC, name)
        created = eventually(lambda: ops.post("/v1/topics", json={"name": name}).status_code == 201)
        assert created
        assert admin.get(f"/v1/topics/{name}").status_code == 200
        # CREATE is not DESCRIBE: the topic is still hidden from ops, and its configs refused.
        assert name not in {t["name"] for t in ops.get("/v1/topics").json()["topics"]}
        hidden = ops.get(f"/v1/topics/{name}")
        assert hidden.status_code == 403 and hidden.json()["error"] == "TOPIC_AUTHORIZATION_FAILED"
        configs = ops.patch(f"/v1/topics/{name}/configs", json={"set": {"retention.ms": "1"}})
        assert configs.status_code == 403
        assert configs.json()["error"] == "TOPIC_AUTHORIZATION_FAILED"
        denied_delete = ops.delete(f"/v1/topics/{name}")
        assert denied_delete.status_code == 403

        grant(cluster, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        assert eventually(lambda: ops.get(f"/v1/topics/{name}").status_code == 200)
        assert name in {t["name"] for t in ops.get("/v1/topics").json()["topics"]}


def test_a_super_user_token_may_do_anything(cluster):
    name = f"admin-{uuid.uuid4().hex[:8]}"
    with client(cluster, ADMIN) as admin:
        assert admin.post("/v1/topics", json={"name": name}).status_code == 201
        patched = admin.patch(f"/v1/topics/{name}/configs", json={"set": {"retention.ms": "9"}})
        assert patched.status_code == 200
        assert admin.get("/v1/cluster").json()["active_controller_id"] == 1
        assert admin.delete(f"/v1/topics/{name}").status_code == 200


def test_cluster_and_group_refusals_are_the_authorizers(cluster):
    with client(cluster, OPS) as ops:
        # DescribeQuorum needs DESCRIBE on the cluster: the page is shown without the leader.
        info = ops.get("/v1/cluster")
        assert info.status_code == 200 and info.json()["active_controller_id"] is None
        assert {b["is_voter"] for b in ops.get("/v1/brokers").json()["brokers"]} == {None}
        group = ops.get("/v1/groups/someone")
        assert group.status_code == 403
        assert group.json()["error"] == "GROUP_AUTHORIZATION_FAILED"
        assert ops.get("/v1/groups").json() == {"groups": [], "notes": []}
        grant(cluster, AclOperation.DESCRIBE, ResourceType.BROKER, "kafka-cluster")
        assert eventually(lambda: ops.get("/v1/cluster").json()["active_controller_id"] == 1)
