"""A mirrored topic over the REST API: listed and described with its mirror and the mode its
``mirror.name`` says (mirroring, then stopped after a failover), its offsets those of the
destination's copy."""

from __future__ import annotations

import httpx
import pytest
from confluent_kafka import Producer

from kcore.testing import EmbeddedCluster, MirroredClusters

pytestmark = pytest.mark.timeout(180)


def test_a_mirrored_topic_names_its_mirror_and_mode():
    dr = MirroredClusters("dr")
    dr.destination = EmbeddedCluster(admin=True)  # the destination with its admin endpoint
    with dr, httpx.Client(base_url=dr.destination.admin_url, timeout=60) as http:
        dr.source.create_topic("orders", partitions=2)
        producer = Producer({"bootstrap.servers": dr.source.bootstrap_servers})
        for i in range(6):
            producer.produce("orders", value=b"%d" % i, partition=i % 2)
        assert producer.flush(60) == 0
        dr.destination.create_topic("local")
        dr.mirror_topics("orders")
        dr.wait_in_sync()

        listed = {t["name"]: t for t in http.get("/v1/topics").json()["topics"]}
        assert (listed["orders"]["mirror"], listed["orders"]["mirror_mode"]) == ("dr", "mirroring")
        assert (listed["local"]["mirror"], listed["local"]["mirror_mode"]) == (None, None)
        described = http.get("/v1/topics/orders").json()
        assert (described["mirror"], described["mirror_mode"]) == ("dr", "mirroring")
        assert [p["log_end_offset"] for p in described["partitions"]] == [3, 3]

        dr.failover("orders")
        described = http.get("/v1/topics/orders").json()
        assert (described["mirror"], described["mirror_mode"]) == ("dr", "stopped")
