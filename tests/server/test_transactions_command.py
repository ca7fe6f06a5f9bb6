"""``kcore transactions`` end to end: transactions of a confluent-kafka transactional producer on
a running kcore, inspected by the command as an operator would; and a hanging transaction found
by ``find-hanging`` and ended by ``abort``, after which read_committed consumers move on.

A hanging transaction is one a partition holds open while its coordinator does not know the
partition is in it (Kafka's definition, KIP-664): the coordinator will never send it a marker.
An open transaction the coordinator does track is not hanging — the coordinator ends it on
commit, abort or timeout — so ``find-hanging`` leaves it out even with a zero timeout. The tests
make a real hanging transaction the way the bugs behind KIP-664 did: transactional records
written to a partition that was never added to the transaction (a raw Produce with the
producer's own id and epoch, which kcore, like Kafka, appends only with KIP-890's
``transaction.partition.verification.enable=false``).
"""

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
from kcore.client.admin import LATEST_TIMESTAMP, list_offsets, produce
from kcore.record import RecordBatchBuilder

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
READ_COMMITTED = 1


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _run(capsys, cluster, *argv: str) -> tuple[int, str, str]:
    """Run ``kcore transactions`` in-process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = cli.main(["transactions", "--bootstrap-server", cluster.bootstrap_servers, *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _table(out: str) -> list[dict[str, str]]:
    """The rows of the command's table as dicts by header (cells are tab-separated)."""
    lines = [line for line in out.splitlines() if line.strip()]
    headers = lines[0].split()
    return [
        {h: c.strip() for h, c in zip(headers, line.split("\t"), strict=False)}
        for line in lines[1:]
    ]


def _producer(cluster, tid: str, **config) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": tid,
            "transaction.timeout.ms": 60_000,
            **config,
        }
    )
    producer.init_transactions(30)
    return producer


def _open_transaction(cluster, topic: str, tid: str, partitions=(0,)) -> Producer:
    """A producer with an open transaction: records on ``partitions``, flushed, not ended."""
    producer = _producer(cluster, tid)
    producer.begin_transaction()
    for p in partitions:
        for i in range(3):
            producer.produce(topic, value=f"open-{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    return producer


def _lso(cluster, topic: str, partition: int) -> int:
    async def ask():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            answer = await list_offsets(
                client, {(topic, partition): LATEST_TIMESTAMP}, isolation_level=READ_COMMITTED
            )
            return answer[(topic, partition)].offset

    return trio.run(ask)


def _stray_write(cluster, topic: str, partition: int, tid: str, pid: int, epoch: int) -> None:
    """Transactional records of ``pid`` on a partition its coordinator never heard of."""
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
    )
    now = int(time.time() * 1000) - 1000  # a second old: past a zero max timeout
    builder.append(now, None, b"stray-0")
    builder.append(now, None, b"stray-1")

    async def send():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            response = await produce(
                client, {(topic, partition): builder.build()}, transactional_id=tid
            )
            (t,) = response.responses
            (p,) = t.partition_responses
            assert p.error_code == 0, p

    trio.run(send)


def _committed_values(cluster, topic: str, partitions) -> list[bytes]:
    """What a read_committed consumer reads of ``partitions`` up to their LSO."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": _name("rc"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    ends = {p: _lso(cluster, topic, p) for p in partitions}
    assigned = [TopicPartition(topic, p, 0) for p in partitions]
    consumer.assign(assigned)
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        # Aborted records and markers are never delivered, but the position moves past them.
        while True:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
            positions = {tp.partition: tp.offset for tp in consumer.position(assigned)}
            if all(positions[p] >= ends[p] for p in partitions):
                break
            assert time.monotonic() < deadline, f"read up to {positions}, LSOs {ends}"
    finally:
        consumer.close()
    return values


# -- list / describe / describe-producers --------------------------------------------------------


def test_transactions_list_describe_and_producers_of_an_ongoing_transaction(kcore_cluster, capsys):
    topic, tid = _name("txn"), _name("tid")
    kcore_cluster.create_topic(topic, partitions=2)
    producer = _open_transaction(kcore_cluster, topic, tid, partitions=(0, 1))
    try:
        status, out, err = _run(capsys, kcore_cluster, "list")
        assert status == 0, err
        assert out.split("\n")[0].split() == [
            "TransactionalId",
            "Coordinator",
            "ProducerId",
            "TransactionState",
        ]
        (row,) = [r for r in _table(out) if r["TransactionalId"] == tid]
        assert row["TransactionState"] == "Ongoing"
        assert row["Coordinator"] == "1"
        pid = row["ProducerId"]

        status, out, err = _run(capsys, kcore_cluster, "list", "--state", "ongoing")
        assert status == 0, err
        assert tid in [r["TransactionalId"] for r in _table(out)]
        _, out, _ = _run(capsys, kcore_cluster, "list", "--state", "CompleteCommit")
        assert tid not in [r["TransactionalId"] for r in _table(out)]

        status, out, err = _run(capsys, kcore_cluster, "describe", "--transactional-id", tid)
        assert status == 0, err
        (row,) = _table(out)
        assert row["CoordinatorId"] == "1"
        assert row["TransactionalId"] == tid
        assert row["ProducerId"] == pid
        assert row["TransactionState"] == "Ongoing"
        assert row["TransactionTimeoutMs"] == "60000"
        assert int(row["CurrentTransactionStartTimeMs"]) > 0
        assert int(row["TransactionDurationMs"]) >= 0
        assert sorted(row["TopicPartitions"].split(",")) == [f"{topic}-0", f"{topic}-1"]
        epoch = row["ProducerEpoch"]

        status, out, err = _run(
            capsys, kcore_cluster, "describe-producers", "--topic", topic, "--partition", "1"
        )
        assert status == 0, err
        assert out.split("\n")[0].split() == [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ]
        (row,) = _table(out)
        assert (row["ProducerId"], row["ProducerEpoch"]) == (pid, epoch)
        assert row["LastSequence"] == "2"  # three records, sequences 0-2
        assert row["CurrentTransactionStartOffset"] == "0"

        producer.commit_transaction(30)
        # EndTxn is answered once PrepareCommit is durable; the markers (and CompleteCommit)
        # follow a moment later, as in Kafka.
        deadline = time.monotonic() + 10
        while True:
            status, out, _ = _run(capsys, kcore_cluster, "describe", "--transactional-id", tid)
            (row,) = _table(out)
            if row["TransactionState"] == "CompleteCommit" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert row["TransactionState"] == "CompleteCommit"
        assert row["TopicPartitions"] == ""  # markers written: no partition left
        _, out, _ = _run(
            capsys, kcore_cluster, "describe-producers", "--topic", topic, "--partition", "1"
        )
        (row,) = _table(out)
        assert row["CurrentTransactionStartOffset"] == "None"
    finally:
        producer.flush(5)


def test_transactions_describe_of_an_unknown_transactional_id_fails(kcore_cluster, capsys):
    tid = _name("nobody")
    status, out, err = _run(capsys, kcore_cluster, "describe", "--transactional-id", tid)
    assert status == 1
    assert f"Failed to describe transaction state of transactional-id `{tid}`" in err
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err


def test_transactions_describe_producers_of_an_unknown_partition_fails(kcore_cluster, capsys):
    status, _, err = _run(
        capsys, kcore_cluster, "describe-producers", "--topic", _name("none"), "--partition", "0"
    )
    assert status == 1
    assert "Failed to describe producers for partition" in err


# -- find-hanging / abort ------------------------------------------------------------------------


def test_transactions_find_hanging_and_abort_free_the_last_stable_offset(
    kcore_cluster_factory, capsys
):
    # With partition verification on (the default), the stray writes below would be refused.
    kcore_cluster = kcore_cluster_factory(
        config={"transaction.partition.verification.enable": "false"}
    )
    topic, tid = _name("hang"), _name("tid")
    kcore_cluster.create_topic(topic, partitions=3)
    # The producer opens a transaction on partition 0 and never ends it (it stays alive).
    producer = _open_transaction(kcore_cluster, topic, tid, partitions=(0,))
    _, out, _ = _run(
        capsys, kcore_cluster, "describe-producers", "--topic", topic, "--partition", "0"
    )
    (state,) = _table(out)
    pid, epoch = int(state["ProducerId"]), int(state["ProducerEpoch"])
    # Records of the same producer land on partitions 1 and 2 outside the transaction.
    _stray_write(kcore_cluster, topic, 1, tid, pid, epoch)
    _stray_write(kcore_cluster, topic, 2, tid, pid, epoch)
    assert [_lso(kcore_cluster, topic, p) for p in range(3)] == [0, 0, 0]

    # The default bound (15 minutes) is far away: nothing is old enough to be a candidate.
    status, out, err = _run(capsys, kcore_cluster, "find-hanging", "--broker-id", "1")
    assert status == 0, err
    assert [r for r in _table(out) if r["Topic"] == topic] == []

    status, out, err = _run(
        capsys, kcore_cluster, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0"
    )
    assert status == 0, err
    assert out.split("\n")[0].split() == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    rows = [r for r in _table(out) if r["Topic"] == topic]
    # Partition 0's transaction is tracked by the coordinator: not hanging.
    assert sorted(r["Partition"] for r in rows) == ["1", "2"]
    for r in rows:
        assert (r["ProducerId"], r["ProducerEpoch"]) == (str(pid), str(epoch))
        assert r["StartOffset"] == "0"
        assert r["Duration(min)"] == "0"
    same = _run(
        capsys, kcore_cluster, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
    )
    assert sorted(r["Partition"] for r in _table(same[1])) == ["1", "2"]

    # Abort by start offset (the producer is looked up with DescribeProducers) ...
    status, out, err = _run(
        capsys, kcore_cluster, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0"
    )
    assert status == 0, err
    assert _lso(kcore_cluster, topic, 1) == 3  # two records and the ABORT marker
    # ... and by producer id, epoch and coordinator epoch (as for brokers before 3.0).
    coordinator_epoch = next(r for r in rows if r["Partition"] == "2")["CoordinatorEpoch"]
    status, out, err = _run(
        capsys,
        kcore_cluster,
        "abort",
        "--topic",
        topic,
        "--partition",
        "2",
        "--producer-id",
        str(pid),
        "--producer-epoch",
        str(epoch),
        "--coordinator-epoch",
        coordinator_epoch,
    )
    assert status == 0, err
    assert _lso(kcore_cluster, topic, 2) == 3
    assert _committed_values(kcore_cluster, topic, [1, 2]) == []

    status, out, _ = _run(
        capsys, kcore_cluster, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
    )
    assert status == 0
    assert _table(out) == []
    status, _, err = _run(
        capsys, kcore_cluster, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0"
    )
    assert status == 1
    assert "Could not find any open transactions starting at offset 0" in err

    # The producer's own transaction still commits, and only its records are read.
    assert _lso(kcore_cluster, topic, 0) == 0
    producer.commit_transaction(30)
    assert _lso(kcore_cluster, topic, 0) == 4
    assert sorted(_committed_values(kcore_cluster, topic, [0, 1, 2])) == [
        b"open-0-0",
        b"open-0-1",
        b"open-0-2",
    ]


def test_transactions_abort_and_find_hanging_check_their_options(kcore_cluster, capsys):
    status, _, err = _run(capsys, kcore_cluster, "abort", "--topic", "t", "--partition", "0")
    assert status == 2 and "--start-offset" in err
    status, _, err = _run(
        capsys, kcore_cluster, "abort", "--topic", "t", "--partition", "0", "--producer-id", "1"
    )
    assert status == 2 and "--producer-epoch" in err
    status, _, err = _run(capsys, kcore_cluster, "find-hanging")
    assert status == 2 and "--broker-id" in err
    status, _, err = _run(
        capsys, kcore_cluster, "find-hanging", "--partition", "0", "--broker-id", "1"
    )
    assert status == 2 and "--partition argument requires --topic" in err


def test_kafka_transactions_script_runs_the_command(kcore_cluster):
    result = subprocess.run(
        [
            str(ROOT / "tools" / "kafka-transactions.sh"),
            "--bootstrap-server",
            kcore_cluster.bootstrap_servers,
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        # The wrapper runs $KCORE (default <repo>/.venv/bin/kcore, absent in a git worktree).
        env={**os.environ, "KCORE": str(Path(sys.executable).with_name("kcore"))},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:4] == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
