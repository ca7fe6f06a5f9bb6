"""``kcore metadata-quorum``: the state of the KRaft metadata quorum
(``kafka-metadata-quorum.sh describe --status / --replication``, Kafka's
``MetadataQuorumCommand``).

Kafka's field names and table (each cell padded to its column, then a tab)::

    kcore metadata-quorum --bootstrap-server :9092 describe --status
    ClusterId:              MkU3OEVBNTcwNTJENDM2Qg
    LeaderId:               1
    LeaderEpoch:            3
    HighWatermark:          412
    MaxFollowerLag:         0
    MaxFollowerLagTimeMs:   0
    CurrentVoters:          [{"id": 1, "directoryId": null}]
    CurrentObservers:       [{"id": 2, "directoryId": null}, {"id": 3, "directoryId": null}]
    kcore metadata-quorum --bootstrap-server :9092 describe --replication [--human-readable]
    NodeId  DirectoryId             LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status
    1       AAAAAAAAAAAAAAAAAAAAAA  412           0    1733110000000       1733110000000          Leader

The broker asked passes DescribeQuorum on to the quorum leader (the active controller), which
answers it from its Raft state: the high watermark of ``__cluster_metadata``, and for each voter
(the leader, then the followers) and observer (broker-only nodes) its log end offset and when it
last fetched and was last caught up. kcore's quorum has static voters, so directory ids are
zero (``null`` in ``--status``) and no endpoints are listed.

Not here: ``--bootstrap-controller`` (kcore's controller listener serves no DescribeCluster, so
the cluster id is unknown there) and the ``add-controller`` / ``remove-controller`` subcommands
(static voters: ``controller.quorum.voters``). Exit status 0; 1 with one line on stderr when the
quorum cannot be described; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import base64
import time
import uuid
from typing import Any

from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool, tab_table
from kcore.commands._joptsimple import one_line_errors
from kcore.protocol import messages as m

METADATA_TOPIC = "__cluster_metadata"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's arguments (argparse4j there, argparse here: the same options and help)."""
    parser.description = "This tool describes kraft metadata quorum status."
    parser.add_argument(
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
        "to the Kafka cluster.",
    )
    parser.add_argument(
        "--command-config", help="Property file containing configs to be passed to Admin Client."
    )
    sub = parser.add_subparsers(dest="quorum_command", metavar="{describe}")
    describe = sub.add_parser("describe", help="Describe the metadata quorum info")
    status = describe.add_argument_group("Status")
    status.add_argument(
        "--status",
        action="store_true",
        help="A short summary of the quorum status and the other provides detailed information "
        "about the status of replication.",
    )
    replication = describe.add_argument_group("Replication")
    replication.add_argument(
        "--replication",
        action="store_true",
        help="Detailed information about the status of replication",
    )
    replication.add_argument("--human-readable", action="store_true", help="Human-readable output")
    one_line_errors(parser)
    one_line_errors(describe)


def _usage(args: argparse.Namespace) -> str | None:
    if args.quorum_command is None:
        return "a subcommand is required: describe"
    if not args.bootstrap_server:
        return "--bootstrap-server is required"
    if args.status and args.replication:
        return "Only one of --status or --replication should be specified with describe sub-command"
    if not args.status and not args.replication:
        return "One of --status or --replication must be specified with describe sub-command"
    if args.status and args.human_readable:
        return "The option --human-readable is only supported along with --replication"
    return None


def main(args: argparse.Namespace) -> int:
    return run_tool("metadata-quorum", args, _usage, _run)


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


async def describe_quorum(client: KafkaClient) -> Any:
    """The ``__cluster_metadata-0`` part of a DescribeQuorum answer. Raises Refused."""
    D = m.DescribeQuorumRequest
    body = D(
        topics=[
            D.TopicData(topic_name=METADATA_TOPIC, partitions=[D.PartitionData(partition_index=0)])
        ]  # fmt: skip
    )
    response = await client.request("any", body)
    if response.error_code:
        raise Refused(f"Error: {error_text(response.error_code, response.error_message)}")
    (part,) = [p for t in response.topics for p in t.partitions]
    if part.error_code:
        raise Refused(f"Error: {error_text(part.error_code, part.error_message)}")
    return part


def _node(replica: Any) -> str:
    """Kafka's ``Node.toString`` in ``CurrentVoters`` / ``CurrentObservers``."""
    directory = replica.replica_directory_id
    shown = "null" if directory is None or directory.int == 0 else f'"{kafka_uuid(directory)}"'
    return f'{{"id": {replica.replica_id}, "directoryId": {shown}}}'


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    part = await describe_quorum(client)
    leader = next((v for v in part.current_voters if v.replica_id == part.leader_id), None)
    if leader is None:
        raise Refused(f"Error: the quorum has no leader among its voters (leader {part.leader_id})")
    if args.replication:
        _replication(part, leader, args.human_readable)
        return 0
    metadata = await client.refresh_metadata([])
    behind = min(part.current_voters, key=lambda v: v.log_end_offset)
    if behind is leader:
        lag_time = 0
    elif leader.last_caught_up_timestamp >= 0 and behind.last_caught_up_timestamp >= 0:
        lag_time = leader.last_caught_up_timestamp - behind.last_caught_up_timestamp
    else:
        lag_time = -1
    fields = [
        ("ClusterId", metadata.cluster_id),
        ("LeaderId", part.leader_id),
        ("LeaderEpoch", part.leader_epoch),
        ("HighWatermark", part.high_watermark),
        ("MaxFollowerLag", leader.log_end_offset - behind.log_end_offset),
        ("MaxFollowerLagTimeMs", lag_time),
        ("CurrentVoters", "[" + ", ".join(map(_node, part.current_voters)) + "]"),
        ("CurrentObservers", "[" + ", ".join(map(_node, part.observers)) + "]"),
    ]
    for name, value in fields:
        print(f"{name + ':':<24}{value}")
    return 0


def _timestamp(value: int, human_readable: bool, what: str) -> str:
    if value < 0:
        return "-1"
    if not human_readable:
        return str(value)
    now = int(time.time() * 1000)
    if not 0 < value <= now:
        raise Refused(
            "Error while computing relative time, possible drift in system clock. Current "
            f"timestamp is {now}, {what} timestamp is {value}"
        )
    return f"{now - value} ms ago"


def _replication(part: Any, leader: Any, human_readable: bool) -> None:
    followers = [v for v in part.current_voters if v.replica_id != leader.replica_id]
    rows = [
        [
            r.replica_id,
            kafka_uuid(r.replica_directory_id or uuid.UUID(int=0)),
            r.log_end_offset,
            leader.log_end_offset - r.log_end_offset,
            _timestamp(r.last_fetch_timestamp, human_readable, "last fetch"),
            _timestamp(r.last_caught_up_timestamp, human_readable, "last caught up"),
            status,
        ]
        for group, status in (
            ([leader], "Leader"),
            (followers, "Follower"),
            (part.observers, "Observer"),
        )  # fmt: skip
        for r in group
    ]
    headers = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
               "LastCaughtUpTimestamp", "Status"]  # fmt: skip
    print(tab_table(headers, rows))
