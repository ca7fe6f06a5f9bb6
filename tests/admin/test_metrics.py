"""``GET /metrics`` against a running broker: parsed by prometheus-client's parser, and every
figure checked against what really happened (records produced and fetched, errors answered,
partitions, coordinators), with and without bearer tokens, under 1,000 concurrent scrapes."""

from __future__ import annotations

import threading

import httpx
import pytest
import trio
from confluent_kafka import Consumer, Producer

from kcore.client import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import error_info
from kcore.testing import EmbeddedCluster
from tests.admin.metrics_util import Scrape, scrape

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(admin=True) as cluster:
        yield cluster


def _produce(cluster, topic: str, count: int, partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    failed = []
    for i in range(count):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(
            topic, f"value-{i}".encode(), on_delivery=lambda e, _: e and failed.append(e), **kwargs
        )
    assert producer.flush(60) == 0 and not failed


def _consume_all(cluster, topic: str, expected: int, group: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen = 0
    try:
        for _ in range(600):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen += 1
            if seen >= expected:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def test_bytes_and_records_per_topic_match_the_logs(cluster):
    cluster.create_topic("traffic", partitions=3)
    _produce(cluster, "traffic", 300)
    after = scrape(cluster.admin_url)
    assert after["kcore_topic_records_in_total", {"topic": "traffic"}] == 300
    # Every produced batch was appended as sent: bytes in are the logs' bytes.
    log_bytes = after.total("kcore_log_size_bytes", topic="traffic")
    assert log_bytes > 300 * len("value-0")
    assert after["kcore_topic_bytes_in_total", {"topic": "traffic"}] == log_bytes
    assert len(after.matching("kcore_log_size_bytes", topic="traffic")) == 3

    assert _consume_all(cluster, "traffic", 300, group="metrics-group") == 300
    consumed = scrape(cluster.admin_url)
    assert consumed["kcore_topic_bytes_out_total", {"topic": "traffic"}] >= log_bytes
    assert consumed.get("kcore_topic_replication_bytes_out_total", {"topic": "traffic"}) == 0
    assert consumed.total("kcore_groups") >= 1  # the group, Empty now that it left
    assert consumed.get("kcore_groups", {"state": "Empty"}) >= 1
    assert consumed["kcore_coordinator_partitions", {"coordinator": "group"}] >= 1


def test_requests_and_latency_histograms_per_api(cluster):
    before = scrape(cluster.admin_url)
    cluster.create_topic("latency")
    _produce(cluster, "latency", 20, partition=0)
    after = scrape(cluster.admin_url)
    produced = after["kcore_requests_total", {"api": "Produce"}]
    assert produced > before.get("kcore_requests_total", {"api": "Produce"})
    # The histogram counts every request once, and its buckets are cumulative.
    assert after["kcore_request_latency_seconds_count", {"api": "Produce"}] == produced
    buckets = after.matching("kcore_request_latency_seconds_bucket", api="Produce")
    by_bound = sorted((float(dict(labels)["le"]), value) for labels, value in buckets.items())
    assert by_bound[-1] == (float("inf"), produced)
    assert all(a[1] <= b[1] for a, b in zip(by_bound, by_bound[1:]))
    assert after["kcore_request_latency_seconds_sum", {"api": "Produce"}] > 0
    assert after["kcore_requests_total", {"api": "Metadata"}] >= 1
    assert after["kcore_connections", {}] >= 0


def test_request_errors_are_counted_by_api_and_error(cluster):
    cluster.create_topic("errors")

    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            C = m.CreateTopicsRequest
            await client.request(
                "any",
                C(
                    topics=[C.CreatableTopic(name="bad name!", num_partitions=1,
                                             replication_factor=1)],
                    timeout_ms=10_000,
                ),
            )  # fmt: skip
            P = m.ProduceRequest
            return await client.request(
                "any",
                P(
                    acks=1,
                    timeout_ms=10_000,
                    topic_data=[
                        P.TopicProduceData(
                            name="errors",
                            partition_data=[P.PartitionProduceData(index=7, records=b"")],
                        )
                    ],
                ),
            )

    before = scrape(cluster.admin_url)
    produced = trio.run(main)
    after = scrape(cluster.admin_url)

    def grew(api: str, error: str) -> float:
        labels = {"api": api, "error": error}
        return after.get("kcore_request_errors_total", labels) - before.get(
            "kcore_request_errors_total", labels
        )

    assert grew("CreateTopics", "INVALID_TOPIC_EXCEPTION") == 1
    # Partition 7 of a one-partition topic, and no records: the partition's error is counted.
    code = produced.responses[0].partition_responses[0].error_code
    assert code != 0
    assert grew("Produce", error_info(code)[0]) == 1


def test_partition_and_controller_figures(cluster):
    cluster.create_topic("counted", partitions=4)
    figures = scrape(cluster.admin_url)
    hosted = len(cluster.broker.replica_manager.partitions)
    assert figures["kcore_partitions", {}] == hosted
    assert figures["kcore_leader_partitions", {}] == hosted  # one node leads everything
    assert figures["kcore_under_replicated_partitions", {}] == 0
    assert figures["kcore_offline_partitions", {}] == 0
    assert figures["kcore_active_controller", {}] == 1
    image = cluster.broker.metadata_image
    assert figures["kcore_global_topics", {}] == len(image.topics.by_name)
    assert figures["kcore_global_partitions", {}] == sum(
        len(t.partitions) for t in image.topics.by_name.values()
    )
    assert figures.families["kcore_log_size_bytes"].type == "gauge"
    assert figures.families["kcore_requests"].type == "counter"
    assert figures.families["kcore_request_latency_seconds"].type == "histogram"


def test_metrics_need_the_token_when_tokens_are_on(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("User:prometheus scrape-token\n")
    with EmbeddedCluster(admin=True, config={"admin.auth.token.file": str(tokens)}) as cluster:
        refused = httpx.get(f"{cluster.admin_url}/metrics", timeout=30)
        assert refused.status_code == 401 and refused.json()["error"] == "UNAUTHENTICATED"
        wrong = httpx.get(
            f"{cluster.admin_url}/metrics", headers={"Authorization": "Bearer nope"}, timeout=30
        )
        assert wrong.status_code == 401
        figures = scrape(cluster.admin_url, token="scrape-token")
        assert figures["kcore_active_controller", {}] == 1


def test_a_thousand_concurrent_scrapes_while_a_client_keeps_producing(cluster):
    cluster.create_topic("busy")
    stop = threading.Event()
    sent = []
    failed = []

    def keep_producing():
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        i = 0
        while not stop.is_set():
            producer.produce(
                "busy", f"r{i}".encode(), on_delivery=lambda e, _: (failed if e else sent).append(1)
            )
            producer.poll(0)
            i += 1
            if i % 50 == 0:
                producer.flush(30)
        assert producer.flush(60) == 0

    producing = threading.Thread(target=keep_producing)
    producing.start()
    statuses: list[int] = []
    bodies: list[str] = []
    try:

        async def scrape_many():
            limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
            async with httpx.AsyncClient(limits=limits, timeout=120) as http:

                async def one():
                    answer = await http.get(f"{cluster.admin_url}/metrics")
                    statuses.append(answer.status_code)
                    bodies.append(answer.text)

                async with trio.open_nursery() as nursery:
                    for _ in range(1000):
                        nursery.start_soon(one)

        trio.run(scrape_many)
        during = len(sent)
    finally:
        stop.set()
        producing.join(120)
    assert statuses == [200] * 1000
    assert all("kcore_requests_total" in body for body in bodies[:10])
    assert not failed and during > 0, "the Kafka listener stopped serving during the scrapes"
    # Every acknowledged record is in the log, and the counter says so.
    end = cluster.leader_partition(("busy", 0)).log_end_offset
    assert end == len(sent)
    assert Scrape(httpx.get(f"{cluster.admin_url}/metrics", timeout=60).text)[
        "kcore_topic_records_in_total", {"topic": "busy"}
    ] == len(sent)
