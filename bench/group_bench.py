"""Group coordinator bench: how fast a classic consumer group rebalances, and how many offset
commits per second the coordinator takes, measured with confluent-kafka (librdkafka) clients.

How to run::

    .venv/bin/python bench/group_bench.py            # full run, about two minutes
    .venv/bin/python bench/group_bench.py --quick    # about half a minute

``make bench-group`` runs it (full). kcore runs as a child process (``python -m kcore.cli
server``, a temporary data directory, free loopback ports, as in ``bench/broker_bench.py``); the
consumers run in this process, each in its own thread (librdkafka does its network I/O in its
own threads and releases the GIL while a call waits, so the threads do not queue on the GIL).

1. **Rebalance.** Nine consumers subscribe to a ten-partition topic and settle (Stable, every
   one assigned). A tenth subscribes: the time from its ``subscribe()`` to the moment all ten
   hold an assignment again (the last ``on_assign`` of the new generation, eager protocol with
   the range assignor) is the rebalance time. The broker runs once with
   ``group.initial.rebalance.delay.ms=0`` and once with Kafka's default (3000). Kafka applies
   that delay only while a group forms from empty — so it shows in the first nine's formation
   time, and a tenth joining a Stable group should not wait for it. Existing members learn of
   the rebalance from their next heartbeat, so ``heartbeat.interval.ms`` bounds the time too:
   the consumers here use 100 ms. Target: under 1 s + the delay.
2. **Offset commits.** Ten consumers of one Stable group each commit their own partition's
   offset synchronously (``commit(asynchronous=False)``) in a loop. Target: at least 5,000
   commits/s in all. The baseline, in the same run against the same broker with the same ten
   consumers and threads, is ListOffsets round trips (``offsets_for_times``): a request that
   reads the log's index and answers, where a commit also appends to ``__consumer_offsets``
   and waits for it to be durable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402 (topics and the header the benches share)
from broker_bench import KcoreBroker  # noqa: E402 (the sibling bench's broker process)

PARTITIONS = 10
KAFKA_DEFAULT_REBALANCE_DELAY_MS = 3000
HEARTBEAT_INTERVAL_MS = 100
SETTLE_TIMEOUT_S = 60.0


class GroupBroker(KcoreBroker):
    """kcore with a given ``group.initial.rebalance.delay.ms`` (a later override wins)."""

    def __init__(self, rebalance_delay_ms: int) -> None:
        super().__init__()
        self.rebalance_delay_ms = rebalance_delay_ms

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--override",
            f"group.initial.rebalance.delay.ms={self.rebalance_delay_ms}",
        ]


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    return bench_common.create_topic(bootstrap, partitions, "group-bench")


# -- 1. rebalance ----------------------------------------------------------------------------


class Group:
    """Members polling in their own threads; records when the assignment becomes complete.

    ``complete_at`` is set (monotonic time, in the rebalance callback) when every live member
    holds a non-empty assignment and together they hold each partition exactly once.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.group_id = f"group-bench-{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.assigned: dict[int, list[int]] = {}
        self.complete_at: float | None = None
        self.complete = threading.Event()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.consumers: list[Consumer] = []

    def add_member(self) -> None:
        index = len(self.threads)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group_id,
                "client.id": f"member-{index}",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "range",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            }
        )
        with self.lock:
            self.assigned[index] = []

        def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
            self._update(index, [p.partition for p in partitions])

        def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
            self._update(index, [])

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)

        def poll() -> None:
            while not self.stop.is_set():
                consumer.poll(0.02)

        thread = threading.Thread(target=poll, name=f"member-{index}", daemon=True)
        self.consumers.append(consumer)
        self.threads.append(thread)
        thread.start()

    def _update(self, index: int, partitions: list[int]) -> None:
        now = time.monotonic()
        with self.lock:
            self.assigned[index] = partitions
            held = [p for ps in self.assigned.values() for p in ps]
            done = all(self.assigned.values()) and sorted(held) == list(range(PARTITIONS))
            if done and not self.complete.is_set():
                self.complete_at = now
                self.complete.set()

    def expect_rebalance(self) -> None:
        with self.lock:
            self.complete.clear()
            self.complete_at = None

    def wait_complete(self) -> float:
        if not self.complete.wait(SETTLE_TIMEOUT_S):
            raise TimeoutError(f"{self.group_id} did not settle: {self.assigned}")
        assert self.complete_at is not None
        return self.complete_at

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)
        for consumer in self.consumers:
            consumer.close()


def rebalance_round(bootstrap: str, topic: str) -> tuple[float, float]:
    """(seconds for nine members to form the group, seconds for a tenth to be taken in)."""
    group = Group(bootstrap, topic)
    try:
        start = time.monotonic()
        for _ in range(PARTITIONS - 1):
            group.add_member()
        formed = group.wait_complete() - start
        group.expect_rebalance()
        joined_at = time.monotonic()
        group.add_member()
        joined = group.wait_complete() - joined_at
        return formed, joined
    finally:
        group.close()


def warm_up(bootstrap: str, topic: str) -> None:
    """One member in a throwaway group: the broker creates ``__consumer_offsets`` for the
    first group it coordinates, which is not what the rounds measure."""
    group = Group(bootstrap, topic)
    try:
        group.add_member()
        group.wait_complete()
    finally:
        group.close()


# -- 2. commits ------------------------------------------------------------------------------


def in_threads(consumers: list[Consumer], seconds: float, call: Callable[[Consumer, int], None]):
    """Run ``call(consumer, i)`` in a loop in one thread per consumer; calls per second."""
    counts = [0] * len(consumers)
    errors: list[BaseException] = []
    go, stop = threading.Event(), threading.Event()

    def loop(i: int) -> None:
        go.wait()
        try:
            while not stop.is_set():
                call(consumers[i], i)
                counts[i] += 1
        except BaseException as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(consumers))]
    for t in threads:
        t.start()
    start = time.monotonic()
    go.set()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - start
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def commit_rates(bootstrap: str, topic: str, seconds: float) -> tuple[float, float]:
    """(offset commits/s, ListOffsets round trips/s) from ten consumers of one Stable group."""
    group = Group(bootstrap, topic)
    try:
        for _ in range(PARTITIONS):
            group.add_member()
        group.wait_complete()
        group.stop.set()  # the members keep heartbeating in librdkafka's threads
        for thread in group.threads:
            thread.join(10)
        with group.lock:
            owned = [group.assigned[i][0] for i in range(PARTITIONS)]
        # A member's fetcher long-polls its partition leader (fetch.wait.max.ms, 500 ms), and a
        # broker answers one connection's requests in order, as Kafka does: a ListOffsets behind
        # a waiting Fetch would measure the fetch wait. Paused members fetch nothing; commits go
        # over the separate coordinator connection either way.
        for consumer in group.consumers:
            consumer.pause(consumer.assignment())
        next_offset = [0] * PARTITIONS

        def commit(consumer: Consumer, i: int) -> None:
            next_offset[i] += 1  # every commit a new offset, as a consuming member's would be
            tp = TopicPartition(topic, owned[i], next_offset[i])
            consumer.commit(offsets=[tp], asynchronous=False)

        def list_offsets(consumer: Consumer, i: int) -> None:
            consumer.offsets_for_times([TopicPartition(topic, owned[i], -1)], timeout=10)

        for i, consumer in enumerate(group.consumers):  # warm up: the fetches in flight end
            list_offsets(consumer, i)
        baseline = in_threads(group.consumers, seconds, list_offsets)
        commits = in_threads(group.consumers, seconds, commit)
        return commits, baseline
    finally:
        group.close()


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter runs")
    args = parser.parse_args()
    rounds = 1 if args.quick else 3
    seconds = 3.0 if args.quick else 10.0

    bench_common.print_header("group bench")
    print(
        f"# consumers: confluent-kafka, eager range assignor, heartbeat.interval.ms="
        f"{HEARTBEAT_INTERVAL_MS}; {rounds} round(s) per delay, commit runs of {seconds:.0f} s"
    )
    print()
    print(
        "| group.initial.rebalance.delay.ms | 9 members form (median, max) |"
        " 10th member taken in (median, max) | target |"
    )
    print("|---:|---:|---:|---:|")
    rates: tuple[float, float] | None = None
    for delay in (0, KAFKA_DEFAULT_REBALANCE_DELAY_MS):
        broker = GroupBroker(delay)
        try:
            broker.start()
            topic = create_topic(broker.bootstrap)
            warm_up(broker.bootstrap, topic)
            results = [rebalance_round(broker.bootstrap, topic) for _ in range(rounds)]
            formed = [f for f, _ in results]
            joined = [j for _, j in results]
            print(
                f"| {delay} | {statistics.median(formed):.3f} s, {max(formed):.3f} s "
                f"| {statistics.median(joined):.3f} s, {max(joined):.3f} s "
                f"| < {1 + delay / 1000:.1f} s |",
                flush=True,
            )
            if delay == 0:
                rates = commit_rates(broker.bootstrap, create_topic(broker.bootstrap), seconds)
        except BaseException:
            print(broker.output_tail(), file=sys.stderr)
            raise
        finally:
            broker.stop()
    assert rates is not None
    commits, baseline = rates
    print()
    print("| 10 consumers, synchronous | per second | target |")
    print("|---|---:|---:|")
    print(f"| OffsetCommit | {commits:,.0f} | ≥ 5,000 |")
    print(f"| baseline: ListOffsets round trips | {baseline:,.0f} | |")
    print(f"| ratio commits / baseline | {commits / baseline:.2f} | |")


if __name__ == "__main__":
    main()
