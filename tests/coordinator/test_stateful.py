"""A randomized model test: members join, sync, heartbeat, leave and commit while time moves,
the partition is unloaded and reloaded; invariants are checked after every step.

Invariants: every group is in a state of the table; a Stable group's members and assignments
are exactly the last GroupMetadata record; the leader is a member; the generation never goes
back (while the group stays loaded); no JoinGroup/SyncGroup is answered twice, and every one is
answered in the end; replaying everything appended (transactional batches and their markers
included) rebuilds the committed offsets, the pending transactional offsets and the persisted
groups.
"""

from dataclasses import replace

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kcore.coordinator.group.group import GroupState
from kcore.protocol.errors import ErrorCode

from .harness import (
    TEST_CONFIG,
    Bench,
    Box,
    groups_of,
    pending_of,
    persisted_view,
    replay_log,
    replayed,
)

E = ErrorCode
CONFIG = replace(TEST_CONFIG, initial_rebalance_delay_ms=500)
CLIENTS = 4
STATIC = {2: "i2", 3: "i3"}  # clients 2 and 3 are static members


class Client:
    def __init__(self, index: int) -> None:
        self.index = index
        self.instance_id = STATIC.get(index)
        self.member_id = ""
        self.generation = -1
        self.members: list[str] = []
        self.join_box: Box | None = None
        self.sync_box: Box | None = None


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bench = Bench(CONFIG)
        self.now = 0
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.boxes: list[Box] = []
        self.max_generation: dict[str, int] = {}

    # ---- helpers -----------------------------------------------------------------------------

    def _absorb(self) -> None:
        for c in self.clients:
            if c.join_box is not None and c.join_box.answered:
                resp = c.join_box.one
                code = ErrorCode(resp.error_code)
                if code == E.NONE:
                    c.member_id, c.generation = resp.member_id, resp.generation_id
                    c.members = [x.member_id for x in resp.members]
                elif code == E.MEMBER_ID_REQUIRED:
                    c.member_id = resp.member_id
                elif code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                    c.member_id, c.generation = "", -1
                c.join_box = None
            if c.sync_box is not None and c.sync_box.answered:
                c.sync_box = None

    def _box(self) -> Box:
        box = Box()
        self.boxes.append(box)
        return box

    # ---- rules -------------------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1), version=st.sampled_from([3, 5, 9]), meta=st.booleans())
    def join(self, i, version, meta):
        c = self.clients[i]
        if c.join_box is not None:
            return
        c.join_box = box = self._box()
        req_version = 9 if c.instance_id else version
        b = self.bench
        from kcore.protocol import messages as m

        req = m.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=5000,
            rebalance_timeout_ms=8000,
            member_id=c.member_id,
            group_instance_id=c.instance_id,
            protocol_type="consumer",
            protocols=[
                m.JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=b"x" if meta else b""
                )
            ],
        )
        b.coord.join_group(req, req_version, f"c{i}", "/h", self.now, box)
        self._absorb()

    @rule(i=st.integers(0, CLIENTS - 1))
    def sync(self, i):
        c = self.clients[i]
        if c.sync_box is not None or not c.member_id:
            return
        from kcore.protocol import messages as m

        c.sync_box = box = self._box()
        req = m.SyncGroupRequest(
            group_id="g",
            generation_id=c.generation,
            member_id=c.member_id,
            group_instance_id=c.instance_id,
            assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=x, assignment=x.encode())
                for x in c.members
            ],
        )
        self.bench.coord.sync_group(req, 5, self.now, box)
        self._absorb()

    @rule(n=st.integers(1, CLIENTS))
    def rebalance_round(self, n):
        """The well-behaved path, so that groups often reach Stable: ``n`` clients join (twice,
        for the member id), the delay passes, followers then the leader sync."""
        for i in range(n):
            for _ in range(2):
                self.join(i, 9, False)
        self.advance(500)
        ordered = sorted(range(n), key=lambda i: bool(self.clients[i].members))
        for i in ordered:
            self.sync(i)

    @rule(i=st.integers(0, CLIENTS - 1))
    def heartbeat(self, i):
        c = self.clients[i]
        code = self.bench.heartbeat(
            "g", c.member_id, c.generation, now=self.now, instance_id=c.instance_id
        )
        if code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            c.member_id = ""

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i):
        c = self.clients[i]
        self.bench.leave("g", [(c.member_id, c.instance_id)], now=self.now)
        c.member_id, c.generation = "", -1
        self._absorb()

    @rule(i=st.integers(0, CLIENTS - 1), partition=st.integers(0, 2), offset=st.integers(0, 99))
    def commit(self, i, partition, offset):
        c = self.clients[i]
        self.bench.commit(
            "g",
            {("t", partition): offset},
            member_id=c.member_id,
            generation=c.generation,
            instance_id=c.instance_id,
            now=self.now,
        )

    @rule(partition=st.integers(0, 2), offset=st.integers(0, 99))
    def simple_commit(self, partition, offset):
        self.bench.commit("s", {("u", partition): offset}, now=self.now)

    @rule(
        producer=st.integers(1, 2),
        group=st.sampled_from(["g", "s"]),
        partition=st.integers(0, 2),
        offset=st.integers(0, 99),
    )
    def txn_commit(self, producer, group, partition, offset):
        topic = "t" if group == "g" else "u"
        self.bench.txn_commit(group, {(topic, partition): offset}, producer_id=producer)

    @rule(producer=st.integers(1, 2), commit=st.booleans())
    def end_txn(self, producer, commit):
        # Both groups' markers, as the transaction coordinator writes one per partition.
        coord = self.bench.coord
        for p in sorted({coord.partition_for("g"), coord.partition_for("s")}):
            self.bench.end_txn(p, producer, commit, now=self.now)

    @rule(ms=st.sampled_from([1, 100, 499, 500, 1000, 2500, 5000, 8000, 20_000, 200_000]))
    def advance(self, ms):
        self.now += ms
        self.bench.coord.tick(self.now)
        self._absorb()

    @rule()
    def reload(self):
        coord = self.bench.coord
        for p in range(CONFIG.offsets_topic_partitions):
            coord.unload(p)
            coord.begin_loading(p)
            replay_log(coord, p, self.bench.log)
            coord.finish_loading(p, self.now)
        self.max_generation.clear()
        self._absorb()

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def each_request_answered_at_most_once(self):
        assert all(len(box.responses) <= 1 for box in self.boxes)

    @invariant()
    def groups_are_consistent(self):
        live = groups_of(self.bench.coord)
        for gid in list(self.max_generation):
            if gid not in live:
                del self.max_generation[gid]
        for gid, group in live.items():
            assert group.state in GroupState and group.state is not GroupState.DEAD
            event(f"{gid} {group.state.value}")
            if group.members:
                assert group.leader_id in group.members
            else:
                assert group.leader_id is None
            assert group.generation_id >= self.max_generation.get(gid, 0)
            self.max_generation[gid] = group.generation_id
            for member_id in group.static_members.values():
                assert member_id in group.members
            if group.state is GroupState.STABLE:
                assert not any(m.is_awaiting_join for m in group.members.values())

    @invariant()
    def replay_rebuilds_persisted_state(self):
        live = groups_of(self.bench.coord)
        rebuilt = replayed(self.bench)
        assert pending_of(rebuilt) == pending_of(self.bench.coord)
        fresh = groups_of(rebuilt)
        assert set(fresh) <= set(live)
        for gid, group in live.items():
            if gid not in fresh:
                assert group.state is GroupState.EMPTY and group.generation_id == 0
                assert not group.offsets and not group.members
                continue
            assert fresh[gid].offsets == group.offsets
            if group.state in (GroupState.STABLE, GroupState.EMPTY):
                # The last record written for it describes exactly this generation.
                assert persisted_view(fresh[gid]) == persisted_view(group)

    def teardown(self):
        # Time heals everything: every parked request is answered in the end.
        for _ in range(10):
            self.now += 100_000
            self.bench.coord.tick(self.now)
        assert all(len(box.responses) == 1 for box in self.boxes), "a request was never answered"


GroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_group_coordinator_model = GroupMachine.TestCase


def test_every_parked_request_is_answered_once_on_unload():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    join_a = bench.join("g", a)
    join_new = bench.join("g", version=3)
    p = bench.coord.partition_for("g")
    bench.coord.unload(p)
    bench.coord.tick(10**9)
    assert join_a.error == E.NOT_COORDINATOR and join_new.error == E.NOT_COORDINATOR
    bench2 = Bench()
    x, jx = bench2.join_dynamic("h")
    y, jy = bench2.join_dynamic("h")
    bench2.coord.tick(0)
    parked_sync = bench2.sync("h", y, jy.one.generation_id)
    bench2.coord.unload(bench2.coord.partition_for("h"))
    bench2.coord.tick(10**9)
    assert parked_sync.error == E.NOT_COORDINATOR
    assert len(parked_sync.responses) == 1 and len(jx.responses) == 1
