"""Transactional offset commits in the sans-IO group coordinator: TxnOffsetCommit validation,
pending offsets invisible until the COMMIT marker, ABORT dropping them, require_stable, the
log-order rule against plain commits, deletion and expiry, and replay after a restart."""

from __future__ import annotations

import pytest

from kcore.coordinator.group import records as rec
from kcore.coordinator.group.group import GroupState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import TEST_CONFIG, Bench, groups_of, pending_of, replayed

E = ErrorCode
S = GroupState
PID = 1000


def _partition(bench: Bench, group: str) -> int:
    return bench.coord.partition_for(group)


def _stable(bench, group, **kw):
    _, parts = bench.fetch(group, {"t": [0]}, require_stable=True, **kw)
    return parts["t", 0]


# ---- visibility: pending until the marker ------------------------------------------------------


def test_txn_commit_is_invisible_and_unstable_until_committed():
    bench = Bench()
    bench.commit("g", {("t", 0): 5})
    assert bench.txn_commit("g", {("t", 0): 10, ("t", 1): 11}) == {
        ("t", 0): E.NONE,
        ("t", 1): E.NONE,
    }
    assert bench.committed("g", "t", 0) == 5
    assert bench.committed("g", "t", 1) == -1
    unstable = _stable(bench, "g")
    assert unstable.error_code == E.UNSTABLE_OFFSET_COMMIT and unstable.committed_offset == -1

    bench.end_txn(_partition(bench, "g"), PID, commit=True)
    assert bench.committed("g", "t", 0) == 10 and bench.committed("g", "t", 1) == 11
    stable = _stable(bench, "g")
    assert stable.error_code == E.NONE and stable.committed_offset == 10
    assert not pending_of(bench.coord)


def test_txn_commit_abort_drops_the_pending_offsets():
    bench = Bench()
    bench.commit("g", {("t", 0): 5})
    bench.txn_commit("g", {("t", 0): 10, ("t", 2): 12})
    bench.end_txn(_partition(bench, "g"), PID, commit=False)
    assert bench.committed("g", "t", 0) == 5
    assert bench.committed("g", "t", 2) == -1
    assert _stable(bench, "g").error_code == E.NONE


def test_txn_commit_without_require_stable_before_v7_shows_the_committed_offset():
    bench = Bench()
    bench.commit("g", {("t", 0): 5})
    bench.txn_commit("g", {("t", 0): 10})
    _, parts = bench.fetch("g", {"t": [0]}, version=6)
    assert parts["t", 0].error_code == E.NONE and parts["t", 0].committed_offset == 5


def test_txn_commit_fetch_all_with_require_stable_flags_only_committed_partitions():
    bench = Bench()
    bench.commit("g", {("t", 0): 5, ("t", 1): 6})
    bench.txn_commit("g", {("t", 0): 10, ("t", 3): 13})
    req = m.OffsetFetchRequest(group_id="g", topics=None, require_stable=True)
    resp = bench.coord.fetch_offsets(req, 7, 0)
    parts = {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}
    # As Kafka: "all offsets" lists the committed ones; a pending-only partition is not listed.
    assert set(parts) == {("t", 0), ("t", 1)}
    assert parts["t", 0].error_code == E.UNSTABLE_OFFSET_COMMIT
    assert parts["t", 1].error_code == E.NONE and parts["t", 1].committed_offset == 6


def test_txn_commit_marker_of_another_producer_leaves_pending_offsets_alone():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10}, producer_id=1)
    bench.txn_commit("g", {("t", 1): 20}, producer_id=2)
    bench.end_txn(_partition(bench, "g"), 2, commit=True)
    assert bench.committed("g", "t", 1) == 20
    assert bench.committed("g", "t", 0) == -1
    assert _stable(bench, "g").error_code == E.UNSTABLE_OFFSET_COMMIT
    bench.end_txn(_partition(bench, "g"), 1, commit=True)
    assert bench.committed("g", "t", 0) == 10


def test_txn_commit_marker_in_another_partition_or_unknown_producer_is_a_no_op():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10})
    other = (_partition(bench, "g") + 1) % TEST_CONFIG.offsets_topic_partitions
    bench.end_txn(other, PID, commit=True)
    bench.end_txn(_partition(bench, "g"), 4242, commit=True)
    assert bench.committed("g", "t", 0) == -1
    assert bench.coord.pending_offsets(_partition(bench, "g"), PID)


# ---- the log-order rule ----------------------------------------------------------------------


def test_txn_commit_later_plain_commit_wins_when_the_transaction_commits():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10})
    bench.commit("g", {("t", 0): 20})
    bench.end_txn(_partition(bench, "g"), PID, commit=True)
    assert bench.committed("g", "t", 0) == 20
    assert bench.committed("g", "t", 0) == replayed_committed(bench, "g", "t", 0)


def test_txn_commit_written_after_a_plain_commit_replaces_it():
    bench = Bench()
    bench.commit("g", {("t", 0): 20})
    bench.txn_commit("g", {("t", 0): 10})
    bench.end_txn(_partition(bench, "g"), PID, commit=True)
    assert bench.committed("g", "t", 0) == 10
    assert replayed_committed(bench, "g", "t", 0) == 10


def replayed_committed(bench: Bench, group: str, topic: str, partition: int) -> int:
    fresh = replayed(bench)
    return groups_of(fresh)[group].offsets[topic, partition].offset


# ---- what is written ---------------------------------------------------------------------------


def test_txn_commit_appends_a_transactional_batch_of_the_producer():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10}, producer_id=77, now=123)
    assert bench.appended == []  # nothing plain
    ((partition, producer_id, record),) = bench.log
    assert partition == _partition(bench, "g") and producer_id == 77
    assert record == rec.OffsetCommitRecord("g", "t", 0, 10, 3, "", 123, -1)


def test_txn_commit_before_v2_drops_the_leader_epoch():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10}, version=1)
    assert bench.log[0][2].leader_epoch == -1


def test_complete_transaction_writes_nothing():
    bench = Bench()
    bench.txn_commit("g", {("t", 0): 10})
    n = len(bench.log)
    bench.coord.complete_transaction(_partition(bench, "g"), PID, 0, True, 0)
    assert len(bench.log) == n


# ---- validation --------------------------------------------------------------------------------


def test_txn_commit_member_checks_from_v3():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    ok = bench.txn_commit("g", {("t", 0): 1}, member_id=a, generation=gen)
    assert ok == {("t", 0): E.NONE}
    stale = bench.txn_commit("g", {("t", 0): 1}, member_id=a, generation=gen - 1)
    assert stale == {("t", 0): E.ILLEGAL_GENERATION}
    unknown = bench.txn_commit("g", {("t", 0): 1}, member_id="nobody", generation=gen)
    assert unknown == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # Without member id and generation a transactional commit is accepted in any state.
    assert bench.txn_commit("g", {("t", 0): 1}) == {("t", 0): E.NONE}
    # v0-2 carry no member fields: whatever the object holds is ignored.
    old = bench.txn_commit("g", {("t", 0): 1}, member_id="nobody", generation=99, version=2)
    assert old == {("t", 0): E.NONE}


def test_txn_commit_fenced_static_member():
    bench = Bench()
    static = bench.join("g", instance_id="i1")
    bench.coord.tick(0)
    gen = static.one.generation_id
    fenced = bench.txn_commit(
        "g", {("t", 0): 1}, member_id="other", generation=gen, instance_id="i1"
    )
    assert fenced == {("t", 0): E.FENCED_INSTANCE_ID}


def test_txn_commit_during_completing_rebalance_is_accepted_as_kafka_does():
    bench = Bench()
    a, ja = bench.join_dynamic("g")
    bench.coord.tick(0)
    assert groups_of(bench.coord)["g"].state is S.COMPLETING_REBALANCE
    gen = ja.one.generation_id
    resp = bench.txn_commit("g", {("t", 0): 1}, member_id=a, generation=gen)
    assert resp == {("t", 0): E.NONE}
    # ...while a plain OffsetCommit of the same member is still told to wait for SyncGroup.
    assert bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen) == {
        ("t", 0): E.REBALANCE_IN_PROGRESS
    }


def test_txn_commit_unknown_group_with_a_generation_is_illegal_generation():
    bench = Bench()
    resp = bench.txn_commit("nope", {("t", 0): 1}, member_id="m", generation=3)
    assert resp == {("t", 0): E.ILLEGAL_GENERATION}
    assert "nope" not in groups_of(bench.coord) and not bench.log


def test_txn_commit_unknown_group_without_generation_creates_a_simple_group():
    bench = Bench()
    assert bench.txn_commit("simple", {("t", 0): 1}) == {("t", 0): E.NONE}
    group = groups_of(bench.coord)["simple"]
    assert group.state is S.EMPTY and group.protocol_type is None and not group.offsets


def test_txn_commit_oversized_metadata_fails_only_those_partitions():
    bench = Bench()
    big = "x" * (TEST_CONFIG.offset_metadata_max_bytes + 1)
    req = m.TxnOffsetCommitRequest(
        transactional_id="t",
        group_id="g",
        producer_id=PID,
        producer_epoch=0,
        topics=[
            m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata=big
                    ),
                    m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=1, committed_offset=2, committed_metadata=None
                    ),
                ],
            )
        ],
    )
    resp = bench.coord.txn_commit_offsets(req, 3, 0)
    codes = [p.error_code for p in resp.topics[0].partitions]
    assert codes == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    assert [r.partition for _, _, r in bench.log] == [1]


@pytest.mark.parametrize(
    ("group", "producer_id", "expected"),
    [("", PID, E.INVALID_GROUP_ID), ("g", -1, E.INVALID_PRODUCER_ID_MAPPING)],
)
def test_txn_commit_bad_request_changes_nothing(group, producer_id, expected):
    bench = Bench()
    assert bench.txn_commit(group, {("t", 0): 1}, producer_id=producer_id) == {("t", 0): expected}
    assert not bench.log and not pending_of(bench.coord)


def test_txn_commit_coordinator_errors():
    bench = Bench(own=False)
    assert bench.txn_commit("g", {("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    bench.coord.begin_loading(_partition(bench, "g"))
    assert bench.txn_commit("g", {("t", 0): 1}) == {("t", 0): E.COORDINATOR_LOAD_IN_PROGRESS}


@pytest.mark.parametrize(
    ("log_error", "expected"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.INVALID_PRODUCER_EPOCH, E.INVALID_PRODUCER_EPOCH),
    ],
)
def test_txn_commit_failed_write_keeps_nothing_pending(log_error, expected):
    bench = Bench()
    bench.fail_with = log_error
    assert bench.txn_commit("g", {("t", 0): 1}) == {("t", 0): expected}
    assert not pending_of(bench.coord)
    assert "g" not in groups_of(bench.coord)


# ---- deletion and expiry ---------------------------------------------------------------------


def test_delete_groups_tombstones_pending_offsets_and_a_later_commit_does_not_revive_them():
    bench = Bench()
    bench.commit("g", {("t", 0): 5})
    bench.txn_commit("g", {("t", 0): 10, ("t", 1): 11})
    resp = bench.coord.delete_groups(m.DeleteGroupsRequest(groups_names=["g"]), 2, 0)
    assert resp.results[0].error_code == E.NONE
    tombstones = {(r.topic, r.partition) for r in bench.records(rec.OffsetTombstone)}
    assert tombstones == {("t", 0), ("t", 1)}
    assert not pending_of(bench.coord)
    bench.end_txn(_partition(bench, "g"), PID, commit=True)
    assert bench.committed("g", "t", 0) == -1 and bench.committed("g", "t", 1) == -1
    assert pending_of(replayed(bench)) == {}


def test_offset_delete_of_a_pending_only_partition_writes_a_tombstone():
    bench = Bench()
    bench.txn_commit("g", {("t", 1): 11})
    req = m.OffsetDeleteRequest(
        group_id="g",
        topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="t",
                partitions=[m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=1)],
            )
        ],
    )
    resp = bench.coord.delete_offsets(req, 0, 0)
    assert resp.error_code == E.NONE
    assert bench.records(rec.OffsetTombstone) == [rec.OffsetTombstone("g", "t", 1)]
    bench.end_txn(_partition(bench, "g"), PID, commit=True)
    assert bench.committed("g", "t", 1) == -1


def test_expiry_keeps_offsets_with_pending_transactions_and_their_group():
    bench = Bench()
    bench.commit("s", {("t", 0): 5})
    bench.txn_commit("s", {("t", 0): 10})
    bench.txn_commit("p", {("t", 0): 10})  # a group with nothing but a pending offset
    late = TEST_CONFIG.offsets_retention_ms * 3
    bench.coord.tick(late)
    assert bench.committed("s", "t", 0) == 5
    assert {"s", "p"} <= set(groups_of(bench.coord))
    assert not bench.records(rec.GroupTombstone)
    # Once aborted, both expire as usual.
    for group in ("s", "p"):
        bench.end_txn(_partition(bench, group), PID, commit=False)
    bench.coord.tick(late + TEST_CONFIG.offsets_retention_check_interval_ms)
    assert bench.committed("s", "t", 0) == -1
    assert not {"s", "p"} & set(groups_of(bench.coord))


# ---- loading -----------------------------------------------------------------------------------


def test_replay_of_transactional_records_and_markers_rebuilds_the_state():
    bench = Bench()
    bench.commit("g", {("t", 0): 1})
    bench.txn_commit("g", {("t", 0): 10}, producer_id=1)  # committed below
    bench.txn_commit("g", {("t", 1): 20}, producer_id=2)  # aborted below
    bench.txn_commit("g", {("t", 2): 30}, producer_id=3)  # left open
    p = _partition(bench, "g")
    bench.end_txn(p, 1, commit=True)
    bench.end_txn(p, 2, commit=False)
    fresh = replayed(bench)
    assert groups_of(fresh)["g"].offsets == groups_of(bench.coord)["g"].offsets
    assert set(groups_of(fresh)["g"].offsets) == {("t", 0)}
    assert groups_of(fresh)["g"].offsets["t", 0].offset == 10
    assert pending_of(fresh) == pending_of(bench.coord)
    assert set(fresh.pending_offsets(p, 3)) == {("g", "t", 2)}
    # The restarted coordinator completes the open transaction like the live one would.
    fresh.complete_transaction(p, 3, 0, True, 0)
    assert groups_of(fresh)["g"].offsets["t", 2].offset == 30


def test_replay_transactional_and_marker_require_loading():
    bench = Bench()
    record = rec.OffsetCommitRecord("g", "t", 0, 1, -1, "", 0)
    with pytest.raises(ValueError):
        bench.coord.replay_transactional(0, PID, record)
    with pytest.raises(ValueError):
        bench.coord.replay_marker(0, PID, True)


def test_complete_transaction_while_loading_is_left_to_the_replay():
    bench = Bench()
    p = _partition(bench, "g")
    bench.txn_commit("g", {("t", 0): 10})
    bench.coord.unload(p)
    bench.coord.begin_loading(p)
    # The marker lands in the log while the partition loads: the core ignores the call...
    bench.end_txn(p, PID, commit=True)
    # ...and the loader, reading to the log's end, replays the record and then the marker.
    for part, producer_id, item in bench.log:
        if item == "COMMIT":
            bench.coord.replay_marker(part, producer_id, True)
        else:
            bench.coord.replay_transactional(part, producer_id, item)
    bench.coord.finish_loading(p, 0)
    assert bench.committed("g", "t", 0) == 10
    assert not pending_of(bench.coord)


def test_unload_forgets_pending_offsets():
    bench = Bench()
    p = _partition(bench, "g")
    bench.txn_commit("g", {("t", 0): 10})
    bench.coord.unload(p)
    assert not pending_of(bench.coord)
    assert not bench.coord.pending_transactional_offsets("g", "t", 0)
