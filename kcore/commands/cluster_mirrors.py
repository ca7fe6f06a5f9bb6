"""``kcore cluster-mirrors``: create cluster mirrors and manage mirror topics
(``kafka-cluster-mirrors.sh``, spec §11.2, M-101…M-105).

The flags, the ``--help`` text, the one-line action outputs and the ``--list`` / ``--describe``
tables are the proposal's, to the character, because operators' scripts parse them::

    kcore cluster-mirrors --bootstrap-server :9094 --create --mirror my-mirror \\
        --mirror-config /tmp/mirror.properties
    Created mirror my-mirror
    kcore cluster-mirrors --bootstrap-server :9094 --start --topics 'orders-.*' \\
        --exclude orders-internal --mirror my-mirror
    Started 2 mirror topic(s) in mirror my-mirror: [orders-us, orders-eu]

Options are parsed as joptsimple parses Kafka's: a unique prefix of an option works (``--topic``
for ``--topics``, as the spec's disaster-recovery walkthrough writes it).

How ``--topics`` is sent (decision D-27): for ``--start`` every entry is an include pattern
(``mirror.topics.include``) and the entries that are plain topic names are also named topics,
so a name the source does not have gets its own error; ``--exclude`` entries are exclude
patterns. For ``--stop`` every entry is a stop pattern (M-53: it moves from the include list to
the exclude list) and plain names are also named topics. ``--pause`` and ``--resume`` have no
patterns on the wire: the entries are matched here (``re.fullmatch``, D-20) against the mirror's
topics, taken from DescribeClusterMirrors.

Beyond the proposal: ``--json`` also applies to ``--list``; ``--describe`` with ``--json``
includes the per-partition LME, source LSO, last fetch age, retry count and FAILED reason.

Exit status: 0 on success, 1 when the cluster refused (the error is printed on stderr, one line
per refused topic), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from kcore.client import mirrors as admin
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text
from kcore.metadata.topic_names import validate_topic_name
from kcore.mirror import report
from kcore.properties import load_properties
from kcore.protocol.errors import ErrorCode, KafkaError

ADD_HELP = False  # the proposal's own --help text, not argparse's

USAGE = "Create cluster mirrors and manage mirror topics."
DEFAULT_WAIT_FOR_SYNC_MS = 300_000

OPTIONS = [
    Option(
        "bootstrap-server",
        "REQUIRED: The destination Kafka server to connect to.",
        "server to connect to",
    ),
    Option(
        "command-config",
        "Property file containing configs to be passed to Admin Client.",
        "command config property file",
    ),
    Option("create", "Create a new cluster mirror from a source cluster."),
    Option("delete", "Delete a cluster mirror."),
    Option("describe", "Describe a cluster mirror including partition lag and state."),
    Option(
        "exclude",
        "Comma-separated list of topic names or regex patterns to exclude from mirroring. Only "
        "valid with --start.",
        "exclude patterns",
    ),
    Option("json", "Output description in JSON format"),
    Option("list", "List all cluster mirrors."),
    Option("mirror", "The name of the cluster mirror.", "mirror"),
    Option(
        "mirror-config",
        "Property file containing source cluster configs for mirroring.",
        "mirror config property file",
    ),
    Option("pause", "Pause mirroring for topics matching the given patterns."),
    Option("resume", "Resume mirroring for previously paused topics matching the given patterns."),
    Option("start", "Start mirroring topics matching the given patterns."),
    Option("stop", "Stop mirroring topics matching the given patterns."),
    Option(
        "topics",
        "Comma-separated list of topic names or regex patterns (e.g., "
        "'my-topic,orders-.*,payments').",
        "topics",
    ),
    # Not the proposal's: kcore's graceful failover (decision D-31).
    Option(
        "wait-for-sync",
        "With --stop: first wait until the lag of every partition to stop is 0, for at most "
        "the timeout, then stop.",
        "timeout ms",
        "Long",
        optional=True,
        default=str(DEFAULT_WAIT_FOR_SYNC_MS),
    ),
]
# The proposal's text (spec §11.2) is joptsimple's layout without the trailing spaces.
HELP = help_text(USAGE, OPTIONS, pad=False)

ACTIONS = ("create", "start", "stop", "pause", "resume", "delete", "list", "describe")

ACTION_LINES = {
    "start": "Started {n} mirror topic(s) in mirror {mirror}: [{topics}]",
    "stop": "Stopped mirroring for {n} topic(s) in mirror {mirror}: [{topics}]",
    "pause": "Paused mirroring for {n} topic(s) in mirror {mirror}: [{topics}]",
    "resume": "Resumed mirroring for {n} topic(s) in mirror {mirror}: [{topics}]",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The proposal's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _usage(args: argparse.Namespace) -> str | None:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        return "exactly one of --" + ", --".join(ACTIONS) + " is required"
    action = actions[0]
    if not args.bootstrap_server:
        return "--bootstrap-server is required"
    if action in ("create", "start", "stop", "pause", "resume", "delete") and not args.mirror:
        return f"--{action} requires --mirror"
    if action == "create" and not args.mirror_config:
        return "--create requires --mirror-config"
    if action in ("start", "stop", "pause", "resume") and not args.topics:
        return f"--{action} requires --topics"
    if args.exclude and action != "start":
        return "--exclude is only valid with --start"
    if args.mirror_config and action != "create":
        return "--mirror-config is only valid with --create"
    if args.json and action not in ("list", "describe"):
        return "--json is only valid with --list and --describe"
    if args.wait_for_sync is not None and action != "stop":
        return "--wait-for-sync is only valid with --stop"
    if args.wait_for_sync is not None and args.wait_for_sync < 0:
        return "--wait-for-sync takes a timeout in ms >= 0"
    if args.topics and action not in ("start", "stop", "pause", "resume"):
        return f"--topics is not valid with --{action}"
    for flag, value in (("--topics", args.topics), ("--exclude", args.exclude)):
        for entry in _entries(value):
            try:
                re.compile(entry)
            except re.error as e:
                return f"{flag}: {entry!r} is not a valid regular expression: {e}"
    args.action = action
    return None


def _entries(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


def _names(entries: list[str]) -> list[str]:
    """The entries that are plain topic names (also sent as named topics, see above)."""
    names = []
    for e in entries:
        try:
            validate_topic_name(e)
        except KafkaError:
            continue
        names.append(e)
    return names


def main(args: argparse.Namespace) -> int:
    return run_tool("cluster-mirrors", args, _usage, _run, help_text=HELP)


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    return await globals()[f"_{args.action}"](client, args)


def _checked(response: Any) -> Any:
    """A response whose top-level error becomes :class:`Refused` with Kafka's error name and
    message (admin requests go to any broker, which forwards changes to the controller)."""
    if response.error_code:
        raise Refused(f"Error: {error_text(response.error_code, response.error_message)}")
    return response


# -- the actions ---------------------------------------------------------------------------


async def _create(client: KafkaClient, args) -> int:
    try:
        configs = load_properties(args.mirror_config)
    except (OSError, ValueError) as e:
        raise Refused(f"Error: cannot read --mirror-config {args.mirror_config}: {e}") from None
    _checked(await admin.create_cluster_mirror(client, args.mirror, configs))
    print(f"Created mirror {args.mirror}")
    return 0


async def _delete(client: KafkaClient, args) -> int:
    _checked(await admin.delete_cluster_mirror(client, args.mirror))
    print(f"Deleted mirror {args.mirror}")
    return 0


async def _start(client: KafkaClient, args) -> int:
    entries = _entries(args.topics)
    response = await admin.start_mirror_topics(
        client,
        args.mirror,
        _names(entries),
        include_patterns=entries,
        exclude_patterns=_entries(args.exclude),
    )
    return _report("start", args.mirror, _checked(response))


async def _stop(client: KafkaClient, args) -> int:
    entries = _entries(args.topics)
    if args.wait_for_sync is not None:
        await _wait_for_sync(client, args.mirror, entries, args.wait_for_sync)
    response = await admin.stop_mirror_topics(
        client, args.mirror, _names(entries), patterns=entries
    )
    return _report("stop", args.mirror, _checked(response))


async def _pause(client: KafkaClient, args) -> int:
    topics = await _matching_mirror_topics(client, args.mirror, _entries(args.topics))
    response = await admin.pause_mirror_topics(client, args.mirror, topics)
    return _report("pause", args.mirror, _checked(response))


async def _resume(client: KafkaClient, args) -> int:
    topics = await _matching_mirror_topics(client, args.mirror, _entries(args.topics))
    response = await admin.resume_mirror_topics(client, args.mirror, topics)
    return _report("resume", args.mirror, _checked(response))


async def _wait_for_sync(client: KafkaClient, mirror: str, entries: list[str], timeout_ms: int):
    """D-31, the planned failover: wait until every partition of the topics to stop has lag 0
    (the destination holds all the source has), or ``timeout_ms`` passes; then the stop goes
    ahead either way, and a partition still behind is named on stderr."""
    topics = await _matching_mirror_topics(client, mirror, entries)

    async def describe():
        return _checked(await admin.describe_cluster_mirrors(client, [mirror]))

    behind = await admin.wait_for_sync(describe, mirror, topics, timeout_ms / 1000)
    if behind:
        print(f"Warning: not in sync after {timeout_ms} ms: {', '.join(behind)}", file=sys.stderr)


async def _matching_mirror_topics(client: KafkaClient, mirror: str, entries: list[str]):
    """The mirror's topics that an entry matches as a whole (D-20), in the mirror's order."""
    response = _checked(await admin.describe_cluster_mirrors(client, [mirror]))
    described = [d for d in response.mirrors if d.mirror_name == mirror]
    if not described:
        raise Refused(f"Error: {error_text(ErrorCode.MIRROR_NOT_FOUND)}")
    if described[0].error_code:
        raise Refused(f"Error: {error_text(described[0].error_code, described[0].error_message)}")
    matched = report.matching_topics(described[0], entries)
    if not matched:
        raise Refused(f"Error: no topic of mirror {mirror} matches {', '.join(entries)}")
    return matched


def _report(action: str, mirror: str, response) -> int:
    """The action's line for the topics acted on (M-102, in the order answered), and a line on
    stderr per refused topic; status 1 if any was refused."""
    done = [t.name for t in response.topics if not t.error_code]
    refused = [t for t in response.topics if t.error_code]
    if done or not refused:
        line = ACTION_LINES[action]
        print(line.format(n=len(done), mirror=mirror, topics=", ".join(done)))
    for t in refused:
        print(
            f"Error: topic {t.name}: {error_text(t.error_code, t.error_message)}", file=sys.stderr
        )
    return 1 if refused else 0


async def _list(client: KafkaClient, args) -> int:
    response = _checked(await admin.list_cluster_mirrors(client))
    mirrors = sorted(response.mirrors, key=lambda x: x.mirror_name)
    if args.json:
        rows = [
            {
                "mirror": x.mirror_name,
                "topics": x.topic_count,
                "sourceClusterId": x.source_cluster_id or None,
                "sourceBootstrap": x.source_bootstrap,
            }
            for x in mirrors
        ]
        print(json.dumps({"mirrors": rows}, indent=2))
        return 0
    # M-103: %-30s %-10s %-26s then the bootstrap servers unpadded. An unresolved cluster id
    # prints as "-", as unknown offsets do in --describe.
    print(f"{'MIRROR':<30} {'TOPICS':<10} {'CLUSTER-ID':<26} BOOTSTRAP-SERVER")
    for x in mirrors:
        cluster_id = x.source_cluster_id or "-"
        print(f"{x.mirror_name:<30} {x.topic_count:<10} {cluster_id:<26} {x.source_bootstrap}")
    return 0


def _offset(value: int) -> str:
    return "-" if value < 0 else str(value)


async def _describe(client: KafkaClient, args) -> int:
    names = [args.mirror] if args.mirror else []
    response = _checked(await admin.describe_cluster_mirrors(client, names))
    mirrors = sorted(response.mirrors, key=lambda x: x.mirror_name)
    status = 0
    for x in mirrors:
        if x.error_code:
            print(f"Error: mirror {x.mirror_name}: {error_text(x.error_code, x.error_message)}",
                  file=sys.stderr)  # fmt: skip
            status = 1
    if args.json:
        doc = {"mirrors": [report.mirror_document(x) for x in mirrors if not x.error_code]}
        print(json.dumps(report.camel_keys(doc), indent=2))
        return status
    rows = [
        (x.mirror_name, t.topic_name, p)
        for x in mirrors
        if not x.error_code
        for t in sorted(x.topics, key=lambda t: t.topic_name)
        for p in sorted(t.partitions, key=lambda p: p.partition_index)
    ]
    # M-104: %-30s %-40s %-10s %-15s %-18s %-8s then the state.
    print(
        f"{'MIRROR':<30} {'TOPIC':<40} {'PARTITION':<10} {'SOURCE-OFFSET':<15} "
        f"{'DESTINATION-OFFSET':<18} {'LAG':<8} STATE"
    )
    for mirror, topic, p in rows:
        print(
            f"{mirror:<30} {topic:<40} {p.partition_index:<10} {_offset(p.source_offset):<15} "
            f"{_offset(p.destination_offset):<18} {_offset(p.lag):<8} {p.state}"
        )
    for x in mirrors:
        if not x.error_code:
            _print_sync(x)
    return status


# -- the metadata sync status (issue #15): kcore's, after the spec's table --------------------


def _age(ms: int) -> str:
    return "never" if ms < 0 else f"{ms / 1000:.1f} s ago"


def _print_sync(x) -> None:
    print()
    print(f"Metadata sync of mirror {x.mirror_name}: last round {_age(x.last_sync_age_ms)}")
    if x.sync_changes:
        age = (
            ""
            if x.last_sync_time_ms < 0 or x.last_change_time_ms < 0
            else (f" ({_age(x.last_sync_age_ms + x.last_sync_time_ms - x.last_change_time_ms)})")
        )
        print(f"  last changes{age}:")
        for c in x.sync_changes:
            print(f"    {c.kind} {c.resource}" + (f": {c.detail}" if c.detail else ""))
    for e in x.sync_errors:
        print(f"  error: {e}")
    for n in x.sync_notes:
        print(f"  note: {n}")
