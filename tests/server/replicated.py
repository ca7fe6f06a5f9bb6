"""What the replication tests share: a replicated cluster's settings, waiting, and the
controller's view of a partition (leader, epochs, ISR)."""

from __future__ import annotations

import time
import uuid

# RF above 1 (experimental, #17), min.insync.replicas=2, and short lag and session timeouts
# so that ISR shrinks and fencing happen within a test.
REPLICATED_CONFIG = {
    "kcore.replication.enable": "true",
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "2000",
    "broker.session.timeout.ms": "3000",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate, what: str, timeout: float = 90.0):
    """Poll ``predicate`` until it returns something true (returned); AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def registration(cluster, tp):
    """``tp``'s PartitionRegistration in node 1's metadata image."""
    return cluster.broker.metadata_image.topics.by_name[tp[0]].partitions[tp[1]]
