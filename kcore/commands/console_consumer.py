"""``kcore console-consumer``: print a topic's records on standard output
(``kafka-console-consumer.sh``).

Kafka's flags, defaults and output::

    kcore console-consumer --bootstrap-server 127.0.0.1:9092 --topic orders --from-beginning \\
        --group billing --property print.key=true --property print.timestamp=true
    CreateTime:1700000000000<TAB>k1<TAB>hello
    ^C
    Processed a total of 1 messages            (on stderr)

With ``--partition`` the tool reads that one partition without a group (assign mode), from
``--offset`` (a number, ``earliest``, or ``latest``, the default). Otherwise it joins a consumer
group as a classic-protocol member (``--group``, or ``console-consumer-NNNNN`` whose offsets are
not committed unless ``enable.auto.commit`` is set) subscribed to ``--topic`` or to the topics
matching ``--include``, and starts at the group's committed offsets, else at the end (or the
beginning with ``--from-beginning``). With a group the offsets of the records printed are
committed every ``auto.commit.interval.ms`` and when the tool stops (``--max-messages``
reached, ``--timeout-ms`` passed without a record, Ctrl-C), before it leaves the group.

``--formatter`` takes Kafka's class names (see :mod:`kcore.commands.console_formatters`);
``--property`` configures it. An unknown topic, an unreachable broker, a bad flag or setting
ends the tool with exit status 1 (2 for usage) and one line on stderr; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import trio

from kcore.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kcore.client.client_configs import ConfigError, ConsumerConfig, consumer_config
from kcore.client.cluster import KafkaClient
from kcore.client.consumer import Consumer, ConsumerRecord, open_consumer
from kcore.client.errors import ClientError
from kcore.commands._console import (
    SIGNAL_STATUS,
    UsageError,
    cancel_on_signal,
    check_bootstrap,
    client_for,
    load_config_files,
    load_file,
    one_line_errors,
    parse_key_value_args,
)
from kcore.commands.console_formatters import (
    DEFAULT_FORMATTER,
    Formatter,
    FormatterError,
    make_formatter,
)
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import CorruptRecordError

_FORMATTER_PROPS = (
    "print.timestamp=true|false, print.key=true|false, print.offset=true|false, "
    "print.epoch=true|false, print.partition=true|false, print.headers=true|false, "
    "print.value=true|false, key.separator=<key.separator>, line.separator=<line.separator>, "
    "headers.separator=<line.separator>, null.literal=<null.literal>, "
    "key.deserializer=<key.deserializer>, value.deserializer=<value.deserializer>, "
    "header.deserializer=<header.deserializer>"
)

ONE_LINE_ERRORS = True  # a bad flag is reported on one line (kcore.cli)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.description = (
        "This tool helps to read data from Kafka topics and outputs it to standard output."
    )
    a = parser.add_argument
    a("--topic", metavar="topic", help="The topic to consume on.")
    a(
        "--include",
        metavar="Java regex (String)",
        help="Regular expression specifying list of topics to include for consumption.",
    )
    a(
        "--partition",
        type=int,
        metavar="partition",
        help="The partition to consume from. Consumption starts from the end of the partition "
        "unless '--offset' is specified.",
    )
    a(
        "--offset",
        metavar="consume offset",
        help="The offset to consume from (a non-negative number), or 'earliest' which means "
        "from beginning, or 'latest' which means from end (default: latest)",
    )
    a(
        "--consumer-property",
        action="append",
        metavar="consumer_prop",
        help="A mechanism to pass user-defined properties in the form key=value to the consumer.",
    )
    a(
        "--consumer.config",
        dest="consumer_config",
        metavar="config file",
        help="Consumer config properties file. Note that --consumer-property takes precedence "
        "over this config.",
    )
    a(
        "--command-config",
        metavar="config file",
        help="Property file containing configs to be passed to the consumer (the newer name of "
        "--consumer.config).",
    )
    a(
        "--formatter",
        metavar="class",
        default=DEFAULT_FORMATTER,
        help="The name of a class to use for formatting kafka messages for display. "
        f"(default: {DEFAULT_FORMATTER})",
    )
    a(
        "--property",
        action="append",
        metavar="prop",
        help="The properties to initialize the message formatter. Default properties include: "
        + _FORMATTER_PROPS,
    )
    a(
        "--formatter-config",
        metavar="config file",
        help="Config properties file to initialize the message formatter. Note that --property "
        "takes precedence over this config.",
    )
    a(
        "--from-beginning",
        action="store_true",
        help="If the consumer does not already have an established offset to consume from, "
        "start with the earliest message present in the log rather than the latest message.",
    )
    a(
        "--max-messages",
        type=int,
        metavar="num_messages",
        help="The maximum number of messages to consume before exiting. If not set, "
        "consumption is continual.",
    )
    a(
        "--timeout-ms",
        type=int,
        metavar="timeout_ms",
        help="If specified, exit if no message is available for consumption for the specified "
        "interval.",
    )
    a(
        "--skip-message-on-error",
        action="store_true",
        help="If there is an error when processing a message, skip it instead of halt.",
    )
    a(
        "--bootstrap-server",
        metavar="server to connect to",
        help="REQUIRED: The server(s) to connect to.",
    )
    a("--key-deserializer", metavar="deserializer for key")
    a("--value-deserializer", metavar="deserializer for values")
    a(
        "--enable-systest-events",
        action="store_true",
        help="Log lifecycle events of the consumer in addition to logging consumed messages. "
        "(This is specific for system tests.)",
    )
    a(
        "--isolation-level",
        metavar="String",
        help="Set to read_committed in order to filter out transactional messages which are not "
        "committed. Set to read_uncommitted to read all messages. (default: read_uncommitted)",
    )
    a("--group", metavar="consumer group id", help="The consumer group id of the consumer.")


# -- options ---------------------------------------------------------------------------------------


def _usage(args: argparse.Namespace) -> None:
    """ConsoleConsumerOptions' checks, in Kafka's order."""
    if (args.topic is None) == (args.include is None):
        raise UsageError("Exactly one of --include/--topic is required.")
    if args.partition is not None:
        if args.topic is None:
            raise UsageError("The topic is required when partition is specified.")
        if args.from_beginning and args.offset is not None:
            raise UsageError("Options from-beginning and offset cannot be specified together.")
    elif args.offset is not None:
        raise UsageError("The partition is required when offset is specified.")
    check_bootstrap(args.bootstrap_server)
    if args.max_messages is not None and args.max_messages < 0 and args.max_messages != -1:
        raise UsageError(f"--max-messages {args.max_messages} is not a number of messages")


def _offset(args: argparse.Namespace) -> int:
    """``--offset`` as an offset, or EARLIEST_TIMESTAMP / LATEST_TIMESTAMP."""
    if args.offset is not None:
        text = args.offset.lower()
        if text == "earliest":
            return EARLIEST_TIMESTAMP
        if text == "latest":
            return LATEST_TIMESTAMP
        try:
            offset = int(args.offset)
        except ValueError:
            offset = -1
        if offset < 0:
            raise UsageError(
                f"The provided offset value '{args.offset}' is incorrect. Valid values are "
                "'earliest', 'latest', or a non-negative long."
            )
        return offset
    return EARLIEST_TIMESTAMP if args.from_beginning else LATEST_TIMESTAMP


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """Kafka's ``consumerProps``: file, --consumer-property, auto.offset.reset from
    --from-beginning, bootstrap, client.id, isolation level and group id."""
    from_file = load_config_files(args, "--consumer.config")
    extra = parse_key_value_args(args.consumer_property)
    groups = {
        g for g in (args.group, from_file.get("group.id"), extra.get("group.id")) if g is not None
    }
    if len(groups) > 1:
        raise UsageError(
            "The group ids provided in different places (directly using '--group', via "
            "'--consumer-property', or via '--consumer.config') do not match. Detected group "
            "ids: " + ", ".join(f"'{g}'" for g in sorted(groups))
        )
    if groups and args.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    props = {**from_file, **extra}
    reset = props.get("auto.offset.reset")
    if reset is not None and args.from_beginning and reset != "earliest":
        raise UsageError(
            f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', "
            "please remove one option"
        )
    if reset is None:
        props["auto.offset.reset"] = "earliest" if args.from_beginning else "latest"
    props["bootstrap.servers"] = args.bootstrap_server
    props.setdefault("client.id", "console-consumer")
    if args.isolation_level is not None:
        props["isolation.level"] = args.isolation_level
    else:
        props.setdefault("isolation.level", "read_uncommitted")
    if groups:
        props["group.id"] = groups.pop()
    else:
        props["group.id"] = f"console-consumer-{random.randrange(100_000)}"
        # The made-up group is not meant to be used again: do not fill the coordinator with it.
        props.setdefault("enable.auto.commit", "false")
    return props


def _formatter(args: argparse.Namespace) -> Formatter:
    props = load_file(args.formatter_config)
    if args.key_deserializer:
        props["key.deserializer"] = args.key_deserializer
    if args.value_deserializer:
        props["value.deserializer"] = args.value_deserializer
    props.update(parse_key_value_args(args.property))
    return make_formatter(args.formatter, props)


# -- the run ---------------------------------------------------------------------------------------


class _Stop(Exception):
    """The output closed: stop consuming."""


async def _check_topic(client: KafkaClient, args: argparse.Namespace) -> None:
    if args.topic is None:
        return
    metadata = await client.refresh_metadata([args.topic])
    info = metadata.topics.get(args.topic)
    if info is None:
        code = metadata.topic_errors.get(args.topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        raise KafkaError(code, f"topic '{args.topic}' does not exist")
    if args.partition is not None and args.partition not in info.partitions:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic '{args.topic}' has no partition {args.partition}",
        )


async def _start(consumer: Consumer, args: argparse.Namespace, offset: int) -> None:
    if args.partition is not None:
        tp = (args.topic, args.partition)
        consumer.assign([tp])
        if offset in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            await consumer.seek_to([tp], offset)
        else:
            consumer.seek(tp, offset)
    elif args.topic is not None:
        consumer.subscribe([args.topic])
    else:
        consumer.subscribe(pattern=args.include)


def _write(records: list[ConsumerRecord], formatter: Formatter, skip_errors: bool) -> int:
    """Print ``records``; how many were printed before the output closed (then _Stop)."""
    out = sys.stdout.buffer
    chunks = []
    for record in records:
        try:
            chunks.append(formatter.format(record))
        except FormatterError as e:
            if not skip_errors:
                raise
            print(f"Error processing message, skipping this message: {e}", file=sys.stderr)
    try:
        out.write(b"".join(chunks))
        out.flush()
    except (BrokenPipeError, OSError):
        print("Unable to write to standard out, closing consumer.", file=sys.stderr)
        raise _Stop() from None
    return len(records)


async def _consume(
    client: KafkaClient,
    config: ConsumerConfig,
    args: argparse.Namespace,
    offset: int,
    formatter: Formatter,
    counter: list[int],
    caught: list[int],
) -> None:
    limit = args.max_messages if args.max_messages is not None else -1
    timeout = (
        args.timeout_ms / 1000 if args.timeout_ms is not None and args.timeout_ms >= 0 else None
    )
    errors: list[Exception] = []
    async with open_consumer(client, config) as consumer:
        async with trio.open_nursery() as nursery:  # noqa: SIM117 (errors must leave it first)
            nursery.start_soon(cancel_on_signal, nursery.cancel_scope, caught)
            try:
                await _consume_loop(consumer, args, offset, formatter, counter, limit, timeout)
            except Exception as e:  # raised below, not in the nursery's ExceptionGroup
                errors.append(e)
            nursery.cancel_scope.cancel()
        if errors:
            raise errors[0]


async def _consume_loop(
    consumer: Consumer,
    args: argparse.Namespace,
    offset: int,
    formatter: Formatter,
    counter: list[int],
    limit: int,
    timeout: float | None,
) -> None:
    await _start(consumer, args, offset)
    started = time.monotonic()
    while limit < 0 or counter[0] < limit:
        want = None if limit < 0 else limit - counter[0]
        records = await consumer.poll(timeout if timeout is not None else 3600.0, max_records=want)
        if not records:
            if timeout is not None and time.monotonic() - started >= timeout:
                print(
                    "Error processing message, terminating consumer process: "
                    f"TimeoutException: no message for {args.timeout_ms} ms",
                    file=sys.stderr,
                )
                break
            continue
        try:
            counter[0] += _write(records, formatter, args.skip_message_on_error)
        except _Stop:
            for r in records:  # not printed: not committed either
                if consumer.position((r.topic, r.partition)) > r.offset:
                    consumer.seek((r.topic, r.partition), r.offset)
            break
        started = time.monotonic()


def main(args: argparse.Namespace) -> int:
    """Run the tool; the exit status (see :mod:`kcore.commands._console`)."""
    try:
        _usage(args)
        offset = _offset(args)
        settings = _settings(args)
        formatter = _formatter(args)
        config = consumer_config(settings)
    except UsageError as e:
        print(f"kcore console-consumer: error: {e}", file=sys.stderr)
        return 2
    except (ConfigError, FormatterError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    counter = [0]
    caught: list[int] = []

    async def run() -> None:
        async with client_for(config) as client:
            await _check_topic(client, args)
            await _consume(client, config, args, offset, formatter, counter, caught)

    status = 0
    try:
        trio.run(run)
    except (KafkaError, ClientError, CorruptRecordError, FormatterError) as e:
        print(f"Error: {e}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:  # Ctrl-C before the consumer started: nothing to commit
        caught.append(2)
    print(f"Processed a total of {counter[0]} messages", file=sys.stderr)
    if args.enable_systest_events:
        print("shutdown_complete", flush=True)
    return SIGNAL_STATUS[caught[0]] if caught else status
