"""``kcore transactions``: inspect transactions and abort hanging ones (``kafka-transactions.sh``).

Same subcommands, options and output columns as Kafka's tool::

    kcore transactions --bootstrap-server 127.0.0.1:9092 list [--state Ongoing[,...]] \\
        [--producer-id ID] [--duration-filter MS]
    kcore transactions --bootstrap-server 127.0.0.1:9092 describe --transactional-id ID
    kcore transactions --bootstrap-server 127.0.0.1:9092 describe-producers \\
        --topic T --partition P [--broker-id B]
    kcore transactions --bootstrap-server 127.0.0.1:9092 abort --topic T --partition P \\
        (--start-offset N | --producer-id X --producer-epoch E --coordinator-epoch C)
    kcore transactions --bootstrap-server 127.0.0.1:9092 find-hanging \\
        (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MINUTES]

A transaction *hangs* when a partition holds an open transaction (DescribeProducers shows a
``CurrentTransactionStartOffset``) that its coordinator does not know about: no marker will ever
end it, so the partition's last stable offset stays at its first offset and read_committed
consumers stop there. ``find-hanging`` looks for open transactions older than
``--max-transaction-timeout`` (Kafka's default 15 minutes: ``transaction.max.timeout.ms``)
whose producer id no coordinator lists, or whose coordinator does not list the partition; the
coordinator aborts its own transactions when they time out, so anything past that bound and
unknown to it is stuck. ``abort`` then writes the ABORT marker at the partition leader.

Exit status 0 on success, 1 when the cluster refused or the request failed (the error is
printed), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError
from kcore.client.groups import CoordinatorType, find_coordinator
from kcore.client.transactions import (
    TRANSACTION_STATES,
    abort_transaction,
    describe_producers_of,
    describe_transactions,
    find_open_transaction,
    list_transactions,
    list_transactions_by_broker,
    write_txn_markers_error,
)
from kcore.commands._common import Refused, error_text, run_command, tab_table
from kcore.protocol.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # Kafka's transaction.max.timeout.ms, in minutes
# DescribeProducers requests of find-hanging carry at most this many partitions each, so a
# broker with thousands of partitions is not asked everything in one request (Kafka: 500).
MAX_PARTITIONS_PER_REQUEST = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
    parser.add_argument("--timeout", type=int, default=30_000, help="request timeout, ms")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="list transactions")
    listing.add_argument("--state", metavar="STATE[,STATE]", help="only these states")
    listing.add_argument("--producer-id", type=int, action="append", default=[], metavar="ID")
    listing.add_argument(
        "--duration-filter",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions running longer than this (ms)",
    )

    describe = sub.add_parser("describe", help="describe the state of an active transactional id")
    describe.add_argument("--transactional-id", required=True)

    producers = sub.add_parser(
        "describe-producers", help="describe the active producers of a topic partition"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.add_argument(
        "--broker-id", type=int, help="ask this replica instead of the partition leader"
    )

    abort = sub.add_parser("abort", help="abort a hanging transaction (writes an ABORT marker)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="first offset of the transaction")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)

    hanging = sub.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="search the partitions of this broker")
    hanging.add_argument("--topic", help="search this topic")
    hanging.add_argument("--partition", type=int, help="with --topic: only this partition")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MINUTES",
        help="open transactions older than this are candidates (default 15)",
    )


def _usage(args: argparse.Namespace) -> str | None:
    """Kafka's option checks: the message of the first one that fails, or None."""
    if args.action == "abort":
        if args.start_offset is None and args.producer_id is None:
            return (
                "The transaction to abort must be identified either with --start-offset or "
                "with --producer-id, --producer-epoch and --coordinator-epoch"
            )
        if args.start_offset is not None and args.producer_id is not None:
            return "--start-offset and --producer-id cannot be used together"
        if args.start_offset is None and args.producer_epoch is None:
            return "Missing required argument --producer-epoch"
        if args.start_offset is None and args.coordinator_epoch is None:
            return "Missing required argument --coordinator-epoch"
    if args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            return (
                "The find-hanging command requires either --topic or --broker-id to limit "
                "the scope of the search"
            )
        if args.partition is not None and args.topic is None:
            return "The --partition argument requires --topic to be provided"
        if args.max_transaction_timeout < 0:
            return "--max-transaction-timeout cannot be negative"
    return None


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- list ------------------------------------------------------------------------------------------


def _parse_states(value: str | None) -> list[str]:
    canonical = {s.lower(): s for s in TRANSACTION_STATES}
    states = []
    for raw in filter(None, (s.strip() for s in (value or "").split(","))):
        if raw.lower() not in canonical:
            raise Refused(f"Error: invalid state '{raw}'; valid: {', '.join(TRANSACTION_STATES)}")
        states.append(canonical[raw.lower()])
    return states


async def _list(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        by_broker = await list_transactions_by_broker(
            client, _parse_states(args.state), args.producer_id, args.duration_filter
        )
    except (KafkaError, ClientError) as e:
        raise Refused(f"Failed to list transactions: {e}") from None
    rows = []
    status = 0
    for broker, response in by_broker.items():
        if response.error_code:
            print(
                f"Failed to list transactions at broker {broker}: {error_text(response.error_code)}",
                file=sys.stderr,
            )
            status = 1
        for t in sorted(response.transaction_states, key=lambda t: t.transactional_id):
            rows.append((t.transactional_id, broker, t.producer_id, t.transaction_state))
    print(tab_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows))
    return status


# -- describe --------------------------------------------------------------------------------------


async def _describe(client: KafkaClient, args: argparse.Namespace) -> int:
    tid = args.transactional_id
    failure = f"Failed to describe transaction state of transactional-id `{tid}`"
    try:
        (state,) = (await describe_transactions(client, [tid])).transaction_states
        coordinator = await client.retry(
            lambda: find_coordinator(client, tid, CoordinatorType.TRANSACTION)
        )
    except (KafkaError, ClientError) as e:
        raise Refused(f"{failure}: {e}") from None
    if state.error_code:
        raise Refused(f"{failure}: {error_text(state.error_code)}")
    if state.transaction_start_time_ms >= 0:
        start = str(state.transaction_start_time_ms)
        duration = str(_now_ms() - state.transaction_start_time_ms)
    else:
        start = duration = "None"
    partitions = ",".join(
        f"{t.topic}-{p}"
        for t in sorted(state.topics, key=lambda t: t.topic)
        for p in sorted(t.partitions)
    )
    headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    row = (
        coordinator.node_id,
        tid,
        state.producer_id,
        state.producer_epoch,
        state.transaction_state,
        state.transaction_timeout_ms,
        start,
        duration,
        partitions,
    )
    print(tab_table(headers, [row]))
    return 0


# -- describe-producers ----------------------------------------------------------------------------


async def _describe_producers(client: KafkaClient, args: argparse.Namespace) -> int:
    tp = (args.topic, args.partition)
    where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
    failure = f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}"
    try:
        answer = (await describe_producers_of(client, [tp], broker_id=args.broker_id))[tp]
    except (KafkaError, ClientError) as e:
        raise Refused(f"{failure}: {e}") from None
    if answer.error_code:
        raise Refused(f"{failure}: {error_text(answer.error_code, answer.error_message)}")
    headers = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    rows = [
        (
            s.producer_id,
            s.producer_epoch,
            s.coordinator_epoch,
            s.last_sequence,
            s.last_timestamp,
            "None" if s.current_txn_start_offset < 0 else s.current_txn_start_offset,
        )
        for s in answer.active_producers
    ]
    print(tab_table(headers, rows))
    return 0


# -- abort -----------------------------------------------------------------------------------------


async def _abort(client: KafkaClient, args: argparse.Namespace) -> int:
    topic, partition = args.topic, args.partition
    if args.start_offset is not None:
        try:
            state = await find_open_transaction(client, topic, partition, args.start_offset)
        except (KafkaError, ClientError) as e:
            raise Refused(
                f"Failed to validate producer state for partition {topic}-{partition}: {e}"
            ) from None
        if state is None:
            raise Refused(
                f"Could not find any open transactions starting at offset {args.start_offset} "
                f"on partition {topic}-{partition}"
            )
        producer_id, producer_epoch = state.producer_id, state.producer_epoch
        coordinator_epoch = state.coordinator_epoch
    else:
        producer_id, producer_epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
    # A producer whose transaction hung before its first marker shows coordinator epoch -1;
    # 0 is at or below any epoch a coordinator has written with, so the marker is accepted.
    coordinator_epoch = max(coordinator_epoch, 0)
    spec = (
        f"{topic}-{partition} (producerId={producer_id}, producerEpoch={producer_epoch}, "
        f"coordinatorEpoch={coordinator_epoch})"
    )
    try:
        response = await abort_transaction(
            client, topic, partition, producer_id, producer_epoch, coordinator_epoch
        )
    except (KafkaError, ClientError) as e:
        raise Refused(f"Failed to abort transaction {spec}: {e}") from None
    code = write_txn_markers_error(response)
    if code:
        raise Refused(f"Failed to abort transaction {spec}: {error_text(code)}")
    print(f"Aborted the transaction of {spec}.")
    return 0


# -- find-hanging ----------------------------------------------------------------------------------


async def _partitions_to_search(
    client: KafkaClient, args: argparse.Namespace
) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    # Every topic, internal ones included (__consumer_offsets takes transactional offsets).
    metadata = await client.refresh_metadata(None if args.topic is None else [args.topic])
    if args.topic is not None and args.topic not in metadata.topics:
        code = metadata.topic_errors.get(args.topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        raise Refused(f"Failed to describe topic {args.topic}: {error_text(code)}")
    names = [args.topic] if args.topic is not None else sorted(metadata.topics)
    return [
        (name, p.partition)
        for name in names
        for p in sorted(metadata.topics[name].partitions.values(), key=lambda p: p.partition)
        if args.broker_id is None or args.broker_id in p.replicas
    ]


async def _open_transactions(
    client: KafkaClient, args: argparse.Namespace, partitions: list[TopicPartition]
) -> list[tuple[TopicPartition, Any]]:
    """The open transactions older than the maximum timeout: ``[(tp, ProducerState)]``."""
    max_timeout_ms = args.max_transaction_timeout * 60_000
    out = []
    for i in range(0, len(partitions), MAX_PARTITIONS_PER_REQUEST):
        batch = partitions[i : i + MAX_PARTITIONS_PER_REQUEST]
        answers = await describe_producers_of(client, batch, broker_id=args.broker_id)
        now = _now_ms()
        for tp, answer in answers.items():
            if answer.error_code:
                where = "" if args.broker_id is None else f" on broker {args.broker_id}"
                raise Refused(
                    f"Failed to describe producers for {tp[0]}-{tp[1]}{where}: "
                    f"{error_text(answer.error_code, answer.error_message)}"
                )
            for state in answer.active_producers:
                if (
                    state.current_txn_start_offset >= 0
                    and now - state.last_timestamp > max_timeout_ms
                ):
                    out.append((tp, state))
    return out


async def _find_hanging(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        candidates = await _open_transactions(
            client, args, await _partitions_to_search(client, args)
        )
        hanging = []
        if candidates:
            pids = sorted({s.producer_id for _, s in candidates})
            listed = await list_transactions(client, producer_ids=pids)
            ids = {t.producer_id: t.transactional_id for t in listed.transaction_states}
            described = {
                d.transactional_id: d
                for d in (
                    await describe_transactions(client, sorted(set(ids.values())))
                ).transaction_states
            }
            for tp, state in candidates:
                tid = ids.get(state.producer_id)
                d = described.get(tid) if tid is not None else None
                if (
                    d is not None
                    and d.error_code
                    and d.error_code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                ):
                    raise Refused(
                        f"Failed to describe transaction {tid}: {error_text(d.error_code)}"
                    )
                if d is None or d.error_code:  # no coordinator knows the producer id
                    hanging.append((tp, state))
                    continue
                # The coordinator lists the partitions of an ongoing transaction, and those
                # still waiting for a marker while it completes: a partition among them will
                # get its marker. Any other is stuck.
                in_txn = {(t.topic, p) for t in d.topics for p in t.partitions}
                if tp not in in_txn:
                    hanging.append((tp, state))
    except (KafkaError, ClientError) as e:
        raise Refused(f"Failed to search for hanging transactions: {e}") from None
    now = _now_ms()
    headers = [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    rows = [
        (
            tp[0],
            tp[1],
            s.producer_id,
            s.producer_epoch,
            s.coordinator_epoch,
            s.current_txn_start_offset,
            s.last_timestamp,
            (now - s.last_timestamp) // 60_000,
        )
        for tp, s in hanging
    ]
    print(tab_table(headers, rows))
    return 0


_ACTIONS = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "abort": _abort,
    "find-hanging": _find_hanging,
}


async def _action(client: KafkaClient, args: argparse.Namespace) -> int:
    return await _ACTIONS[args.action](client, args)


def main(args: argparse.Namespace) -> int:
    return run_command("transactions", args, _usage, _action)
