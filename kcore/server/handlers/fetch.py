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
3. If fewer than ``min.bytes`` are available and no partition had an error, the request waits in
   the purgatory until an append to one of its partitions or ``max.wait.ms``, and reads again.
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
from kcore.server import authz
from kcore.server.fetch_session import error_partition_data, replica_id_of
from kcore.server.registry import HandlerRegistry
from kcore.server.request_metrics import FETCH_KEY

PD = m.FetchResponse.PartitionData


def _isolation(replica_id: int, isolation_level: int) -> FetchIsolation:
    if replica_id >= 0:
        return FetchIsolation.LOG_END
    return FetchIsolation.TXN_COMMITTED if isolation_level == 1 else FetchIsolation.HIGH_WATERMARK


def _read_partition(
    replicas, tp, fp, isolation, replica_id, budget, first_with_data, replica_epoch=-1
):
    """Read one partition; returns (PartitionData, bytes read)."""
    try:
        params = FetchParams(
            replica_epoch=replica_epoch,
            now_ms=int(time.time() * 1000),
            fetch_offset=fp.fetch_offset,
            max_bytes=max(min(fp.partition_max_bytes, budget), 0),
            isolation=isolation,
            current_leader_epoch=fp.current_leader_epoch,
            last_fetched_epoch=fp.last_fetched_epoch,
            replica_id=replica_id,
            min_one_batch=first_with_data,
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
        data = error_partition_data(tp.partition, e.code)
        if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            partition = replicas.partitions.get((tp.topic, tp.partition))
            if partition is not None:
                data.current_leader = m.FetchResponse.LeaderIdAndEpoch(
                    leader_id=partition.state.leader, leader_epoch=partition.state.leader_epoch
                )
        return data, 0


def register(registry: HandlerRegistry) -> None:
    # Fetch 0-3 (message format v0/v1 era) are served as Kafka 4.x does not: some clients still
    # send them (kafkajs, old librdkafka), and the batches are v2 either way.
    @registry.register(1, 0, 17)
    async def fetch(ctx, body: m.FetchRequest):
        broker = ctx.server
        replicas = broker.replica_manager
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
        while True:
            updates = {}
            sizes: dict[str, int] = {}  # bytes read per topic (this round's: the one answered)
            total = 0
            errors = False
            for tp, fp in fctx.partitions():
                if tp.topic is None:
                    updates[tp] = error_partition_data(tp.partition, ErrorCode.UNKNOWN_TOPIC_ID)
                    errors = True
                    continue
                if readable is not None and tp.topic not in readable:
                    updates[tp] = error_partition_data(
                        tp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    )
                    errors = True
                    continue
                data, size = _read_partition(
                    replicas,
                    tp,
                    fp,
                    isolation,
                    replica_id,
                    max_bytes - total,
                    total == 0,
                    replica_epoch,
                )
                errors = errors or data.error_code != 0 or data.diverging_epoch.epoch != -1
                updates[tp] = data
                if size:
                    total += size
                    sizes[tp.topic] = sizes.get(tp.topic, 0) + size
            remaining = deadline - trio.current_time()
            if total >= body.min_bytes or errors or remaining <= 0 or not updates:
                break
            keys = [(tp.topic, tp.partition) for tp in updates]
            await broker.purgatory.wait(keys, remaining)
        _count(broker, updates, sizes, follower=replica_id >= 0, errors=errors)
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
