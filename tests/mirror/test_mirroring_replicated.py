"""Cluster mirroring into a replicated destination (issue #17 part 3; spec M-38, D-14).

A source of one broker, a destination of three with ``kcore.replication.enable`` and
``default.replication.factor=3``: the mirror topic is created with three replicas, only each
partition's leader fetches from the source and its followers copy the mirrored batches. While
a transactional producer writes to the source, the destination leaders' brokers die twice
(``stop_node(graceful=False)``): each new leader resumes through LOG_TRUNCATION, and in the end
every replica of every partition holds the source's batches byte for byte (CRC and producer id
rewritten, D-17), with no gap and no duplicate. Then a failover with one destination broker
down: the STOPPING records (ABORT markers, MIRROR_PID_RESET) are on every live replica, no
transaction is left open anywhere, and the stopped broker comes back and copies them too.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.batch import iter_batches
from kcore.record.control import ControlRecordType, read_control_record
from kcore.testing import MirroredClusters
from tests.server.replicated import REPLICATED_CONFIG, registration, wait_until
from tests.server.test_replication import log_bytes, replicas_identical

from .clusters import CLUSTER_CONFIG
from .test_mirror_fetcher import _assert_identical_batches

pytestmark = pytest.mark.timeout(420)

TOPIC = "orders"
PARTITIONS = 3
NODES = (1, 2, 3)
DESTINATION_CONFIG = {
    **REPLICATED_CONFIG,
    "default.replication.factor": "3",
    "mirror.state.topic.num.partitions": "1",  # three replicas, like the mirror topics
}


class SourceWriter:
    """A transactional producer on the source, in a thread: transactions of ten records over
    every partition, one in four aborted, until stopped (the mirror copies their markers)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "mirror-writer", "linger.ms": 5}
        )
        self.transactions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> SourceWriter:
        self.producer.init_transactions(30)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.producer.begin_transaction()
                for i in range(10):
                    value = f"t{self.transactions}-{i}".encode()
                    self.producer.produce(TOPIC, value, partition=i % PARTITIONS)
                if self.transactions % 4 == 3:
                    self.producer.abort_transaction(30)
                else:
                    self.producer.commit_transaction(30)
                self.transactions += 1
                self._stop.wait(0.02)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            self.error = e

    def wait_for(self, count: int) -> None:
        target = self.transactions + count
        wait_until(lambda: self.transactions >= target or self.error, f"{count} transactions")
        assert self.error is None, self.error

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the source writer did not stop"
        assert self.error is None, self.error


def _states(dr) -> dict[tuple[str, int], str]:
    """Each mirror partition's state, {} while the destination cannot answer (a broker down:
    the coordinator or a bootstrap server may be the one that died)."""
    try:
        return {tp: d.state for tp, d in dr.describe().items()}
    except (KafkaError, OSError, Exception):  # noqa: BLE001 - retried by the caller
        return {}


def _wait_mirroring(dr, what: str) -> None:
    seen = {}

    def mirroring() -> bool:
        seen.update(_states(dr))
        return bool(seen) and set(seen.values()) == {"MIRRORING"}

    try:
        wait_until(mirroring, f"MIRRORING ({what})")
    except AssertionError as e:
        raise AssertionError(f"{e}: {seen}") from None


def _leaders(dr) -> dict[int, int]:
    return {p: registration(dr.destination, (TOPIC, p)).leader for p in range(PARTITIONS)}


def _kill_a_leader(dr, writer: SourceWriter) -> None:
    """Kill a broker (not node 1, the controller) that leads a mirror partition; while it is
    down the new leaders mirror on (the mirror's coordinator moves too if it was there);
    bring it back."""
    leaders = _leaders(dr)
    candidates = sorted({n for n in leaders.values() if n != 1})
    assert candidates, f"node 1 leads every partition of {TOPIC}: {leaders}"
    victim = candidates[0]
    led = [p for p, leader in leaders.items() if leader == victim]
    ends = {p: dr.destination.leader_partition((TOPIC, p)).log_end_offset for p in led}
    dr.destination.stop_node(victim, graceful=False)
    wait_until(
        lambda: all(registration(dr.destination, (TOPIC, p)).leader not in (victim, -1)
                    for p in led),
        f"new leaders for {led}",
    )  # fmt: skip
    writer.wait_for(5)
    _wait_mirroring(dr, f"after broker {victim} died")
    # The new leaders fetch from the source themselves (D-14's resume).
    wait_until(
        lambda: all(dr.destination.leader_partition((TOPIC, p)).log_end_offset > ends[p]
                    for p in led),
        f"the new leaders of {led} mirroring",
    )  # fmt: skip
    dr.destination.start_node(victim)
    _wait_mirroring(dr, f"after broker {victim} came back")
    writer.wait_for(5)


def _assert_every_replica_is_the_source(dr) -> None:
    for p in range(PARTITIONS):
        tp = (TOPIC, p)
        wait_until(lambda tp=tp: replicas_identical(dr.destination, tp, NODES), f"replicas of {tp}")
        end = dr.source.leader_partition(tp).log_end_offset
        assert dr.destination.leader_partition(tp).log_end_offset == end
        _assert_identical_batches(dr.source, dr.destination, TOPIC, p, end)


def _last_control(data: bytes) -> ControlRecordType:
    batches = list(iter_batches(data))
    assert batches and batches[-1].is_control
    return read_control_record(batches[-1]).type


def test_mirroring_into_rf3_survives_leader_deaths_and_fails_over_with_a_broker_down():
    with MirroredClusters(
        source_config=CLUSTER_CONFIG,
        destination_config=DESTINATION_CONFIG,
        destination_brokers=3,
    ) as dr:
        dr.source.create_topic(TOPIC, partitions=PARTITIONS)
        with SourceWriter(dr.source.bootstrap_servers) as writer:
            writer.wait_for(3)
            assert dr.mirror_topics(TOPIC) == [TOPIC]
            # Item 4: the destination's default.replication.factor (D-28).
            for p in range(PARTITIONS):
                assert sorted(registration(dr.destination, (TOPIC, p)).replicas) == list(NODES)
            _wait_mirroring(dr, "the start")
            writer.wait_for(5)
            # Only leaders fetch from the source: one mirror fetcher per leading broker.
            for node in dr.destination.brokers:
                led = {(TOPIC, p) for p, leader in _leaders(dr).items() if leader == node.node_id}
                assert set(node.mirror_manager.drivers) == led, node.node_id

            # Two leader deaths while the source is written (node 1 is the controller).
            _kill_a_leader(dr, writer)
            _kill_a_leader(dr, writer)
        dr.wait_in_sync()
        _assert_every_replica_is_the_source(dr)

        # Failover with one broker down, a leader's if one other than node 1 leads.
        down = next((n for n in _leaders(dr).values() if n != 1), 3)
        dr.destination.stop_node(down, graceful=False)
        assert dr.failover(TOPIC) == [TOPIC]
        live = [n for n in NODES if n != down]
        for p in range(PARTITIONS):
            tp = (TOPIC, p)
            wait_until(lambda tp=tp: replicas_identical(dr.destination, tp, live), f"{tp} live")
            (start, end, data) = log_bytes(dr.destination, tp)[live[0]]
            assert _last_control(data) is ControlRecordType.MIRROR_PID_RESET
            leader = dr.destination.leader_partition(tp)
            assert leader.last_stable_offset == leader.high_watermark == end
            for n in live:
                replica = dr.destination.node(n).replica_manager.partitions[tp]
                assert not replica.producer_state.ongoing_transactions, (n, tp)
        dr.destination.start_node(down)
        for p in range(PARTITIONS):
            tp = (TOPIC, p)
            wait_until(lambda tp=tp: replicas_identical(dr.destination, tp, NODES), f"{tp} all")
            partition = dr.destination.node(down).replica_manager.partitions[tp]
            assert not partition.producer_state.ongoing_transactions


def test_mirror_topic_replication_factor_beyond_the_brokers_is_refused():
    with MirroredClusters(
        source_config=CLUSTER_CONFIG,
        destination_config=DESTINATION_CONFIG,
        destination_brokers=3,
        mirror_config={"mirror.topic.replication.factor": "4"},
    ) as dr:
        dr.source.create_topic(TOPIC, partitions=1)
        with pytest.raises(KafkaError) as refused:
            dr.mirror_topics(TOPIC)
        assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR, refused.value
        assert TOPIC not in dr.destination.topics()


@pytest.mark.parametrize("unclean", [False, True], ids=["isr", "all-replicas"])
def test_a_start_truncates_only_once_the_isr_or_every_replica_has_the_cut(unclean):
    """M-38. After a failover, a broker dies and the topic is started again: its
    LOG_TRUNCATION empties the log (the source never failed over: no LME). The dead broker's
    replica left the ISR when it was fenced: the ISR's wait lets mirroring start without it;
    with ``mirror.support.unclean.leader.election`` the start waits until that replica has
    the cut too (it is retried, never FAILED). Either way the replica catches up once back
    and every replica holds the source's batches."""
    config = dict(DESTINATION_CONFIG)
    if unclean:
        config["mirror.support.unclean.leader.election"] = "true"
    with MirroredClusters(
        source_config=CLUSTER_CONFIG, destination_config=config, destination_brokers=3
    ) as dr:
        dr.source.create_topic(TOPIC, partitions=1)
        tp = (TOPIC, 0)
        producer = Producer({"bootstrap.servers": dr.source.bootstrap_servers})
        for i in range(50):
            producer.produce(TOPIC, f"r{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        assert dr.mirror_topics(TOPIC) == [TOPIC]
        dr.wait_in_sync()
        assert dr.failover(TOPIC) == [TOPIC]
        wait_until(lambda: replicas_identical(dr.destination, tp, NODES), "replicas in step")

        down = next(n for n in NODES if n not in (1, registration(dr.destination, tp).leader))
        dr.destination.stop_node(down, graceful=False)
        wait_until(lambda: down not in registration(dr.destination, tp).isr, "fenced")
        assert dr.mirror_topics(TOPIC) == [TOPIC]
        if unclean:
            # Every replica must have the cut: LOG_TRUNCATION holds while one is down. The
            # Start's move out of STOPPED is persisted a moment after it is answered.
            wait_until(lambda: _states(dr).get(tp) == "LOG_TRUNCATION", "in LOG_TRUNCATION")
            for _ in range(40):
                assert _states(dr).get(tp) in ("LOG_TRUNCATION", None), _states(dr)
                time.sleep(0.1)
            assert dr.destination.leader_partition(tp).log_end_offset == 0
            dr.destination.start_node(down)
            _wait_mirroring(dr, "the replica back and truncated")
        else:
            _wait_mirroring(dr, "with a replica down")
            dr.wait_in_sync()
            dr.destination.start_node(down)
        dr.wait_in_sync()
        wait_until(lambda: replicas_identical(dr.destination, tp, NODES), "replicas identical")
        end = dr.source.leader_partition(tp).log_end_offset
        _assert_identical_batches(dr.source, dr.destination, TOPIC, 0, end)
