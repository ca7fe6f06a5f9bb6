"""``kcore server``: run a node in the foreground until SIGTERM or SIGINT.

Like ``kafka-server-start.sh``: a Kafka-style ``server.properties`` (optional: without one kcore
runs a single-node broker+controller on 127.0.0.1:9092 with data in ``./data``), then any number
of ``--override key=value``. The first start formats the data directories when they are not.
"""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys

import trio

from kcore.log.config import InvalidConfigError
from kcore.security.tls_transport import TlsListeners
from kcore.server.config import BrokerConfig

log = logging.getLogger("kcore")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="a server.properties file (Kafka's key names)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a configuration key (repeatable; wins over the file)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def serve(config: BrokerConfig) -> None:
    """Run the node until a termination signal, then shut it down cleanly."""
    from kcore.server.node import start_node

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            broker = await nursery.start(start_node, config)

            async def stop_on_signal() -> None:
                async for signum in signals:
                    log.info("received %s: shutting down", signal.Signals(signum).name)
                    broker.request_stop()
                    break

            nursery.start_soon(stop_on_signal)
            await broker.stopped.wait()
            nursery.cancel_scope.cancel()


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard limit; returns it.

    Every partition keeps its active segment's log and two index mappings open (three file
    descriptors), so 10,000 partitions need about 30,000: like Kafka, kcore wants a high
    ``ulimit -n``.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def main(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    log.info("open files limit: %d", raise_open_files_limit())
    try:
        config = BrokerConfig.load(args.config, args.override)
        # The TLS listeners' stores load, or the node stops here in one line (the broker
        # builds them again when it starts).
        TlsListeners(config)
    except (InvalidConfigError, OSError, ValueError) as e:
        print(f"kcore server: invalid configuration: {e}", file=sys.stderr)
        return 2
    trio.run(serve, config)
    return 0
