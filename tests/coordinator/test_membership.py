"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup against Kafka's classic group rules."""

from dataclasses import replace

import pytest

from kcore.coordinator.group.coordinator import GroupCoordinator
from kcore.coordinator.group.group import GroupState
from kcore.coordinator.group.membership import NEW_MEMBER_JOIN_TIMEOUT_MS
from kcore.coordinator.group.records import GroupMetadataRecord
from kcore.protocol.errors import ErrorCode

from .harness import TEST_CONFIG, Bench, groups_of, persisted_view, replayed

E = ErrorCode
S = GroupState


def group(bench, gid="g"):
    return groups_of(bench.coord)[gid]


# ---- request validation ------------------------------------------------------------------------


def test_join_empty_group_id_is_invalid_group_id():
    assert Bench().join("").error == E.INVALID_GROUP_ID


@pytest.mark.parametrize("session", [999, 60001])
def test_join_session_timeout_out_of_range_is_invalid_session_timeout(session):
    assert Bench().join("g", session=session).error == E.INVALID_SESSION_TIMEOUT


def test_join_not_owned_partition_is_not_coordinator():
    bench = Bench(own=False)
    assert bench.join("g").error == E.NOT_COORDINATOR
    assert bench.sync("g", "m", 1).error == E.NOT_COORDINATOR
    assert bench.heartbeat("g", "m", 1) == E.NOT_COORDINATOR
    assert bench.leave("g", [("m", None)]).error_code == E.NOT_COORDINATOR


def test_join_loading_partition_is_coordinator_load_in_progress():
    bench = Bench(own=False)
    bench.coord.begin_loading(bench.coord.partition_for("g"))
    assert bench.join("g").error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert bench.heartbeat("g", "m", 1) == E.COORDINATOR_LOAD_IN_PROGRESS


def test_join_known_member_of_unknown_group_is_unknown_member_id():
    assert Bench().join("g", "ghost").error == E.UNKNOWN_MEMBER_ID


def test_join_protocol_type_mismatch_is_inconsistent_group_protocol():
    bench = Bench()
    bench.stable_group("g", 1)
    assert bench.join("g", protocol_type="connect").error == E.INCONSISTENT_GROUP_PROTOCOL


def test_join_without_common_protocol_is_inconsistent_group_protocol():
    bench = Bench()
    bench.stable_group("g", 1)
    box = bench.join("g", protocols=[("roundrobin", b"")])
    assert box.error == E.INCONSISTENT_GROUP_PROTOCOL


# ---- the join phase ----------------------------------------------------------------------------


def test_join_v4_empty_member_id_is_member_id_required_with_new_id():
    bench = Bench()
    box = bench.join("g", client_id="app")
    assert box.error == E.MEMBER_ID_REQUIRED
    assert box.one.member_id == "app-1"
    assert group(bench).pending_members == {"app-1": 10_000}
    # The new group is persisted at once, empty.
    assert bench.records(GroupMetadataRecord)[0].value.generation == 0


def test_join_pending_member_expires_after_session_timeout():
    bench = Bench()
    bench.join("g")
    bench.coord.tick(9_999)
    assert group(bench).pending_members
    bench.coord.tick(10_000)
    # (At 10_000 the offsets expiration also deletes the group: Empty, without offsets.)
    g = groups_of(bench.coord).get("g")
    assert g is None or not g.pending_members
    assert bench.join("g", "client-1").error == E.UNKNOWN_MEMBER_ID


def test_join_v3_adds_member_directly_and_completes_after_delay():
    bench = Bench()
    box = bench.join("g", version=3)
    assert not box.answered  # the initial rebalance waits for its delay, even if all joined
    bench.coord.tick(0)
    resp = box.one
    assert resp.error_code == 0 and resp.generation_id == 1 and resp.leader == resp.member_id
    assert [mem.member_id for mem in resp.members] == [resp.member_id]
    assert group(bench).state is S.COMPLETING_REBALANCE


def test_join_response_leader_gets_members_followers_do_not():
    bench = Bench()
    a, box_a = bench.join_dynamic("g", protocols=[("range", b"A")])
    b, box_b = bench.join_dynamic("g", protocols=[("range", b"B")])
    bench.coord.tick(0)
    leader, follower = box_a.one, box_b.one
    assert leader.leader == a and follower.leader == a
    assert [(x.member_id, x.metadata) for x in leader.members] == [(a, b"A"), (b, b"B")]
    assert follower.members == []
    assert leader.protocol_type == "consumer" and leader.protocol_name == "range"
    assert leader.skip_assignment is False


def test_join_response_v6_has_no_protocol_type():
    bench = Bench()
    _, box = bench.join_dynamic("g", version=6)
    bench.coord.tick(0)
    assert box.one.protocol_type is None and box.one.protocol_name == "range"
    box.one.encode(6)


def test_join_protocol_selected_by_vote():
    bench = Bench()
    _, b1 = bench.join_dynamic("g", protocols=[("range", b""), ("rr", b"")])
    _, b2 = bench.join_dynamic("g", protocols=[("rr", b""), ("range", b"")])
    _, b3 = bench.join_dynamic("g", protocols=[("rr", b""), ("sticky", b"")])
    bench.coord.tick(0)
    assert {b.one.protocol_name for b in (b1, b2, b3)} == {"rr"}


def test_join_initial_rebalance_delay_extends_while_members_arrive():
    bench = Bench(replace(TEST_CONFIG, initial_rebalance_delay_ms=3000))
    _, a = bench.join_dynamic("g", now=0, rebalance=10_000)
    assert group(bench).join_deadline_ms == 3000
    _, b = bench.join_dynamic("g", now=2000, rebalance=10_000)
    bench.coord.tick(3000)  # a member arrived during the delay: wait another one
    assert not a.answered and group(bench).join_deadline_ms == 6000
    bench.coord.tick(6000)
    assert a.one.generation_id == 1 and b.one.generation_id == 1


def test_join_initial_rebalance_delay_capped_by_rebalance_timeout():
    bench = Bench(replace(TEST_CONFIG, initial_rebalance_delay_ms=3000))
    boxes = [bench.join_dynamic("g", now=0, rebalance=5000)[1]]
    t = 0
    while not boxes[0].answered:
        t += 1000
        boxes.append(bench.join_dynamic("g", now=t, rebalance=5000)[1])
        bench.coord.tick(t)
    # 3000 then min(3000, 2000) = 5000 in all: the rebalance timeout, however many arrive.
    assert t == 5000


def test_rebalance_completes_when_all_known_members_rejoin():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    ja = bench.join("g", a, now=100)  # the leader rejoins: a rebalance starts
    assert group(bench).state is S.PREPARING_REBALANCE and not ja.answered
    assert bench.heartbeat("g", b, gen, now=100) == E.REBALANCE_IN_PROGRESS
    jb = bench.join("g", b, now=200)
    assert ja.one.generation_id == jb.one.generation_id == gen + 1


def test_rebalance_timeout_removes_members_that_did_not_rejoin():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2, rebalance=20_000, session=60_000)
    ja = bench.join("g", a, now=100, rebalance=20_000, session=60_000)
    bench.coord.tick(20_099)
    assert not ja.answered
    bench.coord.tick(20_100)
    assert ja.one.generation_id == gen + 1 and [x.member_id for x in ja.one.members] == [a]
    assert list(group(bench).members) == [a]


def test_group_max_size_reached():
    bench = Bench(replace(TEST_CONFIG, max_size=1))
    bench.stable_group("g", 1)
    box = bench.join("g")
    assert box.error == E.GROUP_MAX_SIZE_REACHED and box.one.member_id == ""


def test_follower_rejoin_in_stable_with_same_metadata_gets_current_generation():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    box = bench.join("g", b)
    assert box.one.generation_id == gen and box.one.members == []
    assert group(bench).state is S.STABLE


def test_rejoin_with_changed_metadata_triggers_rebalance():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    box = bench.join("g", b, protocols=[("range", b"new")])
    assert not box.answered and group(bench).state is S.PREPARING_REBALANCE


def test_join_in_empty_group_with_old_member_id_is_unknown_member_id():
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1)
    bench.leave("g", [(a, None)])
    assert group(bench).state is S.EMPTY and group(bench).generation_id == gen + 1
    assert bench.join("g", a).error == E.UNKNOWN_MEMBER_ID


# ---- SyncGroup ---------------------------------------------------------------------------------


def test_sync_followers_wait_for_leader_assignment_which_is_persisted_first():
    bench = Bench()
    a, ja = bench.join_dynamic("g")
    b, jb = bench.join_dynamic("g")
    bench.coord.tick(0)
    gen = ja.one.generation_id
    follower = bench.sync("g", b, gen)
    assert not follower.answered
    before = len(bench.records(GroupMetadataRecord))
    leader = bench.sync("g", a, gen, assignments={a: b"A", b: b"B"})
    written = bench.records(GroupMetadataRecord)[before:]
    assert [(x.member_id, x.assignment) for x in written[0].value.members] == [
        (a, b"A"),
        (b, b"B"),
    ]
    assert leader.one.assignment == b"A" and follower.one.assignment == b"B"
    assert follower.one.protocol_name == "range" and follower.one.protocol_type == "consumer"
    assert group(bench).state is S.STABLE


def test_sync_write_failure_answers_error_and_rebalances():
    bench = Bench()
    a, ja = bench.join_dynamic("g")
    b, jb = bench.join_dynamic("g")
    bench.coord.tick(0)
    gen = ja.one.generation_id
    follower = bench.sync("g", b, gen)
    bench.fail_with = E.NOT_ENOUGH_REPLICAS
    leader = bench.sync("g", a, gen, assignments={a: b"A", b: b"B"})
    assert leader.error == E.COORDINATOR_NOT_AVAILABLE
    assert follower.error == E.COORDINATOR_NOT_AVAILABLE
    assert group(bench).state is S.PREPARING_REBALANCE


@pytest.mark.parametrize(
    "failure, expected",
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    ],
)
def test_sync_write_errors_are_mapped(failure, expected):
    bench = Bench()
    a, ja = bench.join_dynamic("g")
    bench.coord.tick(0)
    bench.fail_with = failure
    assert bench.sync("g", a, 1, assignments={a: b""}).error == expected


def test_sync_errors():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    assert bench.sync("g", "ghost", gen).error == E.UNKNOWN_MEMBER_ID
    assert bench.sync("g", a, gen + 1).error == E.ILLEGAL_GENERATION
    assert bench.sync("g", a, gen, protocol_name="rr").error == E.INCONSISTENT_GROUP_PROTOCOL
    assert bench.sync("g", a, gen, protocol_type="x").error == E.INCONSISTENT_GROUP_PROTOCOL
    assert bench.sync("nope", a, gen).error == E.UNKNOWN_MEMBER_ID
    assert bench.sync("", a, gen).error == E.INVALID_GROUP_ID
    bench.join("g", a)  # leader rejoins: PreparingRebalance
    assert bench.sync("g", b, gen).error == E.REBALANCE_IN_PROGRESS


def test_sync_in_stable_returns_current_assignment():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    assert bench.sync("g", b, gen).one.assignment == b.encode()


def test_rebalance_during_completing_answers_parked_syncs_rebalance_in_progress():
    bench = Bench()
    a, ja = bench.join_dynamic("g")
    b, jb = bench.join_dynamic("g")
    bench.coord.tick(0)
    parked = bench.sync("g", b, 1)
    bench.join("g", b, protocols=[("range", b"changed")])
    assert parked.error == E.REBALANCE_IN_PROGRESS


def test_members_that_never_sync_are_removed_after_rebalance_timeout():
    bench = Bench()
    a, ja = bench.join_dynamic("g", rebalance=20_000, session=60_000)
    b, jb = bench.join_dynamic("g", rebalance=20_000, session=60_000)
    bench.coord.tick(0)
    bench.sync("g", a, 1, assignments={a: b"A", b: b"B"})
    assert bench.heartbeat("g", b, 1, now=5_000) == E.NONE  # alive, but never syncs
    bench.coord.tick(19_999)
    assert b in group(bench).members
    bench.coord.tick(20_000)
    assert list(group(bench).members) == [a]
    assert group(bench).state is S.PREPARING_REBALANCE


# ---- Heartbeat ---------------------------------------------------------------------------------


def test_heartbeat_errors_and_session_extension():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    assert bench.heartbeat("g", a, gen, now=9_000) == E.NONE
    assert bench.heartbeat("g", b, gen, now=9_000) == E.NONE
    assert bench.heartbeat("g", a, gen + 1) == E.ILLEGAL_GENERATION
    assert bench.heartbeat("g", "ghost", gen) == E.UNKNOWN_MEMBER_ID
    assert bench.heartbeat("nope", a, gen) == E.UNKNOWN_MEMBER_ID
    assert bench.heartbeat("", a, gen) == E.INVALID_GROUP_ID
    bench.coord.tick(18_999)
    assert group(bench).state is S.STABLE
    assert bench.heartbeat("g", a, gen, now=18_000) == E.NONE
    bench.coord.tick(19_000)  # b's session (9_000 + 10_000) expired
    assert list(group(bench).members) == [a]
    assert group(bench).state is S.PREPARING_REBALANCE


def test_heartbeat_during_rebalance_is_rebalance_in_progress():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    bench.join("g", a)
    assert bench.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS


def test_new_member_dropped_after_new_member_join_timeout():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2, session=60_000)
    ja = bench.join("g", a, now=10, rebalance=10**9, session=60_000)  # a long rebalance
    new_id, jn = bench.join_dynamic("g", now=10)
    for t in range(0, NEW_MEMBER_JOIN_TIMEOUT_MS + 1, 50_000):  # b stays alive, not rejoining
        assert bench.heartbeat("g", b, gen, now=t) == E.REBALANCE_IN_PROGRESS
        bench.coord.tick(t)
    assert not jn.answered
    bench.coord.tick(NEW_MEMBER_JOIN_TIMEOUT_MS + 10)
    assert jn.error == E.UNKNOWN_MEMBER_ID and new_id not in group(bench).members
    jb = bench.join("g", b, now=NEW_MEMBER_JOIN_TIMEOUT_MS + 20, session=60_000)
    assert ja.one.generation_id == jb.one.generation_id == gen + 1


# ---- LeaveGroup --------------------------------------------------------------------------------


def test_leave_v3_per_member_errors():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    resp = bench.leave("g", [(a, None), ("ghost", None), ("", "no-such-instance")])
    assert [(x.member_id, x.error_code) for x in resp.members] == [
        (a, 0),
        ("ghost", E.UNKNOWN_MEMBER_ID),
        ("", E.UNKNOWN_MEMBER_ID),
    ]
    assert group(bench).state is S.PREPARING_REBALANCE


def test_leave_v0_single_member_top_level_error():
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1)
    assert bench.leave("g", "ghost", version=0).error_code == E.UNKNOWN_MEMBER_ID
    assert bench.leave("g", a, version=1).error_code == 0
    g = group(bench)
    assert g.state is S.EMPTY and g.generation_id == gen + 1
    assert bench.records(GroupMetadataRecord)[-1].value.members == []
    assert bench.leave("nope", a, version=2).error_code == E.UNKNOWN_MEMBER_ID


def test_leave_of_parked_member_answers_its_join():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    ja = bench.join("g", a)
    bench.leave("g", [(a, None)])
    assert ja.error == E.UNKNOWN_MEMBER_ID


# ---- static membership (KIP-345) -----------------------------------------------------------


def static_group(bench, instances=("i1", "i2"), version=9, session=10_000):
    boxes = [bench.join("g", instance_id=i, version=version, session=session) for i in instances]
    bench.coord.tick(0)
    ids = [b.one.member_id for b in boxes]
    gen = boxes[0].one.generation_id
    leader = boxes[0].one.leader
    for mid in ids:
        if mid != leader:
            bench.sync("g", mid, gen)
    bench.sync("g", leader, gen, assignments={mid: mid.encode() for mid in ids})
    return ids, gen


def test_static_member_rejoin_replaces_id_without_rebalance():
    bench = Bench()
    (m1, m2), gen = static_group(bench)
    assert (m1, m2) == ("i1-1", "i2-2")
    box = bench.join("g", instance_id="i2")
    resp = box.one
    assert resp.error_code == 0 and resp.member_id == "i2-3" and resp.generation_id == gen
    g = group(bench)
    assert g.state is S.STABLE and g.static_members["i2"] == "i2-3"
    assert g.members["i2-3"].assignment == m2.encode()
    assert bench.records(GroupMetadataRecord)[-1].value.members[1].member_id == "i2-3"
    # The old id is fenced from now on.
    assert bench.heartbeat("g", m2, gen, instance_id="i2") == E.FENCED_INSTANCE_ID
    assert bench.sync("g", m2, gen, instance_id="i2").error == E.FENCED_INSTANCE_ID
    assert bench.heartbeat("g", "i2-3", gen, instance_id="i2") == E.NONE


def test_static_leader_rejoin_v9_skips_assignment_older_versions_not_told_leader():
    bench = Bench()
    (m1, m2), gen = static_group(bench)
    resp = bench.join("g", instance_id="i1", version=9).one
    assert resp.leader == resp.member_id and resp.skip_assignment is True
    assert len(resp.members) == 2
    resp = bench.join("g", instance_id="i1", version=8).one
    assert resp.leader == "i1-3" and resp.leader != resp.member_id and resp.members == []


def test_static_member_rejoin_with_new_protocol_triggers_rebalance():
    bench = Bench()
    static_group(bench)
    box = bench.join("g", instance_id="i2", protocols=[("rr", b""), ("range", b"")])
    # i2 now prefers rr but i1 supports only range: the selection stays range → no rebalance.
    assert box.one.error_code == 0 and group(bench).state is S.STABLE
    bench2 = Bench()
    static_group(bench2, instances=("i1",))
    box = bench2.join("g", instance_id="i1", protocols=[("rr", b""), ("range", b"r")])
    # The selection changes: a rebalance, which completes at once (its only member rejoined).
    assert box.one.generation_id == 2 and box.one.protocol_name == "rr"
    assert group(bench2).state is S.COMPLETING_REBALANCE


def test_static_member_replaced_while_parked_is_fenced():
    bench = Bench()
    (m1, m2), gen = static_group(bench)
    parked = bench.join("g", m2, instance_id="i2", protocols=[("range", b"x")])
    assert not parked.answered
    bench.join("g", instance_id="i2", protocols=[("range", b"x")])
    assert parked.error == E.FENCED_INSTANCE_ID


def test_static_member_replacement_write_failure_reverts():
    bench = Bench()
    (m1, m2), gen = static_group(bench)
    bench.fail_with = E.NOT_LEADER_OR_FOLLOWER
    box = bench.join("g", instance_id="i2")
    assert box.error == E.NOT_COORDINATOR
    assert group(bench).static_members["i2"] == m2
    assert bench.heartbeat("g", m2, gen, instance_id="i2") == E.NONE


def test_static_member_left_by_instance_id():
    bench = Bench()
    (m1, m2), gen = static_group(bench)
    resp = bench.leave("g", [("", "i2")])
    assert resp.members[0].error_code == 0
    assert "i2" not in group(bench).static_members


def test_static_members_not_rejoined_are_kept_at_rebalance_timeout():
    bench = Bench()
    (m1, m2), gen = static_group(bench, session=60_000)
    j1 = bench.join("g", m1, instance_id="i1", now=5, session=60_000)  # i2 does not rejoin
    bench.coord.tick(30_005)
    assert j1.one.generation_id == gen + 1
    assert set(group(bench).members) == {m1, m2}


def test_static_member_wrong_member_id_is_fenced():
    bench = Bench()
    static_group(bench)
    assert bench.join("g", "bogus", instance_id="i1").error == E.FENCED_INSTANCE_ID


# ---- persistence of membership -------------------------------------------------------------------


def test_stable_group_survives_reload():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    fresh = replayed(bench)
    assert persisted_view(groups_of(fresh)["g"]) == persisted_view(group(bench))


def test_loaded_members_get_sessions_from_load_time():
    bench = Bench()
    (a, b), gen = bench.stable_group("g", 2)
    fresh = GroupCoordinator(TEST_CONFIG, bench.append)
    p = fresh.partition_for("g")
    fresh.begin_loading(p)
    for part, record in bench.appended:
        if part == p:
            fresh.replay(p, record)
    fresh.finish_loading(p, 50_000)
    g = groups_of(fresh)["g"]
    assert g.state is S.STABLE
    assert {mem.heartbeat_deadline_ms for mem in g.members.values()} == {60_000}
    assert fresh.next_deadline_ms() == 60_000
