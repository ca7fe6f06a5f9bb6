"""How long the log cleaner stalls other requests: produce latency on one topic while the
broker compacts another.

A ``kcore server`` child process gets a compacted topic filled with ``--mb`` MB of dirty data
(``--keys`` keys, ``--value-bytes`` values, several segments), written while compaction is
held off (``min.cleanable.dirty.ratio=1``: never due). The script then starts a loop of small
produce requests on a second topic (one 100-byte record, acks=1, one in flight, each awaited),
lowers the dirty ratio with IncrementalAlterConfigs so the cleaner's next round compacts the
topic, and reports the produce latencies (max, p99, median) from the alteration until the
broker logs the end of the round, next to the same loop's latencies before cleaning (the
baseline, measured in the same run).

Run from the repository root: ``.venv/bin/python bench/cleaner_stall.py`` (``--mb 200``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import create_topic, print_header  # noqa: E402

from kcore.testing.processes import ServerProcess  # noqa: E402


def _fill(bootstrap: str, topic: str, total_bytes: int, keys: int, value_bytes: int) -> int:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": 1}
    )
    value = b"v" * value_bytes
    n = 0
    while n * value_bytes < total_bytes:
        while True:
            try:
                producer.produce(topic, key=b"key-%06d" % (n % keys), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return n


def _latency_loop(bootstrap: str, topic: str, stop: threading.Event, out: list) -> None:
    """Append (send time, round-trip seconds) of one produce at a time until ``stop``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    done = threading.Event()

    def delivered(err, _msg):
        if err is not None:
            print("produce failed:", err, file=sys.stderr)
        done.set()

    while not stop.is_set():
        done.clear()
        started = time.perf_counter()
        producer.produce(topic, value=b"x" * 100, partition=0, on_delivery=delivered)
        while not done.is_set():
            producer.poll(0.001)
        out.append((started, time.perf_counter() - started))
        time.sleep(0.002)
    producer.flush(10)


def _summary(name: str, samples: list[float]) -> str:
    if not samples:
        return f"{name}: no samples"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name}: {len(samples)} produces, max {max(samples) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, median {statistics.median(samples) * 1000:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="dirty data to compact, MB")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--segment-mb", type=int, default=50)
    args = parser.parse_args()
    print_header("log cleaner stall")

    with tempfile.TemporaryDirectory(prefix="kcore-cleaner-stall-") as tmp:
        server = ServerProcess(
            Path(tmp) / "data",
            config={"log.cleaner.backoff.ms": "500", "log.retention.check.interval.ms": "1000"},
        )
        server.format("cleaner-stall-cluster0000")
        server.start()
        try:
            bootstrap = server.bootstrap_server
            admin = AdminClient({"bootstrap.servers": bootstrap})
            compacted = "compacted-stall"
            topic_config = {
                "cleanup.policy": "compact",
                "min.cleanable.dirty.ratio": "1",  # never due: the data stays dirty
                "segment.bytes": str(args.segment_mb * 1024 * 1024),
            }
            new = NewTopic(compacted, 1, 1, config=topic_config)
            admin.create_topics([new])[compacted].result(30)
            started = time.perf_counter()
            n = _fill(bootstrap, compacted, args.mb * 1_000_000, args.keys, args.value_bytes)
            print(
                f"# filled {compacted}: {n} records of {args.value_bytes} B over {args.keys} "
                f"keys in {time.perf_counter() - started:.1f} s"
            )
            probe = create_topic(bootstrap, 1, "probe")
            latencies: list = []
            stop = threading.Event()
            loop = threading.Thread(target=_latency_loop, args=(bootstrap, probe, stop, latencies))
            loop.start()
            time.sleep(5)
            baseline = [rtt for _, rtt in latencies]
            mark = len(server.output())
            altered_at = time.perf_counter()
            resource = ConfigResource(
                "TOPIC",
                compacted,
                incremental_configs=[
                    ConfigEntry(
                        "min.cleanable.dirty.ratio",
                        "0.01",
                        incremental_operation=AlterConfigOpType.SET,
                    )
                ],
            )
            admin.incremental_alter_configs([resource])[resource].result(30)
            deadline = time.monotonic() + 600
            while "cleaned offsets" not in server.output()[mark:]:
                if time.monotonic() > deadline:
                    raise TimeoutError("the cleaner did not finish in 10 minutes")
                time.sleep(0.2)
            cleaned_at = time.perf_counter()
            stop.set()
            loop.join()
            during = [rtt for t, rtt in latencies if altered_at <= t <= cleaned_at]
            line = next(x for x in server.output()[mark:].splitlines() if "cleaned offsets" in x)
            print(f"# {line.strip()}")
            print(f"# from the alteration to the end of the round: {cleaned_at - altered_at:.1f} s")
            print(_summary("before cleaning (baseline)", baseline))
            print(_summary("while cleaning", during))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
