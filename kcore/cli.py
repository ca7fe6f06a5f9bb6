"""The ``kcore`` command line: one entry point, one subcommand per tool.

Subcommands register themselves in :data:`COMMANDS`; later parts of kcore add ``server``,
``dump-log``, ``cluster-mirrors`` and others here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kcore import __version__


def _cmd_apis(args: argparse.Namespace) -> int:
    """List the APIs the protocol codec knows, with their versions."""
    from kcore.protocol import APIS

    print(f"{'key':>4}  {'api':<32} {'versions':<10} flexible")
    for api in APIS.values():
        print(f"{api.key:>4}  {api.name:<32} {api.versions!s:<10} {api.flexible}")
    return 0


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"kcore {__version__}")
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "apis": (_cmd_apis, "list the Kafka APIs and versions kcore's codec speaks"),
    "version": (_cmd_version, "print kcore's version"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcore", description="kcore: a Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return COMMANDS[args.command][0](args)


if __name__ == "__main__":
    sys.exit(main())
