"""``kcore reassign-partitions``: move partitions between brokers (``kafka-reassign-partitions.sh``,
Kafka's ``ReassignPartitionsCommand``) through AlterPartitionReassignments and
ListPartitionReassignments on any broker (forwarded to the controller). Replication must be on
(``kcore.replication.enable=true``): without it the controller refuses every move.

Kafka's actions, options and output lines (the JSON formats and the text are in
:mod:`kcore.commands.reassign_plan`)::

    kcore reassign-partitions --bootstrap-server :9092 --generate \\
        --topics-to-move-json-file topics.json --broker-list 2,3,4
    Current partition replica assignment
    {"version":1,"partitions":[...]}

    Proposed partition reassignment configuration
    {"version":1,"partitions":[...]}
    kcore reassign-partitions --bootstrap-server :9092 --execute --reassignment-json-file plan.json
    Current partition replica assignment

    {"version":1,"partitions":[...]}

    Save this to use as the --reassignment-json-file option during rollback
    Successfully started partition reassignment for t-0
    kcore reassign-partitions --bootstrap-server :9092 --verify --reassignment-json-file plan.json
    Status of partition reassignment:
    Reassignment of partition t-0 is completed.

    Clearing broker-level throttles on brokers 1,2,3,4
    Clearing topic-level throttles on topic t

``--cancel`` reverts the listed partitions' ongoing reassignments ("Successfully cancelled
partition reassignment for: t-0"), ``--list`` shows every ongoing one. What kcore cannot honour
is refused, never ignored: ``--throttle`` and ``--replica-alter-log-dirs-throttle`` (kcore
does not throttle replication), a ``log_dirs`` entry other than ``"any"`` (one log directory
per broker), ``--bootstrap-controller`` (kcore's controllers serve no admin clients), and a
rack-aware ``--generate`` when the brokers have racks (add ``--disable-rack-aware``). Exit
status: 0, or 1 for a refused option combination, file or request (the error is printed);
``--verify`` answers 0 while a reassignment is still in progress, as Kafka's does.
"""

from __future__ import annotations

import argparse
import random
import sys

from kcore.client.admin import (
    AlterConfigOp,
    ConfigResourceType,
    alter_partition_reassignments,
    incremental_alter_configs,
    list_partition_reassignments,
)
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text
from kcore.commands.reassign_plan import (
    PlanError,
    assign_replicas,
    check_execute,
    format_reassignment_json,
    list_text,
    parse_broker_list,
    parse_reassignment_json,
    parse_topics_json,
    status_text,
    tp_text,
)
from kcore.protocol.errors import ErrorCode, error_info

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = "This tool helps to move topic partitions between replicas."

OPTIONS = [
    Option(
        "verify",
        "Verify if the reassignment completed as specified by the --reassignment-json-file "
        "option. If there is a throttle engaged for the replicas specified, and the rebalance "
        "has completed, the throttle will be removed",
    ),
    Option(
        "generate",
        "Generate a candidate partition reassignment configuration. Note that this only "
        "generates a candidate assignment, it does not execute it.",
    ),
    Option(
        "execute", "Kick off the reassignment as specified by the --reassignment-json-file option."
    ),
    Option("cancel", "Cancel an active reassignment."),
    Option("list", "List all active partition reassignments."),
    Option(
        "bootstrap-server",
        "the server(s) to use for bootstrapping.",
        "Server(s) to use for bootstrapping",
        optional=True,
    ),
    Option(
        "command-config",
        "Property file containing configs to be passed to Admin Client.",
        "Admin client property file",
    ),
    Option(
        "reassignment-json-file",
        "The JSON file with the partition reassignment configurationThe format to use is - \n"
        '{"partitions":\n\t[{"topic": "foo",\n\t  "partition": 1,\n\t  "replicas": [1,2,3],\n\t'
        '  "log_dirs": ["dir1","dir2","dir3"] }],\n"version":1\n}\nNote that "log_dirs" is '
        "optional. When it is specified, its length must equal the length of the replicas "
        'list. The value in this list can be either "any" or the absolution path of the log '
        "directory on the broker. If absolute log directory path is specified, the replica "
        "will be moved to the specified log directory on the broker.",
        "manual assignment json file path",
    ),
    Option(
        "topics-to-move-json-file",
        "Generate a reassignment configuration to move the partitions of the specified topics "
        "to the list of brokers specified by the --broker-list option. The format to use is - "
        '\n{"topics":\n\t[{"topic": "foo"},{"topic": "foo1"}],\n"version":1\n}',
        "topics to reassign json file path",
    ),
    Option(
        "broker-list",
        "The list of brokers to which the partitions need to be reassigned in the form "
        '"0,1,2". This is required if --topics-to-move-json-file is used to generate '
        "reassignment configuration",
        "brokerlist",
    ),
    Option(
        "bootstrap-controller",
        "The controller to use for reassignment. By default, the tool will get the quorum "
        "controller. This option supports the actions --cancel and --list.",
        "bootstrap controller to connect to",
        optional=True,
    ),
    Option("disable-rack-aware", "Disable rack aware replica assignment"),
    Option(
        "throttle",
        "The movement of partitions between brokers will be throttled to this value "
        "(bytes/sec). This option can be included with --execute when a reassignment is "
        "started, and it can be altered by resubmitting the current reassignment along with "
        "the --additional flag. The throttle rate should be at least 1 KB/s.",
        "throttle",
        type="Long",
        default="-1",
    ),
    Option(
        "replica-alter-log-dirs-throttle",
        "The movement of replicas between log directories on the same broker will be "
        "throttled to this value (bytes/sec). This option can be included with --execute when "
        "a reassignment is started, and it can be altered by resubmitting the current "
        "reassignment along with the --additional flag. The throttle rate should be at least "
        "1 KB/s.",
        "replicaAlterLogDirsThrottle",
        type="Long",
        default="-1",
    ),
    Option(
        "timeout",
        "The maximum time in ms to wait for log directory replica assignment to begin.",
        "timeout",
        type="Long",
        default="10000",
    ),
    Option(
        "additional",
        "Execute this reassignment in addition to any other ongoing ones. This option can also "
        "be used to change the throttle of an ongoing reassignment.",
    ),
    Option("preserve-throttles", "Do not modify broker or topic throttles."),
]
HELP = help_text(USAGE, OPTIONS)

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
_FILE = "reassignment-json-file"
REQUIRED = {
    "verify": (_FILE,),
    "generate": ("topics-to-move-json-file", "broker-list"),
    "execute": (_FILE,),
    "cancel": (_FILE,),
    "list": (),
}
PERMITTED = {
    "verify": ("bootstrap-server", "command-config", "preserve-throttles"),
    "generate": ("bootstrap-server", "broker-list", "command-config", "disable-rack-aware"),
    "execute": (
        "additional",
        "bootstrap-server",
        "command-config",
        "throttle",
        "replica-alter-log-dirs-throttle",
        "timeout",
    ),
    "cancel": ("bootstrap-server", "command-config", "preserve-throttles", "timeout"),
    "list": ("bootstrap-server", "command-config"),
}
BROKER_LEVEL_THROTTLES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)
TOPIC_LEVEL_THROTTLES = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment."
)
UNKNOWN_TOPIC = "org.apache.kafka.common.errors.UnknownTopicOrPartitionException"

#: ``--generate``'s random start (Kafka's ``AdminUtils.RAND``); tests may seed it.
RNG = random.Random()


class Failed(Exception):
    """The action failed; the message is printed on stdout (as Kafka's tool prints it) and the
    exit status is 1."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _given(args: argparse.Namespace, name: str) -> bool:
    # --timeout's value is moved aside by main: run_tool's args.timeout is the client's.
    dest = "log_dir_timeout" if name == "timeout" else name.replace("-", "_")
    value = getattr(args, dest, None)
    return value is not None and value is not False


def _check(args: argparse.Namespace) -> None:
    """Kafka's ``validateAndParseArgs``, then what kcore refuses, then the files."""
    chosen = [a for a in ACTIONS if _given(args, a)]
    if len(chosen) != 1:
        raise Refused(
            "Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS)
        )
    action = args.action = chosen[0]
    server, controller = _given(args, "bootstrap-server"), _given(args, "bootstrap-controller")
    if server and controller:
        raise Refused("Please don't specify both --bootstrap-server and --bootstrap-controller")
    if not server and not controller:
        raise Refused("Please specify either --bootstrap-server or --bootstrap-controller")
    for name in REQUIRED[action]:
        if not _given(args, name):
            raise Refused(f'Missing required argument "[{name}]"')
    allowed = {action, *REQUIRED[action], *PERMITTED[action]}
    if controller and action in ("cancel", "list"):
        allowed.add("bootstrap-controller")
    for option in OPTIONS:
        if _given(args, option.name) and option.name not in allowed:
            raise Refused(f'Option "[{option.name}]" can\'t be used with action "[{action}]"')
    if controller:
        raise Refused(
            "--bootstrap-controller is not supported: kcore's controllers serve no admin "
            "clients; use --bootstrap-server (any broker forwards reassignments to the "
            "controller)"
        )
    for name in ("throttle", "replica-alter-log-dirs-throttle"):
        value = getattr(args, name.replace("-", "_"))
        if value is not None and value >= 0:
            raise Refused(
                f"--{name} is not supported: kcore does not throttle replication, so a "
                "throttled reassignment would run unthrottled"
            )


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise Failed(f"Error: {path}: {e.strerror}") from None


def main(args: argparse.Namespace) -> int:
    args.log_dir_timeout = args.timeout
    return run_tool(
        "reassign-partitions", args, lambda a: None, _run, help_text=HELP, prepare=_check,
        refused_prefix="",
    )  # fmt: skip


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    try:
        await ACTION_FUNCTIONS[args.action](client, args)
    except Failed as e:
        print(e)
        return 1
    except PlanError as e:
        print(f"Error: {e}")
        return 1
    return 0


def _exception_message(code: int, message: str | None) -> str:
    return message or error_info(code)[2]


async def _replicas_of(client: KafkaClient, topics) -> dict[tuple[str, int], list[int]]:
    """Kafka's ``describeTopics``: every partition's replicas; an unknown topic fails."""
    names = sorted(set(topics))
    md = await client.refresh_metadata(names)
    for name in names:
        code = md.topic_errors.get(name)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or name not in md.topics:
            raise Failed(f"Error: {UNKNOWN_TOPIC}: Topic {name} not found.")
        if code:
            raise Failed(f"Error: {error_info(code)[0]}: topic {name}")
    return {
        (name, index): list(p.replicas)
        for name in names
        for index, p in md.topics[name].partitions.items()
    }


# -- the actions -------------------------------------------------------------------------------


async def _generate(client: KafkaClient, args: argparse.Namespace) -> None:
    topics = parse_topics_json(_read(args.topics_to_move_json_file))
    wanted = parse_broker_list(args.broker_list)
    current = await _replicas_of(client, topics)
    md = await client.refresh_metadata([])
    brokers = [b for b in md.brokers.values() if b.node_id in wanted]
    brokers.sort(key=lambda b: b.node_id)
    if not args.disable_rack_aware and any(b.rack is not None for b in brokers):
        if any(b.rack is None for b in brokers):
            raise Failed(
                "Error: Not all brokers have rack information. Add --disable-rack-aware in "
                "command line to make replica assignment without rack information."
            )
        raise Failed(
            "Error: kcore's --generate has no rack-aware assignment: add --disable-rack-aware"
        )
    ids = [b.node_id for b in brokers]
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in sorted({t for t, _ in current}):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        for index, replicas in assign_replicas(ids, len(parts), rf, RNG).items():
            proposed[(topic, index)] = replicas
    print(f"Current partition replica assignment\n{format_reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}")


async def _execute(client: KafkaClient, args: argparse.Namespace) -> None:
    proposed = check_execute(parse_reassignment_json(_read(args.reassignment_json_file)))
    ongoing = await list_partition_reassignments(client)
    if not args.additional and ongoing:
        raise Failed(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    md = await client.refresh_metadata([])
    for broker in sorted({b for replicas in proposed.values() for b in replicas}):
        if broker not in md.brokers:
            raise Failed(f"Error: Unknown broker id {broker}")
    described = await _replicas_of(client, {t for t, _ in proposed})
    missing = [tp for tp in proposed if tp not in described]
    if missing:
        raise Failed(
            f"Error: {UNKNOWN_TOPIC}: Unable to find partition: "
            + ", ".join(tp_text(tp) for tp in missing)
        )
    current = {tp: described[tp] for tp in proposed}
    print(
        f"Current partition replica assignment\n\n{format_reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    results = await alter_partition_reassignments(client, proposed)
    errors = {tp: r for tp, r in results.items() if r[0]}
    if errors:
        raise Failed(
            "Error reassigning partition(s):\n"
            + "\n".join(
                f"{tp_text(tp)}: {_exception_message(*errors[tp])}" for tp in sorted(errors)
            )
        )
    print(
        f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for "
        + ",".join(tp_text(tp) for tp in sorted(proposed))
    )


async def _verify(client: KafkaClient, args: argparse.Namespace) -> None:
    targets = dict(parse_reassignment_json(_read(args.reassignment_json_file)))
    ongoing = await list_partition_reassignments(client)
    states = {}
    not_found = [tp for tp in targets if tp not in ongoing]
    described: dict[tuple[str, int], list[int]] = {}
    if not_found:
        md = await client.refresh_metadata(sorted({t for t, _ in not_found}))
        for name, topic in md.topics.items():
            for index, p in topic.partitions.items():
                described[(name, index)] = list(p.replicas)
    for tp, target in targets.items():
        if tp in ongoing:
            states[tp] = (ongoing[tp][0], target, False)
        else:
            states[tp] = (described.get(tp, []), target, True)
    print(status_text(states))
    print()  # Kafka's (empty) log-directory move states
    if not ongoing and not args.preserve_throttles:
        await _clear_all_throttles(client, targets)


async def _cancel(client: KafkaClient, args: argparse.Namespace) -> None:
    targets = dict(parse_reassignment_json(_read(args.reassignment_json_file)))
    ongoing = await list_partition_reassignments(client, list(targets))
    if ongoing:
        results = await alter_partition_reassignments(client, dict.fromkeys(sorted(ongoing)))
        errors = {tp: r for tp, r in results.items() if r[0]}
        if errors:
            raise Failed(
                f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} "
                "for:\n"
                + "\n".join(
                    f"{tp_text(tp)}: {_exception_message(*errors[tp])}" for tp in sorted(errors)
                )
            )
        print(
            f"Successfully cancelled partition reassignment{'' if len(ongoing) == 1 else 's'} "
            "for: " + ",".join(tp_text(tp) for tp in sorted(ongoing))
        )
    else:
        print("None of the specified partition reassignments are active.")
    # Kafka's tool prints this one without a line break.
    sys.stdout.write("None of the specified partition moves are active.")
    if not args.preserve_throttles:
        await _clear_all_throttles(client, targets)
    else:
        sys.stdout.write("\n")


async def _list(client: KafkaClient, args: argparse.Namespace) -> None:
    print(list_text(await list_partition_reassignments(client)))


async def _clear_all_throttles(client: KafkaClient, targets) -> None:
    """Kafka's ``clearAllThrottles``: the replication throttles of every broker of the cluster
    and of the plan, and of the plan's topics, deleted."""
    md = await client.refresh_metadata([])
    brokers = sorted(set(md.brokers) | {b for replicas in targets.values() for b in replicas})
    print(
        f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
        + ",".join(str(b) for b in brokers)
    )
    for broker in brokers:
        if broker in md.brokers:  # each broker holds its own settings
            ops = [(key, AlterConfigOp.DELETE, None) for key in BROKER_LEVEL_THROTTLES]
            await _alter_configs(client, {(ConfigResourceType.BROKER, str(broker)): ops})
    topics = sorted({t for t, _ in targets})
    print(
        f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
        + ",".join(topics)
    )
    ops = [(key, AlterConfigOp.DELETE, None) for key in TOPIC_LEVEL_THROTTLES]
    await _alter_configs(client, {(ConfigResourceType.TOPIC, t): ops for t in topics})


async def _alter_configs(client: KafkaClient, resources) -> None:
    response = await incremental_alter_configs(client, resources)
    for r in response.responses:
        if r.error_code and r.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise Failed(f"Error: {_exception_message(r.error_code, r.error_message)}")


ACTION_FUNCTIONS = {
    "generate": _generate,
    "execute": _execute,
    "verify": _verify,
    "cancel": _cancel,
    "list": _list,
}
