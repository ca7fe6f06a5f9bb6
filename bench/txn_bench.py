"""Transactions bench: small transactions per second with one transactional producer, and the
produce throughput of an idempotent producer relative to a plain one, measured with
confluent-kafka (librdkafka) against kcore.

How to run::

    .venv/bin/python bench/txn_bench.py            # full run, about a minute
    .venv/bin/python bench/txn_bench.py --quick    # about twenty seconds

``make bench-txn`` runs it (full). kcore runs as a child process (``python -m kcore.cli server``,
a temporary data directory, free loopback ports, as in ``bench/broker_bench.py``); the clients run
in this process.

1. **Small transactions.** One producer with a ``transactional.id`` runs, back to back:
   ``begin_transaction()``, 10 records of 100 B (5 to each of 2 partitions), and a synchronous
   ``commit_transaction()``. Each transaction costs AddPartitionsToTxn, the Produce requests,
   EndTxn, and the coordinator's two ``__transaction_state`` writes (PrepareCommit, then
   CompleteCommit after the COMMIT markers are on both partitions): what is measured is
   transactions (and records) per second. The first transaction (init and the creation of
   ``__transaction_state``) is not timed.
2. **Idempotence overhead.** The same number of 100 B records produced as fast as possible to a
   fresh one-partition topic by a producer with ``enable.idempotence=true`` and by one without
   it; both with ``acks=all`` (what idempotence implies) and ``linger.ms=5``, so the only
   difference is the producer id, the sequence numbers and the broker's sequence checks.
   Throughput runs from the first ``produce()`` to the last delivery report. The two alternate,
   run by run, and the median of each is compared. Target: idempotent ≥ 0.9x plain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402 (topics and the header the benches share)
from broker_bench import KcoreBroker  # noqa: E402 (the sibling bench's broker process)

RECORD = b"x" * 100
RECORDS_PER_TXN = 10
TXN_PARTITIONS = 2


def create_topic(bootstrap: str, partitions: int) -> str:
    return bench_common.create_topic(bootstrap, partitions, "txn-bench")


# -- 1. small transactions -------------------------------------------------------------------


def transactions_per_second(bootstrap: str, seconds: float) -> tuple[float, int]:
    """(committed transactions per second, transactions run) for one producer."""
    topic = create_topic(bootstrap, TXN_PARTITIONS)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"txn-bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 0,
        }
    )
    producer.init_transactions(60)

    def one() -> None:
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            producer.produce(topic, RECORD, partition=i % TXN_PARTITIONS)
        producer.commit_transaction(60)  # flushes, then EndTxn; returns once it completed

    one()  # warm up: the first AddPartitionsToTxn, connections to the coordinator
    count = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        one()
        count += 1
    return count / elapsed, count


# -- 2. idempotent versus plain --------------------------------------------------------------


def produce_rate(bootstrap: str, records: int, idempotent: bool) -> float:
    """Records per second for ``records`` values of 100 B to a fresh one-partition topic."""
    topic = create_topic(bootstrap, 1)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": max(records, 100_000),
        }
    )
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(str(err))

    producer.produce(topic, RECORD, on_delivery=delivered)  # connect, get a producer id
    producer.flush(30)
    start = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("records left undelivered")
    elapsed = time.monotonic() - start
    if failures:
        raise RuntimeError(f"{len(failures)} failed deliveries: {failures[0]}")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    seconds = 3.0 if args.quick else 10.0
    records = 50_000 if args.quick else 200_000
    repeat = 3 if args.quick else 5

    bench_common.print_header("transactions bench")
    print()
    broker = KcoreBroker()
    try:
        broker.start()
        rate, count = transactions_per_second(broker.bootstrap, seconds)
        print(
            f"| one transactional producer, {RECORDS_PER_TXN} × 100 B to {TXN_PARTITIONS} "
            "partitions, commit | per second |"
        )
        print("|---|---:|")
        print(f"| transactions ({count} in {seconds:.0f} s) | {rate:,.1f} |")
        print(f"| records | {rate * RECORDS_PER_TXN:,.0f} |")
        print()
        plain: list[float] = []
        idempotent: list[float] = []
        for _ in range(repeat):  # alternate, so both see the same background load
            plain.append(produce_rate(broker.bootstrap, records, idempotent=False))
            idempotent.append(produce_rate(broker.bootstrap, records, idempotent=True))
        p, i = statistics.median(plain), statistics.median(idempotent)
        print(
            f"| {records:,} × 100 B, acks=all, linger.ms=5 ({repeat} runs each) "
            "| records/s median (min–max) |"
        )
        print("|---|---:|")
        print(f"| plain producer | {p:,.0f} ({min(plain):,.0f}–{max(plain):,.0f}) |")
        print(f"| idempotent producer | {i:,.0f} ({min(idempotent):,.0f}–{max(idempotent):,.0f}) |")
        print(f"| ratio idempotent / plain (target ≥ 0.9) | {i / p:.2f} |")
    except BaseException:
        print(broker.output_tail(), file=sys.stderr)
        raise
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
