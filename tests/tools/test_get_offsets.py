"""``kcore get-offsets`` (``kafka-get-offsets.sh``) as a process against a running kcore, on
records written by confluent-kafka with known timestamps: ``topic:partition:offset`` lines in
Kafka's order, for every kind of ``--time``."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kcore.commands.get_offsets import HELP

from .tool import kcore, one_line, usage_error, wrapper

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 12
BASE_MS = 1_700_000_000_000  # record i is stamped BASE_MS + i seconds, in partition i % 3


@pytest.fixture(scope="module")
def cluster():
    from kcore.testing import EmbeddedCluster

    with EmbeddedCluster() as c:
        yield c


@pytest.fixture(scope="module")
def topic(cluster):
    """12 partitions; 10 records in each of 0, 1 and 2; the others empty."""
    name = f"go-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(30):
        producer.produce(name, b"v", partition=i % 3, timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0
    return name


def get_offsets(cluster, *argv: str):
    return kcore("get-offsets", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def test_get_offsets_latest_by_default_in_kafkas_order(cluster, topic):
    done = get_offsets(cluster, "--topic", topic)
    assert (done.returncode, done.stderr) == (0, "")
    # Kafka sorts by the text "topic-partition": 10 and 11 come before 2.
    expected = {0: 10, 1: 10, 2: 10}
    order = sorted(range(PARTITIONS), key=lambda p: f"{topic}-{p}")
    assert done.stdout.splitlines() == [f"{topic}:{p}:{expected.get(p, 0)}" for p in order]


@pytest.mark.parametrize(
    ("time", "expected"),
    [
        ("earliest", "0"),
        ("-2", "0"),
        ("latest", "10"),
        ("-1", "10"),
        ("max-timestamp", "9"),  # the record stamped last: record 28, offset 9 of partition 1
        ("-3", "9"),
        (str(BASE_MS + 20_000), "7"),  # partition 1 holds records 1, 4, ... 28: 22 is offset 7
        (str(BASE_MS + 28_000), "9"),
    ],
)
def test_get_offsets_time_kinds(cluster, topic, time, expected):
    done = get_offsets(cluster, "--topic", topic, "--partitions", "1", "--time", time)
    assert (done.returncode, done.stdout) == (0, f"{topic}:1:{expected}\n")


def test_get_offsets_after_the_last_timestamp_prints_nothing(cluster, topic):
    done = get_offsets(cluster, "--topic", topic, "--partitions", "1", "--time", str(BASE_MS * 2))
    assert (done.returncode, done.stdout) == (0, "")


def test_get_offsets_topic_partition_patterns(cluster, topic):
    done = get_offsets(cluster, "--topic-partitions", f"{topic}:0-2,{topic}:11,{topic[:5]}.*:9-")
    assert done.stdout.splitlines() == [
        f"{topic}:0:10", f"{topic}:1:10", f"{topic}:10:0", f"{topic}:11:0", f"{topic}:9:0",
    ]  # fmt: skip
    upper = get_offsets(cluster, "--topic-partitions", f"{topic}:-2")
    assert upper.stdout.splitlines() == [f"{topic}:0:10", f"{topic}:1:10"]


def test_get_offsets_internal_topics_unless_excluded(cluster, topic):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "go-group"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    consumer.close()
    every = get_offsets(cluster, "--partitions", "0").stdout.splitlines()
    assert "__consumer_offsets:0:" in "\n".join(every)
    excluded = get_offsets(cluster, "--partitions", "0", "--exclude-internal-topics")
    assert all(not line.startswith("__") for line in excluded.stdout.splitlines())
    assert f"{topic}:0:10" in excluded.stdout.splitlines()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topic", "no-such-topic-.*"], "Error occurred: Could not match any topic-partitions with the specified filters"),
        (["--time", "yesterday"], "Error occurred: Malformed time argument yesterday."),
        (["--partitions", "a,b"], "--partitions expects a comma separated list of numeric partition ids, but received: a,b"),
        (["--topic-partitions", "x:1", "--topic", "x"], "--topic-partitions cannot be used with --topic or --partitions"),
        (["--topic-partitions", "x:1:2"], "Invalid rule specification: x:1:2"),
        (["--topic", "orders-(.*"], "is not a valid regular expression"),
    ],
)  # fmt: skip
def test_get_offsets_errors_exit_1_with_one_line(cluster, argv, message):
    assert message in one_line(get_offsets(cluster, *argv))


def test_get_offsets_usage_unreachable_and_help(capsys):
    status, _, err = usage_error(capsys, "get-offsets", "--topic", "t")
    assert status == 2 and 'Missing required argument "[bootstrap-server]"' in err
    down = kcore("get-offsets", "--bootstrap-server", "127.0.0.1:1", "--topic", "t")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
    done = wrapper("kafka-get-offsets.sh", "--help")
    assert (done.returncode, done.stdout) == (0, HELP)
    assert "--time <String: <timestamp> / -1 or      timestamp of the offsets before that." in HELP
