"""``kcore get-offsets``: the offsets of topic partitions at a time (``kafka-get-offsets.sh``,
Kafka's ``GetOffsetShell``).

Kafka's options and output, one ``topic:partition:offset`` line per partition, ordered as Kafka
orders them (by the text ``topic-partition``)::

    kcore get-offsets --bootstrap-server :9092 --topic 'orders.*' --time earliest
    orders:0:0
    orders:1:0
    kcore get-offsets --bootstrap-server :9092 --topic-partitions 'orders:0-2,audit' --time -1

``--time`` is ``latest`` / ``-1`` (the default: the next offset to be written), ``earliest`` /
``-2`` (the log start offset), ``max-timestamp`` / ``-3`` (the record with the largest
timestamp), ``earliest-local`` / ``-4``, ``latest-tiered`` / ``-5`` (kcore has no tiered
storage: the log start and no offset), or a timestamp in ms (the first record stamped at or
after it). A partition with no such offset is left out, as Kafka leaves it out. ``--topic`` is
a regular expression matched against the whole name; ``--topic-partitions`` takes Kafka's
patterns (``topic:N``, ``topic:N-M`` upper bound exclusive, ``topic:N-``, ``topic:-M``, or a
pattern without partitions). Internal topics are included unless ``--exclude-internal-topics``.

Exit status 0; 1 with ``Error occurred: ...`` on stderr (nothing matched, a bad pattern, the
cluster unreachable); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable

from kcore.client.admin import list_offsets
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text, missing_required

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = "An interactive shell for getting topic-partition offsets."
# Kafka's TOPIC_PARTITION_PATTERN, shown in the help and used to parse --topic-partitions.
TOPIC_PARTITION_PATTERN = r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?"
TIME_NAMES = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}
UNKNOWN_OFFSET = -1

OPTIONS = [
    Option(
        "bootstrap-server",
        "REQUIRED. The server(s) to connect to in the form HOST1:PORT1,HOST2:PORT2.",
        "HOST1:PORT1,...,HOST3:PORT3",
    ),
    Option(
        "topic-partitions",
        "Comma separated list of topic-partition patterns to get the offsets for, with the "
        f"format of '{TOPIC_PARTITION_PATTERN}'. The first group is an optional regex for the "
        "topic name, if omitted, it matches any topic name. The section after ':' describes a "
        "'partition' pattern, which can be: a number, a range in the format of 'NUMBER-NUMBER' "
        "(lower inclusive, upper exclusive), an inclusive lower bound in the format of "
        "'NUMBER-', an exclusive upper bound in the format of '-NUMBER' or may be omitted to "
        "accept all partitions.",
        "topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3",
    ),
    Option(
        "topic",
        "The topic to get the offsets for. It also accepts a regular expression. If not "
        "present, all authorized topics are queried. Cannot be used if --topic-partitions is "
        "present.",
        "topic",
    ),
    Option(
        "partitions",
        "Comma separated list of partition ids to get the offsets for. If not present, all "
        "partitions of the authorized topics are queried. Cannot be used if --topic-partitions "
        "is present.",
        "partition ids",
    ),
    Option(
        "time",
        "timestamp of the offsets before that. [Note: No offset is returned, if the timestamp "
        "greater than recently committed record timestamp is given.]",
        "<timestamp> / -1 or latest / -2 or earliest / -3 or max-timestamp / -4 or "
        "earliest-local / -5 or latest-tiered",
        default="latest",
    ),
    Option(
        "command-config",
        "Property file containing configs to be passed to Admin Client.",
        "config file",
    ),
    Option(
        "exclude-internal-topics",
        "By default, internal topics are included. If specified, internal topics are excluded.",
    ),
]
HELP = help_text(USAGE, OPTIONS)

PartitionFilter = Callable[[str, int], bool]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def parse_time(text: str) -> int:
    """``--time`` as a ListOffsets timestamp (Kafka's ``parseOffsetSpec``). Raises Refused."""
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        return int(text)
    except ValueError:
        raise Refused(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
            "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long "
            "format timestamp"
        ) from None


def _regex(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as e:
        raise Refused(f"{text!r} is not a valid regular expression: {e}") from None


def _rule(spec: str) -> PartitionFilter:
    """One ``--topic-partitions`` pattern (Kafka's ``parseRuleSpec``)."""
    match = re.fullmatch(TOPIC_PARTITION_PATTERN, spec)
    if match is None:
        raise Refused(f"Invalid rule specification: {spec}")
    topic, single, low, high = (g or None for g in match.groups())
    pattern = _regex(topic or ".*")
    if single is not None:
        wanted = int(single)
        return lambda t, p: bool(pattern.fullmatch(t)) and p == wanted
    lower = int(low) if low is not None else 0
    upper = int(high) if high is not None else 2**31 - 1
    return lambda t, p: bool(pattern.fullmatch(t)) and lower <= p < upper


def partition_filter(args: argparse.Namespace) -> PartitionFilter:
    """Which (topic, partition) the command line asks for. Raises Refused."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise Refused("--topic-partitions cannot be used with --topic or --partitions")
        rules = [_rule(spec) for spec in args.topic_partitions.split(",")]
        return lambda t, p: any(rule(t, p) for rule in rules)
    pattern = _regex(args.topic if args.topic is not None else ".*")
    wanted: set[int] = set()
    if args.partitions:
        try:
            wanted = {int(p) for p in args.partitions.split(",")}
        except ValueError:
            raise Refused(
                "--partitions expects a comma separated list of numeric partition ids, but "
                f"received: {args.partitions}"
            ) from None
    return lambda t, p: bool(pattern.fullmatch(t)) and (not wanted or p in wanted)


def _usage(args: argparse.Namespace) -> str | None:
    return missing_required(args, "bootstrap-server")


def main(args: argparse.Namespace) -> int:
    def prepare(args: argparse.Namespace) -> None:
        args.timestamp = parse_time(args.time or "latest")
        args.wanted = partition_filter(args)

    return run_tool(
        "get-offsets", args, _usage, _run, help_text=HELP, prepare=prepare,
        refused_prefix="Error occurred: ",
    )  # fmt: skip


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    metadata = await client.refresh_metadata(None)
    partitions = [
        (topic.name, p)
        for topic in metadata.topics.values()
        if not (args.exclude_internal_topics and topic.is_internal)
        for p in topic.partitions
        if args.wanted(topic.name, p)
    ]
    if not partitions:
        raise Refused("Error occurred: Could not match any topic-partitions with the specified filters")  # fmt: skip
    answers = await list_offsets(client, dict.fromkeys(partitions, args.timestamp))
    for topic, p in sorted(partitions, key=lambda tp: f"{tp[0]}-{tp[1]}"):
        answer = answers.get((topic, p))
        if answer is None:
            continue
        if answer.error_code:
            print(
                f"Skip getting offsets for topic-partition {topic}-{p} due to error: "
                f"{error_text(answer.error_code)}",
                file=sys.stderr,
            )
            continue
        if answer.offset != UNKNOWN_OFFSET:
            print(f"{topic}:{p}:{answer.offset}")
    return 0
