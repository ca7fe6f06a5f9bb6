"""Follower replication (issue #17 part 1) on three in-process brokers with real clients.

RF=3 and ``min.insync.replicas=2`` (``kcore.replication.enable``): an acks=all idempotent
producer's every acknowledged record is read back once and every replica's log is the same,
byte for byte; a follower that stops fetching leaves the ISR after ``replica.lag.time.max.ms``
and acks=all is refused with NOT_ENOUGH_REPLICAS while the leader is alone, then rejoins; a
leader's node that stops (gracefully or not) is replaced by a member of the ISR, the producer
carries on and nothing acknowledged is lost; the old leader comes back as a follower with the
same log.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from kcore.log.log_reads import FetchIsolation
from kcore.protocol.errors import KafkaError as KafkaCoreError
from kcore.testing import EmbeddedCluster
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster():
    with EmbeddedCluster(brokers=3, config=REPLICATED_CONFIG) as c:
        yield c


def log_bytes(cluster, tp) -> dict[int, tuple[int, int, bytes]]:
    """node id -> (log start, log end, the log's bytes) of ``tp`` on every running replica."""

    async def read():
        out = {}
        for node in cluster.brokers:
            partition = node.replica_manager.partitions.get(tp)
            if partition is None:
                continue
            plog = partition.log
            data = bytearray()
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                info = plog.read(offset, 1 << 20, FetchIsolation.LOG_END)
                if not info.records:
                    break
                chunk = b"".join(bytes(piece.read()) for piece in info.records)
                data += chunk
                offset = _next_offset(chunk)
            out[node.node_id] = (plog.log_start_offset, plog.log_end_offset, bytes(data))
        return out

    return cluster._call(read)


def _next_offset(chunk: bytes) -> int:
    from kcore.record.batch import iter_batches

    return max(b.last_offset for b in iter_batches(chunk)) + 1


def replicas_identical(cluster, tp, nodes=(1, 2, 3)) -> bool:
    logs = log_bytes(cluster, tp)
    if set(logs) != set(nodes):
        return False
    return len({v for v in logs.values()}) == 1


def isr_of(cluster, tp) -> tuple[int, ...]:
    return tuple(sorted(registration(cluster, tp).isr))


def leader_id(cluster, tp) -> int:
    return registration(cluster, tp).leader


class Acks:
    """Delivery reports of a producer: (partition, offset) -> value, and errors."""

    def __init__(self) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[KafkaError] = []

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            key = (msg.partition(), msg.offset())
            assert key not in self.acked, f"offset {key} acknowledged twice"
            self.acked[key] = msg.value()


def read_all(cluster, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=30)
            ends[p] = high
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 60
        while any(ends[p] > 0 and max((o for q, o in got if q == p), default=-1) < ends[p] - 1
                  for p in ends):  # fmt: skip
            assert time.monotonic() < deadline, "the consumer did not read everything"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (msg.partition(), msg.offset())
            assert key not in got, f"offset {key} read twice"
            got[key] = msg.value()
        return got
    finally:
        consumer.close()


def test_acks_all_records_are_on_every_replica_identically(cluster):
    topic = unique("repl")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    wait_until(lambda: all(len(isr_of(cluster, (topic, p))) == 3 for p in range(3)), "ISR")
    acks = Acks()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for i in range(6000):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), on_delivery=acks)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not acks.errors and len(acks.acked) == 6000
    # Acknowledged means in the ISR: every leader's HW is past every acknowledged offset.
    for p in range(3):
        hw = cluster.leader_partition((topic, p)).high_watermark
        assert hw > max(o for q, o in acks.acked if q == p)  # the keys spread over all three
    assert read_all(cluster, topic, 3) == acks.acked
    for p in range(3):
        wait_until(lambda p=p: replicas_identical(cluster, (topic, p)), f"replicas of {p}")
        # A follower's HW follows its leader's.
        for node in cluster.brokers:
            partition = node.replica_manager.partitions[(topic, p)]
            wait_until(
                lambda partition=partition: partition.high_watermark == partition.log_end_offset,
                "follower HW",
            )
    described = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(
        topic, timeout=30
    )
    for p, meta in described.topics[topic].partitions.items():
        assert sorted(meta.replicas) == [1, 2, 3] and sorted(meta.isrs) == [1, 2, 3], p


def _hold_fetching(cluster, node_id: int, tp, hold: bool) -> None:
    """Stop (or resume) node ``node_id``'s replica fetcher for ``tp`` while the broker stays
    up and registered: a follower that no longer fetches, as a stalled one."""

    async def toggle():
        manager = cluster.node(node_id).replica_fetchers.manager
        if hold:
            key = manager._placement[tp]
            manager.fetchers[key].core.hold(tp)
        else:
            manager.resume_partition(tp)

    cluster._call(toggle)


def _producer(cluster, **extra) -> Producer:
    config = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "acks": "all",
        "enable.idempotence": False,
        "retries": 0,
        "linger.ms": 0,
    }
    config.update(extra)
    return Producer(config)


def _produce_one(producer: Producer, topic: str, value: bytes):
    result = []
    producer.produce(
        topic, value=value, partition=0, on_delivery=lambda err, msg: result.append((err, msg))
    )
    producer.flush(60)
    assert len(result) == 1
    return result[0]


def test_a_stalled_follower_leaves_the_isr_and_acks_all_is_refused_below_min_isr(cluster):
    topic = unique("isr")
    tp = (topic, 0)
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    wait_until(lambda: isr_of(cluster, tp) == (1, 2, 3), "full ISR")
    leader = leader_id(cluster, tp)
    followers = [n for n in (1, 2, 3) if n != leader]
    producer = _producer(cluster)
    err, msg = _produce_one(producer, topic, b"first")
    assert err is None and msg.offset() == 0

    # One follower stalls. Having everything, it is caught up (Kafka's rule: an idle
    # partition keeps its ISR); once the log grows without it, it leaves after
    # replica.lag.time.max.ms, and two in sync still satisfy min.insync.replicas=2.
    acks1 = _producer(cluster, acks="1")
    _hold_fetching(cluster, followers[0], tp, True)
    err, msg = _produce_one(acks1, topic, b"while one stalls")
    assert err is None and msg.offset() == 1
    wait_until(lambda: isr_of(cluster, tp) == tuple(sorted((leader, followers[1]))), "shrink")
    err, msg = _produce_one(producer, topic, b"second")
    assert err is None and msg.offset() == 2

    # The second stalls too: the leader is alone, acks=all is refused before the append.
    _hold_fetching(cluster, followers[1], tp, True)
    err, msg = _produce_one(acks1, topic, b"while both stall")
    assert err is None and msg.offset() == 3
    wait_until(lambda: isr_of(cluster, tp) == (leader,), "shrink to the leader")
    err, _ = _produce_one(producer, topic, b"refused")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    assert cluster.leader_partition(tp).log_end_offset == 4  # nothing appended

    # Both resume: they catch up and rejoin; acks=all works again.
    _hold_fetching(cluster, followers[0], tp, False)
    _hold_fetching(cluster, followers[1], tp, False)
    wait_until(lambda: isr_of(cluster, tp) == (1, 2, 3), "expansion")
    err, msg = _produce_one(producer, topic, b"third")
    assert err is None and msg.offset() == 4
    wait_until(lambda: replicas_identical(cluster, tp), "identical replicas")


def test_acks_all_waiting_when_the_isr_shrinks_below_min_isr_gets_not_enough_after_append(
    cluster,
):
    topic = unique("after")
    tp = (topic, 0)
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    wait_until(lambda: isr_of(cluster, tp) == (1, 2, 3), "full ISR")
    leader = leader_id(cluster, tp)
    for follower in (n for n in (1, 2, 3) if n != leader):
        _hold_fetching(cluster, follower, tp, True)
    # Appended with three in sync; the followers never fetch it; the ISR shrinks to the
    # leader alone, the HW reaches the write, and the answer says it is under-replicated.
    producer = _producer(cluster, **{"request.timeout.ms": 30000, "message.timeout.ms": 40000})
    err, _ = _produce_one(producer, topic, b"lonely")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, err
    assert isr_of(cluster, tp) == (leader,)


@pytest.mark.parametrize("graceful", [False, True], ids=["killed", "controlled-shutdown"])
def test_a_new_leader_from_the_isr_takes_over_and_nothing_acknowledged_is_lost(cluster, graceful):
    topic = unique("failover")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    for p in range(3):
        wait_until(lambda p=p: len(isr_of(cluster, (topic, p))) == 3, "full ISR")
    # A partition led by a broker-only node (node 1 is the controller: it stays up).
    p = next(p for p in range(3) if leader_id(cluster, (topic, p)) != 1)
    tp = (topic, p)
    old_leader = leader_id(cluster, tp)
    acks = Acks()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 120000,
        }
    )

    def produce(n: int, start: int) -> None:
        for i in range(start, start + n):
            producer.produce(topic, value=f"v{i}".encode(), partition=p, on_delivery=acks)
            producer.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)

    produce(2000, 0)
    producer.flush(60)
    before = len(acks.acked)
    cluster.stop_node(old_leader, graceful=graceful)
    produce(2000, 2000)  # into the failover
    wait_until(lambda: leader_id(cluster, tp) not in (-1, old_leader), "a new leader")
    new_leader = leader_id(cluster, tp)
    assert new_leader in (1, 2, 3) and new_leader != old_leader
    produce(1000, 4000)
    assert producer.flush(120) == 0
    assert not acks.errors, acks.errors[:3]
    assert len(acks.acked) == 5000 and before == 2000
    got = read_all(cluster, topic, 3)
    assert {k: v for k, v in got.items() if k[0] == p} == acks.acked
    # The old leader comes back as a follower, truncates what it alone had, and catches up.
    cluster.start_node(old_leader)
    wait_until(lambda: isr_of(cluster, tp) == (1, 2, 3), "the old leader rejoins the ISR")
    wait_until(lambda: replicas_identical(cluster, tp), "identical replicas")
    assert leader_id(cluster, tp) == new_leader


def test_replication_factor_above_one_stays_refused_without_the_setting():
    with EmbeddedCluster(brokers=2) as c:
        refused = unique("refused")
        with pytest.raises(KafkaCoreError, match="replication is not available yet"):
            c.create_topic(refused, partitions=1, replication_factor=2)


def _txn_state(cluster, tp):
    """node id -> (producer state entries, aborted transactions up to the LSO) of ``tp``."""

    async def read():
        out = {}
        for node in cluster.brokers:
            plog = node.replica_manager.partitions[tp].log
            info = plog.read(plog.log_start_offset, 1 << 24, FetchIsolation.TXN_COMMITTED)
            aborted = [(t.producer_id, t.first_offset) for t in info.aborted_transactions or ()]
            out[node.node_id] = (dict(plog.producer_state.producers), aborted, plog.high_watermark)
        return out

    return cluster._call(read)


def test_followers_keep_producer_state_and_aborted_transactions_and_serve_them_as_leader(
    cluster,
):
    topic = unique("txn")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    for p in range(3):
        wait_until(lambda p=p: len(isr_of(cluster, (topic, p))) == 3, "full ISR")
    tid = unique("tid")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid, "linger.ms": 0}
    )
    producer.init_transactions(60)
    coordinator = cluster._call(cluster.broker.internal_topics.coordinator, 1, tid)
    # A partition whose leader is neither the controller (node 1) nor the transaction
    # coordinator (its __transaction_state has one replica): that leader may stop.
    p = next(p for p in range(3) if leader_id(cluster, (topic, p)) not in (1, coordinator))
    tp = (topic, p)
    committed = []
    for i in range(6):
        producer.begin_transaction()
        values = [f"t{i}-{j}".encode() for j in range(20)]
        for v in values:
            producer.produce(topic, value=v, partition=p)
        if i % 2 == 0:
            producer.commit_transaction(60)
            committed += values
        else:
            producer.flush(60)  # in the log before the abort (else they are never sent)
            producer.abort_transaction(60)
    # EndTxn answers before the markers are written: wait for the last one (LSO = HW = LEO).
    wait_until(lambda: cluster.leader_partition(tp).last_stable_offset == 6 * 21, "markers")
    leo = 6 * 21
    wait_until(lambda: replicas_identical(cluster, tp), "identical replicas, markers included")
    wait_until(lambda: all(s[2] == leo for s in _txn_state(cluster, tp).values()), "HW")
    states = _txn_state(cluster, tp)
    assert len(states[leader_id(cluster, tp)][1]) == 3  # the three aborted transactions
    assert states[1] == states[2] == states[3]  # producer state and the transaction index

    old = leader_id(cluster, tp)
    cluster.stop_node(old, graceful=False)
    wait_until(lambda: leader_id(cluster, tp) not in (-1, old), "a new leader")
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique("g"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert got == committed
    # The same producer goes on with the new leader (its sequence numbers are known there).
    producer.begin_transaction()
    producer.produce(topic, value=b"after", partition=p)
    producer.commit_transaction(60)
