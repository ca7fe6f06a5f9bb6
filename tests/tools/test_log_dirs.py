"""``kcore log-dirs`` (``kafka-log-dirs.sh --describe``) as a process against a running
three-broker kcore: Kafka's two lines and JSON line, each partition where its broker keeps it,
with the size of its segment files on disk."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer

from kcore.commands.log_dirs import HELP
from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, wrapper

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(brokers=3) as c:
        yield c


@pytest.fixture(scope="module")
def topic(cluster):
    name = f"ld-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(3):
        for _ in range(5 * (p + 1)):
            producer.produce(name, b"x" * 100, partition=p)
    assert producer.flush(30) == 0
    return name


def _dir(cluster, broker: int):
    return cluster.data_dir / ("logs" if broker == 1 else f"logs-{broker}")


def _size(cluster, broker: int, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (_dir(cluster, broker) / f"{topic}-{partition}").glob("*.log"))  # fmt: skip


def log_dirs(cluster, *argv: str):
    return kcore("log-dirs", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def test_log_dirs_describe_prints_kafkas_lines_and_json(cluster, topic):
    done = log_dirs(cluster, "--describe", "--topic-list", topic)
    assert (done.returncode, done.stderr) == (0, "")
    first, second, line = done.stdout.splitlines()
    assert first == "Querying brokers for log directories information"
    assert second == "Received log directory information from brokers 1,2,3"
    doc = json.loads(line)
    leaders = {p: cluster.broker.metadata_image.topics.by_name[topic].partitions[p].leader for p in range(3)}  # fmt: skip
    expected = {
        "brokers": [
            {
                "broker": b,
                "logDirs": [
                    {
                        "partitions": [
                            {"partition": f"{topic}-{p}", "size": _size(cluster, b, topic, p),
                             "offsetLag": 0, "isFuture": False}
                            for p in range(3)
                            if leaders[p] == b
                        ],
                        "error": None,
                        "logDir": str(_dir(cluster, b).absolute()),
                    }
                ],
            }
            for b in (1, 2, 3)
        ],
        "version": 1,
    }  # fmt: skip
    assert doc == expected
    # Kafka's key order and compact separators, byte for byte.
    assert line == json.dumps(expected, separators=(",", ":"))
    sizes = [p["size"] for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]]
    assert sorted(sizes) == sorted(_size(cluster, leaders[p], topic, p) for p in range(3))
    assert all(size > 500 for size in sizes)


def test_log_dirs_broker_list_limits_the_brokers_asked(cluster, topic):
    done = log_dirs(cluster, "--describe", "--broker-list", "2", "--topic-list", f"{topic},other")
    assert done.stdout.splitlines()[1] == "Received log directory information from brokers 2"
    doc = json.loads(done.stdout.splitlines()[2])
    assert [b["broker"] for b in doc["brokers"]] == [2]
    other = f"ld-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(other, partitions=1)
    every = json.loads(log_dirs(cluster, "--describe").stdout.splitlines()[2])
    names = {
        p["partition"] for b in every["brokers"] for d in b["logDirs"] for p in d["partitions"]
    }
    assert {f"{topic}-0", f"{topic}-1", f"{topic}-2", f"{other}-0"} <= names


def test_log_dirs_errors_are_one_line(cluster):
    missing = log_dirs(cluster, "--describe", "--broker-list", "2,7,9")
    assert one_line(missing) == (
        "ERROR: The given brokers do not exist from --broker-list: 7,9. Current existent "
        "brokers: 1,2,3"
    )
    assert missing.returncode == 1 and missing.stdout == ""
    assert one_line(log_dirs(cluster)).endswith('Missing required argument "[describe]"')
    assert "--broker-list takes broker ids" in one_line(log_dirs(cluster, "--describe", "--broker-list", "x"))  # fmt: skip
    down = kcore("log-dirs", "--bootstrap-server", "127.0.0.1:1", "--describe")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
    done = wrapper("kafka-log-dirs.sh", "--help")
    assert (done.returncode, done.stdout) == (0, HELP)
