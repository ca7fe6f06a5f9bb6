"""Helpers for the /v1/mirrors tests: two real clusters (the destination with its admin
endpoint), records written with confluent-kafka on the source and read back with kafka-python
on the destination, and waits that poll the HTTP API only."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import httpx
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from kcore.testing import EmbeddedCluster

WAIT_S = 90.0  # the machine is shared: generous, never asserted as a duration
CONFIG = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


@contextlib.contextmanager
def source_and_destination(
    destination_config: dict[str, str] | None = None,
) -> Iterator[tuple[EmbeddedCluster, EmbeddedCluster]]:
    """A source cluster and a destination with its admin endpoint (small internal topics)."""
    with (
        EmbeddedCluster(config=CONFIG) as source,
        EmbeddedCluster(config={**CONFIG, **(destination_config or {})}, admin=True) as destination,
    ):
        yield source, destination


def produce(
    bootstrap: str, topic: str, count: int, *, partitions: int, start: int = 0, pad: int = 0
) -> None:
    """``record-<i>`` for i from ``start``, round-robin over the partitions (``pad`` more
    bytes of padding each)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        value = f"record-{i}".encode() + b"." * pad
        producer.produce(topic, value=value, partition=i % partitions)
    assert producer.flush(60) == 0


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every record of ``topic`` from the beginning, read with kafka-python."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        isolation_level="read_committed",
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the destination's records did not come"
            for records in consumer.poll(timeout_ms=1000).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


def wait_for(predicate: Callable[[], object], what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def partitions_of(http: httpx.Client, mirror: str) -> dict[tuple[str, int], dict]:
    answer = http.get(f"/v1/mirrors/{mirror}")
    assert answer.status_code == 200, answer.text
    return {
        (t["topic"], p["partition"]): p for t in answer.json()["topics"] for p in t["partitions"]
    }


def wait_states(http: httpx.Client, mirror: str, state: str, count: int, **kw) -> dict:
    """Wait until ``count`` partitions of ``mirror`` are all in ``state`` (over HTTP)."""

    def reached():
        seen = partitions_of(http, mirror)
        ok = len(seen) == count and all(p["state"] == state for p in seen.values())
        return seen if ok else None

    return wait_for(reached, f"{count} partitions of {mirror} {state}", **kw)


def wait_in_sync(http: httpx.Client, mirror: str, count: int) -> dict:
    def synced():
        seen = partitions_of(http, mirror)
        ok = len(seen) == count and all(
            p["state"] == "MIRRORING" and p["lag"] == 0 for p in seen.values()
        )
        return seen if ok else None

    return wait_for(synced, f"{mirror} in sync")


def finished(http: httpx.Client, answer: httpx.Response) -> dict:
    """The result of a topic operation: at once (200), or polled at its Location (202)."""
    assert answer.status_code in (200, 202), answer.text
    if answer.status_code == 200:
        return answer.json()
    location = answer.headers["Location"]

    def done():
        doc = http.get(location).json()
        return doc if doc["status"] != "running" else None

    return wait_for(done, f"operation {location}")
