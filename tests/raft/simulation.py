"""A deterministic simulation of a KRaft quorum, after Kafka's ``RaftEventSimulationTest``.

Theory of operation
-------------------
Time is an integer number of milliseconds that only moves when the next event happens. An
event is a message delivery, a node's poll deadline, a client proposal, a snapshot request or
a fault (crash, restart, partition, heal). Events sit in one heap ordered by (time, sequence
number); all randomness comes from one ``random.Random(seed)`` (each node's core gets its own
generator derived from it), so a seed replays the same run, step for step.

Nodes are :class:`~kcore.raft.core.RaftCore` objects over a simulated *disk*: a
:class:`~kcore.raft.log.MemoryRaftLog`, a :class:`~kcore.raft.snapshots.MemorySnapshotStore`
and the text of the ``quorum-state`` file. A crash throws the core (and its in-flight snapshot
download) away and keeps the disk; a restart builds a new core from the disk. A crash may hit
in the middle of executing a poll's outputs: what came before (a persisted vote) stays done,
what came after (the message granting it) is never sent.

The network delays every message by a random 1..``max_delay_ms``, so messages overtake one
another; it drops (``drop``), duplicates (``duplicate``) and cuts links between partition
groups. Answers to a crashed incarnation are dropped, as a dead TCP connection would. With
``wire=True`` every message also goes through the protocol codec at Kafka 4.0's versions.

The properties, checked as the run goes (:meth:`Simulation.check_node` after every event a
node handled, the others as outputs are executed), read as sentences:

* at most one node leads any epoch;
* a node never votes for two candidates in one epoch, across crashes (from what it persisted);
* committed entries are never lost or changed: whenever a node's high watermark passes an
  offset, the entry it holds there is compared with the one first seen committed there, and
  a value is committed at one offset only; a snapshot a node loads must hold exactly the
  committed history below its end;
* every leader holds every committed entry when it is elected (leader completeness);
* hence every node's committed log is a prefix of one history; after convergence every
  node's state machine holds the same entries;
* the core's own invariant checks (:class:`~kcore.raft.errors.RaftInvariantError`: two leaders
  in one epoch seen in a message, a truncation below the high watermark) end the run too.

And, once the network heals and every node is up, a leader known to all nodes is elected and
the log converges (every node's high watermark reaches the leader's log end) within
:data:`LIVENESS_BOUND_MS`. The scenario runners at the end check the rest: a voter cut off and
brought back never moves a healthy quorum's epoch (pre-vote); a majority cut off from its
leader elects another while the old one resigns (check-quorum); a leader shutting down
gracefully hands over at once (EndQuorumEpoch).
"""

from __future__ import annotations

import heapq
import random
import struct
from dataclasses import dataclass, field
from typing import Any

from kcore.protocol import messages as m
from kcore.raft import (
    HighWatermarkAdvanced,
    LeaderChanged,
    MemoryRaftLog,
    MemorySnapshotStore,
    NotLeaderError,
    PersistQuorumState,
    QuorumRole,
    RaftConfig,
    RaftCore,
    SendRequest,
    SendResponse,
    ShutdownComplete,
    SnapshotLoaded,
    rpc,
)
from kcore.raft.config import VoterAddress
from kcore.raft.quorum_state import decode_quorum_state, encode_quorum_state

# With ``wire=True`` every message is encoded and decoded at these versions (Kafka 4.0's).
WIRE_VERSIONS = {
    m.VoteRequest: 1,
    m.VoteResponse: 1,
    m.BeginQuorumEpochRequest: 1,
    m.BeginQuorumEpochResponse: 1,
    m.EndQuorumEpochRequest: 1,
    m.EndQuorumEpochResponse: 1,
    m.FetchRequest: 17,
    m.FetchResponse: 17,
    m.FetchSnapshotRequest: 1,
    m.FetchSnapshotResponse: 1,
}

# After healing, a leader known to all and a converged log must appear within this much
# simulated time. The parts: a restarted node's requests to dead incarnations time out (2 s),
# followers of a dead leader wait out the fetch timeout (2 s), a pre-vote and a vote, perhaps
# a split vote and a backoff (up to 1 s) plus a new election timeout (1-2 s), and an observer's
# search for the leader. The worst seen over 540 healed runs was 6.0 s; the bound is 2.5x that.
LIVENESS_BOUND_MS = 15_000


class SimulationFailure(AssertionError):
    """A property failed; the message names the seed to replay."""


@dataclass
class Faults:
    """What the network and the nodes do wrong while the chaos lasts."""

    drop: float = 0.0
    duplicate: float = 0.0
    max_delay_ms: int = 20
    fault_mean_interval_ms: int = 0  # 0: no crashes / partitions
    mid_output_crash: float = 0.0


CHAOS = Faults(
    drop=0.05, duplicate=0.03, max_delay_ms=40, fault_mean_interval_ms=1500, mid_output_crash=0.002
)
CALM = Faults(max_delay_ms=20)


@dataclass
class Disk:
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    snapshots: MemorySnapshotStore = field(default_factory=MemorySnapshotStore)
    quorum_state: str | None = None


@dataclass
class Node:
    node_id: int
    disk: Disk
    core: RaftCore | None = None
    incarnation: int = 0
    next_poll: int | None = None
    # The state machine: the data entries applied, in offset order, up to `applied`.
    state: list[tuple[int, bytes]] = field(default_factory=list)
    applied: int = 0
    votes: dict[int, int] = field(default_factory=dict)  # epoch -> candidate, as persisted


@dataclass(order=True)
class Event:
    time: int
    seq: int
    kind: str = field(compare=False)
    data: Any = field(compare=False, default=None)


def encode_state(entries: list[tuple[int, bytes]]) -> bytes:
    """The simulated state machine's snapshot: (offset, length, value) per data entry."""
    return b"".join(struct.pack(">qI", o, len(v)) + v for o, v in entries)


def decode_state(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        offset, n = struct.unpack_from(">qI", data, pos)
        pos += 12
        out.append((offset, bytes(data[pos : pos + n])))
        pos += n
    return out


class Simulation:
    """A seeded quorum of ``voters`` voters (ids 1..n) and ``observers`` observers."""

    def __init__(
        self,
        seed: int,
        voters: int,
        observers: int = 0,
        faults: Faults = CALM,
        *,
        snapshot_every: int = 40,
        fetch_snapshot_max_bytes: int = 256,
        wire: bool = False,
    ) -> None:
        self.seed = seed
        self.wire = wire
        self.rng = random.Random(seed)
        self.faults = faults
        self.voter_ids = list(range(1, voters + 1))
        self.node_ids = list(range(1, voters + observers + 1))
        self.config = RaftConfig(
            voters={v: VoterAddress(f"node-{v}", 9093) for v in self.voter_ids},
            fetch_snapshot_max_bytes=fetch_snapshot_max_bytes,
        )
        self.snapshot_every = snapshot_every
        self.now = 0
        self.steps = 0
        self._seq = 0
        self._events: list[Event] = []
        self.nodes = {n: Node(n, Disk()) for n in self.node_ids}
        self.groups: dict[int, int] = {}  # node -> partition group; absent: group 0
        self.client_on = True
        self._next_value = 0
        # Properties' memory.
        self.committed: dict[int, tuple[int, bytes, int | None]] = {}
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.value_offsets: dict[bytes, int] = {}
        self._vote_requests: dict[tuple, bool] = {}  # (voter, candidate, token) -> pre-vote
        self.max_epoch_seen = 0
        for node in self.nodes.values():
            self._start(node)
        self._schedule(self.rng.randint(50, 200), "client")
        if faults.fault_mean_interval_ms:
            self._schedule(self._fault_gap(), "fault")

    # -- driving ------------------------------------------------------------------------------

    def fail(self, message: str) -> None:
        raise SimulationFailure(
            f"{message}\n  seed={self.seed} step={self.steps} now={self.now}ms "
            f"(replay: SEED={self.seed} pytest tests/raft/test_simulation.py)\n  "
            + "\n  ".join(
                repr(n.core) if n.core else f"node {n.node_id}: down" for n in self.nodes.values()
            )
        )

    def _schedule(self, delay: int, kind: str, data: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, Event(self.now + max(0, delay), self._seq, kind, data))

    def step(self) -> None:
        """Run the next event, then check every property."""
        event = heapq.heappop(self._events)
        self.now = event.time
        self.steps += 1
        handler = getattr(self, f"_on_{event.kind}")
        handler(event.data)

    def run_steps(self, n: int) -> None:
        for _ in range(n):
            self.step()

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self._events and self._events[0].time <= end:
            self.step()
        self.now = max(self.now, end)

    def run_until(self, predicate, within_ms: int, what: str) -> None:
        end = self.now + within_ms
        while not predicate():
            if not self._events or self._events[0].time > end:
                self.fail(f"liveness: {what} not reached within {within_ms} ms")
            self.step()

    # -- nodes ----------------------------------------------------------------------------------

    def _start(self, node: Node) -> None:
        node.incarnation += 1
        stored = None
        if node.disk.quorum_state is not None:
            stored, _voters = decode_quorum_state(node.disk.quorum_state)
        latest = node.disk.snapshots.latest_id()
        node.state = decode_state(node.disk.snapshots.data(latest)) if latest else []
        node.applied = latest.offset if latest else 0
        node.core = RaftCore(
            node.node_id,
            self.config,
            node.disk.log,
            node.disk.snapshots,
            stored_state=stored,
            rng=random.Random(self.rng.getrandbits(64)),
            now=self.now,
            cluster_id="sim-cluster",
        )
        node.next_poll = None
        self._drain(node)

    def crash(self, node: Node) -> None:
        node.core = None
        node.next_poll = None

    def restart(self, node: Node) -> None:
        if node.core is None:
            self._start(node)

    def _drain(self, node: Node) -> None:
        """Poll the node's core and execute the outputs in order (maybe crashing midway)."""
        poll = node.core.poll(self.now)
        crash_at = None
        if self.faults.mid_output_crash and self.rng.random() < self.faults.mid_output_crash:
            crash_at = self.rng.randrange(len(poll.outputs) + 1)
        for i, out in enumerate(poll.outputs):
            if i == crash_at:
                self.crash(node)
                return
            self._execute(node, out)
        if crash_at is not None and crash_at == len(poll.outputs):
            self.crash(node)
            return
        self.check_node(node)
        if node.next_poll != poll.deadline:
            node.next_poll = poll.deadline
            self._schedule(poll.deadline - self.now, "poll", (node.node_id, node.incarnation))

    def _execute(self, node: Node, out) -> None:
        if isinstance(out, PersistQuorumState):
            state = out.state
            if state.voted_id is not None:
                previous = node.votes.setdefault(state.epoch, state.voted_id)
                if previous != state.voted_id:
                    self.fail(
                        f"node {node.node_id} voted for {previous} and {state.voted_id} "
                        f"in epoch {state.epoch}"
                    )
            node.disk.quorum_state = encode_quorum_state(state, out.voters)
        elif isinstance(out, SendRequest):
            self._send(
                node.node_id,
                out.destination,
                ("req", node.incarnation, out.request_id),
                out.message,
            )
        elif isinstance(out, SendResponse):
            if isinstance(out.message, m.VoteResponse):
                self._check_granted_vote(node, out)
            self._send(node.node_id, out.destination, ("resp",) + out.token, out.message)
        elif isinstance(out, HighWatermarkAdvanced):
            self._apply_committed(node, out.high_watermark)
        elif isinstance(out, SnapshotLoaded):
            self._load_snapshot(node, out.snapshot_id)
        elif isinstance(out, LeaderChanged):
            leader = out.leader
            if leader.leader_id == node.node_id:
                self._check_leader_completeness(node)
        elif isinstance(out, ShutdownComplete):
            self.crash(node)

    # -- events ---------------------------------------------------------------------------------

    def _on_poll(self, data) -> None:
        node_id, incarnation = data
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation or node.next_poll != self.now:
            return
        node.next_poll = None
        self._drain(node)

    def _send(self, src: int, dst: int, header: tuple, message: m.Message) -> None:
        f = self.faults
        if self.groups.get(src, 0) != self.groups.get(dst, 0) or self.rng.random() < f.drop:
            return
        if self.wire:
            message = self._through_the_codec(message)
        copies = 2 if self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            self._schedule(
                self.rng.randint(1, f.max_delay_ms), "deliver", (src, dst, header, message)
            )

    def _through_the_codec(self, message: m.Message) -> m.Message:
        """Encode and decode at the version a Kafka 4.x peer would use. A pre-vote needs
        Vote v2, which the codec lacks (see kcore.raft.rpc): it travels as an object."""
        if isinstance(message, m.VoteRequest) and rpc.vote_request_needs_v2(message):
            return message
        version = WIRE_VERSIONS[type(message)]
        return type(message).decode(message.encode(version), version)

    def _on_deliver(self, data) -> None:
        src, dst, header, message = data
        node = self.nodes[dst]
        if node.core is None or self.groups.get(src, 0) != self.groups.get(dst, 0):
            return
        if header[0] == "req":
            _, incarnation, request_id = header
            if isinstance(message, m.VoteRequest):
                part = rpc.partition_of(message)
                self._vote_requests[(dst, src, incarnation, request_id)] = rpc.is_pre_vote(part)
            node.core.handle_request(src, (incarnation, request_id), message, self.now)
        else:
            _, incarnation, request_id = header
            if incarnation != node.incarnation:
                return  # an answer to a previous life of the node
            node.core.handle_response(src, request_id, message, self.now)
        self._drain(node)

    def _on_client(self, _data) -> None:
        if self.client_on:
            leaders = [
                n for n in self.nodes.values() if n.core and n.core.role is QuorumRole.LEADER
            ]
            if leaders:
                node = self.rng.choice(leaders)
                self.propose(node, self.rng.randint(1, 3))
            if self.rng.random() < 0.2:
                self._maybe_snapshot(self.rng.choice(list(self.nodes.values())))
        self._schedule(self.rng.randint(50, 250), "client")

    def propose(self, node: Node, count: int) -> range | None:
        values = []
        for _ in range(count):
            self._next_value += 1
            values.append(b"v%d" % self._next_value)
        try:
            offsets = node.core.propose(values, self.now)
        except NotLeaderError:
            return None
        self._drain(node)
        return offsets

    def _maybe_snapshot(self, node: Node) -> None:
        core = node.core
        if core is None or core.high_watermark - core.log.start_offset < self.snapshot_every:
            return
        if node.applied != core.high_watermark:
            self.fail(f"node {node.node_id} applied {node.applied}, hw {core.high_watermark}")
        end = core.high_watermark
        core.create_snapshot(end, encode_state(node.state), self.now)
        self._drain(node)

    def _fault_gap(self) -> int:
        return int(self.rng.expovariate(1 / self.faults.fault_mean_interval_ms)) + 1

    def _on_fault(self, _data) -> None:
        if not self.faults.fault_mean_interval_ms:
            return
        up = [n for n in self.nodes.values() if n.core is not None]
        down = [n for n in self.nodes.values() if n.core is None]
        choice = self.rng.random()
        if down and choice < 0.4:
            self.restart(self.rng.choice(down))
        elif up and choice < 0.65:
            self.crash(self.rng.choice(up))
        elif choice < 0.75:
            self.isolate(self.rng.choice(self.node_ids))
        elif choice < 0.85:
            self.groups = {n: self.rng.randrange(2) for n in self.node_ids}
        else:
            self.groups = {}
        self._schedule(self._fault_gap(), "fault")

    def shutdown(self, node: Node, timeout_ms: int) -> None:
        """Begin a graceful shutdown; the node stops at its ``ShutdownComplete``."""
        node.core.begin_shutdown(self.now, timeout_ms)
        self._drain(node)

    def heal(self) -> None:
        """End the chaos: perfect network, every node up, no more faults."""
        self.faults = CALM
        self.groups = {}
        for node in self.nodes.values():
            self.restart(node)

    def isolate(self, node_id: int) -> None:
        self.groups = {node_id: 1}

    # -- the state machine and the properties -----------------------------------------------------

    def _apply_committed(self, node: Node, hw: int) -> None:
        log = node.disk.log
        start = max(node.applied, log.start_offset)
        for entry in log.read(start, 1 << 60) if start < hw else []:
            if entry.offset >= hw:
                break
            this = (entry.epoch, entry.value, entry.control_type)
            seen = self.committed.get(entry.offset)
            if seen is None:
                self.committed[entry.offset] = this
                if entry.control_type is None:
                    first = self.value_offsets.setdefault(entry.value, entry.offset)
                    if first != entry.offset:
                        self.fail(f"value {entry.value!r} committed at {first} and {entry.offset}")
            elif seen != this:
                self.fail(
                    f"node {node.node_id} committed {entry} at offset {entry.offset}, but "
                    f"{seen} was committed there before"
                )
            if entry.control_type is None:
                node.state.append((entry.offset, entry.value))
        node.applied = max(node.applied, hw)

    def _load_snapshot(self, node: Node, sid) -> None:
        state = decode_state(node.disk.snapshots.data(sid))
        expected = [
            (o, v)
            for o, (_e, v, ct) in sorted(self.committed.items())
            if o < sid.offset and ct is None
        ]
        if state != expected:
            self.fail(f"node {node.node_id} loaded snapshot {sid} that disagrees with history")
        node.state = state
        node.applied = sid.offset

    def _check_granted_vote(self, node: Node, out: SendResponse) -> None:
        """A binding vote goes out only for the candidate the node persisted as its vote."""
        pre_vote = self._vote_requests.pop((node.node_id, out.destination, *out.token), True)
        part = rpc.partition_of(out.message)
        if part is None or not part.vote_granted or pre_vote:
            return
        persisted = node.votes.get(part.leader_epoch)
        if persisted != out.destination:
            self.fail(
                f"node {node.node_id} granted its epoch {part.leader_epoch} vote to "
                f"{out.destination}, but its persisted vote is {persisted}"
            )

    def _check_leader_completeness(self, node: Node) -> None:
        log = node.disk.log
        if not self.committed:
            return
        last = max(self.committed)
        if log.end_offset <= last:
            self.fail(f"new leader {node.node_id} ends at {log.end_offset}, committed up to {last}")
        for entry in log.read(log.start_offset, 1 << 60):
            if entry.offset > last:
                break
            seen = self.committed.get(entry.offset)
            if seen is not None and seen != (entry.epoch, entry.value, entry.control_type):
                self.fail(f"new leader {node.node_id} has {entry} where {seen} was committed")

    def check_node(self, node: Node) -> None:
        core = node.core
        if core is None:
            return
        if core.role is QuorumRole.LEADER:
            holder = self.leaders.setdefault(core.epoch, node.node_id)
            if holder != node.node_id:
                self.fail(f"nodes {holder} and {node.node_id} both lead epoch {core.epoch}")
        if core.high_watermark > core.log.end_offset:
            self.fail(f"node {node.node_id} hw {core.high_watermark} past its log end")
        self.max_epoch_seen = max(self.max_epoch_seen, core.epoch)

    # -- liveness -----------------------------------------------------------------------------------

    def leader(self) -> Node | None:
        """The node every up node agrees leads the current epoch, or ``None``."""
        cores = [n.core for n in self.nodes.values()]
        if any(c is None for c in cores):
            return None
        leaders = [c for c in cores if c.role is QuorumRole.LEADER]
        if len(leaders) != 1:
            return None
        lead = leaders[0]
        for c in cores:
            if c is not lead and (c.leader_id != lead.node_id or c.epoch != lead.epoch):
                return None
        return self.nodes[lead.node_id]

    def converged(self) -> bool:
        lead = self.leader()
        if lead is None:
            return False
        end = lead.core.log.end_offset
        return all(n.core.high_watermark == end for n in self.nodes.values())

    def check_converged_states(self) -> None:
        """Every node applied the same data entries (after convergence)."""
        states = {n.node_id: n.state for n in self.nodes.values()}
        reference = states[self.node_ids[0]]
        for node_id, state in states.items():
            if state != reference:
                self.fail(f"node {node_id}'s state differs from node {self.node_ids[0]}'s")


def run_chaos(seed: int, voters: int, observers: int, steps: int, wire: bool = False) -> Simulation:
    """Chaos for ``steps`` events, then heal and require a leader and convergence in time."""
    sim = Simulation(seed, voters, observers, faults=CHAOS, wire=wire)
    sim.run_steps(steps)
    sim.heal()
    sim.client_on = False
    sim.run_until(sim.converged, LIVENESS_BOUND_MS, "a leader known to all and a converged log")
    lead = sim.leader()
    offsets = sim.propose(lead, 1)
    if offsets is None:
        sim.fail("the converged leader refused a proposal")
    sim.run_until(
        lambda: all(n.core.high_watermark > offsets[-1] for n in sim.nodes.values()),
        LIVENESS_BOUND_MS,
        "a proposal after healing committed on every node",
    )
    sim.check_converged_states()
    return sim


def run_until_stable_leader(sim: Simulation) -> Node:
    """Run until a leader known by every node has committed its epoch everywhere."""
    client, sim.client_on = sim.client_on, False
    sim.run_until(sim.converged, LIVENESS_BOUND_MS, "a first leader known to all")
    sim.client_on = client
    return sim.leader()


def run_returning_voter(seed: int, voters: int, partition_ms: int = 20_000) -> tuple[int, int]:
    """Cut one follower off for ``partition_ms`` while the others stay healthy, bring it back,
    and require that the leader and its epoch never changed. Returns (how many pre-vote rounds
    it started while cut off, the highest epoch any node reached)."""
    sim = Simulation(seed, voters, 0, faults=CALM)
    lead = run_until_stable_leader(sim)
    leader_id, epoch = lead.node_id, lead.core.epoch
    victim = sim.rng.choice([v for v in sim.voter_ids if v != leader_id])
    pre_votes = 0
    sim.isolate(victim)
    end = sim.now + partition_ms
    while sim.now < end:
        was = sim.nodes[victim].core.role
        sim.step()
        if (
            was is not QuorumRole.PROSPECTIVE
            and sim.nodes[victim].core.role is QuorumRole.PROSPECTIVE
        ):
            pre_votes += 1
        _require_unchanged(sim, leader_id, epoch, "while a follower was cut off")
    sim.groups = {}
    end = sim.now + partition_ms
    while sim.now < end:
        sim.step()
        _require_unchanged(sim, leader_id, epoch, "after the cut-off follower came back")
    back = sim.nodes[victim].core
    if back.leader_id != leader_id or back.epoch != epoch:
        sim.fail(f"the returning voter {victim} does not follow {leader_id} in epoch {epoch}")
    sim.client_on = False
    sim.run_until(sim.converged, LIVENESS_BOUND_MS, "the returning voter caught up")
    return pre_votes, sim.max_epoch_seen


def _require_unchanged(sim: Simulation, leader_id: int, epoch: int, when: str) -> None:
    core = sim.nodes[leader_id].core
    if core.role is not QuorumRole.LEADER or core.epoch != epoch or sim.max_epoch_seen != epoch:
        sim.fail(
            f"{when}: the healthy quorum's leader {leader_id} of epoch {epoch} was disturbed "
            f"(now {core.role.value} in epoch {core.epoch}, highest epoch {sim.max_epoch_seen})"
        )


def run_minority_leader(seed: int, voters: int) -> int:
    """Cut the leader off with a minority; the majority must elect a new leader and the old
    one must resign (check-quorum). Returns the time the majority took, in ms."""
    sim = Simulation(seed, voters, 1, faults=CALM)
    lead = run_until_stable_leader(sim)
    old = lead.node_id
    others = [v for v in sim.voter_ids if v != old]
    minority = [old] + others[: (voters - 1) // 2 - 1]  # 1 of 3, 2 of 5
    sim.groups = {n: 1 for n in minority}
    start = sim.now
    majority = [n for n in sim.voter_ids if n not in minority]

    def majority_has_leader() -> bool:
        cores = [sim.nodes[n].core for n in majority]
        leaders = [c for c in cores if c.role is QuorumRole.LEADER]
        return len(leaders) == 1 and all(c.leader_id == leaders[0].node_id for c in cores)

    sim.run_until(majority_has_leader, LIVENESS_BOUND_MS, "a leader elected by the majority")
    took = sim.now - start
    # Check-quorum restarts its window each time a majority has fetched, counting fetches
    # since the last restart; one straggling in after the cut can restart it, so the cut-off
    # leader resigns within two windows (2 x 1.5 x fetch timeout = 6 s).
    sim.run_until(
        lambda: sim.nodes[old].core.role is not QuorumRole.LEADER,
        max(0, start + 2 * sim.config.check_quorum_timeout_ms + 100 - sim.now),
        "the cut-off leader resigned by check-quorum",
    )
    sim.groups = {}
    sim.client_on = False
    sim.run_until(sim.converged, LIVENESS_BOUND_MS, "convergence after the partition healed")
    sim.check_converged_states()
    return took


def run_graceful_shutdown(seed: int, voters: int) -> int:
    """Shut the leader down gracefully; returns how long until a successor led (ms)."""
    sim = Simulation(seed, voters, 1, faults=CALM)
    lead = run_until_stable_leader(sim)
    old = lead.node_id
    start = sim.now
    sim.shutdown(lead, 5_000)

    def successor() -> bool:
        cores = [n.core for n in sim.nodes.values() if n.node_id != old]
        return any(c.role is QuorumRole.LEADER for c in cores)

    sim.run_until(successor, LIVENESS_BOUND_MS, "a successor after a graceful shutdown")
    took = sim.now - start
    sim.run_until(lambda: sim.nodes[old].core is None, 6_000, "ShutdownComplete")
    return took
