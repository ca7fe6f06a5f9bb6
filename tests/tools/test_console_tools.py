"""``kcore console-producer`` and ``kcore console-consumer`` as processes against a running kcore,
checked against confluent-kafka producers and consumers on the same topics."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer

from kcore.client import KafkaClient
from kcore.client.admin import fetch
from kcore.client.groups import offset_fetch, offset_fetch_partitions
from kcore.client.partitioner import partition_for_key
from kcore.record import CompressionType, iter_batches
from kcore.testing import free_port

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
KCORE = [sys.executable, "-m", "kcore.cli"]
ALL = ["print.timestamp", "print.partition", "print.offset", "print.headers", "print.key"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _tool(cluster, tool: str, *argv: str, stdin: bytes = b"", bootstrap: str | None = None):
    return subprocess.run(
        [*KCORE, tool, "--bootstrap-server", bootstrap or cluster.bootstrap_servers, *argv],
        input=stdin,
        capture_output=True,
        timeout=90,
        env=ENV,
    )


def _props(*names: str) -> list[str]:
    return [arg for n in names for arg in ("--property", f"{n}=true")]


def _read_all(cluster, topic: str, count: int, **extra) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": _name("check"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    return got


def _committed(cluster, group: str) -> dict:
    async def run():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            response = await offset_fetch(client, group)
            return {
                tp: p.committed_offset
                for tp, p in offset_fetch_partitions(response).items()
                if p.committed_offset >= 0
            }

    return trio.run(run)


# -- producer -----------------------------------------------------------------------------------


def test_console_producer_round_trips_headers_keys_and_values_to_confluent(kcore_cluster):
    topic = _name("cp")
    kcore_cluster.create_topic(topic, partitions=3)
    lines = [
        "h1:v1,h2:\tk1\tfirst value",
        "NONE\tk2\tsecond\tvalue",
        "h:x\tNONE\tthird",
        "h:y\tk4\tNONE",
    ]
    before = int(time.time() * 1000)
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "null.marker=NONE",
        "--producer-property",
        "acks=all",
        stdin=("\n".join(lines) + "\n").encode(),
    )
    after = int(time.time() * 1000)
    assert (r.returncode, r.stderr) == (0, b"")
    got = sorted(
        _read_all(kcore_cluster, topic, 4), key=lambda m: (m.key() or b"", m.value() or b"")
    )
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (None, b"third", [("h", b"x")]),
        (b"k1", b"first value", [("h1", b"v1"), ("h2", b"")]),
        (b"k2", b"second\tvalue", None),
        (b"k4", None, [("h", b"y")]),
    ]
    for m in got:
        assert before <= m.timestamp()[1] <= after
        if m.key() is not None:  # Kafka's partitioner: murmur2 of the key
            assert m.partition() == partition_for_key(m.key(), 3)


def test_console_producer_keys_land_where_a_murmur2_client_puts_them(kcore_cluster):
    topic = _name("cp-part")
    kcore_cluster.create_topic(topic, partitions=5)
    keys = [f"key-{i}".encode() for i in range(20)]
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        stdin=b"".join(k + b"\tv\n" for k in keys),
    )
    assert r.returncode == 0, r.stderr
    theirs = Producer(
        {"bootstrap.servers": kcore_cluster.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    delivered = {}
    for k in keys:
        theirs.produce(
            topic,
            value=b"c",
            key=k,
            on_delivery=lambda e, m: delivered.setdefault(m.key(), m.partition()),
        )
    assert theirs.flush(30) == 0
    ours = {
        m.key(): m.partition() for m in _read_all(kcore_cluster, topic, 40) if m.value() == b"v"
    }
    assert ours == delivered


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_console_producer_compresses_with_the_codec(kcore_cluster, codec):
    topic = _name(f"cp-{codec}")
    kcore_cluster.create_topic(topic, partitions=1)
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        "--compression-codec",
        codec,
        stdin=b"".join(b"line %d\n" % i for i in range(50)),
    )
    assert r.returncode == 0, r.stderr

    async def batches():
        async with KafkaClient(kcore_cluster.bootstrap_servers) as client:
            await client.refresh_metadata([topic])
            response = await fetch(client, {(topic, 0): 0})
            return list(iter_batches(response.responses[0].partitions[0].records))

    found = trio.run(batches)
    assert {b.compression_type for b in found} == {CompressionType[codec.upper()]}
    assert [m.value() for m in _read_all(kcore_cluster, topic, 50)] == [
        b"line %d" % i for i in range(50)
    ]


def test_console_producer_bad_line_stops_after_sending_the_lines_before(kcore_cluster):
    topic = _name("cp-bad")
    kcore_cluster.create_topic(topic, partitions=1)
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        stdin=b"k\tgood\nno separator\nk\tlost\n",
    )
    assert r.returncode == 1
    assert r.stderr.decode().splitlines() == [
        "Error: No key separator found on line number 2: 'no separator'"
    ]
    assert [m.value() for m in _read_all(kcore_cluster, topic, 1)] == [b"good"]


def test_console_producer_refuses_idempotence_and_unknown_settings(kcore_cluster):
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        "x",
        "--producer-property",
        "enable.idempotence=true",
    )
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert b"enable.idempotence=true is not supported" in r.stderr
    r = _tool(kcore_cluster, "console-producer", "--topic", "x", "--property", "parse.kye=true")
    assert r.returncode == 1 and b"Unknown property 'parse.kye'" in r.stderr


# -- consumer -----------------------------------------------------------------------------------


def test_console_consumer_prints_confluent_records_as_kafka(kcore_cluster):
    topic = _name("cc")
    kcore_cluster.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": kcore_cluster.bootstrap_servers, "linger.ms": 50})
    sent = [
        (0, b"k0", b"v0", [("a", b"1"), ("b", b"2")], 1_700_000_000_000),
        (0, None, b"no key", None, 1_700_000_000_001),
        (1, b"k2", None, [("n", None)], 1_700_000_000_002),
        (0, b"k3", "héllo".encode(), None, 1_700_000_000_003),
    ]
    for p, k, v, h, ts in sent:
        producer.produce(topic, value=v, key=k, headers=h, partition=p, timestamp=ts)
    assert producer.flush(30) == 0
    r = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "4",
        *_props(*ALL),
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.decode().splitlines()) == sorted(
        [
            "CreateTime:1700000000000\tPartition:0\tOffset:0\ta:1,b:2\tk0\tv0",
            "CreateTime:1700000000001\tPartition:0\tOffset:1\tNO_HEADERS\tnull\tno key",
            "CreateTime:1700000000002\tPartition:1\tOffset:0\tn:null\tk2\tnull",
            "CreateTime:1700000000003\tPartition:0\tOffset:2\tNO_HEADERS\tk3\théllo",
        ]
    )
    assert r.stderr.decode().splitlines()[-1] == "Processed a total of 4 messages"


def test_console_consumer_partition_and_offset_read_one_partition(kcore_cluster):
    topic = _name("cc-assign")
    kcore_cluster.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": kcore_cluster.bootstrap_servers})
    for i in range(6):
        producer.produce(topic, value=b"p%d-%d" % (i % 2, i), partition=i % 2)
    assert producer.flush(30) == 0
    r = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--partition",
        "1",
        "--offset",
        "1",
        "--timeout-ms",
        "1500",
    )
    assert r.returncode == 0
    assert r.stdout.splitlines() == [b"p1-3", b"p1-5"]
    assert "Processed a total of 2 messages" in r.stderr.decode()


def test_console_consumer_group_commits_what_it_printed(kcore_cluster):
    topic = _name("cc-group")
    group = _name("console")
    kcore_cluster.create_topic(topic, partitions=1)
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        stdin=b"".join(b"m%d\n" % i for i in range(5)),
    )
    assert r.returncode == 0
    r = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "3",
    )
    assert (r.returncode, r.stdout.splitlines()) == (0, [b"m0", b"m1", b"m2"])
    assert _committed(kcore_cluster, group) == {(topic, 0): 3}
    described = _tool(kcore_cluster, "consumer-groups", "--describe", "--group", group)
    rows = [
        line.split() for line in described.stdout.decode().splitlines() if line.startswith(group)
    ]
    assert rows == [[group, topic, "0", "3", "5", "2", "-", "-", "-"]]
    # The next run of the group starts at the committed offset.
    r = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--group",
        group,
        "--timeout-ms",
        "2000",
    )
    assert r.stdout.splitlines() == [b"m3", b"m4"]
    assert _committed(kcore_cluster, group) == {(topic, 0): 5}


def test_console_consumer_sigint_commits_and_leaves(kcore_cluster):
    topic = _name("cc-int")
    group = _name("console-int")
    kcore_cluster.create_topic(topic, partitions=2)
    r = _tool(
        kcore_cluster,
        "console-producer",
        "--topic",
        topic,
        stdin=b"".join(b"r%d\n" % i for i in range(8)),
    )
    assert r.returncode == 0
    proc = subprocess.Popen(
        [
            *KCORE,
            "console-consumer",
            "--bootstrap-server",
            kcore_cluster.bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    lines = [proc.stdout.readline() for _ in range(8)]
    assert sorted(lines) == sorted(b"r%d\n" % i for i in range(8))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode().splitlines()[-1] == "Processed a total of 8 messages"
    assert sum(_committed(kcore_cluster, group).values()) == 8
    described = _tool(kcore_cluster, "consumer-groups", "--describe", "--group", group, "--state")
    assert "Empty" in described.stdout.decode()


def test_console_consumer_isolation_levels_against_an_aborted_transaction(kcore_cluster):
    topic = _name("cc-txn")
    kcore_cluster.create_topic(topic, partitions=1)
    producer = Producer(
        {"bootstrap.servers": kcore_cluster.bootstrap_servers, "transactional.id": _name("tid")}
    )
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    committed = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--timeout-ms",
        "2000",
    )
    assert committed.stdout.splitlines() == [b"c1", b"c2", b"c3"]
    everything = _tool(
        kcore_cluster,
        "console-consumer",
        "--topic",
        topic,
        "--from-beginning",
        "--isolation-level",
        "read_uncommitted",
        "--timeout-ms",
        "2000",
    )
    assert everything.stdout.splitlines() == [b"c1", b"c2", b"a1", b"a2", b"c3"]
    bad = _tool(kcore_cluster, "console-consumer", "--topic", topic, "--isolation-level", "dirty")
    assert (
        bad.returncode == 1
        and b"Invalid value dirty for configuration isolation.level" in bad.stderr
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--topic", "no-such-topic-here"], 1, "topic 'no-such-topic-here' does not exist"),
        (
            ["--topic", "t", "--offset", "3"],
            2,
            "The partition is required when offset is specified.",
        ),
        (
            ["--topic", "t", "--partition", "0", "--group", "g"],
            2,
            "Options group and partition cannot be specified together.",
        ),
        (["--topic", "t", "--no-such-flag"], 2, "unrecognized arguments: --no-such-flag"),
        (
            ["--topic", "t", "--formatter", "com.example.Nope"],
            1,
            "Unknown formatter class com.example.Nope",
        ),
        (["--topic", "t", "--property", "print.kye=true"], 1, "Unknown property 'print.kye'"),
        (
            ["--topic", "t", "--consumer-property", "group.protocol=consumer"],
            1,
            "group.protocol=consumer is not supported",
        ),
    ],
)
def test_console_consumer_bad_input_is_one_line(kcore_cluster, argv, status, message):
    r = _tool(kcore_cluster, "console-consumer", "--timeout-ms", "1000", *argv)
    assert r.returncode == status
    lines = [
        line for line in r.stderr.decode().splitlines() if not line.startswith("Processed a total")
    ]
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_console_tools_report_an_unreachable_broker(kcore_cluster):
    dead = f"127.0.0.1:{free_port()}"
    r = _tool(kcore_cluster, "console-consumer", "--topic", "t", bootstrap=dead)
    assert r.returncode == 1 and b"no broker reachable" in r.stderr
    r = _tool(kcore_cluster, "console-producer", "--topic", "t", bootstrap=dead, stdin=b"x\n")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1


def test_kafka_named_wrappers_run_the_tools(kcore_cluster):
    topic = _name("sh")
    kcore_cluster.create_topic(topic, partitions=1)
    env = {**ENV, "KCORE": str(Path(sys.executable).with_name("kcore"))}
    subprocess.run(
        [
            ROOT / "tools/kafka-console-producer.sh",
            "--bootstrap-server",
            kcore_cluster.bootstrap_servers,
            "--topic",
            topic,
        ],
        input=b"via sh\n",
        check=True,
        env=env,
        timeout=60,
    )
    out = subprocess.run(
        [
            ROOT / "tools/kafka-console-consumer.sh",
            "--bootstrap-server",
            kcore_cluster.bootstrap_servers,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "1",
        ],
        capture_output=True,
        check=True,
        env=env,
        timeout=60,
    )
    assert out.stdout == b"via sh\n"
