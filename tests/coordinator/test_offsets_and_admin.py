"""OffsetCommit/Fetch/Delete, expiration, ListGroups/DescribeGroups/DeleteGroups, ownership."""

from dataclasses import replace

import pytest

from kcore.coordinator.group import records as rec
from kcore.coordinator.group.group import GroupState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import TEST_CONFIG, Bench, Box, groups_of, persisted_view, replayed

E = ErrorCode
S = GroupState


def subscription(*topics: str) -> bytes:
    return b"\x00\x00" + m.ConsumerProtocolSubscription(topics=list(topics)).encode(0)


# ---- OffsetCommit ------------------------------------------------------------------------------


def test_simple_commit_creates_empty_group_with_offsets():
    bench = Bench()
    assert bench.commit("g", {("t", 0): 10, ("t", 1): 11}) == {("t", 0): 0, ("t", 1): 0}
    g = groups_of(bench.coord)["g"]
    assert g.state is S.EMPTY and g.protocol_type is None
    assert bench.committed("g", "t", 1) == 11
    assert bench.records(rec.OffsetCommitRecord)[0].leader_epoch == 3


def test_simple_commit_refused_while_group_has_members():
    bench = Bench()
    bench.stable_group("g", 1)
    assert bench.commit("g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}


def test_member_commit_checks_member_and_generation():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    assert bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen) == {("t", 0): 0}
    assert bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen + 1) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert bench.commit("g", {("t", 0): 1}, member_id="x", generation=gen) == {
        ("t", 0): E.UNKNOWN_MEMBER_ID
    }


def test_member_commit_during_rebalance_phases():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    bench.join("g", a)  # PreparingRebalance: the current generation may still commit
    assert bench.commit("g", {("t", 0): 1}, member_id=b, generation=gen) == {("t", 0): 0}
    bench.join("g", b)  # CompletingRebalance
    assert bench.commit("g", {("t", 0): 2}, member_id=b, generation=gen + 1) == {
        ("t", 0): E.REBALANCE_IN_PROGRESS
    }


def test_commit_to_unknown_group_with_generation():
    bench = Bench()
    assert bench.commit("g", {("t", 0): 1}, member_id="m", generation=3, version=8) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert bench.commit("g", {("t", 0): 1}, member_id="m", generation=3, version=9) == {
        ("t", 0): E.GROUP_ID_NOT_FOUND
    }


def test_commit_metadata_too_large_only_for_that_partition():
    bench = Bench()
    errors = bench.commit("g", {("t", 0): 1}, metadata="x" * 17)
    assert errors == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert bench.commit("g", {("t", 1): 1}, metadata="x" * 16) == {("t", 1): 0}
    assert bench.committed("g", "t", 0) == -1 and bench.committed("g", "t", 1) == 1


@pytest.mark.parametrize(
    "failure, expected",
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.RECORD_LIST_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
    ],
)
def test_commit_write_failure_leaves_memory_unchanged(failure, expected):
    bench = Bench()
    bench.commit("g", {("t", 0): 1})
    bench.fail_with = failure
    assert bench.commit("g", {("t", 0): 2}) == {("t", 0): expected}
    bench.fail_with = None
    assert bench.committed("g", "t", 0) == 1
    bench.fail_with = failure
    bench.commit("other", {("t", 0): 2})
    assert "other" not in groups_of(bench.coord)


def test_commit_v1_timestamp_and_v2_retention_are_kept():
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, version=1, commit_timestamp=123, now=500)
    bench.commit("g", {("t", 1): 1}, version=2, retention=1000, now=500)
    bench.commit("g", {("t", 2): 1}, version=5, retention=1000, now=500)  # not in v5: ignored
    r0, r1, r2 = bench.records(rec.OffsetCommitRecord)
    assert (r0.commit_timestamp, r0.expire_timestamp) == (123, -1)
    assert (r1.commit_timestamp, r1.expire_timestamp) == (500, 1500)
    assert (r2.commit_timestamp, r2.expire_timestamp) == (500, -1)


def test_commit_keeps_member_session_alive():
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1)
    bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen, now=9_000)
    bench.coord.tick(18_999)
    assert a in groups_of(bench.coord)["g"].members


# ---- OffsetFetch -------------------------------------------------------------------------------


def test_fetch_unknown_partitions_and_groups():
    bench = Bench()
    bench.commit("g", {("t", 0): 7}, metadata="hi")
    error, parts = bench.fetch("g", {"t": [0, 1], "u": [0]})
    assert error == E.NONE
    assert (parts["t", 0].committed_offset, parts["t", 0].metadata) == (7, "hi")
    assert parts["t", 0].committed_leader_epoch == 3
    for tp in (("t", 1), ("u", 0)):
        p = parts[tp]
        assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (-1, -1, "")
    error, parts = bench.fetch("nope", {"t": [0]})
    assert error == E.NONE and parts["t", 0].committed_offset == -1


def test_fetch_all_topics():
    bench = Bench()
    bench.commit("g", {("b", 1): 2, ("a", 0): 1})
    error, parts = bench.fetch("g", None)
    assert {tp: p.committed_offset for tp, p in parts.items()} == {("a", 0): 1, ("b", 1): 2}


def test_fetch_errors_v1_are_per_partition_v2_top_level():
    bench = Bench(own=False)
    error, parts = bench.fetch("g", {"t": [0]}, version=1)
    assert error == E.NONE and parts["t", 0].error_code == E.NOT_COORDINATOR
    error, parts = bench.fetch("g", {"t": [0]}, version=2)
    assert error == E.NOT_COORDINATOR and parts == {}


def test_fetch_v8_several_groups_each_with_its_error():
    bench = Bench(own=False)
    owned = bench.coord.partition_for("a")
    bench.coord.begin_loading(owned)
    bench.coord.finish_loading(owned, 0)
    other = next(g for g in ("b", "c", "d", "e", "f") if bench.coord.partition_for(g) != owned)
    bench.commit("a", {("t", 0): 5})
    G = m.OffsetFetchRequest.OffsetFetchRequestGroup
    T = m.OffsetFetchRequest.OffsetFetchRequestTopics
    req = m.OffsetFetchRequest(
        groups=[G(group_id="a", topics=[T(name="t", partition_indexes=[0])]), G(group_id=other)],
        require_stable=True,
    )
    resp = bench.coord.fetch_offsets(req, 8, 0)
    ga, gb = resp.groups
    assert ga.error_code == 0 and ga.topics[0].partitions[0].committed_offset == 5
    assert gb.error_code == E.NOT_COORDINATOR
    resp.encode(8)


# ---- OffsetDelete ------------------------------------------------------------------------------


def delete_offsets(bench, group, topics: dict[str, list[int]]):
    T = m.OffsetDeleteRequest.OffsetDeleteRequestTopic
    P = m.OffsetDeleteRequest.OffsetDeleteRequestPartition
    req = m.OffsetDeleteRequest(
        group_id=group,
        topics=[
            T(name=t, partitions=[P(partition_index=i) for i in ps]) for t, ps in topics.items()
        ],
    )
    return bench.coord.delete_offsets(req, 0, 0)


def test_delete_offsets_refuses_subscribed_topics():
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1, protocols=[("range", subscription("t"))])
    bench.commit("g", {("t", 0): 1, ("u", 0): 2}, member_id=a, generation=gen)
    resp = delete_offsets(bench, "g", {"t": [0], "u": [0]})
    errors = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    assert errors == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0}
    assert bench.committed("g", "u", 0) == -1 and bench.committed("g", "t", 0) == 1
    assert bench.records(rec.OffsetTombstone) == [rec.OffsetTombstone("g", "u", 0)]


def test_delete_offsets_group_errors():
    bench = Bench()
    assert delete_offsets(bench, "nope", {"t": [0]}).error_code == E.GROUP_ID_NOT_FOUND
    assert delete_offsets(bench, "", {"t": [0]}).error_code == E.INVALID_GROUP_ID
    bench.stable_group("g", 1, protocol_type="connect")
    assert delete_offsets(bench, "g", {"t": [0]}).error_code == E.NON_EMPTY_GROUP


# ---- expiration --------------------------------------------------------------------------------


def test_offsets_of_simple_group_expire_from_commit_time():
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, now=5_000)
    bench.coord.tick(100_000)
    assert bench.committed("g", "t", 0) == 1
    bench.coord.tick(110_000)  # checked every 10_000; 110_000 - 5_000 >= retention
    assert "g" not in groups_of(bench.coord)
    assert rec.OffsetTombstone("g", "t", 0) in bench.records()
    assert rec.GroupTombstone("g") in bench.records()


def test_offsets_of_empty_group_expire_from_when_it_became_empty():
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1, session=60_000)
    bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen, now=0)
    bench.leave("g", [(a, None)], now=50_000)
    bench.coord.tick(140_000)
    assert bench.committed("g", "t", 0) == 1
    group = groups_of(bench.coord)["g"]
    bench.coord.tick(150_000)
    assert "g" not in groups_of(bench.coord)
    # Whoever still holds the group object (a request in flight) sees it Dead (Kafka's
    # cleanupGroupMetadata), not Empty: a join on it must not revive it.
    assert group.is_in(GroupState.DEAD)


def test_explicit_expire_timestamp_wins():
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, version=3, retention=15_000)
    bench.coord.tick(19_999)
    assert bench.committed("g", "t", 0) == 1
    bench.coord.tick(20_000)
    assert bench.committed("g", "t", 0) == -1


def test_stable_group_offsets_do_not_expire_while_subscribed():
    bench = Bench(replace(TEST_CONFIG, max_session_timeout_ms=10**9))
    sub = [("range", subscription("t"))]
    (a,), gen = bench.stable_group("g", 1, protocols=sub, session=10**9)
    bench.commit("g", {("t", 0): 1, ("gone", 0): 1}, member_id=a, generation=gen)
    bench.coord.tick(200_000)
    assert bench.committed("g", "t", 0) == 1
    assert bench.committed("g", "gone", 0) == -1


# ---- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------------


def test_list_groups_with_filters():
    bench = Bench()
    bench.stable_group("s", 1)
    bench.commit("e", {("t", 0): 1})
    req = m.ListGroupsRequest(states_filter=["stable"], types_filter=["Classic"])
    resp = bench.coord.list_groups(req, 5)
    assert [(g.group_id, g.group_state, g.group_type) for g in resp.groups] == [
        ("s", "Stable", "classic")
    ]
    resp = bench.coord.list_groups(m.ListGroupsRequest(states_filter=["stable"]), 3)
    assert {g.group_id for g in resp.groups} == {"s", "e"}  # no filter before v4
    assert bench.coord.list_groups(m.ListGroupsRequest(types_filter=["consumer"]), 5).groups == []


def test_list_groups_while_loading():
    bench = Bench()
    bench.coord.begin_loading(0)
    resp = bench.coord.list_groups(m.ListGroupsRequest(), 4)
    assert resp.error_code == E.COORDINATOR_LOAD_IN_PROGRESS


def test_describe_groups():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2, instance_id=None)
    resp = bench.coord.describe_groups(m.DescribeGroupsRequest(groups=["g", "nope"]), 5)
    g, nope = resp.groups
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [(x.member_id, x.member_assignment, x.member_metadata) for x in g.members] == [
        (a, a.encode(), b"r"),
        (b, b.encode(), b"r"),
    ]
    assert g.authorized_operations == -(2**31)
    assert (nope.error_code, nope.group_state, nope.members) == (0, "Dead", [])
    resp.encode(5)
    resp = bench.coord.describe_groups(m.DescribeGroupsRequest(groups=["nope"]), 6)
    assert resp.groups[0].error_code == E.GROUP_ID_NOT_FOUND
    bench.join("g", a)
    g = bench.coord.describe_groups(m.DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert g.group_state == "PreparingRebalance" and g.protocol_data == ""
    assert all(x.member_assignment == b"" for x in g.members)


def test_delete_groups():
    bench = Bench()
    bench.stable_group("busy", 1)
    bench.commit("idle", {("t", 0): 1, ("t", 1): 1})
    req = m.DeleteGroupsRequest(groups_names=["idle", "busy", "nope", ""])
    resp = bench.coord.delete_groups(req, 2, 0)
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("idle", 0),
        ("busy", E.NON_EMPTY_GROUP),
        ("nope", E.GROUP_ID_NOT_FOUND),
        ("", E.INVALID_GROUP_ID),
    ]
    assert "idle" not in groups_of(bench.coord)
    assert bench.records()[-3:] == [
        rec.OffsetTombstone("idle", "t", 0),
        rec.OffsetTombstone("idle", "t", 1),
        rec.GroupTombstone("idle"),
    ]
    assert "idle" not in groups_of(replayed(bench))


def test_delete_groups_write_failure_keeps_group():
    bench = Bench()
    bench.commit("idle", {("t", 0): 1})
    bench.fail_with = E.NOT_LEADER_OR_FOLLOWER
    resp = bench.coord.delete_groups(m.DeleteGroupsRequest(groups_names=["idle"]), 2, 0)
    assert resp.results[0].error_code == E.NOT_COORDINATOR
    bench.fail_with = None
    assert bench.committed("idle", "t", 0) == 1


# ---- ownership ---------------------------------------------------------------------------------


def test_unload_answers_parked_requests_not_coordinator_and_drops_groups():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    parked_join = bench.join("g", a)
    p = bench.coord.partition_for("g")
    c, jc = bench.join_dynamic("g2") if bench.coord.partition_for("g2") == p else (None, Box())
    bench.coord.unload(p)
    assert parked_join.error == E.NOT_COORDINATOR
    assert p not in bench.coord.owned_partitions()
    assert bench.heartbeat("g", b, gen) == E.NOT_COORDINATOR
    assert bench.coord.next_deadline_ms() is not None or not bench.coord.owned_partitions()


def test_unload_then_replay_restores_groups_and_offsets():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    bench.commit("g", {("t", 0): 4}, member_id=a, generation=gen)
    bench.commit("simple", {("u", 3): 9})
    before = {gid: persisted_view(g) for gid, g in groups_of(bench.coord).items()}
    for p in range(TEST_CONFIG.offsets_topic_partitions):
        bench.coord.unload(p)
        bench.coord.begin_loading(p)
        for part, record in bench.appended:
            if part == p:
                bench.coord.replay(p, record)
        bench.coord.finish_loading(p, 0)
    after = {gid: persisted_view(g) for gid, g in groups_of(bench.coord).items()}
    assert after == before
    assert bench.heartbeat("g", a, gen) == E.NONE


def test_replay_requires_loading_and_skips_unknown_records():
    bench = Bench()
    with pytest.raises(ValueError):
        bench.coord.replay(0, rec.GroupTombstone("g"))
    bench.coord.begin_loading(0)
    bench.coord.replay(0, None)
    bench.coord.finish_loading(0, 0)


def test_groups_loaded_over_max_size_rebalance():
    bench = Bench()
    bench.stable_group("g", 2)
    fresh = replayed(bench, replace(TEST_CONFIG, max_size=1))
    assert groups_of(fresh)["g"].state is S.PREPARING_REBALANCE
