"""ReadMirrorStates / WriteMirrorStates at a cluster mirror's coordinator (KIP-1279, M-11).

A broker that leads a mirror partition persists each transition of it at the mirror's
coordinator: the leader of the ``__mirror_state`` partition the mirror name hashes to (D-08),
found with FindCoordinator key type 3 (CLUSTER_MIRROR) and the mirror name as key. When this
broker is the coordinator it calls its own coordinator directly; otherwise it uses these
helpers. Like :mod:`kcore.client.groups`, each finds the coordinator, sends the request there,
and when the answer says the coordinator moved or is not ready (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) or the connection breaks, looks it up
again and retries, ``attempts`` times in all; then raises the last error as a KafkaError. Every
other error is returned in the **raw response**, as it came::

    response = await read_mirror_states(client, "dr", {"orders": [0, 1]})
    for topic in response.topics:              # .partitions[].state, .last_mirror_epoch ...
        ...
    await write_mirror_states(client, "dr", [StateUpdate("orders", 0, MIRRORING)])

The requests are internal (inter-broker): the coordinator asks CLUSTER_ACTION on the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kcore.client.cluster import KafkaClient
from kcore.client.groups import DEFAULT_ATTEMPTS, CoordinatorType, at_coordinator
from kcore.protocol import messages as m

__all__ = ["read_mirror_states", "write_mirror_states"]

_READ_MIRROR_STATES_KEY = 103
_WRITE_MIRROR_STATES_KEY = 104


async def _at_mirror_coordinator(
    client: KafkaClient, mirror_name: str, api_key: int, request: Any, attempts: int
) -> Any:
    async def build(version: int) -> Any:
        return request

    response, _ = await at_coordinator(
        client,
        mirror_name,
        api_key,
        build,
        lambda response, version: response.error_code,
        attempts,
        CoordinatorType.CLUSTER_MIRROR,
    )
    return response


async def read_mirror_states(
    client: KafkaClient,
    mirror_name: str,
    topics: Mapping[str, Iterable[int]] | None = None,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> m.ReadMirrorStatesResponse:
    """ReadMirrorStates for the given partitions of ``mirror_name`` (``topics``: topic ->
    partition indexes), or every partition the coordinator holds for it (None). A partition
    with nothing recorded answers state UNKNOWN (16)."""
    R = m.ReadMirrorStatesRequest
    request = R(
        mirror_name=mirror_name,
        topics=[
            R.TopicData(name=t, partitions=[R.PartitionData(partition_index=p) for p in parts])
            for t, parts in (topics or {}).items()
        ],
    )

    return await _at_mirror_coordinator(
        client, mirror_name, _READ_MIRROR_STATES_KEY, request, attempts
    )


async def write_mirror_states(
    client: KafkaClient,
    mirror_name: str,
    updates: Iterable[Any],
    stopped_topics: Iterable[str] = (),
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> m.WriteMirrorStatesResponse:
    """WriteMirrorStates: persist transitions at the coordinator (all or nothing).

    Each update has the attributes of :class:`kcore.mirror.coordinator.StateUpdate`:
    ``topic``, ``partition``, ``state`` (a code), ``last_mirror_epoch`` (-1: none), and
    ``previous_state`` / ``retry_attempt`` (None: the coordinator derives them), ``reason`` and
    ``leader_epoch`` (the writer's partition leader epoch, which fences a former leader: -1 or
    absent, not fenced), sent as kcore's tagged fields. ``stopped_topics`` moves every known partition of those
    topics to STOPPED (the source topic is gone, M-19)."""
    W = m.WriteMirrorStatesRequest
    by_topic: dict[str, list] = {}
    for u in updates:
        by_topic.setdefault(u.topic, []).append(
            W.PartitionData(
                partition_index=u.partition,
                last_mirror_epoch=u.last_mirror_epoch,
                state=int(u.state),
                previous_state=-1 if u.previous_state is None else int(u.previous_state),
                retry_attempt=-1 if u.retry_attempt is None else u.retry_attempt,
                reason=u.reason,
                leader_epoch=getattr(u, "leader_epoch", -1),
            )
        )
    request = W(
        mirror_name=mirror_name,
        topics=[W.TopicData(name=t, partitions=ps) for t, ps in by_topic.items()],
        stopped_topics=list(stopped_topics),
    )

    return await _at_mirror_coordinator(
        client, mirror_name, _WRITE_MIRROR_STATES_KEY, request, attempts
    )
