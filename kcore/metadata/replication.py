"""Topics and partitions: Kafka's ``ReplicationControlManager`` for kcore.

Operations (each returns a :class:`~kcore.metadata.context.ControllerResult`):

* ``create_topics`` — CreateTopics v0-8, per-topic errors with Kafka's codes and messages;
  v8 ``MirrorInfo`` supplies the topic id (spec M-72), checked as M-73 requires.
* ``delete_topics`` — by name or by id.
* ``create_partitions`` — increase only.
* ``alter_partition`` — ISR changes from partition leaders, fenced by leader epoch and
  partition epoch.
* ``bump_leader_epochs`` — cluster mirroring's epoch bump (decision D-10).

and the helper the cluster manager uses when brokers are fenced, unfenced, shut down or
unregistered: :func:`leader_and_isr_updates`.

A topic is created in one batch: ``TopicRecord``, then its ``ConfigRecord``s, then one
``PartitionRecord`` per partition (leader = first active replica, ISR = active replicas,
epochs 0). :func:`prepare_topic` builds that batch for anyone who needs a topic (the mirror
operations call it with ``topic_id`` and internal configs such as ``mirror.name``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kcore.log.config import InvalidConfigError, describe, validate
from kcore.metadata.context import (
    MAX_RECORDS_PER_USER_OP,
    METADATA_TOPIC_ID,
    ControllerContext,
    ControllerResult,
)
from kcore.metadata.image import (
    NO_LEADER,
    ConfigResourceType,
    PartitionRegistration,
    TopicImage,
)
from kcore.metadata.partition_change import Election, build_partition_change, validate_isr
from kcore.metadata.placement import PlacementError, StripedReplicaPlacer
from kcore.metadata.topic_names import (
    CLUSTER_METADATA_TOPIC,
    has_collision_chars,
    unify_collision_chars,
    validate_topic_name,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "TopicCreation",
    "alter_partition",
    "bump_leader_epochs",
    "check_manual_assignment",
    "create_partitions",
    "create_topics",
    "delete_topics",
    "leader_and_isr_updates",
    "prepare_topic",
    "refuse_replication",
]

ZERO_UUID = uuid.UUID(int=0)
_TOO_LARGE = "Unable to perform excessively large batch operation."


@dataclass
class TopicCreation:
    """A topic ready to be written: its records and what the response reports."""

    name: str
    topic_id: uuid.UUID
    records: list[Message]
    num_partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


# -- create ------------------------------------------------------------------------------------


def refuse_replication(ctx: ControllerContext, replicas: int, what: str) -> None:
    """INVALID_REPLICATION_FACTOR when ``replicas`` exceeds what kcore can keep in sync
    (:attr:`ControllerConfig.max_replication_factor`, 1 until replication exists, issue #17).
    ``what`` says where the number comes from, to start the message."""
    limit = ctx.config.max_replication_factor
    if replicas > limit:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"{what}, but replication is not available yet: kcore does not copy partitions "
            f"between brokers (issue #17), so a partition can have at most {limit} replica"
            f"{'s' if limit != 1 else ''}.",
        )


def check_manual_assignment(ctx: ControllerContext, brokers: Sequence[int], rf: int | None):
    """Kafka's ``validateManualPartitionAssignment`` (INVALID_REPLICA_ASSIGNMENT), and kcore's
    replica limit (:func:`refuse_replication`) before the consistency of the replica counts."""
    if not brokers:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for b in sorted(brokers):
        if b not in ctx.image.cluster.brokers:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {b}, but no such broker is "
                "registered.",
            )
        if b in seen:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {b} more than once.",
            )
        seen.add(b)
    refuse_replication(
        ctx,
        len(brokers),
        f"The manual partition assignment includes a partition with {len(brokers)} replicas",
    )
    if rf is not None and len(brokers) != rf:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(brokers)} "
            f"replica(s), but this is not consistent with previous partitions, which have "
            f"{rf} replica(s).",
        )


def _new_partition(ctx: ControllerContext, replicas: Sequence[int], index: int):
    isr = [r for r in replicas if ctx.image.cluster.is_active(r)]
    if not isr:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"All brokers specified in the manual partition assignment for partition {index} "
            "are fenced or in controlled shutdown.",
        )
    return PartitionRegistration(
        replicas=tuple(replicas),
        isr=tuple(isr),
        leader=isr[0],
        directories=(ZERO_UUID,) * len(replicas),
    )


def _place(ctx: ControllerContext, num_partitions: int, rf: int) -> list[list[int]]:
    active = [(b.id, b.rack) for b in ctx.image.cluster.active_brokers()]
    return StripedReplicaPlacer(ctx.rng).place(active, num_partitions, rf)


def prepare_topic(
    ctx: ControllerContext,
    name: str,
    *,
    num_partitions: int = -1,
    replication_factor: int = -1,
    assignments: Mapping[int, Sequence[int]] | None = None,
    configs: Mapping[str, str | None] | None = None,
    topic_id: uuid.UUID | None = None,
    allow_internal_configs: bool = False,
    taken_names: set[str] | None = None,
    taken_ids: set[uuid.UUID] | None = None,
) -> TopicCreation:
    """Validate one new topic and build its records; raises ``KafkaError`` with the code and
    message the response carries.

    ``topic_id`` given means a mirror topic (spec M-72/M-73): the id must be unused and every
    replica on an active broker. ``taken_names`` / ``taken_ids`` are those of topics created
    earlier in the same batch (they are not in the image yet).
    """
    image = ctx.image
    taken_names = taken_names if taken_names is not None else set()
    taken_ids = taken_ids if taken_ids is not None else set()
    validate_topic_name(name)
    if name == CLUSTER_METADATA_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        )
    if name in image.topics.by_name:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if has_collision_chars(name):
        unified = unify_collision_chars(name)
        for other in list(image.topics.by_name) + sorted(taken_names):
            if other != name and unify_collision_chars(other) == unified:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
    if topic_id is not None:
        _check_mirror_topic_id(ctx, topic_id, taken_ids)
    creation_configs = _check_configs(ctx, configs or {}, allow_internal_configs)

    parts: dict[int, PartitionRegistration] = {}
    if assignments:
        if replication_factor != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not "
                "set to -1.",
            )
        if num_partitions != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        if len(assignments) > MAX_RECORDS_PER_USER_OP:
            raise KafkaError(ErrorCode.INVALID_REQUEST, _TOO_LARGE)
        rf = None
        for index, brokers in assignments.items():
            check_manual_assignment(ctx, brokers, rf)
            rf = len(brokers)
            if topic_id is not None:
                _check_all_active(ctx, brokers, index)
            parts[index] = _new_partition(ctx, brokers, index)
        if sorted(parts) != list(range(len(parts))):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "partitions should be a consecutive 0-based integer sequence",
            )
    else:
        if replication_factor < -1 or replication_factor == 0:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if num_partitions < -1 or num_partitions == 0:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        n = ctx.config.num_partitions if num_partitions == -1 else num_partitions
        rf = (
            ctx.config.default_replication_factor
            if replication_factor == -1
            else replication_factor
        )
        if n > MAX_RECORDS_PER_USER_OP:
            raise KafkaError(ErrorCode.INVALID_REQUEST, _TOO_LARGE)
        refuse_replication(
            ctx,
            rf,
            f"Replication factor {rf} was requested"
            if replication_factor != -1
            else f"The default replication factor is {rf} (default.replication.factor)",
        )
        try:
            placements = _place(ctx, n, rf)
        except PlacementError as e:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): {e}",
            ) from None
        for index, replicas in enumerate(placements):
            parts[index] = _new_partition(ctx, replicas, index)

    if topic_id is None:
        topic_id = ctx.new_uuid()
        while topic_id in image.topics.by_id or topic_id in taken_ids:
            topic_id = ctx.new_uuid()
    records: list[Message] = [m.TopicRecord(name=name, topic_id=topic_id)]
    for key, value in sorted(creation_configs.items()):
        records.append(
            m.ConfigRecord(
                resource_type=ConfigResourceType.TOPIC, resource_name=name, name=key, value=value
            )
        )
    for index in sorted(parts):
        records.append(parts[index].to_record(topic_id, index))
    return TopicCreation(
        name=name,
        topic_id=topic_id,
        records=records,
        num_partitions=len(parts),
        replication_factor=len(parts[0].replicas),
        configs=creation_configs,
    )


def _check_mirror_topic_id(ctx: ControllerContext, topic_id: uuid.UUID, taken: set[uuid.UUID]):
    """Spec M-73 (1): the id must not name another topic. kcore answers TOPIC_ALREADY_EXISTS
    (the topic with that identity exists), and INVALID_REQUEST for a reserved id."""
    if topic_id in (ZERO_UUID, METADATA_TOPIC_ID):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"MirrorInfo.TopicId {topic_id} is a reserved topic id."
        )
    other = ctx.image.topics.by_id.get(topic_id)
    if other is not None:
        raise KafkaError(
            ErrorCode.TOPIC_ALREADY_EXISTS,
            f"Topic id {topic_id} is already used by topic '{other.name}'.",
        )
    if topic_id in taken:
        raise KafkaError(
            ErrorCode.TOPIC_ALREADY_EXISTS,
            f"Topic id {topic_id} is used by another topic of this request.",
        )


def _check_all_active(ctx: ControllerContext, brokers: Sequence[int], index: int) -> None:
    """Spec M-73 (2), KAFKA-16234: every replica of a mirror topic on an active broker."""
    for b in brokers:
        reg = ctx.image.cluster.brokers.get(b)
        if reg is not None and not reg.active:
            state = "in controlled shutdown" if reg.in_controlled_shutdown else "fenced"
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Broker {b} in the assignment of partition {index} is {state}: every replica "
                "of a mirror topic must be on an active broker.",
            )


def _check_configs(
    ctx: ControllerContext, configs: Mapping[str, str | None], allow_internal: bool
) -> dict[str, str]:
    nulls = [k for k, v in configs.items() if v is None]
    if nulls:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            "Null value not supported for topic configs: " + ",".join(nulls),
        )
    values = {k: v for k, v in configs.items() if v is not None}
    try:
        validate(values, allow_internal=allow_internal, broker_config=ctx.broker_defaults())
    except InvalidConfigError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, e.message) from None
    return values


def create_topics(
    ctx: ControllerContext, request: m.CreateTopicsRequest
) -> ControllerResult[m.CreateTopicsResponse]:
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    response = m.CreateTopicsResponse()
    records: list[Message] = []
    taken_names: set[str] = set()
    taken_ids: set[uuid.UUID] = set()
    reported_duplicates: set[str] = set()
    for t in request.topics:
        result = m.CreateTopicsResponse.CreatableTopicResult(name=t.name, error_message=None)
        if counts[t.name] > 1:
            # ControllerApis: every entry of a repeated name fails, reported once.
            if t.name in reported_duplicates:
                continue
            reported_duplicates.add(t.name)
            _fail(result, KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            response.topics.append(result)
            continue
        try:
            topic_id = None
            if t.mirror_info is not None:
                if ctx.image.features.mirror_version < 1:
                    raise KafkaError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        "MirrorInfo needs cluster mirroring, which is disabled (mirror.version=0).",
                    )
                topic_id = t.mirror_info.topic_id
            configs: dict[str, str | None] = {}
            for c in t.configs:
                configs[c.name] = c.value
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            if len(assignments) != len(t.assignments):
                dup = _first_duplicate(a.partition_index for a in t.assignments)
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Found multiple manual partition assignments for partition {dup}",
                )
            creation = prepare_topic(
                ctx,
                t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=assignments,
                configs=configs,
                topic_id=topic_id,
                taken_names=taken_names,
                taken_ids=taken_ids,
            )
            if len(records) + len(creation.records) > MAX_RECORDS_PER_USER_OP:
                raise KafkaError(ErrorCode.INVALID_REQUEST, _TOO_LARGE)
        except KafkaError as e:
            _fail(result, e)
            response.topics.append(result)
            continue
        records += creation.records
        taken_names.add(creation.name)
        taken_ids.add(creation.topic_id)
        result.topic_id = creation.topic_id
        result.num_partitions = creation.num_partitions
        result.replication_factor = creation.replication_factor
        result.configs = [
            m.CreateTopicsResponse.CreatableTopicConfigs(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.is_sensitive,
            )
            for e in describe(
                creation.configs,
                ctx.config.static_config,
                dynamic_default_broker_config=ctx.image.configs.cluster_defaults(),
            )
        ]
        response.topics.append(result)
    return ControllerResult.of([] if request.validate_only else records, response)


def _fail(result: Message, err: KafkaError) -> None:
    result.error_code = int(err.code)
    result.error_message = err.message


def _first_duplicate(values: Iterable[int]) -> int:
    seen: set[int] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    raise AssertionError("no duplicate")


# -- delete ------------------------------------------------------------------------------------


def delete_topics(
    ctx: ControllerContext, request: m.DeleteTopicsRequest, api_version: int
) -> ControllerResult[m.DeleteTopicsResponse]:
    """DeleteTopics: v0-5 by name, v6 by name or id (one of them per entry)."""
    if api_version >= 6:
        entries = [(t.name, t.topic_id) for t in request.topics]
    else:
        entries = [(name, ZERO_UUID) for name in request.topic_names]
    names = [n for n, tid in entries if n is not None]
    ids = [tid for n, tid in entries if tid != ZERO_UUID]
    response = m.DeleteTopicsResponse()
    records: list[Message] = []
    deleted: set[uuid.UUID] = set()
    for name, tid in entries:
        result = m.DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=tid)
        response.responses.append(result)
        try:
            topic = _deletable(ctx, name, tid, names, ids)
        except KafkaError as e:
            _fail(result, e)
            continue
        result.name, result.topic_id = topic.name, topic.topic_id
        if topic.topic_id not in deleted:
            deleted.add(topic.topic_id)
            records.append(m.RemoveTopicRecord(topic_id=topic.topic_id))
    return ControllerResult.of(records, response)


def _deletable(
    ctx: ControllerContext, name: str | None, tid: uuid.UUID, names: list, ids: list
) -> TopicImage:
    if name is not None and tid != ZERO_UUID:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id."
        )
    if name is None and tid == ZERO_UUID:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
    if name is not None and names.count(name) > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    if tid != ZERO_UUID and ids.count(tid) > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
    if not ctx.config.delete_topic_enable:
        raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
    if name is not None:
        topic = ctx.image.topics.by_name.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return topic
    topic = ctx.image.topics.by_id.get(tid)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
    return topic


# -- create partitions -------------------------------------------------------------------------


def create_partitions(
    ctx: ControllerContext, request: m.CreatePartitionsRequest
) -> ControllerResult[m.CreatePartitionsResponse]:
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    response = m.CreatePartitionsResponse()
    records: list[Message] = []
    for t in request.topics:
        result = m.CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
        response.results.append(result)
        try:
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            new = _new_partitions(ctx, t)
            if len(records) + len(new) > MAX_RECORDS_PER_USER_OP:
                raise KafkaError(ErrorCode.INVALID_REQUEST, _TOO_LARGE)
            records += new
        except KafkaError as e:
            _fail(result, e)
    return ControllerResult.of([] if request.validate_only else records, response)


def _new_partitions(ctx: ControllerContext, t: Message) -> list[Message]:
    topic = ctx.image.topics.by_name.get(t.name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    current = topic.num_partitions
    if t.count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if t.count < current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {t.name} currently has {current} partition(s); {t.count} would not be an "
            "increase.",
        )
    additional = t.count - current
    if additional > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.INVALID_REQUEST, _TOO_LARGE)
    if 0 not in topic.partitions:
        raise KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"Invalid state: topic {t.name} appears to have no partitions.",
        )
    rf = len(topic.partitions[0].replicas)
    if t.assignments is not None:
        if len(t.assignments) != additional:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(t.assignments)} assignment(s) were specified.",
            )
        placements = []
        for a in t.assignments:
            check_manual_assignment(ctx, a.broker_ids, rf)
            placements.append(list(a.broker_ids))
    else:
        # A topic with more replicas predates the limit (an older kcore's metadata log).
        refuse_replication(ctx, rf, f"The topic {t.name} has replication factor {rf}")
        try:
            placements = _place(ctx, additional, rf)
        except PlacementError as e:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
    out: list[Message] = []
    for offset, replicas in enumerate(placements):
        out.append(
            _new_partition(ctx, replicas, current + offset).to_record(
                topic.topic_id, current + offset
            )
        )
    return out


# -- AlterPartition ----------------------------------------------------------------------------


def alter_partition(
    ctx: ControllerContext, request: m.AlterPartitionRequest, api_version: int
) -> ControllerResult[m.AlterPartitionResponse]:
    """ISR changes from a partition leader (Kafka's ``alterPartition``).

    Per partition, in Kafka's order: UNKNOWN_TOPIC_ID (v2+) / UNKNOWN_TOPIC_OR_PARTITION;
    NOT_CONTROLLER when the request's leader or partition epoch is *ahead* of ours (we are a
    stale controller); FENCED_LEADER_EPOCH when its leader epoch is behind; INVALID_REQUEST
    from a non-leader; INVALID_UPDATE_VERSION when its partition epoch is behind; INVALID_REQUEST
    for an ISR that is not a subset of the replicas or lacks the leader; INELIGIBLE_REPLICA
    (v2+, else OPERATION_NOT_ATTEMPTED) for an ISR member that is fenced, shutting down or
    at another broker epoch. A request whose broker epoch is stale fails as a whole
    (STALE_BROKER_EPOCH).
    """
    response = m.AlterPartitionResponse()
    try:
        ctx.check_broker_epoch(request.broker_id, request.broker_epoch)
    except KafkaError as e:
        response.error_code = int(e.code)
        return ControllerResult.of([], response)
    records: list[Message] = []
    for td in request.topics:
        rtopic = m.AlterPartitionResponse.TopicData(topic_name=td.topic_name, topic_id=td.topic_id)
        response.topics.append(rtopic)
        if api_version >= 2:
            topic = ctx.image.topics.by_id.get(td.topic_id)
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = ctx.image.topics.by_name.get(td.topic_name)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for pd in td.partitions:
            out = m.AlterPartitionResponse.PartitionData(partition_index=pd.partition_index)
            rtopic.partitions.append(out)
            if topic is None:
                out.error_code = int(missing)
                continue
            if api_version >= 3:
                new_isr = [(b.broker_id, b.broker_epoch) for b in pd.new_isr_with_epochs]
            else:
                new_isr = [(b, -1) for b in pd.new_isr]
            error, reg = _check_alter_partition(
                ctx, request.broker_id, topic, pd, new_isr, api_version
            )
            if error is not ErrorCode.NONE:
                out.error_code = int(error)
                continue
            election = (
                Election.UNCLEAN if ctx.unclean_election_enabled(topic.name) else Election.ONLINE
            )
            rec = build_partition_change(
                topic.topic_id,
                pd.partition_index,
                reg,
                is_acceptable_leader=ctx.image.cluster.is_active,
                target_isr=[b for b, _ in new_isr],
                target_leader_recovery_state=pd.leader_recovery_state,
                election=election,
            )
            if rec is not None:
                records.append(rec)
                reg = reg.merge(rec)
                if rec.leader not in (request.broker_id, -2):
                    out.error_code = int(
                        ErrorCode.NEW_LEADER_ELECTED
                        if api_version > 1
                        else ErrorCode.FENCED_LEADER_EPOCH
                    )
                    continue
            out.leader_id = reg.leader
            out.leader_epoch = reg.leader_epoch
            out.isr = list(reg.isr)
            out.leader_recovery_state = reg.leader_recovery_state
            out.partition_epoch = reg.partition_epoch
    return ControllerResult.of(records, response)


def _check_alter_partition(
    ctx: ControllerContext,
    broker_id: int,
    topic: TopicImage,
    pd: Message,
    new_isr: list[tuple[int, int]],
    api_version: int,
) -> tuple[ErrorCode, PartitionRegistration | None]:
    reg = topic.partitions.get(pd.partition_index)
    if reg is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if pd.leader_epoch > reg.leader_epoch or pd.partition_epoch > reg.partition_epoch:
        return ErrorCode.NOT_CONTROLLER, None
    if pd.leader_epoch < reg.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, None
    if broker_id != reg.leader:
        return ErrorCode.INVALID_REQUEST, None
    if pd.partition_epoch < reg.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION, None
    isr = [b for b, _ in new_isr]
    if not validate_isr(reg.replicas, isr) or reg.leader not in isr:
        return ErrorCode.INVALID_REQUEST, None
    if pd.leader_recovery_state == 1 and len(isr) > 1:
        return ErrorCode.INVALID_REQUEST, None
    if reg.leader_recovery_state == 0 and pd.leader_recovery_state == 1:
        return ErrorCode.INVALID_REQUEST, None
    for b, epoch in new_isr:
        breg = ctx.image.cluster.brokers.get(b)
        if breg is None or not breg.active or (epoch != -1 and breg.epoch != epoch):
            return (
                ErrorCode.INELIGIBLE_REPLICA
                if api_version > 1
                else ErrorCode.OPERATION_NOT_ATTEMPTED
            ), None
    return ErrorCode.NONE, reg


# -- BumpLeaderEpochs --------------------------------------------------------------------------


def bump_leader_epochs(
    ctx: ControllerContext, request: m.BumpLeaderEpochsRequest
) -> ControllerResult[m.BumpLeaderEpochsResponse]:
    """Raise leader epochs for cluster mirroring (spec §7.12, decision D-10).

    Each named partition gets a ``PartitionChangeRecord`` naming its current leader (so the
    epoch becomes ``current + 1``) and carrying ``MinLeaderEpoch`` (so it becomes at least the
    requested value): ``max(current + 1, minLeaderEpoch)``. The bump happens even when the
    current epoch already exceeds the minimum: the caller asked for a new epoch. Errors per
    partition: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION; the whole request fails with
    UNSUPPORTED_VERSION while ``mirror.version`` is 0 (decision D-30).
    """
    response = m.BumpLeaderEpochsResponse()
    if ctx.image.features.mirror_version < 1:
        response.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
        return ControllerResult.of([], response)
    records: list[Message] = []
    for ts in request.topics:
        topic = ctx.image.topics.by_id.get(ts.topic_id)
        rtopic = m.BumpLeaderEpochsResponse.TopicPartitions(topic_name=topic.name if topic else "")
        response.topics.append(rtopic)
        for p in ts.partitions:
            out = m.BumpLeaderEpochsResponse.PartitionDetail(partition_index=p.partition_index)
            rtopic.partitions.append(out)
            if topic is None:
                out.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            reg = topic.partitions.get(p.partition_index)
            if reg is None:
                out.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            rec = build_partition_change(
                topic.topic_id,
                p.partition_index,
                reg,
                is_acceptable_leader=ctx.image.cluster.is_active,
                bump_leader_epoch=True,
                min_leader_epoch=max(p.min_leader_epoch, -1),
            )
            records.append(rec)
    return ControllerResult.of(records, response)


# -- leader and ISR updates for broker state changes --------------------------------------------


def leader_and_isr_updates(
    ctx: ControllerContext,
    *,
    broker_to_remove: int = NO_LEADER,
    broker_to_add: int = NO_LEADER,
) -> list[Message]:
    """Kafka's ``generateLeaderAndIsrUpdates``.

    ``broker_to_remove`` (being fenced, shut down or unregistered): it leaves every ISR it is in
    and loses every leadership, a new leader being elected from the rest of the ISR. An ISR
    that would become empty keeps its last member and the partition goes leaderless.
    ``broker_to_add`` (being unfenced): every leaderless partition gets a leader if one of its
    ISR members is now acceptable, this broker included.
    """
    image = ctx.image

    def acceptable(r: int) -> bool:
        if r == broker_to_remove:
            return False
        return r == broker_to_add or image.cluster.is_active(r)

    records: list[Message] = []
    for topic in image.topics.by_id.values():
        election = Election.UNCLEAN if ctx.unclean_election_enabled(topic.name) else Election.ONLINE
        for index, reg in topic.partitions.items():
            if broker_to_remove != NO_LEADER:
                if broker_to_remove not in reg.isr and reg.leader != broker_to_remove:
                    continue
                target = [r for r in reg.isr if r != broker_to_remove]
            elif reg.leader == NO_LEADER:
                target = list(reg.isr)
            else:
                continue
            rec = build_partition_change(
                topic.topic_id,
                index,
                reg,
                is_acceptable_leader=acceptable,
                target_isr=target,
                election=election,
            )
            if rec is not None:
                records.append(rec)
    return records
