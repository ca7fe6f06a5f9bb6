"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs are described from the metadata image's overrides resolved against this broker's
``log.*`` settings (``kcore.log.config.describe``: sources and synonyms as Kafka reports them);
broker configs from this node's configuration. Changes go to the controller, which validates
every key against the same tables.
"""

from __future__ import annotations

from kcore.log.config import ConfigSource, describe
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.config import BROKER_CONFIGS
from kcore.server.registry import HandlerRegistry

TOPIC = 2
BROKER = 4
Resp = m.DescribeConfigsResponse


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
    for name, key in BROKER_CONFIGS.items():
        if wanted is not None and name not in wanted:
            continue
        explicit = name in config.explicit
        source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        result.configs.append(
            Resp.DescribeConfigsResourceResult(
                name=name,
                value=config.effective.get(name),
                read_only=True,
                config_source=int(source),
                is_default=not explicit,
                synonyms=[
                    Resp.DescribeConfigsSynonym(
                        name=name, value=config.effective.get(name), source=int(source)
                    )
                ]
                if body.include_synonyms
                else [],
                config_type=int(key.type),
                documentation=key.doc if body.include_documentation else None,
            )
        )
    return result


def register(registry: HandlerRegistry) -> None:
    @registry.register(32)
    async def describe_configs(ctx, body: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
        response = Resp()
        for resource in body.resources:
            if resource.resource_type == TOPIC:
                response.results.append(_topic_result(ctx, resource, body))
            elif resource.resource_type == BROKER:
                response.results.append(_broker_result(ctx, resource, body))
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
        return await ctx.server.controller_call(lambda c, now: c.alter_configs(body))

    @registry.register(44)
    async def incremental_alter_configs(ctx, body: m.IncrementalAlterConfigsRequest):
        return await ctx.server.controller_call(lambda c, now: c.incremental_alter_configs(body))
