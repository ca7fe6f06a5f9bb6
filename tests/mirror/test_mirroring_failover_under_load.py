"""Failover while the source is busy: idempotent and transactional producers keep writing to
the source while the operator stops one mirror topic. The stopped topic ends with no hanging
transaction (DescribeProducers and ListTransactions on the destination show none open, LSO =
HW), takes idempotent and transactional writes on the destination, and the mirror's other
topic keeps mirroring.
"""

from __future__ import annotations

import threading
import uuid

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from kcore.client import KafkaClient
from kcore.client.transactions import describe_producers_of, list_transactions
from kcore.testing import MirroredClusters

from .clusters import CLUSTER_CONFIG, wait_until

pytestmark = pytest.mark.timeout(240)

ORDERS, AUDIT = "orders", "audit"


class Writers:
    """An idempotent producer and two transactional ones (many small transactions, which
    interleave: a transaction's records can be below the source's LSO while its COMMIT is above
    it, so the destination holds it open at the stop, D-19), writing to ``topic`` on
    ``bootstrap`` in threads until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.commits = 0
        self.threads = [
            threading.Thread(target=self._idempotent, daemon=True),
            threading.Thread(target=self._transactional, daemon=True),
            threading.Thread(target=self._transactional, daemon=True),
        ]

    def _idempotent(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        i = 0
        while not self.stop.is_set():
            try:
                producer.produce(self.topic, f"idem-{i}".encode(), partition=i % 3)
                i += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(30)

    def _transactional(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
        )
        producer.init_transactions(30)
        while not self.stop.is_set():
            producer.begin_transaction()
            for p in range(3):
                producer.produce(self.topic, f"txn-{self.commits}".encode(), partition=p)
            producer.commit_transaction(30)
            self.commits += 1

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _on(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def _read_committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    try:
        while len(at_end) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, "the read_committed consumer is blocked"
            if msg.error():
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_failover_under_load_leaves_no_hanging_transaction_and_other_topics_mirror():
    with MirroredClusters(source_config=CLUSTER_CONFIG, destination_config=CLUSTER_CONFIG) as dr:
        dr.source.create_topic(ORDERS, partitions=3)
        dr.source.create_topic(AUDIT)
        assert sorted(dr.mirror_topics(ORDERS, AUDIT)) == [AUDIT, ORDERS]
        partitions = dr.destination.broker.replica_manager.partitions
        with Writers(dr.source.bootstrap_servers, ORDERS):
            wait_until(
                lambda: all(partitions[(ORDERS, p)].log_end_offset > 2000 for p in range(3)),
                60,
                "mirroring under way",
            )
            assert dr.failover(ORDERS) == [ORDERS]  # while the producers are writing

        tps = [(ORDERS, p) for p in range(3)]
        producers = _on(dr.destination, lambda c: describe_producers_of(c, tps))
        for tp in tps:
            assert all(p.current_txn_start_offset == -1 for p in producers[tp].active_producers)
            part = dr.destination.broker.replica_manager.partitions[tp]
            assert part.last_stable_offset == part.high_watermark
        listed = _on(dr.destination, lambda c: list_transactions(c, states=["Ongoing"]))
        assert listed.transaction_states == []
        _read_committed_values(dr.destination.bootstrap_servers, ORDERS, 3)  # reaches the end

        # The destination is writable for idempotent and transactional producers.
        idem = Producer(
            {"bootstrap.servers": dr.destination.bootstrap_servers, "enable.idempotence": True}
        )
        idem.produce(ORDERS, b"dest-idem", partition=0)
        assert idem.flush(30) == 0
        txn = Producer(
            {"bootstrap.servers": dr.destination.bootstrap_servers, "transactional.id": "dest-tx"}
        )
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(ORDERS, b"dest-txn", partition=1)
        txn.commit_transaction(30)
        values = _read_committed_values(dr.destination.bootstrap_servers, ORDERS, 3)
        assert b"dest-idem" in values and b"dest-txn" in values

        # The other topic of the mirror is still mirroring.
        assert dr.describe()[(AUDIT, 0)].state == "MIRRORING"
        audit = Producer({"bootstrap.servers": dr.source.bootstrap_servers})
        for i in range(10):
            audit.produce(AUDIT, f"audit-{i}".encode())
        assert audit.flush(30) == 0
        dr.wait_in_sync()
        assert _read_committed_values(dr.destination.bootstrap_servers, AUDIT, 1) == [
            f"audit-{i}".encode() for i in range(10)
        ]
