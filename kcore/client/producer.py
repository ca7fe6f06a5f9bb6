"""A small Kafka producer on :class:`~kcore.client.cluster.KafkaClient`: what
``kcore console-producer`` sends with, usable from any Trio code.

Theory of operation
-------------------
:meth:`Producer.send` picks the record's partition (Kafka's built-in partitioner: murmur2 of the
key, a sticky partition for null keys; or ``RoundRobinPartitioner``), appends the record to
that partition's open batch (a :class:`~kcore.record.RecordBatchBuilder`, compressed with
``compression.type``), and returns a :class:`Delivery` that is filled in once the batch is
acknowledged. A batch is sealed when it reaches ``batch.size``; :meth:`Producer.flush` sends
every batch and waits for the answers, and :meth:`Producer.poll` sends what is due (sealed
batches, and open ones older than ``linger.ms``). Nothing runs in the background: the caller
decides when bytes move, as with the rest of :mod:`kcore.client`.

Batches go to the partition leader in the metadata, one Produce request per leader carrying at
most one batch per partition, so a partition's batches are never reordered (Kafka's
``max.in.flight.requests.per.connection=1``). A partition answer with a retriable error
(NOT_LEADER_OR_FOLLOWER, a leader election in progress, a broken connection, a timeout ...)
refreshes the topic's metadata — following a leader that moved — and the batch is sent again
after ``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``), up to ``retries`` times and
within ``delivery.timeout.ms``; then, or at once for a non-retriable error, its deliveries fail
with the KafkaError. Without idempotence a retried batch the broker did write before a broken
connection is written twice — Kafka's at-least-once, the reason Kafka defaults to idempotence,
which this producer refuses (``enable.idempotence=true``) rather than fake.

``acks=0`` sends without waiting for an answer: the deliveries succeed with offset -1.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import trio

from kcore.client.admin import produce
from kcore.client.client_configs import ProducerConfig
from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError, NetworkError, RequestTimeout
from kcore.client.partitioner import (
    ROUND_ROBIN_PARTITIONER,
    BuiltInPartitioner,
    RoundRobinPartitioner,
)
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import Header, RecordBatchBuilder

__all__ = ["Delivery", "Producer", "ProducerClosed"]

# Bytes a record adds to a batch besides key, value and headers (length, attributes, deltas,
# lengths of key/value/header count as varints): an upper bound used to size batches.
_RECORD_OVERHEAD = 21


class ProducerClosed(ClientError):
    """``send`` after ``aclose``."""


@dataclass(slots=True)
class Delivery:
    """The outcome of one sent record: ``offset`` (-1 with acks=0) and ``timestamp`` once
    acknowledged, or ``error`` (a KafkaError or ClientError). ``done`` says which."""

    topic: str
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    offset: int = -1
    error: BaseException | None = None
    done: bool = False


@dataclass(slots=True)
class _Batch:
    topic: str
    partition: int
    builder: RecordBatchBuilder
    created: float  # trio.current_time() of the first record
    deliveries: list[Delivery] = field(default_factory=list)
    size: int = 0
    attempts: int = 0
    deadline: float = math.inf  # delivery.timeout.ms after creation
    sealed: bool = False


class Producer:
    """Produce records to a cluster through ``client`` with ``config`` (see module docstring).

    Usage::

        async with KafkaClient("127.0.0.1:9092") as client:
            producer = Producer(client, producer_config({"acks": "all"}))
            delivery = await producer.send("orders", b"value", key=b"k")
            await producer.flush()
            assert delivery.error is None, delivery.error
    """

    def __init__(
        self, client: KafkaClient, config: ProducerConfig, *, rng: random.Random | None = None
    ) -> None:
        self.client = client
        self.config = config
        rng = rng or random.Random()
        if config.partitioner_class == ROUND_ROBIN_PARTITIONER:
            self._partitioner: Any = RoundRobinPartitioner(rng=rng)
        else:
            self._partitioner = BuiltInPartitioner(
                max(config.batch_size, 1), ignore_keys=config.partitioner_ignore_keys, rng=rng
            )
        self._rng = rng
        self._open: dict[tuple[str, int], _Batch] = {}
        self._queued: list[_Batch] = []  # sealed, in the order they were sealed
        self._buffered = 0  # bytes of records in _open and _queued
        self._metadata_at: dict[str, float] = {}
        self._closed = False

    # -- appending ---------------------------------------------------------------------------

    async def partitions_of(self, topic: str) -> int:
        """How many partitions ``topic`` has, from metadata fetched when missing or older than
        ``metadata.max.age.ms``; the topic is auto-created where the broker allows, as Kafka's
        producer asks. Raises KafkaError (UNKNOWN_TOPIC_OR_PARTITION ...) after
        ``max.block.ms``."""
        now = trio.current_time()
        info = self.client.metadata.topics.get(topic) if self.client.metadata else None
        fresh = (
            now - self._metadata_at.get(topic, -math.inf) < self.config.metadata_max_age_ms / 1e3
        )
        if info is not None and info.partitions and fresh:
            return len(info.partitions)
        deadline = now + self.config.max_block_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            error: BaseException
            try:
                md = await self.client.refresh_metadata([topic], allow_auto_topic_creation=True)
                self._metadata_at[topic] = trio.current_time()
                info = md.topics.get(topic)
                if info is not None and info.partitions:
                    return len(info.partitions)
                code = md.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                error = KafkaError(code, f"topic {topic!r}")
                if not error.retriable:
                    raise error
            except (NetworkError, RequestTimeout) as e:
                error = e
            if trio.current_time() >= deadline:
                if isinstance(error, KafkaError):
                    raise KafkaError(
                        error.code,
                        f"Topic {topic} not present in metadata after "
                        f"{self.config.max_block_ms} ms.",
                    )
                raise error
            await trio.sleep(min(self._backoff(attempt), max(deadline - trio.current_time(), 0)))

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[Header] = (),
        *,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> Delivery:
        """Append one record; the returned :class:`Delivery` is filled by a later
        :meth:`poll` or :meth:`flush`. ``timestamp`` defaults to now (CreateTime, ms).

        Raises KafkaError for a topic that does not exist, a partition out of range
        (UNKNOWN_TOPIC_OR_PARTITION) or a record above ``max.request.size``
        (MESSAGE_TOO_LARGE); sends queued batches first when ``buffer.memory`` is full.
        """
        if self._closed:
            raise ProducerClosed("the producer is closed")
        headers = list(headers)
        count = await self.partitions_of(topic)
        if partition is None:
            partition = self._partitioner.partition(topic, key, count)
        elif not 0 <= partition < count:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Partition {partition} of topic {topic} with partition count {count} is not "
                "present in metadata",
            )
        size = _record_size(key, value, headers)
        if size + 61 > self.config.max_request_size:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The message is {size + 61} bytes when serialized which is larger than "
                f"{self.config.max_request_size}, which is the value of the max.request.size "
                "configuration.",
            )
        if self._buffered + size > self.config.buffer_memory and self._buffered:
            await self.flush()
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        batch = self._open.get((topic, partition))
        if batch is not None and batch.size and batch.size + size > self.config.batch_size:
            self._seal(batch)
            batch = None
        if batch is None:
            batch = self._new_batch(topic, partition)
        batch.builder.append(timestamp, key, value, headers)
        delivery = Delivery(topic, partition, timestamp, key, value)
        batch.deliveries.append(delivery)
        batch.size += size
        self._buffered += size
        self._partitioner.produced(topic, partition, size)
        if batch.size >= self.config.batch_size:
            self._seal(batch)
        return delivery

    def _new_batch(self, topic: str, partition: int) -> _Batch:
        now = trio.current_time()
        builder = RecordBatchBuilder(
            compression=self.config.compression_type,
            compression_level=self.config.compression_level,
        )
        batch = _Batch(topic, partition, builder, now)
        batch.deadline = now + self.config.delivery_timeout_ms / 1000
        self._open[(topic, partition)] = batch
        return batch

    def _seal(self, batch: _Batch) -> None:
        if not batch.sealed:
            batch.sealed = True
            self._open.pop((batch.topic, batch.partition), None)
            self._queued.append(batch)

    # -- sending -----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records appended and not yet acknowledged (or failed)."""
        return sum(len(b.deliveries) for b in (*self._open.values(), *self._queued))

    def next_linger_deadline(self) -> float:
        """The ``trio.current_time()`` at which :meth:`poll` has an open batch to send
        (``inf`` when nothing is buffered)."""
        if self._queued:
            return trio.current_time()
        linger = self.config.linger_ms / 1000
        return min((b.created + linger for b in self._open.values()), default=math.inf)

    async def poll(self) -> None:
        """Send the batches that are due: sealed ones and open ones past ``linger.ms``."""
        now = trio.current_time()
        linger = self.config.linger_ms / 1000
        for batch in list(self._open.values()):
            if now >= batch.created + linger:
                self._seal(batch)
        await self._drain()

    async def flush(self) -> None:
        """Send every buffered record and wait until each is acknowledged or failed."""
        for batch in list(self._open.values()):
            self._seal(batch)
        await self._drain()

    async def _drain(self) -> None:
        queued, self._queued = self._queued, []
        while queued:
            # One batch per partition per round keeps each partition's batches in order.
            first: dict[tuple[str, int], _Batch] = {}
            later: list[_Batch] = []
            for batch in queued:
                if (batch.topic, batch.partition) in first:
                    later.append(batch)
                else:
                    first[(batch.topic, batch.partition)] = batch
            retry = await self._send_round(list(first.values()))
            if retry:
                await trio.sleep(self._backoff(max(b.attempts for b in retry)))
            queued = retry + later

    async def _send_round(self, batches: list[_Batch]) -> list[_Batch]:
        """Send ``batches`` (distinct partitions) to their leaders; the ones to retry."""
        by_leader: dict[int, list[_Batch]] = {}
        retry: list[_Batch] = []
        for batch in batches:
            batch.attempts += 1
            try:
                leader = self.client.leader_for(batch.topic, batch.partition)
            except KafkaError:
                try:
                    leader = await self.client.find_leader(
                        batch.topic, batch.partition, refresh=True
                    )
                except (KafkaError, NetworkError, RequestTimeout) as e:
                    self._failed_attempt(batch, e, retry)
                    continue
            by_leader.setdefault(leader, []).append(batch)
        async with trio.open_nursery() as nursery:
            for leader, group in by_leader.items():
                nursery.start_soon(self._send_to_leader, leader, group, retry)
        if retry:  # a leader may have moved: look again before the next round
            topics = sorted({b.topic for b in retry})
            with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
                await self.client.refresh_metadata(topics)  # (if it fails, the next round tells)
        return retry

    async def _send_to_leader(
        self, leader: int, batches: list[_Batch], retry: list[_Batch]
    ) -> None:
        payload = {(b.topic, b.partition): b.builder.build() for b in batches}
        try:
            response = await produce(
                self.client,
                payload,
                acks=self.config.acks,
                timeout_ms=self.config.request_timeout_ms,
                target=leader,
            )
        except (NetworkError, RequestTimeout) as e:
            for batch in batches:
                self._failed_attempt(batch, e, retry)
            return
        if response is None:  # acks=0
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        answers: dict[tuple[str, int], Any] = {}
        for topic in response.responses:
            name = topic.name
            if not name and self.client.metadata is not None:
                info = self.client.metadata.topic_by_id(topic.topic_id)
                name = info.name if info is not None else ""
            for p in topic.partition_responses:
                answers[(name, p.index)] = p
        for batch in batches:
            answer = answers.get((batch.topic, batch.partition))
            if answer is None:
                error = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the partition")
                self._failed_attempt(batch, error, retry)
            elif answer.error_code:
                message = getattr(answer, "error_message", None)
                self._failed_attempt(batch, KafkaError(answer.error_code, message), retry)
            else:
                self._complete(batch, answer.base_offset, getattr(answer, "log_append_time_ms", -1))

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        for i, d in enumerate(batch.deliveries):
            d.offset = base_offset + i if base_offset >= 0 else -1
            if log_append_time is not None and log_append_time >= 0:
                d.timestamp = log_append_time
            d.done = True
        self._buffered -= batch.size

    def _failed_attempt(self, batch: _Batch, error: BaseException, retry: list[_Batch]) -> None:
        retriable = isinstance(error, NetworkError | RequestTimeout) or (
            isinstance(error, KafkaError) and error.retriable
        )
        if (
            retriable
            and batch.attempts <= self.config.retries
            and trio.current_time() < batch.deadline
        ):
            retry.append(batch)
            return
        for d in batch.deliveries:
            d.error = error
            d.done = True
        self._buffered -= batch.size

    def _backoff(self, attempt: int) -> float:
        base = self.config.retry_backoff_ms / 1000
        cap = max(self.config.retry_backoff_max_ms / 1000, base)
        return min(cap, base * 2 ** max(attempt - 1, 0)) * self._rng.uniform(0.8, 1.2)

    async def aclose(self) -> None:
        """Flush what is buffered, then refuse further sends (the client stays open)."""
        if not self._closed:
            await self.flush()
            self._closed = True


def _record_size(key: bytes | None, value: bytes | None, headers: list[Header]) -> int:
    size = _RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for hkey, hvalue in headers:
        size += 10 + len(hkey.encode()) + len(hvalue or b"")
    return size
