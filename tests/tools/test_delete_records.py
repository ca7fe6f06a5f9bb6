"""``kcore delete-records`` (``kafka-delete-records.sh``) as a process against a running kcore:
Kafka's JSON file and output lines, and the records below the offset gone for a confluent-kafka
consumer (its low watermark moves up)."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kcore.commands.delete_records import HELP
from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, wrapper

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _topic(cluster, partitions: int = 2, records: int = 10) -> str:
    name = f"dr-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=partitions)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(partitions):
        for i in range(records):
            producer.produce(name, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    return name


def _file(tmp_path, doc) -> str:
    path = tmp_path / f"offsets-{uuid.uuid4().hex[:6]}.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def delete_records(cluster, path: str):
    return kcore("delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                 "--offset-json-file", path)  # fmt: skip


def _consume_all(cluster, topic: str, partition: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "dr",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    values = []
    while True:
        message = consumer.poll(10)
        assert message is not None, "no end of partition"
        if message.error():
            break  # _PARTITION_EOF
        values.append(message.value())
    consumer.close()
    return values


def test_delete_records_moves_the_low_watermark_for_consumers(cluster, tmp_path):
    topic = _topic(cluster)
    path = _file(tmp_path, {"partitions": [{"topic": topic, "partition": 0, "offset": 4},
                                           {"topic": topic, "partition": 1, "offset": -1}],
                            "version": 1})  # fmt: skip
    done = delete_records(cluster, path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 4",
        f"partition: {topic}-1\tlow_watermark: 10",  # -1: up to the high watermark
    ]
    assert _consume_all(cluster, topic, 0) == [f"0-{i}".encode() for i in range(4, 10)]
    assert _consume_all(cluster, topic, 1) == []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "dr-w"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
    consumer.close()
    earliest = kcore("get-offsets", "--bootstrap-server", cluster.bootstrap_servers,
                     "--topic", topic, "--time", "earliest")  # fmt: skip
    assert earliest.stdout.splitlines() == [f"{topic}:0:4", f"{topic}:1:10"]


def test_delete_records_refused_partitions_get_an_error_line(cluster, tmp_path):
    topic = _topic(cluster)
    path = _file(tmp_path, {"partitions": [{"topic": topic, "partition": 0, "offset": 99},
                                           {"topic": topic, "partition": 1, "offset": 2},
                                           {"topic": "no-such-topic", "partition": 0, "offset": 1}]})  # fmt: skip
    done = delete_records(cluster, path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\terror: OFFSET_OUT_OF_RANGE: The requested offset is outside the "
        "range of offsets the server holds.",
        f"partition: {topic}-1\tlow_watermark: 2",
        "partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION: This server does not "
        "host this topic-partition.",
    ]
    assert _consume_all(cluster, topic, 0) == [f"0-{i}".encode() for i in range(10)]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{not json", "The input string is not a valid JSON"),
        ({"version": 2, "partitions": []}, "Not supported version field value 2"),
        ({"version": 1}, "Missing partitions field"),
        ({"partitions": [{"topic": "t", "partition": 0}]}, "Missing field offset"),
        ({"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}, "Field partition must be a number"),
        ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]},
         "Offset json file contains duplicate topic partitions: t-0"),
    ],
)  # fmt: skip
def test_delete_records_bad_files_exit_1_with_one_line_and_delete_nothing(
    cluster, tmp_path, doc, message
):
    topic = _topic(cluster, partitions=1, records=3)
    done = delete_records(cluster, _file(tmp_path, doc))
    assert message in one_line(done) and done.stdout == ""
    assert len(_consume_all(cluster, topic, 0)) == 3


def test_delete_records_usage_missing_file_and_help(cluster, tmp_path):
    missing = kcore("delete-records", "--bootstrap-server", cluster.bootstrap_servers)
    assert missing.returncode == 2
    assert 'Missing required argument "[offset-json-file]"' in one_line(missing)
    absent = delete_records(cluster, str(tmp_path / "absent.json"))
    assert "Cannot read" in one_line(absent)
    done = wrapper("kafka-delete-records.sh", "--help")
    assert (done.returncode, done.stdout) == (0, HELP)
    # A line of the description's own starts at the column, not indented (as joptsimple).
    assert " " * 39 + '{"partitions":' in [line.rstrip() for line in HELP.splitlines()]
