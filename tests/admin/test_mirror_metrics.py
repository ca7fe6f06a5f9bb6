"""The cluster mirror's figures on ``/metrics`` (D-32) between two embedded clusters: what
DescribeClusterMirrors reports, to the record, and what the destination's logs hold."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from kcore.testing import MirroredClusters, free_port
from tests.admin.metrics_util import scrape

pytestmark = pytest.mark.timeout(300)

OPEN_TXN_RECORDS = 5


def _produce(cluster, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def test_mirror_figures_agree_with_describe_and_the_logs():
    url = f"http://127.0.0.1:{free_port()}"
    config = {"admin.listeners": url, "mirror.metadata.refresh.interval.ms": "500"}
    with MirroredClusters(destination_config=config) as dr:
        dr.source.create_topic("orders", partitions=2)
        _produce(dr.source, "orders", 0, 100)
        _produce(dr.source, "orders", 1, 40)
        # An open transaction on partition 1: the source's high watermark passes its last
        # stable offset and the mirror copies only up to the latter (D-19), so partition 1
        # lags by the transaction's records for as long as it stays open: a lag that holds
        # still between Describe and the scrape.
        txn = Producer(
            {"bootstrap.servers": dr.source.bootstrap_servers, "transactional.id": "open-txn"}
        )
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(OPEN_TXN_RECORDS):
            txn.produce("orders", f"t{i}".encode(), partition=1)
        assert txn.flush(30) == 0
        try:
            dr.mirror_topics("orders")
            dr.wait_in_sync()
            described = dr.describe()
            figures = scrape(url)
            assert described[("orders", 1)].lag == OPEN_TXN_RECORDS
            for (topic, index), d in described.items():
                labels = {"mirror": "dr", "topic": topic, "partition": str(index)}
                assert figures["kcore_mirror_partition_lag_records", labels] == d.lag
                assert (
                    figures["kcore_mirror_partition_source_high_watermark", labels]
                    == d.source_offset
                )
                assert (
                    figures["kcore_mirror_partition_source_last_stable_offset", labels]
                    == d.source_last_stable_offset
                )
                assert (
                    figures["kcore_mirror_partition_destination_log_end_offset", labels]
                    == d.destination_offset
                )
                assert figures["kcore_mirror_partition_state", {**labels, "state": d.state}] == 1
                assert figures["kcore_mirror_partition_retries", labels] == d.retry_count
                assert figures["kcore_mirror_partition_last_fetch_age_seconds", labels] >= 0
                # Every byte and record the destination's log holds was mirrored by it.
                assert (
                    figures["kcore_mirror_partition_bytes_total", labels]
                    == figures["kcore_log_size_bytes", {"topic": topic, "partition": str(index)}]
                )
            records = {
                i: figures[
                    "kcore_mirror_partition_records_total",
                    {"mirror": "dr", "topic": "orders", "partition": str(i)},
                ]
                for i in (0, 1)
            }
            assert records == {0: 100, 1: 40}
            assert figures["kcore_mirror_lag_records", {"mirror": "dr"}] == OPEN_TXN_RECORDS
            assert figures["kcore_mirror_partitions", {"mirror": "dr", "state": "MIRRORING"}] == 2
            assert figures["kcore_mirror_connection_state", {"mirror": "dr", "state": "connected"}]
            # The metadata sync runs on the mirror's coordinator: this single broker.
            deadline = time.monotonic() + 60
            while figures.get("kcore_mirror_last_sync_age_seconds", {"mirror": "dr"}, None) is None:
                assert time.monotonic() < deadline, "no metadata sync round completed"
                time.sleep(0.2)
                figures = scrape(url)
            assert figures["kcore_mirror_last_sync_age_seconds", {"mirror": "dr"}] >= 0
            assert figures["kcore_mirror_sync_errors", {"mirror": "dr"}] == 0
        finally:
            txn.abort_transaction(30)


def test_an_unreachable_source_shows_in_the_connection_state():
    url = f"http://127.0.0.1:{free_port()}"
    with MirroredClusters(destination_config={"admin.listeners": url}) as dr:
        dr.source.create_topic("events")
        _produce(dr.source, "events", 0, 10)
        dr.mirror_topics("events")
        dr.wait_in_sync()
        assert scrape(url)["kcore_mirror_connection_state", {"mirror": "dr", "state": "connected"}]
        dr.source.stop()
        deadline = time.monotonic() + 90
        while True:
            states = scrape(url).matching("kcore_mirror_connection_state", mirror="dr")
            if states.get(frozenset({("mirror", "dr"), ("state", "unreachable")})) == 1:
                break
            assert time.monotonic() < deadline, f"still {states}"
            time.sleep(0.2)
