"""Mirror metadata sync bench (issue #15): one sync round over a large source, and what it costs
the destination's clients.

    .venv/bin/python bench/mirror_sync_bench.py [--topics 1000] [--partitions 10] [--groups 1000]
                                                [--acls 100] [--repeat 3] [--verbose]
                                                [--steps] [--profile FILE]

``--steps`` lists the longest steps of the destination's event loop during the rounds, per task,
and the collector's pauses apart (what the probe's p99 waits for); ``--profile`` writes a
cProfile of the destination's thread during the rounds.

The source kcore runs as a child process (its own Python, so the brokers do not share a GIL) and
is filled first, untimed: ``--topics`` topics of ``--partitions`` partitions, a few records in
each topic's partition 0, ``--groups`` classic groups each with committed offsets on every
partition of one topic, and ``--acls`` ACLs. The destination runs in this process with a mirror
whose include pattern is ``.*`` and whose refresh interval is an hour, so only the rounds the
bench asks for run (``MirrorMetadataSync.sync_once`` on the coordinator).

Measured, each ``--repeat`` times (median, min-max spread):

* the **discovery** round that finds every topic and starts it (10,000 partitions created
  through the controller), once, for information;
* a **commit** round: every group's offsets changed on the source, so the round commits
  ``--groups`` groups' offsets on the destination (the heaviest steady round);
* a **steady** round: both sides equal, nothing sent but the reads.

During every round, a probe in another process sends Produce (acks=1) and Fetch
(max_wait_ms=0) requests to a local topic of the destination, one after the other; their
latencies during rounds are compared with the same probe's while the destination is idle (no
round running, the mirror fetchers running). The issue's targets: a round < 5 s, p50/p99
latency during a round within 2x idle.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time

import trio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kcore.client import KafkaClient  # noqa: E402
from kcore.client import admin as kadmin  # noqa: E402
from kcore.client import mirrors as madmin  # noqa: E402
from kcore.client.groups import offset_commit  # noqa: E402
from kcore.protocol import messages as m  # noqa: E402
from kcore.record.records import RecordBatchBuilder  # noqa: E402
from kcore.testing import EmbeddedCluster  # noqa: E402

CLUSTER = {"offsets.topic.num.partitions": "10", "transaction.state.log.num.partitions": "1"}
SOURCE_SCRIPT = f"""
import sys
from kcore.testing import EmbeddedCluster
config = {{**{CLUSTER!r},
          "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          "allow.everyone.if.no.acl.found": "true"}}
with EmbeddedCluster(config=config) as c:
    print(c.bootstrap_servers, flush=True)
    sys.stdin.read()
"""

PROBE_SCRIPT = """
import sys, time, trio
from kcore.client import KafkaClient
from kcore.client import admin as kadmin
from kcore.record.records import RecordBatchBuilder

async def main(bootstrap, topic):
    async with KafkaClient(bootstrap) as client:
        await client.refresh_metadata([topic])
        print("ready", flush=True)
        offset = 0
        while True:
            b = RecordBatchBuilder(base_offset=0)
            b.append(int(time.time() * 1000), None, b"probe")
            t0 = time.monotonic()
            try:  # a request that times out counts with the time it took
                response = await kadmin.produce(client, {(topic, 0): b.build()}, acks=1)
                offset = response.responses[0].partition_responses[0].base_offset
            except Exception:
                pass
            t1 = time.monotonic()
            try:
                await kadmin.fetch(client, {(topic, 0): offset}, max_wait_ms=0)
            except Exception:
                pass
            t2 = time.monotonic()
            print(f"{time.time():.6f} {(t1 - t0) * 1000:.3f} {(t2 - t1) * 1000:.3f}", flush=True)
            await trio.sleep(0.005)

trio.run(main, sys.argv[1], sys.argv[2])
"""

MIRROR = "bench"


class LoopSteps:
    """A Trio instrument of the destination's loop: the longest single steps of each task while
    ``on`` (``--steps``). One step is what runs between two awaits; its length is how long every
    other request on the broker waited for the loop."""

    def __init__(self) -> None:
        self.on = False
        self._began = 0.0
        self._collected = 0.0
        self.steps: dict[str, list[float]] = {}
        self._gc_began = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        """The collector's pauses land in whichever step is running: counted apart."""
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif self.on and threading.current_thread().name == "kcore-embedded":
            took = time.perf_counter() - self._gc_began
            self._collected += took
            self.steps.setdefault(f"(gc generation {info['generation']})", []).append(took)

    def before_task_step(self, task) -> None:
        self._began = time.perf_counter()
        self._collected = 0.0

    def after_task_step(self, task) -> None:
        if self.on:
            # Without the collector's pauses inside the step: those are counted apart.
            took = time.perf_counter() - self._began - self._collected
            if took >= 0.002:
                self.steps.setdefault(task.name, []).append(took)

    def report(self, shown: int = 12) -> None:
        rows = sorted(self.steps.items(), key=lambda kv: -sum(kv[1]))[:shown]
        print("loop steps >= 2 ms (and collector pauses) during the rounds: count, total, max")
        for name, took in rows:
            print(f"  {name}: {len(took)}, {sum(took) * 1000:.0f} ms, {max(took) * 1000:.1f} ms")


async def fill_source(bootstrap: str, args) -> None:
    async with KafkaClient(bootstrap) as client:
        names = [f"t{i:05d}" for i in range(args.topics)]
        for i in range(0, len(names), 100):
            await kadmin.create_topics(
                client, [kadmin.NewTopic(n, args.partitions, 1) for n in names[i : i + 100]]
            )
        await client.refresh_metadata(None)
        for n in names:
            builder = RecordBatchBuilder(base_offset=0)
            for j in range(5):
                # Today's timestamps: at 0 (1970) retention would delete them mid-bench.
                builder.append(int(time.time() * 1000), None, b"r%d" % j)
            await kadmin.produce(client, {(n, 0): builder.build()}, acks=1)
        await commit_groups(client, args, 1)
        C = m.CreateAclsRequest
        # The mirror's principal (anonymous, over PLAINTEXT) may do everything; the others are
        # the ACLs the sync copies. Without the first, a topic with an ACL would be hidden.
        everyone = [
            C.AclCreation(
                resource_type=kind,
                resource_name=name,
                resource_pattern_type=3,
                principal="User:ANONYMOUS",
                host="*",
                operation=2,
                permission_type=3,
            )
            for kind, name in ((2, "*"), (3, "*"), (4, "kafka-cluster"))
        ]
        body = C(
            creations=everyone
            + [
                C.AclCreation(
                    resource_type=2,
                    resource_name=names[i % len(names)],
                    resource_pattern_type=3,
                    principal=f"User:app-{i}",
                    host="*",
                    operation=3,
                    permission_type=3,
                )
                for i in range(args.acls)
            ]
        )
        await client.request("any", body)


async def commit_groups(client, args, offset: int) -> None:
    """Every group commits ``offset`` (0-5: the records of partition 0) on its topic's
    partitions; eight commits in flight."""
    limiter = trio.CapacityLimiter(8)

    async def one(g: int) -> None:
        topic = f"t{g % args.topics:05d}"
        async with limiter:
            offsets = {(topic, p): (offset if p == 0 else 0) for p in range(args.partitions)}
            await offset_commit(client, f"g{g:05d}", offsets)

    async with trio.open_nursery() as nursery:
        for g in range(args.groups):
            nursery.start_soon(one, g)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Probe:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE_SCRIPT, bootstrap, topic],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        assert self.proc.stdout.readline().strip() == "ready"
        self.samples: list[tuple[float, float, float]] = []
        # Read all the time: a full pipe would stop the probe.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            t, p, f = line.split()
            self.samples.append((float(t), float(p), float(f)))

    def collect(self) -> None:
        """Nothing to do: the reader thread keeps ``samples`` current."""

    def between(self, windows: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        inside = [s for s in self.samples if any(a <= s[0] <= b for a, b in windows)]
        return [s[1] for s in inside], [s[2] for s in inside]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--acls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle", type=float, default=300, help="max wait for MIRRORING")
    parser.add_argument("--verbose", action="store_true", help="log each round's phases")
    parser.add_argument(
        "--steps", action="store_true", help="report the longest loop steps during the rounds"
    )
    parser.add_argument("--profile", metavar="FILE", help="cProfile the destination's rounds")
    parser.add_argument(
        "--variants",
        default="sessions",
        help="comma-separated, measured one after the other in this run: sessions (the "
        "mirror fetchers' KIP-227 fetch sessions, kcore's behaviour), sessionless; after either "
        "+frozen (gc.collect() and gc.freeze() first) or +unfrozen (gc.unfreeze() first)",
    )
    parser.add_argument("--idle", type=float, default=10.0, help="idle window per variant, s")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("kcore.mirror.metadata_sync_shell").setLevel(logging.DEBUG)

    source = subprocess.Popen(
        [sys.executable, "-c", SOURCE_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    bootstrap = source.stdout.readline().strip()
    t = time.monotonic()
    trio.run(fill_source, bootstrap, args)
    print(f"source filled in {time.monotonic() - t:.1f} s: {args.topics} topics x "
          f"{args.partitions} partitions, {args.groups} groups, {args.acls} ACLs", flush=True)  # fmt: skip
    config = {**CLUSTER, "mirror.metadata.refresh.interval.ms": "3600000"}
    try:
        with EmbeddedCluster(config=config) as dest:
            dest.create_topic("probe")
            probe = Probe(dest.bootstrap_servers, "probe")

            async def admin(call):
                async with KafkaClient(dest.bootstrap_servers) as client:
                    return await call(client)

            t = time.monotonic()
            mirror_config = {"bootstrap.servers": bootstrap, "mirror.topics.include": ".*"}
            created = dest._call(
                admin, lambda c: madmin.create_cluster_mirror(c, MIRROR, mirror_config)
            )
            assert created.error_code == 0, created.error_message
            want = args.topics * args.partitions

            def mirrored() -> int:
                return sum(1 for t, _ in dest.broker.replica_manager.partitions if t[:1] == "t")

            discover_until = time.monotonic() + args.settle
            while mirrored() < want and time.monotonic() < discover_until:
                time.sleep(0.5)  # the discovery round runs on its own (a mirror change)
            discovery = time.monotonic() - t
            print(
                f"discovery: {mirrored()} of {want} partitions created and started in {discovery:.1f} s",
                flush=True,
            )

            def states() -> dict[str, int]:
                out: dict[str, int] = {}
                for d in list(dest.broker.mirror_manager.drivers.values()):
                    out[d.machine.state.name] = out.get(d.machine.state.name, 0) + 1
                return out

            # The mirror partitions go LOG_TRUNCATION -> MIRRORING (the data path's start,
            # not the sync's); measure once they have, or after --settle seconds.
            settle_until = time.monotonic() + args.settle
            while states().get("MIRRORING", 0) < want and time.monotonic() < settle_until:
                time.sleep(2)
            print(f"partition states {time.monotonic() - t:.0f} s after the mirror's creation: "
                  f"{states()}", flush=True)  # fmt: skip
            time.sleep(5)

            sync = dest.broker.mirror_sync
            steps = LoopSteps()
            pauses = Gen2Pauses()

            async def instrument():
                trio.lowlevel.add_instrument(steps)

            if args.steps:
                dest._call(instrument)

            profile = cProfile.Profile() if args.profile else None

            async def round_once():
                steps.on = pauses.on = True
                if profile is not None:
                    profile.enable()  # on the destination's thread: all of its loop
                try:
                    return await sync.sync_once(MIRROR)
                finally:
                    steps.on = pauses.on = False
                    if profile is not None:
                        profile.disable()

            def timed_round(kind: str, result: dict) -> None:
                a = time.time()
                status = dest._call(round_once)
                b = time.time()
                result["windows"].append((a, b))
                result[kind].append(b - a)
                kinds = {}
                for c in status.changes if status.last_change_ms >= a * 1000 else []:
                    kinds[c.kind] = kinds.get(c.kind, 0) + 1
                print(f"{kind} round: {b - a:.2f} s, changes {kinds or 'none'}, "
                      f"errors {status.errors}, notes {status.notes[:3]}", flush=True)  # fmt: skip

            results = {}
            for variant in args.variants.split(","):
                print(f"-- variant {variant} (load average {os.getloadavg()[0]:.1f})", flush=True)
                dest._call(_apply_variant, dest.broker, variant)
                time.sleep(5)  # the fetchers' first (full) fetch of the variant is not measured
                idle_from = time.time()
                time.sleep(args.idle)
                result = {
                    "commit": [],
                    "steady": [],
                    "windows": [],
                    "idle": (idle_from, time.time()),
                }
                pauses.pauses.clear()
                for i in range(args.repeat):
                    trio.run(_commit_all, bootstrap, args, 2 + (len(results) * args.repeat + i) % 4)
                    timed_round("commit", result)
                    timed_round("steady", result)
                result["gen2"] = list(pauses.pauses)
                if args.steps:
                    print(f"{variant}: ", end="")
                    steps.report()
                    steps.steps.clear()
                results[variant] = result
            probe.collect()
            probe.stop()
    finally:
        source.stdin.close()
        try:  # a source of 10,000 partitions takes a while to close cleanly on a busy disk
            source.wait(300)
        except subprocess.TimeoutExpired:
            source.kill()
            source.wait()

    def spread(values):
        return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"

    reports = {}
    for variant, result in results.items():
        produce_idle, fetch_idle = probe.between([result["idle"]])
        produce_busy, fetch_busy = probe.between(result["windows"])
        gen2 = result["gen2"]
        report = reports[variant] = {
            "discovery_s": round(discovery, 1),
            "commit_round_s": result["commit"],
            "steady_round_s": result["steady"],
            "gen2_pauses_during_rounds": [len(gen2), round(max(gen2, default=0) * 1000, 1)],
            "produce_ms": {
                "idle_p50": percentile(produce_idle, 0.5),
                "idle_p99": percentile(produce_idle, 0.99),
                "round_p50": percentile(produce_busy, 0.5),
                "round_p99": percentile(produce_busy, 0.99),
                "samples": [len(produce_idle), len(produce_busy)],
            },
            "fetch_ms": {
                "idle_p50": percentile(fetch_idle, 0.5),
                "idle_p99": percentile(fetch_idle, 0.99),
                "round_p50": percentile(fetch_busy, 0.5),
                "round_p99": percentile(fetch_busy, 0.99),
            },
        }
        print(f"== {variant}")
        print(f"commit round ({args.groups} groups committed): {spread(result['commit'])}")
        print(f"steady round (nothing to change): {spread(result['steady'])}")
        print(f"full collections during the rounds: {len(gen2)}, longest "
              f"{max(gen2, default=0) * 1000:.0f} ms")  # fmt: skip
        for what in ("produce_ms", "fetch_ms"):
            r = report[what]
            print(f"{what[:-3]} latency p50 {r['idle_p50']:.2f} -> {r['round_p50']:.2f} ms "
                  f"({r['round_p50'] / r['idle_p50']:.1f}x), p99 {r['idle_p99']:.2f} -> "
                  f"{r['round_p99']:.2f} ms ({r['round_p99'] / r['idle_p99']:.1f}x) "
                  "(idle -> during rounds)")  # fmt: skip
    print(json.dumps(reports))
    if profile is not None:
        profile.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


class Gen2Pauses:
    """The destination's full collections (generation 2) while ``on``: how long each took."""

    def __init__(self) -> None:
        self.on = False
        self.pauses: list[float] = []
        self._began = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        elif self.on:
            self.pauses.append(time.perf_counter() - self._began)


async def _apply_variant(broker, variant: str) -> None:
    """``sessions`` / ``sessionless``: the mirror fetchers' Fetch with or without a KIP-227
    session (the endpoint's handler swapped; a new one starts with a full fetch). ``+frozen``:
    every object alive now (the 10,000 partitions' state) collected once and frozen out of the
    collector's sight (what the broker's own policy does, ``kcore/server/gc_policy.py``);
    ``+unfrozen``: ``gc.unfreeze()`` (as before that policy); neither: as the broker left it."""
    from kcore.replica.fetch_session_handler import FetchSessionHandler

    fetch, _, gc_policy = variant.partition("+")
    for fetchers in broker.mirror_fetchers.values():
        for task in fetchers.manager.fetchers.values():
            task.endpoint.session = FetchSessionHandler() if fetch == "sessions" else None
    if gc_policy == "frozen":
        t = time.perf_counter()
        gc.collect()
        gc.freeze()
        print(f"gc.collect() + gc.freeze(): {(time.perf_counter() - t) * 1000:.0f} ms, "
              f"{gc.get_freeze_count()} objects frozen", flush=True)  # fmt: skip
    elif gc_policy == "unfrozen":
        gc.unfreeze()


async def _commit_all(bootstrap: str, args, offset: int) -> None:
    async with KafkaClient(bootstrap) as client:
        await commit_groups(client, args, offset)


if __name__ == "__main__":
    main()
