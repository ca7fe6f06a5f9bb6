"""``kcore topics``: create, list, describe, delete and grow topics (``kafka-topics.sh``).

Same options as Kafka's tool where they overlap::

    kcore topics --bootstrap-server 127.0.0.1:9092 --create --topic orders --partitions 3 \\
        --replication-factor 1 --config retention.ms=86400000
    kcore topics --bootstrap-server 127.0.0.1:9092 --list
    kcore topics --bootstrap-server 127.0.0.1:9092 --describe [--topic orders]
    kcore topics --bootstrap-server 127.0.0.1:9092 --alter --topic orders --partitions 6
    kcore topics --bootstrap-server 127.0.0.1:9092 --delete --topic orders
    kcore topics --bootstrap-server 127.0.0.1:9094 --list --command-config client-ssl.properties

``--command-config F`` takes the admin client's settings (``docs/operations.md``, "The admin
tools' common options"), SASL included.

Exit status 0 on success, 1 when the cluster refused the operation (the error is printed).
"""

from __future__ import annotations

import argparse
import sys

import trio

from kcore.client.admin import NewTopic, create_topics, delete_topics
from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError
from kcore.commands._common import Refused, apply_command_config
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, error_info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("create", "list", "describe", "alter", "delete"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--topic")
    parser.add_argument("--partitions", type=int, default=-1)
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--if-not-exists", action="store_true")
    parser.add_argument("--if-exists", action="store_true")
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="admin client settings (client.id, timeouts, security.protocol with the sasl.* "
        "and ssl.* client keys)",
    )


def _error(code: int, message: str | None) -> str:
    name = error_info(code)[0]
    return f"{name}: {message}" if message else name


async def _run(args: argparse.Namespace) -> int:
    async with KafkaClient(
        args.bootstrap_server,
        client_id=args.client_id or "kcore-topics",
        request_timeout=args.timeout / 1000,
        ssl_context=args.ssl_context,
        sasl=args.sasl,
    ) as client:
        if args.create:
            configs = dict(c.split("=", 1) for c in args.config)
            response = await create_topics(
                client,
                [NewTopic(args.topic, args.partitions, args.replication_factor, configs=configs)],
            )
            result = response.topics[0]
            if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                return 0
            if result.error_code:
                print(_error(result.error_code, result.error_message), file=sys.stderr)
                return 1
            print(f"Created topic {args.topic}.")
            return 0
        if args.delete:
            response = await delete_topics(client, [args.topic])
            result = response.responses[0]
            if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
                return 0
            if result.error_code:
                print(_error(result.error_code, result.error_message), file=sys.stderr)
                return 1
            return 0
        if args.alter:
            C = m.CreatePartitionsRequest
            body = C(
                topics=[
                    C.CreatePartitionsTopic(
                        name=args.topic, count=args.partitions, assignments=None
                    )
                ],
                timeout_ms=30000,
            )
            response = await client.request("controller", body)
            result = response.results[0]
            if result.error_code:
                print(_error(result.error_code, result.error_message), file=sys.stderr)
                return 1
            return 0
        metadata = await client.request(
            "any",
            m.MetadataRequest(
                topics=None
                if args.topic is None
                else [m.MetadataRequest.MetadataRequestTopic(name=args.topic)]
            ),
        )
        topics = sorted(metadata.topics, key=lambda t: t.name or "")
        if args.list:
            for t in topics:
                print(t.name)
            return 0
        status = 0
        for t in topics:
            if t.error_code:
                print(f"Topic: {t.name}\t{_error(t.error_code, None)}", file=sys.stderr)
                status = 1
                continue
            rf = len(t.partitions[0].replica_nodes) if t.partitions else 0
            print(
                f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}"
                f"\tReplicationFactor: {rf}"
            )
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                print(
                    f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}"
                    f"\tReplicas: {','.join(map(str, p.replica_nodes))}"
                    f"\tIsr: {','.join(map(str, p.isr_nodes))}"
                )
        return status


def main(args: argparse.Namespace) -> int:
    if not args.list and not args.describe and not args.topic:
        print("kcore topics: --topic is required", file=sys.stderr)
        return 2
    try:
        apply_command_config(args)
    except Refused as e:
        print(f"kcore topics: {e}", file=sys.stderr)
        return 1
    try:
        return trio.run(_run, args)
    except ClientError as e:
        print(f"kcore topics: {e}", file=sys.stderr)
        return 1
