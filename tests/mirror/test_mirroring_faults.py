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
from kcore.client.connection import ConnectionLost
from kcore.client.mirrors import (
    create_cluster_mirror,
    describe_cluster_mirrors,
    start_mirror_topics,
    stop_mirror_topics,
)
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import RecordBatch
from kcore.record.control import ControlRecordType, read_control_record
from kcore.testing import ProcessCluster

from .clusters import CLUSTER_CONFIG, raw_batches, wait_until
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


def _ends_once_led(cluster, isolation_level: int = 0) -> dict[int, int] | None:
    """``_ends``, or None while a (re)started cluster does not yet know every leader (a
    predicate polled by wait_until must say "not yet", not raise)."""
    try:
        return _ends(cluster, isolation_level)
    except ConnectionLost:
        return None
    except KafkaError as e:
        if e.code in (
            ErrorCode.LEADER_NOT_AVAILABLE,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ):
            return None
        raise


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
            and _ends_once_led(destination) == stable
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
            wait_until(
                lambda: sum((_ends_once_led(destination) or {}).values()) > 1000,
                60,
                "mirroring under way",
            )

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


def _control_batches(cluster, p: int, end: int) -> list[tuple[int, int]]:
    """(producer id, first record's control type) of every control batch of TOPIC-p."""
    out = []
    for raw in raw_batches(cluster, TOPIC, p, 0, end):
        batch = RecordBatch(raw)
        if batch.is_control:
            out.append((batch.producer_id, read_control_record(batch).type))
    return out


def test_mirroring_kill_9_in_the_middle_of_stopping_completes_it_once_after_restart(tmp_path):
    hold = {"kcore.testing.mirror.stopping.hold.ms": "600000"}
    with (
        ProcessCluster(tmp_path / "source", config=CLUSTER_CONFIG) as source,
        ProcessCluster(tmp_path / "destination", config={**CLUSTER_CONFIG, **hold}) as destination,
    ):
        _admin(source, lambda c: _create_topic(c))
        plain = Producer({"bootstrap.servers": source.bootstrap_servers})
        for p in range(PARTITIONS):
            plain.produce(TOPIC, b"plain", partition=p)
        assert plain.flush(30) == 0
        # Interleaved transactions on partition 0: A's records, then B's, then A's COMMIT.
        # B stays open, so the source's LSO is B's first offset: A's records are mirrored but
        # its COMMIT is not, and A is an ongoing transaction on the destination (D-19) that
        # STOPPING must end with an ABORT marker (M-58).
        a, b = (
            Producer({"bootstrap.servers": source.bootstrap_servers, "transactional.id": t})
            for t in ("a", "b")
        )
        for txn in (a, b):
            txn.init_transactions(30)
            txn.begin_transaction()
        for i in range(5):
            a.produce(TOPIC, f"a-{i}".encode(), partition=0)
        a.flush(30)
        for i in range(5):
            b.produce(TOPIC, f"b-{i}".encode(), partition=0)
        b.flush(30)
        a.commit_transaction(30)
        mirror = "dr"
        created = _admin(
            destination,
            lambda c: create_cluster_mirror(
                c, mirror, {"bootstrap.servers": source.bootstrap_servers}
            ),
        )
        assert created.error_code == 0, created.error_message
        started = _admin(destination, lambda c: start_mirror_topics(c, mirror, [TOPIC]))
        assert [(t.name, t.error_code) for t in started.topics] == [(TOPIC, 0)]
        # The open transaction's records are below the source's high watermark but above its
        # LSO: the destination holds what is stable, the open records arrive with their marker.
        _in_sync(source, destination, mirror)

        stopped = _admin(destination, lambda c: stop_mirror_topics(c, mirror, [TOPIC]))
        assert [(t.name, t.error_code) for t in stopped.topics] == [(TOPIC, 0)]
        wait_until(
            lambda: _states(destination, mirror) == dict.fromkeys(range(PARTITIONS), "STOPPING"),
            60,
            "STOPPING",
        )
        destination.node(1).kill(signal.SIGKILL)  # held before the epoch bump, LME persisted
        del destination.node(1).props["kcore.testing.mirror.stopping.hold.ms"]
        destination.node(1).start()
        wait_until(
            lambda: _states(destination, mirror) == dict.fromkeys(range(PARTITIONS), "STOPPED"),
            60,
            "STOPPED after the restart",
        )
        ends = _ends(destination)
        assert _ends(destination, isolation_level=1) == ends  # LSO = HW: nothing left open
        for p in range(PARTITIONS):
            # One ABORT for A on partition 0 and one MIRROR_PID_RESET per partition: the
            # sequence resumed after the crash did not append its records twice (D-15).
            types = [t for _, t in _control_batches(destination, p, ends[p])]
            assert types == (
                [ControlRecordType.ABORT, ControlRecordType.MIRROR_PID_RESET]
                if p == 0
                else [ControlRecordType.MIRROR_PID_RESET]
            )
        writer = Producer({"bootstrap.servers": destination.bootstrap_servers})
        writer.produce(TOPIC, b"after", partition=0)
        assert writer.flush(30) == 0
        b.abort_transaction(30)
