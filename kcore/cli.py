"""The ``kcore`` command line: one entry point, one subcommand per tool.

Each subcommand lives in ``kcore/commands/`` with ``add_arguments(parser)`` and ``main(args)``;
this module only builds the parser from them and dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kcore import __version__

# name -> (module in kcore.commands, entry function, help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "server": ("server", "main", "run a kcore node in the foreground (kafka-server-start.sh)"),
    "format": ("format", "main", "format the data directories of a node (kafka-storage.sh)"),
    "random-uuid": ("format", "random_uuid_main", "print a new cluster id"),
    "topics": ("topics", "main", "create, list, describe, alter and delete topics"),
    "consumer-groups": (
        "consumer_groups",
        "main",
        "list, describe, reset offsets of and delete consumer groups",
    ),
    "transactions": (
        "transactions",
        "main",
        "list and describe transactions, find and abort hanging ones",
    ),
    "cluster-mirrors": (
        "cluster_mirrors",
        "main",
        "create cluster mirrors and manage mirror topics (kafka-cluster-mirrors.sh)",
    ),
    "console-producer": (
        "console_producer",
        "main",
        "send the lines of standard input as records (kafka-console-producer.sh)",
    ),
    "console-consumer": (
        "console_consumer",
        "main",
        "print the records of a topic on standard output (kafka-console-consumer.sh)",
    ),
    "configs": (
        "configs",
        "main",
        "describe and alter topic, broker and cluster-mirror configs (kafka-configs.sh)",
    ),
    "acls": ("acls", "main", "add, remove and list ACLs (kafka-acls.sh)"),
    "features": (
        "features",
        "main",
        "describe, upgrade, downgrade and disable feature flags (kafka-features.sh)",
    ),
    "get-offsets": (
        "get_offsets",
        "main",
        "print the offsets of topic partitions at a time (kafka-get-offsets.sh)",
    ),
    "delete-records": (
        "delete_records",
        "main",
        "delete the records of partitions below an offset (kafka-delete-records.sh)",
    ),
    "leader-election": (
        "leader_election",
        "main",
        "elect preferred or unclean partition leaders (kafka-leader-election.sh)",
    ),
    "reassign-partitions": (
        "reassign_partitions",
        "main",
        "move partitions between brokers (kafka-reassign-partitions.sh)",
    ),
    "log-dirs": (
        "log_dirs",
        "main",
        "describe the log directories of brokers (kafka-log-dirs.sh)",
    ),
    "metadata-quorum": (
        "metadata_quorum",
        "main",
        "describe the metadata quorum's status and replication (kafka-metadata-quorum.sh)",
    ),
    "dump-log": (
        "dump_log",
        "main",
        "print segments, indexes, snapshots and checkpoints of a log directory (kafka-dump-log.sh)",
    ),
    "apis": ("info", "apis_main", "list the Kafka APIs and versions kcore's codec speaks"),
    "version": ("info", "version_main", "print kcore's version"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``kcore`` parser; ``parser.commands`` maps a subcommand to its own parser. With
    ``only``, just that subcommand's: the modules of the others are then not imported (the
    broker's, for one, take a second to import, which a ``kcore dump-log`` piped into
    ``grep`` should not pay)."""
    parser = argparse.ArgumentParser(prog="kcore", description="kcore: a Kafka-compatible broker")
    parser.add_argument("--version", action="version", version=f"kcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}  # type: ignore[attr-defined]
    for name, (module, _, help_text) in COMMANDS.items():
        if only is not None and name != only:
            continue
        mod = importlib.import_module(f"kcore.commands.{module}")
        # A tool that prints Kafka's own --help text (joptsimple's layout) declares ADD_HELP.
        add_help = getattr(mod, "ADD_HELP", True)
        command = sub.add_parser(name, help=help_text, description=help_text, add_help=add_help)
        if hasattr(mod, "add_arguments") and module != "info":
            mod.add_arguments(command)
        parser.commands[name] = command  # type: ignore[attr-defined]
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args, extras = parser.parse_known_args(argv)
    if extras:
        message = f"unrecognized arguments: {' '.join(extras)}"
        if args.command is not None:
            mod = importlib.import_module(f"kcore.commands.{COMMANDS[args.command][0]}")
            if getattr(mod, "ONE_LINE_ERRORS", False):  # the tool's bad flags: one line
                print(f"kcore {args.command}: error: {message} (see --help)", file=sys.stderr)
                return 2
            # Else the subcommand's parser reports it (one line for the joptsimple-style tools).
            parser.commands[args.command].error(message)  # type: ignore[attr-defined]
        parser.error(message)
    if args.command is None:
        parser.print_help()
        return 2
    module, function, _ = COMMANDS[args.command]
    return getattr(importlib.import_module(f"kcore.commands.{module}"), function)(args)


if __name__ == "__main__":
    sys.exit(main())
