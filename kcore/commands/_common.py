"""What the admin commands over a :class:`~kcore.client.cluster.KafkaClient` share
(``kcore consumer-groups``, ``kcore transactions``): how they fail, name errors, lay out tables
and run.

Exit status: 0 on success, 1 when the cluster refused or a request failed (the error is
printed), 2 for a usage error — as Kafka's tools.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError
from kcore.commands._joptsimple import help_or_version
from kcore.properties import load_properties
from kcore.protocol.errors import KafkaError, error_info
from kcore.security.client_security import (
    CLIENT_SECURITY_KEYS,
    ClientSecurityError,
    client_security,
)

# --command-config keys kcore's admin client honours (with security.protocol, the sasl.* and
# ssl.* client keys); anything else is refused rather than ignored (a setting that asks for
# security must never quietly connect without it).
COMMAND_CONFIG_KEYS = {"client.id", "request.timeout.ms", "default.api.timeout.ms"}
COMMAND_CONFIG_KEYS |= CLIENT_SECURITY_KEYS
DEFAULT_TIMEOUT_MS = 30_000


class Refused(Exception):
    """The operation cannot be done; the message is printed and the exit status is 1."""


def error_text(code: int, message: str | None = None) -> str:
    """``"NAME: message"`` for a Kafka error code (the code's description without a message)."""
    name, _, default = error_info(code)
    return f"{name}: {message or default}"


def command_config(path: str | None, flag: str = "--command-config") -> dict[str, str]:
    """The settings of a ``--command-config`` file (``flag``: the tool's name for the option,
    in the errors; no file: empty): only what kcore's admin client honours
    (:data:`COMMAND_CONFIG_KEYS`: ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or
    SASL_SSL with the ``sasl.*`` and ``ssl.*`` client keys, checked by
    :func:`~kcore.security.client_security.client_security`).

    Raises:
        Refused: the file cannot be read, or names a setting the client cannot honour.
    """
    if path is None:
        return {}
    try:
        props = load_properties(path)
    except (OSError, ValueError) as e:
        raise Refused(f"{flag}: cannot read {path}: {e}") from None
    unknown = sorted(set(props) - COMMAND_CONFIG_KEYS)
    if unknown:
        raise Refused(f"{flag}: kcore's admin client does not support {', '.join(unknown)}")
    return props


def apply_command_config(args: argparse.Namespace) -> None:
    """Set ``args.timeout`` (ms) and ``args.client_id`` from ``args.command_config`` for
    :func:`run_command`. Raises :class:`Refused` as :func:`command_config` does."""
    # A tool whose option has another name (kafka-leader-election.sh's --admin.config) says so.
    flag = getattr(args, "command_config_flag", "--command-config")
    props = command_config(args.command_config, flag)
    timeout = props.get("default.api.timeout.ms", props.get("request.timeout.ms", "0"))
    try:
        args.timeout = int(timeout) or DEFAULT_TIMEOUT_MS
    except ValueError:
        raise Refused(f"{flag}: {timeout!r} is not a timeout in ms") from None
    args.client_id = props.get("client.id")
    try:
        security = client_security(props)
    except ClientSecurityError as e:
        raise Refused(f"{flag}: {e}") from None
    args.sasl, args.ssl_context = security.sasl, security.ssl_context


def _cells(headers: Sequence[str], rows: Iterable[Sequence[Any]], none: str):
    cells = [list(headers)] + [[none if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return cells, widths


def space_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """kafka-consumer-groups.sh's layout: left-aligned columns as wide as their widest cell,
    one space apart, no trailing spaces; None shows as ``-``."""
    cells, widths = _cells(headers, rows, "-")
    return "\n".join(
        " ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def tab_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """kafka-transactions.sh's layout: every cell padded to its column's width, then a tab;
    None shows as ``None``."""
    cells, widths = _cells(headers, rows, "None")
    return "\n".join(
        "".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True)) for r in cells
    )


def run_tool(
    name: str,
    args: argparse.Namespace,
    usage: Callable[[argparse.Namespace], str | None],
    action: Callable[[KafkaClient, argparse.Namespace], Awaitable[int]],
    *,
    help_text: str | None = None,
    prepare: Callable[[argparse.Namespace], None] | None = None,
    refused_prefix: str | None = None,
) -> int:
    """A Kafka-style tool's ``main``: ``--help`` / ``--version`` when the tool prints its own
    ``help_text``; then ``--command-config`` and ``prepare(args)`` (reading files, parsing
    values), where :class:`Refused` is printed after ``refused_prefix`` (default ``"kcore
    NAME: "``) with exit status 1; then :func:`run_command`."""
    if help_text is not None and (status := help_or_version(args, help_text)) is not None:
        return status
    try:
        apply_command_config(args)
        if prepare is not None:
            prepare(args)
    except Refused as e:
        prefix = f"kcore {name}: " if refused_prefix is None else refused_prefix
        print(f"{prefix}{e}", file=sys.stderr)
        return 1
    return run_command(name, args, usage, action)


def run_command(
    name: str,
    args: argparse.Namespace,
    usage: Callable[[argparse.Namespace], str | None],
    action: Callable[[KafkaClient, argparse.Namespace], Awaitable[int]],
) -> int:
    """Run ``kcore <name>``: check ``usage(args)`` (a message means exit status 2), then
    ``await action(client, args)`` with a client of ``--bootstrap-server`` and ``--timeout``
    (ms); its status, or 1 with the error printed for :class:`Refused`, a ClientError or a
    KafkaError."""
    problem = usage(args)
    if problem is not None:
        print(f"kcore {name}: {problem}", file=sys.stderr)
        return 2

    async def run() -> int:
        async with KafkaClient(
            args.bootstrap_server,
            client_id=getattr(args, "client_id", None) or f"kcore-{name}",
            request_timeout=args.timeout / 1000,
            ssl_context=getattr(args, "ssl_context", None),
            sasl=getattr(args, "sasl", None),
        ) as client:
            return await action(client, args)

    try:
        return trio.run(run)
    except Refused as e:
        print(e, file=sys.stderr)
        return 1
    except (ClientError, KafkaError) as e:
        print(f"kcore {name}: {e}", file=sys.stderr)
        return 1
