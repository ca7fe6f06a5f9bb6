"""Fetch: consumers and followers read partitions, with long polling and fetch sessions.

One request, in Kafka's order of decisions:

1. The fetch-session manager (KIP-227, ``fetch_session.py``) turns the request into a context:
   the full list of partitions to read (an incremental fetch reads every partition of its
   session), or a session error.
2. Each partition is read from its log on this leader — bounded by the log end offset for
   followers, the high watermark for ``read_uncommitted`` and the last stable offset for
   ``read_committed`` consumers — as file slices, never copied. The response's ``max.bytes``
   is shared across partitions; the first partition that has data may exceed it by one batch,
   so a consumer always makes progress. A ``last_fetched_epoch`` that the leader's epoch history
   contradicts gets the diverging epoch instead of records (the fetcher truncates, then fetches
   again). A follower's fetch (``replica_id >= 0``) reports its position: the leader's HW and
   ISR move with it (``kcore.replica.isr``).
   Fetch from followers (KIP-392): a consumer's Fetch v11+ may read from a follower, which
   serves it up to the high watermark it knows (nothing from there to its log end offset,
   OFFSET_OUT_OF_RANGE above it); on the leader, with ``replica.selector.class`` set, a
   partition whose preferred read replica for the consumer's ``RackId`` is another broker
   answers that broker's id and no records (``kcore.replica.replica_selector``). A partition
   that exists but has no replica here answers NOT_LEADER_OR_FOLLOWER, as Kafka's.
3. If fewer than ``min.bytes`` are available and no partition had an error, a diverging epoch
   or a preferred read replica, the request waits in the purgatory until an append to one of
   its partitions or ``max.wait.ms``, and reads again.
4. The context builds the response (an incremental one carries only what changed).

Authorization (with an authorizer, as Kafka's ``handleFetchRequest``): a follower's fetch
(``replica_id >= 0``) needs CLUSTER_ACTION on the cluster, else every partition answers
TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic it reads
(TOPIC_AUTHORIZATION_FAILED for the others, which are not read).
"""

from __future__ import annotations

import time

import trio

from kcore.log.log_reads import FetchIsolation
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.partition import FetchParams
from kcore.replica.replica_selector import preferred_read_replica, read_replica_candidates
from kcore.server import authz
from kcore.server.fetch_session import error_partition_data, replica_id_of
from kcore.server.handlers.metadata import brokers_on_listener
from kcore.server.registry import HandlerRegistry
from kcore.server.request_metrics import FETCH_KEY

PD = m.FetchResponse.PartitionData


def _isolation(replica_id: int, isolation_level: int) -> FetchIsolation:
    if replica_id >= 0:
        return FetchIsolation.LOG_END
    return FetchIsolation.TXN_COMMITTED if isolation_level == 1 else FetchIsolation.HIGH_WATERMARK


class _ReadReplicas:
    """KIP-392 for one consumer's Fetch v11+: the preferred read replica of each partition this
    broker leads (``kcore.replica.replica_selector``), the brokers' racks looked up once."""

    def __init__(self, broker, selector, client_rack: str, listener_name: str) -> None:
        self.broker = broker
        self.selector = selector
        self.client_rack = client_rack
        self.listener_name = listener_name
        self._racks: dict[int, str | None] | None = None

    def preferred(self, partition, fetch_offset: int, now_ms: int) -> int | None:
        if self.selector is None or not partition.is_leader or partition.isr_state is None:
            return None
        if self._racks is None:
            image = self.broker.metadata_image
            self._racks = {
                node_id: rack
                for node_id, _, _, rack in brokers_on_listener(image, self.listener_name)
            }
        candidates, leader = read_replica_candidates(
            leader=partition.node_id,
            leader_log_end_offset=partition.log_end_offset,
            isr=partition.committed_isr,
            followers=partition.isr_state.followers,
            racks=self._racks,
            fetch_offset=fetch_offset,
            now_ms=now_ms,
        )
        return preferred_read_replica(self.selector, self.client_rack, candidates, leader)


def _redirect(partition, fp, preferred: int) -> PD:
    """The leader's answer naming another replica to read from: offsets, no records (Kafka
    reads nothing; the epoch checks still apply, as its ``fetchOffsetSnapshot``'s do)."""
    partition.check_leader_epoch(fp.current_leader_epoch, require_leader=False)
    return PD(
        high_watermark=partition.high_watermark,
        last_stable_offset=partition.last_stable_offset,
        log_start_offset=partition.log_start_offset,
        aborted_transactions=None,
        preferred_read_replica=preferred,
        records=b"",
    )


def _read_partition(
    broker,
    tp,
    fp,
    isolation,
    replica_id,
    budget,
    first_with_data,
    replica_epoch=-1,
    read_replicas: _ReadReplicas | None = None,
):
    """Read one partition; returns (PartitionData, bytes read)."""
    replicas = broker.replica_manager
    try:
        now_ms = int(time.time() * 1000)
        if read_replicas is not None:
            partition = replicas.partition_or_error(tp.topic, tp.partition)
            preferred = read_replicas.preferred(partition, fp.fetch_offset, now_ms)
            if preferred is not None:
                return _redirect(partition, fp, preferred), 0
        params = FetchParams(
            replica_epoch=replica_epoch,
            now_ms=now_ms,
            fetch_offset=fp.fetch_offset,
            max_bytes=max(min(fp.partition_max_bytes, budget), 0),
            isolation=isolation,
            current_leader_epoch=fp.current_leader_epoch,
            last_fetched_epoch=fp.last_fetched_epoch,
            replica_id=replica_id,
            min_one_batch=first_with_data,
            log_start_offset=fp.log_start_offset,
            fetch_only_leader=read_replicas is None,
        )
        result = replicas.fetch(tp.topic, tp.partition, params)
        data = PD(
            high_watermark=result.high_watermark,
            last_stable_offset=result.last_stable_offset,
            log_start_offset=result.log_start_offset,
            aborted_transactions=None,  # null unless read_committed, as Kafka answers
            records=b"",
        )
        if result.diverging_epoch is not None:
            epoch, end = result.diverging_epoch
            data.diverging_epoch = m.FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end)
            return data, 0
        info = result.info
        size = info.size
        if info.records:
            data.records = (
                info.records[0]
                if len(info.records) == 1
                else b"".join(s.read() for s in info.records)
            )
        if info.aborted_transactions is not None:
            data.aborted_transactions = [
                m.FetchResponse.AbortedTransaction(
                    producer_id=t.producer_id, first_offset=t.first_offset
                )
                for t in info.aborted_transactions
            ]
        return data, size
    except KafkaError as e:
        code = e.code
        registration = None
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            # Kafka's getPartitionOrError: a partition that exists but has no replica here is
            # NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata (a consumer sent to a
            # follower that a reassignment then removed goes back to the leader).
            topic = broker.metadata_image.topics.by_name.get(tp.topic)
            registration = None if topic is None else topic.partitions.get(tp.partition)
            if registration is not None:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        data = error_partition_data(tp.partition, code)
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            partition = replicas.partitions.get((tp.topic, tp.partition))
            state = partition.state if partition is not None else registration
            if state is not None:
                data.current_leader = m.FetchResponse.LeaderIdAndEpoch(
                    leader_id=state.leader, leader_epoch=state.leader_epoch
                )
        return data, 0


def register(registry: HandlerRegistry) -> None:
    # Fetch 0-3 (message format v0/v1 era) are served as Kafka 4.x does not: some clients still
    # send them (kafkajs, old librdkafka), and the batches are v2 either way.
    @registry.register(1, 0, 17)
    async def fetch(ctx, body: m.FetchRequest):
        broker = ctx.server
        version = ctx.version
        fctx = broker.fetch_manager.new_context(
            body, version, now_ms=int(time.time() * 1000), topic_name=broker.topic_name_by_id
        )
        replica_id = replica_id_of(body, version)
        replica_epoch = body.replica_state.replica_epoch if version >= 15 else -1
        isolation = _isolation(replica_id, body.isolation_level)
        max_bytes = body.max_bytes if version >= 3 else 2**31 - 1
        deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
        readable = _readable_topics(ctx, fctx, replica_id)
        # A consumer's Fetch v11+ carries its rack (KIP-392): it may be sent to, and served
        # by, a follower. Older consumers and followers read from the leader only.
        read_replicas = None
        if replica_id < 0 and version >= 11:
            read_replicas = _ReadReplicas(
                broker, broker.replica_selector, body.rack_id, ctx.listener_name
            )
        while True:
            updates = {}
            sizes: dict[str, int] = {}  # bytes read per topic (this round's: the one answered)
            total = 0
            answer_now = False
            for tp, fp in fctx.partitions():
                if tp.topic is None:
                    updates[tp] = error_partition_data(tp.partition, ErrorCode.UNKNOWN_TOPIC_ID)
                    answer_now = True
                    continue
                if readable is not None and tp.topic not in readable:
                    updates[tp] = error_partition_data(
                        tp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    )
                    answer_now = True
                    continue
                data, size = _read_partition(
                    broker,
                    tp,
                    fp,
                    isolation,
                    replica_id,
                    max_bytes - total,
                    total == 0,
                    replica_epoch,
                    read_replicas,
                )
                # Answered at once, as Kafka's fetchMessages: an error, a diverging epoch, or a
                # preferred read replica (the consumer should go there, not wait here).
                answer_now = (
                    answer_now
                    or data.error_code != 0
                    or data.diverging_epoch.epoch != -1
                    or data.preferred_read_replica >= 0
                )
                updates[tp] = data
                if size:
                    total += size
                    sizes[tp.topic] = sizes.get(tp.topic, 0) + size
            remaining = deadline - trio.current_time()
            if total >= body.min_bytes or answer_now or remaining <= 0 or not updates:
                break
            keys = [(tp.topic, tp.partition) for tp in updates]
            await broker.purgatory.wait(keys, remaining)
        _count(broker, updates, sizes, follower=replica_id >= 0, errors=answer_now)
        return fctx.update_and_generate_response(updates, now_ms=int(time.time() * 1000))


def _count(broker, updates, sizes, *, follower: bool, errors: bool) -> None:
    """The answered bytes per topic, and the partitions' errors (for /metrics)."""
    if sizes:
        broker.topic_traffic.fetched(sizes, follower=follower)
    if errors:
        metrics = broker.server.metrics
        for data in updates.values():
            if data.error_code:
                metrics.count_error(FETCH_KEY, data.error_code)


def _readable_topics(ctx, fctx, replica_id: int) -> set[str] | None:
    """The topics this fetch may read (None: all of them)."""
    if not authz.enabled(ctx):
        return None
    if replica_id >= 0:
        return None if authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    topics = [tp.topic for tp, _ in fctx.partitions()]
    return authz.filter_allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topics)
