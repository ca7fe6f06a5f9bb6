"""A transaction committed just before the coordinator is killed commits after the restart.

``kcore server`` runs as a real process. A confluent-kafka transactional producer commits (the
coordinator acknowledges EndTxn once PrepareCommit is durable); the testing-only key
``kcore.testing.transaction.marker.hold.ms`` keeps the COMMIT markers from being written, so
the SIGKILL lands in the window Kafka's recovery exists for. After the restart the coordinator
finds PrepareCommit in ``__transaction_state``, writes the markers, and a ``read_committed``
consumer sees every record.
"""

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcore.testing.processes import ServerProcess

pytestmark = pytest.mark.timeout(180)

SMALL = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
HOLD_MARKERS = "kcore.testing.transaction.marker.hold.ms"


def _read_committed(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        return got
    finally:
        consumer.close()


def test_commit_acknowledged_then_sigkill_completes_after_restart(tmp_path):
    server = ServerProcess(tmp_path / "data", config={**SMALL, HOLD_MARKERS: "600000"})
    bootstrap = server.bootstrap_server
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-tid"})
        producer.init_transactions(30)
        producer.begin_transaction()
        values = [f"v{i}" for i in range(5)]
        for v in values:
            producer.produce(topic, value=v.encode())
        producer.commit_transaction(30)  # acknowledged: PrepareCommit is in the log

        watcher = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "w", "isolation.level": "read_committed"}
        )
        low, high = watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        watcher.close()
        assert high == 0, "no marker yet: the records are not stable"

        server.kill()
        del server.props[HOLD_MARKERS]
        server.start()

        assert _read_committed(bootstrap, topic, len(values)) == values
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
