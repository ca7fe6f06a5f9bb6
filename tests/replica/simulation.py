"""A deterministic simulation of one replicated partition: leader, followers and the controller.

Theory of operation
-------------------
Time is an integer number of milliseconds that moves only to the next event. Events sit in
one heap ordered by (time, sequence number), and all randomness comes from one
``random.Random(seed)``: a seed replays the same run, step for step. There are no sockets and
no Trio; what runs is kcore's own sans-IO code:

* the **controller** is the real :class:`~kcore.metadata.QuorumController` behind the metadata
  tests' in-memory driver (``tests/metadata/harness.py``, a one-voter quorum: every record is
  committed at once): broker registration, heartbeats and session fencing, the elections of
  ``PartitionChangeBuilder`` (``kcore.metadata.partition_change``: a leader from the ISR,
  outside it only with ``unclean.leader.election.enable``) and AlterPartition with its
  leader-epoch, partition-epoch and broker-epoch fencing (``kcore.metadata.replication``);
* each **broker** holds a real :class:`~kcore.replica.partition.Partition`: the leader's
  ``LeaderIsrState`` (HW, ISR shrink and expansion, AlterPartition proposals), the produce
  path's min.insync.replicas refusal, the fetch path's diverging-epoch answer (KIP-595), the
  follower's ``truncate_to_divergence`` and ``refetch_if_cut``, the follower's HW; the
  AlterPartition request and the handling of its answer are the broker's own
  (``kcore.server.replication``); acks=all completes by ``Broker.wait_for_high_watermarks``'
  rules (still leader at the append's epoch, HW past the append, maximal ISR at least
  min.insync.replicas).

Logs are a small in-memory model (:class:`MemoryLog`), not ``PartitionLog`` files: a run
appends thousands of records over hundreds of truncations on three replicas, for hundreds of
seeds, and the properties are about offsets and leader epochs, not bytes. The model keeps
the real log's rules where they matter: its leader-epoch cache IS kcore's
``LeaderEpochFileCache`` (over an in-memory checkpoint), assigned as ``PartitionLog`` does (a
batch's epoch only when above the latest), truncated with ``truncate_from_end``, and a
follower append below the log end offset is refused as the real one is.

**Crashes** lose nothing a broker appended: a produce is acknowledged only after its bytes are
in the page cache (``write_behind.py``: a client's append is written on the event loop before
the answer), and a process crash keeps the page cache; kcore fsyncs only on
``flush.messages`` / ``flush.ms`` (Kafka's defaults: never), like Kafka, which relies on
replication rather than fsync. So a crash here is a process crash (kill -9): the broker loses
its memory (roles, fetch positions, the produces it had not answered), keeps its log, and
comes back as a new incarnation that must register again. A power loss that drops unflushed
page cache is not modelled: with it, a broker restarting quickly inside its old session
while still in the ISR could be elected without records it had acknowledged, which is what
Kafka's KIP-966 (eligible leader replicas, unclean-shutdown detection) addresses, and kcore
does not run ELR yet. The properties below are therefore those of process crashes.

The **network** delays each message by 1..``max_delay_ms`` (so messages overtake one
another), drops a fraction ``loss`` of them, and cuts links (broker to broker, broker to
controller) for a while. A message to or from a crashed incarnation is dropped, as a dead TCP
connection would. Metadata reaches a broker only over its link to the controller: a broker cut
off from it keeps leading on stale metadata (a zombie) until it hears otherwise.

Properties, checked as the run goes (:attr:`Simulation.violations` collects each failure with
the time and the property's number, so a test can name what broke):

1. every acknowledged record is, at its acknowledged offset, in the log of every member of
   the controller's ISR, hence of every leader elected cleanly (checked whenever a broker
   becomes leader, the ISR changes, a member truncates, and at the end);
2. a leader's HW never decreases while it leads at one epoch, and never exceeds the log end
   offset of any member of its maximal ISR;
3. the controller's ISR members agree record for record with the leader below its HW;
4. once faults stop (links healed, every broker up, no loss) and the run goes on for
   ``quiet_ms``, every replica holds exactly the leader's log, all are in the ISR, and every
   HW is the log end offset (:meth:`Simulation.unconverged`);
0. no write is acknowledged unless at least min.insync.replicas replicas hold it, and none is
   appended while the leader's committed ISR is smaller than that (NOT_ENOUGH_REPLICAS).

With unclean election enabled property 1 may fail (the documented price of availability);
the simulation still converges.

``mutation`` breaks one rule on purpose, so the tests can show each property catches its
violation (:data:`MUTATIONS`).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.metadata import partition_change
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_state import AppendRecords, TruncateOnDivergence
from kcore.replica.follower import refetch_if_cut, truncate_to_divergence
from kcore.replica.partition import FetchParams, Partition, PartitionState
from kcore.server.replication import (
    ALTER_PARTITION_VERSION,
    alter_partition_request,
    apply_alter_partition_response,
)
from tests.metadata.harness import (
    REPLICATING,
    Driver,
    assigned_topic_request,
    registration_request,
)
from tests.replica.memory_log import MemoryLog

TOPIC = "t"
TP = (TOPIC, 0)
BROKERS = (1, 2, 3)
CONTROLLER = 0
MIN_ISR = 2

TICK_MS = 50
HEARTBEAT_MS = 500
SESSION_TIMEOUT_MS = 2000
LAG_MS = 1500  # replica.lag.time.max.ms
FETCH_TIMEOUT_MS = 1000
CALL_TIMEOUT_MS = 1000  # a controller call given up on: above any round trip (2 x max delay)
REQUEST_TIMEOUT_MS = 3000  # a produce's wait for the HW
FETCH_MAX_RECORDS = 32
CONVERGENCE_STEP_MS = 500  # how often a healed run looks whether it converged


# Each rule the simulation can break on purpose, and the property that must catch it.
MUTATIONS = {
    # the controller's election takes any live replica, in the ISR or not
    "elect_outside_isr": 1,
    # the leader's HW is its own log end offset, whatever its followers have
    "hw_from_leader_alone": 2,
    # the leader serves a follower without checking its last fetched epoch (no KIP-595)
    "skip_divergence_check": 3,
    # a follower told its log diverged does not truncate
    "skip_truncation": 4,
    # the produce path does not refuse while the ISR is below min.insync.replicas
    "ignore_min_isr": 0,
}


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class Faults:
    loss: float = 0.05  # each message, while faults last
    max_delay_ms: int = 40
    fault_mean_interval_ms: int = 1500  # between two crashes, restarts, cuts or heals
    max_down: int = 2  # brokers crashed at once
    produce_mean_interval_ms: int = 60

    def __post_init__(self) -> None:
        # A call given up on must have no answer still on the way (see CALL_TIMEOUT_MS).
        assert 2 * self.max_delay_ms < CALL_TIMEOUT_MS, self


@dataclass
class Wait:
    """An acks=all produce the leader has appended and not answered yet."""

    end: int
    epoch: int
    offset: int
    value: str
    deadline: int


@dataclass
class Broker:
    id: int
    log: MemoryLog  # the disk: survives a crash
    incarnation: int = 0
    up: bool = True
    partition: Partition = None  # type: ignore[assignment]
    broker_epoch: int = -1
    metadata_offset: int = -1
    fetching: int | None = None  # the id of the fetch in flight
    registering: int | None = None  # the id of the BrokerRegistration in flight
    call_sent_ms: int = 0
    fetch_sent_ms: int = 0
    next_heartbeat_ms: int = 0
    alter_in_flight: int | None = None  # the id of the AlterPartition in flight
    waits: list[Wait] = field(default_factory=list)
    last_hw: tuple[int, int, int] = (-1, -1, -1)  # (incarnation, leader epoch, HW) as leader


class Simulation:
    def __init__(
        self,
        seed: int,
        *,
        faults: Faults | None = None,
        unclean: bool = False,
        mutation: str | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        self.faulty = True
        self.mutation = mutation
        self.now = 0
        self.heap: list = []
        self.seq = 0
        self.next_request = 0
        self.cut: set[frozenset[int]] = set()
        self.acked: dict[int, str] = {}  # offset -> value
        self.violations: list[tuple[int, int, str]] = []  # (property, time, what)
        self.stats = dict(acked=0, refused=0, failed=0, elections=0, truncated=0)
        self.values = 0
        configs = {"min.insync.replicas": str(MIN_ISR)}
        if unclean:
            configs["unclean.leader.election.enable"] = "true"
        self.driver = Driver(
            seed=seed,
            max_replication_factor=REPLICATING,
            props={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
        )
        self.brokers = {b: Broker(b, MemoryLog(f"{TOPIC}-0@{b}")) for b in BROKERS}
        epochs = {}
        for b in BROKERS:
            self.driver.incarnations[b] = self._incarnation_id(b, 1)
            epochs[b] = self.driver.register(b)
        request = assigned_topic_request(TOPIC, [list(BROKERS)], configs)
        response = self.driver.run(self.driver.controller.create_topics(request))
        assert response.topics[0].error_code == 0, response
        self.topic_id = response.topics[0].topic_id
        for b in self.brokers.values():
            self._boot(b)
            b.broker_epoch = epochs[b.id]
        self.last_isr: tuple[int, ...] = ()
        self.last_leader = (-1, -1)
        self._at(0, self._tick)
        self._at(0, self._produce)
        self._at(self._fault_delay(), self._fault)

    # -- the event loop ---------------------------------------------------------------------

    def _at(self, time: int, fn: Callable, *args) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, fn, args))

    def run_until(self, end_ms: int) -> None:
        with self._mutated():
            while self.heap and self.heap[0][0] <= end_ms:
                self.now, _, fn, args = heapq.heappop(self.heap)
                fn(*args)
            self.now = end_ms

    def run(self, fault_ms: int, quiet_ms: int) -> Simulation:
        """``fault_ms`` of faults and produces, then every fault healed until the replicas
        converge, for at most ``quiet_ms`` (:attr:`converged_after_ms`: how long it took,
        None if they did not)."""
        self.run_until(fault_ms)
        self.heal()
        self.converged_after_ms = None
        for end in range(
            fault_ms + CONVERGENCE_STEP_MS, fault_ms + quiet_ms + 1, CONVERGENCE_STEP_MS
        ):
            self.run_until(end)
            if self.unconverged():
                continue
            self.converged_after_ms = end - fault_ms
            break
        self.check_acked_everywhere()
        return self

    @contextmanager
    def _mutated(self):
        """The rule ``mutation`` breaks, for the runs that show a property can fail."""
        if self.mutation == "elect_outside_isr":
            real = partition_change._elect

            def elect(reg, replicas, valid, acceptable, election):
                return real(reg, replicas, acceptable, acceptable, election)

            with mock.patch.object(partition_change, "_elect", elect):
                yield
        elif self.mutation == "hw_from_leader_alone":
            with mock.patch(
                "kcore.replica.isr.LeaderIsrState.high_watermark", lambda self, leo: leo
            ):
                yield
        else:
            yield

    # -- the network ------------------------------------------------------------------------

    def _linked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    def _incarnation(self, node: int) -> int:
        return 0 if node == CONTROLLER else self.brokers[node].incarnation

    def send(self, src: int, dst: int, fn: Callable, *args) -> None:
        """Deliver ``fn(*args)`` at ``dst`` later, unless the message is lost on the way."""
        if not self._linked(src, dst) or (self.faulty and self.rng.random() < self.faults.loss):
            return
        delay = self.rng.randint(1, self.faults.max_delay_ms)
        stamp = (self._incarnation(src), self._incarnation(dst))
        self._at(self.now + delay, self._deliver, src, dst, stamp, fn, args)

    def _deliver(self, src, dst, stamp, fn, args) -> None:
        if not self._linked(src, dst):
            return
        if stamp != (self._incarnation(src), self._incarnation(dst)):
            return  # a connection of a crashed incarnation
        if dst != CONTROLLER and not self.brokers[dst].up:
            return
        fn(*args)

    # -- faults -----------------------------------------------------------------------------

    def _fault_delay(self) -> int:
        return int(self.rng.expovariate(1 / self.faults.fault_mean_interval_ms)) + 1

    def _fault(self) -> None:
        if not self.faulty:
            return
        down = [b for b in self.brokers.values() if not b.up]
        kind = self.rng.choice(["crash", "restart", "cut", "heal", "cut_controller"])
        if kind == "crash" and len(down) < self.faults.max_down:
            self.crash(self.rng.choice([b for b in self.brokers.values() if b.up]))
        elif kind == "restart" and down:
            self.restart(self.rng.choice(down))
        elif kind == "cut":
            a, b = self.rng.sample(BROKERS, 2)
            self.cut.add(frozenset((a, b)))
        elif kind == "cut_controller":
            self.cut.add(frozenset((self.rng.choice(BROKERS), CONTROLLER)))
        elif kind == "heal" and self.cut:
            self.cut.discard(self.rng.choice(sorted(self.cut, key=sorted)))
        self._at(self.now + self._fault_delay(), self._fault)

    def crash(self, b: Broker) -> None:
        """kill -9: memory gone (roles, fetches, unanswered produces), the log kept."""
        b.up = False
        self.stats["failed"] += len(b.waits)
        b.waits.clear()

    def restart(self, b: Broker) -> None:
        b.up = True
        self._boot(b)

    def heal(self) -> None:
        """Faults stop: every link back, every broker up, no more loss."""
        self.faulty = False
        self.cut.clear()
        for b in self.brokers.values():
            if not b.up:
                self.restart(b)

    def _boot(self, b: Broker) -> None:
        b.incarnation += 1
        b.partition = Partition(TOPIC, 0, self.topic_id, b.id, b.log)
        b.broker_epoch = b.metadata_offset = -1
        b.fetching = b.registering = None
        b.alter_in_flight = None
        b.next_heartbeat_ms = self.now

    @staticmethod
    def _incarnation_id(broker_id: int, incarnation: int) -> uuid.UUID:
        return uuid.UUID(int=broker_id << 32 | incarnation)

    # -- the controller ---------------------------------------------------------------------

    @property
    def registration(self):
        return self.driver.controller.image.topics.by_name[TOPIC].partitions[0]

    def _controller_call(self, result):
        before = len(self.driver.log)
        response = self.driver.run(result)
        if len(self.driver.log) != before:
            self._metadata_changed()
        return response

    def _metadata_changed(self) -> None:
        reg = self.registration
        if (reg.leader, reg.leader_epoch) != self.last_leader:
            self.last_leader = (reg.leader, reg.leader_epoch)
            self.stats["elections"] += 1
        if reg.isr != self.last_isr:
            self.last_isr = reg.isr
            for r in reg.isr:
                self.check_acked(self.brokers[r], "joined the ISR")

    def _controller_tick(self) -> None:
        self.driver.now = self.now
        c = self.driver.controller
        while c.next_deadline_ms(self.now) is not None and c.next_deadline_ms(self.now) <= self.now:
            self._controller_call(c.poll(self.now))
        offset = len(self.driver.log) - 1
        reg = self.registration
        for b in self.brokers.values():
            if b.up and b.metadata_offset < offset:
                self.send(CONTROLLER, b.id, self._on_metadata, b, offset, reg)

    def _on_register(self, b: Broker, key: int) -> None:
        self.driver.now = self.now
        request = registration_request(b.id, self._incarnation_id(b.id, b.incarnation))
        response = self._controller_call(self.driver.controller.register_broker(request, self.now))
        self.send(CONTROLLER, b.id, self._on_registered, b, response, key)

    def _on_heartbeat(self, b: Broker, broker_epoch: int, metadata_offset: int) -> None:
        self.driver.now = self.now
        request = m.BrokerHeartbeatRequest(
            broker_id=b.id, broker_epoch=broker_epoch, current_metadata_offset=metadata_offset
        )
        self._controller_call(self.driver.controller.broker_heartbeat(request, self.now))

    def _on_alter_partition(self, b: Broker, request, batch, key: int) -> None:
        self.driver.now = self.now
        response = self._controller_call(
            self.driver.controller.alter_partition(request, ALTER_PARTITION_VERSION)
        )
        self.send(CONTROLLER, b.id, self._on_alter_partition_response, b, batch, response, key)

    # -- the brokers ------------------------------------------------------------------------

    def _tick(self) -> None:
        self._controller_tick()
        for b in self.brokers.values():
            if b.up:
                self._broker_tick(b)
        self.check_leaders()
        self._at(self.now + TICK_MS, self._tick)

    def _broker_tick(self, b: Broker) -> None:
        p = b.partition
        if b.broker_epoch < 0:
            # Broker._broker_lifecycle: one registration at a time, again after a refusal or
            # a timeout longer than any round trip (a lost answer: the controller may have
            # registered it all the same, and the next answer carries the newer epoch).
            if b.registering is None or self.now - b.call_sent_ms > CALL_TIMEOUT_MS:
                self.next_request += 1
                b.registering = self.next_request
                b.call_sent_ms = self.now
                self.send(b.id, CONTROLLER, self._on_register, b, b.registering)
        elif self.now >= b.next_heartbeat_ms:
            b.next_heartbeat_ms = self.now + HEARTBEAT_MS
            self.send(b.id, CONTROLLER, self._on_heartbeat, b, b.broker_epoch, b.metadata_offset)
        if p.is_leader:
            if self.now % (LAG_MS // 2) < TICK_MS:  # Kafka's isr-expiration, every lag/2
                change = p.maybe_shrink_isr(self.now, LAG_MS)
                if change is not None:
                    self._submit(b, change)
            self._complete_waits(b)
        elif p.state.leader >= 0 and b.broker_epoch >= 0:
            if b.fetching is not None and self.now - b.fetch_sent_ms > FETCH_TIMEOUT_MS:
                b.fetching = None
            if b.fetching is None:
                self._fetch(b)

    def _on_registered(self, b: Broker, response, key: int) -> None:
        if key != b.registering:
            return  # the answer to a registration given up on
        b.registering = None
        if response.error_code == 0:
            b.broker_epoch = response.broker_epoch
        else:
            b.call_sent_ms = self.now - CALL_TIMEOUT_MS + HEARTBEAT_MS  # retry in a while
            b.registering = -1
        b.next_heartbeat_ms = self.now

    def _on_metadata(self, b: Broker, offset: int, reg) -> None:
        """The replica manager's ``apply_partition`` for the image at ``offset``."""
        if offset <= b.metadata_offset:
            return
        b.metadata_offset = offset
        p = b.partition
        before = (p.state.leader, p.state.leader_epoch)
        state = PartitionState(
            reg.leader, reg.leader_epoch, reg.partition_epoch, tuple(reg.replicas), tuple(reg.isr)
        )
        if reg.leader == b.id:
            if p.make_leader(state, self.now):
                self.check_acked(b, "became leader")
        else:
            p.make_follower(state)
        if (p.state.leader, p.state.leader_epoch) != before:
            b.fetching = None  # FollowerFetchers: a new leader or epoch, a new fetch
        if p.is_leader:
            self._complete_waits(b)
            self.check_leader(b)
        else:
            self._fail_waits(b)

    def _submit(self, b: Broker, change) -> None:
        """``IsrChanges``: one AlterPartition in flight per broker."""
        if b.alter_in_flight is not None:
            b.partition.isr_state.failed(change)  # proposed again by the next fetch or check
            return
        self.next_request += 1
        b.alter_in_flight = key = self.next_request
        batch = {TP: (b.partition, change)}
        request = alter_partition_request(b.id, b.broker_epoch, batch)
        self.send(b.id, CONTROLLER, self._on_alter_partition, b, request, batch, key)
        # A lost request or answer: the change is dropped after a while, as a timed-out call.
        self._at(self.now + FETCH_TIMEOUT_MS, self._alter_timeout, b, batch, key)

    def _alter_timeout(self, b: Broker, batch, key: int) -> None:
        if b.alter_in_flight == key:
            b.alter_in_flight = None
            partition, change = batch[TP]
            if partition.isr_state is not None:
                partition.isr_state.failed(change)

    def _on_alter_partition_response(self, b: Broker, batch, response, key: int) -> None:
        if b.alter_in_flight != key:
            return  # timed out: the change was dropped already
        b.alter_in_flight = None
        apply_alter_partition_response(batch, response)
        if b.partition.is_leader:
            self._complete_waits(b)
            self.check_leader(b)

    # -- replication --------------------------------------------------------------------------

    def _fetch(self, b: Broker) -> None:
        p = b.partition
        self.next_request += 1
        b.fetching = self.next_request
        b.fetch_sent_ms = self.now
        params = FetchParams(
            fetch_offset=p.log_end_offset,
            max_bytes=FETCH_MAX_RECORDS,
            isolation=FetchIsolation.LOG_END,
            current_leader_epoch=p.state.leader_epoch,
            last_fetched_epoch=(
                -1
                if p.latest_epoch is None or self.mutation == "skip_divergence_check"
                else p.latest_epoch
            ),
            replica_id=b.id,
            replica_epoch=b.broker_epoch,
        )
        key = (b.fetching, p.state.leader, p.state.leader_epoch)
        self.send(
            b.id, p.state.leader, self._on_fetch, self.brokers[p.state.leader], b, params, key
        )

    def _on_fetch(self, leader: Broker, follower: Broker, params: FetchParams, key) -> None:
        p = leader.partition
        try:
            result = p.fetch_records(dataclasses.replace(params, now_ms=self.now))
        except KafkaError as e:
            answer = (e.code, p.log_end_offset, None)
        else:
            if result.isr_change is not None:
                self._submit(leader, result.isr_change)
            answer = (ErrorCode.NONE, result.high_watermark, result)
            self._complete_waits(leader)
            self.check_leader(leader)
        self.send(leader.id, follower.id, self._on_fetch_response, follower, params, key, answer)

    def _on_fetch_response(self, b: Broker, params: FetchParams, key, answer) -> None:
        p = b.partition
        if key != (b.fetching, p.state.leader, p.state.leader_epoch) or p.is_leader:
            return
        b.fetching = None
        code, value, result = answer
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # FollowerPartitionHandler.resolve_out_of_range: the leader has less (unclean).
            if params.fetch_offset > value:
                self._truncate(b, lambda: p.truncate_to(value))
            return
        if code != ErrorCode.NONE:
            return  # fenced, not leader, unknown epoch: wait for the metadata
        if result.diverging_epoch is not None:
            if self.mutation != "skip_truncation":
                output = TruncateOnDivergence(TP, *result.diverging_epoch)
                self._truncate(b, lambda: truncate_to_divergence(p, output, self.now))
            return
        output = AppendRecords(TP, params.fetch_offset, b"", result.high_watermark, 0, 0)
        if refetch_if_cut(p, output, "simulation") is not None:
            return
        if result.info.records:
            p.append_as_follower(result.info.records, now_ms=self.now)
        p.update_follower_high_watermark(result.high_watermark)
        self._fetch(b)  # a fetcher asks again at once after records

    def _truncate(self, b: Broker, how: Callable) -> None:
        before = b.log.log_end_offset
        how()
        if b.log.log_end_offset < before:
            self.stats["truncated"] += before - b.log.log_end_offset
            if b.id in self.registration.isr:
                self.check_acked(b, f"truncated from {before} to {b.log.log_end_offset}")

    # -- the producer ---------------------------------------------------------------------------

    def _produce(self) -> None:
        """An acks=all producer writes to a broker that believes it leads (a zombie too)."""
        leaders = [b for b in self.brokers.values() if b.up and b.partition.is_leader]
        if leaders and self.faulty:
            b = self.rng.choice(leaders)
            self.values += 1
            value = f"v{self.values}"
            p = b.partition
            try:
                info = p.append_as_leader(
                    [value],
                    required_acks=-1,
                    min_insync_replicas=1 if self.mutation == "ignore_min_isr" else MIN_ISR,
                    now_ms=self.now,
                    origin=AppendOrigin.CLIENT,
                )
            except KafkaError as e:
                assert e.code == ErrorCode.NOT_ENOUGH_REPLICAS, e
                self.stats["refused"] += 1
                if len(p.committed_isr) >= MIN_ISR:
                    self.violate(0, f"refused with ISR {p.committed_isr}")
            else:
                if len(p.committed_isr) < MIN_ISR:
                    self.violate(0, f"appended at {info.first_offset} with ISR {p.committed_isr}")
                end = info.last_offset + 1
                wait = Wait(
                    end, p.leader_epoch, info.first_offset, value, self.now + REQUEST_TIMEOUT_MS
                )
                b.waits.append(wait)
                self._complete_waits(b)
                self.check_leader(b)
        if self.faulty:
            delay = int(self.rng.expovariate(1 / self.faults.produce_mean_interval_ms)) + 1
            self._at(self.now + delay, self._produce)

    def _complete_waits(self, b: Broker) -> None:
        """``Broker.wait_for_high_watermarks``' answers, for the waits that have one."""
        if not b.waits:
            return
        p = b.partition
        keep = []
        for w in b.waits:
            if not p.is_leader or p.leader_epoch != w.epoch:
                self.stats["failed"] += 1  # NOT_LEADER_OR_FOLLOWER
            elif p.high_watermark >= w.end:
                if len(p.maximal_isr) < MIN_ISR:
                    self.stats["failed"] += 1  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
                else:
                    self._acknowledged(w)
            elif self.now >= w.deadline:
                self.stats["failed"] += 1  # REQUEST_TIMED_OUT
            else:
                keep.append(w)
        b.waits = keep

    def _fail_waits(self, b: Broker) -> None:
        self.stats["failed"] += len(b.waits)
        b.waits.clear()

    def _acknowledged(self, w: Wait) -> None:
        self.stats["acked"] += 1
        holders = [r for r in self.brokers.values() if _value_at(r.log, w.offset) == w.value]
        if len(holders) < MIN_ISR:
            self.violate(0, f"{w.value}@{w.offset} acknowledged, held by {[r.id for r in holders]}")
        previous = self.acked.get(w.offset)
        if previous is not None and previous != w.value:
            self.violate(1, f"{w.value} acknowledged at {w.offset}, where {previous} was")
        self.acked[w.offset] = w.value

    # -- the properties -------------------------------------------------------------------------

    def violate(self, prop: int, what: str) -> None:
        self.violations.append((prop, self.now, what))

    def broken(self, prop: int) -> list[str]:
        return [f"t={t}ms: {what}" for p, t, what in self.violations if p == prop]

    def check_acked(self, b: Broker, why: str) -> None:
        """Property 1 on ``b`` (a member of the ISR, or a new leader)."""
        missing = [o for o, v in self.acked.items() if _value_at(b.log, o) != v]
        if missing:
            self.violate(1, f"broker {b.id} {why}: acknowledged offsets {missing[:5]} missing")

    def check_acked_everywhere(self) -> None:
        reg = self.registration
        for r in {*reg.isr, *([reg.leader] if reg.leader >= 0 else [])}:
            self.check_acked(self.brokers[r], "at the end")

    def check_leader(self, b: Broker) -> None:
        """Property 2 on ``b``, which believes it leads."""
        p = b.partition
        if not p.is_leader:
            return
        hw = p.high_watermark
        incarnation, epoch, last = b.last_hw
        if (incarnation, epoch) == (b.incarnation, p.leader_epoch) and hw < last:
            self.violate(2, f"leader {b.id}'s HW went from {last} to {hw} at epoch {epoch}")
        b.last_hw = (b.incarnation, p.leader_epoch, hw)
        for r in p.maximal_isr:
            end = self.brokers[r].log.log_end_offset
            if hw > end:
                self.violate(2, f"leader {b.id}'s HW {hw} is above ISR member {r}'s end {end}")

    def check_leaders(self) -> None:
        """Property 3, every tick: the controller's ISR agrees with its leader below the HW."""
        reg = self.registration
        if reg.leader < 0:
            return
        leader = self.brokers[reg.leader]
        p = leader.partition
        if not (leader.up and p.is_leader and p.leader_epoch == reg.leader_epoch):
            return
        hw = p.high_watermark
        below = leader.log.records[:hw]
        for r in reg.isr:
            theirs = self.brokers[r].log.records[:hw]
            if theirs != below:
                at = next((i for i, (x, y) in enumerate(zip(below, theirs)) if x != y), len(theirs))
                self.violate(3, f"ISR member {r} differs from leader {leader.id} at {at} < HW {hw}")

    def unconverged(self) -> list[str]:
        """Property 4: what is not converged yet (empty: every replica is the leader's copy)."""
        reg = self.registration
        if reg.leader < 0:
            return [f"no leader (ISR {list(reg.isr)})"]
        leader = self.brokers[reg.leader]
        wrong = []
        if sorted(reg.isr) != sorted(BROKERS):
            wrong.append(f"ISR {list(reg.isr)}")
        for b in self.brokers.values():
            if b.log.records != leader.log.records:
                wrong.append(f"broker {b.id}'s log ({b.log.log_end_offset}) is not the leader's")
            if b.log.high_watermark != leader.log.log_end_offset:
                wrong.append(f"broker {b.id}'s HW {b.log.high_watermark}")
        return wrong


def _value_at(log: MemoryLog, offset: int) -> str | None:
    return log.records[offset].value if offset < log.log_end_offset else None


def run_seed(
    seed: int,
    *,
    unclean: bool = False,
    mutation: str | None = None,
    fault_ms: int = 20_000,
    quiet_ms: int = 15_000,
    faults: Faults | None = None,
) -> Simulation:
    sim = Simulation(seed, faults=faults, unclean=unclean, mutation=mutation)
    return sim.run(fault_ms, quiet_ms)
