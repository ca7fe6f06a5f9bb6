"""``/v1/topics`` and ``/v1/topics/{topic}``: Metadata, CreateTopics, DeleteTopics, with
ListOffsets for each partition's offsets and DescribeConfigs for ``mirror.name``.

Listing shows only what Metadata shows the caller (topics it may DESCRIBE). A partition's
offsets are ListOffsets answers of its leader (:func:`kcore.admin.api.common.list_offsets`:
this node's as the caller, the other leaders' asked as this node), so any node's endpoint
shows every partition's; ``offsets_error`` says why they are ``null`` (NETWORK_EXCEPTION: the
leader did not answer; a partition without a leader keeps this node's error). The leader,
replicas and ISR come from the metadata and are always there. ``log_end_offset`` is ListOffsets
LATEST as a non-consumer (Kafka's debugging replica id), ``high_watermark`` and
``last_stable_offset`` as a consumer reading uncommitted and committed. A bad topic name in the
path is the Kafka API's to judge (404, or 400 INVALID_TOPIC_EXCEPTION on create), not the
router's.
"""

from __future__ import annotations

import uuid

from pydantic import Field
from quart import Blueprint
from quart_schema import validate_request, validate_response

from kcore.admin.api import common
from kcore.admin.api.common import Body, Reply, errors
from kcore.admin.context import kafka
from kcore.admin.kafka import raise_for
from kcore.metadata.context import uuid_text
from kcore.protocol import messages as m

topics = Blueprint("topics", __name__)

CREATE_TIMEOUT_MS = 30_000


class TopicSummary(Reply):
    name: str
    topic_id: str  # as Kafka writes it (kafka-topics.sh): URL-safe base64
    partitions: int
    replication_factor: int
    internal: bool
    mirror: str | None  # the mirror the topic belongs to (mirror.name), if any
    mirror_mode: str | None  # "mirroring", "paused", "stopped"


class TopicList(Reply):
    topics: list[TopicSummary]


class NewTopic(Body):
    name: str
    partitions: int = Field(-1, description="-1: the broker's num.partitions")
    replication_factor: int = Field(-1, description="-1: default.replication.factor")
    configs: dict[str, str] = {}
    validate_only: bool = False


class CreatedTopic(Reply):
    name: str
    topic_id: str | None  # null with validate_only
    partitions: int
    replication_factor: int
    configs: dict[str, str | None]
    validate_only: bool


class PartitionInfo(Reply):
    partition: int
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    log_start_offset: int | None
    log_end_offset: int | None
    high_watermark: int | None
    last_stable_offset: int | None
    offsets_error: str | None  # why the offsets are null (NETWORK_EXCEPTION: leader silent)


class TopicDescription(Reply):
    name: str
    topic_id: str
    internal: bool
    mirror: str | None
    mirror_mode: str | None
    partitions: list[PartitionInfo]


class DeletedTopic(Reply):
    name: str
    topic_id: str | None


def _replication_factor(topic) -> int:
    return len(topic.partitions[0].replica_nodes) if topic.partitions else 0


@topics.get("/v1/topics")
@validate_response(TopicList)
@errors(401, 503)
async def list_topics():
    """The topics the caller may describe (Metadata), with their mirror if any."""
    metadata = await common.topic_metadata(None)
    names = [t.name for t in metadata.topics if not t.error_code]
    mirrors = await common.mirror_names(names)
    listed = []
    for t in sorted(metadata.topics, key=lambda t: t.name or ""):
        if t.error_code:
            continue
        mirror, mode = mirrors.get(t.name, (None, None))
        listed.append(
            TopicSummary(
                name=t.name,
                topic_id=uuid_text(t.topic_id),
                partitions=len(t.partitions),
                replication_factor=_replication_factor(t),
                internal=t.is_internal,
                mirror=mirror,
                mirror_mode=mode if mirror else None,
            )
        )
    return TopicList(topics=listed)


@topics.post("/v1/topics")
@validate_request(NewTopic)
@validate_response(CreatedTopic, 201)
@validate_response(CreatedTopic, 200)
@errors(400, 401, 403, 409, 503)
async def create_topic(data: NewTopic):
    """CreateTopics: 201 and the topic's configs, or 200 with ``validate_only``."""
    C = m.CreateTopicsRequest
    request = C(
        topics=[
            C.CreatableTopic(
                name=data.name,
                num_partitions=data.partitions,
                replication_factor=data.replication_factor,
                configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in data.configs.items()],
            )
        ],
        timeout_ms=CREATE_TIMEOUT_MS,
        validate_only=data.validate_only,
    )
    response = await kafka(request)
    result = response.topics[0]
    raise_for(result.error_code, result.error_message)
    created = CreatedTopic(
        name=result.name,
        topic_id=None if data.validate_only else uuid_text(result.topic_id),
        partitions=result.num_partitions,
        replication_factor=result.replication_factor,
        configs={c.name: c.value for c in result.configs or () if not c.is_sensitive},
        validate_only=data.validate_only,
    )
    if data.validate_only:
        return created, 200
    return created, 201, {"Location": f"/v1/topics/{result.name}"}


@topics.get("/v1/topics/<topic>")
@validate_response(TopicDescription)
@errors(401, 403, 404, 503)
async def describe_topic(topic: str):
    """A topic's partitions: leader, replicas, ISR, epoch, and offsets (from their leaders)."""
    t = await common.one_topic(topic)
    keys = [(topic, p.partition_index) for p in t.partitions]
    start = await common.list_offsets(keys, common.EARLIEST)
    end = await common.list_offsets(keys, common.LATEST, replica_id=common.DEBUGGING_REPLICA_ID)
    hw = await common.list_offsets(keys, common.LATEST)
    lso = await common.list_offsets(keys, common.LATEST, isolation_level=common.READ_COMMITTED)
    mirror, mode = (await common.mirror_names([topic])).get(topic, (None, None))
    partitions = []
    for p in sorted(t.partitions, key=lambda p: p.partition_index):
        key = (topic, p.partition_index)
        answers = [x.get(key, (None, None)) for x in (start, end, hw, lso)]
        partitions.append(
            PartitionInfo(
                partition=p.partition_index,
                leader=p.leader_id,
                leader_epoch=p.leader_epoch,
                replicas=list(p.replica_nodes),
                isr=list(p.isr_nodes),
                offline_replicas=list(p.offline_replicas),
                log_start_offset=answers[0][0],
                log_end_offset=answers[1][0],
                high_watermark=answers[2][0],
                last_stable_offset=answers[3][0],
                offsets_error=common.first_error(*answers),
            )
        )
    return TopicDescription(
        name=t.name,
        topic_id=uuid_text(t.topic_id),
        internal=t.is_internal,
        mirror=mirror,
        mirror_mode=mode if mirror else None,
        partitions=partitions,
    )


@topics.delete("/v1/topics/<topic>")
@validate_response(DeletedTopic)
@errors(401, 403, 404, 409, 503)
async def delete_topic(topic: str):
    """DeleteTopics."""
    D = m.DeleteTopicsRequest
    request = D(topics=[D.DeleteTopicState(name=topic)], timeout_ms=CREATE_TIMEOUT_MS)
    response = await kafka(request)
    result = response.responses[0]
    raise_for(result.error_code, result.error_message)
    known = result.topic_id != uuid.UUID(int=0)
    return DeletedTopic(name=topic, topic_id=uuid_text(result.topic_id) if known else None)
