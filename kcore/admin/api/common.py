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
from quart import current_app
from quart_schema import document_response

from kcore.admin.cluster_view import PEERS_KEY, ask_peers, leader_in
from kcore.admin.context import broker, kafka
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


# A node that is not the partition's leader answers ListOffsets with these: the admin endpoint
# then asks the leader the metadata names.
_LED_ELSEWHERE = frozenset(
    error_info(code)[0]
    for code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
)
# What a partition's offsets_error says when its leader did not answer in time (or at all).
LEADER_SILENT = "NETWORK_EXCEPTION"


def _list_offsets_request(
    by_topic: dict[str, list[int]], timestamp: int, isolation_level: int, replica_id: int
) -> m.ListOffsetsRequest:
    LO = m.ListOffsetsRequest
    return LO(
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


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _offsets(
    response: m.ListOffsetsResponse,
) -> dict[tuple[str, int], tuple[int | None, str | None]]:
    return {
        (t.name, p.partition_index): (
            (None, error_name(p.error_code)) if p.error_code else (p.offset, None)
        )
        for t in response.topics
        for p in t.partitions
    }


async def list_offsets(
    partitions: Iterable[tuple[str, int]],
    timestamp: int,
    *,
    isolation_level: int = READ_UNCOMMITTED,
    replica_id: int = -1,
) -> dict[tuple[str, int], tuple[int | None, str | None]]:
    """(topic, partition) -> (offset, None) or (None, Kafka error name): ListOffsets as the
    caller to this node, then, for the partitions another broker leads (this node answered
    NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION, so the caller may describe them),
    the same request to each leader over its inter-broker listener as this node, in
    parallel (:func:`kcore.admin.cluster_view.ask_peers`). A leader that does not answer
    leaves its partitions at ``(None, "NETWORK_EXCEPTION")``."""
    by_topic = _by_topic(partitions)
    if not by_topic:
        return {}
    out = _offsets(
        await kafka(_list_offsets_request(by_topic, timestamp, isolation_level, replica_id))
    )
    node = broker()
    image = node.metadata_image
    elsewhere: dict[int, list[tuple[str, int]]] = {}
    for key, (_, error) in out.items():
        if error not in _LED_ELSEWHERE:
            continue
        leader = leader_in(image, *key)
        if leader is not None and leader != node.node_id:
            elsewhere.setdefault(leader, []).append(key)
    if not elsewhere:
        return out
    requests = {
        leader: _list_offsets_request(_by_topic(keys), timestamp, isolation_level, replica_id)
        for leader, keys in elsewhere.items()
    }
    answers, _ = await ask_peers(current_app.extensions[PEERS_KEY], requests)
    for leader, keys in elsewhere.items():
        answered = _offsets(answers[leader]) if leader in answers else {}
        for key in keys:
            out[key] = answered.get(key, (None, LEADER_SILENT))
    return out


def first_error(*answers: tuple[Any, str | None]) -> str | None:
    return next((error for _, error in answers if error is not None), None)
