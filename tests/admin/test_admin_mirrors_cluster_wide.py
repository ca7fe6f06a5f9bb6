"""``GET /v1/mirrors/{mirror}`` on a destination of three brokers: any node's endpoint answers
for the whole cluster (each partition's numbers from its leader, as ``kcore cluster-mirrors
--describe`` merges them), and a broker that does not answer leaves its partitions at -1 with
a note, the rest of the answer served."""

from __future__ import annotations

import httpx
import pytest

from kcore.testing import EmbeddedCluster

from .mirror_http import CONFIG, finished, produce, wait_for

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6


def _partitions(url: str, mirror: str) -> dict[int, dict]:
    answer = httpx.get(f"{url}/v1/mirrors/{mirror}", timeout=60)
    assert answer.status_code == 200, answer.text
    [topic] = answer.json()["topics"]
    return {p["partition"]: p for p in topic["partitions"]}


def _leaders(url: str, topic: str) -> dict[int, int]:
    body = httpx.get(f"{url}/v1/topics/{topic}", timeout=60).json()
    return {p["partition"]: p["leader"] for p in body["partitions"]}


def test_any_node_describes_every_partition_and_a_silent_leader_is_noted():
    with (
        EmbeddedCluster(config=CONFIG) as source,
        # One __mirror_state partition: the mirror's coordinator is its leader, kept running.
        EmbeddedCluster(
            brokers=3, config={**CONFIG, "mirror.state.topic.num.partitions": "1"}, admin=True
        ) as destination,
    ):
        source.create_topic("spread", PARTITIONS)
        produce(source.bootstrap_servers, "spread", 60, partitions=PARTITIONS)
        url = destination.admin_urls[0]
        created = httpx.post(
            f"{url}/v1/mirrors",
            json={"name": "wide", "bootstrap_servers": source.bootstrap_servers},
            timeout=60,
        )
        assert created.status_code == 201, created.text
        with httpx.Client(base_url=url, timeout=60) as http:
            finished(http, http.post("/v1/mirrors/wide/start", json={"topics": ["spread"]}))

        def in_sync_everywhere():
            seen = [_partitions(u, "wide") for u in destination.admin_urls]
            ok = all(
                len(s) == PARTITIONS
                and all(p["state"] == "MIRRORING" and p["lag"] == 0 for p in s.values())
                for s in seen
            )
            return seen if ok else None

        # Every node's endpoint, not only each partition's leader's, knows every lag.
        seen = wait_for(in_sync_everywhere, "every partition in sync on every node")
        leaders = _leaders(url, "spread")
        assert set(leaders.values()) == {1, 2, 3}  # the numbers come from three brokers
        for answer in seen:
            for index, p in answer.items():
                assert p["source_high_watermark"] == p["destination_log_end_offset"] == 10
                assert p["last_fetch_age_ms"] >= 0 and p["note"] is None, (index, p)

        # A leader that dies (not node 1, the controller, nor the mirror's coordinator).
        [coordinator] = _leaders(url, "__mirror_state").values()
        victim = max({2, 3} - {coordinator})
        destination.stop_node(victim, graceful=False)
        led_by_victim = {i for i, leader in leaders.items() if leader == victim}
        alive = [u for n, u in enumerate(destination.admin_urls, 1) if n != victim]
        for node_url in alive:
            answer = _partitions(node_url, "wide")
            assert len(answer) == PARTITIONS
            for index, p in answer.items():
                if index in led_by_victim:
                    # Unreachable (or, once fenced, no leader): unknown, and said why.
                    assert p["lag"] == -1 and p["destination_log_end_offset"] == -1
                    assert f"broker {victim}" in p["note"] or "no leader" in p["note"], p
                else:
                    assert p["lag"] == 0 and p["destination_log_end_offset"] == 10, p
                    assert p["note"] is None
        # The topic's offsets and the group list: the silent broker's share is marked too.
        for node_url in alive:
            topic = httpx.get(f"{node_url}/v1/topics/spread", timeout=60).json()
            for p in topic["partitions"]:
                if p["partition"] in led_by_victim:
                    assert p["log_end_offset"] is None and p["offsets_error"] is not None, p
                else:
                    assert p["log_end_offset"] == 10 and p["offsets_error"] is None, p
            # Named while it is registered unfenced; once fenced it is no longer asked.
            notes = httpx.get(f"{node_url}/v1/groups", timeout=60).json()["notes"]
            if not any(f"broker {victim}" in note for note in notes):
                brokers = httpx.get(f"{node_url}/v1/brokers", timeout=60).json()["brokers"]
                assert [b["fenced"] for b in brokers if b["id"] == victim] == [True], notes
