"""``kcore consumer-groups`` end to end: real groups made by confluent-kafka consumers on a
running kcore, inspected and changed by the command as an operator would."""

import datetime
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from kcore import cli
from kcore.client import KafkaClient
from kcore.client.groups import describe_groups, offset_fetch, offset_fetch_partitions

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
RECORDS_PER_PARTITION = 10
BASE_TIMESTAMP_MS = 1_700_000_000_000  # record i of a partition is stamped BASE + i seconds


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _run(capsys, cluster, *argv: str) -> tuple[int, str, str]:
    """Run ``kcore consumer-groups`` in-process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = cli.main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _rows(out: str, first: str) -> list[list[str]]:
    """The table rows of ``out`` whose first column is ``first`` (the header excluded)."""
    return [line.split() for line in out.splitlines() if line.split()[:1] == [first]]


def _topic(cluster, partitions: int = 2) -> str:
    """A fresh topic with RECORDS_PER_PARTITION records in each partition, timestamped."""
    topic = _name("cg")
    cluster.create_topic(topic, partitions=partitions)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(partitions):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, value=b"v", partition=p, timestamp=BASE_TIMESTAMP_MS + i * 1000)
    assert producer.flush(30) == 0
    return topic


def _consumer(cluster, group: str, topic: str) -> Consumer:
    """A member of ``group`` subscribed to ``topic``, returned once it has its assignment."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "client.id": f"client-{group}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer got no assignment"
        consumer.poll(0.1)
    return consumer


def _commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
    )


def _committed(cluster, group: str) -> dict[tuple[str, int], int]:
    async def fetch():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            response = await offset_fetch(client, group)
            return {
                tp: p.committed_offset
                for tp, p in offset_fetch_partitions(response).items()
                if p.committed_offset >= 0
            }

    return trio.run(fetch)


def _state(cluster, group: str) -> str:
    async def describe():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return (await describe_groups(client, [group])).groups[0].group_state

    return trio.run(describe)


def _wait_for_state(cluster, group: str, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (current := _state(cluster, group)) != state:
        assert time.monotonic() < deadline, f"group {group} stayed {current}, not {state}"
        time.sleep(0.05)


def _idle_group(cluster, topic: str, offsets: dict[int, int]) -> str:
    """A group with ``offsets`` committed on ``topic`` and no members left (state Empty)."""
    group = _name("idle")
    consumer = _consumer(cluster, group, topic)
    _commit(consumer, topic, offsets)
    consumer.close()
    _wait_for_state(cluster, group, "Empty")
    return group


# -- list -----------------------------------------------------------------------------------------


def test_consumer_groups_list_shows_groups_and_filters_by_state(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _name("listed")
    consumer = _consumer(kcore_cluster, group, topic)
    try:
        status, out, _ = _run(capsys, kcore_cluster, "--list")
        assert status == 0
        assert group in out.split()

        status, out, _ = _run(capsys, kcore_cluster, "--list", "--state")
        assert status == 0
        assert out.splitlines()[0].split() == ["GROUP", "STATE"]
        assert _rows(out, group) == [[group, "Stable"]]

        status, out, _ = _run(capsys, kcore_cluster, "--list", "--state", "stable")
        assert _rows(out, group) == [[group, "Stable"]]
        status, out, _ = _run(capsys, kcore_cluster, "--list", "--state", "Empty")
        assert status == 0
        assert _rows(out, group) == []
    finally:
        consumer.close()


def test_consumer_groups_list_rejects_an_unknown_state(kcore_cluster, capsys):
    status, _, err = _run(capsys, kcore_cluster, "--list", "--state", "Sleeping")
    assert status == 1
    assert "invalid state" in err


# -- describe -------------------------------------------------------------------------------------


def test_consumer_groups_describe_shows_offsets_lag_and_owner(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _name("described")
    consumer = _consumer(kcore_cluster, group, topic)
    try:
        _commit(consumer, topic, {0: 4, 1: RECORDS_PER_PARTITION})
        status, out, _ = _run(capsys, kcore_cluster, "--describe", "--group", group)
        assert status == 0
        header = next(line.split() for line in out.splitlines() if line.strip())
        assert header == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        rows = _rows(out, group)
        member = consumer.memberid()
        assert [r[1:6] for r in rows] == [
            [topic, "0", "4", "10", "6"],
            [topic, "1", "10", "10", "0"],
        ]
        for row in rows:
            assert row[6] == member
            assert "127.0.0.1" in row[7]
            assert row[8] == f"client-{group}"

        status, out, _ = _run(capsys, kcore_cluster, "--describe", "--group", group, "--members")
        assert status == 0
        (row,) = _rows(out, group)
        assert row[1] == member and row[3] == f"client-{group}" and row[4] == "2"
        status, out, _ = _run(
            capsys, kcore_cluster, "--describe", "--group", group, "--members", "--verbose"
        )
        assert _rows(out, group)[0][5:] == [f"{topic}(0,1)"]

        status, out, _ = _run(capsys, kcore_cluster, "--describe", "--group", group, "--state")
        assert status == 0
        (row,) = _rows(out, group)
        assert row[-2:] == ["Stable", "1"]
        assert row[1] == kcore_cluster.bootstrap_servers  # the coordinator, then "(1)"
    finally:
        consumer.close()


def test_consumer_groups_describe_of_an_empty_group_shows_committed_offsets(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _idle_group(kcore_cluster, topic, {1: 3})
    status, out, err = _run(capsys, kcore_cluster, "--describe", "--group", group)
    assert status == 0
    assert f"Consumer group '{group}' has no active members." in err
    assert _rows(out, group) == [[group, topic, "1", "3", "10", "7", "-", "-", "-"]]


def test_consumer_groups_describe_of_an_unknown_group_fails(kcore_cluster, capsys):
    group = _name("nobody")
    status, _, err = _run(capsys, kcore_cluster, "--describe", "--group", group)
    assert status == 1
    assert f"Consumer group '{group}' does not exist." in err


# -- reset offsets --------------------------------------------------------------------------------


def test_consumer_groups_reset_is_refused_while_the_group_has_members(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _name("busy")
    consumer = _consumer(kcore_cluster, group, topic)
    try:
        _commit(consumer, topic, {0: 5})
        status, _, err = _run(
            capsys,
            kcore_cluster,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        )
        assert status == 1
        assert "can only be reset if the group" in err and "Stable" in err
        assert _committed(kcore_cluster, group) == {(topic, 0): 5}
    finally:
        consumer.close()


def _reset(capsys, cluster, group, *spec):
    status, out, err = _run(capsys, cluster, "--reset-offsets", "--group", group, *spec)
    assert status == 0, err
    return {(r[1], int(r[2])): int(r[3]) for r in _rows(out, group)}


def test_consumer_groups_reset_dry_run_prints_and_execute_commits(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _idle_group(kcore_cluster, topic, {0: 5, 1: 6})
    both = {(topic, 0), (topic, 1)}

    planned = _reset(capsys, kcore_cluster, group, "--topic", topic, "--to-earliest", "--dry-run")
    assert planned == dict.fromkeys(both, 0)
    assert _committed(kcore_cluster, group) == {(topic, 0): 5, (topic, 1): 6}, "dry run"

    done = _reset(capsys, kcore_cluster, group, "--topic", topic, "--to-earliest", "--execute")
    assert done == dict.fromkeys(both, 0)
    assert _committed(kcore_cluster, group) == dict.fromkeys(both, 0)

    _reset(capsys, kcore_cluster, group, "--all-topics", "--to-latest", "--execute")
    assert _committed(kcore_cluster, group) == dict.fromkeys(both, RECORDS_PER_PARTITION)


def test_consumer_groups_reset_to_offset_shift_and_datetime(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _idle_group(kcore_cluster, topic, {0: 5, 1: 6})

    _reset(capsys, kcore_cluster, group, "--topic", f"{topic}:1", "--to-offset", "3", "--execute")
    assert _committed(kcore_cluster, group) == {(topic, 0): 5, (topic, 1): 3}

    # Beyond the log end: moved to the log end, as Kafka does.
    status, _, err = _run(
        capsys,
        kcore_cluster,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0",
        "--to-offset",
        "100",
        "--execute",
    )
    assert status == 0 and "higher than latest offset" in err
    assert _committed(kcore_cluster, group)[(topic, 0)] == RECORDS_PER_PARTITION

    _reset(capsys, kcore_cluster, group, "--all-topics", "--shift-by", "-2", "--execute")
    assert _committed(kcore_cluster, group) == {(topic, 0): 8, (topic, 1): 1}

    # Record i is stamped BASE + i s: the first record at or after BASE + 4.5 s is record 5.
    moment = datetime.datetime.fromtimestamp((BASE_TIMESTAMP_MS + 4_500) / 1000)
    when = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    _reset(capsys, kcore_cluster, group, "--topic", topic, "--to-datetime", when, "--execute")
    assert _committed(kcore_cluster, group) == {(topic, 0): 5, (topic, 1): 5}


def test_consumer_groups_reset_without_execute_changes_nothing(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _idle_group(kcore_cluster, topic, {0: 5})
    status, out, err = _run(
        capsys, kcore_cluster, "--reset-offsets", "--group", group, "--all-topics", "--to-latest"
    )
    assert status == 0
    assert "--execute option is missing" in err
    assert _rows(out, group) == [[group, topic, "0", "10"]]
    assert _committed(kcore_cluster, group) == {(topic, 0): 5}


# -- delete ---------------------------------------------------------------------------------------


def test_consumer_groups_delete_is_refused_with_members_and_done_without(kcore_cluster, capsys):
    topic = _topic(kcore_cluster)
    group = _name("deleted")
    consumer = _consumer(kcore_cluster, group, topic)
    _commit(consumer, topic, {0: 1})
    try:
        status, _, err = _run(capsys, kcore_cluster, "--delete", "--group", group)
        assert status == 1
        assert f"Group '{group}' could not be deleted" in err and "active members" in err
        assert _committed(kcore_cluster, group) == {(topic, 0): 1}
    finally:
        consumer.close()
    _wait_for_state(kcore_cluster, group, "Empty")

    status, out, _ = _run(capsys, kcore_cluster, "--delete", "--group", group)
    assert status == 0
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert _committed(kcore_cluster, group) == {}
    _, out, _ = _run(capsys, kcore_cluster, "--list")
    assert group not in out.split()


def test_consumer_groups_delete_offsets_of_a_topic(kcore_cluster, capsys):
    topic, other = _topic(kcore_cluster), _topic(kcore_cluster, partitions=1)
    group = _name("offsets")
    consumer = _consumer(kcore_cluster, group, topic)
    try:
        _commit(consumer, topic, {0: 2, 1: 3})
        _commit(consumer, other, {0: 4})  # a topic the group does not subscribe to
        # Offsets of a subscribed topic stay while a member consumes it.
        status, out, err = _run(
            capsys, kcore_cluster, "--delete-offsets", "--group", group, "--topic", topic
        )
        assert status == 1
        assert "partition-level errors" in err
        assert all("GROUP_SUBSCRIBED_TO_TOPIC" in " ".join(r) for r in _rows(out, topic))

        status, out, _ = _run(
            capsys, kcore_cluster, "--delete-offsets", "--group", group, "--topic", other
        )
        assert status == 0
        assert _rows(out, other) == [[other, "0", "Successful"]]
        assert _committed(kcore_cluster, group) == {(topic, 0): 2, (topic, 1): 3}
    finally:
        consumer.close()
    _wait_for_state(kcore_cluster, group, "Empty")
    status, out, _ = _run(
        capsys, kcore_cluster, "--delete-offsets", "--group", group, "--topic", f"{topic}:1"
    )
    assert status == 0
    assert f"Request succeed for deleting offsets from group '{group}'." in out
    assert _committed(kcore_cluster, group) == {(topic, 0): 2}


# -- the Kafka-named script -----------------------------------------------------------------------


def test_kafka_consumer_groups_script_runs_the_command(kcore_cluster):
    topic = _topic(kcore_cluster)
    group = _idle_group(kcore_cluster, topic, {0: 1})
    result = subprocess.run(
        [
            str(ROOT / "tools" / "kafka-consumer-groups.sh"),
            "--bootstrap-server",
            kcore_cluster.bootstrap_servers,
            "--list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        # The wrapper runs $KCORE (default <repo>/.venv/bin/kcore, absent in a git worktree).
        env={**os.environ, "KCORE": str(Path(sys.executable).with_name("kcore"))},
    )
    assert result.returncode == 0, result.stderr
    assert group in result.stdout.split()
