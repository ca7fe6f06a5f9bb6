"""Thin request helpers for tools and tests: each builds one kind of request and sends it.

Every helper takes a :class:`~kcore.client.cluster.KafkaClient`, builds the body for the
version negotiated with the target broker (topic names vs. topic ids, old vs. new field
layouts), sends it with :meth:`KafkaClient.request_versioned`, and returns the **raw response**
(``list_offsets`` merges the per-leader responses into one dict). Nothing here retries or raises
on error codes: wrap a call in :meth:`KafkaClient.retry` and check it with
:func:`kcore.client.errors.raise_for_error` when that is wanted::

    resp = await create_topics(client, [NewTopic("orders", 3, 1)])
    raise_for_error(resp, ignore=[ErrorCode.TOPIC_ALREADY_EXISTS])

Where a request must reach a particular broker it does by default: CreateTopics/DeleteTopics
go to the controller named by the metadata (in KRaft any broker, which forwards), Produce,
Fetch and ListOffsets to the partition leader, DescribeConfigs of a broker resource to that
broker. ``target=`` overrides it.

Records stay bytes: ``produce`` takes record-batch bytes (``kcore.record.RecordBatchBuilder``
makes them) and ``fetch`` returns the FetchResponse whose ``records`` are memoryviews into the
response frame.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kcore
from kcore.client.cluster import KafkaClient, Target
from kcore.protocol import messages as m
from kcore.protocol.errors import KafkaError
from kcore.protocol.primitives import ZERO_UUID

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "ConfigResourceType",
    "AlterConfigOp",
    "NewTopic",
    "api_versions",
    "create_topics",
    "delete_records",
    "delete_topics",
    "describe_configs",
    "describe_log_dirs",
    "elect_leaders",
    "fetch",
    "incremental_alter_configs",
    "list_offsets",
    "produce",
    "update_features",
]

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

# Produce v13 and Fetch v13+ name topics by id instead of by name (KIP-516).
_PRODUCE_TOPIC_ID_VERSION = 13
_FETCH_TOPIC_ID_VERSION = 13


class ConfigResourceType(enum.IntEnum):
    """DescribeConfigs / AlterConfigs resource types."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32
    CLUSTER_MIRROR = 64  # kcore's cluster-mirror configs (spec M-106)


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs ``ConfigOperation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions / replication factor means the broker's default (v4+).

    ``assignments`` maps a partition to its replica broker ids (then partitions and
    replication factor must be -1); ``configs`` are topic configs (``cleanup.policy`` ...).
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)


async def api_versions(client: KafkaClient, target: Target = "any") -> Any:
    """An ApiVersionsResponse from ``target``, asked at the version negotiated at connect."""
    conn = await client.connection(target)
    version = conn.api_versions_version or 0
    body = m.ApiVersionsRequest(
        client_software_name="kcore", client_software_version=kcore.__version__
    )
    return await conn.request(body, version)


async def create_topics(
    client: KafkaClient,
    topics: Iterable[NewTopic | str],
    *,
    timeout_ms: int = 30_000,
    validate_only: bool = False,
    target: Target = "controller",
) -> Any:
    """CreateTopics; a plain name means ``NewTopic(name)`` (broker defaults).

    Returns the CreateTopicsResponse; per-topic errors are in ``response.topics``.
    """
    wanted = [NewTopic(t) if isinstance(t, str) else t for t in topics]
    T = m.CreateTopicsRequest
    body = T(
        topics=[
            T.CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=[
                    T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                    for p, ids in t.assignments.items()
                ],
                configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
            )
            for t in wanted
        ],
        timeout_ms=timeout_ms,
        validate_only=validate_only,
    )
    return await client.request(target, body)


async def delete_topics(
    client: KafkaClient,
    names: Iterable[str],
    *,
    timeout_ms: int = 30_000,
    target: Target = "controller",
) -> Any:
    """DeleteTopics by name (``topics`` from v6, ``topic_names`` before). Returns the response."""
    topic_names = list(names)
    D = m.DeleteTopicsRequest

    def build(version: int) -> Any:
        if version >= 6:
            return D(
                topics=[D.DeleteTopicState(name=n) for n in topic_names], timeout_ms=timeout_ms
            )
        return D(topic_names=topic_names, timeout_ms=timeout_ms)

    return await client.request_versioned(target, D, build)


async def describe_configs(
    client: KafkaClient,
    resources: Iterable[tuple[int, str]],
    *,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
    target: Target | None = None,
) -> Any:
    """DescribeConfigs for ``(resource_type, name)`` pairs, e.g. ``[(ConfigResourceType.TOPIC,
    "orders")]``; ``keys`` limits the configs returned (all when None).

    Broker resources are answered by that broker only, so without ``target`` the request goes
    to the broker named by the first BROKER resource (or ``"any"`` if there is none).
    """
    wanted = [(int(kind), name) for kind, name in resources]
    if target is None:
        target = next(
            (int(name) for kind, name in wanted if kind == ConfigResourceType.BROKER and name),
            "any",
        )
    key_list = None if keys is None else list(keys)
    D = m.DescribeConfigsRequest
    body = D(
        resources=[
            D.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=key_list
            )
            for kind, name in wanted
        ],
        include_synonyms=include_synonyms,
        include_documentation=include_documentation,
    )
    return await client.request(target, body)


async def incremental_alter_configs(
    client: KafkaClient,
    resources: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]],
    *,
    validate_only: bool = False,
    target: Target | None = None,
) -> Any:
    """IncrementalAlterConfigs of ``{(resource_type, name): [(key, AlterConfigOp, value)]}``.

    Like :func:`describe_configs`, a broker resource goes to that broker (a cluster-wide default,
    name ``""``, and the other types to any broker, which forwards to the controller). Returns
    the response; each resource's error is in ``response.responses``.
    """
    wanted = {(int(kind), name): list(ops) for (kind, name), ops in resources.items()}
    if target is None:
        target = next(
            (int(name) for kind, name in wanted if kind == ConfigResourceType.BROKER and name),
            "any",
        )
    R = m.IncrementalAlterConfigsRequest
    body = R(
        resources=[
            R.AlterConfigsResource(
                resource_type=kind,
                resource_name=name,
                configs=[
                    R.AlterableConfig(name=key, config_operation=int(op), value=value)
                    for key, op, value in ops
                ],
            )
            for (kind, name), ops in wanted.items()
        ],
        validate_only=validate_only,
    )
    return await client.request(target, body)


async def delete_records(
    client: KafkaClient,
    offsets: Mapping[tuple[str, int], int],
    *,
    timeout_ms: int = 30_000,
) -> dict[tuple[str, int], Any]:
    """DeleteRecords: move the log start offset of each ``(topic, partition)`` up to its offset
    (-1: the high watermark). One request per partition leader; returns ``{(topic, partition):
    DeleteRecordsPartitionResult}`` (``.low_watermark``, ``.error_code``)."""
    by_leader: dict[int, list[tuple[tuple[str, int], int]]] = {}
    for tp, offset in offsets.items():
        leader = await client.find_leader(*tp)
        by_leader.setdefault(leader, []).append((tp, offset))
    D = m.DeleteRecordsRequest
    out: dict[tuple[str, int], Any] = {}
    for leader, items in by_leader.items():
        body = D(
            topics=[
                D.DeleteRecordsTopic(
                    name=topic,
                    partitions=[
                        D.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in plist
                    ],
                )
                for topic, plist in _by_topic(items).items()
            ],
            timeout_ms=timeout_ms,
        )
        response = await client.request(leader, body)
        for t in response.topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p
    return out


async def describe_log_dirs(
    client: KafkaClient, broker: int, topics: Mapping[str, Iterable[int]] | None = None
) -> Any:
    """DescribeLogDirs at ``broker``: every partition it holds (``topics`` None) or the named
    ``{topic: partitions}``. Returns the response (``.results``: one per log directory)."""
    D = m.DescribeLogDirsRequest
    body = D(
        topics=None
        if topics is None
        else [D.DescribableLogDirTopic(topic=t, partitions=list(ps)) for t, ps in topics.items()]
    )
    return await client.request(broker, body)


async def update_features(
    client: KafkaClient,
    updates: Mapping[str, tuple[int, int]],
    *,
    validate_only: bool = False,
    timeout_ms: int = 60_000,
    target: Target = "any",
) -> Any:
    """UpdateFeatures of ``{feature: (max version level, upgrade type)}`` (upgrade types:
    :class:`kcore.metadata.features.UpgradeType`; v0 knows only "allow downgrade"). Any broker
    forwards it to the controller. Returns the response: v2 answers in its top-level error
    only, v0-1 per feature as well."""
    U = m.UpdateFeaturesRequest
    body = U(
        timeout_ms=timeout_ms,
        feature_updates=[
            U.FeatureUpdateKey(
                feature=name,
                max_version_level=level,
                allow_downgrade=upgrade_type != 1,
                upgrade_type=upgrade_type,
            )
            for name, (level, upgrade_type) in updates.items()
        ],
        validate_only=validate_only,
    )
    return await client.request(target, body)


async def elect_leaders(
    client: KafkaClient,
    election_type: int,
    partitions: Iterable[tuple[str, int]] | None,
    *,
    timeout_ms: int = 60_000,
    target: Target = "any",
) -> Any:
    """ElectLeaders (``kafka-leader-election.sh``): election type 0 PREFERRED, 1 UNCLEAN, for
    ``partitions`` (None: every partition; the answer then leaves out those that needed no
    election). Any broker forwards it to the controller. Returns the response
    (``.replica_election_results``: per topic, ``.partition_result`` with each error)."""
    E = m.ElectLeadersRequest
    topics = None
    if partitions is not None:
        topics = [
            E.TopicPartitions(topic=topic, partitions=[p for p, _ in plist])
            for topic, plist in _by_topic((tp, None) for tp in partitions).items()
        ]
    body = E(election_type=election_type, topic_partitions=topics, timeout_ms=timeout_ms)
    return await client.request(target, body)


def reassignments_request(
    targets: Mapping[tuple[str, int], Sequence[int] | None],
    *,
    allow_replication_factor_change: bool = True,
    timeout_ms: int = 60_000,
) -> Any:
    """AlterPartitionReassignments of ``{(topic, partition): target replicas}`` (None: cancel
    the partition's reassignment), topics in first-seen order."""
    R = m.AlterPartitionReassignmentsRequest
    return R(
        timeout_ms=timeout_ms,
        allow_replication_factor_change=allow_replication_factor_change,
        topics=[
            R.ReassignableTopic(
                name=topic,
                partitions=[
                    R.ReassignablePartition(
                        partition_index=p, replicas=None if r is None else list(r)
                    )
                    for p, r in plist
                ],
            )
            for topic, plist in _by_topic(targets.items()).items()
        ],
    )


async def alter_partition_reassignments(
    client: KafkaClient,
    targets: Mapping[tuple[str, int], Sequence[int] | None],
    *,
    timeout_ms: int = 60_000,
    target: Target = "any",
) -> dict[tuple[str, int], tuple[int, str | None]]:
    """Start (or cancel, None) reassignments; any broker forwards them to the controller.
    Returns ``{(topic, partition): (error code, message)}``, a top-level error in every
    partition's entry."""
    response = await client.request(target, reassignments_request(targets, timeout_ms=timeout_ms))
    out = {}
    for t in response.responses:
        for p in t.partitions:
            code, message = p.error_code, p.error_message
            if response.error_code:
                code, message = response.error_code, response.error_message
            out[(t.name, p.partition_index)] = (code, message)
    return out


async def list_partition_reassignments(
    client: KafkaClient,
    partitions: Iterable[tuple[str, int]] | None = None,
    *,
    timeout_ms: int = 60_000,
    target: Target = "any",
) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """The ongoing reassignments (of ``partitions``; None: all) as ``{(topic, partition):
    (replicas, adding, removing)}``. Raises KafkaError for a top-level error."""
    L = m.ListPartitionReassignmentsRequest
    topics = None
    if partitions is not None:
        topics = [
            L.ListPartitionReassignmentsTopics(name=t, partition_indexes=[p for p, _ in plist])
            for t, plist in _by_topic((tp, None) for tp in partitions).items()
        ]
    response = await client.request(target, L(timeout_ms=timeout_ms, topics=topics))
    if response.error_code:
        raise KafkaError(response.error_code, response.error_message)
    return {
        (t.name, p.partition_index): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    }


async def _leader_of_all(client: KafkaClient, partitions: Iterable[tuple[str, int]]) -> int:
    leaders = {await client.find_leader(t, p) for t, p in partitions}
    if len(leaders) != 1:
        raise ValueError(
            f"the partitions have {len(leaders)} leaders ({sorted(leaders)}): pass target="
        )
    return leaders.pop()


async def _topic_ids(client: KafkaClient, topics: Iterable[str]) -> dict[str, Any]:
    names = list(dict.fromkeys(topics))
    missing = [
        n
        for n in names
        if client.metadata is None
        or n not in client.metadata.topics
        or not client.metadata.topics[n].topic_id.int
    ]
    if missing:
        await client.refresh_metadata(missing)
    return {n: client.topic_id(n) for n in names}


def _by_topic(pairs: Iterable[tuple[tuple[str, int], Any]]) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in pairs:
        out.setdefault(topic, []).append((partition, value))
    return out


async def _per_topic_to_leader(
    client: KafkaClient,
    per_partition: Mapping[tuple[str, int], Any],
    target: Target | None,
    api_key: int,
    version: int | None,
    topic_id_version: int,
) -> tuple[Any, int, dict[str, list[tuple[int, Any]]], dict[str, Any]]:
    """Where a Fetch or Produce of ``{(topic, partition): value}`` goes, and at which version.

    Returns ``(connection, version, {topic: [(partition, value)]}, {topic: topic id})``: the
    connection to ``target`` (else to the partitions' one leader), the version asked for (else
    the one negotiated for ``api_key``), and the topic ids, looked up only from
    ``topic_id_version`` on (empty before: those versions name topics).
    """
    if target is None:
        target = await _leader_of_all(client, per_partition)
    grouped = _by_topic(per_partition.items())
    conn = await client.connection(target)
    v = conn.version_for(api_key) if version is None else version
    ids = await _topic_ids(client, grouped) if v >= topic_id_version else {}
    return conn, v, grouped, ids


async def list_offsets(
    client: KafkaClient,
    partitions: Mapping[tuple[str, int], int],
    *,
    isolation_level: int = 0,
    timeout_ms: int = 30_000,
) -> dict[tuple[str, int], Any]:
    """ListOffsets for ``{(topic, partition): timestamp}`` (or EARLIEST/LATEST/MAX_TIMESTAMP).

    Sends one request per partition leader and returns ``{(topic, partition):
    ListOffsetsPartitionResponse}`` (``.error_code``, ``.offset``, ``.timestamp``,
    ``.leader_epoch``; v0 answers in ``.old_style_offsets``).
    """
    by_leader: dict[int, list[tuple[tuple[str, int], int]]] = {}
    for tp, timestamp in partitions.items():
        leader = await client.find_leader(*tp)
        by_leader.setdefault(leader, []).append((tp, timestamp))
    L = m.ListOffsetsRequest
    out: dict[tuple[str, int], Any] = {}
    for leader, items in by_leader.items():
        body = L(
            replica_id=-1,  # a consumer, not a follower: offsets up to the high watermark
            isolation_level=isolation_level,
            timeout_ms=timeout_ms,
            topics=[
                L.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        L.ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in plist
                    ],
                )
                for topic, plist in _by_topic(items).items()
            ],
        )
        response = await client.request(leader, body)
        for t in response.topics:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p
    return out


async def fetch(
    client: KafkaClient,
    offsets: Mapping[tuple[str, int], int],
    *,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 52_428_800,
    partition_max_bytes: int = 1_048_576,
    isolation_level: int = 0,
    target: Target | None = None,
    version: int | None = None,
) -> Any:
    """A sessionless Fetch of ``{(topic, partition): fetch_offset}`` from one broker.

    Goes to the partitions' leader (they must share one) unless ``target`` is given. At Fetch
    v13+ topics are sent and answered by topic id: map ``response.responses[i].topic_id`` back
    with ``client.metadata.topic_by_id``. Returns the FetchResponse, records as memoryviews.
    """
    conn, v, grouped, ids = await _per_topic_to_leader(
        client, offsets, target, 1, version, _FETCH_TOPIC_ID_VERSION
    )
    F = m.FetchRequest
    body = F(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,  # FINAL_EPOCH: a full fetch without a session
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=ids.get(topic, ZERO_UUID),
                partitions=[
                    F.FetchPartition(
                        partition=p, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                    for p, offset in plist
                ],
            )
            for topic, plist in grouped.items()
        ],
    )
    return await conn.request(body, v)


async def produce(
    client: KafkaClient,
    batches: Mapping[tuple[str, int], bytes | bytearray | memoryview],
    *,
    acks: int = -1,
    timeout_ms: int = 30_000,
    transactional_id: str | None = None,
    target: Target | None = None,
    version: int | None = None,
) -> Any:
    """Produce raw record-batch bytes ``{(topic, partition): batches}`` to one broker.

    Goes to the partitions' leader (they must share one) unless ``target`` is given. Produce
    v13 names topics by id (looked up in the metadata). Returns the ProduceResponse, or None
    for ``acks=0`` (the broker does not answer).
    """
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks must be -1, 0 or 1, not {acks}")
    conn, v, grouped, ids = await _per_topic_to_leader(
        client, batches, target, 0, version, _PRODUCE_TOPIC_ID_VERSION
    )
    P = m.ProduceRequest
    body = P(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            P.TopicProduceData(
                name=topic,
                topic_id=ids.get(topic, ZERO_UUID),
                partition_data=[P.PartitionProduceData(index=p, records=r) for p, r in plist],
            )
            for topic, plist in grouped.items()
        ],
    )
    return await conn.request(body, v)
