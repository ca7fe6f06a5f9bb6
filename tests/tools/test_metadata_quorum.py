"""``kcore metadata-quorum`` (``kafka-metadata-quorum.sh describe``) as a process against a
running three-node kcore (node 1 the only voter, nodes 2 and 3 observers): Kafka's fields and
table, asked through any broker (a broker-only node passes DescribeQuorum to the leader)."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka.admin import AdminClient

from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, usage_error, wrapper

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(brokers=3) as c:
        c.create_topic("mq-orders", partitions=3)
        yield c


def quorum(cluster, *argv: str, node: int = 1):
    return kcore("metadata-quorum", "--bootstrap-server", f"127.0.0.1:{cluster.ports[node - 1]}",
                 "describe", *argv)  # fmt: skip


def _status(cluster, node: int = 1) -> dict[str, str]:
    done = quorum(cluster, "--status", node=node)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert [line[:24] for line in lines] == [
        f"{name + ':':<24}"
        for name in (
            "ClusterId",
            "LeaderId",
            "LeaderEpoch",
            "HighWatermark",
            "MaxFollowerLag",
            "MaxFollowerLagTimeMs",
            "CurrentVoters",
            "CurrentObservers",
        )  # fmt: skip
    ]
    return {line.split(":")[0]: line[24:] for line in lines}


def test_metadata_quorum_status_names_the_leader_voters_and_observers(cluster):
    status = _status(cluster)
    cluster_id = (
        AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        .list_topics(timeout=10)
        .cluster_id
    )
    high_watermark = int(status["HighWatermark"])
    assert high_watermark > 0
    assert status == {
        "ClusterId": cluster_id,
        "LeaderId": "1",
        "LeaderEpoch": status["LeaderEpoch"],
        "HighWatermark": str(high_watermark),
        "MaxFollowerLag": "0",  # the only voter is the leader
        "MaxFollowerLagTimeMs": "0",
        "CurrentVoters": '[{"id": 1, "directoryId": null}]',
        "CurrentObservers": '[{"id": 2, "directoryId": null}, {"id": 3, "directoryId": null}]',
    }
    assert int(status["LeaderEpoch"]) >= 1
    # A broker-only node passes the request to the leader: the same answer.
    through_2 = _status(cluster, node=2)
    assert (through_2["LeaderId"], through_2["CurrentObservers"]) == (
        "1",
        status["CurrentObservers"],
    )
    assert int(through_2["HighWatermark"]) >= high_watermark


def test_metadata_quorum_replication_table(cluster):
    before_ms = int(time.time() * 1000)
    done = quorum(cluster, "--replication", node=3)
    assert (done.returncode, done.stderr) == (0, "")
    header, *rows = done.stdout.splitlines()
    assert header.split("\t") == [
        "NodeId", "DirectoryId           ", "LogEndOffset", "Lag", "LastFetchTimestamp",
        "LastCaughtUpTimestamp", "Status  ", "",
    ]  # fmt: skip
    cells = [row.split("\t") for row in rows]
    assert [(c[0].strip(), c[1], c[6].strip()) for c in cells] == [
        ("1", "AAAAAAAAAAAAAAAAAAAAAA", "Leader"),
        ("2", "AAAAAAAAAAAAAAAAAAAAAA", "Observer"),
        ("3", "AAAAAAAAAAAAAAAAAAAAAA", "Observer"),
    ]
    leader_end = int(cells[0][2])
    for c in cells:
        assert int(c[3]) == leader_end - int(c[2])  # Lag
        fetched, caught_up = int(c[4]), int(c[5])
        # Wall-clock epoch milliseconds, as Kafka reports them: recent, not in the future.
        assert before_ms - 60_000 < fetched <= int(time.time() * 1000) + 1000
        assert before_ms - 60_000 < caught_up <= int(time.time() * 1000) + 1000
    # every cell padded to its column's width, then a tab (Kafka's prettyPrintTable)
    widths = [len(cell) for cell in header.split("\t")[:-1]]
    assert all([len(cell) for cell in row.split("\t")[:-1]] == widths for row in rows)


def test_metadata_quorum_replication_human_readable(cluster):
    done = quorum(cluster, "--replication", "--human-readable")
    assert done.returncode == 0, done.stderr
    for row in done.stdout.splitlines()[1:]:
        fetched, caught_up = row.split("\t")[4:6]
        assert re.fullmatch(r"\d+ ms ago *", fetched) and re.fullmatch(r"\d+ ms ago *", caught_up)
        assert int(fetched.split()[0]) < 60_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe"], "One of --status or --replication must be specified"),
        (["describe", "--status", "--replication"], "Only one of --status or --replication"),
        (["describe", "--status", "--human-readable"], "--human-readable is only supported along with --replication"),
        ([], "a subcommand is required: describe"),
        (["add-controller"], "invalid choice: 'add-controller'"),
    ],
)  # fmt: skip
def test_metadata_quorum_usage_errors_exit_2_with_one_line(capsys, argv, message):
    status, _, err = usage_error(
        capsys, "metadata-quorum", "--bootstrap-server", "127.0.0.1:1", *argv
    )
    assert status == 2 and message in err and err.count("\n") == 1


def test_metadata_quorum_unreachable_and_help():
    down = kcore("metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "describe", "--status")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
    done = wrapper("kafka-metadata-quorum.sh", "--help")
    assert done.returncode == 0
    assert "This tool describes kraft metadata quorum status." in done.stdout
