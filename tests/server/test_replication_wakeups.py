"""Replication's wake-ups (issue #17, speed): an acks=all write costs one replication round,
never a fetch timeout.

With ``replica.fetch.wait.max.ms`` at 60 s, a follower's fetch parked at the leader must be
completed by the leader's append (Kafka's ``tryCompleteDelayedFetch`` after ``appendRecords``),
the follower must fetch again at once after appending, and the fetch that reports the new log
end must move the high watermark and complete the waiting produce (Kafka's
``tryCompleteDelayedRequests`` after ``maybeIncrementLeaderHW``). Without any one of these an
acks=all produce waits a whole fetch timeout (60 s), so the generous 10 s deadline below can be
met only by the wake-ups: the test does not time anything thinly.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kcore.testing import EmbeddedCluster
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until

pytestmark = pytest.mark.timeout(240)

LONG_POLL = {
    **REPLICATED_CONFIG,
    "replica.fetch.wait.max.ms": "60000",
    # Kafka's own checks: the socket timeout and the lag time must outlast the long poll.
    "replica.socket.timeout.ms": "120000",
    "replica.lag.time.max.ms": "120000",
}


def test_acks_all_produces_complete_without_waiting_for_a_follower_fetch_timeout():
    with EmbeddedCluster(brokers=3, config=LONG_POLL) as cluster:
        topic = unique("wake")
        cluster.create_topic(topic, partitions=1, replication_factor=3)
        wait_until(lambda: len(registration(cluster, (topic, 0)).isr) == 3, "full ISR")
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0}
        )
        producer.list_topics(topic, timeout=30)
        # Each write is acknowledged before the next is sent, so every one needs its own
        # round: the followers' fetches are parked again each time.
        delivered = []
        for i in range(5):
            producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
            assert producer.flush(10) == 0, f"write {i} not acknowledged within 10 s"
        assert delivered == [None] * 5
        leader = cluster.leader_partition((topic, 0))
        assert leader.high_watermark == 5
        for node in cluster.brokers:
            assert node.replica_manager.partitions[(topic, 0)].log.log_end_offset == 5
