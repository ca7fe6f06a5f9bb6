"""Cluster mirroring against a MirrorMaker-style relay, side by side in one run (issue #13).

    .venv/bin/python bench/mirror_relay_bench.py [--records 300000] [--size 1024]
        [--partitions 3] [--codecs none,lz4] [--repeat 3] [--stop-partitions 100]

Two kcore clusters run as real ``kcore server`` processes (``kcore.testing.ProcessCluster``),
so each broker's CPU is its own. For every codec the source topic is filled once (untimed) by
a confluent-kafka producer with distinct values (half shared text, half random hex: lz4
compresses them about 2x). Then, ``--repeat`` times, alternating which goes first:

* **mirror**: a cluster mirror on the destination copies the topic (CreateClusterMirror +
  StartMirrorTopics into a fresh destination topic name each run, through the public RPCs);
  timed from the Start until every destination partition holds the source's last offset.
  CPU: both brokers.
* **relay**: a confluent-kafka consumer on the source feeding a confluent-kafka producer to a
  fresh destination topic, the way MirrorMaker 2 copies (``fetch.queue.backoff.ms=0``: the
  relay at its best, as ``bench/broker_bench.py`` measures clients); timed from the first poll
  until the producer's last delivery. CPU: this process and both brokers.

Reported per codec: MB/s of record values and ms of CPU per MB for each, the medians with the
range over the runs, and the ratios (mirror / relay throughput, relay / mirror CPU per MB).
Then the time from ``--stop`` of a mirror topic with ``--stop-partitions`` partitions until
every partition is STOPPED and a producer's write is acknowledged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from kcore.client import KafkaClient  # noqa: E402
from kcore.client import mirrors as mirror_admin  # noqa: E402
from kcore.client.admin import (  # noqa: E402
    LATEST_TIMESTAMP,
    NewTopic,
    create_topics,
    delete_topics,
    list_offsets,
)
from kcore.testing import ProcessCluster  # noqa: E402

BROKER_CONFIG = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "mirror.state.topic.num.partitions": "3",
    "log.flush.interval.messages": "9223372036854775807",
}


def _admin(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def _ends(cluster, topic: str, partitions: int) -> dict[int, int]:
    answer = _admin(
        cluster,
        lambda c: list_offsets(c, {(topic, p): LATEST_TIMESTAMP for p in range(partitions)}),
    )
    return {p: answer[(topic, p)].offset for p in range(partitions)}


def _cpu(cluster) -> float:
    return sum(n.cpu_seconds() for n in cluster.nodes)


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def fill(source, topic: str, args, codec: str) -> int:
    """The source topic, filled with ``args.records`` distinct values; returns value bytes."""
    _admin(source, lambda c: create_topics(c, [NewTopic(topic, args.partitions, 1)]))
    producer = Producer(
        {
            "bootstrap.servers": source.bootstrap_servers,
            "compression.type": codec,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    shared = (uuid.uuid4().hex * (args.size // 32 + 1)).encode()[: args.size // 2]
    for i in range(args.records):
        value = shared + os.urandom((args.size - len(shared)) // 2).hex().encode()
        while True:
            try:
                producer.produce(topic, value, partition=i % args.partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return args.records * args.size


def run_mirror(source, destination, topic: str, args) -> tuple[float, float]:
    """(seconds, CPU seconds of both brokers) for the mirror to copy ``topic``."""
    mirror = f"m-{uuid.uuid4().hex[:6]}"
    ends = _ends(source, topic, args.partitions)
    created = _admin(
        destination,
        lambda c: mirror_admin.create_cluster_mirror(
            c, mirror, {"bootstrap.servers": source.bootstrap_servers}
        ),
    )
    assert created.error_code == 0, created.error_message
    cpu0, t0 = _cpu(source) + _cpu(destination), time.perf_counter()
    started = _admin(destination, lambda c: mirror_admin.start_mirror_topics(c, mirror, [topic]))
    assert started.topics[0].error_code == 0, started.topics[0].error_message
    while _ends(destination, topic, args.partitions) != ends:
        time.sleep(0.02)
    return time.perf_counter() - t0, _cpu(source) + _cpu(destination) - cpu0


def run_relay(source, destination, topic: str, target: str, args, codec: str):
    """(seconds, CPU seconds of the relay process and both brokers) for the relay."""
    _admin(destination, lambda c: create_topics(c, [NewTopic(target, args.partitions, 1)]))
    consumer = Consumer(
        {
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": destination.bootstrap_servers,
            "compression.type": codec,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    copied = 0
    cpu0 = _self_cpu() + _cpu(source) + _cpu(destination)
    t0 = time.perf_counter()
    while copied < args.records:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error():
                continue
            while True:
                try:
                    producer.produce(target, msg.value(), partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.01)
            copied += 1
        producer.poll(0)
    assert producer.flush(120) == 0
    seconds = time.perf_counter() - t0
    cpu = _self_cpu() + _cpu(source) + _cpu(destination) - cpu0
    consumer.close()
    return seconds, cpu


def stop_time(source, destination, partitions: int) -> float:
    """Seconds from StopMirrorTopics of a ``partitions``-partition mirror topic until every
    partition is STOPPED and a write to it is acknowledged."""
    topic, mirror = f"stop-{uuid.uuid4().hex[:6]}", f"s-{uuid.uuid4().hex[:6]}"
    _admin(source, lambda c: create_topics(c, [NewTopic(topic, partitions, 1)]))
    _admin(
        destination,
        lambda c: mirror_admin.create_cluster_mirror(
            c, mirror, {"bootstrap.servers": source.bootstrap_servers}
        ),
    )
    _admin(destination, lambda c: mirror_admin.start_mirror_topics(c, mirror, [topic]))

    def states() -> set[str]:
        response = _admin(destination, lambda c: mirror_admin.describe_cluster_mirrors(c, [mirror]))
        return {p.state for m in response.mirrors for t in m.topics for p in t.partitions}

    while states() != {"MIRRORING"}:
        time.sleep(0.05)
    producer = Producer({"bootstrap.servers": destination.bootstrap_servers, "retries": 0})
    producer.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    _admin(destination, lambda c: mirror_admin.stop_mirror_topics(c, mirror, [topic]))
    while states() != {"STOPPED"}:
        time.sleep(0.005)
    done = []
    producer.produce(topic, b"x", partition=partitions - 1, on_delivery=lambda e, m: done.append(e))
    producer.flush(10)
    assert done == [None], done
    return time.perf_counter() - t0


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stop-partitions", type=int, default=100)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="kcore-mirror-bench-")
    with (
        ProcessCluster(os.path.join(base, "source"), config=BROKER_CONFIG) as source,
        ProcessCluster(os.path.join(base, "destination"), config=BROKER_CONFIG) as destination,
    ):
        print(f"{args.records} x {args.size} B over {args.partitions} partitions, "
              f"{args.repeat} runs each, alternating; machine: {os.cpu_count()} cores")  # fmt: skip
        for codec in args.codecs.split(","):
            relay_source = f"relay-src-{codec}-{uuid.uuid4().hex[:6]}"
            mb = fill(source, relay_source, args, codec) / 1e6
            mirror_runs, relay_runs = [], []
            for i in range(args.repeat):
                order = ("mirror", "relay") if i % 2 == 0 else ("relay", "mirror")
                for kind in order:
                    # Every run copies into fresh topics, deleted afterwards (untimed), so the
                    # destination's disk and page cache stay in a steady state.
                    if kind == "mirror":
                        # A mirror topic keeps its source's name: a fresh source topic per run.
                        topic = f"mirror-{codec}-{uuid.uuid4().hex[:6]}"
                        fill(source, topic, args, codec)
                        mirror_runs.append(run_mirror(source, destination, topic, args))
                        _admin(source, lambda c, t=topic: delete_topics(c, [t]))
                        _admin(destination, lambda c, t=topic: delete_topics(c, [t]))
                    else:
                        target = f"relay-{uuid.uuid4().hex[:6]}"
                        relay_runs.append(
                            run_relay(source, destination, relay_source, target, args, codec)
                        )
                        _admin(destination, lambda c, t=target: delete_topics(c, [t]))
            m_mbs = [mb / s for s, _ in mirror_runs]
            r_mbs = [mb / s for s, _ in relay_runs]
            m_cpu = [c * 1000 / mb for _, c in mirror_runs]
            r_cpu = [c * 1000 / mb for _, c in relay_runs]
            print(f"\ncodec {codec}: {mb:.0f} MB of values")
            print(f"  mirror  MB/s {_median_range(m_mbs)}   CPU ms/MB {_median_range(m_cpu)}")
            print(f"  relay   MB/s {_median_range(r_mbs)}   CPU ms/MB {_median_range(r_cpu)}")
            print(
                f"  ratios  throughput mirror/relay {statistics.median(m_mbs) / statistics.median(r_mbs):.2f}x"
                f"   CPU per MB relay/mirror {statistics.median(r_cpu) / statistics.median(m_cpu):.2f}x"
            )
        if args.stop_partitions:
            seconds = stop_time(source, destination, args.stop_partitions)
            print(f"\n--stop of {args.stop_partitions} partitions: writable in {seconds:.2f} s")


if __name__ == "__main__":
    main()
