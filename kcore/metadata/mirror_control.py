"""The controller's cluster-mirror operations: mirrors, and the topics in them (spec §6.1-6.7).

Operations (each returns a :class:`~kcore.metadata.context.ControllerResult`; every record of
one result is appended as one batch, so a change is all or nothing):

* ``create_cluster_mirror`` — M-48: the name checked (M-03), the configs checked
  (:mod:`kcore.metadata.mirror_configs`) and written as CLUSTER_MIRROR ``ConfigRecord``s.
* ``delete_cluster_mirror`` — M-64/M-65, D-29: only when every topic of the mirror has
  ``mirror.name=<m>.stopped`` (the receiving broker has checked the coordinator's partition
  states first); removes every config of the mirror; the stopped topics keep their
  ``mirror.name`` as a record of where they came from.
* ``start_mirror_topics`` — M-50: the include/exclude patterns persisted (D-20: Start removes
  from the exclude list every entry identical to a topic name or include pattern it is given);
  each missing topic created with the source's topic id and partition count, the source configs
  the broker looked up and ``mirror.name=<m>`` — the ``TopicRecord``, its ``ConfigRecord``s and
  ``PartitionRecord``s in the same batch (M-50 step 3) — and each existing stopped topic of the
  mirror set back to ``<m>``; the source cluster id the broker saw recorded on first contact, a
  different one refused (D-24).
* ``stop_mirror_topics`` — M-53/M-54: ``<m>.stopped``; patterns move from include to exclude,
  and every topic of the mirror matching the new exclude list is stopped too.
* the operator's recovery (D-13): Start and Stop of a topic already in the mirror also raise
  its internal ``mirror.recovery.id`` config by one. The broker admitted the operation only if
  the topic's partitions allow it (a Start of a mirroring topic only when some are FAILED), and
  every broker's mirror manager sends the FAILED partitions it leads the recovery when it sees
  the new value: state through the metadata log, so it reaches every leader, whichever broker
  took the request and whether or not it is still up.
* ``pause_mirror_topics`` / ``resume_mirror_topics`` — M-62/M-63: ``<m>.paused`` and back.

Errors: a request-level problem (mirroring disabled, unknown mirror, bad pattern, source cluster
id mismatch) fails the whole request in the top-level error and writes nothing; a problem with
one topic fails that topic only, in its result, with a message. The replication factor of a
created topic is ``mirror.topic.replication.factor``, else ``default.replication.factor`` (D-28),
and goes through the same placement rules as CreateTopics (:func:`replication.prepare_topic`).
Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kcore.log.config import InvalidConfigError, is_valid_mirror_name
from kcore.metadata import mirror_configs as mc
from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import ConfigResourceType
from kcore.metadata.mirrors import (
    MIRROR_NAME_CONFIG,
    RECOVERY_ID_CONFIG,
    ClusterMirrorImage,
    MirrorMode,
    mirror_name_value,
    mirrors_image,
)
from kcore.metadata.replication import prepare_topic
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "ClusterMirrorConfigValidator",
    "check_mirroring_enabled",
    "create_cluster_mirror",
    "delete_cluster_mirror",
    "pause_mirror_topics",
    "resume_mirror_topics",
    "start_mirror_topics",
    "stop_mirror_topics",
    "validate_mirror_name",
]

ZERO_UUID = uuid.UUID(int=0)
_MIRROR = ConfigResourceType.CLUSTER_MIRROR
_ACTIVE, _PAUSED, _STOPPED = MirrorMode.ACTIVE, MirrorMode.PAUSED, MirrorMode.STOPPED


def check_mirroring_enabled(ctx: ControllerContext) -> None:
    """D-30: every mirror operation answers UNSUPPORTED_VERSION while ``mirror.version`` is 0."""
    if ctx.image.features.mirror_version < 1:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION,
            "Cluster mirroring is disabled on this cluster (mirror.version=0).",
        )


def validate_mirror_name(name: str | None) -> None:
    """Spec M-03: topic-name rules, and no ``.stopped`` / ``.paused`` suffix
    (INVALID_MIRROR_NAME, saying which rule)."""
    if name is None or not is_valid_mirror_name(name):
        if not name:
            why = "it is empty"
        elif name.endswith((".stopped", ".paused")):
            why = "the suffixes .stopped and .paused are reserved"
        elif name in (".", ".."):
            why = "'.' and '..' are not allowed"
        elif len(name) > 249:
            why = f"it is {len(name)} characters long, at most 249 are allowed"
        else:
            why = "only ASCII letters, digits, '.', '_' and '-' are allowed"
        raise KafkaError(ErrorCode.INVALID_MIRROR_NAME, f"Invalid mirror name {name!r}: {why}.")


def _mirror(ctx: ControllerContext, name: str) -> ClusterMirrorImage:
    validate_mirror_name(name)
    mirror = mirrors_image(ctx.image).mirror(name)
    if mirror is None:
        raise KafkaError(ErrorCode.MIRROR_NOT_FOUND, f"No cluster mirror named '{name}' exists.")
    return mirror


def _config_record(mirror: str, key: str, value: str | None) -> Message:
    return m.ConfigRecord(resource_type=_MIRROR, resource_name=mirror, name=key, value=value)


def _mirror_name_record(topic: str, value: str) -> Message:
    return m.ConfigRecord(
        resource_type=ConfigResourceType.TOPIC,
        resource_name=topic,
        name=MIRROR_NAME_CONFIG,
        value=value,
    )


def _recovery_record(ctx: ControllerContext, topic: str) -> Message:
    """``mirror.recovery.id`` of ``topic`` raised by one: the operator's Start or Stop reaches
    every broker that leads one of its FAILED partitions through the metadata log (D-13)."""
    current = ctx.image.configs.topic(topic).get(RECOVERY_ID_CONFIG, "0")
    return m.ConfigRecord(
        resource_type=ConfigResourceType.TOPIC,
        resource_name=topic,
        name=RECOVERY_ID_CONFIG,
        value=str(int(current) + 1),
    )


def _as_kafka_error(e: InvalidConfigError) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, e.message)


class ClusterMirrorConfigValidator:
    """(Incremental)AlterConfigs on CLUSTER_MIRROR (spec M-68), registered with the controller:
    the mirror must exist and its configs after the change must be valid."""

    list_keys = mc.LIST_KEYS

    def __call__(self, name, new, touched, ctx: ControllerContext) -> None:
        check_mirroring_enabled(ctx)
        _mirror(ctx, name)
        mc.validate_mirror_configs(new, touched)


# -- create / delete ---------------------------------------------------------------------------


def create_cluster_mirror(
    ctx: ControllerContext, request: m.CreateClusterMirrorRequest
) -> ControllerResult[m.CreateClusterMirrorResponse]:
    response = m.CreateClusterMirrorResponse(error_message=None)
    try:
        check_mirroring_enabled(ctx)
        name = request.mirror_name
        validate_mirror_name(name)
        if mirrors_image(ctx.image).mirror(name) is not None:
            raise KafkaError(
                ErrorCode.MIRROR_ALREADY_EXISTS, f"A cluster mirror named '{name}' already exists."
            )
        keys = [c.name for c in request.config]
        if len(set(keys)) != len(keys):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        nulls = sorted(c.name for c in request.config if c.value is None)
        if nulls:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, "Null value not supported for: " + ", ".join(nulls)
            )
        configs = {c.name: c.value for c in request.config}
        try:
            mc.validate_mirror_configs(configs, creating=True)
        except InvalidConfigError as e:
            raise _as_kafka_error(e) from None
    except KafkaError as e:
        response.error_code, response.error_message = int(e.code), e.message
        return ControllerResult.of([], response)
    records = [_config_record(name, k, v) for k, v in sorted(configs.items())]
    return ControllerResult.of(records, response)


def delete_cluster_mirror(
    ctx: ControllerContext, request: m.DeleteClusterMirrorRequest
) -> ControllerResult[m.DeleteClusterMirrorResponse]:
    response = m.DeleteClusterMirrorResponse(error_message=None)
    try:
        check_mirroring_enabled(ctx)
        mirror = _mirror(ctx, request.mirror_name)
        not_stopped = mirror.topics_in(_ACTIVE, _PAUSED)
        if not_stopped:
            raise KafkaError(
                ErrorCode.MIRROR_NOT_EMPTY,
                f"Cluster mirror '{mirror.name}' has topics that are not stopped: "
                f"{', '.join(not_stopped)}. Stop them first.",
            )
    except KafkaError as e:
        response.error_code, response.error_message = int(e.code), e.message
        return ControllerResult.of([], response)
    records = [_config_record(mirror.name, k, None) for k in sorted(mirror.configs)]
    return ControllerResult.of(records, response)


# -- topics ------------------------------------------------------------------------------------


def _check_patterns(key: str, patterns: list[str]) -> None:
    try:
        for p in patterns:
            mc.validate_pattern(key, p)
    except InvalidConfigError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST, e.message) from None


def _pattern_records(
    mirror: ClusterMirrorImage, include: list[str], exclude: list[str]
) -> list[Message]:
    out = []
    for key, old, new in (
        (mc.INCLUDE, mirror.include_patterns, include),
        (mc.EXCLUDE, mirror.exclude_patterns, exclude),
    ):
        if old != new:
            out.append(_config_record(mirror.name, key, mc.join_patterns(new) if new else None))
    return out


def _added(patterns: list[str], more: list[str]) -> list[str]:
    return patterns + [p for p in dict.fromkeys(more) if p not in patterns]


def _topic_ops(
    ctx: ControllerContext,
    request: Message,
    response_cls: type,
    prepare: Callable[[ClusterMirrorImage], tuple[list[Message], Callable, Callable | None]],
) -> ControllerResult:
    """The frame of Start/Stop/Pause/Resume: request checks, then ``act(topic)`` per topic
    (returning its records, raising KafkaError for that topic only), then ``extra()`` for the
    topics a pattern adds (``(name, records)`` pairs). ``prepare(mirror)`` returns the
    request-level records, ``act`` and ``extra`` (or None)."""
    response = response_cls(error_message=None, mirror_name=request.mirror_name)
    Result = response_cls.TopicResult
    try:
        check_mirroring_enabled(ctx)
        mirror = _mirror(ctx, request.mirror_name)
        names = [t.topic_name for t in request.topics]
        if len(set(names)) != len(names):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name in the request.")
        records, act, extra = prepare(mirror)
    except KafkaError as e:
        response.error_code, response.error_message = int(e.code), e.message
        return ControllerResult.of([], response)
    for t in request.topics:
        result = Result(name=t.topic_name, error_message=None)
        try:
            records += act(t)
        except KafkaError as e:
            result.error_code, result.error_message = int(e.code), e.message
        response.topics.append(result)
    if extra is not None:
        for name, more in extra():
            records += more
            response.topics.append(Result(name=name, error_message=None))
    return ControllerResult.of(records, response)


def _member(ctx: ControllerContext, mirror: ClusterMirrorImage, t: Message) -> MirrorMode:
    """The mode of topic ``t`` in ``mirror``; KafkaError if it is not one of its topics."""
    name = t.topic_name
    topic = ctx.image.topics.by_name.get(name)
    if topic is None:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist on this cluster."
        )
    if t.topic_id != ZERO_UUID and t.topic_id != topic.topic_id:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_ID,
            f"Topic '{name}' has topic id {topic.topic_id}, not {t.topic_id}.",
        )
    membership = mirrors_image(ctx.image).membership(name)
    if membership is None or membership[0] != mirror.name:
        where = "no mirror" if membership is None else f"mirror '{membership[0]}'"
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Topic '{name}' is not a topic of mirror '{mirror.name}' (it is in {where}).",
        )
    return membership[1]


def start_mirror_topics(
    ctx: ControllerContext, request: m.StartMirrorTopicsRequest
) -> ControllerResult[m.StartMirrorTopicsResponse]:
    def prepare(mirror: ClusterMirrorImage):
        _check_patterns(mc.INCLUDE, request.include_patterns)
        _check_patterns(mc.EXCLUDE, request.exclude_patterns)
        given = {t.topic_name for t in request.topics} | set(request.include_patterns)
        include = _added(mirror.include_patterns, request.include_patterns)
        exclude = _added(
            [p for p in mirror.exclude_patterns if p not in given], request.exclude_patterns
        )
        records = _pattern_records(mirror, include, exclude)
        seen = request.source_cluster_id
        if seen:
            recorded = mirror.source_cluster_id
            if recorded is None:
                records.append(_config_record(mirror.name, mc.SOURCE_CLUSTER_ID, seen))
            elif recorded != seen:
                raise KafkaError(
                    ErrorCode.MIRROR_SOURCE_CLUSTER_ID_MISMATCH,
                    f"The source cluster of mirror '{mirror.name}' has cluster id {seen}, but "
                    f"the mirror recorded {recorded}. Alter bootstrap.servers and "
                    f"{mc.SOURCE_CLUSTER_ID} together to re-point the mirror.",
                )
        rf_text = mirror.configs.get(mc.REPLICATION_FACTOR)
        rf = int(rf_text) if rf_text else -1
        taken_names: set[str] = set()
        taken_ids: set[uuid.UUID] = set()

        def act(t: Message) -> list[Message]:
            return _start_topic(ctx, mirror, t, exclude, rf, taken_names, taken_ids)

        return records, act, None

    return _topic_ops(ctx, request, m.StartMirrorTopicsResponse, prepare)


def _start_topic(ctx, mirror, t, exclude, rf, taken_names, taken_ids) -> list[Message]:
    name = t.topic_name
    if mc.is_internal_topic(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, f"Internal topic '{name}' is never mirrored."
        )
    pattern = mc.first_match(name, exclude)
    if pattern is not None:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Topic '{name}' matches the exclude pattern {pattern!r} of mirror '{mirror.name}'.",
        )
    membership = mirrors_image(ctx.image).membership(name)
    if membership is not None and membership[0] != mirror.name:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Topic '{name}' belongs to mirror '{membership[0]}' "
            f"(mirror.name={mirror_name_value(*membership)}).",
        )
    local = ctx.image.topics.by_name.get(name)
    if local is None:
        return _create_mirror_topic(ctx, mirror, t, rf, taken_names, taken_ids)
    if t.topic_id == ZERO_UUID or t.topic_id != local.topic_id:
        source = "unknown" if t.topic_id == ZERO_UUID else str(t.topic_id)
        raise KafkaError(
            ErrorCode.TOPIC_ALREADY_EXISTS,
            f"Topic '{name}' already exists on this cluster with topic id {local.topic_id}, and "
            f"the source topic's id is {source}: a local topic cannot become a mirror topic "
            "(delete it first, or mirror into another cluster).",
        )
    if t.num_partitions > 0 and t.num_partitions != local.num_partitions:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic '{name}' has {local.num_partitions} partition(s) here and "
            f"{t.num_partitions} on the source.",
        )
    mode = None if membership is None else membership[1]
    if mode is _PAUSED:
        raise KafkaError(
            ErrorCode.INVALID_MIRROR_STATE,
            f"Topic '{name}' is paused in mirror '{mirror.name}': resume it instead.",
        )
    # The broker admitted the Start: its partitions are UNKNOWN, STOPPED or FAILED, and the
    # FAILED ones recover (D-13) wherever they are led.
    recovery = [_recovery_record(ctx, name)] if mode is not None else []
    if mode is _ACTIVE:
        return recovery  # already mirroring: only the recovery
    # Stopped in this mirror (restart, T2), or the same topic id without a mirror (failback).
    return [_mirror_name_record(name, mirror.name), *recovery]


def _create_mirror_topic(ctx, mirror, t, rf, taken_names, taken_ids) -> list[Message]:
    name = t.topic_name
    if t.topic_id == ZERO_UUID or t.num_partitions < 1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Topic '{name}' does not exist here: its source TopicId and NumPartitions are needed "
            "to create it.",
        )
    configs: dict[str, str | None] = {c.name: c.value for c in t.configs}
    if MIRROR_NAME_CONFIG in configs:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"{MIRROR_NAME_CONFIG} is set by the controller only."
        )
    configs[MIRROR_NAME_CONFIG] = mirror.name
    creation = prepare_topic(
        ctx,
        name,
        num_partitions=t.num_partitions,
        replication_factor=rf,
        configs=configs,
        topic_id=t.topic_id,
        allow_internal_configs=True,
        taken_names=taken_names,
        taken_ids=taken_ids,
    )
    taken_names.add(name)
    taken_ids.add(creation.topic_id)
    return creation.records


def stop_mirror_topics(
    ctx: ControllerContext, request: m.StopMirrorTopicsRequest
) -> ControllerResult[m.StopMirrorTopicsResponse]:
    def prepare(mirror: ClusterMirrorImage):
        _check_patterns(mc.EXCLUDE, request.patterns)
        include = [p for p in mirror.include_patterns if p not in request.patterns]
        exclude = _added(mirror.exclude_patterns, request.patterns)
        records = _pattern_records(mirror, include, exclude)
        named = {t.topic_name for t in request.topics}

        def act(t: Message) -> list[Message]:
            # Either way the topic's FAILED partitions (if any) recover into STOPPING (D-13).
            recovery = _recovery_record(ctx, t.topic_name)
            if _member(ctx, mirror, t) is _STOPPED:
                return [recovery]  # D-12: stopping a stopped topic changes nothing else
            value = mirror_name_value(mirror.name, _STOPPED)
            return [_mirror_name_record(t.topic_name, value), recovery]

        def extra():
            if not request.patterns:
                return
            for topic in mirror.topics_in(_ACTIVE, _PAUSED):
                if topic not in named and mc.first_match(topic, exclude) is not None:
                    value = mirror_name_value(mirror.name, _STOPPED)
                    yield topic, [_mirror_name_record(topic, value), _recovery_record(ctx, topic)]

        return records, act, extra

    return _topic_ops(ctx, request, m.StopMirrorTopicsResponse, prepare)


def pause_mirror_topics(
    ctx: ControllerContext, request: m.PauseMirrorTopicsRequest
) -> ControllerResult[m.PauseMirrorTopicsResponse]:
    def prepare(mirror: ClusterMirrorImage):
        def act(t: Message) -> list[Message]:
            mode = _member(ctx, mirror, t)
            if mode is _PAUSED:
                return []  # a retried pause succeeds
            if mode is _STOPPED:
                raise KafkaError(
                    ErrorCode.INVALID_MIRROR_STATE,
                    f"Topic '{t.topic_name}' is stopped in mirror '{mirror.name}'.",
                )
            return [_mirror_name_record(t.topic_name, mirror_name_value(mirror.name, _PAUSED))]

        return [], act, None

    return _topic_ops(ctx, request, m.PauseMirrorTopicsResponse, prepare)


def resume_mirror_topics(
    ctx: ControllerContext, request: m.ResumeMirrorTopicsRequest
) -> ControllerResult[m.ResumeMirrorTopicsResponse]:
    def prepare(mirror: ClusterMirrorImage):
        def act(t: Message) -> list[Message]:
            if _member(ctx, mirror, t) is not _PAUSED:
                raise KafkaError(
                    ErrorCode.INVALID_MIRROR_STATE,
                    f"Topic '{t.topic_name}' is not paused in mirror '{mirror.name}'.",
                )
            return [_mirror_name_record(t.topic_name, mirror.name)]

        return [], act, None

    return _topic_ops(ctx, request, m.ResumeMirrorTopicsResponse, prepare)
