"""Request helpers for consumer groups: find the coordinator, list, describe, fetch and commit
offsets, delete groups and offsets.

Like :mod:`kcore.client.admin`, each helper takes a :class:`~kcore.client.cluster.KafkaClient`,
builds the body for the version negotiated with the broker it talks to, and returns the **raw
response** — with one difference: a request about a group must reach the group's
**coordinator** (the leader of the ``__consumer_offsets`` partition the group id hashes to), so
every helper first asks FindCoordinator and sends the request there. When the answer says the
coordinator moved or is not ready yet (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE — what a broker says for a few seconds after ``__consumer_offsets`` is
created or changes leader) or the connection breaks, the helper looks the coordinator up again
and retries, ``attempts`` times in all with the client's retry backoff; then it raises the last
error as a KafkaError. Every other error code is returned in the response, as it came::

    response = await describe_groups(client, ["billing"])
    group = response.groups[0]                  # .error_code, .group_state, .members ...
    committed = offset_fetch_partitions(await offset_fetch(client, "billing"))

Requests about several groups (DescribeGroups, DeleteGroups) are split by coordinator and the
answers merged into one response, in the order the groups were given. ListGroups goes to every
broker (each knows only the groups it coordinates) and the answers are merged too.

OffsetFetch v10 and OffsetCommit v10 name topics by id (KIP-848's successors); the helpers look
the ids up in the metadata and fill ``name`` back into the response topics, so callers read
names at every version.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from kcore.client.admin import _topic_ids
from kcore.client.cluster import Address, KafkaClient, Target
from kcore.client.errors import NetworkError, RequestTimeout, UnsupportedVersionError
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "COORDINATOR_ERRORS",
    "Coordinator",
    "CoordinatorType",
    "decode_assignment",
    "decode_subscription",
    "delete_groups",
    "describe_groups",
    "find_coordinator",
    "find_coordinators",
    "list_groups",
    "offset_commit",
    "offset_delete",
    "offset_fetch",
    "offset_fetch_groups",
    "offset_fetch_partitions",
]

# The answers that mean "ask FindCoordinator again and retry" (all retriable in Kafka).
COORDINATOR_ERRORS: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)

# Ten attempts with the default backoff (0.1 s doubling to 1 s) span about 6.5 s: longer than
# a single node takes to create __consumer_offsets and load its partitions.
DEFAULT_ATTEMPTS = 10

_FIND_COORDINATOR_KEY = 10
_OFFSET_COMMIT_KEY = 8
_OFFSET_FETCH_KEY = 9
_OFFSET_DELETE_KEY = 47
_LIST_GROUPS_KEY = 16
_FIND_COORDINATOR_BATCHED_VERSION = 4  # coordinator_keys (KIP-699)
_OFFSET_FETCH_GROUPS_VERSION = 8  # groups[] (KIP-709)
_OFFSET_FETCH_ALL_VERSION = 2  # null topics means "every committed partition"
_TOPIC_ID_VERSION = 10  # OffsetFetch/OffsetCommit topics by id
_LIST_GROUPS_STATES_VERSION = 4
_LIST_GROUPS_TYPES_VERSION = 5
_CONSUMER_PROTOCOL_MAX_VERSION = 3


class CoordinatorType(enum.IntEnum):
    """FindCoordinator ``key_type``: what the key names."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2
    CLUSTER_MIRROR = 3  # KIP-1279: the key is the mirror name


@dataclass(frozen=True, slots=True)
class Coordinator:
    """A FindCoordinator answer for one key."""

    key: str
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> Address:
        return (self.host, self.port)


# -- FindCoordinator ---------------------------------------------------------------------------


async def find_coordinators(
    client: KafkaClient,
    keys: Iterable[str],
    key_type: int = CoordinatorType.GROUP,
    *,
    target: Target = "any",
) -> dict[str, Coordinator | KafkaError]:
    """FindCoordinator for several keys: ``{key: Coordinator or the KafkaError it got}``.

    From v4 all keys go in one request (``coordinator_keys``); before, one request per key
    (``key``). ``key_type`` needs v1+ unless it is GROUP. Does not retry.
    """
    names = list(dict.fromkeys(keys))
    F = m.FindCoordinatorRequest
    conn = await client.connection(target)
    version = conn.version_for(_FIND_COORDINATOR_KEY)
    if version == 0 and key_type != CoordinatorType.GROUP:
        raise UnsupportedVersionError("FindCoordinator v0 finds group coordinators only")
    out: dict[str, Coordinator | KafkaError] = {}
    if version >= _FIND_COORDINATOR_BATCHED_VERSION:
        if names:
            response = await conn.request(F(key_type=key_type, coordinator_keys=names), version)
            for c in response.coordinators:
                out[c.key] = (
                    KafkaError(c.error_code, c.error_message or None)
                    if c.error_code
                    else Coordinator(c.key, c.node_id, c.host, c.port)
                )
    else:
        for name in names:
            r = await conn.request(F(key=name, key_type=key_type), version)
            out[name] = (
                KafkaError(r.error_code, r.error_message or None)
                if r.error_code
                else Coordinator(name, r.node_id, r.host, r.port)
            )
    for name in names:  # a broker that left a key out: treat it as "not available yet"
        out.setdefault(
            name, KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no answer for {name!r}")
        )
    return {name: out[name] for name in names}


async def find_coordinator(
    client: KafkaClient,
    key: str,
    key_type: int = CoordinatorType.GROUP,
    *,
    target: Target = "any",
) -> Coordinator:
    """The coordinator of one group id (or transactional id, with ``key_type``).

    Raises the answer's error as a KafkaError (COORDINATOR_NOT_AVAILABLE is retriable: wrap in
    :meth:`KafkaClient.retry` to wait for it). Does not retry.
    """
    found = (await find_coordinators(client, [key], key_type, target=target))[key]
    if isinstance(found, KafkaError):
        raise found
    return found


# -- routing to the coordinator ----------------------------------------------------------------


def backoff_s(client: KafkaClient, attempt: int) -> float:
    """Seconds to wait after round ``attempt`` (1, 2, ...) of a hand-made retry loop: the
    client's ``retry_backoff`` doubling up to ``retry_backoff_max``, as ``client.retry``."""
    return min(client.retry_backoff_max, client.retry_backoff * 2 ** (attempt - 1))


async def at_coordinator(
    client: KafkaClient,
    key: str,
    api_key: int,
    build: Callable[[int], Awaitable[Message]],
    key_error: Callable[[Any, int], int],
    attempts: int,
    key_type: int = CoordinatorType.GROUP,
) -> tuple[Any, int]:
    """Send ``await build(version)`` to the coordinator of ``key`` (a group id by default, or
    the key of ``key_type``); ``(response, version)``.

    ``key_error(response, version)`` extracts the code that says whether the coordinator
    was the right one; a COORDINATOR_ERRORS code is raised, so that ``client.retry`` finds
    the coordinator again, ``attempts`` times in all.
    """
    what = "group" if key_type == CoordinatorType.GROUP else CoordinatorType(key_type).name

    async def attempt() -> tuple[Any, int]:
        coordinator = await find_coordinator(client, key, key_type)
        conn = await client.connection(coordinator.node_id)
        version = conn.version_for(api_key)
        response = await conn.request(await build(version), version)
        code = key_error(response, version)
        if code in COORDINATOR_ERRORS:
            raise KafkaError(code, f"{what} {key!r} at broker {coordinator.node_id}")
        return response, version

    return await client.retry(attempt, attempts=attempts)


async def per_coordinator(
    client: KafkaClient,
    keys: Iterable[str],
    send: Callable[[int, list[str]], Awaitable[list[Any]]],
    failed: Callable[[str, int], Any],
    attempts: int,
    key_type: int = CoordinatorType.GROUP,
    key_of: Callable[[Any], str] = lambda item: item.group_id,
) -> list[Any]:
    """Run ``send(coordinator_id, its_keys)`` for every coordinator of ``keys`` (group ids, or
    transactional ids with ``key_type`` TRANSACTION).

    ``send`` returns one result per key (with ``error_code``; ``key_of(result)`` names its key);
    keys whose coordinator could not be found or answered a COORDINATOR_ERRORS code are tried
    again, up to ``attempts`` rounds, and end as ``failed(key, code)`` when they never
    succeed. A broker that cannot be reached on the last round raises. Results come back in
    the order of ``keys``.
    """
    order = list(dict.fromkeys(keys))
    results: dict[str, Any] = {}
    pending = order
    for attempt in range(1, attempts + 1):
        last = attempt == attempts
        again: list[str] = []
        try:
            coordinators = await find_coordinators(client, pending, key_type)
        except (NetworkError, RequestTimeout):
            if last:
                raise
            coordinators = {g: KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in pending}
        by_node: dict[int, list[str]] = {}
        for group, found in coordinators.items():
            if isinstance(found, Coordinator):
                by_node.setdefault(found.node_id, []).append(group)
            elif found.retriable and not last:
                again.append(group)
            else:
                results[group] = failed(group, int(found.code))
        for node, node_groups in by_node.items():
            try:
                answers = await send(node, node_groups)
            except (NetworkError, RequestTimeout):
                if last:
                    raise
                again += node_groups
                continue
            for item in answers:
                if item.error_code in COORDINATOR_ERRORS and not last:
                    again.append(key_of(item))
                else:
                    results[key_of(item)] = item
        if not again:
            break
        pending = again
        await trio.sleep(backoff_s(client, attempt))
    return [results[g] for g in order if g in results]


async def at_broker(
    client: KafkaClient,
    node: Target,
    api_key: int,
    build: Callable[[int], Message],
    what: str,
    attempts: int,
) -> Any:
    """Send ``build(version)`` to broker ``node`` (a request every broker answers for what it
    coordinates, as ListGroups and ListTransactions); the response.

    An answer whose ``error_code`` is in COORDINATOR_ERRORS (a coordinator still loading) is
    asked again with ``client.retry``, ``attempts`` times in all; then its KafkaError is raised.
    ``build`` may raise (UnsupportedVersionError for a version that cannot say the request).
    """

    async def attempt() -> Any:
        conn = await client.connection(node)
        version = conn.version_for(api_key)
        response = await conn.request(build(version), version)
        if response.error_code in COORDINATOR_ERRORS:
            raise KafkaError(response.error_code, f"{what} at broker {node}")
        return response

    return await client.retry(attempt, attempts=attempts)


# -- ListGroups / DescribeGroups / DeleteGroups ------------------------------------------------


async def list_groups(
    client: KafkaClient,
    *,
    states_filter: Iterable[str] = (),
    types_filter: Iterable[str] = (),
    target: Target | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """ListGroups: every group of the cluster, as one merged ListGroupsResponse.

    Without ``target`` the request goes to every broker of the metadata (each lists the groups
    it coordinates) and the ``groups`` are concatenated; ``error_code`` is the first non-zero
    one. ``states_filter`` ("Stable", "Empty", ...) needs v4+, ``types_filter`` ("classic",
    "consumer") v5+: UnsupportedVersionError otherwise. COORDINATOR_LOAD_IN_PROGRESS is retried.
    """
    states, types = list(states_filter), list(types_filter)
    L = m.ListGroupsRequest

    def build(version: int) -> Message:
        if states and version < _LIST_GROUPS_STATES_VERSION:
            raise UnsupportedVersionError(f"ListGroups v{version} cannot filter by state")
        if types and version < _LIST_GROUPS_TYPES_VERSION:
            raise UnsupportedVersionError(f"ListGroups v{version} cannot filter by type")
        return L(states_filter=states, types_filter=types)

    async def ask(node: Target) -> Any:
        return await at_broker(client, node, _LIST_GROUPS_KEY, build, "ListGroups", attempts)

    if target is not None:
        return await ask(target)
    metadata = client.metadata or await client.refresh_metadata([])
    responses = [await ask(node) for node in sorted(metadata.brokers)] or [await ask("any")]
    return m.ListGroupsResponse(
        throttle_time_ms=max(r.throttle_time_ms for r in responses),
        error_code=next((r.error_code for r in responses if r.error_code), 0),
        groups=[g for r in responses for g in r.groups],
    )


async def describe_groups(
    client: KafkaClient,
    groups: Iterable[str],
    *,
    include_authorized_operations: bool = False,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """DescribeGroups, each group asked of its coordinator; one merged DescribeGroupsResponse.

    ``response.groups[i]`` has ``error_code``, ``group_state`` ("Stable", "Empty", "Dead" for a
    group that does not exist ...), ``protocol_type`` ("consumer"), ``protocol_data`` (the
    assignor), and ``members`` (``member_id``, ``client_id``, ``client_host``,
    ``member_metadata``, ``member_assignment``: see :func:`decode_assignment`).
    """
    D, R = m.DescribeGroupsRequest, m.DescribeGroupsResponse

    async def send(node: int, names: list[str]) -> list[Any]:
        body = D(groups=names, include_authorized_operations=include_authorized_operations)
        return (await client.request(node, body)).groups

    def failed(group: str, code: int) -> Any:
        return R.DescribedGroup(group_id=group, error_code=code)

    return R(groups=await per_coordinator(client, groups, send, failed, attempts))


async def delete_groups(
    client: KafkaClient, groups: Iterable[str], *, attempts: int = DEFAULT_ATTEMPTS
) -> Any:
    """DeleteGroups, each group at its coordinator; one merged DeleteGroupsResponse.

    ``response.results[i].error_code`` is NON_EMPTY_GROUP while the group has members,
    GROUP_ID_NOT_FOUND for a group the coordinator does not know.
    """
    D, R = m.DeleteGroupsRequest, m.DeleteGroupsResponse

    async def send(node: int, names: list[str]) -> list[Any]:
        return (await client.request(node, D(groups_names=names))).results

    def failed(group: str, code: int) -> Any:
        return R.DeletableGroupResult(group_id=group, error_code=code)

    return R(results=await per_coordinator(client, groups, send, failed, attempts))


# -- offsets -----------------------------------------------------------------------------------


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out


async def _name_topics(client: KafkaClient, topics: Iterable[Any]) -> None:
    """Fill ``name`` into v10 response topics from their ``topic_id``."""
    topics = list(topics)
    if client.metadata is None or any(
        client.metadata.topic_by_id(t.topic_id) is None for t in topics
    ):
        await client.refresh_metadata(None)
    for t in topics:
        info = client.metadata.topic_by_id(t.topic_id)
        t.name = info.name if info is not None else ""


async def offset_fetch(
    client: KafkaClient,
    group: str,
    partitions: Iterable[tuple[str, int]] | None = None,
    *,
    require_stable: bool = False,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """OffsetFetch: the committed offsets of ``group`` for ``partitions`` (None: all of them).

    v8+ asks in the ``groups`` form, v0-7 in the single-group form; "all partitions" needs v2+.
    Returns the raw OffsetFetchResponse; :func:`offset_fetch_partitions` reads it at any
    version. A partition without a committed offset answers ``committed_offset`` -1.
    """
    wanted = None if partitions is None else _by_topic(partitions)
    O = m.OffsetFetchRequest  # noqa: E741 (Kafka's name, as in admin.py)

    async def build(version: int) -> Message:
        if wanted is None and version < _OFFSET_FETCH_ALL_VERSION:
            raise UnsupportedVersionError(f"OffsetFetch v{version} cannot fetch all partitions")
        if version >= _OFFSET_FETCH_GROUPS_VERSION:
            ids = await _topic_ids(client, wanted or ()) if version >= _TOPIC_ID_VERSION else {}
            topics = (
                None
                if wanted is None
                else [
                    O.OffsetFetchRequestTopics(
                        name=t, partition_indexes=ps, **({"topic_id": ids[t]} if ids else {})
                    )
                    for t, ps in wanted.items()
                ]
            )
            return O(
                groups=[O.OffsetFetchRequestGroup(group_id=group, topics=topics)],
                require_stable=require_stable,
            )
        topics = (
            None
            if wanted is None
            else [
                O.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in wanted.items()
            ]
        )
        return O(group_id=group, topics=topics, require_stable=require_stable)

    def group_error(response: Any, version: int) -> int:
        if version >= _OFFSET_FETCH_GROUPS_VERSION:
            return next((g.error_code for g in response.groups if g.error_code), 0)
        if response.error_code:  # v2+
            return response.error_code
        # v0-1 carry the group's error in every partition
        return next(
            (p.error_code for t in response.topics for p in t.partitions if p.error_code), 0
        )

    response, version = await at_coordinator(
        client, group, _OFFSET_FETCH_KEY, build, group_error, attempts
    )
    if version >= _TOPIC_ID_VERSION:
        await _name_topics(client, [t for g in response.groups for t in g.topics])
    return response


async def offset_fetch_groups(
    client: KafkaClient,
    groups: Iterable[str],
    *,
    batch: int = 100,
    attempts: int = DEFAULT_ATTEMPTS,
) -> dict[str, Any]:
    """Every committed offset of each of ``groups``: ``{group: OffsetFetchResponseGroup}``
    (``error_code``, ``topics[].partitions[]`` with names filled in).

    From OffsetFetch v8 (KIP-709) one request asks a coordinator for up to ``batch`` groups,
    so a thousand groups cost a few requests; a broker below v8 is asked group by group. A
    group whose coordinator cannot be found or keeps moving comes back with that error code.
    """
    O = m.OffsetFetchRequest  # noqa: E741 (Kafka's name, as in admin.py)
    R = m.OffsetFetchResponse

    async def send(node: int, names: list[str]) -> list[Any]:
        conn = await client.connection(node)
        version = conn.version_for(_OFFSET_FETCH_KEY)
        if version < _OFFSET_FETCH_GROUPS_VERSION:
            out = []
            for name in names:
                response = await offset_fetch(client, name, attempts=attempts)
                code = response.error_code if version >= 2 else 0
                topics = [
                    R.OffsetFetchResponseTopics(
                        name=t.name,
                        partitions=[
                            R.OffsetFetchResponsePartitions(
                                partition_index=p.partition_index,
                                committed_offset=p.committed_offset,
                                error_code=p.error_code,
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in response.topics
                ]
                out.append(
                    R.OffsetFetchResponseGroup(group_id=name, error_code=code, topics=topics)
                )
            return out
        answers = []
        for i in range(0, len(names), batch):
            body = O(
                groups=[
                    O.OffsetFetchRequestGroup(group_id=g, topics=None) for g in names[i : i + batch]
                ]
            )
            response = await conn.request(body, version)
            if version >= _TOPIC_ID_VERSION:
                await _name_topics(client, [t for g in response.groups for t in g.topics])
            answers += response.groups
        return answers

    def failed(group: str, code: int) -> Any:
        return R.OffsetFetchResponseGroup(group_id=group, error_code=code)

    results = await per_coordinator(client, groups, send, failed, attempts)
    return {g.group_id: g for g in results}


def offset_fetch_partitions(response: Any, group: str | None = None) -> dict[tuple[str, int], Any]:
    """``{(topic, partition): partition}`` from an OffsetFetchResponse of any version.

    Each partition has ``committed_offset`` (-1: none), ``committed_leader_epoch``,
    ``metadata`` and ``error_code``. For a v8+ response, the entry of ``group`` (default: the
    first group). A group-level error code is not looked at here.
    """
    if getattr(response, "groups", None):
        entry = next((g for g in response.groups if group in (None, g.group_id)), None)
        topics = entry.topics if entry is not None else []
    else:
        topics = response.topics
    return {(t.name, p.partition_index): p for t in topics for p in t.partitions}


async def offset_commit(
    client: KafkaClient,
    group: str,
    offsets: Mapping[tuple[str, int], int],
    generation: int = -1,
    member_id: str = "",
    *,
    group_instance_id: str | None = None,
    metadata: str | None = "",
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """OffsetCommit ``{(topic, partition): offset}`` for ``group``.

    With the defaults (generation -1, no member id) it is a simple commit, which Kafka accepts
    only while the group has no members (an "Empty" or unknown group): what an admin tool uses
    to reset offsets. A member of the group passes its generation and member id. Returns the
    OffsetCommitResponse; errors are per partition (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS ...).
    """
    wanted: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        wanted.setdefault(topic, []).append((partition, offset))
    C = m.OffsetCommitRequest

    async def build(version: int) -> Message:
        ids = await _topic_ids(client, wanted) if version >= _TOPIC_ID_VERSION else {}
        return C(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            retention_time_ms=-1,  # v2-4: the broker's offsets.retention.minutes
            topics=[
                C.OffsetCommitRequestTopic(
                    name=topic,
                    **({"topic_id": ids[topic]} if ids else {}),
                    partitions=[
                        C.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o, committed_metadata=metadata
                        )
                        for p, o in plist
                    ],
                )
                for topic, plist in wanted.items()
            ],
        )

    def group_error(response: Any, version: int) -> int:
        return next(
            (
                p.error_code
                for t in response.topics
                for p in t.partitions
                if p.error_code in COORDINATOR_ERRORS
            ),
            0,
        )

    response, version = await at_coordinator(
        client, group, _OFFSET_COMMIT_KEY, build, group_error, attempts
    )
    if version >= _TOPIC_ID_VERSION:
        await _name_topics(client, response.topics)
    return response


async def offset_delete(
    client: KafkaClient,
    group: str,
    partitions: Iterable[tuple[str, int]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Any:
    """OffsetDelete: drop the committed offsets of ``partitions`` from ``group``.

    ``response.error_code`` is the group's (GROUP_ID_NOT_FOUND ...); each partition's is
    GROUP_SUBSCRIBED_TO_TOPIC while an active member subscribes to its topic.
    """
    O = m.OffsetDeleteRequest  # noqa: E741
    body = O(
        group_id=group,
        topics=[
            O.OffsetDeleteRequestTopic(
                name=t, partitions=[O.OffsetDeleteRequestPartition(partition_index=p) for p in ps]
            )
            for t, ps in _by_topic(partitions).items()
        ],
    )

    async def build(version: int) -> Message:
        return body

    response, _ = await at_coordinator(
        client, group, _OFFSET_DELETE_KEY, build, lambda r, v: r.error_code, attempts
    )
    return response


# -- the consumer protocol's embedded data -----------------------------------------------------


def _decode_versioned(data: bytes | memoryview | None, message: type[Message]) -> Message | None:
    if not data:
        return None
    buf = memoryview(data)
    (version,) = struct.unpack_from(">h", buf, 0)
    # A newer version only appends fields (Kafka decodes it with the newest schema it knows and
    # ignores the rest), so read it as the highest version the codec has and drop the tail.
    obj, _ = message.decode_from(buf, 2, min(max(version, 0), _CONSUMER_PROTOCOL_MAX_VERSION))
    return obj


def decode_assignment(data: bytes | memoryview | None) -> dict[str, list[int]]:
    """A consumer-protocol member assignment (DescribeGroups' ``member_assignment``, SyncGroup's
    ``assignment``) as ``{topic: [partition, ...]}``; empty for empty bytes.

    Raises :class:`~kcore.protocol.MalformedMessage` for bytes that are not one.
    """
    obj = _decode_versioned(data, m.ConsumerProtocolAssignment)
    if obj is None:
        return {}
    return {tp.topic: list(tp.partitions) for tp in obj.assigned_partitions}


def decode_subscription(data: bytes | memoryview | None) -> list[str]:
    """The topics of a consumer-protocol subscription (``member_metadata``); [] for none."""
    obj = _decode_versioned(data, m.ConsumerProtocolSubscription)
    return [] if obj is None else list(obj.topics)
