"""Cluster-mirror admin helpers (spec §11.1 M-98, with its suggested Python names): each sends one
mirror RPC to any broker of the **destination** cluster (which forwards changes to its
controller) and returns the raw response, as :mod:`kcore.client.admin` does; check it with
:func:`kcore.client.errors.raise_for_error`::

    async with KafkaClient("127.0.0.1:9094") as client:
        raise_for_error(await create_cluster_mirror(client, "dr", {"bootstrap.servers": src}))
        resp = await start_mirror_topics(client, "dr", ["orders"], include_patterns=["pay-.*"])

``topic_metadata`` (M-99) maps a topic to ``(topic_id, num_partitions)`` when the caller knows
the source's; otherwise the broker looks them up on the source (D-27).

:func:`describe_cluster_mirrors` is the one helper that asks more than one broker: a mirror
partition's numbers (source high watermark and LSO, destination log end offset, lag, last
fetch age) are known only by the broker that leads it and fetches for it, so without a
``target`` it asks every broker and takes each partition's numbers from its leader's answer
(as :func:`kcore.client.groups.list_groups` merges ListGroups). The rest of a partition's
detail (state, LME, retries, FAILED reason) comes from the mirror's coordinator and is the same
in every answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from kcore.client.cluster import KafkaClient, Target
from kcore.client.errors import ClientError
from kcore.mirror.report import not_in_sync
from kcore.protocol import messages as m
from kcore.protocol.errors import KafkaError

__all__ = [
    "create_cluster_mirror",
    "delete_cluster_mirror",
    "describe_cluster_mirrors",
    "list_cluster_mirrors",
    "pause_mirror_topics",
    "resume_mirror_topics",
    "start_mirror_topics",
    "stop_mirror_topics",
    "wait_for_sync",
]

ZERO_UUID = uuid.UUID(int=0)


async def create_cluster_mirror(
    client: KafkaClient, mirror_name: str, configs: Mapping[str, str], *, target: Target = "any"
) -> Any:
    """CreateClusterMirror with the mirror's configs (``bootstrap.servers`` required)."""
    C = m.CreateClusterMirrorRequest
    body = C(
        mirror_name=mirror_name,
        config=[C.ClusterMirrorConfig(name=k, value=v) for k, v in configs.items()],
    )
    return await client.request(target, body)


async def start_mirror_topics(
    client: KafkaClient,
    mirror_name: str,
    topics: Iterable[str],
    *,
    include_patterns: Iterable[str] = (),
    exclude_patterns: Iterable[str] = (),
    topic_metadata: Mapping[str, tuple[uuid.UUID, int]] | None = None,
    target: Target = "any",
) -> Any:
    """StartMirrorTopics: ``topics`` by name, plus the source topics ``include_patterns``
    match; the patterns are persisted in the mirror's config (D-20)."""
    S = m.StartMirrorTopicsRequest
    known = topic_metadata or {}
    body = S(
        mirror_name=mirror_name,
        topics=[
            S.TopicData(
                topic_name=t,
                topic_id=known.get(t, (ZERO_UUID, 0))[0],
                num_partitions=known.get(t, (ZERO_UUID, 0))[1],
            )
            for t in topics
        ],
        include_patterns=list(include_patterns),
        exclude_patterns=list(exclude_patterns),
    )
    return await client.request(target, body)


async def stop_mirror_topics(
    client: KafkaClient,
    mirror_name: str,
    topics: Iterable[str],
    *,
    patterns: Iterable[str] = (),
    target: Target = "any",
) -> Any:
    """StopMirrorTopics (failover): ``topics``, and every topic of the mirror ``patterns``
    match (the patterns move from the include to the exclude list, M-53)."""
    S = m.StopMirrorTopicsRequest
    body = S(
        mirror_name=mirror_name,
        topics=[S.TopicData(topic_name=t) for t in topics],
        patterns=list(patterns),
    )
    return await client.request(target, body)


async def _topics_request(client, cls, mirror_name, topics, target) -> Any:
    body = cls(mirror_name=mirror_name, topics=[cls.TopicData(topic_name=t) for t in topics])
    return await client.request(target, body)


async def pause_mirror_topics(
    client: KafkaClient, mirror_name: str, topics: Iterable[str], *, target: Target = "any"
) -> Any:
    """PauseMirrorTopics: the topics stay read-only and stop fetching."""
    return await _topics_request(client, m.PauseMirrorTopicsRequest, mirror_name, topics, target)


async def resume_mirror_topics(
    client: KafkaClient, mirror_name: str, topics: Iterable[str], *, target: Target = "any"
) -> Any:
    """ResumeMirrorTopics: paused topics fetch again from where they stopped."""
    return await _topics_request(client, m.ResumeMirrorTopicsRequest, mirror_name, topics, target)


async def delete_cluster_mirror(
    client: KafkaClient, mirror_name: str, *, target: Target = "any"
) -> Any:
    """DeleteClusterMirror: only when every topic of the mirror is STOPPED (D-29)."""
    return await client.request(target, m.DeleteClusterMirrorRequest(mirror_name=mirror_name))


async def list_cluster_mirrors(client: KafkaClient, *, target: Target = "any") -> Any:
    """ListClusterMirrors: name, source bootstrap servers and cluster id, topic count."""
    return await client.request(target, m.ListClusterMirrorsRequest())


# The fields of a PartitionDetail that only the partition's leader knows.
LEADER_FIELDS = (
    "source_offset",
    "source_last_stable_offset",
    "destination_offset",
    "lag",
    "last_fetch_age_ms",
)


async def describe_cluster_mirrors(
    client: KafkaClient,
    mirror_names: Iterable[str] | None = None,
    *,
    include_authorized_operations: bool = False,
    target: Target | None = None,
) -> Any:
    """DescribeClusterMirrors: per mirror, per topic, per partition its state and numbers
    (None or empty: every mirror).

    Without ``target``, one merged response from every broker (see the module docstring): the
    first broker's answer, with each partition's :data:`LEADER_FIELDS` from the answer of the
    broker the metadata names its leader. A broker that does not answer leaves its partitions'
    numbers at -1 (unknown); raises only when no broker answers. With ``target``, that
    broker's answer alone (its own partitions' numbers, -1 elsewhere)."""
    body = m.DescribeClusterMirrorsRequest(
        mirror_names=list(mirror_names or ()),
        include_authorized_operations=include_authorized_operations,
    )
    if target is not None:
        return await client.request(target, body)
    metadata = await client.refresh_metadata([])
    nodes = sorted(metadata.brokers)
    if len(nodes) < 2:
        return await client.request("any", body)
    answers: dict[int, Any] = {}
    failures: list[Exception] = []

    async def ask(node: int) -> None:
        try:
            answers[node] = await client.request(node, body)
        except ClientError as e:  # that broker's partitions stay unknown
            failures.append(e)

    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(ask, node)
    if not answers:
        raise failures[0]
    first = answers[min(answers)]
    topics = sorted({t.topic_name for d in first.mirrors for t in d.topics})
    metadata = await client.refresh_metadata(topics) if topics else client.metadata

    def leader_of(topic: str, partition: int) -> int | None:
        try:
            return metadata.leader_for(topic, partition)
        except KafkaError:  # no leader known: the numbers stay unknown
            return None

    merge_by_leader(first, answers, leader_of)
    merge_sync_status(first, answers.values())
    return first


def merge_by_leader(
    merged: Any, answers: Mapping[int, Any], leader_of: Callable[[str, int], int | None]
) -> dict[tuple[str, str, int], int | None]:
    """Set each partition of ``merged`` (one DescribeClusterMirrors answer) to the
    :data:`LEADER_FIELDS` of its leader's answer (``answers``: node id -> answer;
    ``leader_of(topic, partition)``: the leader, None when none is known). Returns the
    partitions whose leader's numbers were not found, ``(mirror, topic, partition)`` -> the
    leader (None: no leader): their numbers stay as they were, -1 where not led by the
    broker that gave ``merged``. One piece of code for the CLI's merge and the admin
    endpoint's."""
    by_leader: dict[int, dict[tuple[str, str, int], Any]] = {
        node: {
            (d.mirror_name, t.topic_name, p.partition_index): p
            for d in answer.mirrors
            for t in d.topics
            for p in t.partitions
        }
        for node, answer in answers.items()
    }
    missing: dict[tuple[str, str, int], int | None] = {}
    for described in merged.mirrors:
        for t in described.topics:
            for p in t.partitions:
                key = (described.mirror_name, t.topic_name, p.partition_index)
                leader = leader_of(t.topic_name, p.partition_index)
                found = None if leader is None else by_leader.get(leader, {}).get(key)
                if found is None:
                    missing[key] = leader
                elif found is not p:
                    for name in LEADER_FIELDS:
                        setattr(p, name, getattr(found, name))
    return missing


#: The metadata sync status of a mirror (issue #15): only its coordinator broker knows it.
SYNC_FIELDS = (
    "last_sync_time_ms",
    "last_sync_age_ms",
    "last_change_time_ms",
    "sync_errors",
    "sync_changes",
    "sync_notes",
)


def merge_sync_status(merged: Any, answers: Iterable[Any]) -> None:
    """Each mirror's sync status from the broker that ran its rounds (the latest round, or
    any errors or changes: its coordinator), not from the first broker that answered."""
    best: dict[str, Any] = {}
    for answer in answers:
        for d in answer.mirrors:
            rank = (d.last_sync_time_ms, len(d.sync_errors) + len(d.sync_changes))
            held = best.get(d.mirror_name)
            if held is None or rank > (
                held.last_sync_time_ms,
                len(held.sync_errors) + len(held.sync_changes),
            ):
                best[d.mirror_name] = d
    for d in merged.mirrors:
        found = best.get(d.mirror_name)
        if found is not None and found is not d:
            for name in SYNC_FIELDS:
                setattr(d, name, getattr(found, name))


async def wait_for_sync(
    describe: Callable[[], Awaitable[Any]],
    mirror: str,
    topics: Iterable[str],
    timeout_s: float,
    *,
    poll_s: float = 0.1,
) -> list[str]:
    """D-31, the planned failover's wait: ask ``describe()`` (a DescribeClusterMirrors answer)
    until no partition of ``topics`` in ``mirror`` that still copies has lag (the destination
    holds all the source made stable), for at most ``timeout_s``. Returns the partitions still
    behind then (empty: in sync); the caller stops them either way. ``describe`` is the
    caller's: the CLI asks every broker, the HTTP admin endpoint its own node."""
    topics = set(topics)
    behind: list[str] = []
    with trio.move_on_after(timeout_s):
        while True:
            behind = not_in_sync(await describe(), mirror, topics)
            if not behind:
                return []
            await trio.sleep(poll_s)
    return behind
