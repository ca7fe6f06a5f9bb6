"""Commit latency and throughput of the metadata quorum on loopback.

Usage: ``.venv/bin/python bench/raft_bench.py [--proposals N] [--dir PATH]``

Everything runs in **one process and one ``trio.run``**: each voter is a
:class:`~kcore.raft.driver.RaftDriver` with its own folder and its own
:class:`~kcore.server.network.KafkaServer` serving the controller listener on 127.0.0.1, so the
Raft messages cross real TCP connections and the codec, but the voters share one CPU core (a
real deployment has a process, and a core, per voter). Measured:

* commit latency of one proposal of one ~100 B record (``propose`` until ``wait_for_commit``
  returns, one at a time), p50 / p99, with 1 voter and with 3 voters;
* the time to commit 1,000 proposals of ~100 B records in batches (50 records per ``propose``,
  all proposed, then the last one awaited), and the same 1,000 records as 1,000 separate
  proposals pipelined;
* the baseline, in the same run and folder: one ``fsync`` of a 100 B append (every commit
  needs at least one on the leader, and with 3 voters one on a follower too).

Targets: p99 < 5 ms with 1 voter, < 20 ms with 3 voters. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import trio

from kcore.raft.config import RaftConfig, VoterAddress
from kcore.raft.driver import RaftDriver, register_raft_handlers
from kcore.server.handlers import api_versions
from kcore.server.network import KafkaServer, ListenerSpec
from kcore.server.registry import CONTROLLER, HandlerRegistry

RECORD = b"x" * 100
TARGET_P99_MS = {1: 5.0, 3: 20.0}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fsync_baseline(directory: Path, n: int) -> list[float]:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    out = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, RECORD)
            os.fsync(fd)
            out.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return out


async def start_quorum(nursery: trio.Nursery, size: int, root: Path) -> list[RaftDriver]:
    drivers: dict[int, RaftDriver] = {}
    ports: dict[int, int] = {}
    for node_id in range(1, size + 1):
        registry = HandlerRegistry()
        api_versions.register(registry)

        async def handle(api_key, version, body, node_id=node_id):
            return await drivers[node_id].handle(api_key, version, body)

        register_raft_handlers(registry, handle)
        server = KafkaServer(registry, None)
        spec = ListenerSpec("CONTROLLER", "127.0.0.1", 0, CONTROLLER)
        bound = await nursery.start(server.serve, [spec])
        ports[node_id] = bound["CONTROLLER"][1]
    config = RaftConfig(voters={i: VoterAddress("127.0.0.1", p) for i, p in ports.items()})
    for node_id in ports:
        drivers[node_id] = RaftDriver(node_id, config, root / f"node-{node_id}")
        await nursery.start(drivers[node_id].run)
    with trio.fail_after(30):
        while True:
            leaders = [d for d in drivers.values() if d.is_leader]
            known = {d.leader_and_epoch for d in drivers.values()}
            if len(leaders) == 1 and len(known) == 1:
                return [leaders[0], *[d for d in drivers.values() if not d.is_leader]]
            await trio.sleep(0.01)


async def measure(size: int, proposals: int, root: Path) -> dict:
    async with trio.open_nursery() as nursery:
        lead, *_ = await start_quorum(nursery, size, root)
        for _ in range(50):  # warm-up: connections, page cache, code paths
            offsets = await lead.propose([RECORD])
            await lead.wait_for_commit(offsets[-1], 10)
        latencies = []
        for _ in range(proposals):
            start = time.perf_counter()
            offsets = await lead.propose([RECORD])
            await lead.wait_for_commit(offsets[-1], 10)
            latencies.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        for _ in range(1000 // 50):
            offsets = await lead.propose([RECORD] * 50)
        await lead.wait_for_commit(offsets[-1], 30)
        batched = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(1000):
            offsets = await lead.propose([RECORD])
        await lead.wait_for_commit(offsets[-1], 30)
        single = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return {
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies),
        "batched_s": batched,
        "single_s": single,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proposals", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="where the logs go (a tmp dir)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs,")
    print(f"  Python {platform.python_version()}, {platform.system()} {platform.release()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        base = fsync_baseline(root, 500)
        print(
            f"baseline: 100 B append + fsync in {root}: p50 {statistics.median(base):.3f} ms, "
            f"p99 {percentile(base, 0.99):.3f} ms"
        )
        for size in (1, 3):
            r = trio.run(measure, size, args.proposals, root / f"quorum-{size}")
            target = TARGET_P99_MS[size]
            verdict = "ok" if r["p99"] < target else "MISSED"
            print(
                f"{size} voter{'s' if size > 1 else ''}: commit latency of one proposal "
                f"({args.proposals} in turn): p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms "
                f"(target < {target:.0f} ms: {verdict}), max {r['max']:.2f} ms"
            )
            print(
                f"  1,000 x 100 B records: {r['batched_s'] * 1000:.1f} ms in batches of 50, "
                f"{r['single_s'] * 1000:.1f} ms as 1,000 pipelined proposals"
            )


if __name__ == "__main__":
    main()
