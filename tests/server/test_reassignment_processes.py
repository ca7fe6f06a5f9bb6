"""Partition reassignment across real processes (issue #17's proof): four combined
broker+controller nodes, a topic on brokers {1,2,3}, an acks=all idempotent confluent-kafka
producer running throughout, and ``kcore reassign-partitions --execute`` to {2,3,4}, then
``--verify`` until it says completed. Every acknowledged record is read back once at its
offset, broker 4's log is byte-identical to the others', and broker 1 no longer hosts the
partition: its directory is deleted.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcore.testing.processes import ProcessCluster
from tests.server.replicated import wait_until
from tests.server.test_replication_processes import CONFIG, log_bytes, partition_meta
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(420)


class Producing:
    """An acks=all idempotent producer sending ``v<i>`` in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[int, bytes] = {}
        self.errors: list = []
        self.sent = 0
        self._stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 180000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            assert msg.offset() not in self.acked, f"offset {msg.offset()} acknowledged twice"
            self.acked[msg.offset()] = msg.value()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=f"v{self.sent}".encode(), partition=0,
                                  on_delivery=self._on_delivery)  # fmt: skip
            self.sent += 1
            self.producer.poll(0)
            if self.sent % 50 == 0:
                time.sleep(0.01)
        assert self.producer.flush(180) == 0

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(200)

    def __exit__(self, *exc) -> None:
        self.stop()


def _plan(path: Path, topic: str, replicas: list[int]) -> Path:
    path.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}
        )  # fmt: skip
    )
    return path


def test_reassignment_from_1_2_3_to_2_3_4_under_load_loses_nothing(tmp_path):
    topic = f"move-{uuid.uuid4().hex[:8]}"
    with ProcessCluster(tmp_path, 4, config=CONFIG) as cluster:
        servers = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])])[
            topic
        ].result(60)
        wait_until(
            lambda: (m := partition_meta(admin, topic)) is not None and len(m.isrs) == 3,
            "three in sync",
        )
        plan = _plan(tmp_path / "plan.json", topic, [2, 3, 4])
        with Producing(servers, topic) as load:
            wait_until(lambda: len(load.acked) > 500, "records acknowledged before the move")
            done = kcore("reassign-partitions", "--bootstrap-server", servers, "--execute",
                         "--reassignment-json-file", str(plan))  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            current = (
                f'{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,'
                '"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}'
            )
            assert done.stdout == (
                f"Current partition replica assignment\n\n{current}\n\n"
                "Save this to use as the --reassignment-json-file option during rollback\n"
                f"Successfully started partition reassignment for {topic}-0\n"
            )
            statuses = []

            def verified() -> bool:
                out = kcore("reassign-partitions", "--bootstrap-server", servers, "--verify",
                            "--reassignment-json-file", str(plan))  # fmt: skip
                assert out.returncode == 0, out.stdout + out.stderr
                statuses.append(out.stdout)
                return "is completed." in out.stdout

            wait_until(verified, "--verify to say completed", timeout=120)
            assert statuses[-1] == (
                "Status of partition reassignment:\n"
                f"Reassignment of partition {topic}-0 is completed.\n"
                "\n"
                "Clearing broker-level throttles on brokers 1,2,3,4\n"
                f"Clearing topic-level throttles on topic {topic}\n"
            )
            # Before that: in progress, or, for a moment, done on the controller (the list)
            # while the broker that answered the metadata had not applied it yet (as with
            # Kafka's tool: the two answers come from different places).
            lagging = (
                f"There is no active reassignment of partition {topic}-0, but replica set is "
                "2,3,4,1 rather than 2,3,4."
            )
            for s in statuses[:-1]:
                assert (
                    f"Reassignment of partition {topic}-0 is still in progress." in s
                    or lagging in s
                ), s
            acked_at_switch = len(load.acked)
            wait_until(lambda: len(load.acked) > acked_at_switch + 500, "records after the move")
        assert not load.errors, load.errors[:3]
        assert len(load.acked) == load.sent

        meta = partition_meta(admin, topic)
        assert sorted(meta.replicas) == [2, 3, 4] and meta.leader in (2, 3, 4)
        listed = kcore("reassign-partitions", "--bootstrap-server", servers, "--list")
        assert listed.stdout == "No partition reassignments found.\n"

        consumer = Consumer({"bootstrap.servers": servers, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([CTopicPartition(topic, 0, 0)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 120
        while len(got) < len(load.acked) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                assert msg.offset() not in got, f"offset {msg.offset()} read twice"
                got[msg.offset()] = msg.value()
        consumer.close()
        assert got == load.acked  # every acknowledged record once, at its acknowledged offset

        # Broker 1 stopped hosting the partition: its fetcher state and its log are gone.
        wait_until(lambda: not (tmp_path / "node1" / f"{topic}-0").exists(), "node 1's log deleted")
        wait_until(
            lambda: (m := partition_meta(admin, topic)) is not None and len(m.isrs) == 3,
            "three in sync at the end",
        )
        time.sleep(1)  # the followers' last fetch (their logs are compared, not their HWs)
    logs = {n: log_bytes(tmp_path / f"node{n}", topic) for n in (2, 3, 4)}
    assert len(logs[4]) > 0
    assert logs[2] == logs[3] == logs[4]
    assert not (tmp_path / "node1" / f"{topic}-0").exists()
