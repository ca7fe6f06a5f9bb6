"""KIP-467: a batch refused for some of its records names them (Produce v8+ RecordErrors).

librdkafka fails the records the broker names with the broker's error and every other record
of the batch with its own ``_INVALID_DIFFERENT_RECORD``; nothing of the batch is appended.
"""

import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kcore.client.connection import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import RecordBatchBuilder
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _produce_one_batch(cluster, topic: str, messages: list[dict]) -> dict[int, KafkaError]:
    """Produce ``messages`` as one batch; returns each message's error by its position."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "linger.ms": 60_000,  # flush() sends them all at once, in one batch
            "batch.num.messages": len(messages),
            "enable.idempotence": False,
            "retries": 0,
        }
    )
    errors: dict[int, KafkaError] = {}
    for position, message in enumerate(messages):

        def report(err, msg, position=position):
            if err is not None:
                errors[position] = err

        producer.produce(topic, partition=0, on_delivery=report, **message)
    assert producer.flush(30) == 0, "messages were not delivered"
    return errors


def _log_end_offset(cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_produce_keyless_records_on_compacted_topic_fail_alone(cluster):
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, config={"cleanup.policy": "compact"})
    keyless = set(range(5, 100, 10))
    messages = [
        {"value": b"v%d" % i, **({} if i in keyless else {"key": b"k%d" % i})} for i in range(100)
    ]
    errors = _produce_one_batch(cluster, topic, messages)
    assert len(errors) == 100
    assert {i for i, e in errors.items() if e.code() == KafkaError.INVALID_RECORD} == keyless
    others = {i for i, e in errors.items() if e.code() == KafkaError._INVALID_DIFFERENT_RECORD}
    assert others == set(range(100)) - keyless
    assert _log_end_offset(cluster, topic) == 0


def test_produce_records_with_timestamps_out_of_range_fail_alone(cluster):
    topic = f"timestamps-{uuid.uuid4().hex[:8]}"
    window = {
        "message.timestamp.before.max.ms": "3600000",
        "message.timestamp.after.max.ms": "3600000",
    }
    cluster.create_topic(topic, config=window)
    now_ms = int(time.time() * 1000)
    # The first record is too old (so the batch header shows it); 4 is too old and 7 too new.
    shift = {0: -86_400_000, 4: -86_400_000, 7: 86_400_000}
    messages = [{"value": b"v%d" % i, "timestamp": now_ms + shift.get(i, 0)} for i in range(10)]
    errors = _produce_one_batch(cluster, topic, messages)
    # librdkafka fails a record the broker names with INVALID_RECORD whatever the partition's
    # code (INVALID_TIMESTAMP here, see the wire test below).
    assert {i for i, e in errors.items() if e.code() == KafkaError.INVALID_RECORD} == set(shift)
    others = {i for i, e in errors.items() if e.code() == KafkaError._INVALID_DIFFERENT_RECORD}
    assert others == set(range(10)) - set(shift)
    assert _log_end_offset(cluster, topic) == 0


def _produce_request(topic: str, records) -> m.ProduceRequest:
    P = m.ProduceRequest
    return P(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def _partition_answers(cluster, topic: str, records, versions: tuple[int, ...]) -> list:
    """The partition answer of a produce of ``records`` at each of ``versions``."""

    async def main():
        with trio.fail_after(30):
            conn = await BrokerConnection.connect("127.0.0.1", cluster.port)
            async with conn:
                return [await conn.request(_produce_request(topic, records), v) for v in versions]

    return [r.responses[0].partition_responses[0] for r in trio.run(main)]


def test_produce_response_names_bad_records_from_v8_only(cluster):
    topic = f"wire-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, config={"cleanup.policy": "compact"})
    builder = RecordBatchBuilder()
    now_ms = int(time.time() * 1000)
    for i in range(6):
        builder.append(now_ms, key=None if i in (1, 4) else b"k", value=b"v")
    v8, v7 = _partition_answers(cluster, topic, builder.build(), (8, 7))
    assert v8.error_code == v7.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in v8.record_errors] == [1, 4]
    assert all(
        e.batch_index_error_message
        == f"Compacted topic cannot accept message without key in topic partition {topic}-0"
        for e in v8.record_errors
    )
    assert v8.error_message.startswith("One or more records have been rejected due to 2 record")
    assert v8.base_offset == -1
    assert v7.record_errors == []  # v7 cannot carry them
    assert _log_end_offset(cluster, topic) == 0


def test_produce_response_names_records_with_timestamps_out_of_range(cluster):
    topic = f"wire-ts-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, config={"message.timestamp.before.max.ms": "60000"})
    builder = RecordBatchBuilder()
    now_ms = int(time.time() * 1000)
    for i in range(4):
        builder.append(now_ms - (3_600_000 if i in (0, 2) else 0), key=b"k", value=b"v")

    (part,) = _partition_answers(cluster, topic, builder.build(), (9,))
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert part.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in part.record_errors] == [0, 2]
    assert part.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now_ms - 3_600_000} of message with offset 0 is out of range."
    )
    assert _log_end_offset(cluster, topic) == 0
