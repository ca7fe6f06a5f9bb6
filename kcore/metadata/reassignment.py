"""Partition reassignments: Kafka's ``alterPartitionReassignments`` and
``listPartitionReassignments`` for a controller that cannot move replicas yet.

A reassignment changes a partition's replica set. Kafka does it by growing the set to the union
of the old and the new replicas, letting the new ones fetch until they join the ISR, then
dropping the old ones. Every step but the last needs replication, which kcore does not have yet
(issue #17): a second replica would be reported in sync without ever fetching. So, per
partition:

* an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
* a cancellation (``Replicas`` null): NO_REASSIGNMENT_IN_PROGRESS, none ever is;
* a target Kafka refuses (empty, unknown or repeated brokers): INVALID_REPLICA_ASSIGNMENT with
  Kafka's message; with ``AllowReplicationFactorChange`` false (v1+) a target of another size:
  INVALID_REPLICATION_FACTOR, as in Kafka (KIP-860);
* a target of more than one replica, or one that moves the replica elsewhere (two replicas while
  the new one copies the log): INVALID_REPLICATION_FACTOR, saying replication is not available;
* the current replica set: done at once, as in Kafka, with nothing written.

Nothing is ever in progress, so ListPartitionReassignments answers an empty list.
"""

from __future__ import annotations

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.replication import check_manual_assignment, refuse_replication
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["alter_partition_reassignments", "list_partition_reassignments"]


def alter_partition_reassignments(
    ctx: ControllerContext, request: m.AlterPartitionReassignmentsRequest, api_version: int = 1
) -> ControllerResult[m.AlterPartitionReassignmentsResponse]:
    """Answer each partition of ``request`` (see the module docstring); writes no record."""
    R = m.AlterPartitionReassignmentsResponse
    allow_rf_change = request.allow_replication_factor_change or api_version < 1
    response = R(allow_replication_factor_change=allow_rf_change, error_message=None)
    for t in request.topics:
        rtopic = R.ReassignableTopicResponse(name=t.name)
        response.responses.append(rtopic)
        for p in t.partitions:
            out = R.ReassignablePartitionResponse(
                partition_index=p.partition_index, error_message=None
            )
            rtopic.partitions.append(out)
            try:
                _check_reassignment(ctx, t.name, p.partition_index, p.replicas, allow_rf_change)
            except KafkaError as e:
                out.error_code, out.error_message = int(e.code), e.message
    return ControllerResult.of([], response)


def _check_reassignment(
    ctx: ControllerContext,
    name: str,
    index: int,
    target: list[int] | None,
    allow_rf_change: bool,
) -> None:
    topic = ctx.image.topics.by_name.get(name)
    reg = topic.partitions.get(index) if topic is not None else None
    if reg is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if target is None:
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    check_manual_assignment(ctx, target, None)
    current = list(reg.replicas)
    if not allow_rf_change and len(target) != len(current):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {len(current)} to {len(target)}",
        )
    if target != current:
        during = len(set(target) | set(current))
        refuse_replication(
            ctx,
            during,
            f"Reassigning {name}-{index} from replicas {current} to {target} takes {during} "
            "replicas while the new ones copy the log",
        )
        # With kcore.replication.enable: followers replicate, but nothing moves replicas yet
        # (no catch-up before the switch, no record written): refused rather than answered
        # as done.
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Reassigning {name}-{index} from replicas {current} to {target} is not available "
            "yet: kcore does not move replicas (issue #17)",
        )


def list_partition_reassignments(
    ctx: ControllerContext, request: m.ListPartitionReassignmentsRequest
) -> ControllerResult[m.ListPartitionReassignmentsResponse]:
    """No reassignment is ever in progress: an empty answer, whatever was asked."""
    return ControllerResult.of([], m.ListPartitionReassignmentsResponse(error_message=None))
