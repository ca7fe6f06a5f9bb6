"""A seeded, deterministic simulation of one mirror partition between two clusters.

Theory of operation
-------------------
Time is an integer number of milliseconds that only moves when the next event happens; all
randomness comes from one ``random.Random(seed)``, so a seed replays the same run exactly.
Events sit in one heap ordered by (time, sequence number).

Two :class:`Cluster` objects each hold one partition: a :class:`SimLog` (batches with offsets,
leader epochs, producer ids, transactions, control markers), the partition's leader epoch as
the controller keeps it, the coordinator's store for the mirror partition (what
``__mirror_state`` holds: the :class:`~kcore.mirror.events.PersistedState`) and the topic's
``mirror.name``. One is the source; the other runs a
:class:`~kcore.mirror.machine.MirrorPartitionMachine` and is the destination. The simulation
plays the machine's shell:

* the coordinator's store is reached through a FIFO channel that delays every request, loses
  some (never applied, never answered), fails some, and loses some answers of applied writes;
  a crashed leader's writes still in the channel land or not, before the new leader's read;
* a simulated fetcher (truncation on fetch with the last fetched epoch, READ_COMMITTED up to
  the source's LSO, out of range below the source's log start restarting the log there, the
  producer id rewritten to ``-(p+2)``) asks :meth:`may_append` before every append;
* the controller bumps epochs (BumpLeaderEpochs fails at random) and announces them late;
* the source appends batches (plain, idempotent, transactional; commits, aborts, a
  transaction left open), changes leaders (epoch + 1), sometimes truncates its unreplicated
  tail (an unclean election), deletes old data (retention) and becomes unreachable;
* the destination crashes (the machine object is thrown away; a new one is built from the
  persisted state only) and changes leaders; "clients" try to write to it at random;
* the operator pauses, resumes, stops, starts again and enforces exclude patterns, each
  validated against the stored states as the broker does (D-26).

The properties, checked as the run goes, read as sentences:

* no local write is ever accepted unless the partition's persisted state is STOPPED;
* every mirrored batch sits at the offset, with the epoch and content, it had on the source;
* no mirrored record is lost: the destination removes a batch the source still holds at that
  offset only when a start truncates by the source's last mirror epoch (M-37) or the source
  deleted it (D-16);
* once STOPPED, the partition holds no open transaction, and every epoch written after the
  stop is greater than the last mirror epoch;
* every transition the machine makes is in the table (the machine checks) and is recorded,
  so a suite of seeds can assert that every row was exercised;
* after the faults end, a mirroring destination equals the source up to its LSO, and a
  failback (the old source mirroring from the promoted destination) converges the same way.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from kcore.mirror import outputs as o
from kcore.mirror.events import (
    BecameLeader,
    LastMirrorEpochFetched,
    LeaderEpochChanged,
    MirroredEpochAhead,
    MirrorNameChanged,
    OpCompleted,
    OpFailed,
    PersistedState,
    RecoveryRequested,
    SourceFailed,
    SourceTopicDeleted,
    StateLoaded,
    StoppedBeingLeader,
)
from kcore.mirror.machine import MachineConfig, MirrorPartitionMachine
from kcore.mirror.state import (
    MirrorMode,
    MirrorOperation,
    MirrorPartitionState,
    check_operation,
    parse_mirror_name,
)
from kcore.protocol.errors import ErrorCode, KafkaError

S = MirrorPartitionState
TOPIC = "orders"
MIRROR = "m"


class SimulationFailure(AssertionError):
    """A property failed; the message names the seed to replay."""


@dataclass(frozen=True)
class Batch:
    """One batch of one record. ``kind``: data, commit or abort (a marker), or pid_reset."""

    offset: int
    epoch: int
    uid: int  # content identity: equal uids are byte-identical batches
    producer_id: int = -1
    transactional: bool = False
    kind: str = "data"

    def mirrored(self) -> Batch:
        """The batch as the mirror appends it: the producer id rewritten (D-17)."""
        pid = self.producer_id
        return Batch(self.offset, self.epoch, self.uid, -(pid + 2), self.transactional, self.kind)

    def same_source_batch(self, other: Batch) -> bool:
        return (self.offset, self.epoch, self.uid) == (other.offset, other.epoch, other.uid)


class EpochView:
    """The leader-epoch cache part of :class:`SimLog` the machine reads."""

    def __init__(self, log: SimLog) -> None:
        self._log = log

    def _entries(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for b in self._log.batches:
            if not out or b.epoch > out[-1][0]:
                out.append((b.epoch, b.offset))
        return out

    def next_epoch(self, epoch: int) -> int | None:
        return next((e for e, _ in self._entries() if e > epoch), None)

    def epoch_entry(self, epoch: int):
        from kcore.log.checkpoint import EpochEntry

        return next((EpochEntry(e, s) for e, s in self._entries() if e == epoch), None)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch / a diverging epoch, as Kafka's ``endOffsetFor``."""
        entries = self._entries()
        if not entries or epoch < 0:
            return -1, -1
        if entries[-1][0] == epoch:
            return epoch, self._log.end_offset
        later = [i for i, (e, _) in enumerate(entries) if e > epoch]
        if not later:  # above every epoch here: where our latest one ends
            return entries[-1][0], self._log.end_offset
        i = later[0]
        if i == 0:
            return epoch, entries[0][1]
        return entries[i - 1][0], entries[i][1]


@dataclass
class SimLog:
    """A partition log: batches in offset order from ``log_start``; one record per batch."""

    log_start: int = 0
    batches: list[Batch] = field(default_factory=list)
    next_offset: int = 0

    def __post_init__(self) -> None:
        self.epoch_cache = EpochView(self)

    @property
    def end_offset(self) -> int:
        return self.next_offset

    @property
    def log_end_offset(self) -> int:
        return self.next_offset

    @property
    def latest_epoch(self) -> int | None:
        return self.batches[-1].epoch if self.batches else None

    def at(self, offset: int) -> Batch | None:
        i = offset - (self.batches[0].offset if self.batches else 0)
        if self.batches and 0 <= i < len(self.batches) and self.batches[i].offset == offset:
            return self.batches[i]
        return None

    def append(self, batch: Batch) -> None:
        assert batch.offset == self.next_offset, (batch, self.next_offset)
        self.batches.append(batch)
        self.next_offset += 1

    def truncate_to(self, offset: int) -> list[Batch]:
        if offset >= self.next_offset:
            return []
        removed = [b for b in self.batches if b.offset >= offset]
        self.batches = [b for b in self.batches if b.offset < offset]
        self.next_offset = max(offset, self.log_start)
        return removed

    def truncate_fully_and_start_at(self, offset: int) -> list[Batch]:
        removed, self.batches = self.batches, []
        self.log_start = self.next_offset = offset
        return removed

    def delete_before(self, offset: int) -> None:
        offset = min(offset, self.next_offset)
        self.batches = [b for b in self.batches if b.offset >= offset]
        self.log_start = max(self.log_start, offset)

    def ongoing_transactions(self) -> set[int]:
        open_: set[int] = set()
        for b in self.batches:
            if b.kind == "pid_reset":
                open_.clear()
            elif b.transactional and b.kind == "data":
                open_.add(b.producer_id)
            elif b.kind in ("commit", "abort"):
                open_.discard(b.producer_id)
        return open_

    def last_stable_offset(self) -> int:
        first_open: dict[int, int] = {}
        for b in self.batches:
            if b.kind == "pid_reset":
                first_open.clear()
            elif b.transactional and b.kind == "data":
                first_open.setdefault(b.producer_id, b.offset)
            elif b.kind in ("commit", "abort"):
                first_open.pop(b.producer_id, None)
        return min(first_open.values(), default=self.next_offset)


@dataclass
class Cluster:
    """One cluster's view of the partition: log, leader epoch, coordinator store, config."""

    name: str
    log: SimLog = field(default_factory=SimLog)
    leader_epoch: int = 0
    stored: PersistedState | None = None
    mirror_name: str | None = None
    # The destination side, while it is one.
    machine: MirrorPartitionMachine | None = None
    incarnation: int = 0
    access: o.WriteAccess | None = None
    fetcher: dict | None = None
    down_until: int | None = None
    polls: set = field(default_factory=set)  # (incarnation, deadline) scheduled
    channel_free_at: int = 0


@dataclass
class Faults:
    """How often things go wrong (probabilities per request, mean gaps between events)."""

    store_lost: float = 0.05
    store_failed: float = 0.05
    store_ack_lost: float = 0.05
    store_delay_ms: int = 50
    bump_failed: float = 0.15
    append_failed: float = 0.02
    crash_every_ms: int = 6_000
    operator_every_ms: int = 1_500
    source_outage_every_ms: int = 8_000
    source_outage_ms: int = 6_000
    source_epoch_every_ms: int = 2_500
    source_unclean_every_ms: int = 12_000
    source_delete_topic: float = 0.03  # per operator action
    retention_every_ms: int = 5_000


CALM = Faults(0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
CHAOS = Faults()
# Harsher: bumps fail in streaks and the source is away for long, to reach FAILED's rows.
HARSH = Faults(
    store_lost=0.1,
    store_failed=0.1,
    store_ack_lost=0.1,
    bump_failed=0.7,
    append_failed=0.2,
    crash_every_ms=4_000,
    source_outage_every_ms=5_000,
    source_outage_ms=20_000,
)

CONFIG = MachineConfig(
    failed_retry_backoff_ms=500,
    failed_retry_backoff_max_ms=8_000,
    failed_max_retries=3,
    request_timeout_ms=1_000,
    retry_backoff_ms=20,
    retry_backoff_max_ms=200,
)


class Simulation:
    """A seeded run: ``source`` mirrored to ``destination`` under :data:`MIRROR`."""

    def __init__(self, seed: int, faults: Faults = CHAOS, *, mirror_name: str = MIRROR) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults
        self.now = 0
        self.steps = 0
        self._seq = 0
        self._events: list[tuple[int, int, str, Any]] = []
        self.source = Cluster("A")
        self.destination = Cluster("B", mirror_name=mirror_name)
        self.chaos = True
        self.transitions: set[tuple[S, S]] = set()
        self.local_writes_accepted = 0
        self.source_unreachable_until = -1
        self._uid = 0
        self._open_txn: dict[int, bool] = {}  # source producer id -> transaction open
        self.source_writes = True
        self.stops_completed = 0
        self.failback = False
        # Where each batch was first written: uid -> (cluster, offset, epoch).
        self._origin: dict[int, tuple[Cluster, int, int]] = {}
        self._start(self.destination)
        self._schedule(10, "source_append")
        self._schedule(300, "local_write")
        for kind, gap in (
            ("crash", faults.crash_every_ms),
            ("operator", faults.operator_every_ms),
            ("outage", faults.source_outage_every_ms),
            ("source_epoch", faults.source_epoch_every_ms),
            ("source_unclean", faults.source_unclean_every_ms),
            ("retention", faults.retention_every_ms),
        ):
            if gap:
                self._schedule(self._gap(gap), kind, gap)

    # ---- driving ------------------------------------------------------------------------

    def fail(self, message: str) -> None:
        m = self.destination.machine
        raise SimulationFailure(
            f"{message}\n  seed={self.seed} step={self.steps} now={self.now}ms (replay: "
            f"SEED={self.seed} pytest tests/mirror/test_simulation.py)\n  {m!r}\n  "
            f"stored={self.destination.stored}"
        )

    def _gap(self, mean: int) -> int:
        return max(1, int(self.rng.expovariate(1 / mean)))

    def _schedule(self, delay: int, kind: str, data: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (self.now + max(0, delay), self._seq, kind, data))

    def step(self) -> None:
        time, _, kind, data = heapq.heappop(self._events)
        self.now = time
        self.steps += 1
        getattr(self, f"_on_{kind}")(data)

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self._events and self._events[0][0] <= end:
            self.step()
        self.now = max(self.now, end)

    def run_until(self, predicate, within_ms: int, what: str) -> None:
        end = self.now + within_ms
        while not predicate():
            if not self._events or self._events[0][0] > end:
                self.fail(f"liveness: {what} not reached within {within_ms} ms")
            self.step()

    def heal(self) -> None:
        """End the faults: the periodic fault events stop rescheduling themselves."""
        self.chaos = False
        self.source_unreachable_until = -1
        self.faults = Faults(**{**CALM.__dict__, "store_delay_ms": 10})

    # ---- the destination's machine and its shell ----------------------------------------

    def _start(self, cluster: Cluster) -> None:
        cluster.incarnation += 1
        cluster.fetcher = None
        cluster.access = None
        cluster.machine = MirrorPartitionMachine(
            TOPIC, 0, cluster.log, CONFIG, mirror_name=cluster.mirror_name, now=self.now
        )
        self._deliver(cluster, BecameLeader(cluster.leader_epoch))

    def _deliver(self, cluster: Cluster, event, incarnation: int | None = None) -> None:
        if incarnation is not None and incarnation != cluster.incarnation:
            return  # an answer to a crashed incarnation: its connection is gone
        if cluster.machine is None or cluster.down_until is not None:
            return
        cluster.machine.handle(event, self.now)
        self._poll(cluster)

    def _poll(self, cluster: Cluster) -> None:
        machine = cluster.machine
        poll = machine.poll(self.now)
        for out in poll.outputs:
            self._execute(cluster, out)
            if cluster.machine is not machine:
                return
        if poll.deadline is not None and poll.deadline <= self.now:
            self.fail(f"the machine asked to be polled again at once ({poll.deadline})")
        key = (cluster.incarnation, poll.deadline)
        if poll.deadline is not None and key not in cluster.polls:
            cluster.polls.add(key)
            self._schedule(poll.deadline - self.now, "poll", key and (cluster, key))

    def _on_poll(self, data) -> None:
        cluster, key = data
        cluster.polls.discard(key)
        if key[0] != cluster.incarnation or cluster.down_until is not None:
            return
        self._poll(cluster)

    def _answer(self, cluster: Cluster, delay: int, event) -> None:
        self._schedule(delay, "answer", (cluster, cluster.incarnation, event))

    def _on_answer(self, data) -> None:
        cluster, incarnation, event = data
        self._deliver(cluster, event, incarnation)

    def _other(self, cluster: Cluster) -> Cluster:
        return self.source if cluster is self.destination else self.destination

    def _execute(self, cluster: Cluster, out) -> None:  # noqa: C901 - one branch per output
        rng, f = self.rng, self.faults
        if isinstance(out, o.SetWriteAccess):
            cluster.access = out.access
        elif isinstance(out, o.Transitioned):
            self.transitions.add((out.old, out.new))
            if out.new is S.STOPPED:
                self._check_stopped(cluster)
        elif isinstance(out, o.ReadState | o.PersistState | o.PersistLastMirrorEpoch):
            self._store_request(cluster, out)
        elif isinstance(out, o.FetchLastMirrorEpoch):
            if self._unreachable():
                self._answer(cluster, 50, OpFailed(out.op, ErrorCode.MIRROR_SOURCE_UNAVAILABLE))
                return
            source = self._other(cluster)
            stored = source.stored
            lme = stored.last_mirror_epoch if stored and stored.state is S.STOPPED else -1
            answer = LastMirrorEpochFetched(out.op, lme, source.log.log_start, source.leader_epoch)
            self._answer(cluster, rng.randint(1, 30), answer)
        elif isinstance(out, o.TruncateTo | o.TruncateFullyAndStartAt):
            if isinstance(out, o.TruncateTo):
                removed = cluster.log.truncate_to(out.offset)
            else:
                removed = cluster.log.truncate_fully_and_start_at(out.offset)
            self._check_removal(cluster, removed, out)
            self._answer(cluster, rng.randint(1, 20), OpCompleted(out.op))
        elif isinstance(out, o.AddFetcher):
            cluster.fetcher = {"offset": out.fetch_offset, "failures": 0}
            self._schedule(rng.randint(1, 10), "fetch", (cluster, cluster.incarnation))
        elif isinstance(out, o.RemoveFetcher):
            cluster.fetcher = None
            self._answer(cluster, rng.randint(0, 5), OpCompleted(out.op))
        elif isinstance(out, o.RequestEpochBump):
            if rng.random() < f.bump_failed:
                self._answer(cluster, 20, OpFailed(out.op, ErrorCode.REQUEST_TIMED_OUT))
                return
            cluster.leader_epoch = max(cluster.leader_epoch + 1, out.min_leader_epoch)
            self._answer(cluster, rng.randint(1, 20), OpCompleted(out.op))
            self._answer(cluster, rng.randint(1, 60), LeaderEpochChanged(cluster.leader_epoch))
        elif isinstance(out, o.AppendAbortMarkers | o.AppendMirrorPidReset):
            if rng.random() < f.append_failed:
                self._answer(cluster, 5, OpFailed(out.op, ErrorCode.KAFKA_STORAGE_ERROR))
                return
            log = cluster.log
            if isinstance(out, o.AppendAbortMarkers):
                for pid in sorted(log.ongoing_transactions()):
                    self._marker(cluster, out.leader_epoch, "abort", pid)
            else:
                self._marker(cluster, out.leader_epoch, "pid_reset", -1)
            self._answer(cluster, rng.randint(1, 10), OpCompleted(out.op))
        else:
            self.fail(f"unexpected output {out!r}")

    def _marker(self, cluster: Cluster, epoch: int, kind: str, pid: int) -> None:
        self._uid += 1
        batch = Batch(cluster.log.end_offset, epoch, self._uid, pid, kind == "abort", kind)
        cluster.log.append(batch)
        self._origin[self._uid] = (cluster, batch.offset, batch.epoch)

    def _unreachable(self) -> bool:
        return self.now < self.source_unreachable_until

    def _store_request(self, cluster: Cluster, out) -> None:
        """FIFO to the coordinator: each request waits for the one before it."""
        f, rng = self.faults, self.rng
        start = max(self.now, cluster.channel_free_at)
        done = start + rng.randint(1, f.store_delay_ms)
        cluster.channel_free_at = done
        self._schedule(done - self.now, "store", (cluster, cluster.incarnation, out))

    def _on_store(self, data) -> None:
        cluster, incarnation, out = data
        rng, f = self.rng, self.faults
        if rng.random() < f.store_lost:
            return  # never applied, never answered: the machine times it out
        if rng.random() < f.store_failed:
            self._schedule(
                1, "answer", (cluster, incarnation, OpFailed(out.op, ErrorCode.NOT_COORDINATOR))
            )
            return
        if isinstance(out, o.ReadState):
            answer = StateLoaded(out.op, cluster.stored)
        else:
            if isinstance(out, o.PersistState):
                cluster.stored = out.record
            else:
                base = cluster.stored or PersistedState(S.UNKNOWN)
                cluster.stored = PersistedState(
                    base.state,
                    base.previous_state,
                    base.retry_attempt,
                    out.last_mirror_epoch,
                    base.reason,
                )
            if rng.random() < f.store_ack_lost:
                return
            answer = OpCompleted(out.op)
        self._schedule(rng.randint(1, 20), "answer", (cluster, incarnation, answer))

    # ---- the fetcher ----------------------------------------------------------------------

    def _on_fetch(self, data) -> None:  # noqa: C901 - the fetch loop of one partition
        cluster, incarnation = data
        fetcher = cluster.fetcher
        if incarnation != cluster.incarnation or fetcher is None or cluster.down_until:
            return
        machine, log, source = cluster.machine, cluster.log, self._other(cluster)
        again = self.rng.randint(5, 25)
        if self._unreachable():
            fetcher["failures"] += 1
            if fetcher["failures"] >= 5:
                cluster.fetcher = None
                self._deliver(
                    cluster,
                    SourceFailed(ErrorCode.MIRROR_SOURCE_UNAVAILABLE, "source unreachable"),
                )
                return
            self._schedule(again * 4, "fetch", data)
            return
        fetcher["failures"] = 0
        offset = log.end_offset
        # Truncation on fetch (M-27): the source says where our last epoch ends.
        last = log.latest_epoch
        if last is not None:
            epoch, end = source.log.epoch_cache.end_offset_for(last)
            if epoch != last or end < offset:
                own_end = log.epoch_cache.end_offset_for(epoch)[1] if epoch >= 0 else -1
                cut = min(end, own_end) if own_end >= 0 else end
                if cut < 0:
                    cut = log.log_start
                removed = log.truncate_to(max(cut, log.log_start))
                self._check_removal(cluster, removed, "truncation on fetch")
                self._schedule(again, "fetch", data)
                return
        if offset < source.log.log_start:  # D-16: the source deleted what we need
            removed = log.truncate_fully_and_start_at(source.log.log_start)
            self._check_removal(cluster, removed, "out of range (D-16)")
            offset = log.end_offset
        upper = source.log.last_stable_offset()
        if offset > source.log.end_offset:
            cluster.fetcher = None
            self._deliver(
                cluster,
                SourceFailed(ErrorCode.OFFSET_OUT_OF_RANGE, "fetch offset above source LEO"),
            )
            return
        for off in range(offset, min(upper, offset + self.rng.randint(1, 6))):
            batch = source.log.at(off)
            if batch is None:
                break
            if not machine.may_append(batch.epoch):
                if batch.epoch > machine.leader_epoch and machine.state is S.MIRRORING:
                    self._deliver(cluster, MirroredEpochAhead(batch.epoch))
                break
            log.append(batch.mirrored())
        if cluster.fetcher is fetcher and incarnation == cluster.incarnation:
            self._schedule(again, "fetch", data)

    # ---- properties -----------------------------------------------------------------------

    def _check_removal(self, cluster: Cluster, removed: list[Batch], why) -> None:
        """No mirrored record is lost: a removed batch the source still holds at its offset
        may only go by a start's LME truncation (M-37) or the source's retention (D-16)."""
        source = self._other(cluster)
        for b in removed:
            same = source.log.at(b.offset)
            if same is None or not same.same_source_batch(b):
                continue  # diverged or local: it had to go
            if isinstance(why, o.TruncateFullyAndStartAt):
                continue  # LME -1: mirroring from scratch (M-37, M-70)
            if isinstance(why, o.TruncateTo) and cluster.machine.state is S.LOG_TRUNCATION:
                # A start's cut at the first epoch above the LME: only epochs above it go.
                lme = source.stored.last_mirror_epoch if source.stored else -1
                if b.epoch > lme:
                    continue
            self.fail(f"mirrored batch {b} lost by {why!r} although the source still has it")

    def check_prefix(self, cluster: Cluster | None = None) -> None:
        """Every mirrored batch sits where the source wrote it, with its epoch and content."""
        cluster = cluster or self.destination
        for b in cluster.log.batches:
            origin = self._origin.get(b.uid)
            if origin is None:
                self.fail(f"{b} was written by nobody")
            if origin[0] is not cluster and origin[1:] != (b.offset, b.epoch):
                self.fail(f"mirrored batch {b} is not where the source wrote it: {origin[1:]}")

    def _check_stopped(self, cluster: Cluster) -> None:
        self.stops_completed += 1
        log = cluster.log
        if log.ongoing_transactions():
            self.fail(f"STOPPED with open transactions {log.ongoing_transactions()}")
        if log.last_stable_offset() != log.end_offset:
            self.fail("STOPPED with the LSO below the log end")
        lme = cluster.machine.record.last_mirror_epoch
        if lme >= 0 and cluster.leader_epoch <= lme:
            self.fail(f"STOPPED at leader epoch {cluster.leader_epoch} <= LME {lme}")
        if lme >= 0 and (not log.batches or log.batches[-1].kind != "pid_reset"):
            self.fail("STOPPED without a MIRROR_PID_RESET after the mirrored data")

    # ---- the world's events ---------------------------------------------------------------

    def _write(self, cluster: Cluster, kind: str = "data", pid: int = -1, txn: bool = False):
        self._uid += 1
        batch = Batch(cluster.log.end_offset, cluster.leader_epoch, self._uid, pid, txn, kind)
        cluster.log.append(batch)
        self._origin[self._uid] = (cluster, batch.offset, batch.epoch)

    def writable_source(self) -> Cluster | None:
        """The source the world's events act on (the original one, until the failback)."""
        return None if self.failback else self.source

    def _on_source_append(self, _) -> None:
        source = self.writable_source()
        if source is not None and self.source_writes:
            r = self.rng.random()
            pid = self.rng.randint(0, 3)
            if r < 0.5:
                self._write(source)
            elif r < 0.7:
                self._write(source, pid=pid)  # idempotent
            elif not self._open_txn.get(pid):
                self._open_txn[pid] = True
                self._write(source, pid=pid, txn=True)
            elif r < 0.85:
                self._write(source, pid=pid, txn=True)
            else:
                self._open_txn[pid] = False
                self._write(source, "commit" if r < 0.95 else "abort", pid, True)
        self._schedule(self.rng.randint(5, 60), "source_append")

    def _on_local_write(self, _) -> None:
        """A client of the destination tries to produce: the guard decides."""
        cluster = self.destination
        up = cluster.machine is not None and cluster.down_until is None
        if up and cluster.access is o.WriteAccess.WRITABLE:
            stored = cluster.stored
            if cluster.mirror_name and (stored is None or stored.state is not S.STOPPED):
                self.fail(f"a local write was accepted while the persisted state is {stored}")
            if cluster.machine.state is not S.STOPPED and cluster.mirror_name:
                self.fail("a local write was accepted while the partition is not STOPPED")
            lme = stored.last_mirror_epoch if stored else -1
            if cluster.leader_epoch <= lme:
                self.fail(f"a local write at epoch {cluster.leader_epoch} <= LME {lme}")
            self.local_writes_accepted += 1
            self._write(cluster, pid=100 + self.rng.randint(0, 2))
        self._schedule(self.rng.randint(20, 200), "local_write")

    def _on_crash(self, gap) -> None:
        cluster = self.destination
        if not self.chaos:
            return
        if cluster.down_until is None and cluster.machine is not None:
            if self.rng.random() < 0.5:
                # Leader change: the old leader lets go, a new one (a new machine) takes over.
                cluster.machine.handle(StoppedBeingLeader(), self.now)
                self._poll(cluster)
                cluster.leader_epoch += 1
                self._start(cluster)
            else:
                cluster.down_until = self.now + self.rng.randint(50, 2_000)
                cluster.incarnation += 1  # kill -9: the machine and its fetcher are gone
                cluster.fetcher = None
                self._schedule(cluster.down_until - self.now, "restart")
        self._schedule(self._gap(gap), "crash", gap)

    def _on_restart(self, _) -> None:
        cluster = self.destination
        cluster.down_until = None
        cluster.leader_epoch += 1  # the restarted broker leads again in a new epoch
        self._start(cluster)

    def _on_outage(self, gap) -> None:
        if not self.chaos:
            return
        self.source_unreachable_until = self.now + self.rng.randint(
            100, self.faults.source_outage_ms
        )
        self._schedule(self._gap(gap), "outage", gap)

    def _on_source_epoch(self, gap) -> None:
        if not self.chaos:
            return
        source = self.writable_source()
        if source is not None and source is self.source:
            source.leader_epoch += 1
        self._schedule(self._gap(gap), "source_epoch", gap)

    def _on_source_unclean(self, gap) -> None:
        """An unclean election on the source: its unreplicated tail goes, a new epoch starts."""
        if not self.chaos:
            return
        source = self.writable_source()
        if source is self.source and source.log.batches:
            cut = max(source.log.log_start, source.log.end_offset - self.rng.randint(1, 4))
            source.log.truncate_to(cut)
            source.leader_epoch += 1
            self._open_txn.clear()
        self._schedule(self._gap(gap), "source_unclean", gap)

    def _on_retention(self, gap) -> None:
        if not self.chaos:
            return
        source = self.writable_source()
        if source is self.source:
            keep = self.rng.randint(5, 40)
            source.log.delete_before(source.log.end_offset - keep)
        self._schedule(self._gap(gap), "retention", gap)

    def _on_operator(self, gap) -> None:
        if not self.chaos:
            return
        self._schedule(self._gap(gap), "operator", gap)
        cluster = self.destination
        if cluster.mirror_name is None:
            return
        if self.rng.random() < self.faults.source_delete_topic:
            self._set_mirror_name(cluster, f"{MIRROR}.stopped", SourceTopicDeleted())
            return
        op = self.rng.choice(["pause", "resume", "stop", "start", "start", "exclude"])
        stored = cluster.stored.state if cluster.stored else S.UNKNOWN
        _, mode = parse_mirror_name(cluster.mirror_name)
        if op == "exclude":  # exclude-pattern enforcement stops without state validation
            self._set_mirror_name(cluster, f"{MIRROR}.stopped")
            return
        operation = MirrorOperation(op)
        try:
            noop = check_operation(operation, MIRROR, {(TOPIC, 0): stored})
        except KafkaError:
            return
        if noop:
            return
        if op == "resume" and mode is not MirrorMode.PAUSED:
            return  # the controller's suffix check
        value = {"pause": ".paused", "stop": ".stopped"}.get(op, "")
        value = MIRROR + value
        if value == cluster.mirror_name:
            # FAILED, and the config already says so: the operator's retry.
            self._schedule(self.rng.randint(1, 50), "signal", (cluster, RecoveryRequested()))
        else:
            self._set_mirror_name(cluster, value)

    def _set_mirror_name(self, cluster: Cluster, value: str, then=None) -> None:
        cluster.mirror_name = value
        self._schedule(self.rng.randint(1, 100), "signal", (cluster, MirrorNameChanged(value)))
        if then is not None:
            self._schedule(self.rng.randint(1, 100), "signal", (cluster, then))

    def _on_signal(self, data) -> None:
        cluster, event = data
        self._deliver(cluster, event)

    # ---- convergence ----------------------------------------------------------------------

    def converged(self, cluster: Cluster | None = None) -> bool:
        """The destination is MIRRORING and holds the source's log up to the source's LSO."""
        cluster = cluster or self.destination
        source = self._other(cluster)
        m = cluster.machine
        if m is None or m.state is not S.MIRRORING or cluster.fetcher is None:
            return False
        upper = source.log.last_stable_offset()
        if cluster.log.end_offset != upper:
            return False
        return all(
            (b := cluster.log.at(off)) is not None and b.same_source_batch(source.log.at(off))
            for off in range(max(source.log.log_start, cluster.log.log_start), upper)
        )

    def settle_to(self, mirror_name: str) -> None:
        """Heal, then have the operator ask for ``mirror_name`` until the partition gets there."""
        self.heal()
        cluster = self.destination
        if cluster.mirror_name != mirror_name:
            self._set_mirror_name(cluster, mirror_name)
        self.run_for(CONFIG.failed_retry_backoff_max_ms * 2)
        m = cluster.machine
        if m is not None and m.state is S.FAILED:
            self._deliver(cluster, RecoveryRequested())

    def fail_over_and_back(self) -> None:
        """Stop the destination (failover), write to it, then mirror back into the old source."""
        self.settle_to(MIRROR)
        self.run_until(self.converged, 60_000, "the destination converged")
        self.source_writes = False
        self._set_mirror_name(self.destination, f"{MIRROR}.stopped")
        self.run_until(
            lambda: (
                self.destination.machine.state is S.STOPPED
                and self.destination.access is o.WriteAccess.WRITABLE
            ),
            60_000,
            "STOPPED",
        )
        promoted, old = self.destination, self.source
        self.failback = True
        # The old source wrote a little more before it died: lost by the failback (M-70).
        for _ in range(self.rng.randint(0, 3)):
            self._write(old)
        self.run_for(2_000)  # local writes land on the promoted side
        # Failback: a mirror of the same name on the old source, pointing at the promoted one.
        old.mirror_name = MIRROR
        self._start(old)
        self.run_until(lambda: self.converged(old), 60_000, "the failback converged")
        lme = promoted.stored.last_mirror_epoch
        for b in old.log.batches:
            if self._origin.get(b.uid, (None,))[0] is old and b.epoch > lme:
                self.fail(f"{b} was written on the old source after the LME and survived")


def run_chaos(seed: int, duration_ms: int = 60_000) -> Simulation:
    """A run under faults (every third seed harsh), then a failover and a failback."""
    sim = Simulation(seed, HARSH if seed % 3 == 0 else CHAOS)
    sim.run_for(duration_ms)
    sim.check_prefix()
    sim.fail_over_and_back()
    sim.check_prefix(sim.source)
    sim.check_prefix(sim.destination)
    return sim


def run_stopped_before_any_state(seed: int) -> Simulation:
    """A partition whose topic is stopped before any state was recorded (an exclude pattern
    racing the first start): it still runs STOPPING, becomes writable, and can start later."""
    sim = Simulation(seed, CALM, mirror_name=f"{MIRROR}.stopped")
    sim.run_until(lambda: sim.destination.access is o.WriteAccess.WRITABLE, 10_000, "writable")
    sim.heal()
    sim._set_mirror_name(sim.destination, MIRROR)
    sim.run_until(sim.converged, 30_000, "mirroring after the start")
    sim.check_prefix()
    return sim
