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
from kcore.protocol.errors import KafkaError, error_info


class Refused(Exception):
    """The operation cannot be done; the message is printed and the exit status is 1."""


def error_text(code: int, message: str | None = None) -> str:
    """``"NAME: message"`` for a Kafka error code (the code's description without a message)."""
    name, _, default = error_info(code)
    return f"{name}: {message or default}"


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
            client_id=f"kcore-{name}",
            request_timeout=args.timeout / 1000,
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
