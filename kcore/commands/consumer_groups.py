"""``kcore consumer-groups``: list, describe, reset and delete consumer groups
(``kafka-consumer-groups.sh``).

Same options and output as Kafka's tool where they overlap::

    kcore consumer-groups --bootstrap-server 127.0.0.1:9092 --list [--state [Stable,Empty]]
    kcore consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group billing
        [--members [--verbose] | --state | --offsets]
    kcore consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing \\
        (--topic orders[:0,1] | --all-topics) \\
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N \\
         | --to-datetime 2024-05-01T12:00:00.000) (--dry-run | --execute)
    kcore consumer-groups --bootstrap-server 127.0.0.1:9092 --delete --group billing
    kcore consumer-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group billing \\
        --topic orders[:0,1]

Offsets are reset only while the group has no members (state Empty, or Dead: it does not exist
yet), because a live consumer would overwrite them with its next commit — Kafka refuses for the
same reason, and so does the coordinator (a simple commit to a group with members fails with
UNKNOWN_MEMBER_ID). Without ``--execute`` a reset only prints the offsets it would commit.

Exit status 0 on success, 1 when the cluster refused (the error is printed), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from kcore.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from kcore.client.cluster import KafkaClient
from kcore.client.groups import (
    decode_assignment,
    delete_groups,
    describe_groups,
    find_coordinator,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_fetch_partitions,
)
from kcore.commands._common import Refused, error_text, run_command, space_table
from kcore.protocol import MalformedMessage
from kcore.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

# The states a group can be listed by (Kafka's GroupState names; the filter is case-insensitive
# on the command line, sent in Kafka's spelling).
GROUP_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
    "Unknown",
)
_REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
# Offsets may be reset only in these states: no member could overwrite them.
_INACTIVE = {"Empty", "Dead"}
_RESET_SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("list", "describe", "reset-offsets", "delete", "delete-offsets"):
        action.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--group", action="append", default=[], help="a group id (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    parser.add_argument(
        "--topic", action="append", default=[], metavar="TOPIC[:P,P]", help="repeatable"
    )
    parser.add_argument("--all-topics", action="store_true", help="every topic the group has")
    parser.add_argument("--members", action="store_true", help="describe the members")
    parser.add_argument("--offsets", action="store_true", help="describe the offsets (default)")
    parser.add_argument("--verbose", action="store_true", help="with --members: assignments")
    parser.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATE[,STATE]",
        help="--describe: the group's state; --list: show (and filter by) state",
    )
    spec = parser.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-current", action="store_true")
    spec.add_argument("--to-offset", type=int, metavar="N")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    spec.add_argument("--shift-by", type=int, metavar="N")
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the new offsets only")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--timeout", type=int, default=30_000, help="request timeout, ms")


def _usage(args: argparse.Namespace) -> str | None:
    """Kafka's option checks: the message of the first one that fails, or None."""
    groups = bool(args.group) or args.all_groups
    if args.group and args.all_groups:
        return "--group and --all-groups cannot be used together"
    if (args.describe or args.delete or args.reset_offsets) and not groups:
        return "--group or --all-groups is required"
    if args.delete_offsets and len(args.group) != 1:
        return "--delete-offsets takes exactly one --group"
    if args.delete_offsets and not args.topic:
        return "--delete-offsets needs --topic"
    if (args.members or args.offsets) and not args.describe:
        return "--members and --offsets go with --describe"
    if sum([args.members, args.offsets, args.state is not None]) > 1 and args.describe:
        return "--members, --offsets and --state are exclusive"
    if args.state and args.describe:
        return "--state takes no value with --describe"
    if args.state is not None and not (args.describe or args.list):
        return "--state goes with --describe or --list"
    if args.reset_offsets:
        if sum(getattr(args, s) not in (None, False) for s in _RESET_SPECS) != 1:
            return (
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
                "--to-offset, --to-datetime, --shift-by"
            )
        if bool(args.topic) == args.all_topics:
            return "--reset-offsets needs --topic or --all-topics (not both)"
    elif args.dry_run or args.execute or args.all_topics:
        return "--dry-run, --execute and --all-topics go with --reset-offsets"
    return None


def _parse_topics(specs: Iterable[str]) -> dict[str, list[int] | None]:
    """``["orders:0,2", "audit"]`` → ``{"orders": [0, 2], "audit": None}`` (None: all)."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise Refused(f"Error: invalid --topic {spec!r}")
        if not sep:
            out[topic] = None
            continue
        try:
            out[topic] = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise Refused(f"Error: invalid partitions in --topic {spec!r}") from None
    return out


async def _topic_partitions(
    client: KafkaClient, specs: dict[str, list[int] | None]
) -> list[TopicPartition]:
    """The partitions named by ``--topic`` options; a bare topic means all its partitions."""
    metadata = await client.refresh_metadata(list(specs))
    out: list[TopicPartition] = []
    for topic, parts in specs.items():
        info = metadata.topics.get(topic)
        if info is None:
            code = metadata.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise Refused(f"Error: topic '{topic}': {error_text(code)}")
        if parts is None:
            parts = sorted(info.partitions)
        missing = [p for p in parts if p not in info.partitions]
        if missing:
            raise Refused(f"Error: topic '{topic}' has no partition {missing[0]}")
        out += [(topic, p) for p in parts]
    return out


async def _offsets_at(
    client: KafkaClient, partitions: Iterable[TopicPartition], timestamp: int
) -> dict[TopicPartition, int | None]:
    """ListOffsets at ``timestamp`` (or EARLIEST/LATEST): ``{tp: offset}``; None where the
    partition is gone or answered an error, -1 where no record is that recent."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    metadata = await client.refresh_metadata(sorted({t for t, _ in wanted}))
    known = [(t, p) for t, p in wanted if p in getattr(metadata.topics.get(t), "partitions", {})]
    answers = await list_offsets(client, dict.fromkeys(known, timestamp)) if known else {}
    out: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
    for tp, answer in answers.items():
        if not answer.error_code:
            out[tp] = answer.offset
    return out


async def _committed(client: KafkaClient, group: str) -> dict[TopicPartition, int]:
    response = await offset_fetch(client, group)
    top = next((g.error_code for g in response.groups), 0) or response.error_code
    if top and top != ErrorCode.GROUP_ID_NOT_FOUND:
        raise Refused(f"Error: fetching the offsets of group '{group}': {error_text(top)}")
    return {
        tp: p.committed_offset
        for tp, p in offset_fetch_partitions(response, group).items()
        if not p.error_code and p.committed_offset >= 0
    }


async def _describe_group(client: KafkaClient, group: str) -> Any:
    described = (await describe_groups(client, [group])).groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        described.group_state = "Dead"
    elif described.error_code:
        raise Refused(f"Error: describing group '{group}': {error_text(described.error_code)}")
    return described


def _assignment(member: Any) -> dict[str, list[int]]:
    try:
        return decode_assignment(member.member_assignment)
    except MalformedMessage:  # not the consumer protocol: nothing to show per partition
        return {}


def _format_assignment(assignment: dict[str, list[int]]) -> str:
    if not assignment:
        return "-"
    return ", ".join(
        f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(assignment.items())
    )


# -- the actions ---------------------------------------------------------------------------------


async def _consumer_groups(client: KafkaClient, states: Sequence[str] = ()) -> list[Any]:
    response = await list_groups(client, states_filter=states)
    if response.error_code:
        raise Refused(f"Error: listing groups: {error_text(response.error_code)}")
    wanted = {s.lower() for s in states}
    # Kafka's tool lists groups of the consumer protocol, and groups that only hold offsets.
    return sorted(
        (
            g
            for g in response.groups
            if g.protocol_type in ("consumer", "")
            and (not wanted or (g.group_state or "").lower() in wanted)
        ),
        key=lambda g: g.group_id,
    )


def _parse_states(value: str) -> list[str]:
    canonical = {s.lower(): s for s in GROUP_STATES}
    states = []
    for raw in filter(None, (s.strip() for s in value.split(","))):
        if raw.lower() not in canonical:
            raise Refused(f"Error: invalid state '{raw}'; valid: {', '.join(GROUP_STATES)}")
        states.append(canonical[raw.lower()])
    return states


async def _list(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.state is None:
        for g in await _consumer_groups(client):
            print(g.group_id)
        return 0
    groups = await _consumer_groups(client, _parse_states(args.state))
    print(space_table(["GROUP", "STATE"], [(g.group_id, g.group_state) for g in groups]))
    return 0


async def _group_ids(client: KafkaClient, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in await _consumer_groups(client)]
    return list(dict.fromkeys(args.group))


async def _describe(client: KafkaClient, args: argparse.Namespace) -> int:
    status = 0
    for group in await _group_ids(client, args):
        described = await _describe_group(client, group)
        state = described.group_state
        if state == "Dead":
            print(f"\nError: Consumer group '{group}' does not exist.", file=sys.stderr)
            status = 1
            continue
        if args.state is not None:
            coordinator = await client.retry(lambda g=group: find_coordinator(client, g))
            print()
            print(
                space_table(
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [
                        (
                            group,
                            f"{coordinator.host}:{coordinator.port} ({coordinator.node_id})",
                            described.protocol_data or "",
                            state,
                            len(described.members),
                        )
                    ],
                )
            )
            continue
        if state == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state in _REBALANCING:
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        if args.members:
            _print_members(group, described, args.verbose)
        else:
            await _print_offsets(client, group, described)
    return status


def _print_members(group: str, described: Any, verbose: bool) -> None:
    if not described.members:
        return
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for member in sorted(described.members, key=lambda mb: mb.member_id):
        assignment = _assignment(member)
        row = [
            group,
            member.member_id,
            member.client_host,
            member.client_id,
            sum(len(ps) for ps in assignment.values()),
        ]
        if verbose:
            row.append(_format_assignment(assignment))
        rows.append(row)
    print()
    print(space_table([*headers, "ASSIGNMENT"] if verbose else headers, rows))


async def _print_offsets(client: KafkaClient, group: str, described: Any) -> None:
    committed = await _committed(client, group)
    owner: dict[TopicPartition, Any] = {}
    for member in described.members:
        for topic, partitions in _assignment(member).items():
            for p in partitions:
                owner[(topic, p)] = member
    partitions = sorted(set(committed) | set(owner))
    if not partitions:
        return
    log_end = await _offsets_at(client, partitions, LATEST_TIMESTAMP)
    rows = []
    for tp in partitions:
        current, end, member = committed.get(tp), log_end.get(tp), owner.get(tp)
        # LAG is "-" without a committed offset, as in Kafka (the consumer starts per its
        # auto.offset.reset, which the broker does not know).
        lag = end - current if current is not None and end is not None and end >= 0 else None
        rows.append(
            (
                group,
                *tp,
                current,
                end,
                lag,
                member.member_id if member else None,
                member.client_host if member else None,
                member.client_id if member else None,
            )
        )
    print()
    print(
        space_table(
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            rows,
        )
    )


def _parse_datetime(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS.sss`` (local time) or with a zone (``Z``, ``+01:00``) → epoch ms."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise Refused(
            f"Error: --to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss[+hh:mm]"
        ) from None
    return int(moment.timestamp() * 1000)  # a naive time is local, as Kafka's tool reads it


async def _new_offsets(
    client: KafkaClient,
    args: argparse.Namespace,
    partitions: list[TopicPartition],
    committed: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    earliest = await _offsets_at(client, partitions, EARLIEST_TIMESTAMP)
    latest = await _offsets_at(client, partitions, LATEST_TIMESTAMP)
    for tp in partitions:
        if earliest[tp] is None or latest[tp] is None:
            raise Refused(f"Error: no log offsets for {tp[0]}-{tp[1]}")

    def clamp(tp: TopicPartition, offset: int) -> int:
        # Kafka warns and moves an offset outside the log to its nearest end.
        if offset < earliest[tp]:
            print(
                f"New offset ({offset}) is lower than earliest offset for topic partition "
                f"{tp[0]}-{tp[1]}. Value will be set to {earliest[tp]}",
                file=sys.stderr,
            )
            return earliest[tp]
        if offset > latest[tp]:
            print(
                f"New offset ({offset}) is higher than latest offset for topic partition "
                f"{tp[0]}-{tp[1]}. Value will be set to {latest[tp]}",
                file=sys.stderr,
            )
            return latest[tp]
        return offset

    if args.to_earliest:
        return {tp: earliest[tp] for tp in partitions}
    if args.to_latest:
        return {tp: latest[tp] for tp in partitions}
    if args.to_current:  # partitions without a committed offset go to the log end, as in Kafka
        return {tp: committed.get(tp, latest[tp]) for tp in partitions}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.shift_by is not None:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            t, p = missing[0]
            raise Refused(
                f"Error: cannot shift the offset of {t}-{p}: the group has no committed offset"
            )
        return {tp: clamp(tp, committed[tp] + args.shift_by) for tp in partitions}
    at = await _offsets_at(client, partitions, _parse_datetime(args.to_datetime))
    # No record at or after the time: the log end, where the next record will be.
    return {tp: latest[tp] if at[tp] is None or at[tp] < 0 else at[tp] for tp in partitions}


async def _reset(client: KafkaClient, args: argparse.Namespace) -> int:
    if not args.dry_run and not args.execute:
        print(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --execute to reset the offsets, or --dry-run to only show them.",
            file=sys.stderr,
        )
    status = 0
    for group in await _group_ids(client, args):
        state = (await _describe_group(client, group)).group_state
        if state not in _INACTIVE:
            print(
                f"Error: Assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {state}.",
                file=sys.stderr,
            )
            status = 1
            continue
        committed = await _committed(client, group)
        if args.all_topics:
            partitions = sorted(committed)
        else:
            partitions = await _topic_partitions(client, _parse_topics(args.topic))
        offsets = await _new_offsets(client, args, partitions, committed)
        if args.execute and offsets:
            response = await offset_commit(client, group, offsets)
            failures = [
                (t.name, p.partition_index, p.error_code)
                for t in response.topics
                for p in t.partitions
                if p.error_code
            ]
            if failures:
                for t, p, code in failures:
                    print(f"Error: committing {t}-{p}: {error_text(code)}", file=sys.stderr)
                status = 1
                continue
        print()
        print(
            space_table(
                ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                [(group, t, p, o) for (t, p), o in sorted(offsets.items())],
            )
        )
    return status


async def _delete(client: KafkaClient, args: argparse.Namespace) -> int:
    groups = await _group_ids(client, args)
    response = await delete_groups(client, groups)
    failed = [r for r in response.results if r.error_code]
    if failed:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for r in failed:
            if r.error_code == ErrorCode.NON_EMPTY_GROUP:
                why = "the group has active members; stop its consumers first"
                print(f"* Group '{r.group_id}' could not be deleted: {why}", file=sys.stderr)
            else:
                print(
                    f"* Group '{r.group_id}' could not be deleted due to: {error_text(r.error_code)}",
                    file=sys.stderr,
                )
    deleted = [r.group_id for r in response.results if not r.error_code]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 1 if failed else 0


async def _delete_offsets(client: KafkaClient, args: argparse.Namespace) -> int:
    (group,) = args.group
    partitions = await _topic_partitions(client, _parse_topics(args.topic))
    response = await offset_delete(client, group, partitions)
    if response.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        print(
            f"Error: Deletion of offsets failed because group '{group}' does not exist.",
            file=sys.stderr,
        )
        return 1
    if response.error_code:
        print(
            f"Error: Deletion of offsets failed: {error_text(response.error_code)}", file=sys.stderr
        )
        return 1
    rows = [
        (
            t.name,
            p.partition_index,
            f"Error: {error_text(p.error_code)}" if p.error_code else "Successful",
        )
        for t in sorted(response.topics, key=lambda t: t.name)
        for p in sorted(t.partitions, key=lambda p: p.partition_index)
    ]
    failed = any(p.error_code for t in response.topics for p in t.partitions)
    if failed:
        print("Request failed due to partition-level errors.", file=sys.stderr)
    else:
        print(f"Request succeed for deleting offsets from group '{group}'.")
    print()
    print(space_table(["TOPIC", "PARTITION", "STATUS"], rows))
    return 1 if failed else 0


async def _action(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.list:
        return await _list(client, args)
    if args.describe:
        return await _describe(client, args)
    if args.reset_offsets:
        return await _reset(client, args)
    if args.delete:
        return await _delete(client, args)
    return await _delete_offsets(client, args)


def main(args: argparse.Namespace) -> int:
    return run_command("consumer-groups", args, _usage, _action)
