"""Read-only mirror topics (decision D-18, spec M-05) against a running kcore, real clients.

A topic whose ``mirror.name`` is ``<m>`` or ``<m>.paused`` refuses every local write with
TOPIC_IS_MIRROR naming the mirror: a confluent-kafka producer's delivery report shows it and
nothing is appended; a transactional producer cannot add the partition to its transaction;
DeleteRecords is refused. ``<m>.stopped`` makes it writable, except while the mirror holds the
partition (its STOPPING sequence). The mirror's own appends (``AppendOrigin.MIRROR``) pass.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import KafkaException, Producer

from kcore.client import KafkaClient
from kcore.log.producer_state import AppendOrigin
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.records import RecordBatchBuilder
from kcore.testing import EmbeddedCluster
from tests.mirror.clusters import CLUSTER_CONFIG, create_mirror_topic, partition, set_mirror_name

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config=CLUSTER_CONFIG) as c:
        yield c


def _mirror_topic(cluster, mirror: str = "dr-east") -> str:
    name = f"mirrored-{uuid.uuid4().hex[:8]}"
    create_mirror_topic(cluster, name, uuid.uuid4(), 1, mirror)
    return name


def _produce_one(cluster, topic: str, **config) -> tuple[object, object]:
    """(error, message) of the delivery report of one confluent-kafka produce."""
    reports = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": False,
            "retries": 0,
            "acks": "all",
            **config,
        }
    )
    producer.produce(topic, b"value", key=b"k", on_delivery=lambda e, msg: reports.append((e, msg)))
    producer.flush(30)
    assert len(reports) == 1
    return reports[0]


def test_read_only_confluent_producer_to_a_mirror_topic_gets_topic_is_mirror(cluster):
    # librdkafka keeps the broker's message (rd_kafka_message_produce_errstr, 2.10+), but
    # confluent-kafka-python 2.16 reports only the code; kafka-python shows the message below.
    topic = _mirror_topic(cluster, "dr-east")
    error, _ = _produce_one(cluster, topic)
    assert error is not None
    assert error.code() == ErrorCode.TOPIC_IS_MIRROR
    assert partition(cluster, topic, 0).log_end_offset == 0


def test_read_only_kafka_python_producer_sees_the_mirror_named(cluster):
    from kafka import KafkaProducer

    topic = _mirror_topic(cluster, "dr-east")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, retries=0, acks="all")
    try:
        future = producer.send(topic, b"value")
        with pytest.raises(Exception) as caught:
            future.get(timeout=30)
    finally:
        producer.close(timeout=5)
    assert "dr-east" in str(caught.value), str(caught.value)
    assert "read-only mirror topic" in str(caught.value)
    assert partition(cluster, topic, 0).log_end_offset == 0


def test_read_only_paused_mirror_topic_stays_read_only(cluster):
    topic = _mirror_topic(cluster, "dr-east")
    set_mirror_name(cluster, topic, "dr-east.paused")
    error, _ = _produce_one(cluster, topic)
    assert error is not None and error.code() == ErrorCode.TOPIC_IS_MIRROR
    assert partition(cluster, topic, 0).log_end_offset == 0


def test_read_only_stopped_mirror_topic_is_writable_unless_held(cluster):
    topic = _mirror_topic(cluster, "dr-east")
    set_mirror_name(cluster, topic, "dr-east.stopped")
    rm = cluster.broker.replica_manager
    cluster._call(_sync, lambda: rm.hold_read_only((topic, 0), "dr-east"))
    error, _ = _produce_one(cluster, topic)
    assert error is not None and error.code() == ErrorCode.TOPIC_IS_MIRROR
    assert partition(cluster, topic, 0).log_end_offset == 0
    cluster._call(_sync, lambda: rm.release_read_only((topic, 0)))
    error, msg = _produce_one(cluster, topic)
    assert error is None
    assert msg.offset() == 0 and partition(cluster, topic, 0).log_end_offset == 1


def test_read_only_transactional_producer_cannot_add_a_mirror_partition(cluster):
    topic = _mirror_topic(cluster, "dr-west")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"t-{topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    with pytest.raises(KafkaException) as caught:
        producer.commit_transaction(30)
    assert (
        "TOPIC_IS_MIRROR" in str(caught.value)
        or "157" in str(caught.value)
        or (caught.value.args[0].code() == ErrorCode.TOPIC_IS_MIRROR)
    ), str(caught.value)
    assert partition(cluster, topic, 0).log_end_offset == 0


def test_read_only_delete_records_on_a_mirror_topic_is_refused(cluster):
    topic = _mirror_topic(cluster, "dr-east")
    # A mirrored batch goes in (the mirror's own origin), then a client's DeleteRecords fails.
    batch = _batch()
    cluster._call(
        _sync,
        lambda: cluster.broker.replica_manager.append_as_follower(
            (topic, 0), batch, now_ms=1, origin=AppendOrigin.MIRROR
        ),
    )
    assert partition(cluster, topic, 0).log_end_offset == 1

    async def delete():
        D = m.DeleteRecordsRequest
        async with KafkaClient(cluster.bootstrap_servers) as client:
            await client.refresh_metadata([topic])
            body = D(
                topics=[
                    D.DeleteRecordsTopic(
                        name=topic,
                        partitions=[D.DeleteRecordsPartition(partition_index=0, offset=1)],
                    )
                ],
                timeout_ms=5000,
            )
            return await client.request(await client.find_leader(topic, 0), body)

    response = trio.run(delete)
    assert response.topics[0].partitions[0].error_code == ErrorCode.TOPIC_IS_MIRROR
    assert partition(cluster, topic, 0).log_start_offset == 0


def test_read_only_client_append_refused_in_process_mirror_append_passes(cluster):
    topic = _mirror_topic(cluster, "dr-east")
    rm = cluster.broker.replica_manager
    batch = _batch()
    with pytest.raises(KafkaError) as caught:
        cluster._call(
            _sync,
            lambda: rm.append_records(topic, 0, batch, required_acks=1, now_ms=1),
        )
    assert caught.value.code == ErrorCode.TOPIC_IS_MIRROR
    assert "dr-east" in caught.value.message
    info = cluster._call(
        _sync,
        lambda: rm.append_records(
            topic, 0, batch, required_acks=1, now_ms=1, origin=AppendOrigin.MIRROR
        ),
    )
    assert info.first_offset == 0


def _batch() -> bytearray:
    builder = RecordBatchBuilder(base_offset=0)
    builder.append(1, b"k", b"v")
    return builder.build()


async def _sync(fn):
    return fn()


def test_read_only_add_partitions_to_txn_refuses_a_mirror_partition_only(cluster):
    from tests.server.test_transactions_wire import _add, _coordinator, _init

    mirrored = _mirror_topic(cluster, "dr-east")
    local = f"local-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(local)
    tid = f"txn-{mirrored}"

    async def add():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            node = await _coordinator(client, tid)
            pid, epoch = await _init(client, node, tid)
            refused = await _add(client, node, tid, pid, epoch, mirrored)
            accepted = await _add(client, node, tid, pid, epoch, local)
            return refused, accepted

    refused, accepted = trio.run(add)
    assert refused == ErrorCode.TOPIC_IS_MIRROR
    assert accepted == ErrorCode.NONE
