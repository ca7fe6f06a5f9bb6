"""The MirrorMetadataManager's rules (spec §4.2, M-12...M-25; decisions D-20...D-24), pure.

Theory of operation
-------------------
Every ``mirror.metadata.refresh.interval.ms`` the mirror's coordinator runs one **sync round**
(:mod:`kcore.mirror.metadata_sync_shell`): it reads what the source cluster has
(:class:`SourceView`), what the destination has (:class:`DestinationView`) and what the mirror
says and remembers (:class:`MirrorSyncSpec`), asks :func:`plan_sync` what to change, and sends
the requests the :class:`SyncPlan` builds. Planning is a function of those three values only, so
the rules below are tested without sockets, and a plan applied and planned again is empty
(the round is idempotent: a crash between two requests is repaired by the next round).

What a round plans, for the topics of the mirror in mode ACTIVE (``mirror.name=<m>``; a paused
topic is left alone until it is resumed, M-24; a stopped one belongs to the destination now):

* **discovery** (M-18, D-20): a source topic matching ``mirror.topics.include`` (``re.fullmatch``)
  and no ``mirror.topics.exclude`` pattern, not internal (``__*``), and absent on the destination,
  is started (StartMirrorTopics with its topic id, partition count and copied configs). A topic
  the destination already has outside this mirror is never taken over (it is reported).
* **exclusion** (M-18, M-53): an ACTIVE topic matching an exclude pattern is stopped.
* **source deletion** (M-19): an ACTIVE topic gone from the source, or whose source topic id
  changed (deleted and re-created), is stopped: its partitions go to STOPPED and keep their data.
* **partition expansion** (M-16): a source topic with more partitions grows its mirror topic
  (CreatePartitions); a source with fewer partitions is reported (Kafka cannot shrink a topic).
* **configs** (M-17, D-21): every topic config set on the source (a dynamic topic override) that
  :func:`copied_topic_config` allows is set on the destination; every destination override that
  it allows and the source does not set is deleted. The deny-list (never copied, never removed):
  ``mirror.*``, tiered storage (``remote.*``, ``local.retention.*``), the replication throttles,
  ``min.insync.replicas`` (a property of the destination's replicas), and the message-format keys
  that do not apply (``message.format.version``, ``message.downconversion.enable``); a key kcore
  does not know is not copied either.
* **consumer-group offsets** (M-20, M-22, D-23): the committed offsets of the source's classic
  groups on ACTIVE topics are committed to the destination group of the same name, only when
  that group has no member there, and never beyond the destination's high watermark (a consumer
  cannot read past it, so an offset there is one the destination can serve). A name held by a
  group of another type (or protocol) on either side is reported and skipped; so is a group the
  source refused to show. The offsets need no translation: mirror topics keep the source's
  offsets.
* **ACLs** (M-23, D-22): every source ACL (other than CLUSTER_MIRROR ones, which are the
  destination's own) missing on the destination is created; an ACL is deleted only if this
  mirror created it (it is in :attr:`MirrorSyncSpec.synced_acls`, the provenance the coordinator
  persists in ``__mirror_state``) and the source no longer has it. ACLs made by people, CLUSTER_MIRROR
  ACLs and other mirrors' ACLs are never deleted.

The **source cluster id** is checked first (M-14, D-24): a source that is not the cluster the
mirror recorded halts the round (:attr:`SyncPlan.halted`). Share groups (M-21, M-25) do not
exist in kcore: no share-group offset sync runs (:data:`SHARE_GROUP_NOTE`, shown by Describe).

Who calls it: the sync shell; ``kcore.mirror.source`` uses :func:`copied_topic_config` for the
configs StartMirrorTopics copies when it creates a topic. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kcore.log.config import TOPIC_CONFIGS
from kcore.metadata import mirror_configs as mc
from kcore.metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from kcore.metadata.image import StandardAcl
from kcore.metadata.mirrors import MirrorMode
from kcore.protocol import messages as m

__all__ = [
    "CLASSIC",
    "DENIED_KEYS",
    "DENIED_PREFIXES",
    "SHARE_GROUP_NOTE",
    "Change",
    "ConfigChange",
    "DestinationGroup",
    "DestinationTopic",
    "DestinationView",
    "MirrorSyncSpec",
    "SourceGroup",
    "SourceTopic",
    "SourceView",
    "SyncPlan",
    "SyncStatus",
    "acl_sort_key",
    "acl_text",
    "create_acls_request",
    "delete_acls_request",
    "copied",
    "copied_topic_config",
    "discovered_topics",
    "plan_sync",
    "synced_topics",
]

TopicPartition = tuple[str, int]

#: D-21: topic configs a mirror never copies from the source, nor removes on the destination.
DENIED_PREFIXES = ("mirror.", "remote.", "local.retention.")
DENIED_KEYS = frozenset(
    {
        "remote.storage.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "min.insync.replicas",
        "message.format.version",
        "message.downconversion.enable",
    }
)

#: The group type of a classic group (ListGroups v5 ``GroupType``; older versions say nothing).
CLASSIC = "classic"
_CLASSIC_TYPES = frozenset({CLASSIC, ""})
# Protocol types whose committed offsets a consumer resumes from: a consumer group's, or none
# (a "simple" group that only commits, as kafka-consumer-groups --reset-offsets makes one).
_CONSUMER_PROTOCOLS = frozenset({"consumer", ""})
# DescribeGroups states of a classic group without members.
_MEMBERLESS_STATES = frozenset({"Empty", "Dead", ""})

SHARE_GROUP_NOTE = (
    "share-group offset sync (M-21) does not run: kcore has no share groups; classic "
    "consumer groups are synced"
)

_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations


def copied_topic_config(key: str) -> bool:
    """Whether a topic config is kept equal to the source's (D-21): a key kcore knows, that
    clients may set, and not on the deny-list."""
    known = TOPIC_CONFIGS.get(key)
    return (
        known is not None
        and not known.internal_only
        and key not in DENIED_KEYS
        and not key.startswith(DENIED_PREFIXES)
    )


# -- the views -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceTopic:
    """A source topic: its id, partition count and dynamic topic configs (None: not read)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SourceGroup:
    """A source consumer group: its type ("classic", "consumer", "share"...), protocol type,
    its committed offsets (``{(topic, partition): offset}``), or why they could not be read."""

    group_id: str
    group_type: str = CLASSIC
    protocol_type: str = "consumer"
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SourceView:
    """What one round read from the source. ``groups`` / ``acls`` are None when the source
    could not or would not answer (``groups_error`` / ``acls_error`` say why): that part of the
    sync is skipped, the rest still runs."""

    cluster_id: str | None
    topics: Mapping[str, SourceTopic]
    groups: Mapping[str, SourceGroup] | None = None
    groups_error: str | None = None
    acls: frozenset[StandardAcl] | None = None
    acls_error: str | None = None


@dataclass(frozen=True, slots=True)
class DestinationTopic:
    """A destination topic: id, partition count, config overrides, mirror membership."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    membership: tuple[str, MirrorMode] | None = None


@dataclass(frozen=True, slots=True)
class DestinationGroup:
    """A destination group: type, protocol type, state, member count, committed offsets."""

    group_id: str
    group_type: str = CLASSIC
    protocol_type: str = "consumer"
    state: str = "Empty"
    members: int = 0
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DestinationView:
    """What one round read from the destination. ``high_watermarks`` of the partitions whose
    offsets may be committed; ``groups`` None when they could not be read (no offset sync)."""

    topics: Mapping[str, DestinationTopic]
    acls: frozenset[StandardAcl] = frozenset()
    groups: Mapping[str, DestinationGroup] | None = None
    groups_error: str | None = None
    high_watermarks: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MirrorSyncSpec:
    """The mirror: its name, patterns (D-20), recorded source cluster id (D-24), and the ACLs
    the sync created earlier (D-22 provenance; None: not known, so no ACL sync)."""

    name: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    source_cluster_id: str | None = None
    synced_acls: frozenset[StandardAcl] | None = frozenset()


# -- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """Configs to set (``{key: value}``) and to delete on one topic."""

    set: Mapping[str, str]
    delete: frozenset[str]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing a round changed (or will change): ``kind`` in topic-started, topic-stopped,
    partitions-created, configs-altered, offsets-committed, acl-created, acl-deleted."""

    kind: str
    resource: str
    detail: str = ""


@dataclass
class SyncPlan:
    """What one round does. Empty (:attr:`is_empty`) when both sides already agree."""

    halted: str | None = None
    start: list[SourceTopic] = field(default_factory=list)
    stop: dict[str, str] = field(default_factory=dict)  # topic -> why
    create_partitions: dict[str, int] = field(default_factory=dict)  # topic -> new count
    alter_configs: dict[str, ConfigChange] = field(default_factory=dict)
    commit_offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    create_acls: frozenset[StandardAcl] = frozenset()
    delete_acls: frozenset[StandardAcl] = frozenset()
    synced_acls: frozenset[StandardAcl] | None = None  # the provenance after the round
    notes: list[str] = field(default_factory=list)  # skipped, and why
    errors: list[str] = field(default_factory=list)  # parts that could not be read

    @property
    def is_empty(self) -> bool:
        return not (
            self.start
            or self.stop
            or self.create_partitions
            or self.alter_configs
            or self.commit_offsets
            or self.create_acls
            or self.delete_acls
        )

    def changes(self) -> list[Change]:
        """Every change of the plan, in the order the shell applies them."""
        out = [Change("topic-started", t.name, f"{t.partitions} partition(s)") for t in self.start]
        out += [Change("topic-stopped", t, why) for t, why in sorted(self.stop.items())]
        out += [
            Change("partitions-created", t, f"now {n} partition(s)")
            for t, n in sorted(self.create_partitions.items())
        ]
        for t, c in sorted(self.alter_configs.items()):
            parts = [f"{k}={v}" for k, v in sorted(c.set.items())]
            parts += [f"-{k}" for k in sorted(c.delete)]
            out.append(Change("configs-altered", t, ", ".join(parts)))
        out += [
            Change("offsets-committed", g, f"{len(o)} partition(s)")
            for g, o in sorted(self.commit_offsets.items())
        ]
        out += [
            Change("acl-created", acl_text(a)) for a in sorted(self.create_acls, key=acl_sort_key)
        ]
        out += [
            Change("acl-deleted", acl_text(a)) for a in sorted(self.delete_acls, key=acl_sort_key)
        ]
        return out

    # -- the requests ----------------------------------------------------------------------------

    def start_requests(self, mirror: str, chunk: int = 100) -> list[m.StartMirrorTopicsRequest]:
        """StartMirrorTopics for the discovered topics, ``chunk`` topics per request (each
        request is one controller batch: bounded, so the controller keeps serving)."""
        S = m.StartMirrorTopicsRequest
        topics = [
            S.TopicData(
                topic_id=t.topic_id,
                topic_name=t.name,
                num_partitions=t.partitions,
                configs=[S.TopicConfig(name=k, value=v) for k, v in sorted(copied(t).items())],
            )
            for t in self.start
        ]
        return [
            S(mirror_name=mirror, topics=topics[i : i + chunk])
            for i in range(0, len(topics), chunk)
        ]

    def stop_request(self, mirror: str) -> m.StopMirrorTopicsRequest | None:
        if not self.stop:
            return None
        S = m.StopMirrorTopicsRequest
        return S(mirror_name=mirror, topics=[S.TopicData(topic_name=t) for t in sorted(self.stop)])

    def create_partitions_request(self) -> m.CreatePartitionsRequest | None:
        if not self.create_partitions:
            return None
        C = m.CreatePartitionsRequest
        return C(
            topics=[
                C.CreatePartitionsTopic(name=t, count=n, assignments=None)
                for t, n in sorted(self.create_partitions.items())
            ],
            timeout_ms=30000,
        )

    def alter_configs_request(self) -> m.IncrementalAlterConfigsRequest | None:
        if not self.alter_configs:
            return None
        I = m.IncrementalAlterConfigsRequest  # noqa: E741 (Kafka's name)
        topic = int(ResourceType.TOPIC)  # ConfigResource TOPIC is 2, as the ACL type
        return I(
            resources=[
                I.AlterConfigsResource(
                    resource_type=topic,
                    resource_name=t,
                    configs=[
                        I.AlterableConfig(name=k, config_operation=_SET, value=v)
                        for k, v in sorted(c.set.items())
                    ]
                    + [
                        I.AlterableConfig(name=k, config_operation=_DELETE, value=None)
                        for k in sorted(c.delete)
                    ],
                )
                for t, c in sorted(self.alter_configs.items())
            ]
        )

    def create_acls_request(self) -> m.CreateAclsRequest | None:
        return create_acls_request(self.create_acls) if self.create_acls else None

    def delete_acls_request(self) -> m.DeleteAclsRequest | None:
        return delete_acls_request(self.delete_acls) if self.delete_acls else None


def _acl_fields(a: StandardAcl) -> dict:
    return {
        "principal": a.principal,
        "host": a.host,
        "operation": a.operation,
        "permission_type": a.permission_type,
    }


def create_acls_request(acls: Iterable[StandardAcl]) -> m.CreateAclsRequest:
    """CreateAcls of ``acls``, in :func:`acl_sort_key` order (the results come in that order)."""
    C = m.CreateAclsRequest
    return C(
        creations=[
            C.AclCreation(
                resource_type=a.resource_type,
                resource_name=a.resource_name,
                resource_pattern_type=a.pattern_type,
                **_acl_fields(a),
            )
            for a in sorted(acls, key=acl_sort_key)
        ]
    )


def delete_acls_request(acls: Iterable[StandardAcl]) -> m.DeleteAclsRequest:
    """DeleteAcls with one exact filter per ACL (matching only that binding), in
    :func:`acl_sort_key` order."""
    D = m.DeleteAclsRequest
    return D(
        filters=[
            D.DeleteAclsFilter(
                resource_type_filter=a.resource_type,
                resource_name_filter=a.resource_name,
                pattern_type_filter=a.pattern_type,
                principal_filter=a.principal,
                host_filter=a.host,
                operation=a.operation,
                permission_type=a.permission_type,
            )
            for a in sorted(acls, key=acl_sort_key)
        ]
    )


@dataclass
class SyncStatus:
    """A mirror's sync as Describe shows it: when the last round completed (wall ms, -1: never)
    and its errors and skips (``errors``, ``notes``; empty when it went well); the changes of
    the last round that changed anything (``changes``) and when it ran (``last_change_ms``):
    a round that finds both sides equal does not hide what the one before it did."""

    last_sync_ms: int = -1
    last_attempt_ms: int = -1
    last_change_ms: int = -1
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# -- planning ------------------------------------------------------------------------------------


def acl_sort_key(a: StandardAcl) -> tuple:
    """A total order of ACL bindings (requests and records list them in it)."""
    return (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
            a.operation, a.permission_type)  # fmt: skip


def acl_text(a: StandardAcl) -> str:
    """``User:alice READ ALLOW on TOPIC:orders (LITERAL) from *`` style, for status lines."""
    return (
        f"{a.principal} {AclOperation.of(a.operation).name} "
        f"{AclPermissionType.of(a.permission_type).name} on "
        f"{ResourceType.of(a.resource_type).name}:{a.resource_name} "
        f"({PatternType.of(a.pattern_type).name}) from {a.host}"
    )


def copied(topic: SourceTopic) -> dict[str, str]:
    """The configs of a source topic that its mirror topic has (D-21)."""
    return {k: v for k, v in (topic.configs or {}).items() if copied_topic_config(k)}


def synced_topics(spec: MirrorSyncSpec, destination: DestinationView) -> list[str]:
    """The destination topics the sync keeps equal: this mirror's ACTIVE ones, sorted."""
    active = (spec.name, MirrorMode.ACTIVE)
    return sorted(t.name for t in destination.topics.values() if t.membership == active)


def discovered_topics(
    spec: MirrorSyncSpec, source_topics: Iterable[str], destination: DestinationView
) -> list[str]:
    """Source topics that auto-discovery starts (M-18, D-20): included, not excluded, not
    internal, not on the destination. Sorted."""
    if not spec.include:
        return []
    return sorted(
        t
        for t in source_topics
        if t not in destination.topics
        and not mc.is_internal_topic(t)
        and mc.first_match(t, list(spec.include)) is not None
        and mc.first_match(t, list(spec.exclude)) is None
    )


def plan_sync(
    spec: MirrorSyncSpec,
    source: SourceView,
    destination: DestinationView,
    *,
    max_start: int | None = None,
) -> SyncPlan:
    """The plan of one round (see the module docstring). Never raises for what the views say:
    conflicts become :attr:`SyncPlan.notes`, unreadable parts :attr:`SyncPlan.errors`.
    ``max_start`` bounds the topics one round starts (the rest are left to the next rounds,
    and a note says how many)."""
    plan = SyncPlan()
    recorded = spec.source_cluster_id
    if recorded and source.cluster_id and source.cluster_id != recorded:
        plan.halted = (
            f"MIRROR_SOURCE_CLUSTER_ID_MISMATCH: the source of mirror '{spec.name}' has cluster "
            f"id {source.cluster_id}, but the mirror recorded {recorded}; metadata sync halted "
            f"(alter bootstrap.servers and {mc.SOURCE_CLUSTER_ID} together to re-point it)"
        )
        return plan
    _plan_topics(spec, source, destination, plan)
    if max_start is not None and len(plan.start) > max_start:
        left = len(plan.start) - max_start
        plan.start = plan.start[:max_start]
        plan.notes.append(f"{left} more discovered topic(s) are started by the next rounds")
    _plan_offsets(spec, source, destination, plan)
    _plan_acls(spec, source, destination, plan)
    return plan


def _plan_topics(spec, source: SourceView, destination: DestinationView, plan: SyncPlan) -> None:
    for name in discovered_topics(spec, source.topics, destination):
        plan.start.append(source.topics[name])
    for name in sorted(source.topics):
        local = destination.topics.get(name)
        if local is None or local.membership is not None or mc.is_internal_topic(name):
            continue
        if (
            spec.include
            and mc.first_match(name, list(spec.include)) is not None
            and mc.first_match(name, list(spec.exclude)) is None
        ):
            plan.notes.append(
                f"topic {name}: matches the include patterns but the destination has a "
                "local topic of that name, which is never taken over"
            )
    for name in synced_topics(spec, destination):
        local = destination.topics[name]
        src = source.topics.get(name)
        excluded = mc.first_match(name, list(spec.exclude))
        if excluded is not None:
            plan.stop[name] = f"matches the exclude pattern {excluded!r}"
            continue
        if src is None:
            plan.stop[name] = "deleted on the source (the destination keeps its data)"
            continue
        if src.topic_id != local.topic_id:
            plan.stop[name] = (
                f"re-created on the source with topic id {src.topic_id} (was {local.topic_id})"
            )
            continue
        if src.partitions > local.partitions:
            plan.create_partitions[name] = src.partitions
        elif src.partitions < local.partitions:
            plan.notes.append(
                f"topic {name}: {src.partitions} partition(s) on the source, "
                f"{local.partitions} here; a topic cannot shrink"
            )
        if src.configs is None:
            continue
        desired = copied(src)
        current = {k: v for k, v in local.configs.items() if copied_topic_config(k)}
        to_set = {k: v for k, v in desired.items() if current.get(k) != v}
        to_delete = frozenset(k for k in current if k not in desired)
        if to_set or to_delete:
            plan.alter_configs[name] = ConfigChange(to_set, to_delete)


def _plan_offsets(spec, source: SourceView, destination: DestinationView, plan: SyncPlan) -> None:
    if source.groups is None:
        if source.groups_error:
            plan.errors.append(f"consumer groups not synced: {source.groups_error}")
        return
    if destination.groups is None:
        plan.errors.append(
            "consumer groups not synced: the destination's groups could not be read"
            + (f" ({destination.groups_error})" if destination.groups_error else "")
        )
        return
    partitions = {
        name: destination.topics[name].partitions for name in synced_topics(spec, destination)
    }
    partitions = {t: n for t, n in partitions.items() if t not in plan.stop}
    for group_id in sorted(source.groups):
        group = source.groups[group_id]
        if group.error is not None:
            plan.notes.append(f"group {group_id}: not synced, the source refused it: {group.error}")
            continue
        if group.group_type not in _CLASSIC_TYPES or group.protocol_type not in _CONSUMER_PROTOCOLS:
            kind = group.group_type if group.group_type not in _CLASSIC_TYPES else "classic"
            plan.notes.append(
                f"group {group_id}: a {kind} group of protocol {group.protocol_type!r} on the "
                "source; only classic consumer groups are synced"
            )
            continue
        wanted = {
            tp: offset
            for tp, offset in group.offsets.items()
            if offset >= 0 and tp[1] < partitions.get(tp[0], 0)
        }
        if not wanted:
            continue
        local = destination.groups.get(group_id)
        if local is not None:
            if (
                local.group_type not in _CLASSIC_TYPES
                or local.protocol_type not in _CONSUMER_PROTOCOLS
            ):
                plan.notes.append(
                    f"group {group_id}: the destination has a group of that name of type "
                    f"{local.group_type or 'classic'} / protocol {local.protocol_type!r} "
                    "(M-22); its offsets are not synced"
                )
                continue
            if local.members > 0 or local.state not in _MEMBERLESS_STATES:
                plan.notes.append(
                    f"group {group_id}: active on the destination ({local.state}, "
                    f"{local.members} member(s)); its offsets are not synced"
                )
                continue
        committed = local.offsets if local is not None else {}
        commits = {}
        for tp, offset in sorted(wanted.items()):
            end = destination.high_watermarks.get(tp)
            if end is None:
                continue
            target = min(offset, end)  # D-23: never past what the destination holds
            if committed.get(tp) != target:
                commits[tp] = target
        if commits:
            plan.commit_offsets[group_id] = commits


def _plan_acls(spec, source: SourceView, destination: DestinationView, plan: SyncPlan) -> None:
    if source.acls is None:
        if source.acls_error:
            plan.errors.append(f"ACLs not synced: {source.acls_error}")
        return
    if spec.synced_acls is None:
        plan.errors.append(
            "ACLs not synced: the record of the ACLs this mirror created is not loaded"
        )
        return
    mirror_type = int(ResourceType.CLUSTER_MIRROR)
    wanted = frozenset(a for a in source.acls if a.resource_type != mirror_type)
    ours = frozenset(a for a in spec.synced_acls if a.resource_type != mirror_type)
    present = destination.acls
    plan.create_acls = wanted - present
    # D-22: only what this mirror created, and only once the source dropped it.
    plan.delete_acls = (ours - wanted) & present
    plan.synced_acls = (ours & wanted & present) | plan.create_acls
