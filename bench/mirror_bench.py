"""Mirror fetcher bench (quick form): how fast one destination copies a source backlog.

    .venv/bin/python bench/mirror_bench.py [--records 300000] [--size 1024] [--partitions 3]
                                            [--codec none|lz4] [--batch-records 64]

The source kcore runs as a child process (``kcore.testing.EmbeddedCluster`` in its own Python,
so the two brokers do not share a GIL); the destination runs in this process with its mirror
fetcher (``KafkaBroker.start_mirror_fetcher``). The source is filled first, untimed, with raw
idempotent batches of distinct values (half shared text, half random: lz4 compresses them ~2x)
through kcore's client. Then the clock starts, the mirror partitions are added, and it stops
when every destination partition reached the source's end. Reported: MB/s of batch bytes
mirrored, and CPU time per MB for the destination process and the source process (from
``/proc/<pid>/stat``), each measured over the copy only.

This is the quick number of issue #13; ``bench/mirror_relay_bench.py`` (also run by
``make bench-mirror``) measures the whole feature against a MirrorMaker-style relay.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import subprocess
import sys
import time
import uuid

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kcore.client import KafkaClient  # noqa: E402
from kcore.client import admin as kadmin  # noqa: E402
from kcore.record.compression import CompressionType  # noqa: E402
from kcore.record.records import RecordBatchBuilder  # noqa: E402
from kcore.testing import EmbeddedCluster  # noqa: E402
from tests.mirror.clusters import create_mirror_topic, partition, wait_until  # noqa: E402

SOURCE_SCRIPT = """
import sys
from kcore.testing import EmbeddedCluster
with EmbeddedCluster(config={"offsets.topic.num.partitions": "1",
                             "transaction.state.log.num.partitions": "1"}) as c:
    print(c.bootstrap_servers, flush=True)
    sys.stdin.read()
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build_batches(args) -> dict[int, list[bytes]]:
    shared = (uuid.uuid4().hex * (args.size // 32 + 1)).encode()[: args.size // 2]
    unique = args.size - len(shared)
    codec = CompressionType.LZ4 if args.codec == "lz4" else CompressionType.NONE
    per_partition = args.records // args.partitions
    out: dict[int, list[bytes]] = {}
    for p in range(args.partitions):
        batches, offset = [], 0
        while offset < per_partition:
            n = min(args.batch_records, per_partition - offset)
            builder = RecordBatchBuilder(
                base_offset=0, producer_id=1000 + p, producer_epoch=0, base_sequence=offset,
                compression=codec,
            )  # fmt: skip
            noise = os.urandom(unique * n)
            for i in range(n):
                builder.append(1, None, shared + noise[i * unique : (i + 1) * unique])
            batches.append(bytes(builder.build()))
            offset += n
        out[p] = batches
    return out


async def fill(bootstrap: str, topic: str, batches: dict[int, list[bytes]]) -> tuple[int, object]:
    total = 0
    async with KafkaClient(bootstrap) as client:
        await kadmin.create_topics(client, [kadmin.NewTopic(topic, len(batches), 1)])
        for _ in range(100):
            await client.refresh_metadata([topic])
            if all(p.leader_id >= 0 for p in client.metadata.topics[topic].partitions.values()):
                break
            await trio.sleep(0.05)
        for i in range(max(len(b) for b in batches.values())):
            chunk = {(topic, p): b[i] for p, b in batches.items() if i < len(b)}
            for tp, data in chunk.items():
                response = await kadmin.produce(client, {tp: data}, acks=1)
                code = response.responses[0].partition_responses[0].error_code
                assert code == 0, code
                total += len(data)
        return total, client.topic_id(topic)


def _on_broker_thread(function):
    """A coroutine function that calls ``function`` on the broker's thread (cProfile profiles
    only the thread that enabled it)."""

    async def call():
        function()

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--codec", choices=["none", "lz4"], default="none")
    parser.add_argument("--batch-records", type=int, default=64)
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the destination's broker thread over the copy"
    )
    args = parser.parse_args()

    env = dict(os.environ, PYTHONPATH=ROOT)
    source = subprocess.Popen(
        [sys.executable, "-c", SOURCE_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env=env, text=True,
    )  # fmt: skip
    try:
        bootstrap = source.stdout.readline().strip()
        topic = f"mirror-bench-{uuid.uuid4().hex[:6]}"
        batches = build_batches(args)
        total, topic_id = trio.run(fill, bootstrap, topic, batches)
        ends = {p: args.records // args.partitions for p in range(args.partitions)}
        with EmbeddedCluster() as dest:
            create_mirror_topic(dest, topic, topic_id, args.partitions, "bench")

            async def start():
                manager = await dest.broker.start_mirror_fetcher("bench", bootstrap)
                return manager

            manager = dest._call(start)
            profiler = cProfile.Profile() if args.profile else None
            if profiler is not None:
                dest._call(_on_broker_thread(profiler.enable))
            cpu_src, cpu_dst, t0 = cpu_seconds(source.pid), time.process_time(), time.monotonic()

            async def add():
                await manager.add_partitions([(topic, p) for p in range(args.partitions)])

            dest._call(add)
            wait_until(
                lambda: all(partition(dest, topic, p).log_end_offset >= ends[p] for p in ends),
                timeout=600,
                what="the mirror to catch up",
            )
            elapsed = time.monotonic() - t0
            cpu_dst = time.process_time() - cpu_dst
            cpu_src = cpu_seconds(source.pid) - cpu_src
            if profiler is not None:
                dest._call(_on_broker_thread(profiler.disable))
                profiler.dump_stats(args.profile)
        mb = total / 1e6
        print(
            f"mirrored {args.records:,} x {args.size} B records ({args.codec}, "
            f"{args.batch_records} records per batch, {args.partitions} partitions): "
            f"{mb:.1f} MB of batches in {elapsed:.2f} s = {mb / elapsed:.0f} MB/s; CPU per MB: "
            f"destination {cpu_dst * 1000 / mb:.2f} ms, source {cpu_src * 1000 / mb:.2f} ms, "
            f"both {(cpu_dst + cpu_src) * 1000 / mb:.2f} ms"
        )
    finally:
        source.stdin.close()
        source.wait(30)


if __name__ == "__main__":
    main()
