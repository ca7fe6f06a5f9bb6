"""A confluent-kafka producer kept busy in a thread while a test does something else."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Outcome:
    delivered: list = field(default_factory=list)
    failures: list = field(default_factory=list)


@contextmanager
def producing_throughout(producer, topic: str, flush_s: float = 60) -> Iterator[Outcome]:
    """Produce numbered records to ``topic`` until the block ends, then flush: the outcome
    holds every delivery's result (``failures`` the errors)."""
    outcome, stop = Outcome(), threading.Event()

    def on_delivery(err, _msg):
        (outcome.failures if err else outcome.delivered).append(err)

    def produce():
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=b"%d" % i, on_delivery=on_delivery)
            producer.poll(0.01)
            i += 1
        producer.flush(flush_s)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        yield outcome
    finally:
        stop.set()
        thread.join(flush_s * 2)
