"""Cluster mirroring under faults, with real ``kcore server`` processes: the destination killed
with SIGKILL while it mirrors a source that keeps taking writes, then restarted; the source
restarted under the mirror. Each time the mirror resumes and the destination ends batch for
batch equal to the source: no gap, no duplicate.
"""

from __future__ import annotations

import signal
import threading

import pytest
import trio
from confluent_kafka import Producer

from kcore.client import KafkaClient
from kcore.client.admin import LATEST_TIMESTAMP, NewTopic, create_topics, list_offsets
from kcore.client.mirrors import (
    create_cluster_mirror,
    describe_cluster_mirrors,
    start_mirror_topics,
)
from kcore.testing import ProcessCluster

from .clusters import CLUSTER_CONFIG, wait_until
from .test_mirror_fetcher import _assert_identical_batches

pytestmark = pytest.mark.timeout(300)

TOPIC = "payments"
PARTITIONS = 3


def _admin(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def _ends(cluster, isolation_level: int = 0) -> dict[int, int]:
    """The high watermark (or, read_committed, the LSO) of every partition of TOPIC."""
    answer = _admin(
        cluster,
        lambda c: list_offsets(
            c,
            {(TOPIC, p): LATEST_TIMESTAMP for p in range(PARTITIONS)},
            isolation_level=isolation_level,
        ),
    )
    return {p: answer[(TOPIC, p)].offset for p in range(PARTITIONS)}


def _states(cluster, mirror: str) -> dict[int, str]:
    try:
        response = _admin(cluster, lambda c: describe_cluster_mirrors(c, [mirror]))
    except Exception:  # noqa: BLE001 - the destination may still be starting
        return {}
    return {
        p.partition_index: p.state for m in response.mirrors for t in m.topics for p in t.partitions
    }


class Load:
    """An idempotent producer writing to the source in a thread until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    TOPIC, f"payment-{self.sent}".encode(), partition=self.sent % 3
                )
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
            if self.sent % 200 == 0:
                self.producer.poll(0)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0


def _in_sync(source, destination, mirror: str) -> None:
    stable = _ends(source, isolation_level=1)
    wait_until(
        lambda: (
            _states(destination, mirror) == dict.fromkeys(range(PARTITIONS), "MIRRORING")
            and _ends(destination) == stable
        ),
        90,
        f"the destination at the source's LSO {stable}",
    )
    for p in range(PARTITIONS):
        _assert_identical_batches(source, destination, TOPIC, p, stable[p])


def test_mirroring_survives_kill_9_of_the_destination_and_a_source_restart(tmp_path):
    with (
        ProcessCluster(tmp_path / "source", config=CLUSTER_CONFIG) as source,
        ProcessCluster(tmp_path / "destination", config=CLUSTER_CONFIG) as destination,
    ):
        _admin(source, lambda c: _create_topic(c))
        mirror = "dr"
        created = _admin(
            destination,
            lambda c: create_cluster_mirror(
                c, mirror, {"bootstrap.servers": source.bootstrap_servers}
            ),
        )
        assert created.error_code == 0, created.error_message
        with Load(source.bootstrap_servers) as load:
            wait_until(lambda: load.sent > 2000, 30, "a first backlog")
            started = _admin(destination, lambda c: start_mirror_topics(c, mirror, [TOPIC]))
            assert [(t.name, t.error_code) for t in started.topics] == [(TOPIC, 0)]
            wait_until(lambda: sum(_ends(destination).values()) > 1000, 60, "mirroring under way")

            # kill -9 of the destination in the middle of mirroring, while the source takes writes.
            destination.node(1).kill(signal.SIGKILL)
            wait_until(lambda: load.sent > 8000, 60, "more writes while it is down")
            destination.node(1).start()
        _in_sync(source, destination, mirror)

        # The source restarts under the mirror: the fetcher reconnects and goes on.
        with Load(source.bootstrap_servers):
            source.node(1).stop()
            source.node(1).start()
        _in_sync(source, destination, mirror)


async def _create_topic(client):
    response = await create_topics(client, [NewTopic(TOPIC, PARTITIONS, 1)])
    assert [t.error_code for t in response.topics] == [0]
