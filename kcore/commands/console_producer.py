"""``kcore console-producer``: one record per line of standard input (``kafka-console-producer.sh``).

Kafka's flags, defaults and line format::

    echo 'k1<TAB>hello' | kcore console-producer --bootstrap-server 127.0.0.1:9092 \\
        --topic orders --property parse.key=true --producer-property acks=all

Each line is a record's value; with ``parse.key=true`` the text before ``key.separator`` (a tab)
is its key, and with ``parse.headers=true`` the text before ``headers.delimiter`` (a tab) is its
headers, ``h1:v1,h2:v2`` (``headers.separator`` is a regular expression, as in Kafka). A field
equal to ``null.marker`` is null. The producer settings are those of ``--producer.config`` (or
``--command-config``), then ``--producer-property``, then this tool's own flags, as Kafka merges
them; with Kafka's console defaults (``linger.ms`` 1000 via ``--timeout``, ``acks`` -1,
``request.timeout.ms`` 1500, ``retries`` 3). kcore's producer is not idempotent:
``enable.idempotence=true`` is refused.

A line that does not parse stops the tool (exit 1, the error on one line) after the lines before
it were sent. A record that fails after its retries is reported on stderr as Kafka's
``ErrorLoggingCallback`` reports it, and the tool exits 1 once the rest is sent (Kafka exits 0);
with ``--sync`` the first failure stops it. Ctrl-C sends what was read, then exits 130.
"""

from __future__ import annotations

import argparse
import codecs
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import trio

from kcore.client.client_configs import ConfigError, producer_config
from kcore.client.errors import ClientError
from kcore.client.producer import Delivery, Producer
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
from kcore.protocol.errors import KafkaError
from kcore.record import Header

READERS = ("org.apache.kafka.tools.LineMessageReader", "kafka.tools.LineMessageReader")
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

ONE_LINE_ERRORS = True  # a bad flag is reported on one line (kcore.cli)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.description = "This tool helps to read data from standard input and publish it to Kafka."
    a = parser.add_argument
    a("--topic", metavar="topic", help="REQUIRED: The topic name to produce messages to.")
    a(
        "--bootstrap-server",
        metavar="server to connect to",
        help="REQUIRED: The server(s) to connect to. The broker list string in the form "
        "HOST1:PORT1,HOST2:PORT2.",
    )
    a(
        "--sync",
        action="store_true",
        help="If set message send requests to the brokers are "
        "synchronously, one at a time as they arrive.",
    )
    a(
        "--compression-codec",
        nargs="?",
        const="gzip",
        metavar="compression-codec",
        help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. If "
        "specified without value, then it defaults to 'gzip'",
    )
    a(
        "--batch-size",
        type=int,
        metavar="size",
        help="Number of messages to send in a single "
        "batch if they are not being sent synchronously. (default: 16384)",
    )
    a(
        "--message-send-max-retries",
        type=int,
        metavar="Integer",
        help="The number of retries "
        "before the producer gives up and drops a message: `retries`. (default: 3)",
    )
    a(
        "--retry-backoff-ms",
        type=int,
        metavar="Long",
        help="The time the producer waits before "
        "refreshing the metadata and retrying: `retry.backoff.ms`. (default: 100)",
    )
    a(
        "--timeout",
        type=int,
        metavar="timeout_ms",
        help="The maximum time a message waits for "
        "its batch to fill, in ms: `linger.ms`. (default: 1000)",
    )
    a(
        "--request-required-acks",
        metavar="request required acks",
        help="The required `acks` of the producer requests (default: -1)",
    )
    a(
        "--request-timeout-ms",
        type=int,
        metavar="request timeout ms",
        help="The ack timeout of "
        "the producer requests. Value must be non-negative and non-zero. (default: 1500)",
    )
    a(
        "--metadata-expiry-ms",
        type=int,
        metavar="metadata expiration interval",
        help="The period "
        "after which metadata is refreshed: `metadata.max.age.ms`. (default: 300000)",
    )
    a(
        "--max-block-ms",
        type=int,
        metavar="max block on send",
        help="The max time that the "
        "producer will block for during a send request. (default: 60000)",
    )
    a(
        "--max-memory-bytes",
        type=int,
        metavar="total memory in bytes",
        help="The total memory "
        "used to buffer records waiting to be sent: `buffer.memory`. (default: 33554432)",
    )
    a(
        "--max-partition-memory-bytes",
        type=int,
        metavar="memory in bytes per partition",
        help="The buffer size allocated for a partition: `batch.size`. (default: 16384)",
    )
    a(
        "--line-reader",
        metavar="reader_class",
        default=READERS[0],
        help="The class name of the "
        "class to use for reading lines from standard in. (default: " + READERS[0] + ")",
    )
    a(
        "--socket-buffer-size",
        type=int,
        metavar="size",
        help="The size of the tcp RECV size: "
        "`send.buffer.bytes`. Not supported by kcore (the OS default is used).",
    )
    a(
        "--property",
        action="append",
        metavar="prop",
        help="Properties of the message reader, "
        "key=value: parse.key=false, parse.headers=false, ignore.error=false, key.separator=\\t, "
        "headers.delimiter=\\t, headers.separator=',', headers.key.separator=':', null.marker "
        "(fields equal to it are null). Lines: 'h1:v1,h2:v2...<TAB>key<TAB>value' with both, "
        "'key<TAB>value' with parse.key, 'h1:v1,h2:v2...<TAB>value' with parse.headers.",
    )
    a(
        "--reader-config",
        metavar="config file",
        help="Config properties file for the message "
        "reader. Note that --property takes precedence over this config.",
    )
    a(
        "--producer-property",
        action="append",
        metavar="producer_prop",
        help="A mechanism to pass user-defined properties in the form key=value to the producer.",
    )
    a(
        "--producer.config",
        dest="producer_config",
        metavar="config file",
        help="Producer "
        "config properties file. Note that --producer-property takes precedence over this config.",
    )
    a(
        "--command-config",
        metavar="config file",
        help="Property file containing configs to be "
        "passed to the producer (the newer name of --producer.config).",
    )


# -- LineMessageReader -----------------------------------------------------------------------------


class ReaderError(ValueError):
    """A line the reader cannot parse (Kafka's KafkaException from LineMessageReader)."""


@dataclass(frozen=True)
class LineRecord:
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class LineMessageReader:
    """Kafka's ``LineMessageReader``: parses one line into headers, key and value (see the module
    docstring). ``props`` are ``--reader-config`` then ``--property``; unknown ones are refused."""

    KNOWN = frozenset(
        {
            "parse.key",
            "key.separator",
            "parse.headers",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
            "ignore.error",
            "null.marker",
        }
    )

    def __init__(self, props: dict[str, str]) -> None:
        unknown = sorted(k for k in props if k not in self.KNOWN)
        if unknown:
            raise ReaderError(
                f"Unknown property '{unknown[0]}' for LineMessageReader; it takes "
                + ", ".join(sorted(self.KNOWN))
            )
        true = {k for k in props if props[k].strip().lower() == "true"}
        self.parse_key = "parse.key" in true
        self.parse_headers = "parse.headers" in true
        self.ignore_error = "ignore.error" in true
        self.key_separator = props.get("key.separator", "\t")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        try:
            self._headers_pattern = re.compile(self.headers_separator)
        except re.error as e:
            raise ReaderError(f"headers.separator is not a regular expression: {e}") from None
        pairs = [
            ("headers.delimiter", "headers.separator"),
            ("headers.delimiter", "headers.key.separator"),
            ("headers.separator", "headers.key.separator"),
        ]
        for a, b in pairs:
            if self._value(a) == self._value(b):
                raise ReaderError(f"{a} and {b} may not be equal")
        for other in (
            "key.separator",
            "headers.separator",
            "headers.delimiter",
            "headers.key.separator",
        ):
            if self.null_marker is not None and self._value(other) == self.null_marker:
                raise ReaderError(f"null.marker and {other} may not be equal")
        self.line_number = 0

    def _value(self, name: str) -> str:
        return {
            "key.separator": self.key_separator,
            "headers.delimiter": self.headers_delimiter,
            "headers.separator": self.headers_separator,
            "headers.key.separator": self.headers_key_separator,
        }[name]

    def _cut(self, enabled: bool, line: str, start: int, sep: str, what: str) -> str | None:
        if not enabled:
            return None
        index = line.find(sep, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise ReaderError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:index]

    def _null(self, text: str | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text.encode()

    def read(self, line: str) -> LineRecord:
        """The record of the next ``line`` (without its line terminator)."""
        self.line_number += 1
        headers = self._cut(
            self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter"
        )
        header_end = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, header_end, self.key_separator, "key separator")
        key_end = 0 if key is None else len(key) + len(self.key_separator)
        value = line[header_end + key_end :]
        parsed: list[Header] = []
        if headers is not None and headers != self.null_marker:
            parsed = [self._header(pair) for pair in _java_split(self._headers_pattern, headers)]
        return LineRecord(self._null(key), self._null(value), parsed)

    def _header(self, pair: str) -> Header:
        i = pair.find(self.headers_key_separator)
        if i == -1:
            if self.ignore_error:
                return (pair, None)
            raise ReaderError(
                f"No header key separator found in pair '{pair}' on line number {self.line_number}"
            )
        key = pair[:i]
        if key == self.null_marker:
            raise ReaderError(
                f"Header keys should not be equal to the null marker '{self.null_marker}' as "
                "they can't be null"
            )
        return (key, self._null(pair[i + len(self.headers_key_separator) :]))


def _java_split(pattern: re.Pattern[str], text: str) -> list[str]:
    # Pattern.split: trailing empty strings are dropped (but "" alone gives [""]).
    parts = pattern.split(text) if pattern.pattern else list(text)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


class LineSplitter:
    """Standard input's bytes as lines, as Java's ``BufferedReader.readLine``: UTF-8 with
    replacement characters, lines ended by ``\\n``, ``\\r`` or ``\\r\\n``."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> Iterator[str]:
        text = self._pending + self._decoder.decode(data, final=not data)
        if data and text.endswith("\r"):  # a "\n" may follow in the next chunk
            text, self._pending = text[:-1], "\r"
        else:
            self._pending = ""
        lines = re.split(r"\r\n|\r|\n", text)
        if data:
            self._pending = lines.pop() + self._pending
        elif lines[-1] == "":
            lines.pop()
        yield from lines


# -- the tool ------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """Kafka's ``producerProps``: the config file, then --producer-property, then the flags
    (a flag given wins; else a setting from the file or properties stays; else its default)."""
    props = load_config_files(args, "--producer.config")
    props.update(parse_key_value_args(args.producer_property))
    props["bootstrap.servers"] = args.bootstrap_server
    codec = args.compression_codec
    props["compression.type"] = "none" if codec is None else (codec or "gzip")
    props.setdefault("client.id", "console-producer")
    for flag, name, default in (
        (args.timeout, "linger.ms", 1000),
        (args.request_required_acks, "acks", "-1"),
        (args.request_timeout_ms, "request.timeout.ms", 1500),
        (args.message_send_max_retries, "retries", 3),
        (args.retry_backoff_ms, "retry.backoff.ms", 100),
        (args.max_memory_bytes, "buffer.memory", 33_554_432),
        (args.batch_size, "batch.size", 16_384),
        (args.max_partition_memory_bytes, "batch.size", None),
        (args.metadata_expiry_ms, "metadata.max.age.ms", 300_000),
        (args.max_block_ms, "max.block.ms", 60_000),
    ):
        if flag is not None:
            props[name] = str(flag)
        elif default is not None:
            props.setdefault(name, str(default))
    return props


def _usage(args: argparse.Namespace) -> None:
    if not args.topic:
        raise UsageError('Missing required argument "[topic]"')
    check_bootstrap(args.bootstrap_server)
    if args.compression_codec and args.compression_codec.lower() not in _CODECS:
        raise UsageError(
            f"Invalid compression codec {args.compression_codec!r}: use one of "
            + ", ".join(_CODECS)
        )
    if args.line_reader not in READERS:
        raise UsageError(
            f"--line-reader {args.line_reader} is not supported; kcore has {READERS[0]}"
        )
    if args.socket_buffer_size is not None:
        raise UsageError("--socket-buffer-size is not supported by kcore (the OS default is used)")


def _describe(data: bytes | None) -> str:
    return "null" if data is None else f"{len(data)} bytes"


def _report(deliveries: list[Delivery]) -> int:
    """Print the failed deliveries as Kafka's ErrorLoggingCallback; how many failed."""
    failed = 0
    for d in deliveries:
        if d.error is not None:
            failed += 1
            print(
                f"Error when sending message to topic {d.topic} with key: {_describe(d.key)}, "
                f"value: {_describe(d.value)} with error: {d.error}",
                file=sys.stderr,
            )
    return failed


async def _produce(args: argparse.Namespace, producer: Producer, reader: LineMessageReader) -> int:
    failed = 0
    unreported: list[Delivery] = []
    prompt = os.isatty(0) and os.isatty(1)
    splitter = LineSplitter()
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with stdin:
        await producer.partitions_of(args.topic)  # an unknown topic fails before reading
        if prompt:
            print(">", end="", flush=True)
        while True:
            wait = max(producer.next_linger_deadline() - trio.current_time(), 0)
            data = None
            with trio.move_on_after(wait):
                data = await stdin.receive_some(65536)
            if data is None:  # linger.ms passed: send the batches that are due
                await producer.poll()
                failed += _report([d for d in unreported if d.done])
                unreported = [d for d in unreported if not d.done]
                continue
            for line in splitter.feed(data):
                record = reader.read(line)
                delivery = await producer.send(args.topic, record.value, record.key, record.headers)
                unreported.append(delivery)
                if args.sync:
                    await producer.flush()
                    if _report([delivery]):
                        return 1
                    unreported.clear()
                if prompt:
                    print(">", end="", flush=True)
            if not data:  # end of input: send the rest
                await producer.flush()
                failed += _report(unreported)
                return 1 if failed else 0


def main(args: argparse.Namespace) -> int:
    """Run the tool; the exit status (see :mod:`kcore.commands._console`)."""
    try:
        _usage(args)
        settings = _settings(args)
        reader_props = load_file(args.reader_config)
        reader_props.update(parse_key_value_args(args.property))
        reader = LineMessageReader(reader_props)
        config = producer_config(settings)
    except UsageError as e:
        print(f"kcore console-producer: error: {e}", file=sys.stderr)
        return 2
    except (ConfigError, ReaderError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    caught: list[int] = []

    async def run() -> int:
        async with client_for(config) as client:
            producer = Producer(client, config)
            status = 0
            errors: list[Exception] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_on_signal, nursery.cancel_scope, caught)
                try:
                    status = await _produce(args, producer, reader)
                except Exception as e:  # raised below, not in the nursery's ExceptionGroup
                    errors.append(e)
                finally:
                    # Whatever was read is sent, also after Ctrl-C or a bad line.
                    with trio.CancelScope(shield=True):
                        try:
                            await producer.flush()
                        except Exception as e:
                            errors.append(e)
                nursery.cancel_scope.cancel()
            if errors:
                raise errors[0]
            return status

    try:
        status = trio.run(run)
    except ReaderError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except (KafkaError, ClientError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the producer started: nothing read yet
        return 130
    return SIGNAL_STATUS[caught[0]] if caught else status
