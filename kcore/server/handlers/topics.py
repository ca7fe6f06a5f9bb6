"""CreateTopics, DeleteTopics, CreatePartitions: forwarded to the controller.

The controller validates and answers per topic; the handler returns once the change is
committed and this broker's metadata image has it, so a client that lists topics right after
creating one sees it (read-your-writes, as Kafka's admin clients expect).

Authorization (with an authorizer, as Kafka's ``ControllerApis``), before anything reaches the
controller; refused topics are left out of the forwarded request and answered
TOPIC_AUTHORIZATION_FAILED:

* CreateTopics: CREATE on the cluster, or else on each topic. The configs of a created topic
  the principal may not DESCRIBE_CONFIGS are withheld (``topic_config_error_code``, v5+).
* DeleteTopics: DELETE on the cluster, or else DESCRIBE and DELETE on each topic. A topic the
  principal may not describe is refused whether or not it exists; one named by id keeps its
  name out of the answer unless it may be described.
* CreatePartitions: ALTER on each topic.

The same functions narrow requests on the controller listener
(:mod:`kcore.server.handlers.controller_apis`).
"""

from __future__ import annotations

import uuid

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server import authz
from kcore.server.registry import HandlerRegistry

DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
ZERO_UUID = uuid.UUID(int=0)


def _filter_topics(ctx, operation: AclOperation, names) -> set[str]:
    return authz.filter_allowed(ctx, operation, ResourceType.TOPIC, names)


def authorize_create_topics(ctx, body: m.CreateTopicsRequest):
    """(the request narrowed to creatable topics, results for the refused ones)."""
    names = [t.name for t in body.topics]
    if authz.allowed_on_cluster(ctx, AclOperation.CREATE):
        creatable = set(names)
    else:
        creatable = _filter_topics(ctx, AclOperation.CREATE, names)
    R = m.CreateTopicsResponse
    refused = [
        R.CreatableTopicResult(
            name=name, error_code=int(DENIED), error_message="Authorization failed."
        )
        for name in dict.fromkeys(names)
        if name not in creatable
    ]
    if not refused:
        return body, []
    return authz.replace(body, topics=[t for t in body.topics if t.name in creatable]), refused


def withhold_configs(ctx, version: int, response: m.CreateTopicsResponse) -> None:
    """v5+: no configs for created topics the principal may not DESCRIBE_CONFIGS."""
    if version < 5 or not authz.enabled(ctx):
        return
    names = [r.name for r in response.topics if r.error_code == 0]
    describable = _filter_topics(ctx, AclOperation.DESCRIBE_CONFIGS, names)
    for result in response.topics:
        if result.error_code == 0 and result.name not in describable:
            result.configs = []
            result.topic_config_error_code = int(DENIED)


async def create_topics_authorized(ctx, body, forward):
    """Narrow, ``await forward(narrowed request)``, merge the refusals into its response."""
    narrowed, refused = authorize_create_topics(ctx, body)
    if refused and not narrowed.topics:
        return m.CreateTopicsResponse(topics=refused)
    response = await forward(narrowed)
    response.topics.extend(refused)
    withhold_configs(ctx, ctx.version, response)
    return response


def authorize_delete_topics(ctx, body: m.DeleteTopicsRequest, image):
    """(the request narrowed to deletable topics, results for the refused ones). Topics that do
    not exist but may be described are left for the controller to answer."""
    R = m.DeleteTopicsResponse
    by_name = [t.name for t in body.topics or () if t.name is not None]
    by_name += list(body.topic_names or ())
    by_id: dict[uuid.UUID, str] = {}
    for t in body.topics or ():
        if t.name is None and t.topic_id != ZERO_UUID:
            topic = image.topics.by_id.get(t.topic_id)
            if topic is not None:
                by_id[t.topic_id] = topic.name
    names = by_name + list(by_id.values())
    if authz.allowed_on_cluster(ctx, AclOperation.DELETE):
        return body, []
    describable = _filter_topics(ctx, AclOperation.DESCRIBE, names)
    deletable = _filter_topics(ctx, AclOperation.DELETE, names)
    refused = []
    for name in dict.fromkeys(by_name):
        exists = name in image.topics.by_name
        if name not in describable or (exists and name not in deletable):
            refused.append(R.DeletableTopicResult(name=name, error_code=int(DENIED)))
    for topic_id, name in by_id.items():
        if name not in deletable:
            shown = name if name in describable else None
            refused.append(
                R.DeletableTopicResult(name=shown, topic_id=topic_id, error_code=int(DENIED))
            )
    if not refused:
        return body, []
    refused_names = {r.name for r in refused if r.topic_id == ZERO_UUID}
    refused_ids = {r.topic_id for r in refused if r.topic_id != ZERO_UUID}

    def keep(t) -> bool:
        if t.name is not None:
            return t.name not in refused_names
        return t.topic_id not in refused_ids

    narrowed = authz.replace(
        body,
        topics=[t for t in body.topics or () if keep(t)],
        topic_names=[n for n in body.topic_names or () if n not in refused_names],
    )
    return narrowed, refused


async def delete_topics_authorized(ctx, body, image, forward):
    narrowed, refused = authorize_delete_topics(ctx, body, image)
    if refused and not narrowed.topics and not narrowed.topic_names:
        return m.DeleteTopicsResponse(responses=refused)
    response = await forward(narrowed)
    response.responses.extend(refused)
    return response


def authorize_create_partitions(ctx, body: m.CreatePartitionsRequest):
    names = [t.name for t in body.topics]
    alterable = _filter_topics(ctx, AclOperation.ALTER, names)
    R = m.CreatePartitionsResponse
    refused = [
        R.CreatePartitionsTopicResult(name=name, error_code=int(DENIED))
        for name in dict.fromkeys(names)
        if name not in alterable
    ]
    if not refused:
        return body, []
    return authz.replace(body, topics=[t for t in body.topics if t.name in alterable]), refused


async def create_partitions_authorized(ctx, body, forward):
    narrowed, refused = authorize_create_partitions(ctx, body)
    if refused and not narrowed.topics:
        return m.CreatePartitionsResponse(results=refused)
    response = await forward(narrowed)
    response.results.extend(refused)
    return response


def register(registry: HandlerRegistry) -> None:
    @registry.register(19, 0, 7)
    async def create_topics(ctx, body: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
        if ctx.version < 4:
            # -1 ("use the broker default") only exists from v4 on (KIP-464).
            bad = [
                t.name
                for t in body.topics
                if not t.assignments and (t.num_partitions < 1 or t.replication_factor < 1)
            ]
            if bad:
                Resp = m.CreateTopicsResponse
                return Resp(
                    topics=[
                        Resp.CreatableTopicResult(
                            name=t.name,
                            error_code=int(ErrorCode.INVALID_REQUEST)
                            if t.name in bad
                            else int(ErrorCode.NONE),
                            error_message="numPartitions and replicationFactor must be set "
                            "before CreateTopics v4"
                            if t.name in bad
                            else None,
                        )
                        for t in body.topics
                    ]
                )
        server = ctx.server

        async def forward(request):
            return await server.controller_call(lambda c, now: c.create_topics(request))

        return await create_topics_authorized(ctx, body, forward)

    @registry.register(20, 0, 6)
    async def delete_topics(ctx, body: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
        version = ctx.version
        server = ctx.server

        async def forward(request):
            return await server.controller_call(lambda c, now: c.delete_topics(request, version))

        return await delete_topics_authorized(ctx, body, server.metadata_image, forward)

    @registry.register(37)
    async def create_partitions(ctx, body: m.CreatePartitionsRequest):
        server = ctx.server

        async def forward(request):
            return await server.controller_call(lambda c, now: c.create_partitions(request))

        return await create_partitions_authorized(ctx, body, forward)
