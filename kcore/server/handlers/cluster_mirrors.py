"""The cluster-mirror RPCs on broker listeners (spec §6, §7.4-7.11): Create/Delete/List/Describe
ClusterMirrors and Start/Stop/Pause/ResumeMirrorTopics.

What the broker does before it forwards a change to the controller (which re-checks the
``mirror.name`` suffixes atomically, :mod:`kcore.metadata.mirror_control`):

* every RPC: UNSUPPORTED_VERSION while ``mirror.version`` is 0 (D-30); with an authorizer, the
  CLUSTER_MIRROR ACL operation of §12.1 on the mirror (CREATE for Create, ALTER for the topic
  operations, DELETE for Delete, DESCRIBE for List and Describe; CLUSTER_AUTHORIZATION_FAILED);
* Create: the name (M-03) and the configs, then one contact with the source that records its
  cluster id (D-24) and refuses unreachable bootstrap servers (MIRROR_SOURCE_UNAVAILABLE);
* Start: the source looked up (D-27): the topics its include patterns match (minus internal and
  excluded ones), the topic id and partition count of each named topic that lacks them, the
  configs of each topic to create, the cluster id checked against the recorded one;
* Start, Stop, Pause, Resume, Delete: the partition states of the target topics read through
  ``broker.mirror_state_reader`` and admitted by :func:`kcore.mirror.state.check_operation`
  (D-26: one top-level error naming every offending partition).

List answers from the metadata image (M-66). Describe answers from the image, the state reader
and ``broker.mirror_stats`` (numbers -1 where unknown, M-67). Every partition of the mirror is
reported, but its numbers only by the broker that leads it: the Admin helper
(:func:`kcore.client.mirrors.describe_cluster_mirrors`) asks every broker and merges them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kcore.log.config import InvalidConfigError
from kcore.metadata import mirror_configs as mc
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.metadata.mirror_control import validate_mirror_name
from kcore.metadata.mirrors import ClusterMirrorImage, MirrorMode, mirrors_image
from kcore.mirror.admission import MirrorPartitionStats
from kcore.mirror.metadata_sync import SHARE_GROUP_NOTE
from kcore.mirror.source import describe_source
from kcore.mirror.state import MirrorOperation, MirrorPartitionState, check_operation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

ZERO_UUID = uuid.UUID(int=0)
_OPS = (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DELETE)
SUPPORTED_OPERATIONS = (
    *_OPS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.DESCRIBE_CONFIGS,
)


class LocalMirrorStats:
    """The numbers this broker knows: the destination log end offset of the partitions it
    holds and, for those its mirror fetcher copies (``fetchers()``: mirror name ->
    ``MirrorFetcherManager``), the source high watermark and LSO of the last fetch answer and
    its age; the rest -1."""

    def __init__(
        self, replica_manager: Any, fetchers=dict, now_ms=lambda: int(time.time() * 1000)
    ) -> None:
        self.replica_manager = replica_manager
        self.fetchers = fetchers
        self.now_ms = now_ms

    def partition_stats(self, mirror: str, topic: str, partition: int) -> MirrorPartitionStats:
        p = self.replica_manager.partitions.get((topic, partition))
        end = -1 if p is None else p.log_end_offset
        fetcher = self.fetchers().get(mirror)
        source = None if fetcher is None else fetcher.source_offsets((topic, partition))
        if source is None or source.last_fetch_ms < 0:
            return MirrorPartitionStats(destination_offset=end)
        return MirrorPartitionStats(
            source_offset=source.high_watermark,
            source_lso=source.last_stable_offset,
            destination_offset=end,
            last_fetch_age_ms=max(self.now_ms() - source.last_fetch_ms, 0),
        )


def _check_enabled(ctx) -> None:
    if ctx.server.metadata_image.features.mirror_version < 1:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION,
            "Cluster mirroring is disabled on this cluster (mirror.version=0).",
        )


def _allowed(ctx, operation: AclOperation, mirror: str) -> bool:
    return authz.allowed(ctx, operation, ResourceType.CLUSTER_MIRROR, mirror)


def require(ctx, operation: AclOperation, mirror: str) -> None:
    """CLUSTER_AUTHORIZATION_FAILED unless the principal may ``operation`` the mirror."""
    if not _allowed(ctx, operation, mirror):
        raise KafkaError(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"Not authorized to {operation.name} cluster mirror '{mirror}'.",
        )


def _mirror(ctx, name: str) -> ClusterMirrorImage:
    validate_mirror_name(name)
    mirror = mirrors_image(ctx.server.metadata_image).mirror(name)
    if mirror is None:
        raise KafkaError(ErrorCode.MIRROR_NOT_FOUND, f"No cluster mirror named '{name}' exists.")
    return mirror


def _altered_mirror(ctx, body) -> ClusterMirrorImage:
    """The mirror a topic operation changes: mirroring on, ALTER allowed, the mirror known."""
    _check_enabled(ctx)
    require(ctx, AclOperation.ALTER, body.mirror_name)
    return _mirror(ctx, body.mirror_name)


async def _admit(ctx, operation: MirrorOperation, mirror: str, topics) -> None:
    """Read the states of every partition of ``topics`` and admit ``operation``. An accepted
    Start or Stop of FAILED partitions is their manual recovery (D-13): the controller marks
    the topics (``mirror.recovery.id``) and each partition's leader acts on it."""
    image = ctx.server.metadata_image
    partitions = [
        (t, p)
        for t in dict.fromkeys(topics)
        if (topic := image.topics.by_name.get(t)) is not None
        for p in topic.partitions
    ]
    if not partitions:
        return
    states = await ctx.server.mirror_state_reader.read_states(mirror, partitions)
    check_operation(operation, mirror, states)


async def _forward(ctx, call):
    return await ctx.server.controller_call(call)


# -- the operations ----------------------------------------------------------------------------


async def create_cluster_mirror(ctx, body: m.CreateClusterMirrorRequest):
    _check_enabled(ctx)
    require(ctx, AclOperation.CREATE, body.mirror_name)
    validate_mirror_name(body.mirror_name)
    if mirrors_image(ctx.server.metadata_image).mirror(body.mirror_name) is not None:
        raise KafkaError(
            ErrorCode.MIRROR_ALREADY_EXISTS,
            f"A cluster mirror named '{body.mirror_name}' already exists.",
        )
    configs = {c.name: c.value for c in body.config if c.value is not None}
    if len(configs) == len(body.config):
        try:
            mc.validate_mirror_configs(configs, creating=True)
        except InvalidConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, e.message) from None
        source = await describe_source(body.mirror_name, configs)
        given = configs.get(mc.SOURCE_CLUSTER_ID)
        if given is not None and source.cluster_id != given:
            raise KafkaError(
                ErrorCode.MIRROR_SOURCE_CLUSTER_ID_MISMATCH,
                f"{mc.SOURCE_CLUSTER_ID}={given}, but the cluster at "
                f"{configs[mc.BOOTSTRAP_SERVERS]} has cluster id {source.cluster_id}.",
            )
        if given is None and source.cluster_id:
            C = m.CreateClusterMirrorRequest
            body = authz.replace(
                body,
                config=[
                    *body.config,
                    C.ClusterMirrorConfig(name=mc.SOURCE_CLUSTER_ID, value=source.cluster_id),
                ],
            )
    request = body
    return await _forward(ctx, lambda c, now: c.create_cluster_mirror(request))


async def delete_cluster_mirror(ctx, body: m.DeleteClusterMirrorRequest):
    _check_enabled(ctx)
    require(ctx, AclOperation.DELETE, body.mirror_name)
    mirror = _mirror(ctx, body.mirror_name)
    if not mirror.topics_in(MirrorMode.ACTIVE, MirrorMode.PAUSED):
        # Every topic is marked stopped: its partitions must have finished STOPPING (D-29).
        await _admit(ctx, MirrorOperation.DELETE, mirror.name, mirror.topics)
    return await _forward(ctx, lambda c, now: c.delete_cluster_mirror(body))


def _topic_response(cls, body, error: KafkaError):
    return cls(
        error_code=int(error.code), error_message=error.message, mirror_name=body.mirror_name
    )


async def start_mirror_topics(ctx, body: m.StartMirrorTopicsRequest):
    R = m.StartMirrorTopicsResponse
    try:
        mirror = _altered_mirror(ctx, body)
        for key, patterns in (
            (mc.INCLUDE, body.include_patterns),
            (mc.EXCLUDE, body.exclude_patterns),
        ):
            for p in patterns:
                try:
                    mc.validate_pattern(key, p)
                except InvalidConfigError as e:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, e.message) from None
        request, refused = await _resolve_start(ctx, mirror, body)
        await _admit(
            ctx, MirrorOperation.START, mirror.name, [t.topic_name for t in request.topics]
        )
    except KafkaError as e:
        return _topic_response(R, body, e)
    response = await _forward(ctx, lambda c, now: c.start_mirror_topics(request))
    response.topics.extend(refused)
    return response


async def _resolve_start(ctx, mirror: ClusterMirrorImage, body):
    """The request the controller gets: pattern matches added, topic ids, partition counts and
    configs from the source filled in, the source cluster id; and per-topic refusals."""
    S = m.StartMirrorTopicsRequest
    image = ctx.server.metadata_image
    named = [t.topic_name for t in body.topics]
    given = set(named) | set(body.include_patterns)
    exclude = [p for p in mirror.exclude_patterns if p not in given] + list(body.exclude_patterns)
    matched: list[str] = []
    if body.include_patterns:  # a first look-up lists the source topics the patterns match
        listing = await describe_source(mirror.name, mirror.configs)
        matched = sorted(
            t
            for t in listing.topic_names
            if t not in given
            and not mc.is_internal_topic(t)
            and mc.first_match(t, list(body.include_patterns)) is not None
            and mc.first_match(t, exclude) is None
        )
    everything = named + matched
    missing_locally = [t for t in everything if t not in image.topics.by_name]
    source = await describe_source(
        mirror.name, mirror.configs, topics=everything, with_configs=missing_locally
    )
    topics, refused = [], []
    supplied = {t.topic_name: t for t in body.topics}
    for name in everything:
        t = supplied.get(name)
        found = source.topics.get(name)
        if found is None and (t is None or t.topic_id == ZERO_UUID):
            refused.append(
                m.StartMirrorTopicsResponse.TopicResult(
                    name=name,
                    error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message=f"Topic '{name}' does not exist on the source cluster of "
                    f"mirror '{mirror.name}'.",
                )
            )
            continue
        topic_id = t.topic_id if t is not None and t.topic_id != ZERO_UUID else found.topic_id
        parts = t.num_partitions if t is not None and t.num_partitions > 0 else 0
        if parts <= 0 and found is not None:
            parts = found.num_partitions
        configs = (
            []
            if found is None
            else [S.TopicConfig(name=k, value=v) for k, v in sorted(found.configs.items())]
        )
        topics.append(
            S.TopicData(topic_id=topic_id, topic_name=name, num_partitions=parts, configs=configs)
        )
    request = authz.replace(body, topics=topics, source_cluster_id=source.cluster_id)
    return request, refused


async def stop_mirror_topics(ctx, body: m.StopMirrorTopicsRequest):
    R = m.StopMirrorTopicsResponse
    try:
        mirror = _altered_mirror(ctx, body)
        targets = [t.topic_name for t in body.topics if t.topic_name in mirror.topics]
        if body.patterns:
            exclude = mirror.exclude_patterns + list(body.patterns)
            targets += [
                t
                for t in mirror.topics_in(MirrorMode.ACTIVE, MirrorMode.PAUSED)
                if mc.first_match(t, exclude) is not None
            ]
        await _admit(ctx, MirrorOperation.STOP, mirror.name, targets)
    except KafkaError as e:
        return _topic_response(R, body, e)
    return await _forward(ctx, lambda c, now: c.stop_mirror_topics(body))


def _pause_or_resume(operation: MirrorOperation, response_cls, method: str):
    async def handle(ctx, body):
        try:
            mirror = _altered_mirror(ctx, body)
            targets = [t.topic_name for t in body.topics if t.topic_name in mirror.topics]
            await _admit(ctx, operation, mirror.name, targets)
        except KafkaError as e:
            return _topic_response(response_cls, body, e)
        return await _forward(ctx, lambda c, now: getattr(c, method)(body))

    handle.__name__ = method
    return handle


async def list_cluster_mirrors(ctx, body: m.ListClusterMirrorsRequest):
    _check_enabled(ctx)
    L = m.ListClusterMirrorsResponse
    response = L(error_message=None)
    for name, mirror in mirrors_image(ctx.server.metadata_image).mirrors.items():
        if _allowed(ctx, AclOperation.DESCRIBE, name):
            response.mirrors.append(
                L.ListedMirror(
                    mirror_name=name,
                    source_bootstrap=mirror.bootstrap_servers,
                    source_cluster_id=mirror.source_cluster_id or "",
                    topic_count=len(mirror.topics),
                )
            )
    return response


async def describe_cluster_mirrors(ctx, body: m.DescribeClusterMirrorsRequest):
    _check_enabled(ctx)
    D = m.DescribeClusterMirrorsResponse
    image = ctx.server.metadata_image
    known = mirrors_image(image).mirrors
    if body.mirror_names:
        names = list(dict.fromkeys(body.mirror_names))
    else:
        names = [n for n in known if _allowed(ctx, AclOperation.DESCRIBE, n)]
    response = D(error_message=None)
    for name in names:
        described = D.DescribedMirror(mirror_name=name, error_message=None)
        response.mirrors.append(described)
        if not _allowed(ctx, AclOperation.DESCRIBE, name):
            described.error_code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            described.error_message = f"Not authorized to DESCRIBE cluster mirror '{name}'."
            continue
        mirror = known.get(name)
        if mirror is None:
            described.error_code = int(ErrorCode.MIRROR_NOT_FOUND)
            described.error_message = f"No cluster mirror named '{name}' exists."
            continue
        if body.include_authorized_operations:
            described.authorized_operations = sum(
                1 << int(op) for op in SUPPORTED_OPERATIONS if _allowed(ctx, op, name)
            )
        partitions = [
            (t, p)
            for t in mirror.topics
            if (topic := image.topics.by_name.get(t)) is not None
            for p in topic.partitions
        ]
        # The coordinator's record (state, LME: failback reads it here, M-69; retries and
        # the FAILED reason, D-13) and this broker's numbers (offsets, lag, fetch age).
        recorded = await ctx.server.mirror_state_reader.read_full(name, partitions)
        by_topic: dict[str, list] = {}
        for topic, p in partitions:
            stats = ctx.server.mirror_stats.partition_stats(name, topic, p)
            record = recorded[(topic, p)]
            failed = record.state is MirrorPartitionState.FAILED
            by_topic.setdefault(topic, []).append(
                D.PartitionDetail(
                    partition_index=p,
                    source_offset=stats.source_offset,
                    destination_offset=stats.destination_offset,
                    lag=stats.lag,
                    state=record.state.name,
                    last_mirror_epoch=record.last_mirror_epoch,
                    source_last_stable_offset=stats.source_lso,
                    last_fetch_age_ms=stats.last_fetch_age_ms,
                    retry_count=record.retry_attempt,
                    failed_reason=record.reason if failed else None,
                )
            )
        described.topics = [
            D.TopicPartitions(topic_name=t, partitions=parts)
            for t, parts in sorted(by_topic.items())
        ]
        _describe_sync(ctx, described)
    return response


def _describe_sync(ctx, described) -> None:
    """The mirror's metadata sync status (issue #15), as its coordinator knows it: when the
    last round completed and its age, what it changed, skipped and could not do. Other brokers
    leave the defaults (-1, empty) and say where to ask; share groups are never synced."""
    D = m.DescribeClusterMirrorsResponse
    sync = ctx.server.mirror_sync
    status = sync.status.get(described.mirror_name)
    if status is None:
        if not ctx.server.mirror_coordinator.is_coordinator(described.mirror_name):
            described.sync_notes = [
                "metadata sync status: reported by the mirror's coordinator broker only"
            ]
        return
    if status.last_sync_ms >= 0:
        described.last_sync_time_ms = status.last_sync_ms
        described.last_sync_age_ms = max(ctx.server.clock.wall_ms() - status.last_sync_ms, 0)
    described.last_change_time_ms = status.last_change_ms
    described.sync_errors = list(status.errors)
    described.sync_changes = [
        D.SyncChange(kind=c.kind, resource=c.resource, detail=c.detail) for c in status.changes
    ]
    described.sync_notes = [*status.notes, SHARE_GROUP_NOTE]


def register(registry: HandlerRegistry) -> None:
    registry.register(94)(create_cluster_mirror)
    registry.register(95)(start_mirror_topics)
    registry.register(96)(stop_mirror_topics)
    registry.register(97)(
        _pause_or_resume(MirrorOperation.PAUSE, m.PauseMirrorTopicsResponse, "pause_mirror_topics")
    )
    registry.register(98)(
        _pause_or_resume(
            MirrorOperation.RESUME, m.ResumeMirrorTopicsResponse, "resume_mirror_topics"
        )
    )
    registry.register(99)(delete_cluster_mirror)
    registry.register(100)(list_cluster_mirrors)
    registry.register(101)(describe_cluster_mirrors)
