"""``kcore log-dirs``: what each broker's log directories hold (``kafka-log-dirs.sh
--describe``, Kafka's ``LogDirsCommand``).

Kafka's options and output: two lines, then one JSON line (the keys in the order Kafka's
``HashMap`` prints them, so a script comparing text sees Kafka's bytes)::

    kcore log-dirs --bootstrap-server :9092 --describe --topic-list orders
    Querying brokers for log directories information
    Received log directory information from brokers 1
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"orders-0","size":1240,"offsetLag":0,"isFuture":false}],"error":null,"logDir":"/var/lib/kcore/logs"}]}],"version":1}

``size`` is the bytes of the partition's segments, ``offsetLag`` how far the log end is behind
the high watermark (0 on a current replica), ``isFuture`` always false (kcore moves no replica
between directories); ``error`` names the exception class of a directory that cannot be read.
Without ``--broker-list`` every broker is asked, without ``--topic-list`` every partition shown.

Exit status 0; 1 with one line on stderr (a broker not in the cluster, a refused request, the
cluster unreachable); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json

from kcore.client.admin import describe_log_dirs
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import (
    Option,
    add_options,
    help_text,
    missing_required,
    split_list,
)
from kcore.protocol.errors import ErrorCode

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = "This tool helps to query log directory usage on the specified brokers."

OPTIONS = [
    Option(
        "bootstrap-server",
        "REQUIRED: the server(s) to use for bootstrapping",
        "The server(s) to use for bootstrapping",
    ),
    Option(
        "command-config",
        "Property file containing configs to be passed to Admin Client.",
        "Admin client property file",
    ),
    Option("describe", "Describe the specified log directories on the specified brokers."),
    Option(
        "topic-list",
        'The list of topics to be queried in the form "topic1,topic2,topic3". All topics will '
        "be queried if no topic list is specified",
        "Topic list",
        default="",
    ),
    Option(
        "broker-list",
        'The list of brokers to be queried in the form "0,1,2". All brokers in the cluster will '
        "be queried if no broker list is specified",
        "Broker list",
        default="",
    ),
]
HELP = help_text(USAGE, OPTIONS)

# The Java exception Kafka's admin client raises for a directory's error, as the JSON names it.
EXCEPTIONS = {
    ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.UNKNOWN_SERVER_ERROR: "org.apache.kafka.common.errors.UnknownServerException",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _usage(args: argparse.Namespace) -> str | None:
    if problem := missing_required(args, "bootstrap-server", "describe"):
        return problem
    try:
        args.brokers = {int(b) for b in split_list(args.broker_list)}
    except ValueError:
        return f"--broker-list takes broker ids: {args.broker_list}"
    args.topics = set(split_list(args.topic_list))
    return None


def main(args: argparse.Namespace) -> int:
    return run_tool("log-dirs", args, _usage, _run, help_text=HELP)


def _error_name(code: int) -> str | None:
    if not code:
        return None
    try:
        error = ErrorCode(code)
    except ValueError:
        return f"error code {code}"
    return EXCEPTIONS.get(error, error.name)


def log_dir_json(results, topics: set[str]) -> list[dict]:
    """A broker's ``logDirs`` array of Kafka's JSON, its partitions limited to ``topics``
    (all when empty)."""
    out = []
    for d in results:
        partitions = [
            {
                "partition": f"{t.name}-{p.partition_index}",
                "size": p.partition_size,
                "offsetLag": p.offset_lag,
                "isFuture": p.is_future_key,
            }
            for t in sorted(d.topics, key=lambda t: t.name)
            if not topics or t.name in topics
            for p in sorted(t.partitions, key=lambda p: p.partition_index)
        ]
        out.append(
            {"partitions": partitions, "error": _error_name(d.error_code), "logDir": d.log_dir}
        )
    return out


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    metadata = await client.refresh_metadata([])
    cluster = set(metadata.brokers)
    missing = args.brokers - cluster
    if missing:
        raise Refused(
            "ERROR: The given brokers do not exist from --broker-list: "
            f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
            f"{','.join(map(str, sorted(cluster)))}"
        )
    brokers = sorted(args.brokers or cluster)
    print("Querying brokers for log directories information", flush=True)
    answers = []
    for broker in brokers:
        response = await describe_log_dirs(client, broker)
        if response.error_code:
            raise Refused(f"broker {broker}: {error_text(response.error_code)}")
        answers.append({"broker": broker, "logDirs": log_dir_json(response.results, args.topics)})
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    print(json.dumps({"brokers": answers, "version": 1}, separators=(",", ":")))
    return 0
