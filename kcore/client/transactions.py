"""Request helpers for transactions (KIP-664's tooling): list and describe transactions, describe
the producers of partitions, and abort a hanging transaction.

Each helper takes a :class:`~kcore.client.cluster.KafkaClient`, sends the request where Kafka's
admin client would, and returns the **raw response**, retrying only what says "you asked the
wrong broker" or "not ready yet":

* ListTransactions goes to **every broker** (each lists the transactional ids it coordinates);
  :func:`list_transactions` merges the answers, :func:`list_transactions_by_broker` keeps them
  apart (what ``kcore transactions list`` shows in its Coordinator column).
* DescribeTransactions goes to each transactional id's **coordinator** (FindCoordinator with
  key type 1, the leader of the ``__transaction_state`` partition the id hashes to). A
  coordinator that moved or is loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE) makes the helper look it up again, ``attempts`` rounds in all.
* DescribeProducers and WriteTxnMarkers go to the **partition leader**; NOT_LEADER_OR_FOLLOWER
  and the other stale-metadata codes refresh the metadata and retry.

Aborting by hand is what an operator does when a transaction *hangs*: a partition holds
transactional records of a producer whose coordinator no longer tracks that transaction (a bug,
a lost marker), so no COMMIT or ABORT marker will ever come and the partition's last stable
offset (LSO) is stuck at the transaction's first offset — read_committed consumers stop there.
:func:`abort_transaction` writes the ABORT marker itself, as the coordinator would have::

    state = await find_open_transaction(client, "orders", 0, start_offset=1234)
    response = await abort_transaction(
        client, "orders", 0, state.producer_id, state.producer_epoch, state.coordinator_epoch
    )
    code = write_txn_markers_error(response)  # 0, or INVALID_PRODUCER_EPOCH ...
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from kcore.client.cluster import KafkaClient, Target
from kcore.client.errors import (
    REFRESH_METADATA_ERRORS,
    NetworkError,
    RequestTimeout,
    UnsupportedVersionError,
)
from kcore.client.groups import (
    DEFAULT_ATTEMPTS,
    CoordinatorType,
    at_broker,
    backoff_s,
    per_coordinator,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "TRANSACTION_STATES",
    "abort_transaction",
    "describe_producers",
    "describe_producers_of",
    "describe_transactions",
    "find_open_transaction",
    "list_transactions",
    "list_transactions_by_broker",
    "write_txn_markers_error",
]

TopicPartition = tuple[str, int]

# The states DescribeTransactions and ListTransactions name (Kafka's TransactionState spelling).
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)

_LIST_TRANSACTIONS_KEY = 66
_DURATION_FILTER_VERSION = 1  # ListTransactions v1 (KIP-994)


# -- ListTransactions ----------------------------------------------------------------------------


async def list_transactions_by_broker(
    client: KafkaClient,
    states: Iterable[str] = (),
    producer_ids: Iterable[int] = (),
    duration_filter_ms: int = -1,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> dict[int, Any]:
    """ListTransactions at every broker of the metadata: ``{broker id: response}``.

    ``states`` ("Ongoing", "PrepareAbort", ... see :data:`TRANSACTION_STATES`) and
    ``producer_ids`` filter (empty: everything); ``duration_filter_ms`` >= 0 keeps transactions
    running longer than that and needs ListTransactions v1+ (UnsupportedVersionError before).
    A broker answering COORDINATOR_LOAD_IN_PROGRESS (or another coordinator error) is asked
    again, ``attempts`` times in all; then the KafkaError is raised.
    """
    state_filters, pid_filters = list(states), list(producer_ids)
    L = m.ListTransactionsRequest

    def build(version: int) -> Message:
        if duration_filter_ms >= 0 and version < _DURATION_FILTER_VERSION:
            raise UnsupportedVersionError(f"ListTransactions v{version} cannot filter by duration")
        return L(
            state_filters=state_filters,
            producer_id_filters=pid_filters,
            duration_filter=duration_filter_ms,
        )

    async def ask(node: int) -> Any:
        return await at_broker(
            client, node, _LIST_TRANSACTIONS_KEY, build, "ListTransactions", attempts
        )

    metadata = await client.refresh_metadata([])
    return {node: await ask(node) for node in sorted(metadata.brokers)}


async def list_transactions(
    client: KafkaClient,
    states: Iterable[str] = (),
    producer_ids: Iterable[int] = (),
    duration_filter_ms: int = -1,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """ListTransactions at every broker, merged into one ListTransactionsResponse.

    ``transaction_states`` are concatenated (each has ``transactional_id``, ``producer_id``,
    ``transaction_state``), sorted by transactional id; ``unknown_state_filters`` is the union
    of what the brokers did not know; ``error_code`` the first non-zero one. Arguments as in
    :func:`list_transactions_by_broker`.
    """
    by_broker = await list_transactions_by_broker(
        client, states, producer_ids, duration_filter_ms, attempts=attempts
    )
    responses = list(by_broker.values())
    unknown: dict[str, None] = {}
    for r in responses:
        unknown.update(dict.fromkeys(r.unknown_state_filters))
    return m.ListTransactionsResponse(
        throttle_time_ms=max((r.throttle_time_ms for r in responses), default=0),
        error_code=next((r.error_code for r in responses if r.error_code), 0),
        unknown_state_filters=list(unknown),
        transaction_states=sorted(
            (t for r in responses for t in r.transaction_states),
            key=lambda t: (t.transactional_id, t.producer_id),
        ),
    )


# -- DescribeTransactions ------------------------------------------------------------------------


async def describe_transactions(
    client: KafkaClient, transactional_ids: Iterable[str], *, attempts: int = DEFAULT_ATTEMPTS
) -> Any:
    """DescribeTransactions, each id asked of its transaction coordinator; one merged response.

    ``response.transaction_states[i]`` (in the order of ``transactional_ids``) has
    ``error_code`` (TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know),
    ``transaction_state``, ``transaction_timeout_ms``, ``transaction_start_time_ms`` (-1 when no
    transaction is open), ``producer_id``, ``producer_epoch`` and ``topics`` (``topic``,
    ``partitions``: the partitions in the transaction). An id whose coordinator cannot be found
    after ``attempts`` rounds gets that error code; a broker that cannot be reached on the last
    round raises.
    """
    R = m.DescribeTransactionsResponse

    async def send(node: int, ids: list[str]) -> list[Any]:
        body = m.DescribeTransactionsRequest(transactional_ids=ids)
        return (await client.request(node, body)).transaction_states

    def failed(tid: str, code: int) -> Any:
        return R.TransactionState(transactional_id=tid, error_code=code)

    states = await per_coordinator(
        client,
        transactional_ids,
        send,
        failed,
        attempts,
        CoordinatorType.TRANSACTION,
        key_of=lambda item: item.transactional_id,
    )
    return R(transaction_states=states)


# -- DescribeProducers ---------------------------------------------------------------------------


async def _at_leaders(
    client: KafkaClient,
    partitions: Iterable[TopicPartition],
    send: Callable[[int, list[TopicPartition]], Awaitable[dict[TopicPartition, Any]]],
    error_of: Callable[[Any], int],
    failed: Callable[[TopicPartition, int], Any],
    attempts: int,
    target: Target | None = None,
) -> dict[TopicPartition, Any]:
    """Run ``send(leader, its_partitions)`` for the leaders of ``partitions`` (or ``target``).

    ``send`` returns ``{tp: partition result}``; results whose ``error_of`` code is in
    REFRESH_METADATA_ERRORS, and partitions whose leader is unknown, are tried again after a
    metadata refresh, up to ``attempts`` rounds; partitions that never succeed end as
    ``failed(tp, code)`` or with their last answer. Returns ``{tp: result}`` in input order.
    """
    order = list(dict.fromkeys(partitions))
    results: dict[TopicPartition, Any] = {}
    pending = order
    topics = sorted({t for t, _ in order})
    for attempt in range(1, attempts + 1):
        last = attempt == attempts
        again: list[TopicPartition] = []
        by_node: dict[Target, list[TopicPartition]] = {}
        if target is not None:
            by_node[target] = list(pending)
        else:
            try:
                await client.refresh_metadata(topics)
            except (NetworkError, RequestTimeout):
                if last:
                    raise
            for tp in pending:
                try:
                    by_node.setdefault(client.leader_for(*tp), []).append(tp)
                except KafkaError as e:
                    if e.retriable and not last:
                        again.append(tp)
                    else:
                        results[tp] = failed(tp, int(e.code))
        for node, tps in by_node.items():
            try:
                answers = await send(node, tps)
            except (NetworkError, RequestTimeout):
                if last:
                    raise
                again += tps
                continue
            for tp in tps:
                answer = answers.get(tp)
                if answer is None:  # the broker left it out: treat as a stale leader
                    answer = failed(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if error_of(answer) in REFRESH_METADATA_ERRORS and not last and target is None:
                    again.append(tp)
                else:
                    results[tp] = answer
        if not again:
            break
        pending = again
        await trio.sleep(backoff_s(client, attempt))
    return {tp: results[tp] for tp in order if tp in results}


async def describe_producers_of(
    client: KafkaClient,
    partitions: Iterable[TopicPartition],
    *,
    broker_id: int | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
) -> dict[TopicPartition, Any]:
    """DescribeProducers for any partitions: ``{(topic, partition): PartitionResponse}``.

    Each partition is asked of its leader (of ``broker_id`` when given: that replica's view,
    with no retries on NOT_LEADER_OR_FOLLOWER). A PartitionResponse has ``error_code``,
    ``error_message`` and ``active_producers``: ``producer_id``, ``producer_epoch``,
    ``last_sequence``, ``last_timestamp``, ``coordinator_epoch`` and
    ``current_txn_start_offset`` (-1: no open transaction).
    """
    D, R = m.DescribeProducersRequest, m.DescribeProducersResponse

    async def send(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        wanted: dict[str, list[int]] = {}
        for t, p in tps:
            wanted.setdefault(t, []).append(p)
        body = D(topics=[D.TopicRequest(name=t, partition_indexes=ps) for t, ps in wanted.items()])
        response = await client.request(node, body)
        return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}

    def failed(tp: TopicPartition, code: int) -> Any:
        return R.PartitionResponse(partition_index=tp[1], error_code=code)

    return await _at_leaders(
        client, partitions, send, lambda p: p.error_code, failed, attempts, broker_id
    )


async def describe_producers(
    client: KafkaClient,
    topic: str,
    partitions: Iterable[int],
    *,
    broker_id: int | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """DescribeProducers for partitions of one topic, asked of their leaders; one merged
    DescribeProducersResponse with one topic entry, partitions in the order given.

    See :func:`describe_producers_of` for the fields and ``broker_id``.
    """
    R = m.DescribeProducersResponse
    answers = await describe_producers_of(
        client, [(topic, p) for p in partitions], broker_id=broker_id, attempts=attempts
    )
    return R(topics=[R.TopicResponse(name=topic, partitions=list(answers.values()))])


async def find_open_transaction(
    client: KafkaClient, topic: str, partition: int, start_offset: int
) -> Any | None:
    """The producer (a DescribeProducers ``ProducerState``) whose open transaction on the
    partition starts at ``start_offset``, or None when there is none.

    Raises KafkaError when the partition's leader answers an error.
    """
    (answer,) = (await describe_producers_of(client, [(topic, partition)])).values()
    if answer.error_code:
        raise KafkaError(answer.error_code, answer.error_message or None)
    return next(
        (s for s in answer.active_producers if s.current_txn_start_offset == start_offset), None
    )


# -- WriteTxnMarkers (abort) ---------------------------------------------------------------------


def write_txn_markers_error(response: Any) -> int:
    """The first non-zero partition error code of a WriteTxnMarkersResponse (0: success)."""
    return next(
        (
            p.error_code
            for marker in response.markers
            for t in marker.topics
            for p in t.partitions
            if p.error_code
        ),
        0,
    )


async def abort_transaction(
    client: KafkaClient,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """Write an ABORT marker for ``producer_id``'s open transaction on one partition.

    Sends WriteTxnMarkers (transaction result ABORT) to the partition leader, as Kafka's
    ``Admin.abortTransaction`` does; the leader appends the control batch, ends the producer's
    transaction there, and the LSO moves past it. A negative ``coordinator_epoch`` (what
    DescribeProducers shows before a producer's first marker) is sent as 0, which no marker
    written later by a real coordinator can be below. Returns the WriteTxnMarkersResponse;
    :func:`write_txn_markers_error` reads its error (INVALID_PRODUCER_EPOCH: the producer has
    moved to a newer epoch; TRANSACTION_COORDINATOR_FENCED: a newer coordinator epoch has
    written to the partition; CLUSTER_AUTHORIZATION_FAILED ...). The API is inter-broker:
    UnsupportedVersionError when the broker does not offer it.
    """
    W = m.WriteTxnMarkersRequest
    body = W(
        markers=[
            W.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=False,  # False: ABORT
                topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
                coordinator_epoch=max(coordinator_epoch, 0),
            )
        ]
    )

    async def send(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        return {(topic, partition): await client.request(node, body)}

    def failed(tp: TopicPartition, code: int) -> Any:
        R = m.WriteTxnMarkersResponse
        return R(
            markers=[
                R.WritableTxnMarkerResult(
                    producer_id=producer_id,
                    topics=[
                        R.WritableTxnMarkerTopicResult(
                            name=topic,
                            partitions=[
                                R.WritableTxnMarkerPartitionResult(
                                    partition_index=partition, error_code=code
                                )
                            ],
                        )
                    ],
                )
            ]
        )

    answers = await _at_leaders(
        client, [(topic, partition)], send, write_txn_markers_error, failed, attempts
    )
    return answers[(topic, partition)]
