"""Leader elections the controller runs on request or on its own (Kafka's ``electLeaders``,
``maybeBalancePartitionLeaders`` and ``maybeElectUncleanLeaders`` of
``ReplicationControlManager``). Pure: each returns records (and a response).

* :func:`elect_leaders` — ElectLeaders v0-2 (``kafka-leader-election.sh``). Per partition, in
  Kafka's order: UNKNOWN_TOPIC_OR_PARTITION; ELECTION_NOT_NEEDED when a PREFERRED election
  finds the preferred replica leading, or an UNCLEAN one finds any leader; otherwise a
  ``PartitionChangeRecord`` from :func:`~kcore.metadata.partition_change.build_partition_change`
  with that election, and when it changes nothing PREFERRED_LEADER_NOT_AVAILABLE (the
  preferred replica is not in the ISR or not active) or ELIGIBLE_LEADERS_NOT_AVAILABLE (no
  active replica at all). An UNCLEAN election is what its name says whatever the topic's
  ``unclean.leader.election.enable``: the operator asked for it. A null partition list means
  every partition, and then the partitions that needed nothing are left out of the answer.
* :func:`elect_unclean_leaders` — the leaderless partitions of topics whose
  ``unclean.leader.election.enable`` is true (the topic's config, else the dynamic cluster
  default, else ``server.properties``) get any active replica as leader. The controller runs
  it when that config changes, so enabling it dynamically brings such partitions back.
* :func:`balance_leaders` — ``auto.leader.rebalance.enable``: for each broker, the partitions
  whose preferred replica (the first) it is; when more than
  ``leader.imbalance.per.broker.percentage`` of them are led by someone else, a PREFERRED
  election for each of those whose preferred replica is active and in the ISR (Kafka's
  ``checkAndTriggerAutoLeaderRebalance`` rule; the controller runs it every
  ``leader.imbalance.check.interval.seconds``).
"""

from __future__ import annotations

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import NO_LEADER, PartitionRegistration, TopicImage
from kcore.metadata.partition_change import Election, build_partition_change
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "PREFERRED",
    "UNCLEAN",
    "balance_leaders",
    "elect_leaders",
    "elect_unclean_leaders",
]

# ElectLeaders' ElectionType (Kafka's org.apache.kafka.common.ElectionType).
PREFERRED = 0
UNCLEAN = 1


def elect_leaders(
    ctx: ControllerContext, request: m.ElectLeadersRequest, api_version: int = 2
) -> ControllerResult[m.ElectLeadersResponse]:
    """ElectLeaders (see the module docstring). v0 has no election type: PREFERRED."""
    R = m.ElectLeadersResponse
    election_type = request.election_type if api_version >= 1 else PREFERRED
    response = R()
    if election_type not in (PREFERRED, UNCLEAN):
        return ControllerResult.of([], _refuse_all(ctx, request, election_type))
    election = Election.PREFERRED if election_type == PREFERRED else Election.UNCLEAN
    records: list[Message] = []
    elected: set[tuple[str, int]] = set()

    def one(topic: str, index: int) -> KafkaError | None:
        if (topic, index) in elected:
            return None  # named twice: elected once
        try:
            rec = _elect(ctx, topic, index, election)
        except KafkaError as e:
            return e
        records.append(rec)
        elected.add((topic, index))
        return None

    if request.topic_partitions is None:
        for name in sorted(ctx.image.topics.by_name):
            result = R.ReplicaElectionResult(topic=name)
            response.replica_election_results.append(result)
            for index in sorted(ctx.image.topics.by_name[name].partitions):
                error = one(name, index)
                if error is None or error.code != ErrorCode.ELECTION_NOT_NEEDED:
                    result.partition_result.append(_result(index, error))
    else:
        for t in request.topic_partitions:
            result = R.ReplicaElectionResult(topic=t.topic)
            response.replica_election_results.append(result)
            for index in t.partitions:
                result.partition_result.append(_result(index, one(t.topic, index)))
    return ControllerResult.of(records, response)


def _refuse_all(ctx, request, election_type: int) -> m.ElectLeadersResponse:
    R = m.ElectLeadersResponse
    message = f"Unknown election type {election_type}: 0 (PREFERRED) or 1 (UNCLEAN)"
    code = int(ErrorCode.INVALID_REQUEST)
    response = R(error_code=code)
    for t in request.topic_partitions or ():
        response.replica_election_results.append(
            R.ReplicaElectionResult(
                topic=t.topic,
                partition_result=[
                    R.PartitionResult(partition_id=p, error_code=code, error_message=message)
                    for p in t.partitions
                ],
            )
        )
    return response


def _result(index: int, error: KafkaError | None):
    PartitionResult = m.ElectLeadersResponse.PartitionResult
    if error is None:
        return PartitionResult(partition_id=index, error_code=0, error_message=None)
    return PartitionResult(
        partition_id=index, error_code=int(error.code), error_message=error.message
    )


def _elect(ctx: ControllerContext, name: str, index: int, election: Election) -> Message:
    topic = ctx.image.topics.by_name.get(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}")
    reg = topic.partitions.get(index)
    if reg is None:
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{index}"
        )
    if election is Election.PREFERRED and reg.replicas and reg.leader == reg.replicas[0]:
        raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
    if election is Election.UNCLEAN and reg.leader != NO_LEADER:
        raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
    rec = _change(ctx, topic, index, reg, election)
    if rec is None:
        if election is Election.PREFERRED:
            raise KafkaError(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"Failed to elect leader for partition {name}-{index}: the preferred replica "
                f"{reg.replicas[0] if reg.replicas else NO_LEADER} is not in the ISR "
                f"{list(reg.isr)} or not alive",
            )
        raise KafkaError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"Failed to elect leader for partition {name}-{index}: none of its replicas "
            f"{list(reg.replicas)} is alive",
        )
    return rec


def _change(
    ctx: ControllerContext,
    topic: TopicImage,
    index: int,
    reg: PartitionRegistration,
    election: Election,
) -> Message | None:
    return build_partition_change(
        topic.topic_id,
        index,
        reg,
        is_acceptable_leader=ctx.image.cluster.is_active,
        election=election,
    )


def elect_unclean_leaders(ctx: ControllerContext) -> list[Message]:
    """An active replica as leader of every leaderless partition whose topic has
    ``unclean.leader.election.enable`` (see the module docstring)."""
    records: list[Message] = []
    for topic in ctx.image.topics.by_id.values():
        leaderless = [i for i, reg in topic.partitions.items() if reg.leader == NO_LEADER]
        if not leaderless or not ctx.unclean_election_enabled(topic.name):
            continue
        for index in sorted(leaderless):
            rec = _change(ctx, topic, index, topic.partitions[index], Election.UNCLEAN)
            if rec is not None:
                records.append(rec)
    return records


def balance_leaders(ctx: ControllerContext, imbalance_percentage: int) -> list[Message]:
    """PREFERRED elections for the brokers whose leader imbalance is above
    ``imbalance_percentage`` (see the module docstring)."""
    by_preferred: dict[int, list[tuple[TopicImage, int, PartitionRegistration]]] = {}
    for topic in ctx.image.topics.by_id.values():
        for index, reg in topic.partitions.items():
            if reg.replicas:
                by_preferred.setdefault(reg.replicas[0], []).append((topic, index, reg))
    records: list[Message] = []
    for broker in sorted(by_preferred):
        partitions = by_preferred[broker]
        elsewhere = [(t, i, reg) for t, i, reg in partitions if reg.leader != broker]
        if len(elsewhere) / len(partitions) <= imbalance_percentage / 100:
            continue
        for topic, index, reg in elsewhere:
            if broker not in reg.isr or not ctx.image.cluster.is_active(broker):
                continue
            rec = _change(ctx, topic, index, reg, Election.PREFERRED)
            if rec is not None:
                records.append(rec)
    return records
