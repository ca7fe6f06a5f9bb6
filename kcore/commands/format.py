"""``kcore format``: prepare the data directories of a node (``kafka-storage.sh format``).

Writes ``meta.properties`` (cluster id, node id, directory id) into every ``log.dirs`` entry and
the metadata log directory. ``--cluster-id`` joins an existing cluster; without it a new id is
drawn. ``kcore random-uuid`` prints an id to share between the nodes of a new cluster.
"""

from __future__ import annotations

import argparse
import sys

from kcore.commands.server import add_arguments as add_server_arguments
from kcore.log.config import InvalidConfigError
from kcore.log.log_dirs import random_uuid, uuid_to_base64
from kcore.server.config import BrokerConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--cluster-id", "-t", help="the cluster id (default: a new random one)")


def main(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.load(args.config, args.override)
        # Imported here: the whole broker is a second of imports every other kcore command
        # (they all build their parsers from this package) would pay for.
        from kcore.server.broker import ensure_formatted

        cluster_id = ensure_formatted(config, args.cluster_id)
    except (InvalidConfigError, OSError, ValueError) as e:
        print(f"kcore format: {e}", file=sys.stderr)
        return 1
    print(f"Formatted {', '.join(map(str, config.log_dirs))} for cluster {cluster_id}")
    return 0


def random_uuid_main(args: argparse.Namespace) -> int:
    print(uuid_to_base64(random_uuid()))
    return 0
