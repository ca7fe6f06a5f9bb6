"""Metadata and DescribeCluster: the cluster as this broker's metadata image sees it.

Brokers are listed with their endpoint on the listener the request came in on (a client only
ever sees addresses it can reach the same way). A requested topic that does not exist is
created when ``auto.create.topics.enable`` is on and the request allows it (v4+), answered
with LEADER_NOT_AVAILABLE until its partitions have leaders — the clients retry — as Kafka does.
"""

from __future__ import annotations

import uuid

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.registry import HandlerRegistry

Resp = m.MetadataResponse
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
NO_OPERATIONS = -2147483648


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


def register(registry: HandlerRegistry) -> None:
    @registry.register(3)
    async def metadata(ctx, body: m.MetadataRequest) -> m.MetadataResponse:
        broker = ctx.server
        image = broker.metadata_image
        response = Resp(
            cluster_id=broker.cluster_id,
            controller_id=broker.controller_id_for_clients(),
        )
        for node_id, host, port, rack in brokers_on_listener(image, ctx.listener_name):
            response.brokers.append(
                Resp.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)
            )
        topics = image.topics
        if body.topics is None or (ctx.version == 0 and not body.topics):
            for name in sorted(topics.by_name):
                response.topics.append(_topic_entry(topics.by_name[name], ctx.version))
            return response
        to_create = []
        for requested in body.topics:
            if requested.name is None and requested.topic_id != uuid.UUID(int=0):
                topic = topics.by_id.get(requested.topic_id)
                if topic is None:
                    response.topics.append(
                        Resp.MetadataResponseTopic(
                            error_code=int(ErrorCode.UNKNOWN_TOPIC_ID),
                            name=None,
                            topic_id=requested.topic_id,
                        )
                    )
                    continue
            else:
                topic = topics.by_name.get(requested.name)
            if topic is not None:
                response.topics.append(_topic_entry(topic, ctx.version))
                continue
            allowed = body.allow_auto_topic_creation and broker.auto_create_topics
            entry = Resp.MetadataResponseTopic(
                name=requested.name,
                error_code=int(
                    ErrorCode.LEADER_NOT_AVAILABLE
                    if allowed
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                ),
            )
            response.topics.append(entry)
            if allowed:
                to_create.append((requested.name, entry))
        for name, entry in to_create:
            try:
                await broker.auto_create_topic(name)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    entry.error_code = int(e.code)
        return response

    @registry.register(60)
    async def describe_cluster(ctx, body: m.DescribeClusterRequest):
        broker = ctx.server
        image = broker.metadata_image
        Desc = m.DescribeClusterResponse
        response = Desc(
            cluster_id=broker.cluster_id or "",
            controller_id=broker.controller_id_for_clients(),
            endpoint_type=body.endpoint_type if ctx.version >= 1 else 1,
        )
        for node_id, host, port, rack in brokers_on_listener(image, ctx.listener_name):
            response.brokers.append(
                Desc.DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=rack)
            )
        return response
