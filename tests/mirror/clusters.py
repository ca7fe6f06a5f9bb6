"""Helpers for tests with real kcore clusters as mirror sources and destinations.

``mirror.name`` is internal (spec M-04: only the controller's mirror operations set it), so the
tests set it the way those operations will: a ``ConfigRecord`` written through the controller
of the embedded cluster. Destination topics are created through the controller's CreateTopics
with ``MirrorInfo`` carrying the source topic id (M-72), as StartMirrorTopics will.
"""

from __future__ import annotations

import time
import uuid

import trio

from kcore.client import KafkaClient
from kcore.client import admin as kadmin
from kcore.metadata.context import ControllerResult
from kcore.metadata.image import ConfigResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import KafkaError
from kcore.record.batch import iter_batches

CLUSTER_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


def set_mirror_name(cluster, topic: str, value: str | None) -> None:
    """Write ``mirror.name=value`` (None: remove it) for ``topic`` through the controller."""
    record = m.ConfigRecord(
        resource_type=int(ConfigResourceType.TOPIC), resource_name=topic, name="mirror.name",
        value=value,
    )  # fmt: skip

    async def write():
        await cluster.broker.controller_call(lambda c, now: ControllerResult.of([record], None))
        with trio.fail_after(10):  # the image has it once committed; the cache follows
            while cluster.broker._topic_config(topic).mirror != (value or None):
                await trio.sleep(0.01)

    cluster._call(write)


def create_mirror_topic(
    cluster, name: str, topic_id: uuid.UUID, partitions: int, mirror: str | None
) -> None:
    """Create ``name`` with the source's ``topic_id`` (CreateTopics MirrorInfo) and, if given,
    ``mirror.name=mirror``; waits until this node hosts every partition."""
    cluster.create_topic(name, partitions, topic_id=topic_id)
    if mirror is not None:
        set_mirror_name(cluster, name, mirror)


def topic_id(cluster, topic: str) -> uuid.UUID:
    return cluster.broker.metadata_image.topics.by_name[topic].topic_id


def partition(cluster, topic: str, index: int):
    return cluster.broker.replica_manager.partitions[(topic, index)]


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def raw_batches(cluster, topic: str, index: int, start: int, end: int) -> list[bytes]:
    """The record batches of ``topic``-``index`` from ``start`` up to ``end``, as bytes, read
    with plain read_uncommitted Fetch requests over kcore's client."""

    async def read():
        out: list[bytes] = []
        offset = start
        async with KafkaClient(cluster.bootstrap_servers) as client:
            await client.refresh_metadata([topic])
            while offset < end:
                response = await kadmin.fetch(
                    client, {(topic, index): offset}, max_wait_ms=0, partition_max_bytes=1 << 22
                )
                data = response.responses[0].partitions[0]
                if data.error_code:
                    raise KafkaError(data.error_code, f"fetch {topic}-{index} at {offset}")
                got = 0
                for batch in iter_batches(data.records or b""):
                    if batch.last_offset < offset or batch.base_offset >= end:
                        continue
                    out.append(bytes(batch.buffer))
                    offset = batch.last_offset + 1
                    got += 1
                if not got:
                    raise AssertionError(f"no batch at {offset} of {topic}-{index}")
        return out

    return trio.run(read)
