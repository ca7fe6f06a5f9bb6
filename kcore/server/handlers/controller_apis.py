"""The controller APIs on CONTROLLER listeners: what brokers forward to the active controller.

Each API of :data:`kcore.server.controller_channel.CONTROLLER_APIS` (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs, BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds, ...) is served on the controller listener type by one handler: it rebuilds
the controller operation from the request (:func:`~kcore.server.controller_channel.operation_for`)
and submits it to this node's :class:`~kcore.server.controller_service.ControllerService`; the
response is sent once the records are committed. A node that is not the active controller answers
NOT_CONTROLLER — in the top-level error field, or in every result for the APIs that have none —
and the sender retries with the new leader.

Authorization (with an authorizer, as Kafka's ``ControllerApis``): the brokers' own APIs
(BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds, and cluster
mirroring's BumpLeaderEpochs) need CLUSTER_ACTION,
UnregisterBroker and UpdateFeatures ALTER on the cluster, CreateAcls, DeleteAcls and
AlterUserScramCredentials ALTER on the cluster, ElectLeaders and AlterPartitionReassignments
ALTER and ListPartitionReassignments DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED). kcore forwards admin requests without Kafka's envelope:
the broker that forwards one has already authorized its client, so a caller with CLUSTER_ACTION
(a broker) is trusted with CreateTopics, DeleteTopics, CreatePartitions and the config changes;
any other caller (an admin client talking to the controller directly) is authorized per topic
or config resource as a broker would (:mod:`kcore.server.handlers.topics`,
:mod:`kcore.server.handlers.configs`).

The cluster-mirror changes (CreateClusterMirror, Start/Stop/Pause/ResumeMirrorTopics,
DeleteClusterMirror) need their CLUSTER_MIRROR operation (:data:`MIRROR_OPERATION`) from such a
caller; a broker that forwards one has checked it, and the partition states, already.

UpdateFeatures, ElectLeaders and the partition-reassignment APIs are also served on BROKER
listeners, as Kafka brokers do (``kafka-features.sh`` / ``kafka-leader-election.sh`` /
``kafka-reassign-partitions.sh --bootstrap-server`` and admin clients send them to any broker): the operation on the cluster is checked there, and the request
is forwarded to the active controller. So is DescribeQuorum (``kafka-metadata-quorum.sh
--bootstrap-server``), which the quorum leader answers.
"""

from __future__ import annotations

from typing import Any

from kcore.metadata.acls import AclOperation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.controller_channel import CONTROLLER_APIS, ControllerApi, operation_for
from kcore.server.handlers import cluster_mirrors, configs, topics
from kcore.server.registry import BROKER, CONTROLLER, HandlerRegistry

# The operation on the cluster each API needs; the admin APIs are authorized per resource.
CLUSTER_OPERATION = {
    30: AclOperation.ALTER,  # CreateAcls
    31: AclOperation.ALTER,  # DeleteAcls
    43: AclOperation.ALTER,  # ElectLeaders
    45: AclOperation.ALTER,  # AlterPartitionReassignments
    46: AclOperation.DESCRIBE,  # ListPartitionReassignments
    51: AclOperation.ALTER,  # AlterUserScramCredentials
    56: AclOperation.CLUSTER_ACTION,  # AlterPartition
    57: AclOperation.ALTER,  # UpdateFeatures
    62: AclOperation.CLUSTER_ACTION,  # BrokerRegistration
    63: AclOperation.CLUSTER_ACTION,  # BrokerHeartbeat
    64: AclOperation.ALTER,  # UnregisterBroker
    67: AclOperation.CLUSTER_ACTION,  # AllocateProducerIds
    102: AclOperation.CLUSTER_ACTION,  # BumpLeaderEpochs (inter-broker, spec §7.12)
}

# Cluster mirroring (spec §12.1): the operation on CLUSTER_MIRROR:<mirror name> each API needs.
MIRROR_OPERATION = {
    94: AclOperation.CREATE,  # CreateClusterMirror
    95: AclOperation.ALTER,  # StartMirrorTopics
    96: AclOperation.ALTER,  # StopMirrorTopics
    97: AclOperation.ALTER,  # PauseMirrorTopics
    98: AclOperation.ALTER,  # ResumeMirrorTopics
    99: AclOperation.DELETE,  # DeleteClusterMirror
}


def _each_failed(Result, items, code: int, message: str | None, echo=lambda item: {}) -> list:
    """One ``Result`` per item, failed with ``code``; ``echo(item)`` names the item in it."""
    return [Result(error_code=code, error_message=message, **echo(item)) for item in items]


def _named(item) -> dict:
    return {"name": item.name}


def error_response(api_key: int, request: Any, code: int, message: str | None) -> Any:
    """A response failing every item of ``request`` with ``code``, for the APIs without a
    top-level error field; None for the others (the network layer fills their error field)."""
    code = int(code)
    if api_key == 19:
        R = m.CreateTopicsResponse
        return R(topics=_each_failed(R.CreatableTopicResult, request.topics, code, message, _named))
    if api_key == 20:
        Result = m.DeleteTopicsResponse.DeletableTopicResult
        results = _each_failed(
            Result,
            request.topics or (),
            code,
            message,
            lambda t: {"name": t.name, "topic_id": t.topic_id},
        )
        results += _each_failed(
            Result, request.topic_names or (), code, message, lambda name: {"name": name}
        )
        return m.DeleteTopicsResponse(responses=results)
    if api_key == 37:
        R = m.CreatePartitionsResponse
        return R(
            results=_each_failed(
                R.CreatePartitionsTopicResult, request.topics, code, message, _named
            )
        )
    if api_key == 30:
        R = m.CreateAclsResponse
        return R(results=_each_failed(R.AclCreationResult, request.creations, code, message))
    if api_key == 31:
        R = m.DeleteAclsResponse
        return R(
            filter_results=_each_failed(R.DeleteAclsFilterResult, request.filters, code, message)
        )
    if api_key == 51:
        R = m.AlterUserScramCredentialsResponse
        users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
        return R(
            results=[
                R.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message)
                for u in users
            ]
        )
    if api_key == 43:
        R = m.ElectLeadersResponse
        return R(
            error_code=code,
            replica_election_results=[
                R.ReplicaElectionResult(
                    topic=t.topic,
                    partition_result=[
                        R.PartitionResult(partition_id=p, error_code=code, error_message=message)
                        for p in t.partitions
                    ],
                )
                for t in request.topic_partitions or ()
            ],
        )
    if api_key in (33, 44):
        R = m.AlterConfigsResponse if api_key == 33 else m.IncrementalAlterConfigsResponse
        return R(
            responses=_each_failed(
                R.AlterConfigsResourceResponse,
                request.resources,
                code,
                message,
                lambda r: {"resource_type": r.resource_type, "resource_name": r.resource_name},
            )
        )
    return None


def _require_on_cluster(ctx, operation: AclOperation) -> None:
    if not authz.allowed_on_cluster(ctx, operation):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        raise KafkaError(code, code.message)


async def _answering_errors(api_key: int, body, call):
    """``await call()``; a KafkaError is answered in every result for the APIs without a
    top-level error field, and re-raised for the others (the network layer fills it)."""
    try:
        return await call()
    except KafkaError as e:
        response = error_response(api_key, body, e.code, e.message)
        if response is None:
            raise
        return response


async def _authorized(ctx, api: ControllerApi, body, submit):
    """``await submit(request)`` for what the caller may do; refusals merged into the answer."""
    operation = CLUSTER_OPERATION.get(api.api_key)
    if operation is not None:
        _require_on_cluster(ctx, operation)
        return await submit(body)
    if not authz.enabled(ctx) or authz.allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return await submit(body)  # forwarded by a broker, which authorized its client
    key = api.api_key
    if key == 19:
        return await topics.create_topics_authorized(ctx, body, submit)
    if key == 20:
        image = ctx.server.metadata_image
        return await topics.delete_topics_authorized(ctx, body, image, submit)
    if key == 37:
        return await topics.create_partitions_authorized(ctx, body, submit)
    if key in (33, 44):
        R = m.AlterConfigsResponse if key == 33 else m.IncrementalAlterConfigsResponse
        return await configs.alter_configs_authorized(ctx, body, R, submit)
    if key in MIRROR_OPERATION:
        cluster_mirrors.require(ctx, MIRROR_OPERATION[key], body.mirror_name)
        return await submit(body)
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # an API this table does not know yet
    raise KafkaError(code, code.message)


def _handler(api: ControllerApi):
    async def handle(ctx, body):
        service = ctx.server.controller_service
        version = ctx.version

        async def submit(request):
            return await service.submit(operation_for(api, request, version))

        async def call():
            if service is None:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node runs no controller")
            return await _authorized(ctx, api, body, submit)

        return await _answering_errors(api.api_key, body, call)

    handle.__name__ = f"controller_{api.method}"
    return handle


def register(registry: HandlerRegistry) -> None:
    """Serve the controller APIs on CONTROLLER listeners (a node with the controller role)."""
    for api in CONTROLLER_APIS.values():
        registry.register(api.api_key, listeners=(CONTROLLER,))(_handler(api))


def register_forwarded(registry: HandlerRegistry) -> None:
    """Serve :data:`BROKER_FORWARDED` on BROKER listeners (a node with the broker role), and
    DescribeQuorum (:func:`describe_quorum`)."""
    for method in BROKER_FORWARDED:
        api = CONTROLLER_APIS[method]
        registry.register(api.api_key, listeners=(BROKER,))(_forwarding(api))
    registry.register(DESCRIBE_QUORUM, 0, 2, listeners=(BROKER,))(describe_quorum)


DESCRIBE_QUORUM = 55


async def describe_quorum(ctx, body: m.DescribeQuorumRequest) -> m.DescribeQuorumResponse:
    """DescribeQuorum on a broker listener, as Kafka's brokers serve it for
    ``kafka-metadata-quorum.sh --bootstrap-server``: with DESCRIBE on the cluster, answered by
    the quorum leader — this node's Raft when it leads, else the leader's controller listener,
    the request passed on as it is (no retries: the leader's answer, or REQUEST_TIMED_OUT)."""
    _require_on_cluster(ctx, AclOperation.DESCRIBE)
    server = ctx.server
    if server.quorum.leader_and_epoch.leader_id == server.node_id:
        return await server.quorum.handle(DESCRIBE_QUORUM, ctx.version, body)
    return await server.controller_channel.send_to_leader(body, ctx.version)


# The controller APIs a broker listener serves as well (Kafka's brokers forward them), each
# authorized on the cluster (CLUSTER_OPERATION) before it is forwarded.
BROKER_FORWARDED = (
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "update_features",
)


def _forwarding(api: ControllerApi):
    async def forward(ctx, body):
        version = ctx.version

        async def call():
            _require_on_cluster(ctx, CLUSTER_OPERATION[api.api_key])
            return await ctx.server.controller_call(operation_for(api, body, version))

        return await _answering_errors(api.api_key, body, call)

    forward.__name__ = f"forward_{api.method}"
    return forward
