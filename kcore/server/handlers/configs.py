"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs are described from the metadata image's overrides resolved against this broker's
``log.*`` settings (``kcore.log.config.describe``: sources and synonyms as Kafka reports them);
broker configs from this node's configuration overlaid with the dynamic ones in the metadata
image (this broker's, then the cluster-wide default), each with its source. Changes go to the controller, which validates
every key against the same tables.

Authorization (with an authorizer, as Kafka's ``ConfigHelper`` and ``ControllerApis``): reading
a resource's configs needs DESCRIBE_CONFIGS, changing them ALTER_CONFIGS — on the topic for a
topic, on the group for a group, on the cluster for a broker, a broker logger or client
metrics. A refused resource answers TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED in its own
result, and is left out of what goes to the controller.
"""

from __future__ import annotations

from kcore.log.config import ConfigSource, ConfigType, describe
from kcore.metadata import mirror_configs
from kcore.metadata.acls import AclOperation, ResourceType
from kcore.metadata.config_control import dynamic_broker_config_type, is_dynamic_broker_config
from kcore.metadata.mirrors import mirrors_image
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.security.tls_config import is_tls_dynamic_key
from kcore.server import authz
from kcore.server.config import BROKER_CONFIGS
from kcore.server.registry import HandlerRegistry

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
CLUSTER_MIRROR = 64
Resp = m.DescribeConfigsResponse
PASSWORD = ConfigType.PASSWORD


def config_resource_allowed(ctx, operation: AclOperation, rtype: int, name: str) -> ErrorCode:
    """NONE, or the authorization error for ``operation`` on a config resource (types this
    broker does not know are left for the handler to refuse)."""
    if rtype == TOPIC:
        resource_type, resource_name = ResourceType.TOPIC, name
    elif rtype == GROUP:
        resource_type, resource_name = ResourceType.GROUP, name
    elif rtype == CLUSTER_MIRROR:
        resource_type, resource_name = ResourceType.CLUSTER_MIRROR, name
    elif rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        resource_type, resource_name = ResourceType.CLUSTER, authz.CLUSTER_NAME
    else:
        return ErrorCode.NONE
    if authz.allowed(ctx, operation, resource_type, resource_name):
        return ErrorCode.NONE
    return authz.denied_error(resource_type)


async def alter_configs_authorized(ctx, body, response_cls, forward):
    """AlterConfigs / IncrementalAlterConfigs: refuse the resources the principal may not
    ALTER_CONFIGS, ``await forward(narrowed request)`` for the others (if any)."""
    refused = []
    kept = []
    for r in body.resources:
        code = config_resource_allowed(
            ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name
        )
        message = code.message
        if not code and (message := _tls_update_error(ctx, r, response_cls)) is not None:
            code = ErrorCode.INVALID_CONFIG
        if code:
            refused.append(
                response_cls.AlterConfigsResourceResponse(
                    error_code=int(code),
                    error_message=message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
            )
        else:
            kept.append(r)
    if not refused:
        return await forward(body)
    if not kept:
        return response_cls(responses=refused)
    response = await forward(authz.replace(body, resources=kept))
    response.responses.extend(refused)
    return response


def _tls_update_error(ctx, resource, response_cls) -> str | None:
    """Why new listener.name.<l>.ssl.* values for this broker would not load, or None: checked
    here, where the stores are, before the controller records them (other brokers' are checked
    by them when they apply it, and kept out if they fail)."""
    broker = ctx.server
    if resource.resource_type != BROKER or resource.resource_name != str(broker.node_id):
        return None
    current = broker.metadata_image.configs.broker(broker.node_id)
    incremental = response_cls is m.IncrementalAlterConfigsResponse
    error = broker.tls_listeners.check_update(current, resource.configs, incremental)
    if error is None and any(is_tls_dynamic_key(c.name) for c in resource.configs):
        # The same path for a replaced file writes no new record: re-read it now, as Kafka.
        broker.tls_listeners.reload_files()
    return error


def _topic_result(ctx, resource, body) -> m.DescribeConfigsResponse.DescribeConfigsResult:
    broker = ctx.server
    result = Resp.DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    if resource.resource_name not in broker.metadata_image.topics.by_name:
        result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        result.error_message = f"topic {resource.resource_name} does not exist"
        return result
    overrides = dict(broker.metadata_image.configs.topic(resource.resource_name))
    for entry in describe(overrides, broker.config.raw, keys=resource.configuration_keys):
        result.configs.append(
            Resp.DescribeConfigsResourceResult(
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=int(entry.source),
                is_default=entry.is_default,
                is_sensitive=entry.is_sensitive,
                synonyms=[
                    Resp.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                    for s in entry.synonyms
                ]
                if body.include_synonyms
                else [],
                config_type=int(entry.config_type),
                documentation=entry.documentation if body.include_documentation else None,
            )
        )
    return result


def _broker_result(ctx, resource, body) -> m.DescribeConfigsResponse.DescribeConfigsResult:
    broker = ctx.server
    result = Resp.DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    if resource.resource_name not in ("", str(broker.node_id)):
        result.error_code = int(ErrorCode.INVALID_REQUEST)
        result.error_message = f"broker {resource.resource_name} is not this broker"
        return result
    wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
    config = broker.config
    image_configs = broker.metadata_image.configs
    # Kafka's precedence: this broker's dynamic value, the cluster-wide dynamic default,
    # server.properties, the default (DynamicBrokerConfig's class comment).
    # The default resource (name "") is what every broker inherits, as Kafka describes it:
    # without any one broker's own values.
    dynamic_layers = (
        (image_configs.broker(broker.node_id), ConfigSource.DYNAMIC_BROKER_CONFIG),
        (image_configs.cluster_defaults(), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )[1 if resource.resource_name == "" else 0 :]
    names = list(BROKER_CONFIGS)
    for layer, _ in dynamic_layers:
        names += sorted(k for k in layer if k not in BROKER_CONFIGS and k not in names)
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        key = BROKER_CONFIGS.get(name)
        explicit = name in config.explicit
        static_source = (
            ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        )
        static_value = config.effective.get(name) if key is not None else None
        layers = [(layer[name], src) for layer, src in dynamic_layers if name in layer]
        if key is not None:
            layers.append((static_value, static_source))
        value, source = layers[0]
        config_type = key.type if key is not None else dynamic_broker_config_type(name)
        result.configs.append(
            Resp.DescribeConfigsResourceResult(
                name=name,
                value=None if config_type == PASSWORD else value,
                read_only=not is_dynamic_broker_config(name),
                config_source=int(source),
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                is_sensitive=config_type == PASSWORD,
                synonyms=[
                    Resp.DescribeConfigsSynonym(
                        name=name, value=None if config_type == PASSWORD else v, source=int(src)
                    )
                    for v, src in layers
                ]
                if body.include_synonyms
                else [],
                config_type=int(config_type),
                documentation=(key.doc if key is not None else None)
                if body.include_documentation
                else None,
            )
        )
    return result


def _mirror_result(ctx, resource, body) -> m.DescribeConfigsResponse.DescribeConfigsResult:
    """A cluster mirror's configs (spec M-106): the keys set on it, then the known mirror keys
    with a default; secrets (``mirror_configs.is_sensitive``) with a null value."""
    result = Resp.DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    mirror = mirrors_image(ctx.server.metadata_image).mirror(resource.resource_name)
    if mirror is None:
        result.error_code = int(ErrorCode.MIRROR_NOT_FOUND)
        result.error_message = f"No cluster mirror named '{resource.resource_name}' exists."
        return result
    entries = [(k, v, False) for k, v in mirror.configs.items()]
    entries += [
        (k, v, True)
        for k, v in mirror_configs.MIRROR_KEYS.items()
        if v is not None and k not in mirror.configs
    ]
    wanted = resource.configuration_keys
    for name, value, is_default in sorted(entries):
        if wanted is not None and name not in wanted:
            continue
        sensitive = mirror_configs.is_sensitive(name)
        # Kafka's ConfigSource has no value for a mirror's own configs: UNKNOWN (0), or
        # DEFAULT_CONFIG for a default.
        source = ConfigSource.DEFAULT_CONFIG if is_default else ConfigSource.UNKNOWN
        shown = None if sensitive else value
        result.configs.append(
            Resp.DescribeConfigsResourceResult(
                name=name,
                value=shown,
                read_only=name == mirror_configs.SOURCE_CLUSTER_ID,
                config_source=int(source),
                is_default=is_default,
                is_sensitive=sensitive,
                synonyms=[Resp.DescribeConfigsSynonym(name=name, value=shown, source=int(source))]
                if body.include_synonyms
                else [],
                config_type=int(
                    ConfigType.PASSWORD
                    if sensitive
                    else ConfigType.LIST
                    if name in mirror_configs.LIST_KEYS
                    else ConfigType.STRING
                ),
            )
        )
    return result


def register(registry: HandlerRegistry) -> None:
    @registry.register(32)
    async def describe_configs(ctx, body: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
        response = Resp()
        for resource in body.resources:
            denied = config_resource_allowed(
                ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name
            )
            if denied:
                response.results.append(
                    Resp.DescribeConfigsResult(
                        error_code=int(denied),
                        error_message=denied.message,
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
            elif resource.resource_type == TOPIC:
                response.results.append(_topic_result(ctx, resource, body))
            elif resource.resource_type == BROKER:
                response.results.append(_broker_result(ctx, resource, body))
            elif resource.resource_type == CLUSTER_MIRROR:
                response.results.append(_mirror_result(ctx, resource, body))
            else:
                response.results.append(
                    Resp.DescribeConfigsResult(
                        error_code=int(ErrorCode.INVALID_REQUEST),
                        error_message=f"unsupported resource type {resource.resource_type}",
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
        return response

    @registry.register(33)
    async def alter_configs(ctx, body: m.AlterConfigsRequest) -> m.AlterConfigsResponse:
        server = ctx.server

        async def forward(request):
            return await server.controller_call(lambda c, now: c.alter_configs(request))

        return await alter_configs_authorized(ctx, body, m.AlterConfigsResponse, forward)

    @registry.register(44)
    async def incremental_alter_configs(ctx, body: m.IncrementalAlterConfigsRequest):
        server = ctx.server

        async def forward(request):
            return await server.controller_call(lambda c, now: c.incremental_alter_configs(request))

        return await alter_configs_authorized(ctx, body, m.IncrementalAlterConfigsResponse, forward)
