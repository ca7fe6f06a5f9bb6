"""The /v1 API on a cluster of three brokers: every broker listed from any node's endpoint,
partitions led elsewhere described from the metadata with their offsets left to their
leader, and a group's description on the node that coordinates it."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import Producer

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(brokers=3, admin=True) as cluster:
        yield cluster


def test_every_node_lists_the_three_brokers_and_the_one_active_controller(cluster):
    for url in cluster.admin_urls:
        body = httpx.get(f"{url}/v1/brokers", timeout=60).json()
        brokers = {b["id"]: b for b in body["brokers"]}
        assert sorted(brokers) == [1, 2, 3]
        assert [b["port"] for _, b in sorted(brokers.items())] == cluster.ports
        assert [b["is_controller"] for _, b in sorted(brokers.items())] == [True, False, False]
        assert [b["is_voter"] for _, b in sorted(brokers.items())] == [True, False, False]
        info = httpx.get(f"{url}/v1/cluster", timeout=60).json()
        assert info["broker_count"] == 3 and info["active_controller_id"] == 1


def test_partitions_led_elsewhere_have_their_offsets_left_to_the_leader(cluster):
    url = cluster.admin_urls[1]  # node 2
    created = httpx.post(
        f"{url}/v1/topics",
        json={"name": "spread", "partitions": 6, "replication_factor": 1},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(6):
        for _ in range(p + 1):
            producer.produce("spread", value=b"x", partition=p)
    assert producer.flush(60) == 0
    leaders = {}
    for node, url in enumerate(cluster.admin_urls, 1):
        body = httpx.get(f"{url}/v1/topics/spread", timeout=60).json()
        for p in body["partitions"]:
            leaders.setdefault(p["partition"], p["leader"])
            assert p["leader"] == leaders[p["partition"]]  # the same metadata on every node
            if p["leader"] == node:
                assert p["log_end_offset"] == p["high_watermark"] == p["partition"] + 1
                assert p["offsets_error"] is None
            else:
                assert p["log_end_offset"] is None and p["high_watermark"] is None
                # Kafka's answers: a replica that does not lead, a broker that hosts none.
                assert p["offsets_error"] in (
                    "NOT_LEADER_OR_FOLLOWER",
                    "UNKNOWN_TOPIC_OR_PARTITION",
                )
    assert set(leaders.values()) == {1, 2, 3}  # spread over the three brokers


def test_a_group_is_described_by_its_coordinator_and_elsewhere_is_421(cluster):
    group = "spread-readers"
    answers = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # __consumer_offsets is created by the first look-up
        answers = {
            node: httpx.get(f"{url}/v1/groups/{group}", timeout=60)
            for node, url in enumerate(cluster.admin_urls, 1)
        }
        if any(a.status_code == 421 for a in answers.values()):
            break
        time.sleep(0.2)
    misdirected = {n: a.json() for n, a in answers.items() if a.status_code == 421}
    answered = {n: a for n, a in answers.items() if a.status_code != 421}
    assert len(answered) == 1, answers
    [(coordinator, answer)] = answered.items()
    assert answer.status_code == 404 and answer.json()["error"] == "GROUP_ID_NOT_FOUND"
    for body in misdirected.values():
        assert body["error"] == "NOT_COORDINATOR" and body["error_code"] == 16
        assert f"coordinated by broker {coordinator}" in body["message"]
