"""The metadata sync's planner (kcore.mirror.metadata_sync), without sockets.

The properties read as sentences: a plan applied and planned again changes nothing (what is
left after one round is only the offsets of topics that round started); the sync never deletes
an ACL it did not create, nor a CLUSTER_MIRROR ACL; it never commits past the destination's
high watermark nor into a group with members. The examples pin the rules of D-20...D-24.
"""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.metadata.image import StandardAcl
from kcore.metadata.mirrors import MirrorMode as Mode
from kcore.mirror.metadata_sync import (
    DENIED_KEYS,
    DestinationGroup,
    DestinationTopic,
    DestinationView,
    MirrorSyncSpec,
    SourceGroup,
    SourceTopic,
    SourceView,
    SyncPlan,
    copied_topic_config,
    plan_sync,
)

M = "m"
IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(["a", "b", "auto-1", "auto-2", "__x"])}
KEYS = ["retention.ms", "compression.type", "min.insync.replicas", "remote.storage.enable", "x.y"]
ACLS = [
    StandardAcl(rt, name, 3, principal, "*", 3, 3)
    for rt, name in ((2, "a"), (3, "g"), (8, M))  # TOPIC, GROUP, CLUSTER_MIRROR
    for principal in ("User:alice", "User:bob")
]


def _source_topic(name: str) -> st.SearchStrategy[SourceTopic]:
    return st.builds(
        SourceTopic,
        st.just(name),
        st.just(IDS[name]),
        st.integers(1, 3),
        st.dictionaries(st.sampled_from(KEYS), st.sampled_from(["1", "2", "lz4"]), max_size=3),
    )


@st.composite
def worlds(draw):
    names = draw(st.sets(st.sampled_from(sorted(IDS))))
    source_topics = {n: draw(_source_topic(n)) for n in names}
    dest_topics = {}
    for n in draw(st.sets(st.sampled_from(sorted(IDS)))):
        membership = draw(
            st.sampled_from(
                [None, (M, Mode.ACTIVE), (M, Mode.PAUSED), (M, Mode.STOPPED), ("o", Mode.ACTIVE)]
            )
        )
        same_id = draw(st.booleans())
        dest_topics[n] = DestinationTopic(
            n,
            IDS[n] if same_id else uuid.UUID(int=99),
            draw(st.integers(1, 3)),
            draw(
                st.dictionaries(
                    st.sampled_from(KEYS + ["mirror.name"]), st.sampled_from(["1", "3"]), max_size=3
                )
            ),
            membership,
        )
    partitions = [(t, p) for t in IDS for p in range(3)]
    offsets = st.dictionaries(st.sampled_from(partitions), st.integers(-1, 20), max_size=4)
    source_groups = {
        g: SourceGroup(
            g,
            group_type=draw(st.sampled_from(["classic", "consumer"])),
            protocol_type=draw(st.sampled_from(["consumer", "", "connect"])),
            offsets=draw(offsets),
            error=draw(st.sampled_from([None, None, "GROUP_AUTHORIZATION_FAILED"])),
        )
        for g in draw(st.sets(st.sampled_from(["g1", "g2", "g3"])))
    }
    dest_groups = {
        g: DestinationGroup(
            g,
            protocol_type=draw(st.sampled_from(["consumer", "connect"])),
            state=draw(st.sampled_from(["Empty", "Stable"])),
            members=draw(st.integers(0, 1)),
            offsets=draw(offsets),
        )
        for g in draw(st.sets(st.sampled_from(["g1", "g2", "g3"])))
    }
    source = SourceView(
        "src",
        source_topics,
        groups=source_groups,
        acls=frozenset(draw(st.sets(st.sampled_from(ACLS)))),
    )
    destination = DestinationView(
        dest_topics,
        acls=frozenset(draw(st.sets(st.sampled_from(ACLS)))),
        groups=dest_groups,
        high_watermarks={tp: draw(st.integers(0, 15)) for tp in partitions},
    )
    spec = MirrorSyncSpec(
        M,
        include=tuple(draw(st.sets(st.sampled_from(["auto-.*", "a", ".*"])))),
        exclude=tuple(draw(st.sets(st.sampled_from(["auto-2", "b"]), max_size=1))),
        source_cluster_id="src",
        synced_acls=frozenset(draw(st.sets(st.sampled_from(ACLS)))),
    )
    return spec, source, destination


def apply(plan: SyncPlan, spec, source, destination):
    """What the controller and the coordinators make of a plan: a new destination and spec."""
    topics = dict(destination.topics)
    for t in plan.start:
        configs = {k: v for k, v in (t.configs or {}).items() if copied_topic_config(k)}
        topics[t.name] = DestinationTopic(
            t.name, t.topic_id, t.partitions, {**configs, "mirror.name": M}, (M, Mode.ACTIVE)
        )
    for name in plan.stop:
        topics[name] = dataclasses.replace(topics[name], membership=(M, Mode.STOPPED))
    for name, count in plan.create_partitions.items():
        topics[name] = dataclasses.replace(topics[name], partitions=count)
    for name, change in plan.alter_configs.items():
        configs = {k: v for k, v in topics[name].configs.items() if k not in change.delete}
        topics[name] = dataclasses.replace(topics[name], configs={**configs, **change.set})
    groups = dict(destination.groups)
    for g, offsets in plan.commit_offsets.items():
        old = groups.get(g) or DestinationGroup(g)
        groups[g] = dataclasses.replace(old, offsets={**old.offsets, **offsets})
    acls = (destination.acls | plan.create_acls) - plan.delete_acls
    spec = dataclasses.replace(
        spec, synced_acls=plan.synced_acls if plan.synced_acls is not None else spec.synced_acls
    )
    return spec, dataclasses.replace(destination, topics=topics, groups=groups, acls=acls)


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_plan_applied_then_planned_again_changes_nothing_more(world):
    spec, source, destination = world
    plan = plan_sync(spec, source, destination)
    spec2, destination2 = apply(plan, spec, source, destination)
    again = plan_sync(spec2, source, destination2)
    # Only offsets of the topics the first round started or grew remain (they were not mirror
    # topics, or had fewer partitions, when it planned); a third round has nothing left to do.
    started = {t.name for t in plan.start} | set(plan.create_partitions)
    assert not (again.start or again.stop or again.create_partitions or again.alter_configs)
    assert not (again.create_acls or again.delete_acls)
    assert all(tp[0] in started for offsets in again.commit_offsets.values() for tp in offsets)
    spec3, destination3 = apply(again, spec2, source, destination2)
    assert plan_sync(spec3, source, destination3).is_empty


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_plan_never_deletes_an_acl_it_did_not_create(world):
    spec, source, destination = world
    plan = plan_sync(spec, source, destination)
    assert plan.delete_acls <= spec.synced_acls
    assert all(a.resource_type != 8 for a in plan.delete_acls | plan.create_acls)
    assert not plan.delete_acls & source.acls
    assert plan.synced_acls <= source.acls  # the provenance holds only what the source has


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_plan_commits_only_into_memberless_groups_and_never_past_the_high_watermark(world):
    spec, source, destination = world
    plan = plan_sync(spec, source, destination)
    for group, offsets in plan.commit_offsets.items():
        local = destination.groups.get(group)
        assert local is None or (local.members == 0 and local.state == "Empty")
        assert source.groups[group].error is None
        for tp, offset in offsets.items():
            assert 0 <= offset <= destination.high_watermarks[tp]
            assert destination.topics[tp[0]].membership == (M, Mode.ACTIVE)


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_plan_leaves_paused_stopped_and_foreign_topics_alone(world):
    spec, source, destination = world
    plan = plan_sync(spec, source, destination)
    touched = set(plan.stop) | set(plan.create_partitions) | set(plan.alter_configs)
    for name in touched:
        assert destination.topics[name].membership == (M, Mode.ACTIVE)
    for t in plan.start:
        assert t.name not in destination.topics and not t.name.startswith("__")


# -- examples ------------------------------------------------------------------------------------


def _dest(name: str, partitions: int = 1, configs=None, mode=Mode.ACTIVE, topic_id=None):
    return DestinationTopic(
        name, topic_id or IDS[name], partitions, configs or {"mirror.name": M}, (M, mode)
    )


def test_plan_configs_deny_list_is_kept_local_and_mirror_name_untouched():
    source = SourceView(
        "src",
        {
            "a": SourceTopic(
                "a",
                IDS["a"],
                1,
                {"retention.ms": "5", "min.insync.replicas": "2", "remote.storage.enable": "true"},
            )
        },
    )
    destination = DestinationView(
        {"a": _dest("a", configs={"mirror.name": M, "min.insync.replicas": "1", "segment.ms": "9"})}
    )
    plan = plan_sync(MirrorSyncSpec(M), source, destination)
    change = plan.alter_configs["a"]
    assert dict(change.set) == {"retention.ms": "5"}
    assert change.delete == {"segment.ms"}  # a destination-only override outside the deny-list
    assert {"min.insync.replicas", "remote.storage.enable"} <= DENIED_KEYS


def test_plan_cluster_id_mismatch_halts_everything():
    source = SourceView("other", {"auto-1": SourceTopic("auto-1", IDS["auto-1"], 1)})
    spec = MirrorSyncSpec(M, include=(".*",), source_cluster_id="src")
    plan = plan_sync(spec, source, DestinationView({}))
    assert plan.halted and "MIRROR_SOURCE_CLUSTER_ID_MISMATCH" in plan.halted
    assert plan.is_empty


def test_plan_source_deletion_and_recreation_stop_the_topic():
    source = SourceView("src", {"b": SourceTopic("b", uuid.UUID(int=77), 1)})
    destination = DestinationView({"a": _dest("a"), "b": _dest("b")})
    plan = plan_sync(MirrorSyncSpec(M), source, destination)
    assert set(plan.stop) == {"a", "b"}
    assert "deleted on the source" in plan.stop["a"]
    assert "re-created" in plan.stop["b"]


def test_plan_discovery_skips_internal_excluded_and_local_topics():
    source = SourceView(
        "src",
        {n: SourceTopic(n, IDS[n], 2) for n in ("auto-1", "auto-2", "__x", "a")},
    )
    destination = DestinationView({"a": DestinationTopic("a", uuid.UUID(int=50), 1)})
    spec = MirrorSyncSpec(M, include=(".*",), exclude=("auto-2",))
    plan = plan_sync(spec, source, destination)
    assert [t.name for t in plan.start] == ["auto-1"]
    assert any("local topic" in n for n in plan.notes)


def test_plan_group_of_another_type_is_reported_and_skipped():
    source = SourceView(
        "src",
        {"a": SourceTopic("a", IDS["a"], 1)},
        groups={
            "g1": SourceGroup("g1", offsets={("a", 0): 3}),
            "g2": SourceGroup("g2", group_type="consumer", offsets={("a", 0): 3}),
        },
    )
    destination = DestinationView(
        {"a": _dest("a")},
        groups={"g1": DestinationGroup("g1", protocol_type="connect")},
        high_watermarks={("a", 0): 2},
    )
    plan = plan_sync(MirrorSyncSpec(M), source, destination)
    assert plan.commit_offsets == {}
    assert any("g1" in n and "M-22" in n for n in plan.notes)
    assert any("g2" in n and "only classic" in n for n in plan.notes)
    # Without the conflict, the offset is capped at the destination's high watermark (D-23).
    ok = dataclasses.replace(destination, groups={})
    assert plan_sync(MirrorSyncSpec(M), source, ok).commit_offsets == {"g1": {("a", 0): 2}}


def test_plan_starts_a_bounded_number_of_topics_per_round():
    source = SourceView("src", {n: SourceTopic(n, IDS[n], 1) for n in ("auto-1", "auto-2", "a")})
    plan = plan_sync(MirrorSyncSpec(M, include=(".*",)), source, DestinationView({}), max_start=2)
    assert [t.name for t in plan.start] == ["a", "auto-1"]
    assert "1 more discovered topic(s)" in plan.notes[-1]


def test_plan_refused_parts_are_errors_and_the_rest_still_runs():
    source = SourceView(
        "src",
        {"a": SourceTopic("a", IDS["a"], 2, {})},
        groups=None,
        groups_error="ListGroups refused: CLUSTER_AUTHORIZATION_FAILED",
        acls=None,
        acls_error="DescribeAcls refused: CLUSTER_AUTHORIZATION_FAILED",
    )
    plan = plan_sync(MirrorSyncSpec(M), source, DestinationView({"a": _dest("a")}))
    assert plan.create_partitions == {"a": 2}
    assert len(plan.errors) == 2 and plan.synced_acls is None
