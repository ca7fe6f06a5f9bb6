"""``kcore delete-records``: delete the records of partitions below an offset
(``kafka-delete-records.sh``, Kafka's ``DeleteRecordsCommand``).

Kafka's JSON file and output lines::

    $ cat offsets.json
    {"partitions": [{"topic": "orders", "partition": 0, "offset": 5}], "version": 1}
    kcore delete-records --bootstrap-server :9092 --offset-json-file offsets.json
    Executing records delete operation
    Records delete operation completed:
    partition: orders-0	low_watermark: 5

Each partition's log start offset moves up to its ``offset`` (-1: the high watermark); the
records below it are no longer readable and their segments are deleted as retention deletes
them. A partition the cluster refuses gets ``partition: orders-1	error: NAME: message``.

Exit status 0; 1 when the file is not Kafka's format (one line on stderr) or a partition was
refused; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kcore.client.admin import delete_records
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text, missing_required
from kcore.protocol.errors import ErrorCode

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = "This tool helps to delete records of the given partitions down to the specified offset."

OPTIONS = [
    Option(
        "bootstrap-server",
        "REQUIRED: The server to connect to.",
        "server(s) to use for bootstrapping",
    ),
    Option(
        "offset-json-file",
        "REQUIRED: The JSON file with offset per partition. The format to use is:\n"
        '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n "version":1\n}',
        "Offset json file path",
    ),
    Option(
        "command-config",
        "A property file containing configs to be passed to Admin Client.",
        "command config property file path",
    ),
]
HELP = help_text(USAGE, OPTIONS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _field(entry: Any, name: str, kind: type) -> Any:
    if not isinstance(entry, dict) or name not in entry:
        raise Refused(f"Missing field {name} in {json.dumps(entry)}")
    value = entry[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise Refused(f"Field {name} must be a number, not {json.dumps(value)}")
    if kind is str and not isinstance(value, str):
        raise Refused(f"Field {name} must be a string, not {json.dumps(value)}")
    return value


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    """Kafka's offset JSON: ``{(topic, partition): offset}``.

    Raises:
        Refused: not JSON, a version other than 1, no ``partitions``, a field missing or of the
            wrong type, or a partition given twice (Kafka's messages).
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise Refused("The input string is not a valid JSON") from None
    if not isinstance(doc, dict):
        raise Refused("The input string is not a valid JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise Refused(f"Not supported version field value {version}")
    if "partitions" not in doc:
        raise Refused("Missing partitions field")
    if not isinstance(doc["partitions"], list):
        raise Refused("The partitions field must be an array")
    seen: dict[tuple[str, int], list[int]] = {}
    for entry in doc["partitions"]:
        tp = (_field(entry, "topic", str), _field(entry, "partition", int))
        seen.setdefault(tp, []).append(_field(entry, "offset", int))
    duplicates = [f"{t}-{p}" for (t, p), offsets in seen.items() if len(offsets) > 1]
    if duplicates:
        raise Refused(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    return {tp: offsets[0] for tp, offsets in seen.items()}


def _usage(args: argparse.Namespace) -> str | None:
    return missing_required(args, "bootstrap-server", "offset-json-file")


def main(args: argparse.Namespace) -> int:
    return run_tool(
        "delete-records", args, _usage, _run, help_text=HELP, prepare=_read_offsets,
        refused_prefix="",
    )  # fmt: skip


def _read_offsets(args: argparse.Namespace) -> None:
    if args.offset_json_file is None:
        return  # _usage says it is missing
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            args.offsets = parse_offset_json(f.read())
    except OSError as e:
        raise Refused(f"Cannot read {args.offset_json_file}: {e.strerror}") from None


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    print("Executing records delete operation", flush=True)
    metadata = await client.refresh_metadata(sorted({t for t, _ in args.offsets}))
    known = {
        tp
        for tp in args.offsets
        if tp[0] in metadata.topics and tp[1] in metadata.topics[tp[0]].partitions
    }
    answers = await delete_records(client, {tp: args.offsets[tp] for tp in known})
    print("Records delete operation completed:")
    failed = 0
    for topic, p in sorted(args.offsets):
        answer = answers.get((topic, p))
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if answer is None else answer.error_code
        if code:
            failed += 1
            print(f"partition: {topic}-{p}\terror: {error_text(code)}")
        else:
            print(f"partition: {topic}-{p}\tlow_watermark: {answer.low_watermark}")
    return 1 if failed else 0
