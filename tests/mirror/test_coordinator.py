"""The pure ClusterMirrorCoordinator: ownership, reads and writes, and a replay that rebuilds
exactly what the live path served (an in-memory log of the encoded bytes stands in for
``__mirror_state``; the shell and a real broker are in tests/server/test_mirror_coordinator.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.mirror import records as rec
from kcore.mirror.coordinator import (
    ClusterMirrorCoordinator,
    MirrorCoordinatorConfig,
    PartitionMirrorState,
    StateUpdate,
)
from kcore.mirror.state import MirrorPartitionState as S
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

PARTITIONS = 5


class Log:
    """``__mirror_state`` as batches of encoded (key, value) pairs at their offsets, per
    partition; ``delete_before`` is DeleteRecords."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, list[tuple[bytes, bytes | None]]]]] = {}
        self.ends: dict[int, int] = {}
        self.refuse: KafkaError | None = None

    def append(self, partition: int, records) -> int:
        if self.refuse is not None:
            raise self.refuse
        base = self.ends.get(partition, 0)
        self.batches.setdefault(partition, []).append((base, [rec.encode(r) for r in records]))
        self.ends[partition] = base + len(records)
        return base

    def delete_before(self, partition: int, offset: int) -> None:
        kept = [(b, batch) for b, batch in self.batches[partition] if b >= offset]
        assert kept and kept[0][0] == offset, "a snapshot starts a batch"
        self.batches[partition] = kept

    def records(self, partition: int):
        return [rec.decode(k, v) for _, batch in self.batches.get(partition, []) for k, v in batch]


def loaded(log: Log, snapshot_after: int = 0) -> ClusterMirrorCoordinator:
    """A coordinator that owns every partition, replayed from ``log``."""
    core = ClusterMirrorCoordinator(
        MirrorCoordinatorConfig(PARTITIONS, snapshot_after),
        log.append,
        delete_before=log.delete_before,
    )
    for p in range(PARTITIONS):
        core.begin_loading(p)
        for record in log.records(p):
            core.replay(p, record)
        core.finish_loading(p, 0)
    return core


def everything(core: ClusterMirrorCoordinator, names) -> dict:
    return {name: core.read_states(name) for name in names}


def test_coordinator_write_then_read_and_reload():
    log = Log()
    core = loaded(log)
    core.write_states("m1", [StateUpdate("t", 0, S.LOG_TRUNCATION), StateUpdate("t", 1, 0)])
    core.write_states("m1", [StateUpdate("t", 0, S.MIRRORING)])
    want = {
        ("t", 0): PartitionMirrorState(S.MIRRORING, S.LOG_TRUNCATION),
        ("t", 1): PartitionMirrorState(S.LOG_TRUNCATION),
    }
    assert core.read_states("m1") == want
    assert loaded(log).read_states("m1") == want
    assert core.read_states("m1", {"t": [1, 7]}) == {
        ("t", 1): PartitionMirrorState(S.LOG_TRUNCATION),
        ("t", 7): PartitionMirrorState(),  # nothing recorded: UNKNOWN
    }
    # All records of a mirror in its partition (D-08).
    assert set(log.batches) == {core.partition_for("m1")}


def test_coordinator_unknown_is_never_written():
    log = Log()
    core = loaded(log)
    with pytest.raises(KafkaError) as e:
        core.write_states("m", [StateUpdate("t", 0, S.MIRRORING), StateUpdate("t", 1, 16)])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert "t-1" in e.value.message and "M-35" in e.value.message
    assert log.batches == {}  # all or nothing
    assert core.read_states("m") == {}


def test_coordinator_invalid_entries_are_all_named():
    core = loaded(Log())
    with pytest.raises(KafkaError) as e:
        core.write_states(
            "m",
            [
                StateUpdate("t", -1, 1),
                StateUpdate("t", 2, 42),
                StateUpdate("t", 2, 1),
                StateUpdate("", 0, 1, retry_attempt=-3),
                StateUpdate("u", 0, 1, last_mirror_epoch=-2, previous_state=99),
            ],
        )
    msg = e.value.message
    for part in (
        "t--1 (a negative partition)",
        "42 is no state code",
        "given twice",
        "no topic name",
        "retry attempt -3",
        "last mirror epoch -2",
        "previous state 99",
    ):
        assert part in msg


def test_coordinator_deleted_mirror_is_dropped_on_replay():
    log = Log()
    core = loaded(log)
    core.write_states("gone", [StateUpdate("t", 0, S.STOPPED, last_mirror_epoch=4)])
    core.write_states("kept", [StateUpdate("t", 0, S.MIRRORING)])
    core.delete_mirror("gone")
    assert core.read_states("gone") == {}
    reloaded = loaded(log)
    assert reloaded.read_states("gone") == {}
    assert reloaded.read_states("kept") == core.read_states("kept")
    assert "gone" not in reloaded.owned_mirrors()
    # The name can be reused: a new mirror of that name starts from nothing (M-65).
    reloaded.write_states("gone", [StateUpdate("t", 0, S.LOG_TRUNCATION)])
    assert loaded(log).read_states("gone") == {("t", 0): PartitionMirrorState(S.LOG_TRUNCATION)}


def test_coordinator_last_mirror_epochs_merge_across_records():
    log = Log()
    core = loaded(log)
    core.write_states("m", [StateUpdate("t", 0, S.STOPPING, last_mirror_epoch=3)])
    core.write_last_mirror_epochs("m", {("t", 1): 5})
    core.write_last_mirror_epochs("m", {("t", 0): 4})
    got = loaded(log).read_states("m")
    assert got[("t", 0)].last_mirror_epoch == 4
    assert got[("t", 1)] == PartitionMirrorState(last_mirror_epoch=5)
    with pytest.raises(KafkaError, match="invalid last mirror epochs"):
        core.write_last_mirror_epochs("m", {("t", 0): -1})


def test_coordinator_derives_previous_state_and_retry_attempt():
    log = Log()
    core = loaded(log)

    def step(state, **kw):
        core.write_states("m", [StateUpdate("t", 0, state, **kw)])
        return core.read_states("m")[("t", 0)]

    assert step(S.LOG_TRUNCATION) == PartitionMirrorState(S.LOG_TRUNCATION)
    assert step(S.FAILED, reason="source down") == PartitionMirrorState(
        S.FAILED, S.LOG_TRUNCATION, 0, "source down"
    )
    # An automatic recovery attempt leaves FAILED: counted, the reason kept (D-13).
    assert step(S.LOG_TRUNCATION) == PartitionMirrorState(
        S.LOG_TRUNCATION, S.FAILED, 1, "source down"
    )
    assert step(S.FAILED) == PartitionMirrorState(S.FAILED, S.LOG_TRUNCATION, 1, "source down")
    assert step(S.LOG_TRUNCATION).retry_attempt == 2
    # Reaching a settled state ends the cycle.
    assert step(S.MIRRORING) == PartitionMirrorState(S.MIRRORING, S.LOG_TRUNCATION)
    # A writer that knows better says so (the local path, kcore's WriteMirrorStates tags).
    assert step(S.FAILED, previous_state=S.PAUSED, retry_attempt=4) == PartitionMirrorState(
        S.FAILED, S.PAUSED, 4
    )
    assert loaded(log).read_states("m") == core.read_states("m")


def test_coordinator_stopped_topics_stop_every_known_partition():
    log = Log()
    core = loaded(log)
    core.write_states("m", [StateUpdate("gone", p, S.MIRRORING) for p in range(3)])
    core.write_states("m", [StateUpdate("gone", 2, S.STOPPED), StateUpdate("other", 0, 1)])
    core.write_states("m", [StateUpdate("other", 0, S.PAUSING)], stopped_topics=["gone", "none"])
    got = loaded(log).read_states("m")
    assert {tp: s.state for tp, s in got.items()} == {
        ("gone", 0): S.STOPPED,
        ("gone", 1): S.STOPPED,
        ("gone", 2): S.STOPPED,
        ("other", 0): S.PAUSING,
    }
    assert got[("gone", 2)].previous_state is S.MIRRORING  # not rewritten: already STOPPED


def test_coordinator_ownership_errors():
    log = Log()
    core = ClusterMirrorCoordinator(MirrorCoordinatorConfig(PARTITIONS), log.append)
    p = core.partition_for("m")
    with pytest.raises(KafkaError) as e:
        core.read_states("m")
    assert e.value.code == ErrorCode.NOT_COORDINATOR
    core.begin_loading(p)
    with pytest.raises(KafkaError) as e:
        core.write_states("m", [StateUpdate("t", 0, 1)])
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    core.finish_loading(p, 0)
    core.write_states("m", [StateUpdate("t", 0, 1)])
    core.unload(p)  # resignation drops the state at once (M-10)
    with pytest.raises(KafkaError) as e:
        core.read_states("m")
    assert e.value.code == ErrorCode.NOT_COORDINATOR
    with pytest.raises(KafkaError) as e:
        core.read_states("")
    assert e.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize(
    ("log_error", "client_error"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_coordinator_refused_append_leaves_memory_unchanged(log_error, client_error):
    log = Log()
    core = loaded(log)
    core.write_states("m", [StateUpdate("t", 0, S.MIRRORING)])
    before = core.read_states("m")
    log.refuse = KafkaError(log_error, "refused")
    with pytest.raises(KafkaError) as e:
        core.write_states("m", [StateUpdate("t", 0, S.PAUSING)])
    assert e.value.code == client_error
    with pytest.raises(KafkaError):
        core.delete_mirror("m")
    assert core.read_states("m") == before


def test_coordinator_snapshot_bounds_the_log_and_deletes_below_it():
    log = Log()
    core = loaded(log, snapshot_after=10)
    p = core.partition_for("m")
    for i in range(100):
        core.write_states("m", [StateUpdate("t", i % 2, S.MIRRORING if i % 2 else S.PAUSED)])
    core.write_last_mirror_epochs("m", {("t", 0): 3})
    # Never more than the threshold plus the live state (2 partitions + epochs) in the log.
    assert len(log.records(p)) <= 10 + 3
    assert log.batches[p][0][0] > 0  # deleted below the last snapshot
    assert loaded(log).read_states("m") == core.read_states("m")
    assert core.read_states("m")[("t", 0)].last_mirror_epoch == 3


def test_coordinator_no_snapshot_while_the_log_is_mostly_live_state():
    log = Log()
    core = loaded(log, snapshot_after=4)
    core.write_states("m", [StateUpdate("t", i, S.MIRRORING) for i in range(6)])
    assert len(log.batches[core.partition_for("m")]) == 1  # 6 records, all live: no snapshot


def test_coordinator_wire_read_and_write():
    core = loaded(Log())
    W = m.WriteMirrorStatesRequest
    request = W(
        mirror_name="m",
        topics=[
            W.TopicData(
                name="t",
                partitions=[
                    W.PartitionData(partition_index=0, state=7, reason="boom"),
                    W.PartitionData(partition_index=1, state=5, last_mirror_epoch=9),
                ],
            )
        ],
    )
    response = core.write_mirror_states(request)
    assert response.error_code == 0
    assert [p.error_code for p in response.topics[0].partitions] == [0, 0]
    R = m.ReadMirrorStatesRequest
    read = core.read_mirror_states(
        R(mirror_name="m", topics=[R.TopicData(name="t", partitions=[R.PartitionData()])])
    )
    (p0,) = read.topics[0].partitions
    assert (p0.state, p0.previous_state, p0.reason, p0.last_mirror_epoch) == (7, 16, "boom", -1)
    everything_read = core.read_mirror_states(R(mirror_name="m"))
    assert [
        (p.partition_index, p.state, p.last_mirror_epoch)
        for p in everything_read.topics[0].partitions
    ] == [
        (0, 7, -1),
        (1, 5, 9),
    ]
    bad = core.write_mirror_states(
        W(mirror_name="m", topics=[W.TopicData(name="t", partitions=[W.PartitionData(state=16)])])
    )
    assert bad.error_code == ErrorCode.INVALID_REQUEST and "M-35" in bad.error_message
    assert bad.topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    elsewhere = core.read_mirror_states(R(mirror_name=""))
    assert elsewhere.error_code == ErrorCode.INVALID_REQUEST


# -- replay == live, for any sequence of operations -------------------------------------------

_mirrors = st.sampled_from(["a", "b", "c", "mirror-7"])
_tp = st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2))
_update = st.builds(
    StateUpdate,
    topic=_tp.map(lambda tp: tp[0]),
    partition=st.integers(0, 2),
    state=st.sampled_from([s for s in S if s is not S.UNKNOWN]),
    last_mirror_epoch=st.integers(-1, 10),
    previous_state=st.none() | st.sampled_from(list(S)),
    retry_attempt=st.none() | st.integers(0, 5),
    reason=st.none() | st.text(max_size=5),
    leader_epoch=st.integers(-1, 3),
)
_op = st.one_of(
    st.tuples(
        st.just("write"),
        _mirrors,
        st.lists(_update, max_size=4),
        st.lists(st.sampled_from(["x", "y"]), max_size=1),
    ),
    st.tuples(st.just("lme"), _mirrors, st.dictionaries(_tp, st.integers(0, 9), max_size=3)),
    st.tuples(st.just("delete"), _mirrors),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(_op, max_size=25), snapshot_after=st.sampled_from([0, 1, 4, 10]))
def test_coordinator_replay_rebuilds_what_the_live_path_served(ops, snapshot_after):
    """With or without snapshots (and the deletion of what is below them)."""
    log = Log()
    core = loaded(log, snapshot_after)
    for op in ops:
        try:
            if op[0] == "write":
                core.write_states(op[1], op[2], op[3])
            elif op[0] == "lme":
                core.write_last_mirror_epochs(op[1], op[2])
            else:
                core.delete_mirror(op[1])
        except KafkaError as e:
            # Duplicates in a generated request, or a write from an older leader epoch.
            assert e.code in (ErrorCode.INVALID_REQUEST, ErrorCode.FENCED_LEADER_EPOCH)
    names = ["a", "b", "c", "mirror-7"]
    assert everything(loaded(log), names) == everything(core, names)
    assert loaded(log).owned_mirrors() == core.owned_mirrors()
    # And a coordinator that took over mid-way, then snapshot and deleted, still agrees.
    again = loaded(log, snapshot_after)
    for name in names:
        again.write_states(name, [StateUpdate("z", 0, S.PAUSED)])
        core.write_states(name, [StateUpdate("z", 0, S.PAUSED)])
    assert everything(loaded(log), names) == everything(core, names) == everything(again, names)
    for p in log.batches:  # UNKNOWN is never in the log (M-35)
        assert all(getattr(r, "state", S.MIRRORING) is not S.UNKNOWN for r in log.records(p))


def test_coordinator_a_stop_that_begins_forgets_the_previous_stops_lme():
    # The machine relies on it: after a crash, a recorded LME means this stop's step 2 is done.
    log = Log()
    core = loaded(log)
    tp = ("t", 0)
    core.write_states("m1", [StateUpdate(*tp, S.STOPPING)])
    core.write_states("m1", [StateUpdate(*tp, S.STOPPING, last_mirror_epoch=4)])
    core.write_states("m1", [StateUpdate(*tp, S.STOPPED)])
    assert core.read_states("m1")[tp].last_mirror_epoch == 4  # kept for failback (M-56)
    core.write_states("m1", [StateUpdate(*tp, S.LOG_TRUNCATION)])
    assert core.read_states("m1")[tp].last_mirror_epoch == 4
    core.write_states("m1", [StateUpdate(*tp, S.STOPPING)])  # a second stop begins
    assert core.read_states("m1")[tp].last_mirror_epoch == -1
    assert loaded(log).read_states("m1")[tp].last_mirror_epoch == -1  # and so does replay
    core.write_states("m1", [StateUpdate(*tp, S.STOPPING, last_mirror_epoch=9)])
    assert loaded(log).read_states("m1")[tp].last_mirror_epoch == 9


def test_coordinator_fences_a_write_from_a_former_leader():
    # D-14: broker A led t-0 at epoch 3; B took over at epoch 4 and wrote PAUSED. A's late
    # write must not undo it, and a coordinator that reloads the log still knows epoch 4.
    log = Log()
    core = loaded(log)
    core.write_states("m", [StateUpdate("t", 0, S.MIRRORING, leader_epoch=3)])
    core.write_states("m", [StateUpdate("t", 0, S.PAUSED, leader_epoch=4)])
    for coordinator in (core, loaded(log)):
        with pytest.raises(KafkaError) as e:
            coordinator.write_states(
                "m",
                [
                    StateUpdate("t", 1, S.MIRRORING, leader_epoch=0),  # not fenced, not written
                    StateUpdate("t", 0, S.FAILED, leader_epoch=3, reason="late"),
                ],
            )
        assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
        assert "t-0 (leader epoch 3 < 4)" in e.value.message and "t-1" not in e.value.message
        assert coordinator.read_states("m") == {
            ("t", 0): PartitionMirrorState(S.PAUSED, S.MIRRORING)
        }
    written = len(log.records(core.partition_for("m")))
    # The current leader (the same epoch or a newer one) writes; a writer without an epoch
    # (-1) is not fenced, and keeps the recorded epoch.
    core.write_states("m", [StateUpdate("t", 0, S.MIRRORING, leader_epoch=4)])
    core.write_states("m", [StateUpdate("t", 0, S.PAUSING)])
    with pytest.raises(KafkaError):
        core.write_states("m", [StateUpdate("t", 0, S.FAILED, leader_epoch=3)])
    core.write_states("m", [StateUpdate("t", 0, S.STOPPED, leader_epoch=9)])
    assert len(log.records(core.partition_for("m"))) == written + 3
    # A Start after STOPPED is not fenced: a topic created again starts its epochs at 0.
    core.write_states("m", [StateUpdate("t", 0, S.LOG_TRUNCATION, leader_epoch=0)])
    assert core.read_states("m")[("t", 0)].state is S.LOG_TRUNCATION


def test_coordinator_wire_write_is_fenced_by_leader_epoch():
    core = loaded(Log())
    W = m.WriteMirrorStatesRequest

    def write(state: int, epoch: int):
        partition = W.PartitionData(partition_index=0, state=state, leader_epoch=epoch)
        return core.write_mirror_states(
            W(mirror_name="m", topics=[W.TopicData(name="t", partitions=[partition])])
        )

    assert write(int(S.MIRRORING), 5).error_code == 0
    fenced = write(int(S.FAILED), 4)
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert fenced.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert write(int(S.FAILED), -1).error_code == 0  # a writer that does not send an epoch


def test_coordinator_synced_acls_survive_reload_snapshot_and_end_with_the_mirror():
    # D-22: the metadata sync's record of the ACLs it created, replaced as a whole.
    from kcore.metadata.image import StandardAcl

    a = StandardAcl(2, "orders", 3, "User:alice", "*", 3, 3)
    b = StandardAcl(2, "pay", 4, "User:bob", "*", 4, 3)
    log = Log()
    core = loaded(log, snapshot_after=4)
    assert core.synced_acls("m") == frozenset()
    core.write_synced_acls("m", {a, b})
    core.write_synced_acls("m", {a, b})  # unchanged: nothing written
    assert sum(len(batch) for _, batch in log.batches[core.partition_for("m")]) == 1
    core.write_synced_acls("m", {b})
    for i in range(6):  # enough records for a snapshot, which must keep the ACL record
        core.write_states("m", [StateUpdate("t", i, S.LOG_TRUNCATION)])
    assert loaded(log).synced_acls("m") == frozenset({b})
    core.delete_mirror("m")
    assert core.synced_acls("m") == frozenset()
    assert loaded(log).synced_acls("m") == frozenset()
    assert "m" not in loaded(log).owned_mirrors()
