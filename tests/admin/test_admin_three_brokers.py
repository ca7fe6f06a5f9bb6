"""The /v1 API on a cluster of three brokers: any node's endpoint answers for the whole
cluster -- every broker listed, every partition's offsets asked of its leader, every group
listed and described whichever node coordinates it -- and a broker that does not answer
leaves what it holds marked, the rest served."""

from __future__ import annotations

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

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


def test_every_node_answers_every_partitions_offsets_from_its_leader(cluster):
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
    for url in cluster.admin_urls:
        body = httpx.get(f"{url}/v1/topics/spread", timeout=60).json()
        for p in body["partitions"]:
            leaders.setdefault(p["partition"], p["leader"])
            assert p["leader"] == leaders[p["partition"]]  # the same metadata on every node
            n = p["partition"] + 1
            assert (p["log_start_offset"], p["log_end_offset"]) == (0, n), p
            assert p["high_watermark"] == p["last_stable_offset"] == n
            assert p["offsets_error"] is None
    assert set(leaders.values()) == {1, 2, 3}  # spread over the three brokers


def _commit(cluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for ``group`` as a consumer that assigned itself the partitions."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        consumer.assign(tps)
        consumer.commit(offsets=tps, asynchronous=False)
    finally:
        consumer.close()


def test_every_node_lists_and_describes_a_group_coordinated_anywhere(cluster):
    cluster.create_topic("read-me", partitions=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(3):
        for _ in range(4):
            producer.produce("read-me", value=b"x", partition=p)
    assert producer.flush(60) == 0
    # Eight groups: spread over the coordinators (all on one node: a chance of 1 in 2,187).
    groups = [f"readers-{i}" for i in range(8)]
    for group in groups:
        _commit(cluster, group, "read-me", {0: 4, 1: 4, 2: 4})
    coordinators = set()
    for url in cluster.admin_urls:
        listed = httpx.get(f"{url}/v1/groups", timeout=60).json()
        assert listed["notes"] == []
        assert set(groups) <= {g["group_id"] for g in listed["groups"]}
        for group in groups:
            answer = httpx.get(f"{url}/v1/groups/{group}", timeout=60)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            coordinators.add(body["coordinator"])
            assert body["state"] == "Empty"
            offsets = {(o["topic"], o["partition"]): o for o in body["offsets"]}
            assert sorted(offsets) == [("read-me", 0), ("read-me", 1), ("read-me", 2)]
            for o in offsets.values():
                assert (o["committed_offset"], o["log_end_offset"], o["lag"]) == (4, 4, 0), o
    assert len(coordinators) > 1  # groups coordinated by other nodes were described too


def test_a_group_that_does_not_exist_is_404_on_every_node(cluster):
    for url in cluster.admin_urls:
        answer = httpx.get(f"{url}/v1/groups/nobody-reads", timeout=60)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"] == "GROUP_ID_NOT_FOUND"
