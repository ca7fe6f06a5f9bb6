"""What the ``/v1`` resources share: the base models (strict, unknown fields refused), the
documented error body, and the Kafka look-ups several resources make (a topic's metadata, its
partitions' offsets, ``mirror.name``).

Request bodies are strict: ``"partitions": "3"`` is a 400 naming the field, not a silent
conversion, so a script's mistake shows at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict
from quart_schema import document_response

from kcore.admin.context import kafka
from kcore.admin.kafka import AdminError, raise_for
from kcore.metadata.mirrors import MIRROR_NAME_CONFIG, parse_mirror_name
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, error_info

TOPIC_RESOURCE = 2  # DescribeConfigs / IncrementalAlterConfigs ResourceType
# ListOffsets: the special timestamps, and the replica id that is not a consumer's (Kafka's
# DEBUGGING_REPLICA_ID): its LATEST is the log end offset, a consumer's the high watermark.
EARLIEST, LATEST = -2, -1
DEBUGGING_REPLICA_ID = -2
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class Body(BaseModel):
    """A request body: unknown fields and wrong types are refused (400)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Reply(BaseModel):
    """A response body."""


class ErrorBody(Reply):
    """Every error: the Kafka error name (or the HTTP one), a message, the Kafka code."""

    error: str
    message: str
    error_code: int | None = None


def errors(*statuses: int) -> Callable:
    """Document the error statuses a route answers (the body is always :class:`ErrorBody`)."""

    def decorate(route: Callable) -> Callable:
        for status in statuses:
            route = document_response(ErrorBody, status)(route)
        return route

    return decorate


def error_name(code: int) -> str | None:
    return None if code == 0 else error_info(code)[0]


async def topic_metadata(names: list[str] | None) -> m.MetadataResponse:
    """Metadata for ``names`` (None: every topic the caller may describe); never creates."""
    topics = (
        None if names is None else [m.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    )
    response = await kafka(m.MetadataRequest(topics=topics, allow_auto_topic_creation=False))
    raise_for(response.error_code)
    return response


async def one_topic(name: str) -> m.MetadataResponse.MetadataResponseTopic:
    """The metadata of topic ``name``; its Kafka error (404, 403) raised."""
    response = await topic_metadata([name])
    for topic in response.topics:
        if topic.name == name:
            raise_for(topic.error_code, f"topic {name!r}: {error_info(topic.error_code)[2]}")
            return topic
    raise AdminError.from_kafka(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")


async def mirror_names(topics: Iterable[str]) -> dict[str, tuple[str | None, str]]:
    """topic -> (mirror, mode) from each topic's ``mirror.name`` (DescribeConfigs, so only
    topics the caller may describe the configs of; the others are left out)."""
    resources = [
        m.DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=t, configuration_keys=[MIRROR_NAME_CONFIG]
        )
        for t in topics
    ]
    if not resources:
        return {}
    response = await kafka(m.DescribeConfigsRequest(resources=resources))
    out = {}
    for result in response.results:
        if result.error_code:
            continue
        value = next((c.value for c in result.configs if c.name == MIRROR_NAME_CONFIG), None)
        mirror, mode = parse_mirror_name(value)
        out[result.resource_name] = (mirror, mode.value)
    return out


async def list_offsets(
    partitions: Iterable[tuple[str, int]],
    timestamp: int,
    *,
    isolation_level: int = READ_UNCOMMITTED,
    replica_id: int = -1,
) -> dict[tuple[str, int], tuple[int | None, str | None]]:
    """(topic, partition) -> (offset, None) or (None, Kafka error name): one ListOffsets, as
    this node answers it -- a partition another broker leads is NOT_LEADER_OR_FOLLOWER."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return {}
    LO = m.ListOffsetsRequest
    request = LO(
        replica_id=replica_id,
        isolation_level=isolation_level,
        topics=[
            LO.ListOffsetsTopic(
                name=topic,
                partitions=[
                    LO.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps
                ],
            )
            for topic, ps in by_topic.items()
        ],
    )
    response = await kafka(request)
    out: dict[tuple[str, int], tuple[int | None, str | None]] = {}
    for t in response.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            out[key] = (None, error_name(p.error_code)) if p.error_code else (p.offset, None)
    return out


def first_error(*answers: tuple[Any, str | None]) -> str | None:
    return next((error for _, error in answers if error is not None), None)
