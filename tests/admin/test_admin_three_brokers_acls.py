"""Groups answered for the whole cluster keep the caller's authorization: on three brokers with
an authorizer, a token whose principal may describe some groups and one of two topics lists
and describes exactly those groups from any node, whichever node coordinates them, and sees
committed offsets of that topic only -- what it would see asking each broker over Kafka."""

from __future__ import annotations

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AclOperation, ResourceType

from kcore.testing import EmbeddedCluster

from .test_admin_auth import authorized_config, eventually, grant

pytestmark = pytest.mark.timeout(240)

OPS = "ops-token"
GROUPS = [f"readers-{i}" for i in range(12)]
VISIBLE = GROUPS[:8]  # on one coordinator all: a chance of 1 in 2,187


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # ANONYMOUS: the test's Kafka clients, and the brokers asking each other.
    config = authorized_config(tmp_path_factory, f"User:ops {OPS}\n", "User:ANONYMOUS")
    with EmbeddedCluster(brokers=3, admin=True, config=config) as cluster:
        yield cluster


def test_groups_from_any_node_are_the_ones_the_caller_may_describe(cluster):
    for topic in ("seen", "hidden"):
        cluster.create_topic(topic, partitions=2)
    for group in GROUPS:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
        try:
            tps = [TopicPartition(t, p, 1) for t in ("seen", "hidden") for p in range(2)]
            consumer.assign(tps)
            consumer.commit(offsets=tps, asynchronous=False)
        finally:
            consumer.close()
    for group in VISIBLE:
        grant(cluster, AclOperation.DESCRIBE, ResourceType.GROUP, group)
    grant(cluster, AclOperation.DESCRIBE, ResourceType.TOPIC, "seen")
    coordinators = set()
    for url in cluster.admin_urls:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {OPS}"}, timeout=60
        ) as ops:

            def listed():
                body = ops.get("/v1/groups").json()
                names = {g["group_id"] for g in body["groups"]}
                return names if names == set(VISIBLE) else None

            assert eventually(listed), ops.get("/v1/groups").json()  # ACLs reach every image
            for group in VISIBLE:
                answer = ops.get(f"/v1/groups/{group}")
                assert answer.status_code == 200, answer.text
                body = answer.json()
                coordinators.add(body["coordinator"])
                assert {(o["topic"], o["partition"]) for o in body["offsets"]} == {
                    ("seen", 0),
                    ("seen", 1),
                }
            for group in GROUPS[8:]:
                answer = ops.get(f"/v1/groups/{group}")
                assert answer.status_code == 403, answer.text
                assert answer.json()["error"] == "GROUP_AUTHORIZATION_FAILED"
    assert len(coordinators) > 1  # groups of other coordinators were described too
