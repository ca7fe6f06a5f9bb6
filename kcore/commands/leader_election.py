"""``kcore leader-election``: elect partition leaders (``kafka-leader-election.sh``, Kafka's
``LeaderElectionCommand``), through ElectLeaders on any broker (forwarded to the controller).

Kafka's options and output lines::

    kcore leader-election --bootstrap-server :9092 --election-type PREFERRED --topic orders --partition 0
    Successfully completed leader election (PREFERRED) for partitions orders-0
    kcore leader-election --bootstrap-server :9092 --election-type preferred --all-topic-partitions
    Valid replica already elected for partitions orders-1, orders-2

``--election-type`` is ``PREFERRED`` (move leadership to the first replica when it is alive and
in sync) or ``UNCLEAN`` (a partition with no leader gets any live replica, possibly losing
data), in any case. Exactly one of ``--topic`` (with ``--partition``), ``--all-topic-partitions``
and ``--path-to-json-file`` (``{"partitions": [{"topic": "foo", "partition": 1}]}``) says
which partitions. A partition that needed nothing is listed as "Valid replica already elected";
one that failed gets ``Error completing leader election (TYPE) for partition: T-P: <exception>``
and the tool ends with ``N replica(s) could not be elected`` on stderr and status 1. Status 1
too for a bad option combination or JSON file (one line on stderr); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

from kcore.client.admin import elect_leaders
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text
from kcore.metadata.elections import PREFERRED, UNCLEAN
from kcore.protocol.errors import ErrorCode, error_info

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = (
    "This tool attempts to elect a new leader for a set of topic partitions. The type of "
    "elections supported are preferred replicas and unclean replicas."
)

OPTIONS = [
    Option(
        "bootstrap-server",
        "A hostname and port for the broker to connect to, in the form host:port. Multiple "
        "comma separated URLs can be given. REQUIRED.",
        "host:port",
    ),
    Option(
        "admin.config",
        "Configuration properties files to pass to the admin client",
        "config file",
    ),
    Option(
        "path-to-json-file",
        "The JSON file with the list of partition for which leader elections should be "
        'performed. This is an example format. \n{"partitions":\n\t[{"topic": "foo", '
        '"partition": 1},\n\t {"topic": "foobar", "partition": 2}]\n}\nNot allowed if '
        "--all-topic-partitions or --topic flags are specified.",
        "Path to JSON file",
    ),
    Option(
        "topic",
        "Name of topic for which to perform an election. Not allowed if --path-to-json-file "
        "or --all-topic-partitions is specified.",
        "topic name",
    ),
    Option(
        "partition",
        "Partition id for which to perform an election. REQUIRED if --topic is specified.",
        "partition id",
        type="Integer",
    ),
    Option(
        "all-topic-partitions",
        "Perform election on all of the eligible topic partitions based on the type of "
        "election (see the --election-type flag). Not allowed if --topic or "
        "--path-to-json-file is specified.",
    ),
    Option(
        "election-type",
        'Type of election to attempt. Possible values are "preferred" for preferred leader '
        'election or "unclean" for unclean leader election. If preferred election is '
        "selection, the election is only performed if the current leader is not the preferred "
        "leader for the topic partition. If unclean election is selected, the election is only "
        "performed if there are no leader for the topic partition. REQUIRED.",
        "election type",
        type="ElectionType",
    ),
]
HELP = help_text(USAGE, OPTIONS)

ELECTION_TYPES = {"PREFERRED": PREFERRED, "UNCLEAN": UNCLEAN}
# The Java exception of an error code whose name is not its code's in CamelCase.
EXCEPTIONS = {ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def parse_election_json(text: str) -> list[tuple[str, int]]:
    """Kafka's replica election JSON: the ``(topic, partition)`` pairs, in file order.

    Raises:
        Refused: not JSON, no ``partitions``, a field missing or of the wrong type, or a
            partition given twice (Kafka's messages).
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise Refused("Replica election data is malformed") from None
    if doc is None:
        raise Refused("Replica election data is empty")
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise Refused('Replica election data is missing "partitions" field')
    if not isinstance(doc["partitions"], list):
        raise Refused("The partitions field must be an array")
    out: list[tuple[str, int]] = []
    for entry in doc["partitions"]:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str):
            raise Refused(f"Missing or invalid field topic in {json.dumps(entry)}")
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise Refused(f"Missing or invalid field partition in {json.dumps(entry)}")
        out.append((topic, partition))
    duplicates = sorted({tp for tp in out if out.count(tp) > 1})
    if duplicates:
        raise Refused(
            "Replica election data contains duplicate partitions: "
            + ",".join(f"{t}-{p}" for t, p in duplicates)
        )
    return out


def _check(args: argparse.Namespace) -> None:
    """Kafka's ``LeaderElectionCommandOptions.validate``, then the election type and the
    partitions (from the JSON file)."""
    missing = [
        name for name in ("bootstrap-server", "election-type") if not getattr(args, _dest(name))
    ]
    if missing:
        raise Refused(f"Missing required option(s): {', '.join(missing)}")
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise Refused(
            "One and only one of the following options is required: topic, "
            "all-topic-partitions, path-to-json-file"
        )
    if args.topic is not None and args.partition is None:
        raise Refused("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise Refused("Option partition is only allowed if topic is used")
    kind = args.election_type.upper()
    if kind not in ELECTION_TYPES:
        raise Refused(
            f"Cannot convert argument '{args.election_type}' of option ['election-type']: "
            "the values are PREFERRED and UNCLEAN"
        )
    args.election_name = kind
    if args.topic is not None:
        args.partitions = [(args.topic, args.partition)]
    elif args.all_topic_partitions:
        args.partitions = None
    else:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise Refused(f"Cannot read {args.path_to_json_file}: {e.strerror}") from None
        args.partitions = parse_election_json(text)


def _dest(name: str) -> str:
    return name.replace("-", "_")


def main(args: argparse.Namespace) -> int:
    args.command_config = getattr(args, "admin.config", None)
    args.command_config_flag = "--admin.config"
    return run_tool(
        "leader-election", args, lambda a: None, _run, help_text=HELP, prepare=_check,
        refused_prefix="",
    )  # fmt: skip


def exception_text(code: int, message: str | None) -> str:
    """A partition's error as Kafka's tool prints the Java exception."""
    name, _, default = error_info(code)
    simple = EXCEPTIONS.get(code) or "".join(w.capitalize() for w in name.split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{simple}: {message or default}"


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    kind = args.election_name
    response = await elect_leaders(client, ELECTION_TYPES[kind], args.partitions)
    if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        print("Not authorized to perform leader election")
        raise Refused("Not authorized to perform leader election")
    succeeded, noop, failed = [], [], []
    for t in response.replica_election_results:
        for p in t.partition_result:
            code = p.error_code or response.error_code
            name = f"{t.topic}-{p.partition_id}"
            if code == ErrorCode.ELECTION_NOT_NEEDED:
                noop.append(name)
            elif code:
                failed.append((name, exception_text(code, p.error_message)))
            else:
                succeeded.append(name)
    if succeeded:
        print(
            f"Successfully completed leader election ({kind}) for partitions "
            + ", ".join(sorted(succeeded))
        )
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(sorted(noop)))
    if failed:
        for name, text in sorted(failed):
            print(f"Error completing leader election ({kind}) for partition: {name}: {text}")
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
