"""Follower replication across real processes: the leader of a partition killed with SIGKILL
and restarted, again and again, under an acks=all idempotent confluent-kafka producer (issue
#17's test: three rounds in the suite, ten with ``make soak``). Every acknowledged record is
there once, at its acknowledged offset, and at the end every replica's log holds the same
bytes.

Three combined broker+controller nodes (a three-voter quorum: killing the active controller
is part of the test when it leads the partition).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcore.testing.processes import ProcessCluster
from tests.server.replicated import REPLICATED_CONFIG, wait_until

pytestmark = pytest.mark.timeout(420)

# Three rounds in the suite; issue #17's ten behind the slow marker (about 2.5 minutes on a
# loaded two-core machine: over the suite's budget for one test).
ROUNDS = [3, pytest.param(10, marks=pytest.mark.slow, id="10-rounds")]
# Processes start slower than threads: a longer lag before a restarted follower is dropped.
CONFIG = {**REPLICATED_CONFIG, "replica.lag.time.max.ms": "3000"}


def partition_meta(admin: AdminClient, topic: str):
    try:
        return admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
    except Exception:
        return None


def log_bytes(node_dir: Path, topic: str) -> bytes:
    """The partition's whole log as stored (its segments in offset order, concatenated)."""
    directory = node_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


@pytest.mark.parametrize("rounds", ROUNDS)
def test_the_leader_killed_and_restarted_under_acks_all_loses_nothing(tmp_path, rounds):
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    with ProcessCluster(tmp_path, 3, config=CONFIG) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
        wait_until(
            lambda: (m := partition_meta(admin, topic)) is not None and len(m.isrs) == 3,
            "three in sync",
        )
        acked: dict[int, bytes] = {}
        errors = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                assert msg.offset() not in acked, f"offset {msg.offset()} acknowledged twice"
                acked[msg.offset()] = msg.value()

        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 180000,
            }
        )
        sent = 0

        def produce_for(seconds: float) -> None:
            nonlocal sent
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                producer.produce(topic, value=f"v{sent}".encode(), partition=0,
                                 on_delivery=on_delivery)  # fmt: skip
                sent += 1
                producer.poll(0)
                if sent % 100 == 0:
                    time.sleep(0.005)

        produce_for(2)
        for _ in range(rounds):
            leader = partition_meta(admin, topic).leader
            cluster.node(leader).kill()  # SIGKILL
            produce_for(1)
            wait_until(
                lambda leader=leader: (
                    (m := partition_meta(admin, topic)) is not None and m.leader not in (-1, leader)
                ),
                "a new leader",
            )
            produce_for(2)
            cluster.node(leader).start()
            wait_until(
                lambda: (m := partition_meta(admin, topic)) is not None and len(m.isrs) == 3,
                "the restarted node back in sync",
            )
            produce_for(1)
        assert producer.flush(180) == 0
        assert not errors, errors[:3]
        assert len(acked) == sent

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([CTopicPartition(topic, 0, 0)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 120
        while len(got) < len(acked) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                assert msg.offset() not in got, f"offset {msg.offset()} read twice"
                got[msg.offset()] = msg.value()
        consumer.close()
        assert got == acked  # every acknowledged record once, at its acknowledged offset
        assert sorted(v for v in got.values()) == sorted(f"v{i}".encode() for i in range(sent))

        wait_until(
            lambda: (m := partition_meta(admin, topic)) is not None and len(m.isrs) == 3,
            "three in sync at the end",
        )
        time.sleep(1)  # the followers' last fetch (their logs are compared, not their HWs)
    # Stopped cleanly: every replica's log, byte for byte.
    logs = {n: log_bytes(tmp_path / f"node{n}", topic) for n in (1, 2, 3)}
    assert len(logs[1]) > 0
    assert logs[1] == logs[2] == logs[3]
