"""A client for a whole cluster: bootstrap, metadata, a connection pool, and retry helpers.

Theory of operation
-------------------
:class:`KafkaClient` knows a cluster by its bootstrap addresses until it has fetched metadata;
from then on by the brokers, topics and partition leaders in :attr:`KafkaClient.metadata` (an
immutable :class:`ClusterMetadata`, replaced on every refresh). Nothing happens behind the
caller's back: metadata is fetched when the caller asks (:meth:`~KafkaClient.refresh_metadata`,
:meth:`~KafkaClient.find_leader`) or when a request names a broker the client cannot place yet.

Connections are pooled **by address** (``host:port``), so a bootstrap connection is reused when
the broker advertises the same address. Each is opened lazily by the first request that needs it
(concurrent callers wait for that one connect), and replaced after it breaks. A failed connect
puts the address in exponential backoff (``reconnect_backoff`` doubling up to
``reconnect_backoff_max``, ±20 % jitter, as Kafka's ``reconnect.backoff.ms``); the next attempt
first sleeps out the rest of it, inside the caller's own deadline. Reconnecting after a
connection broke waits at least ``reconnect_backoff`` since the previous attempt, so a broker that
accepts and drops connections cannot make the client spin.

Requests are addressed to a broker id, ``"any"`` (an open connection if there is one, else the
first reachable known broker or bootstrap address) or ``"controller"`` (the controller id of the
metadata). The client does not retry by itself: :meth:`KafkaClient.retry` is the helper that
does, for the caller's operation, refreshing metadata first when the failure says it is stale
(NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, a lost connection, ...).

Time is Trio's clock (``trio.current_time``, ``trio.sleep``), so tests can drive backoff with
``trio.testing.MockClock``; jitter comes from an injectable ``random.Random``.
"""

from __future__ import annotations

import contextlib
import math
import random
import ssl
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import trio

from kcore.client.connection import (
    _API_BY_REQUEST,
    _DEFAULT,
    DEFAULT_CLIENT_ID,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    BrokerConnection,
)
from kcore.client.errors import (
    REFRESH_METADATA_ERRORS,
    AuthenticationFailed,
    ClientError,
    ConnectionFailed,
    NetworkError,
    RequestTimeout,
    is_retriable,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from kcore.protocol.messages import Message
from kcore.security.sasl_client import SaslClientSettings

__all__ = [
    "BrokerInfo",
    "ClusterMetadata",
    "KafkaClient",
    "PartitionInfo",
    "Target",
    "TopicInfo",
    "parse_bootstrap_servers",
]

T = TypeVar("T")
Target = int | Literal["any", "controller"]
Address = tuple[str, int]


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


def parse_bootstrap_servers(servers: str | Iterable[str]) -> list[Address]:
    """``"h1:9092,h2:9093"`` (or a list of ``"host:port"``) → ``[("h1", 9092), ("h2", 9093)]``.

    IPv6 hosts are written in brackets (``"[::1]:9092"``). Raises ``ValueError`` for an entry
    without a valid port, or for no entries at all.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[Address] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append((host, int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


# -- metadata ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> Address:
        return (self.host, self.port)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader_id: int  # -1 when there is no leader
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID  # the zero UUID when the broker's Metadata version has none (< v10)
    partitions: Mapping[int, PartitionInfo] = field(default_factory=_empty)
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One answer to Metadata, merged with earlier ones for partial refreshes. Immutable.

    ``topics`` holds the topics that exist (by name); ``topic_errors`` the error a requested
    topic came back with (UNKNOWN_TOPIC_OR_PARTITION, ...). ``controller_id`` is -1 when the
    broker named none.
    """

    cluster_id: str | None = None
    controller_id: int = -1
    brokers: Mapping[int, BrokerInfo] = field(default_factory=_empty)
    topics: Mapping[str, TopicInfo] = field(default_factory=_empty)
    topic_errors: Mapping[str, int] = field(default_factory=_empty)
    _by_id: Mapping[uuid.UUID, TopicInfo] = field(default_factory=_empty, repr=False, compare=False)

    @classmethod
    def from_response(cls, response: Any) -> ClusterMetadata:
        """Build from a MetadataResponse (any version)."""
        brokers = {
            b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
        }
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, int] = {}
        for t in response.topics:
            if t.name is None:
                continue  # asked by id at v12+; this client asks by name
            if t.error_code:
                errors[t.name] = t.error_code
                continue
            parts = {
                p.partition_index: PartitionInfo(
                    topic=t.name,
                    partition=p.partition_index,
                    leader_id=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    offline_replicas=tuple(p.offline_replicas),
                    error_code=p.error_code,
                )
                for p in t.partitions
            }
            topics[t.name] = TopicInfo(t.name, t.topic_id, MappingProxyType(parts), t.is_internal)
        return cls._make(response.cluster_id, response.controller_id, brokers, topics, errors)

    @classmethod
    def _make(cls, cluster_id, controller_id, brokers, topics, errors) -> ClusterMetadata:
        by_id = {t.topic_id: t for t in topics.values() if t.topic_id.int}
        return cls(
            cluster_id,
            controller_id,
            MappingProxyType(dict(brokers)),
            MappingProxyType(dict(topics)),
            MappingProxyType(dict(errors)),
            MappingProxyType(by_id),
        )

    def merge(self, newer: ClusterMetadata, topics: Iterable[str]) -> ClusterMetadata:
        """This metadata updated with ``newer``, an answer about ``topics`` only.

        Brokers, controller and cluster id come from ``newer``; the listed topics are replaced
        by what ``newer`` says about them (present or in error); other topics are kept.
        """
        names = set(topics)
        kept = {n: t for n, t in self.topics.items() if n not in names}
        errors = {n: c for n, c in self.topic_errors.items() if n not in names}
        kept.update({n: t for n, t in newer.topics.items() if n in names})
        errors.update({n: c for n, c in newer.topic_errors.items() if n in names})
        return self._make(newer.cluster_id, newer.controller_id, newer.brokers, kept, errors)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        """The partition's metadata; raises a retriable KafkaError if it is unknown."""
        info = self.topics.get(topic)
        if info is None:
            code = self.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaError(code, f"no metadata for topic {topic!r}")
        p = info.partitions.get(partition)
        if p is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}"
            )
        return p

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's broker id; raises KafkaError (retriable) if unknown or leaderless."""
        p = self.partition(topic, partition)
        if p.error_code and p.error_code != ErrorCode.REPLICA_NOT_AVAILABLE:
            raise KafkaError(p.error_code, f"{topic}-{partition}")
        if p.leader_id < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        return p.leader_id


# -- the pool ------------------------------------------------------------------------------


class _Endpoint:
    """Pool slot of one address: its connection and its reconnect backoff."""

    __slots__ = ("address", "conn", "lock", "failures", "retry_at", "last_attempt", "last_error")

    def __init__(self, address: Address) -> None:
        self.address = address
        self.conn: BrokerConnection | None = None
        self.lock = trio.Lock()
        self.failures = 0
        self.retry_at = -math.inf
        self.last_attempt = -math.inf
        self.last_error: BaseException | None = None

    def live(self) -> BrokerConnection | None:
        conn = self.conn
        return conn if conn is not None and not conn.closed else None


class KafkaClient:
    """A Trio client for a Kafka cluster (usable as ``async with KafkaClient(...) as c:``).

    Arguments: ``bootstrap_servers`` — ``"host:port,host:port"`` or a list; ``client_id``;
    ``connect_timeout`` / ``request_timeout`` / ``max_frame_bytes`` — per connection, see
    :meth:`BrokerConnection.connect`; ``reconnect_backoff`` / ``reconnect_backoff_max`` —
    seconds, per address; ``retry_backoff`` / ``retry_backoff_max`` — seconds between attempts
    in :meth:`retry`; ``rng`` — the jitter source; ``ssl_context`` — TLS to every broker
    (``security.protocol=SSL`` or ``SASL_SSL``); ``sasl`` — SASL settings every connection
    authenticates with (both from :func:`kcore.security.client_security.client_security`).

    No task runs in the background, so the client needs no nursery; :meth:`aclose` closes the
    pooled connections (their in-flight requests fail with ConnectionLost).
    """

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        reconnect_backoff: float = 0.05,
        reconnect_backoff_max: float = 1.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        rng: random.Random | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientSettings | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.sasl = sasl
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_frame_bytes = max_frame_bytes
        self.reconnect_backoff = reconnect_backoff
        self.reconnect_backoff_max = reconnect_backoff_max
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self._rng = rng or random.Random()
        self.ssl_context = ssl_context  # security.protocol=SSL: every connection is TLS
        self._endpoints: dict[Address, _Endpoint] = {}
        self._metadata: ClusterMetadata | None = None
        self._any_cursor = 0
        self._closed = False

    # -- connections ---------------------------------------------------------------------

    async def connection(self, target: Target) -> BrokerConnection:
        """An open connection to ``target`` (a broker id, ``"any"`` or ``"controller"``).

        Fetches metadata first when the target cannot be placed without it. Raises
        :class:`ConnectionFailed` (or :class:`ConnectTimeout`) when the broker cannot be
        reached, and a retriable KafkaError (BROKER_NOT_AVAILABLE, NOT_CONTROLLER) when the
        metadata does not name it.
        """
        self._check_open()
        if target == "any":
            return await self._connect_any()
        if target == "controller":
            if self._metadata is None:
                await self.refresh_metadata([])
            node = self._metadata.controller_id
            if node < 0:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata names no controller")
        elif isinstance(target, int) and not isinstance(target, bool):
            node = target
        else:
            raise ValueError(f"target must be a broker id, 'any' or 'controller', not {target!r}")
        broker = self._metadata.brokers.get(node) if self._metadata else None
        if broker is None:
            await self.refresh_metadata([])
            broker = self._metadata.brokers.get(node)
            if broker is None:
                raise KafkaError(
                    ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node} is not in the metadata"
                )
        return await self._connect(broker.address)

    async def _connect(self, address: Address) -> BrokerConnection:
        ep = self._endpoints.get(address)
        if ep is None:
            ep = self._endpoints[address] = _Endpoint(address)
        conn = ep.live()
        if conn is not None:
            return conn
        async with ep.lock:
            conn = ep.live()
            if conn is not None:
                return conn
            if ep.conn is not None:  # it broke: do not reconnect faster than the base backoff
                ep.conn = None
                ep.retry_at = max(ep.retry_at, ep.last_attempt + self.reconnect_backoff)
            delay = ep.retry_at - trio.current_time()
            if delay > 0:
                await trio.sleep(delay)
            self._check_open()
            ep.last_attempt = trio.current_time()
            try:
                conn = await BrokerConnection.connect(
                    *address,
                    client_id=self.client_id,
                    connect_timeout=self.connect_timeout,
                    request_timeout=self.request_timeout,
                    max_frame_bytes=self.max_frame_bytes,
                    ssl_context=self.ssl_context,
                    sasl=self.sasl,
                )
            except ConnectionFailed as e:
                ep.failures += 1
                ep.last_error = e
                ep.retry_at = trio.current_time() + self._jitter(
                    self.reconnect_backoff, self.reconnect_backoff_max, ep.failures
                )
                raise
            if self._closed:
                await conn.aclose()
                self._check_open()
            ep.failures = 0
            ep.last_error = None
            ep.conn = conn
            return conn

    async def _connect_any(self) -> BrokerConnection:
        for ep in self._endpoints.values():
            conn = ep.live()
            if conn is not None:
                return conn
        candidates: list[Address] = []
        if self._metadata is not None:
            brokers = sorted(self._metadata.brokers.values(), key=lambda b: b.node_id)
            if brokers:  # rotate, so that "any" spreads over the brokers
                self._any_cursor = (self._any_cursor + 1) % len(brokers)
                brokers = brokers[self._any_cursor :] + brokers[: self._any_cursor]
            candidates += [b.address for b in brokers]
        candidates += [a for a in self.bootstrap if a not in candidates]
        now = trio.current_time()
        # Addresses not in backoff first, then the others by when their backoff ends.
        candidates.sort(key=lambda a: max(self._retry_at(a) - now, 0.0))
        errors: list[BaseException] = []
        for address in candidates:
            try:
                return await self._connect(address)
            except ConnectionFailed as e:
                errors.append(e)
        # Refused logins everywhere: retrying cannot help (is_retriable says so).
        refused = bool(errors) and all(isinstance(e, AuthenticationFailed) for e in errors)
        raise (AuthenticationFailed if refused else ConnectionFailed)(
            "no broker reachable: " + "; ".join(str(e) for e in errors)
        ) from errors[-1]

    def _retry_at(self, address: Address) -> float:
        ep = self._endpoints.get(address)
        return ep.retry_at if ep is not None else -math.inf

    def _jitter(self, base: float, cap: float, attempt: int) -> float:
        delay = min(cap, base * 2 ** (attempt - 1))
        return delay * self._rng.uniform(0.8, 1.2)

    def connected(self) -> list[Address]:
        """The addresses with an open pooled connection."""
        return [a for a, ep in self._endpoints.items() if ep.live() is not None]

    def failing(self) -> dict[Address, str]:
        """The addresses without an open connection whose last connection attempt failed,
        and why."""
        return {
            a: str(ep.last_error)
            for a, ep in self._endpoints.items()
            if ep.last_error is not None and ep.live() is None
        }

    # -- requests ------------------------------------------------------------------------

    async def request(
        self,
        target: Target,
        body: Message,
        *,
        version: int | None = None,
        timeout: float | None = _DEFAULT,
    ) -> Any:
        """Send ``body`` to ``target`` and return the response body (None for acks=0).

        The version is the highest both the broker and the codec support unless given;
        ``timeout`` defaults to ``request_timeout``. Raises what :meth:`connection` and
        :meth:`BrokerConnection.request` raise; error codes in the response are returned,
        not raised (see :func:`kcore.client.errors.raise_for_error`). No retries.
        """
        conn = await self.connection(target)
        return await conn.request(body, version, timeout=timeout)

    async def request_versioned(
        self,
        target: Target,
        api: type[Message] | int,
        build: Callable[[int], Message],
        *,
        version: int | None = None,
        timeout: float | None = _DEFAULT,
    ) -> Any:
        """Like :meth:`request` for a body whose shape depends on the version.

        ``api`` is the request class (``m.DeleteTopicsRequest``) or its API key; ``build`` is
        called with the negotiated (or given) version and returns the body for it. Example::

            await client.request_versioned("controller", m.DeleteTopicsRequest, lambda v: ...)
        """
        key = api if isinstance(api, int) else _API_BY_REQUEST[api].key
        conn = await self.connection(target)
        v = conn.version_for(key) if version is None else version
        return await conn.request(build(v), v, timeout=timeout)

    # -- metadata ------------------------------------------------------------------------

    @property
    def metadata(self) -> ClusterMetadata | None:
        """The latest metadata, or None before the first refresh."""
        return self._metadata

    async def refresh_metadata(
        self,
        topics: Iterable[str] | None = None,
        *,
        allow_auto_topic_creation: bool = False,
        target: Target = "any",
    ) -> ClusterMetadata:
        """Fetch metadata: all topics (``None``), some, or none (``[]``: brokers only).

        A partial refresh is merged into the current metadata. Returns the new metadata and
        keeps it as :attr:`metadata`. Raises KafkaError for a top-level error (v13+).
        """
        names = None if topics is None else list(dict.fromkeys(topics))

        def build(version: int) -> Message:
            if names is None:
                wanted = [] if version == 0 else None  # v0 has no null: empty means all
            else:  # (at v0 an empty list means all topics; merging keeps only the named ones)
                wanted = [m.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
            return m.MetadataRequest(
                topics=wanted, allow_auto_topic_creation=allow_auto_topic_creation
            )

        response = await self.request_versioned(target, m.MetadataRequest, build)
        if getattr(response, "error_code", 0):
            raise KafkaError(response.error_code, "Metadata request failed")
        fresh = ClusterMetadata.from_response(response)
        if names is not None and self._metadata is not None:
            fresh = self._metadata.merge(fresh, names)
        self._metadata = fresh
        return fresh

    def leader_for(self, topic: str, partition: int) -> int:
        """The partition leader's broker id from the cached metadata.

        Raises a retriable KafkaError: UNKNOWN_TOPIC_OR_PARTITION when the topic or partition
        is not in the metadata (or there is none yet), LEADER_NOT_AVAILABLE when it has no
        leader. :meth:`find_leader` refreshes first when needed.
        """
        if self._metadata is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no metadata fetched yet")
        return self._metadata.leader_for(topic, partition)

    async def find_leader(self, topic: str, partition: int, *, refresh: bool = False) -> int:
        """:meth:`leader_for`, refreshing the topic's metadata first if asked or not known."""
        if not refresh:
            try:
                return self.leader_for(topic, partition)
            except KafkaError:
                pass
        await self.refresh_metadata([topic])
        return self.leader_for(topic, partition)

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id from the cached metadata (raises KafkaError if unknown)."""
        info = self._metadata.topics.get(topic) if self._metadata else None
        if info is None or not info.topic_id.int:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic id for {topic!r}")
        return info.topic_id

    # -- retries -------------------------------------------------------------------------

    async def retry(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        attempts: int = 5,
        refresh_topics: Iterable[str] | None = None,
    ) -> T:
        """Await ``operation()`` until it succeeds, retrying retriable failures.

        Retriable: a KafkaError whose code Kafka marks retriable, :class:`NetworkError` and
        :class:`RequestTimeout`. Before retrying after a network error or a stale-metadata code
        (:data:`~kcore.client.errors.REFRESH_METADATA_ERRORS`) the metadata is refreshed, for
        ``refresh_topics`` only when given. Waits ``retry_backoff`` doubling up to
        ``retry_backoff_max`` between attempts. Raises the last error when ``attempts`` are
        used up, and any non-retriable error at once. The operation should raise response
        error codes itself (e.g. with ``raise_for_error``) for them to be retried::

            async def op():
                leader = await client.find_leader("t", 0)
                return raise_for_error(await client.request(leader, body))
            await client.retry(op, refresh_topics=["t"])
        """
        topics = None if refresh_topics is None else list(refresh_topics)
        for attempt in range(1, attempts + 1):
            try:
                return await operation()
            except (KafkaError, NetworkError, RequestTimeout) as e:
                if attempt >= attempts or not is_retriable(e):
                    raise
                stale = isinstance(e, NetworkError) or (
                    isinstance(e, KafkaError) and e.code in REFRESH_METADATA_ERRORS
                )
                await trio.sleep(self._jitter(self.retry_backoff, self.retry_backoff_max, attempt))
                if stale:  # a failed refresh is not fatal: the next attempt tells
                    with contextlib.suppress(KafkaError, NetworkError, RequestTimeout):
                        await self.refresh_metadata(topics)
        raise AssertionError("unreachable")

    # -- closing -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("the KafkaClient is closed")

    async def aclose(self) -> None:
        """Close every pooled connection; later calls raise ClientError."""
        self._closed = True
        endpoints, self._endpoints = list(self._endpoints.values()), {}
        for ep in endpoints:
            if ep.conn is not None:
                await ep.conn.aclose()

    async def __aenter__(self) -> KafkaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        return f"<KafkaClient {servers} {len(self.connected())} connected>"
