"""Partition reassignments: Kafka's ``alterPartitionReassignments`` and
``listPartitionReassignments`` (``ReplicationControlManager``).

A reassignment changes a partition's replica set: the set grows to the union of the old and
the new replicas, the new ones fetch until they join the ISR, then the old ones are dropped
(``kcore.metadata.reassignment_replicas`` has the arithmetic, ``partition_change`` the
records). Per partition of an AlterPartitionReassignments, in Kafka's order:

* an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
* a cancellation (``Replicas`` null): NO_REASSIGNMENT_IN_PROGRESS when none is, else a record
  back to the original replicas (INVALID_REPLICA_ASSIGNMENT when that needs an unclean
  election the topic does not allow);
* a target Kafka refuses (empty, unknown or repeated brokers): INVALID_REPLICA_ASSIGNMENT with
  Kafka's message; with ``AllowReplicationFactorChange`` false (v1+) a target of another size
  than the original replicas: INVALID_REPLICATION_FACTOR (KIP-860);
* otherwise one ``PartitionChangeRecord`` starting the reassignment (or completing it at once
  when the ISR already holds every target replica: a reorder, a removal), or nothing when the
  target is what the partition has. A target on fenced brokers is accepted, as in Kafka: it
  completes when they are back and in sync.

Without ``kcore.replication.enable`` a partition keeps one replica (issue #17): a target of
more replicas, or one that moves the replica elsewhere (two replicas while the new one copies
the log), is INVALID_REPLICATION_FACTOR.

ListPartitionReassignments answers the partitions with adding or removing replicas: all of
them for a null topic list, else those asked for that are reassigning.
"""

from __future__ import annotations

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import PartitionRegistration, TopicImage
from kcore.metadata.partition_change import Election, build_partition_change
from kcore.metadata.reassignment_replicas import ReassignmentReplicas, revert
from kcore.metadata.replication import check_manual_assignment, refuse_replication
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = ["alter_partition_reassignments", "list_partition_reassignments"]


def alter_partition_reassignments(
    ctx: ControllerContext, request: m.AlterPartitionReassignmentsRequest, api_version: int = 1
) -> ControllerResult[m.AlterPartitionReassignmentsResponse]:
    """Answer each partition of ``request`` (see the module docstring); writes no record."""
    R = m.AlterPartitionReassignmentsResponse
    allow_rf_change = request.allow_replication_factor_change or api_version < 1
    response = R(allow_replication_factor_change=allow_rf_change, error_message=None)
    records: list[Message] = []
    for t in request.topics:
        rtopic = R.ReassignableTopicResponse(name=t.name)
        response.responses.append(rtopic)
        for p in t.partitions:
            out = R.ReassignablePartitionResponse(
                partition_index=p.partition_index, error_message=None
            )
            rtopic.partitions.append(out)
            try:
                rec = _reassign(ctx, t.name, p.partition_index, p.replicas, allow_rf_change)
            except KafkaError as e:
                out.error_code, out.error_message = int(e.code), e.message
                continue
            if rec is not None:
                records.append(rec)
    return ControllerResult.of(records, response)


def _reassign(
    ctx: ControllerContext,
    name: str,
    index: int,
    target: list[int] | None,
    allow_rf_change: bool,
) -> Message | None:
    topic = ctx.image.topics.by_name.get(name)
    if topic is None:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}."
        )
    reg = topic.partitions.get(index)
    if reg is None:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}."
        )
    if target is None:
        return _cancel(ctx, topic, index, reg)
    check_manual_assignment(ctx, target, None)
    ongoing = ReassignmentReplicas(reg.replicas, reg.adding_replicas, reg.removing_replicas)
    current = list(ongoing.original_replicas)
    if not allow_rf_change and len(target) != len(current):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {len(current)} to {len(target)}",
        )
    if ctx.config.max_replication_factor > 1:
        return _start(ctx, topic, index, reg, target)
    if target != current:
        during = len(set(target) | set(current))
        refuse_replication(
            ctx,
            during,
            f"Reassigning {name}-{index} from replicas {current} to {target} takes {during} "
            "replicas while the new ones copy the log",
        )
    return None


def _start(
    ctx: ControllerContext,
    topic: TopicImage,
    index: int,
    reg: PartitionRegistration,
    target: list[int],
) -> Message | None:
    # Kafka's changePartitionReassignment: computed from the replicas as they are, those of
    # an ongoing reassignment included; adding and removing are only set when not empty, so
    # a target equal to the union leaves an ongoing reassignment as it is.
    moving = ReassignmentReplicas.start(reg.replicas, target)
    return build_partition_change(
        topic.topic_id,
        index,
        reg,
        is_acceptable_leader=ctx.image.cluster.is_active,
        target_replicas=moving.replicas,
        target_adding=moving.adding or None,
        target_removing=moving.removing or None,
    )


def _cancel(
    ctx: ControllerContext, topic: TopicImage, index: int, reg: PartitionRegistration
) -> Message | None:
    ongoing = ReassignmentReplicas(reg.replicas, reg.adding_replicas, reg.removing_replicas)
    if not ongoing.in_progress:
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    try:
        back = revert(ongoing, reg.isr)
    except ValueError as e:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e)) from None
    unclean = ctx.unclean_election_enabled(topic.name)
    if back.unclean and not unclean:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Unable to revert partition assignment for {topic.name}:{index} because it would "
            "require an unclean leader election.",
        )
    return build_partition_change(
        topic.topic_id,
        index,
        reg,
        is_acceptable_leader=ctx.image.cluster.is_active,
        target_isr=back.isr,
        target_replicas=back.replicas,
        target_adding=(),
        target_removing=(),
        election=Election.UNCLEAN if unclean else Election.ONLINE,
    )


def list_partition_reassignments(
    ctx: ControllerContext, request: m.ListPartitionReassignmentsRequest
) -> ControllerResult[m.ListPartitionReassignmentsResponse]:
    """The partitions being reassigned (see the module docstring); writes no record."""
    R = m.ListPartitionReassignmentsResponse
    response = R(error_message=None)
    topics = ctx.image.topics.by_name
    if request.topics is None:
        asked = [(name, sorted(topics[name].partitions)) for name in sorted(topics)]
    else:
        asked = [(t.name, t.partition_indexes) for t in request.topics if t.name in topics]
    for name, indexes in asked:
        ongoing = R.OngoingTopicReassignment(name=name)
        for index in indexes:
            reg = topics[name].partitions.get(index)
            if reg is None or not reg.is_reassigning:
                continue
            ongoing.partitions.append(
                R.OngoingPartitionReassignment(
                    partition_index=index,
                    replicas=list(reg.replicas),
                    adding_replicas=list(reg.adding_replicas),
                    removing_replicas=list(reg.removing_replicas),
                )
            )
        if ongoing.partitions:
            response.topics.append(ongoing)
    return ControllerResult.of([], response)
