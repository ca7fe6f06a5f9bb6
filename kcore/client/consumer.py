"""A small Kafka consumer on :class:`~kcore.client.cluster.KafkaClient`: what
``kcore console-consumer`` reads with, usable from any Trio code.

Theory of operation
-------------------
Two ways to get partitions, as Kafka's consumer: :meth:`Consumer.assign` names them (no group;
positions come from :meth:`Consumer.seek` or ``auto.offset.reset``), :meth:`Consumer.subscribe`
names topics (or a pattern) and joins ``group.id`` as a classic-protocol member
(:class:`~kcore.client.group_member.ClassicGroupMember`, range assignor), whose assignment then
decides the partitions; their positions start at the group's committed offsets, else at
``auto.offset.reset`` (ListOffsets EARLIEST or LATEST; ``none`` raises).

:meth:`Consumer.poll` returns the records fetched and not yet returned, fetching when there
are none: one sessionless Fetch per partition leader, at most ``fetch.max.wait.ms`` long.
Records are decoded from the batches as Kafka's ``CompletedFetch`` does: records before the
position (a batch starts before it) are dropped, control batches are skipped, and with
``isolation.level=read_committed`` a transactional batch of a producer whose transaction the
answer lists as aborted (from its first offset up to the ABORT marker) is skipped too; the broker
answers only up to the last stable offset. ``check.crcs`` verifies each batch's CRC-32C.

A group member heartbeats from a task of its own (started by :func:`open_consumer`); when the
coordinator answers that the group rebalances, the next :meth:`poll` commits (with
``enable.auto.commit``) and joins again. Offsets are committed by :meth:`commit`, every
``auto.commit.interval.ms`` during :meth:`poll`, and on :meth:`close`, which then leaves the
group. The position committed is the next offset to return — what Kafka commits.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import trio

from kcore.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, fetch, list_offsets
from kcore.client.client_configs import ConsumerConfig
from kcore.client.cluster import KafkaClient
from kcore.client.errors import REFRESH_METADATA_ERRORS, NetworkError, RequestTimeout
from kcore.client.group_member import ClassicGroupMember, RebalanceNeeded
from kcore.client.groups import offset_fetch, offset_fetch_partitions
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import (
    ControlRecordType,
    CorruptRecordError,
    Header,
    TimestampType,
    iter_batches,
    read_control_record,
)

__all__ = ["Consumer", "ConsumerRecord", "NoOffsetForPartition", "open_consumer"]

TopicPartition = tuple[str, int]


class NoOffsetForPartition(KafkaError):
    """``auto.offset.reset=none`` and no committed offset (or the position is out of range)."""

    def __init__(self, tp: TopicPartition) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"Undefined offset with no reset policy for partitions: [{tp[0]}-{tp[1]}]",
        )


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as the consumer returns it (Kafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    leader_epoch: int


class Consumer:
    """Fetches records for assigned or subscribed partitions (see the module docstring).

    Make it with :func:`open_consumer`, which runs the heartbeats of a group member and closes
    the consumer (commit, leave) on the way out.
    """

    def __init__(self, client: KafkaClient, config: ConsumerConfig) -> None:
        self.client = client
        self.config = config
        self.member: ClassicGroupMember | None = None
        self._topics: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._after_buffer: dict[TopicPartition, int] = {}
        self._rejoin = False
        self._fatal: BaseException | None = None
        self._next_auto_commit = math.inf
        self._metadata_at = -math.inf
        self._closed = False

    # -- what to read --------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions``, without a group (Kafka's ``assign``)."""
        self._assigned = sorted(set(partitions))
        self._forget_unassigned()

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | None = None) -> None:
        """Join ``group.id`` for ``topics``, or for every topic matching ``pattern`` (a regular
        expression matched against the whole name; internal topics are left out while
        ``exclude.internal.topics``)."""
        if not self.config.group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "subscribe needs a group.id")
        self._topics = sorted(set(topics))
        self._pattern = re.compile(pattern) if pattern is not None else None
        self.member = ClassicGroupMember(
            self.client,
            self.config.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            group_instance_id=self.config.group_instance_id,
            rack=self.config.client_rack,
            partition_counts=self._partition_counts,
        )
        self._rejoin = True

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record :meth:`poll` returns for ``tp`` (None: not known yet)."""
        return self._positions.get(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on (records already fetched for it are dropped)."""
        self._positions[tp] = offset
        self._buffers.pop(tp, None)
        self._after_buffer.pop(tp, None)

    async def seek_to(self, partitions: Iterable[TopicPartition], timestamp: int) -> None:
        """Seek each partition to ListOffsets' answer for ``timestamp`` (EARLIEST_TIMESTAMP or
        LATEST_TIMESTAMP; the latest is the last stable offset with read_committed)."""
        wanted = list(partitions)
        if not wanted:
            return
        answers = await self.client.retry(
            lambda: self._list_offsets(wanted, timestamp),
            refresh_topics=sorted({t for t, _ in wanted}),
        )
        for tp, offset in answers.items():
            self.seek(tp, offset)

    async def _list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict:
        answers = await list_offsets(
            self.client,
            dict.fromkeys(tps, timestamp),
            isolation_level=1 if self.config.read_committed else 0,
        )
        out = {}
        for tp, answer in answers.items():
            if answer.error_code:
                raise KafkaError(answer.error_code, f"ListOffsets of {tp[0]}-{tp[1]}")
            out[tp] = answer.offset
        return out

    # -- the group -----------------------------------------------------------------------------

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        metadata = await self.client.refresh_metadata(topics)
        return {t: len(metadata.topics[t].partitions) for t in topics if t in metadata.topics}

    async def _subscribed_topics(self) -> list[str]:
        if self._pattern is None:
            return self._topics
        metadata = await self.client.refresh_metadata(None)
        self._metadata_at = trio.current_time()
        return sorted(
            name
            for name, info in metadata.topics.items()
            if self._pattern.fullmatch(name)
            and not (info.is_internal and self.config.exclude_internal_topics)
        )

    async def _join(self) -> None:
        assert self.member is not None
        if self.member.in_generation and self.config.enable_auto_commit:
            await self._commit_positions()  # the next owner starts where this one stopped
        topics = await self._subscribed_topics()
        self._rejoin = False
        assignment = await self.member.join(topics)
        self._assigned = sorted((t, p) for t, ps in assignment.items() for p in ps)
        self._forget_unassigned()
        self._positions = {}  # positions come from the group's committed offsets again
        self._buffers.clear()
        self._after_buffer.clear()
        if self.config.enable_auto_commit:
            self._next_auto_commit = trio.current_time() + self.config.auto_commit_interval_ms / 1e3

    def _forget_unassigned(self) -> None:
        keep = set(self._assigned)
        for table in (self._positions, self._buffers, self._after_buffer):
            for tp in [tp for tp in table if tp not in keep]:
                del table[tp]

    async def heartbeat_loop(self) -> None:
        """Heartbeat every ``heartbeat.interval.ms`` while in a generation; flags a rejoin when
        the group rebalances. Runs until cancelled (:func:`open_consumer` starts it)."""
        while True:
            await trio.sleep(self.config.heartbeat_interval_ms / 1000)
            member = self.member
            if member is None or not member.in_generation or self._rejoin or self._closed:
                continue
            try:
                await member.heartbeat()
            except RebalanceNeeded:
                self._rejoin = True
            except (NetworkError, RequestTimeout):
                continue  # the coordinator is looked up again on the next beat
            except KafkaError as e:
                self._fatal = e
                return

    # -- positions -----------------------------------------------------------------------------

    async def _fill_positions(self) -> None:
        missing = [tp for tp in self._assigned if tp not in self._positions]
        if not missing:
            return
        if self.member is not None:
            response = await offset_fetch(self.client, self.member.group_id, missing)
            for tp, p in offset_fetch_partitions(response).items():
                if tp in missing and not p.error_code and p.committed_offset >= 0:
                    self._positions[tp] = p.committed_offset
            missing = [tp for tp in missing if tp not in self._positions]
        await self._reset(missing)

    async def _reset(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartition(partitions[0])
        await self.seek_to(
            partitions, EARLIEST_TIMESTAMP if policy == "earliest" else LATEST_TIMESTAMP
        )

    # -- polling -------------------------------------------------------------------------------

    async def poll(self, timeout: float, *, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records fetched for the assigned partitions, waiting up to ``timeout`` seconds for
        some; at most ``max_records`` (default ``max.poll.records``). Raises the fatal error of
        the group (a KafkaError) or of a partition (NoOffsetForPartition, CorruptRecordError)."""
        limit = min(max_records or self.config.max_poll_records, self.config.max_poll_records)
        deadline = trio.current_time() + timeout
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self.member is not None and (self._rejoin or not self.member.in_generation):
                await self._join()
            await self._fill_positions()
            records = self._take(limit)
            await self._maybe_auto_commit()
            if records:
                return records
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                return []
            if self._pattern is not None and self._metadata_stale():
                topics = await self._subscribed_topics()
                if set(topics) != {t for t, _ in self._assigned} and self.member is not None:
                    self._rejoin = True
                    continue
            if not self._assigned:
                await trio.sleep(min(remaining, self.config.fetch_max_wait_ms / 1000))
                continue
            await self._fetch(min(remaining, self.config.fetch_max_wait_ms / 1000))

    def _metadata_stale(self) -> bool:
        return trio.current_time() - self._metadata_at > self.config.metadata_max_age_ms / 1000

    def _take(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for tp in self._assigned:
            buffer = self._buffers.get(tp)
            while buffer and len(out) < limit:
                record = buffer.popleft()
                out.append(record)
                self._positions[tp] = record.offset + 1
            if buffer is not None and not buffer:
                del self._buffers[tp]
                self._positions[tp] = self._after_buffer.pop(tp, self._positions.get(tp, 0))
            if len(out) >= limit:
                break
        return out

    async def _fetch(self, wait: float) -> None:
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        stale = False
        for tp in self._assigned:
            if tp in self._buffers or tp not in self._positions:
                continue
            try:
                leader = self.client.leader_for(*tp)
            except KafkaError:
                stale = True
                continue
            by_leader.setdefault(leader, {})[tp] = self._positions[tp]
        if stale:
            await self._refresh_assigned()
        if not by_leader:
            await trio.sleep(min(wait, self.config.retry_backoff_ms / 1000))
            return
        results: list[bool] = []
        async with trio.open_nursery() as nursery:
            for leader, offsets in by_leader.items():
                nursery.start_soon(self._fetch_from, leader, offsets, wait, results)
        if any(results):
            await self._refresh_assigned()

    async def _refresh_assigned(self) -> None:
        with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
            await self.client.refresh_metadata(sorted({t for t, _ in self._assigned}))
        await trio.sleep(self.config.retry_backoff_ms / 1000)

    async def _fetch_from(
        self, leader: int, offsets: dict[TopicPartition, int], wait: float, stale: list[bool]
    ) -> None:
        try:
            response = await fetch(
                self.client,
                offsets,
                max_wait_ms=int(wait * 1000),
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                partition_max_bytes=self.config.max_partition_fetch_bytes,
                isolation_level=1 if self.config.read_committed else 0,
                target=leader,
            )
        except (NetworkError, RequestTimeout):
            stale.append(True)
            return
        if getattr(response, "error_code", 0):
            stale.append(KafkaError(response.error_code).retriable)
            return
        out_of_range: list[TopicPartition] = []
        for topic in response.responses:
            name = topic.topic
            if not name:
                info = self.client.metadata.topic_by_id(topic.topic_id)
                name = info.name if info is not None else ""
            for p in topic.partitions:
                tp = (name, p.partition_index)
                requested = offsets.get(tp)
                if requested is None or self._positions.get(tp) != requested:
                    continue  # sought elsewhere meanwhile
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(tp)
                elif p.error_code in REFRESH_METADATA_ERRORS:
                    stale.append(True)
                elif p.error_code:
                    raise KafkaError(p.error_code, f"Fetch of {name}-{p.partition_index}")
                else:
                    self._take_answer(tp, requested, p)
        if out_of_range:
            await self._reset(out_of_range)

    def _take_answer(self, tp: TopicPartition, fetch_offset: int, answer: Any) -> None:
        records: list[ConsumerRecord] = []
        next_offset = fetch_offset
        aborted = sorted(
            (a.first_offset, a.producer_id) for a in (answer.aborted_transactions or ())
        )
        aborted_pids: set[int] = set()
        read_committed = self.config.read_committed
        for batch in iter_batches(answer.records or b""):
            if batch.last_offset < fetch_offset:
                continue
            if self.config.check_crcs and not batch.is_valid_crc():
                raise CorruptRecordError(
                    f"Record batch for partition {tp[0]}-{tp[1]} at offset {batch.base_offset} "
                    f"is invalid, cause: Record is corrupt (stored crc = {batch.crc}, computed "
                    f"crc = {batch.compute_crc()})"
                )
            next_offset = batch.next_offset
            if read_committed and batch.has_producer_id:
                while aborted and aborted[0][0] <= batch.last_offset:
                    aborted_pids.add(aborted.pop(0)[1])
                if batch.is_control:
                    control = read_control_record(batch)
                    if control is not None and control.type == ControlRecordType.ABORT:
                        aborted_pids.discard(batch.producer_id)
                elif batch.is_transactional and batch.producer_id in aborted_pids:
                    continue
            if batch.is_control:
                continue
            for r in batch.records():
                if r.offset >= fetch_offset:
                    records.append(
                        ConsumerRecord(
                            tp[0],
                            tp[1],
                            r.offset,
                            r.timestamp,
                            batch.timestamp_type,
                            r.key,
                            r.value,
                            tuple(r.headers),
                            batch.partition_leader_epoch,
                        )
                    )
        if records:
            self._buffers[tp] = deque(records)
            self._after_buffer[tp] = next_offset
        else:
            self._positions[tp] = next_offset

    # -- committing ----------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, int]:
        return {tp: self._positions[tp] for tp in self._assigned if tp in self._positions}

    async def _commit_positions(self) -> dict[TopicPartition, int]:
        if self.member is None or not self.member.in_generation:
            return {}
        return await self.member.commit(self._consumed())

    async def _maybe_auto_commit(self) -> None:
        if trio.current_time() < self._next_auto_commit:
            return
        self._next_auto_commit = trio.current_time() + self.config.auto_commit_interval_ms / 1e3
        with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
            await self._commit_positions()

    async def commit(self) -> dict[TopicPartition, int]:
        """Commit the positions of the assigned partitions as the group member; ``{tp: error
        code}`` of those that failed. Without a group (assign mode) nothing is committed."""
        return await self._commit_positions()

    async def close(self) -> None:
        """Commit (with ``enable.auto.commit``) and leave the group. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.member is not None:
            if self.config.enable_auto_commit:
                with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
                    await self._commit_positions()
            await self.member.leave()


@contextlib.asynccontextmanager
async def open_consumer(client: KafkaClient, config: ConsumerConfig) -> AsyncIterator[Consumer]:
    """A :class:`Consumer` whose heartbeats run in a task of their own; on exit (also when
    cancelled) it is closed — committed and out of its group — under a shield bounded by the
    request timeout."""
    consumer = Consumer(client, config)
    error: Exception | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer.heartbeat_loop)
        try:
            yield consumer
        except Exception as e:  # raised below, not wrapped in the nursery's ExceptionGroup
            error = e
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(client.request_timeout or 30):
                await consumer.close()
            nursery.cancel_scope.cancel()
    if error is not None:
        raise error
