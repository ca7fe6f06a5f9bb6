"""Follower replication's Trio shell: the replica fetchers and the leader's ISR changes.

Theory of operation
-------------------
Two services of the broker, both over the replica manager:

* :class:`ReplicaFetchers` — Kafka's ``ReplicaFetcherManager``: a ``FetcherManager``
  (``kcore.replica.fetcher``, the framework the cluster mirror shares) whose leaders are this
  cluster's brokers, reached through a :class:`FollowerLeaderEndpoint` each, whose local side
  is ``kcore.replica.follower.FollowerPartitionHandler``, and whose partitions follow the
  replica manager's changes (``FollowerFetchers``: made follower → fetched from the leader;
  made leader or removed → no longer). Settings: ``replica.fetch.max.bytes`` (per partition),
  ``replica.fetch.response.max.bytes``, ``replica.fetch.min.bytes``,
  ``replica.fetch.wait.max.ms``, ``replica.fetch.backoff.ms``, ``num.replica.fetchers``
  (fetchers per leader; a partition's fetcher is Kafka's ``getFetcherId``).
* :class:`IsrChanges` — Kafka's ``AlterPartitionManager`` and ``isr-expiration`` task: the
  ISR changes leaders propose (an expansion from a follower's fetch, a shrink from the
  periodic check every half ``replica.lag.time.max.ms``) are sent to the controller as
  AlterPartition v3 (leader epoch, partition epoch, each member's broker epoch), batched;
  each answer commits or drops the change on its partition (``Partition.isr_committed``, or
  ``LeaderIsrState.failed`` to propose again later). The controller fences stale ones
  (``kcore.metadata.replication.alter_partition``).

A :class:`FollowerLeaderEndpoint` sends incremental Fetch requests (KIP-227, its
``FetchSessionHandler``) as a replica (Fetch v15+
``ReplicaState``: this broker's id and epoch; ``ReplicaId`` before) to the leader's
inter-broker listener as the metadata image registers it, over one connection opened on first
use and again after a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from kcore.client.connection import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_session_handler import FetchSessionHandler
from kcore.replica.fetch_state import FetcherConfig, FetchPlan, PartitionResponse, TopicPartition
from kcore.replica.fetch_wire import (
    FETCH_KEY,
    ListOffsetsMixin,
    fetch_request,
    fetch_responses,
    list_offsets_request,
    listed_offset,
    offsets_for_leader_epoch_request,
)
from kcore.replica.fetcher import FetcherManager
from kcore.replica.follower import FollowerFetchers, FollowerPartitionHandler, LocalLeaders
from kcore.replica.isr import IsrChange
from kcore.replica.partition import Partition

log = logging.getLogger(__name__)

__all__ = [
    "FollowerLeaderEndpoint",
    "IsrChanges",
    "ReplicaFetchers",
    "alter_partition_request",
    "apply_alter_partition_response",
    "replica_fetcher_config",
]

ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_S = 0.1


def replica_fetcher_config(config) -> FetcherConfig:
    """The replica fetchers' settings from the broker's ``replica.fetch.*`` keys."""
    backoff = config.replica_fetch_backoff_ms / 1000
    return FetcherConfig(
        max_bytes=config.replica_fetch_response_max_bytes,
        partition_max_bytes=config.replica_fetch_max_bytes,
        min_bytes=config.replica_fetch_min_bytes,
        max_wait_ms=config.replica_fetch_wait_max_ms,
        isolation_level=0,
        backoff_s=backoff,
        backoff_max_s=max(backoff, 1.0),
    )


class FollowerLeaderEndpoint(ListOffsetsMixin):
    """One broker of this cluster as a replica fetcher's leader (see the module docstring)."""

    supports_last_fetched_epoch = True

    def __init__(self, broker, leader_id: int, fetcher_number: int) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self.client_id = f"broker-{broker.node_id}-fetcher-{fetcher_number}"
        self._conn: BrokerConnection | None = None
        self.session = FetchSessionHandler()  # KIP-227

    async def _connection(self) -> BrokerConnection:
        if self._conn is not None:
            return self._conn
        registration = self.broker.metadata_image.cluster.brokers.get(self.leader_id)
        listener = self.broker.config.inter_broker_listener_name
        endpoint = None if registration is None else registration.listener(listener)
        if endpoint is None:
            raise KafkaError(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"broker {self.leader_id} has no {listener} endpoint registered",
            )
        self._conn = await BrokerConnection.connect(
            endpoint.host,
            endpoint.port,
            client_id=self.client_id,
            **self.broker.internal_security.inter_broker().connect_options(),
        )
        return self._conn

    async def _request(self, body, version=None, timeout: float | None = None):
        conn = await self._connection()
        try:
            kwargs = {} if timeout is None else {"timeout": timeout}
            return await conn.request(body, version, **kwargs)
        except trio.Cancelled:
            raise
        except Exception:
            await self._drop()
            raise

    async def fetch(self, plan: FetchPlan) -> dict[TopicPartition, PartitionResponse]:
        conn = await self._connection()
        version = conn.version_for(FETCH_KEY)
        body, names = fetch_request(
            plan,
            version,
            session=self.session,
            replica_id=self.broker.node_id,
            replica_epoch=self.broker.broker_epoch,
        )
        # The long poll may take max_wait_ms: the request timeout must outlast it.
        timeout = plan.max_wait_ms / 1000 + (conn.request_timeout or 30.0)
        response = await self._request(body, version, timeout)
        return fetch_responses(
            response, version, names, session=self.session, leader=f"broker {self.leader_id}"
        )

    async def _list_offset(self, tp: TopicPartition, leader_epoch: int, timestamp: int) -> int:
        body = list_offsets_request(tp, leader_epoch, timestamp, replica_id=self.broker.node_id)
        return listed_offset(await self._request(body), tp, f"broker {self.leader_id}")

    async def epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """OffsetsForLeaderEpoch: ``tp -> (epoch, its end offset)`` on the leader (the
        fetchers truncate on fetch; this is for whoever needs the leader's epochs)."""
        asked = {tp: (-1, epoch) for tp, epoch in partitions.items()}
        body = offsets_for_leader_epoch_request(asked, replica_id=self.broker.node_id)
        response = await self._request(body)
        out = {}
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise KafkaError(p.error_code, f"OffsetsForLeaderEpoch of {t.topic}")
                out[(t.topic, p.partition)] = (p.leader_epoch, p.end_offset)
        return out

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    async def aclose(self) -> None:
        await self._drop()


class ReplicaFetchers:
    """This broker's replica fetchers (see the module docstring); ``await nursery.start(run)``."""

    def __init__(self, broker) -> None:
        self.broker = broker
        replicas = broker.replica_manager
        self.handler = FollowerPartitionHandler(replicas, now_ms=broker.clock.wall_ms)
        self.manager = FetcherManager(
            "replica",
            lambda leader, number: FollowerLeaderEndpoint(broker, leader, number),
            self.handler,
            LocalLeaders(replicas),
            config=replica_fetcher_config(broker.config),
            num_fetchers=max(broker.config.num_replica_fetchers, 1),
        )
        self.listener = FollowerFetchers(replicas, self.manager)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.manager.run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await self.manager.aclose()

    def follow_current(self) -> None:
        """Start fetching every partition this broker follows now (the partitions opened
        before the fetchers ran, at startup)."""
        from kcore.replica.replica_manager import PartitionChanges

        followers = [p for p in self.broker.replica_manager.partitions.values() if not p.is_leader]
        self.listener(PartitionChanges(followers=followers))


class IsrChanges:
    """The ISR changes this broker's leaders propose, sent to the controller (see the module
    docstring); ``submit`` is the replica manager's ``alter_isr``."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._queue: dict[TopicPartition, tuple[Partition, IsrChange]] = {}
        self._wake = trio.Event()
        self.sent = 0  # AlterPartition requests (tests and metrics)

    def submit(self, partition: Partition, change: IsrChange) -> None:
        self._queue[partition.topic_partition] = (partition, change)
        self._wake.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_isrs)
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._queue = self._queue, {}
                if batch:
                    await self._send(batch)

    async def _expire_isrs(self) -> None:
        """Kafka's ``isr-expiration``: every half ``replica.lag.time.max.ms``, propose removing
        the followers that lag more than that from every ISR led here."""
        lag_ms = self.broker.config.replica_lag_time_max_ms
        while True:
            await trio.sleep(lag_ms / 2000)
            self.broker.replica_manager.maybe_shrink_isrs(self.broker.clock.wall_ms(), lag_ms)

    async def _send(self, batch: dict[TopicPartition, tuple[Partition, IsrChange]]) -> None:
        request = alter_partition_request(self.broker.node_id, self.broker.broker_epoch, batch)
        self.sent += 1
        try:
            response = await self.broker.controller_call(
                lambda c, now: c.alter_partition(request, ALTER_PARTITION_VERSION)
            )
        except trio.Cancelled:
            raise
        except Exception as e:
            log.info("AlterPartition failed, the ISR changes are proposed again later: %s", e)
            _drop_changes(batch)
            await trio.sleep(RETRY_BACKOFF_S)
            return
        committed, refused = apply_alter_partition_response(batch, response)
        for partition in committed:
            self.broker.purgatory.notify(partition.topic_partition)
        if refused:
            # A refused change is proposed again by the next fetch or check: not at once (a
            # fenced follower that keeps fetching would otherwise be re-proposed per fetch).
            await trio.sleep(RETRY_BACKOFF_S)


def _drop_changes(batch: Mapping[TopicPartition, tuple[Partition, IsrChange]]) -> None:
    """Each change of ``batch`` is proposed again later (the request failed or was refused)."""
    for partition, change in batch.values():
        if partition.isr_state is not None:
            partition.isr_state.failed(change)


def alter_partition_request(
    broker_id: int, broker_epoch: int, batch: Mapping[TopicPartition, tuple[Partition, IsrChange]]
) -> m.AlterPartitionRequest:
    """The AlterPartition (v3: each member's broker epoch) carrying ``batch``'s changes."""
    A = m.AlterPartitionRequest
    topics: dict = {}
    for partition, change in batch.values():
        topics.setdefault(partition.topic_id, []).append(
            A.PartitionData(
                partition_index=partition.index,
                leader_epoch=change.leader_epoch,
                new_isr_with_epochs=[
                    A.BrokerState(broker_id=b, broker_epoch=e)
                    for b, e in zip(change.new_isr, change.broker_epochs, strict=True)
                ],
                partition_epoch=change.partition_epoch,
            )
        )
    return A(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=[A.TopicData(topic_id=tid, partitions=ps) for tid, ps in topics.items()],
    )


def apply_alter_partition_response(
    batch: Mapping[TopicPartition, tuple[Partition, IsrChange]],
    response: m.AlterPartitionResponse,
) -> tuple[list[Partition], bool]:
    """The controller's answer to ``batch``: each change committed on its partition (if it still
    leads at that epoch) or dropped, to be proposed again later. Returns the partitions whose
    ISR moved (their acks=all waits may complete) and whether anything was refused."""
    if response.error_code:
        log.info("AlterPartition refused: %s", ErrorCode(response.error_code).name)
        _drop_changes(batch)
        return [], True
    by_key = {(p.topic_id, p.index): (p, c) for p, c in batch.values()}
    committed: list[Partition] = []
    refused = False
    for t in response.topics:
        for pd in t.partitions:
            entry = by_key.get((t.topic_id, pd.partition_index))
            if entry is None:
                continue
            partition, change = entry
            if pd.error_code:
                refused = True
                log.info(
                    "AlterPartition of %s to ISR %s refused: %s", partition.name,
                    list(change.new_isr), ErrorCode(pd.error_code).name,
                )  # fmt: skip
                if partition.isr_state is not None:
                    partition.isr_state.failed(change)
                continue
            if partition.isr_committed(pd.isr, pd.leader_epoch, pd.partition_epoch):
                log.info(
                    "ISR of %s is now %s (partition epoch %d)", partition.name,
                    list(pd.isr), pd.partition_epoch,
                )  # fmt: skip
                committed.append(partition)
    return committed, refused
