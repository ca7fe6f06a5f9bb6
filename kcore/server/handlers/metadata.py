"""Metadata and DescribeCluster: the cluster as this broker's metadata image sees it.

Brokers are listed with their endpoint on the listener the request came in on (a client only
ever sees addresses it can reach the same way). A requested topic that does not exist is
created when ``auto.create.topics.enable`` is on and the request allows it (v4+), answered
with LEADER_NOT_AVAILABLE until its partitions have leaders — the clients retry — as Kafka does.

Authorization (with an authorizer, as Kafka's ``handleTopicMetadataRequest``): a topic is shown
only with DESCRIBE on it. Listing all topics silently leaves the others out; a topic asked for
by name answers TOPIC_AUTHORIZATION_FAILED whether or not it exists (nothing about it is
disclosed), one asked for by id the same with its id (ids are not secret). Creating a missing
topic needs CREATE on the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise). The
authorized-operations fields are filled when asked for (v8+), as Kafka does.

Encoded answers are cached (:class:`_MetadataCache`): the answer is a function of the metadata
image (topics, brokers, ACLs), the listener, the request version and shape (topics asked for,
flags), and — with kcore's StandardAuthorizer, whose ACLs are the image's — the principal and
client host; it is kept, encoded, until the image changes. Any other authorizer may decide on
state the image does not show, so with one nothing is cached; nor is an answer that
auto-creates a topic.
Clients ask Metadata on every new connection and every refresh; one topic cost ~28 us to
decode, build and encode on the 2-core dev VM, ~9 us from the cache (docs/performance.md).
"""

from __future__ import annotations

import uuid

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.metadata.authorizer import StandardAuthorizer
from kcore.metadata.topic_names import INTERNAL_TOPICS
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.registry import EncodedResponse, HandlerRegistry

Resp = m.MetadataResponse
NO_OPERATIONS = -2147483648
# DescribeCluster's EndpointType (KIP-919).
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2


def brokers_on_listener(image, listener_name: str) -> list[tuple[int, str, int, str | None]]:
    """``(id, host, port, rack)`` of every unfenced broker with an endpoint on the listener."""
    out = []
    for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
        endpoint = b.listener(listener_name)
        if endpoint is not None and not b.fenced:
            out.append((b.id, endpoint.host, endpoint.port, b.rack))
    return out


def _topic_entry(topic, version: int) -> m.MetadataResponse.MetadataResponseTopic:
    entry = Resp.MetadataResponseTopic(
        name=topic.name, topic_id=topic.topic_id, is_internal=topic.name in INTERNAL_TOPICS
    )
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        entry.partitions.append(
            Resp.MetadataResponsePartition(
                error_code=0 if p.leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
                partition_index=index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=[],
            )
        )
    return entry


class _MetadataCache:
    """Encoded Metadata answers for one metadata image, by :func:`_cache_key`. Dropped whole
    when the image changes (images are immutable: identity says whether it changed) or when it
    holds :attr:`MAX_ENTRIES` answers (request shapes are few in practice: a client asks for
    all topics or for the topics it uses)."""

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._image = None
        self._answers: dict[tuple, EncodedResponse] = {}

    def get(self, image, key: tuple) -> EncodedResponse | None:
        if image is not self._image:
            return None
        return self._answers.get(key)

    def put(self, image, key: tuple, answer: EncodedResponse) -> None:
        if image is not self._image or len(self._answers) >= self.MAX_ENTRIES:
            self._image = image
            self._answers = {}
        self._answers[key] = answer


def _cache_key(ctx, body: m.MetadataRequest, broker) -> tuple | None:
    """Everything besides the image that a Metadata answer depends on; None if the answer may
    depend on more (an authorizer other than the image-backed StandardAuthorizer)."""
    authorizer = broker.authorizer
    if authorizer is None:
        who = None
    elif type(authorizer) is StandardAuthorizer:
        # It decides per (principal, host) from the image's ACLs and static settings.
        who = (ctx.principal, ctx.client_host)
    else:
        return None
    topics = None if body.topics is None else tuple((t.name, t.topic_id) for t in body.topics)
    return (
        ctx.listener_name,
        ctx.version,
        topics,
        bool(body.allow_auto_topic_creation and broker.auto_create_topics),
        bool(body.include_cluster_authorized_operations),
        bool(body.include_topic_authorized_operations),
        broker.cluster_id,
        broker.controller_id_for_clients(),
        who,
    )


def _metadata_response(ctx, body, broker, image):
    """The answer from ``image``, and the ``(name, entry)`` of topics to auto-create (their
    entries say LEADER_NOT_AVAILABLE; authorized operations not filled in yet)."""
    response = Resp(
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id_for_clients(),
    )
    for node_id, host, port, rack in brokers_on_listener(image, ctx.listener_name):
        response.brokers.append(
            Resp.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)
        )
    topics = image.topics
    version = ctx.version
    if version >= 8 and version <= 10 and body.include_cluster_authorized_operations:
        response.cluster_authorized_operations = _cluster_operations(ctx)
    if body.topics is None or (version == 0 and not body.topics):
        describable = authz.filter_allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics.by_name
        )
        for name in sorted(describable):
            response.topics.append(_topic_entry(topics.by_name[name], version))
        _topic_operations(ctx, body, response)
        return response, []
    to_create = []
    for requested in body.topics:
        by_id = requested.name is None and requested.topic_id != uuid.UUID(int=0)
        if by_id:
            topic = topics.by_id.get(requested.topic_id)
            if topic is None:
                response.topics.append(_topic_error(ErrorCode.UNKNOWN_TOPIC_ID, None, requested))
                continue
            name = topic.name
        else:
            name = requested.name
            topic = topics.by_name.get(name)
        if name is not None and not authz.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name
        ):
            denied = _topic_error(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED, None if by_id else name, requested
            )
            response.topics.append(denied)
            continue
        if topic is not None:
            response.topics.append(_topic_entry(topic, version))
            continue
        allowed = body.allow_auto_topic_creation and broker.auto_create_topics
        if allowed and not _may_create(ctx, name):
            response.topics.append(
                _topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, requested)
            )
            continue
        entry = Resp.MetadataResponseTopic(
            name=name,
            error_code=int(
                ErrorCode.LEADER_NOT_AVAILABLE if allowed else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            ),
        )
        response.topics.append(entry)
        if allowed:
            to_create.append((name, entry))
    if not to_create:
        _topic_operations(ctx, body, response)
    return response, to_create


def register(registry: HandlerRegistry) -> None:
    cache = _MetadataCache()

    @registry.register(3)
    async def metadata(ctx, body: m.MetadataRequest):
        broker = ctx.server
        image = broker.metadata_image
        key = _cache_key(ctx, body, broker)
        if key is not None:
            answer = cache.get(image, key)
            if answer is not None:
                return answer
        response, to_create = _metadata_response(ctx, body, broker, image)
        if not to_create:
            if key is None:
                return response
            answer = EncodedResponse(3, ctx.version, response)
            cache.put(image, key, answer)
            return answer
        for name, entry in to_create:
            try:
                await broker.auto_create_topic(name)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    entry.error_code = int(e.code)
        _topic_operations(ctx, body, response)
        return response

    @registry.register(60)
    async def describe_cluster(ctx, body: m.DescribeClusterRequest):
        broker = ctx.server
        image = broker.metadata_image
        Desc = m.DescribeClusterResponse
        # As Kafka's AuthHelper.computeDescribeClusterResponse: a broker listener serves the
        # BROKER endpoint type (1) only; CONTROLLER (2) is MISMATCHED_ENDPOINT_TYPE, anything
        # else UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at v0, which cannot carry one).
        if body.endpoint_type != ENDPOINT_TYPE_BROKER:
            if ctx.version == 0:
                code = ErrorCode.INVALID_REQUEST
            elif body.endpoint_type == ENDPOINT_TYPE_CONTROLLER:
                code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
            else:
                code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            return Desc(
                error_code=int(code),
                error_message=f"this is a broker endpoint, not of type {body.endpoint_type}",
            )
        response = Desc(
            cluster_id=broker.cluster_id or "",
            controller_id=broker.controller_id_for_clients(),
            endpoint_type=ENDPOINT_TYPE_BROKER,
        )
        fenced = ctx.version >= 2 and body.include_fenced_brokers
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
            endpoint = b.listener(ctx.listener_name)
            if endpoint is not None and (fenced or not b.fenced):
                response.brokers.append(
                    Desc.DescribeClusterBroker(
                        broker_id=b.id,
                        host=endpoint.host,
                        port=endpoint.port,
                        rack=b.rack,
                        is_fenced=b.fenced,
                    )
                )
        if body.include_cluster_authorized_operations:
            response.cluster_authorized_operations = _cluster_operations(ctx)
        return response


def _may_create(ctx, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic."""
    return authz.allowed_on_cluster(ctx, AclOperation.CREATE) or authz.allowed(
        ctx, AclOperation.CREATE, ResourceType.TOPIC, name
    )


def _topic_error(code: ErrorCode, name: str | None, requested) -> Resp.MetadataResponseTopic:
    return Resp.MetadataResponseTopic(
        error_code=int(code),
        name=name,
        topic_id=requested.topic_id if name is None else uuid.UUID(int=0),
    )


def _cluster_operations(ctx) -> int:
    """The cluster's authorized operations: 0 without DESCRIBE on the cluster, as Kafka."""
    if not authz.allowed_on_cluster(ctx, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, ResourceType.CLUSTER, authz.CLUSTER_NAME)


def _topic_operations(ctx, body, response) -> None:
    """v8+: each listed topic's authorized operations, when the client asks for them."""
    if ctx.version < 8 or not body.include_topic_authorized_operations:
        return
    for entry in response.topics:
        if entry.name is not None and entry.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            entry.topic_authorized_operations = authz.authorized_operations(
                ctx, ResourceType.TOPIC, entry.name
            )
