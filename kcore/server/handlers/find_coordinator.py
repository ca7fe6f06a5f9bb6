"""FindCoordinator: which broker coordinates a group (key type 0), a transactional id (1) or a
cluster mirror (3, KIP-1279: the key is the mirror name).

The coordinator of a key is the leader of its partition of ``__consumer_offsets``,
``__transaction_state`` or ``__mirror_state`` (:mod:`kcore.server.internal_topics`, which
creates the topic on first use). Brokers are named by their endpoint on the listener the request came in on, as Metadata
does. v0-3 ask for one key; v4+ (KIP-699) for many, each answered with its own error.

Authorization (with an authorizer, as Kafka): DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED)
or on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), checked before the internal
topic is looked up or created. A mirror's coordinator needs DESCRIBE on its CLUSTER_MIRROR
resource (spec §12.1 names no permission for the lookup; DESCRIBE is what reading a mirror
takes; refused: CLUSTER_AUTHORIZATION_FAILED). With ``mirror.version`` 0 key type 3 answers
UNSUPPORTED_VERSION, as every mirroring RPC does then (D-30).
"""

from __future__ import annotations

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.internal_topics import CLUSTER_MIRROR, GROUP, TOPICS, TRANSACTION
from kcore.server.registry import HandlerRegistry

Resp = m.FindCoordinatorResponse
_RESOURCES = {
    GROUP: ResourceType.GROUP,
    TRANSACTION: ResourceType.TRANSACTIONAL_ID,
    CLUSTER_MIRROR: ResourceType.CLUSTER_MIRROR,
}


async def _lookup(ctx, key_type: int, key: str) -> tuple[int, str, int]:
    if key_type not in TOPICS:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if key_type == TRANSACTION and not key:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id must not be empty")
    broker = ctx.server
    if key_type == CLUSTER_MIRROR:
        if broker.metadata_image.features.mirror_version < 1:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION, "cluster mirroring is off (mirror.version=0)"
            )
        if not key:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the mirror name must not be empty")
    authz.require(ctx, AclOperation.DESCRIBE, _RESOURCES[key_type], key)
    node_id = await broker.internal_topics.coordinator(key_type, key)
    registration = broker.metadata_image.cluster.brokers.get(node_id)
    endpoint = None if registration is None else registration.listener(ctx.listener_name)
    if endpoint is None or registration.fenced:
        raise KafkaError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"coordinator node {node_id} has no live endpoint on listener {ctx.listener_name}",
        )
    return node_id, endpoint.host, endpoint.port


def register(registry: HandlerRegistry) -> None:
    @registry.register(10)
    async def find_coordinator(ctx, body: m.FindCoordinatorRequest) -> m.FindCoordinatorResponse:
        keys = body.coordinator_keys if ctx.version >= 4 else [body.key]
        answers = []
        for key in keys:
            try:
                node_id, host, port = await _lookup(ctx, body.key_type, key)
                answers.append(Resp.Coordinator(key=key, node_id=node_id, host=host, port=port))
            except KafkaError as e:
                answers.append(
                    Resp.Coordinator(
                        key=key,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=int(e.code),
                        error_message=e.message,
                    )
                )
        if ctx.version >= 4:
            return Resp(coordinators=answers)
        one = answers[0]
        return Resp(
            error_code=one.error_code,
            error_message=one.error_message,
            node_id=one.node_id,
            host=one.host,
            port=one.port,
        )
