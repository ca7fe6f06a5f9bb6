"""``kcore format``: prepare the data directories of a node (``kafka-storage.sh format``).

Writes ``meta.properties`` (cluster id, node id, directory id) into every ``log.dirs`` entry and
the metadata log directory. ``--cluster-id`` joins an existing cluster; without it a new id is
drawn. ``kcore random-uuid`` prints an id to share between the nodes of a new cluster.

``--add-scram`` (repeatable, Kafka's syntax) gives the new cluster SCRAM credentials from its
first metadata record on, so that a SASL listener can be used at once (an admin user, say)::

    kcore format --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]' \\
        --add-scram 'SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]'

Each is ``MECHANISM=[name=<user>,password=<password>]``, with ``iterations=`` (default 4096),
or ``salt="<base64>",saltedpassword="<base64>"`` instead of a password. They go into
``bootstrap.checkpoint`` in the metadata log directory, which the controller of an empty log
writes first (:mod:`kcore.server.bootstrap_file`); so ``--add-scram`` is refused on a metadata
directory that is already formatted (change credentials there with ``kcore configs
--entity-type users``).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import re
import sys
from pathlib import Path

from kcore.commands.server import add_arguments as add_server_arguments
from kcore.log.config import InvalidConfigError
from kcore.log.log_dirs import MetaProperties, random_uuid, uuid_to_base64
from kcore.metadata.bootstrap import bootstrap_records
from kcore.metadata.scram_control import credential_record
from kcore.protocol import messages as m
from kcore.security.scram import MECHANISMS, credential_from_password, credential_from_salted
from kcore.server.config import BrokerConfig

_ENTRY = re.compile(r"([A-Z0-9-]+)=\[(.*)\]", re.S)
_FIELD = re.compile(r'\s*([a-z]+)=("(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)', re.S)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--cluster-id", "-t", help="the cluster id (default: a new random one)")
    parser.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="CREDENTIAL",
        help="a SCRAM credential for the new cluster: "
        "'SCRAM-SHA-256=[name=alice,password=alice-secret]' (repeatable)",
    )


def parse_add_scram(text: str) -> m.UserScramCredentialRecord:
    """One ``--add-scram`` value as its record. Raises ValueError (without the password)."""
    entry = _ENTRY.fullmatch(text.strip())
    if entry is None or entry.group(1) not in MECHANISMS:
        raise ValueError(
            f"--add-scram must be MECHANISM=[name=...,password=...] with MECHANISM one of "
            f"{', '.join(MECHANISMS)}"
        )
    mechanism = MECHANISMS[entry.group(1)]
    fields: dict[str, str] = {}
    body, pos = entry.group(2), 0
    while pos < len(body):
        match = _FIELD.match(body, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"--add-scram {mechanism.name}: cannot parse the fields")
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        fields[match.group(1)] = value
        pos = match.end()
    unknown = sorted(set(fields) - {"name", "password", "iterations", "salt", "saltedpassword"})
    if unknown:
        raise ValueError(f"--add-scram {mechanism.name}: unknown field(s) {', '.join(unknown)}")
    if not fields.get("name"):
        raise ValueError(f"--add-scram {mechanism.name}: name= is required")
    try:
        iterations = int(fields.get("iterations", "4096"))
    except ValueError:
        raise ValueError(f"--add-scram {mechanism.name}: iterations must be a number") from None
    if not mechanism.min_iterations <= iterations <= mechanism.max_iterations:
        raise ValueError(
            f"--add-scram {mechanism.name}: iterations must be between "
            f"{mechanism.min_iterations} and {mechanism.max_iterations}"
        )
    if ("password" in fields) == ("saltedpassword" in fields):
        raise ValueError(f"--add-scram {mechanism.name}: give password= or saltedpassword=")
    try:
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else None
        if "password" in fields:
            cred = credential_from_password(mechanism, fields["password"], iterations, salt)
        elif salt is None:
            raise ValueError(f"--add-scram {mechanism.name}: saltedpassword= needs salt=")
        else:
            salted = base64.b64decode(fields["saltedpassword"], validate=True)
            cred = credential_from_salted(mechanism, salted, salt, iterations)
    except binascii.Error:
        raise ValueError(
            f"--add-scram {mechanism.name}: salt and saltedpassword are base64"
        ) from None
    return credential_record(fields["name"], mechanism.type, cred)


def main(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.load(args.config, args.override)
        scram = [parse_add_scram(text) for text in args.add_scram]
        metadata_dir = Path(config.metadata_log_dir)
        if scram and metadata_dir.exists() and MetaProperties.read(metadata_dir) is not None:
            raise ValueError(
                f"--add-scram is for a new cluster, and {metadata_dir} is already formatted: "
                "change credentials with kcore configs --entity-type users"
            )
        # Imported here: the whole broker is a second of imports every other kcore command
        # (they all build their parsers from this package) would pay for.
        from kcore.server.bootstrap_file import write_bootstrap
        from kcore.server.broker import ensure_formatted

        cluster_id = ensure_formatted(config, args.cluster_id)
        if scram:
            write_bootstrap(metadata_dir, bootstrap_records(extra=scram))
    except (InvalidConfigError, OSError, ValueError) as e:
        print(f"kcore format: {e}", file=sys.stderr)
        return 1
    print(f"Formatted {', '.join(map(str, config.log_dirs))} for cluster {cluster_id}")
    return 0


def random_uuid_main(args: argparse.Namespace) -> int:
    print(uuid_to_base64(random_uuid()))
    return 0
