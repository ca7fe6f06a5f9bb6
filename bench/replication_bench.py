"""Replication bench (issue #17): acks=all on three replicas against acks=1 on one, in one run.

    .venv/bin/python bench/replication_bench.py [--records 100000] [--repeat 2]
        [--latency-seconds 10] [--backlog-mib 128 | --full] [--partitions 4]

Three real ``kcore server`` processes (``kcore.testing.ProcessCluster``, every node a broker and
a controller voter, ``kcore.replication.enable=true``), so each broker has its own interpreter;
the confluent-kafka clients run in this process. Values are 1 KiB, uncompressed.

* **(a) baseline**: acks=1 to a one-partition topic of replication factor 1 led by node 1;
* **(b)** acks=all to a one-partition topic of replication factor 3 (``min.insync.replicas=2``)
  also led by node 1, followed by nodes 2 and 3. Both with the same producer (linger 5 ms,
  1 MB batches), ``--records`` each, alternating which goes first, ``--repeat`` times; the
  medians and the ratio b / a against the issue's target (>= 0.5);
* **(c)** acks=all paced at half of (b)'s median rate for ``--latency-seconds``: the p50 and p99
  of each record's produce latency (librdkafka's ``Message.latency()``: from ``produce()`` to
  the acknowledgement);
* **(d) catch-up**: a topic of ``--partitions`` partitions, replicas ``[leader, other, 3]``
  with leaders on nodes 1 and 2, so node 3 leads none of them. Node 3 is stopped (SIGSTOP: the
  process keeps its state and its connections), ``--backlog-mib`` of records (128 MiB by
  default for a loaded VM, 1 GiB with ``--full``) are written with acks=1 by a producer that
  bootstraps from nodes 1 and 2 only, then node 3 is resumed (SIGCONT); timed from the resume
  until node 3 is back in the ISR of every partition (as the metadata of node 1 says), MB/s of
  record bytes against the target (>= 200 MB/s). It was fenced meanwhile (its heartbeats
  stopped), so the time includes its unfencing and the AlterPartition round of each partition.

Each phase also prints the CPU seconds each broker used, so a missed target says which process
was busy.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import print_header  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kcore.testing import ProcessCluster  # noqa: E402

VALUE = 1024
BROKER_CONFIG = {"kcore.replication.enable": "true"}
FOLLOWER = 3  # the node stopped for the catch-up


def create(bootstrap: str, assignment: list[list[int]], config: dict | None = None) -> str:
    """A fresh topic with this replica assignment; returned once every partition's ISR is
    full (its followers fetched once)."""
    topic = f"repl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, len(assignment), replica_assignment=assignment, config=config or {})
    for future in admin.create_topics([new]).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        parts = md.partitions if md is not None else {}
        if len(parts) == len(assignment) and all(
            p.leader >= 0 and len(p.isrs) == len(assignment[i]) for i, p in parts.items()
        ):
            return topic
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: the ISR did not fill")
        time.sleep(0.05)


def _values() -> list[bytes]:
    return [os.urandom(16) + bytes(VALUE - 16) for _ in range(1000)]


def _producer(bootstrap: str, acks: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )


def _cpu(cluster) -> list[float]:
    return [n.cpu_seconds() for n in cluster.nodes]


def _cpu_used(before: list[float], after: list[float]) -> str:
    return " ".join(f"node{i + 1} {b - a:.1f}s" for i, (a, b) in enumerate(zip(before, after)))


def throughput(cluster, topic: str, acks: str, records: int) -> tuple[float, str]:
    """(MB/s of values, the brokers' CPU) for ``records`` produced and acknowledged."""
    producer = _producer(cluster.bootstrap_servers, acks)
    producer.list_topics(topic, timeout=30)
    values = _values()
    cpu = _cpu(cluster)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, values[i % 1000], partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise RuntimeError(f"{topic}: records still unacknowledged after 300 s")
    elapsed = time.perf_counter() - start
    return records * VALUE / 1e6 / elapsed, _cpu_used(cpu, _cpu(cluster))


def latencies(cluster, topic: str, rate: float, seconds: float) -> tuple[list[float], int]:
    """Each record's produce latency in ms at ``rate`` records/s; and the failures."""
    producer = _producer(cluster.bootstrap_servers, "all")
    producer.list_topics(topic, timeout=30)
    values = _values()
    out: list[float] = []
    failed = [0]

    def delivered(err, msg) -> None:
        if err is not None:
            failed[0] += 1
        else:
            out.append(msg.latency() * 1000)

    total = int(rate * seconds)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        # Send what is due every millisecond: a paced load, not a burst per second.
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            producer.produce(topic, values[sent % 1000], partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0.001)
    if producer.flush(120):
        raise RuntimeError(f"{topic}: records still unacknowledged after 120 s")
    return sorted(out), failed[0]


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def catch_up(cluster, partitions: int, backlog: int) -> tuple[float, float, str]:
    """(seconds from the resume until node 3 is in every ISR, MB written, brokers' CPU)."""
    others = [n.bootstrap_server for n in cluster.nodes if n.node_id != FOLLOWER]
    assignment = [[1, 2, FOLLOWER] if p % 2 == 0 else [2, 1, FOLLOWER] for p in range(partitions)]
    topic = create(cluster.bootstrap_servers, assignment, {"min.insync.replicas": "2"})
    follower = cluster.node(FOLLOWER)
    admin = AdminClient({"bootstrap.servers": others[0]})
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        # Never bootstrap from the stopped node: its metadata answers would never come.
        producer = _producer(",".join(others), "1")
        producer.list_topics(topic, timeout=30)
        values = _values()
        records = backlog // VALUE
        for i in range(records):
            while True:
                try:
                    producer.produce(topic, values[i % 1000], partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
        if producer.flush(600):
            raise RuntimeError(f"{topic}: backlog still unacknowledged after 600 s")
        # Resume only once it is out of every ISR (fenced after broker.session.timeout.ms),
        # else a quick backlog would find it still "in sync" and time nothing.
        _wait_isr(admin, topic, lambda isr: FOLLOWER not in isr, "out of the ISR")
    except BaseException:
        follower.proc.send_signal(signal.SIGCONT)
        raise
    cpu = _cpu(cluster)
    start = time.perf_counter()
    follower.proc.send_signal(signal.SIGCONT)
    _wait_isr(admin, topic, lambda isr: FOLLOWER in isr, "back in the ISR")
    elapsed = time.perf_counter() - start
    return elapsed, records * VALUE / 1e6, _cpu_used(cpu, _cpu(cluster))


def _wait_isr(admin, topic: str, condition, what: str, timeout: float = 600) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if all(condition(p.isrs) for p in parts.values()):
            return
        if time.perf_counter() > deadline:
            raise TimeoutError(f"node {FOLLOWER} not {what} of {topic} after {timeout:.0f} s")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--backlog-mib", type=int, default=128)
    parser.add_argument("--full", action="store_true", help="a 1 GiB catch-up backlog")
    parser.add_argument("--partitions", type=int, default=4, help="of the catch-up topic")
    args = parser.parse_args()
    backlog = (1024 if args.full else args.backlog_mib) << 20
    print_header("replication bench (issue #17)")
    with (
        tempfile.TemporaryDirectory(prefix="kcore-repl-bench-") as base,
        ProcessCluster(base, 3, config=BROKER_CONFIG) as cluster,
    ):
        rf1 = create(cluster.bootstrap_servers, [[1]])
        rf3 = create(cluster.bootstrap_servers, [[1, 2, 3]], {"min.insync.replicas": "2"})
        runs: dict[str, list[float]] = {"1": [], "all": []}
        print(f"\n## throughput, {args.records} records of 1 KiB, one partition led by node 1")
        print("| run | producer | MB/s | brokers' CPU |")
        print("|---|---|---:|---|")
        for run in range(args.repeat):
            for acks in ("1", "all") if run % 2 == 0 else ("all", "1"):
                topic = rf1 if acks == "1" else rf3
                mbs, cpu = throughput(cluster, topic, acks, args.records)
                runs[acks].append(mbs)
                name = "(a) acks=1, RF=1" if acks == "1" else "(b) acks=all, RF=3, min ISR 2"
                print(f"| {run + 1} | {name} | {mbs:.1f} | {cpu} |", flush=True)
        a, b = statistics.median(runs["1"]), statistics.median(runs["all"])
        verdict = "meets" if b / a >= 0.5 else "misses"
        print(f"medians: (a) {a:.1f} MB/s, (b) {b:.1f} MB/s; b / a = {b / a:.2f}x "
              f"({verdict} the 0.5x target)")  # fmt: skip

        rate = b * 1e6 / VALUE / 2
        lat, failed = latencies(cluster, rf3, rate, args.latency_seconds)
        print(f"\n## (c) acks=all latency at half of (b): {rate:.0f} records/s "
              f"for {args.latency_seconds:.0f} s")  # fmt: skip
        print(f"{len(lat)} records acknowledged, {failed} failed; "
              f"p50 {_percentile(lat, 0.5):.1f} ms, p99 {_percentile(lat, 0.99):.1f} ms, "
              f"max {lat[-1]:.1f} ms")  # fmt: skip

        seconds, mb, cpu = catch_up(cluster, args.partitions, backlog)
        verdict = "meets" if mb / seconds >= 200 else "misses"
        print(f"\n## (d) catch-up of node {FOLLOWER} after SIGSTOP: {mb:.0f} MB backlog over "
              f"{args.partitions} partitions")  # fmt: skip
        print(f"back in every ISR {seconds:.2f} s after SIGCONT: {mb / seconds:.1f} MB/s "
              f"({verdict} the 200 MB/s target); brokers' CPU {cpu}")  # fmt: skip


if __name__ == "__main__":
    main()
