"""DescribeLogDirs against a running kcore, with raw requests (confluent-kafka 2.16's
AdminClient has no describe_log_dirs)."""

import shutil
import time
from pathlib import Path

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.protocol import messages as m
from kcore.record import RecordBatchBuilder
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(60)

REQ = m.DescribeLogDirsRequest


async def _produce(conn, topic, n, size):
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(int(time.time() * 1000), key=str(i).encode(), value=b"x" * size)
    P = m.ProduceRequest
    response = await conn.request(
        P(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                P.TopicProduceData(
                    name=topic,
                    partition_data=[P.PartitionProduceData(index=0, records=builder.build())],
                )
            ],
        ),
        9,
    )
    assert response.responses[0].partition_responses[0].error_code == 0


def _parts(result):
    return {(t.name, p.partition_index): p for t in result.topics for p in t.partitions}


def test_describe_log_dirs_reports_sizes_lag_and_volume():
    async def main():
        with trio.fail_after(40):
            async with EmbeddedCluster() as c:
                await c.acreate_topic("ld-a", partitions=2)
                await c.acreate_topic("ld-b", partitions=1)
                conn = await BrokerConnection.connect("127.0.0.1", c.port)
                async with conn:
                    assert conn.api_versions[35] == (1, 5)  # as Kafka 4.x
                    await _produce(conn, "ld-a", 20, 500)
                    await _produce(conn, "ld-b", 3, 10)
                    lm = c.broker.log_manager
                    logdir = Path(lm.log_dirs[0]).absolute()

                    # null topics: every partition
                    for version in range(1, 6):
                        r = await conn.request(REQ(topics=None), version)
                        assert [x.log_dir for x in r.results] == [str(logdir)]
                        (result,) = r.results
                        assert result.error_code == 0
                        parts = _parts(result)
                        assert set(parts) == {("ld-a", 0), ("ld-a", 1), ("ld-b", 0)}
                        for (t, p), info in parts.items():
                            plog = lm.logs[(t, p)]
                            on_disk = sum(f.stat().st_size for f in plog.dir.glob("*.log"))
                            assert info.partition_size == on_disk
                            assert info.offset_lag == 0 and info.is_future_key is False
                        assert parts[("ld-a", 0)].partition_size > 20 * 500
                        assert parts[("ld-a", 1)].partition_size == 0
                        if version >= 4:
                            usage = shutil.disk_usage(logdir)
                            assert result.total_bytes == usage.total
                            assert 0 < result.usable_bytes <= usage.total
                        elif version == 3:
                            assert r.error_code == 0

                    # a selection: unknown topics and partitions are simply absent
                    r = await conn.request(
                        REQ(
                            topics=[
                                REQ.DescribableLogDirTopic(topic="ld-a", partitions=[0, 7]),
                                REQ.DescribableLogDirTopic(topic="nope", partitions=[0]),
                            ]
                        ),
                        4,
                    )
                    assert set(_parts(r.results[0])) == {("ld-a", 0)}
                    assert [t.name for t in r.results[0].topics] == ["ld-a"]

                    # an empty list describes no partition, but still every directory
                    r = await conn.request(REQ(topics=[]), 4)
                    assert len(r.results) == 1 and r.results[0].topics == []

    trio.run(main)


def test_describe_log_dirs_with_kafka_python_admin():
    """kafka-python's KafkaAdminClient.describe_log_dirs (confluent-kafka has none)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient

    with EmbeddedCluster() as c:
        c.create_topic("ld-kp", partitions=2)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers})
        for i in range(50):
            producer.produce("ld-kp", value=b"y" * 200, partition=i % 2)
        assert producer.flush(10) == 0
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        try:
            (broker,) = admin.describe_log_dirs()
        finally:
            admin.close()
        assert broker["broker"] == 1
        (logdir,) = broker["log_dirs"]
        assert logdir["error_code"] == 0
        assert logdir["log_dir"] == str(Path(c.broker.log_manager.log_dirs[0]).absolute())
        assert logdir["total_bytes"] > 0 and 0 < logdir["usable_bytes"] <= logdir["total_bytes"]
        (topic,) = logdir["topics"]
        assert topic["name"] == "ld-kp"
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        for index in (0, 1):
            plog = c.broker.log_manager.logs[("ld-kp", index)]
            assert sizes[index] == plog.size_in_bytes() > 25 * 200
