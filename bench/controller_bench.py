"""How long a single kcore node takes to create 1,000 topics of 10 partitions each.

Run: ``.venv/bin/python bench/controller_bench.py [--topics N] [--per-request K]``

The topics are created through the broker's Kafka API (CreateTopics over a real socket with
kcore's client), so the figure includes the codec, the controller, the Raft commit (fsync) of the
metadata records, the metadata loader and the creation of every partition's log (10,000 logs:
directories, preallocated indexes). The baseline measured in the same run is creating the same
number of empty directories with ``os.makedirs`` — the filesystem floor of the partition logs.
Target (issue 4): 1,000 topics of 10 partitions in under 10 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import trio

from kcore.client.admin import NewTopic, create_topics
from kcore.client.cluster import KafkaClient
from kcore.testing import EmbeddedCluster


async def create_all(bootstrap: str, topics: int, partitions: int, per_request: int) -> float:
    async with KafkaClient(bootstrap, client_id="controller-bench") as client:
        start = time.perf_counter()
        for first in range(0, topics, per_request):
            batch = [
                NewTopic(f"bench-{i}", partitions, 1)
                for i in range(first, min(first + per_request, topics))
            ]
            response = await create_topics(client, batch)
            failed = [t for t in response.topics if t.error_code]
            if failed:
                raise RuntimeError(f"creation failed: {failed[0]}")
        return time.perf_counter() - start


def baseline(count: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        for i in range(count):
            os.makedirs(os.path.join(d, f"bench-{i // 10}-{i % 10}"))
        return time.perf_counter() - start


def raise_open_files_limit(wanted: int = 131072) -> None:
    """10,000 partitions keep about 30,000 files open; root may raise the hard limit too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), max(hard, wanted)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"open files limit: {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")


def main() -> None:
    raise_open_files_limit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--per-request", type=int, default=50)
    args = parser.parse_args()
    with EmbeddedCluster() as cluster:
        elapsed = trio.run(
            create_all, cluster.bootstrap_servers, args.topics, args.partitions, args.per_request
        )
        hosted = len(cluster.broker.replica_manager.partitions)
    floor = baseline(args.topics * args.partitions)
    total = args.topics * args.partitions
    print(
        f"created {args.topics} topics x {args.partitions} partitions ({hosted} partition logs) "
        f"in {elapsed:.2f} s ({args.per_request} topics per CreateTopics request)"
    )
    print(
        f"baseline: os.makedirs of {total} directories: {floor:.3f} s (ratio {elapsed / floor:.0f}x)"
    )
    target = 10.0 * args.topics / 1000
    print(f"target < {target:.1f} s: {'PASS' if elapsed < target else 'FAIL'}")


if __name__ == "__main__":
    main()
