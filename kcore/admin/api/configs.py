"""``GET|PATCH /v1/topics/{topic}/configs``: DescribeConfigs and IncrementalAlterConfigs.

GET lists every config of the topic with its value, where it comes from (Kafka's
``ConfigSource`` names: DYNAMIC_TOPIC_CONFIG for a topic override, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG ...), whether it is sensitive (its value is then null, as Kafka hides it) and
read-only. PATCH is one IncrementalAlterConfigs: ``set`` (SET), ``delete`` (DELETE: back to the
default), ``append`` and ``subtract`` (APPEND/SUBTRACT on list configs), all or none applied;
``validate_only`` checks without changing anything. The answer is the topic's configs
afterwards (unchanged with ``validate_only``), as this node's metadata image has them.
"""

from __future__ import annotations

from quart import Blueprint
from quart_schema import validate_request, validate_response

from kcore.admin.api.common import TOPIC_RESOURCE, Body, Reply, errors
from kcore.admin.context import kafka
from kcore.admin.kafka import raise_for
from kcore.log.config import ConfigSource
from kcore.protocol import messages as m

configs = Blueprint("configs", __name__)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' ConfigOperation


class ConfigEntry(Reply):
    value: str | None  # null: sensitive, or no value
    source: str
    is_sensitive: bool
    read_only: bool


class TopicConfigs(Reply):
    topic: str
    configs: dict[str, ConfigEntry]
    validate_only: bool = False  # PATCH only: nothing was changed, these are the current ones


class ConfigChanges(Body):
    set: dict[str, str] = {}
    delete: list[str] = []
    append: dict[str, str] = {}
    subtract: dict[str, str] = {}
    validate_only: bool = False


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return "UNKNOWN"


async def _describe(topic: str) -> TopicConfigs:
    D = m.DescribeConfigsRequest
    request = D(
        resources=[
            D.DescribeConfigsResource(
                resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None
            )
        ]
    )
    result = (await kafka(request)).results[0]
    raise_for(result.error_code, result.error_message)
    return TopicConfigs(
        topic=topic,
        configs={
            c.name: ConfigEntry(
                value=None if c.is_sensitive else c.value,
                source=_source_name(c.config_source),
                is_sensitive=c.is_sensitive,
                read_only=c.read_only,
            )
            for c in sorted(result.configs, key=lambda c: c.name)
        },
    )


@configs.get("/v1/topics/<topic>/configs")
@validate_response(TopicConfigs)
@errors(401, 403, 404, 503)
async def describe_topic_configs(topic: str):
    """DescribeConfigs: every config of the topic, its source and sensitivity."""
    return await _describe(topic)


@configs.patch("/v1/topics/<topic>/configs")
@validate_request(ConfigChanges)
@validate_response(TopicConfigs)
@errors(400, 401, 403, 404, 503)
async def alter_topic_configs(topic: str, data: ConfigChanges):
    """IncrementalAlterConfigs: set, delete, append, subtract -- all or nothing."""
    A = m.IncrementalAlterConfigsRequest
    changes = [
        A.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in data.set.items()
    ]
    changes += [A.AlterableConfig(name=k, config_operation=DELETE, value=None) for k in data.delete]
    changes += [
        A.AlterableConfig(name=k, config_operation=APPEND, value=v) for k, v in data.append.items()
    ]
    changes += [
        A.AlterableConfig(name=k, config_operation=SUBTRACT, value=v)
        for k, v in data.subtract.items()
    ]
    request = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=TOPIC_RESOURCE, resource_name=topic, configs=changes
            )
        ],
        validate_only=data.validate_only,
    )
    result = (await kafka(request)).responses[0]
    raise_for(result.error_code, result.error_message)
    described = await _describe(topic)
    described.validate_only = data.validate_only
    return described
