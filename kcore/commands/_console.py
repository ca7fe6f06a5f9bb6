"""What ``kcore console-producer`` and ``kcore console-consumer`` share: Kafka's ``key=value``
argument parsing, client settings from ``--*.config`` / ``--command-config`` files and
``--*-property`` flags, one-line usage errors, and Ctrl-C handling.

Exit status, as Kafka's tools and the shell: 0 when done, 1 when the cluster refused or a setting
is bad (one line on stderr, no traceback), 2 for a usage error, 130 after Ctrl-C (SIGINT) and
143 after SIGTERM — in both cases once the tool has finished cleanly (records flushed, offsets
committed).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import trio

from kcore.client.cluster import KafkaClient, parse_bootstrap_servers
from kcore.properties import MalformedPropertiesError, load_properties

SIGNAL_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


class UsageError(Exception):
    """A bad combination of flags: printed as one line, exit status 2."""


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` report a bad flag as one line (``kcore console-consumer: error: ...``)
    and exit 2, instead of argparse's usage block."""

    def error(message: str) -> NoReturn:
        print(f"{parser.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]


def parse_key_value_args(args: Iterable[str] | None) -> dict[str, str]:
    """Kafka's ``CommandLineUtils.parseKeyValueArgs``: each ``key=value`` (split at the first
    ``=``; ``key`` alone or ``key=`` means the empty string); the last of a key wins."""
    props: dict[str, str] = {}
    for arg in args or ():
        key, _, value = arg.partition("=")
        props[key] = value
    return props


def load_config_files(args: argparse.Namespace, legacy_flag: str) -> dict[str, str]:
    """The settings of ``--command-config`` or the tool's older ``--producer.config`` /
    ``--consumer.config`` (``legacy_flag``; at most one of the two)."""
    legacy = getattr(args, legacy_flag.lstrip("-").replace("-", "_").replace(".", "_"))
    if legacy and args.command_config:
        raise UsageError(f"--command-config and {legacy_flag} cannot be used together")
    return load_file(legacy or args.command_config)


def load_file(path: str | None) -> dict[str, str]:
    """A properties file's settings ({} for None); a file that cannot be read is a UsageError."""
    if not path:
        return {}
    try:
        return load_properties(path)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except MalformedPropertiesError as e:
        raise UsageError(f"{path}: {e}") from None


def check_bootstrap(servers: str | None) -> str:
    """Kafka's ``ToolsUtils.validateBootstrapServer``: a non-empty ``host:port[,host:port]``."""
    if not servers:
        raise UsageError('Missing required argument "[bootstrap-server]"')
    try:
        parse_bootstrap_servers(servers)
    except ValueError as e:
        raise UsageError(
            f"Please provide valid host:port like host1:9091,host2:9092 ({e})"
        ) from None
    return servers


async def cancel_on_signal(scope: trio.CancelScope, caught: list[int]) -> None:
    """Cancel ``scope`` at the first SIGINT or SIGTERM, noting which one in ``caught``."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            caught.append(signum)
            scope.cancel()
            return


def client_for(config: Any) -> KafkaClient:
    """A KafkaClient with a producer's or consumer's ``bootstrap.servers``, ``client.id``,
    ``request.timeout.ms``, ``retry.backoff.ms`` and the security settings (TLS, SASL)."""
    security = config.security()
    return KafkaClient(
        config.bootstrap_servers,
        client_id=config.client_id,
        request_timeout=config.request_timeout_ms / 1000,
        retry_backoff=config.retry_backoff_ms / 1000,
        ssl_context=security.ssl_context,
        sasl=security.sasl,
    )
