"""Which OffsetCommit / TxnOffsetCommit a classic group accepts: Kafka's
``ClassicGroup.validateOffsetCommit``, case by case, and the request-level answers around it.

Mutation testing (``make mutate``) found each boundary below untested: generation 0 is a
generation (only -1 means "no group management"), a member id or an instance id alone makes a
commit a member's, and a commit with generation -1 to an Empty group ignores its member id.
"""

from __future__ import annotations

import uuid

import pytest

from kcore.coordinator.group import records as rec
from kcore.coordinator.group.group import (
    ClassicGroup,
    CommittedOffset,
    GroupState,
    MemberMetadata,
)
from kcore.coordinator.group.offsets import validate_offset_commit
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import Bench, groups_of


def subscription(*topics: str) -> bytes:
    return b"\x00\x00" + m.ConsumerProtocolSubscription(topics=list(topics)).encode(0)


E = ErrorCode
S = GroupState
GENERATION = 5


def group(state: GroupState) -> ClassicGroup:
    """A group in ``state``: Empty ones have no members; the others have a dynamic member
    ``m1`` and a static member ``m2`` (instance ``i2``) of generation 5."""
    g = ClassicGroup("g", state=state)
    if state is S.EMPTY:
        return g
    g.generation_id = GENERATION
    for member_id, instance_id in (("m1", None), ("m2", "i2")):
        g.add(MemberMetadata(member_id, instance_id, "c", "h", 1000, 1000, "consumer", []))
    return g


CASES = [
    # (state, generation, member id, instance id, transactional) -> expected
    ((S.DEAD, GENERATION, "m1", None, False), E.COORDINATOR_NOT_AVAILABLE),
    ((S.DEAD, -1, "", None, True), E.COORDINATOR_NOT_AVAILABLE),
    # Generation -1 to an Empty group: a simple consumer or an admin client; the member id is
    # not looked at.
    ((S.EMPTY, -1, "", None, False), E.NONE),
    ((S.EMPTY, -1, "someone", None, False), E.NONE),
    # Generation 0 is a generation: the commit must come from a member.
    ((S.EMPTY, 0, "", None, False), E.UNKNOWN_MEMBER_ID),
    ((S.STABLE, 0, "", None, True), E.UNKNOWN_MEMBER_ID),
    # No member fields while the group has members: refused, unless transactional.
    ((S.STABLE, -1, "", None, False), E.UNKNOWN_MEMBER_ID),
    ((S.STABLE, -1, "", None, True), E.NONE),
    # A member id or an instance id alone makes it a member's commit, checked as such.
    ((S.STABLE, -1, "m1", None, False), E.ILLEGAL_GENERATION),
    ((S.STABLE, -1, "", "i2", False), E.FENCED_INSTANCE_ID),
    ((S.STABLE, -1, "nobody", None, True), E.UNKNOWN_MEMBER_ID),
    # Members of the current generation.
    ((S.STABLE, GENERATION, "m1", None, False), E.NONE),
    ((S.STABLE, GENERATION, "m2", "i2", False), E.NONE),
    ((S.STABLE, GENERATION - 1, "m1", None, False), E.ILLEGAL_GENERATION),
    ((S.STABLE, GENERATION, "nobody", None, False), E.UNKNOWN_MEMBER_ID),
    ((S.STABLE, GENERATION, "m1", "i2", False), E.FENCED_INSTANCE_ID),
    ((S.STABLE, GENERATION, "m1", "i9", False), E.UNKNOWN_MEMBER_ID),
    ((S.PREPARING_REBALANCE, GENERATION, "m1", None, False), E.NONE),
    ((S.COMPLETING_REBALANCE, GENERATION, "m1", None, False), E.REBALANCE_IN_PROGRESS),
    # A TxnOffsetCommit is not held to the group's state (Kafka's validateOffsetCommit).
    ((S.COMPLETING_REBALANCE, GENERATION, "m1", None, True), E.NONE),
    ((S.COMPLETING_REBALANCE, GENERATION - 1, "m1", None, True), E.ILLEGAL_GENERATION),
]


@pytest.mark.parametrize("case, expected", CASES, ids=lambda c: str(c))
def test_validate_offset_commit_is_kafkas(case, expected):
    state, generation, member_id, instance_id, transactional = case
    g = group(state)
    got = validate_offset_commit(g, member_id, instance_id, generation, transactional=transactional)
    assert got == expected


@pytest.mark.parametrize("version, code", [(8, E.ILLEGAL_GENERATION), (9, E.GROUP_ID_NOT_FOUND)])
@pytest.mark.parametrize("generation", [0, 3])
def test_commit_with_a_generation_to_an_unknown_group_is_refused(version, code, generation):
    bench = Bench()
    got = bench.commit("nope", {("t", 0): 1}, member_id="m", generation=generation, version=version)
    assert got == {("t", 0): code}
    assert bench.records() == []


def test_commit_to_a_group_this_coordinator_does_not_own_is_not_coordinator():
    bench = Bench(own=False)
    got = bench.commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    assert got == {
        ("t", 0): E.NOT_COORDINATOR,
        ("t", 1): E.NOT_COORDINATOR,
        ("u", 0): E.NOT_COORDINATOR,
    }
    assert bench.records() == []


def test_commit_v10_answers_with_the_topic_ids_it_was_given():
    bench = Bench()
    ids = {"t": uuid.uuid4(), "u": uuid.uuid4()}
    P = m.OffsetCommitRequest
    req = P(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            P.OffsetCommitRequestTopic(
                name=name,
                topic_id=topic_id,
                partitions=[P.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)],
            )
            for name, topic_id in ids.items()
        ],
    )
    resp = bench.coord.commit_offsets(req, 10, 0)
    assert [(t.name, t.topic_id) for t in resp.topics] == list(ids.items())
    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)


# ---- OffsetFetch v8+: several groups in one request ----------------------------------------


def test_fetch_v8_answers_each_group_for_the_partitions_it_names():
    bench = Bench()
    bench.commit("g1", {("t", 0): 10, ("t", 1): 11, ("u", 0): 20}, metadata="m")
    bench.txn_commit("g3", {("t", 0): 5})  # pending: not stable yet
    F = m.OffsetFetchRequest
    req = F(
        groups=[
            F.OffsetFetchRequestGroup(
                group_id="g1",
                topics=[F.OffsetFetchRequestTopics(name="t", partition_indexes=[1, 2])],
            ),
            F.OffsetFetchRequestGroup(group_id="g1", topics=None),  # every committed offset
            F.OffsetFetchRequestGroup(group_id="g2", topics=None),  # no such group: nothing
            F.OffsetFetchRequestGroup(
                group_id="g3", topics=[F.OffsetFetchRequestTopics(name="t", partition_indexes=[0])]
            ),
        ],
        require_stable=True,
    )
    resp = bench.coord.fetch_offsets(req, 8, 0)

    def answer(g):
        return [
            (
                t.name,
                [
                    (
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata,
                        p.error_code,
                    )
                    for p in t.partitions
                ],
            )
            for t in g.topics
        ]

    assert [(g.group_id, g.error_code) for g in resp.groups] == [
        ("g1", 0),
        ("g1", 0),
        ("g2", 0),
        ("g3", 0),
    ]
    assert answer(resp.groups[0]) == [("t", [(1, 11, 3, "m", 0), (2, -1, -1, "", 0)])]
    assert answer(resp.groups[1]) == [
        ("t", [(0, 10, 3, "m", 0), (1, 11, 3, "m", 0)]),
        ("u", [(0, 20, 3, "m", 0)]),
    ]
    assert answer(resp.groups[2]) == []
    # require_stable: a partition with a pending transactional offset is unstable.
    assert answer(resp.groups[3]) == [("t", [(0, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT)])]
    req.require_stable = False
    resp = bench.coord.fetch_offsets(req, 8, 0)
    assert answer(resp.groups[3]) == [("t", [(0, -1, -1, "", 0)])]


# ---- OffsetDelete ------------------------------------------------------------------------------


def _delete(bench, group_id, offsets):
    D = m.OffsetDeleteRequest
    by_topic: dict[str, list[int]] = {}
    for topic, partition in offsets:
        by_topic.setdefault(topic, []).append(partition)
    req = D(
        group_id=group_id,
        topics=[
            D.OffsetDeleteRequestTopic(
                name=t, partitions=[D.OffsetDeleteRequestPartition(partition_index=i) for i in ps]
            )
            for t, ps in by_topic.items()
        ],
    )
    return bench.coord.delete_offsets(req, 0, 0)


def test_delete_offsets_answers_each_partition_and_writes_to_the_groups_partition():
    bench = Bench()
    bench.commit("g", {("t", 1): 1, ("t", 2): 2})
    before = len(bench.appended)
    resp = _delete(bench, "g", [("t", 1), ("t", 2), ("t", 3)])
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (1, 0),
        (2, 0),
        (3, 0),
    ]
    written = bench.appended[before:]
    assert {p for p, _ in written} == {bench.coord.partition_for("g")}
    assert len(written) == 2  # no tombstone for a partition without an offset


def test_delete_offsets_errors_are_top_level():
    assert _delete(Bench(own=False), "g", [("t", 0)]).error_code == E.NOT_COORDINATOR
    bench = Bench()
    bench.commit("g", {("t", 0): 1})
    groups_of(bench.coord)["g"].transition_to(S.DEAD, 0)
    assert _delete(bench, "g", [("t", 0)]).error_code == E.GROUP_ID_NOT_FOUND
    bench = Bench()
    bench.commit("g", {("t", 0): 1})
    bench.fail_with = E.NOT_LEADER_OR_FOLLOWER  # the write fails: mapped as Kafka maps it
    resp = _delete(bench, "g", [("t", 0)])
    assert (resp.error_code, resp.topics) == (E.NOT_COORDINATOR, [])
    assert bench.committed("g", "t", 0) == 1


# ---- expiration --------------------------------------------------------------------------------


def test_an_explicit_expire_timestamp_expires_the_offset_at_that_millisecond():
    bench = Bench()
    # Expiration runs every 10 s (TEST_CONFIG): the run at 20 000 ms is the expire timestamp.
    bench.commit("g", {("t", 0): 1}, version=2, retention=20_000, now=0)
    bench.coord.tick(19_999)
    assert bench.committed("g", "t", 0) == 1
    bench.coord.tick(20_000)
    assert bench.committed("g", "t", 0) == -1


def test_expiration_base_follows_kafkas_offset_expiration_condition():
    from kcore.coordinator.group.offsets import _expiration_base

    committed = CommittedOffset(1, -1, "", commit_timestamp_ms=70, expire_timestamp_ms=-1)
    g = group(S.EMPTY)
    g.protocol_type = "consumer"
    g.state_timestamp_ms = None  # loaded from a log that predates the state timestamp
    assert _expiration_base(g)(committed) == 70
    g.state_timestamp_ms = 40
    assert _expiration_base(g)(committed) == 40
    # A consumer group mid-rebalance keeps its offsets, subscribed or not.
    busy = group(S.PREPARING_REBALANCE)
    busy.protocol_type, busy.protocol_name = "consumer", "range"
    for member in busy.members.values():
        member.protocols = [("range", subscription("t"))]
    assert busy.subscribed_topics() == {"t"}
    assert _expiration_base(busy) is None


# ---- OffsetCommit: what each version carries -------------------------------------------------


@pytest.mark.parametrize(
    "version, epoch, expire",
    [(1, -1, -1), (2, -1, 31_000), (4, -1, 31_000), (5, -1, -1), (6, 3, -1), (8, 3, -1)],
)
def test_commit_keeps_the_fields_its_version_has(version, epoch, expire):
    # The leader epoch from v6; a retention time (an explicit expire timestamp) in v2-v4 only.
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, version=version, retention=30_000, now=1_000)
    (record,) = bench.records(rec.OffsetCommitRecord)
    assert (record.leader_epoch, record.expire_timestamp) == (epoch, expire)


@pytest.mark.parametrize(
    "version, sent, stored", [(1, 123, 123), (1, -1, 1_000), (2, 123, 1_000), (8, 123, 1_000)]
)
def test_commit_timestamp_is_the_clients_only_in_v1(version, sent, stored):
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, version=version, commit_timestamp=sent, now=1_000)
    (record,) = bench.records(rec.OffsetCommitRecord)
    assert record.commit_timestamp == stored


def test_commit_by_a_static_member_under_another_member_id_is_fenced():
    bench = Bench()
    static = bench.join("g", instance_id="i1")
    bench.coord.tick(0)
    gen = static.one.generation_id
    got = bench.commit("g", {("t", 0): 1}, member_id="other", generation=gen, instance_id="i1")
    assert got == {("t", 0): E.FENCED_INSTANCE_ID}


def test_a_simple_commit_creates_the_group_empty_since_the_commit():
    bench = Bench()
    bench.commit("g", {("t", 0): 1}, now=5_000)
    g = groups_of(bench.coord)["g"]
    assert (g.state, g.state_timestamp_ms) == (S.EMPTY, 5_000)


@pytest.mark.parametrize("rebalancing", [False, True])
def test_a_members_commit_counts_as_a_heartbeat(rebalancing):
    # Stable, or PreparingRebalance: the commit extends the member's session (Kafka).
    bench = Bench()
    (a,), gen = bench.stable_group("g", 1, session=10_000)
    g = groups_of(bench.coord)["g"]
    if rebalancing:
        g.transition_to(S.PREPARING_REBALANCE, 0)
    got = bench.commit("g", {("t", 0): 1}, member_id=a, generation=gen, now=8_000)
    assert got == {("t", 0): E.NONE}
    assert g.members[a].heartbeat_deadline_ms == 18_000
