"""Incremental fetch sessions (KIP-227): the broker's side, pure and synchronous.

Theory of operation
-------------------
A consumer or follower that fetches the same partitions again and again need not list them all
every time. It opens a *fetch session*: the broker remembers the partitions and their fetch
parameters, and afterwards the client sends only what changed (new partitions, new fetch
offsets, partitions to forget), while the broker answers only for partitions that have
something to say. A request names its session with ``SessionId`` and ``SessionEpoch`` (Fetch
v7+); the epoch counts the requests of a session so a lost or repeated one is noticed.

Every Fetch request becomes a :class:`FetchContext` through :meth:`FetchManager.new_context`,
by this table (``FetchMetadata`` in Kafka)::

    SessionId  SessionEpoch  meaning                                   context
    ---------  ------------  ----------------------------------------  ------------------------
    0          0             full fetch; open a session if there is     FullFetchContext
                             room (the response carries its id)
    0          -1            full fetch, no session (also v0-v6)        SessionlessFetchContext
    S          0             close session S; full fetch; open a new    FullFetchContext
    S          -1            close session S; full fetch, no session    SessionlessFetchContext
    S          E > 0         incremental fetch in session S:
                             S unknown (evicted, never existed)         SessionErrorContext
                                                                          FETCH_SESSION_ID_NOT_FOUND
                             E is not the epoch S expects               SessionErrorContext
                                                                          INVALID_FETCH_SESSION_EPOCH
                             v13+ request for a v12- session or back    SessionErrorContext
                                                                          FETCH_SESSION_TOPIC_ID_ERROR
                             else: add/update the listed partitions,    IncrementalFetchContext
                             drop the forgotten ones, epoch += 1
                             ... and nothing is left: close S           SessionlessFetchContext

A new session expects epoch 1 next; epochs wrap from 2**31-1 to 1. A session keys its
partitions by topic id from Fetch v13 (when ids came in; the topic name may be unknown, and is
looked up again on every request) and by topic name before.

The handler then reads the context's :meth:`~FetchContext.partitions` (for an incremental
fetch: every partition of the session, not just those in the request), builds one
``FetchResponse.PartitionData`` per partition, and asks the context for the response with
:meth:`~FetchContext.update_and_generate_response`. A full context answers for every partition
and, if it may, opens the session there, remembering what it sent. An incremental context
answers only for partitions with something new, by :meth:`CachedPartition.maybe_update_response_data`:
records, a changed high watermark, last stable offset or log start offset, an error, a
preferred read replica, a diverging epoch, or a partition just added to the session (nothing
sent yet). Partitions that returned records move to the back of the session's order, so that
under ``MaxBytes`` every partition gets its turn.

Cache and eviction
------------------
:class:`FetchSessionCache` holds at most ``max.incremental.fetch.session.cache.slots`` sessions
(1000). When it is full, a new session may take the slot of an existing one (Kafka's
``tryEvict``): first the least recently used session if it has been idle more than
``eviction_ms`` (two minutes); otherwise the least valuable *evictable* session, if the new one
is worth more: sessions are ranked by (privileged, partition count), followers' sessions being
privileged; a session younger than ``eviction_ms`` can only be evicted by a privileged one, and
only if it is unprivileged. Without a slot the fetch simply goes on sessionless. (Kafka 3.8+
splits the cache into 8 shards; kcore keeps one, which is the unsharded behaviour.)

Pure: no I/O, no clock (every method that needs the time takes ``now_ms``), no threads: the
server calls it from one task, so Kafka's per-session locks are not needed. The epoch re-check
when the response is built stays, because a fetch may wait in purgatory while the client, after
a timeout, already sent its next request.
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchKind",
    "FetchManager",
    "FetchSession",
    "FetchSessionCache",
    "FullFetchContext",
    "IncrementalFetchContext",
    "SessionErrorContext",
    "SessionlessFetchContext",
    "TopicIdPartition",
    "error_partition_data",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that may open a session
FINAL_EPOCH = -1  # a full fetch without a session (closing any it names)
TOPIC_ID_MIN_VERSION = 13  # Fetch v13 names topics by id
DEFAULT_MAX_ENTRIES = 1000  # max.incremental.fetch.session.cache.slots
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000  # Kafka's fixed eviction age
_ZERO_UUID = uuid.UUID(int=0)
_INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: -1 stays -1, 2**31-1 wraps to 1 (0 only ever starts)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class FetchKind(enum.Enum):
    FULL = "full"
    SESSIONLESS = "sessionless"
    INCREMENTAL = "incremental"


# The epoch decides the kind; the session id only says which session to close or continue.
_KIND_BY_EPOCH = {INITIAL_EPOCH: FetchKind.FULL, FINAL_EPOCH: FetchKind.SESSIONLESS}


def fetch_kind(session_epoch: int) -> FetchKind:
    """Classify a request by its ``SessionEpoch`` (the table in the module docstring)."""
    return _KIND_BY_EPOCH.get(session_epoch, FetchKind.INCREMENTAL)


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition as a Fetch request names it: ``topic_id`` (zero before v13) and ``topic``
    (``None`` when a v13+ topic id is unknown to this broker: answer UNKNOWN_TOPIC_ID)."""

    topic_id: uuid.UUID
    topic: str | None
    partition: int


PartitionKey = tuple[Any, int]  # (topic id, partition) from v13, else (topic name, partition)
FetchData = list[tuple[TopicIdPartition, Any]]  # (partition, FetchRequest.FetchPartition)


def _key(tp: TopicIdPartition, uses_topic_ids: bool) -> PartitionKey:
    return (tp.topic_id if uses_topic_ids else tp.topic, tp.partition)


def _records_size(data: Any) -> int:
    return 0 if data.records is None else len(data.records)


class CachedPartition:
    """One partition of a session: the client's latest fetch parameters (``request``, its
    ``FetchRequest.FetchPartition``) and what the broker last sent for it. -1 means "nothing
    sent yet", which makes the next response include the partition."""

    __slots__ = (
        "topic_id",
        "topic",
        "partition",
        "request",
        "high_watermark",
        "last_stable_offset",
        "local_log_start_offset",
    )

    def __init__(self, tp: TopicIdPartition, request: Any, data: Any = None) -> None:
        self.topic_id = tp.topic_id
        self.topic = tp.topic
        self.partition = tp.partition
        self.request = request
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.local_log_start_offset = -1
        if data is not None:
            self.maybe_update_response_data(data, update=True)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)

    @property
    def fetch_offset(self) -> int:
        return self.request.fetch_offset

    @property
    def max_bytes(self) -> int:
        return self.request.partition_max_bytes

    def maybe_update_response_data(self, data: Any, update: bool) -> bool:
        """Whether ``data`` (a ``FetchResponse.PartitionData``) must be sent to the client;
        with ``update``, also remember what is sent. Always sent: records, an error, a
        preferred read replica, a diverging epoch; a high watermark, last stable offset or log
        start offset that differs from the last one sent. After an error the remembered high
        watermark is reset to -1, so the partition is sent again once the error clears.
        (Kafka does not look at the LSO; kcore does, so a read_committed client learns of an
        LSO move even when it brings no records.)"""
        must = _records_size(data) > 0
        if data.high_watermark != self.high_watermark:
            must = True
            if update:
                self.high_watermark = data.high_watermark
        if data.last_stable_offset != self.last_stable_offset:
            must = True
            if update:
                self.last_stable_offset = data.last_stable_offset
        if data.log_start_offset != self.local_log_start_offset:
            must = True
            if update:
                self.local_log_start_offset = data.log_start_offset
        if data.preferred_read_replica >= 0 or data.diverging_epoch.epoch >= 0:
            must = True
        if data.error_code != ErrorCode.NONE:
            must = True
            if update:
                self.high_watermark = -1
        return must

    def __repr__(self) -> str:
        return (
            f"CachedPartition({self.topic or self.topic_id}-{self.partition}, "
            f"fetch_offset={self.fetch_offset}, hw={self.high_watermark})"
        )


class FetchSession:
    """A session: its partitions in response order, its epoch (the one the next request must
    carry), who owns it (``privileged``: a follower) and when it was created and last used."""

    __slots__ = (
        "id",
        "privileged",
        "uses_topic_ids",
        "creation_ms",
        "last_used_ms",
        "epoch",
        "partitions",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)

    @property
    def size(self) -> int:
        return len(self.partitions)

    def update(
        self, fetch_data: FetchData, to_forget: Iterable[TopicIdPartition]
    ) -> tuple[list[TopicIdPartition], list[TopicIdPartition], list[TopicIdPartition]]:
        """Apply an incremental request: add or update the listed partitions, then drop the
        forgotten ones. Returns (added, updated, removed)."""
        added, updated, removed = [], [], []
        for tp, request in fetch_data:
            key = _key(tp, self.uses_topic_ids)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(tp, request)
                added.append(tp)
            else:
                cached.request = request
                cached.topic = cached.topic or tp.topic
                updated.append(tp)
        for tp in to_forget:
            if self.partitions.pop(_key(tp, self.uses_topic_ids), None) is not None:
                removed.append(tp)
        return added, updated, removed

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged}, size={self.size}, "
            f"epoch={self.epoch}, last_used_ms={self.last_used_ms})"
        )


class FetchSessionCache:
    """The broker's fetch sessions by id, at most ``max_entries`` of them (see the module
    docstring for eviction). ``rng`` draws session ids (tests pass a seeded one)."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.evictions = 0
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        return list(self._sessions.values())

    @property
    def total_partitions(self) -> int:
        return sum(s.size for s in self._sessions.values())

    def new_session_id(self) -> int:
        """A random id in [1, 2**31-2] not in use (0 means "no session")."""
        while True:
            session_id = self._rng.randint(1, _INT32_MAX - 1)
            if session_id not in self._sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        create_partitions: Callable[[], dict[PartitionKey, CachedPartition]],
    ) -> int:
        """Open a session of ``size`` partitions if there is a free slot or one can be evicted
        for it; returns its id, or :data:`INVALID_SESSION_ID`."""
        full = len(self._sessions) >= self.max_entries
        if full and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(
            self.new_session_id(), privileged, create_partitions(), uses_topic_ids, now_ms
        )
        self._sessions[session.id] = session
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        stale = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            return self._evict(stale)

        def evictable(s: FetchSession) -> bool:
            old = now_ms - s.creation_ms > self.eviction_ms
            return old or (privileged and not s.privileged)

        candidates = [s for s in self._sessions.values() if evictable(s)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
        # Kafka compares (privileged, size, id=0) with the victim's key; ids are >= 1, so a
        # tie on (privileged, size) keeps the existing session.
        if (privileged, size) <= (victim.privileged, victim.size):
            return False
        return self._evict(victim)

    def _evict(self, session: FetchSession) -> bool:
        del self._sessions[session.id]
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms


# -- contexts -------------------------------------------------------------------------------------


def error_partition_data(partition: int, error: ErrorCode) -> Any:
    """A ``FetchResponse.PartitionData`` carrying only ``error`` (Kafka's
    ``FetchResponse.partitionResponse``): offsets -1, no records."""
    return m.FetchResponse.PartitionData(
        partition_index=partition,
        error_code=error,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        records=b"",
    )


Updates = Mapping[TopicIdPartition, Any]  # partition -> FetchResponse.PartitionData, in order


def _response(
    error: ErrorCode,
    session_id: int,
    items: Iterable[tuple[TopicIdPartition, Any]],
    throttle_time_ms: int,
    node_endpoints: Sequence[Any],
) -> Any:
    # Consecutive partitions of one topic share a FetchableTopicResponse, as in Kafka.
    topics: list[Any] = []
    last: tuple[uuid.UUID, str | None] | None = None
    for tp, data in items:
        data.partition_index = tp.partition
        if (tp.topic_id, tp.topic) != last:
            last = (tp.topic_id, tp.topic)
            topics.append(
                m.FetchResponse.FetchableTopicResponse(
                    topic=tp.topic or "", topic_id=tp.topic_id, partitions=[]
                )
            )
        topics[-1].partitions.append(data)
    return m.FetchResponse(
        throttle_time_ms=throttle_time_ms,
        error_code=error,
        session_id=session_id,
        responses=topics,
        node_endpoints=list(node_endpoints),
    )


class FetchContext:
    """What a Fetch request asks for, and how its response is built (see the module
    docstring). ``error`` is the top-level error of a session error, else NONE."""

    error: ErrorCode = ErrorCode.NONE
    kind: FetchKind

    def partitions(self) -> FetchData:
        """Every partition to read, with its ``FetchRequest.FetchPartition`` parameters."""
        raise NotImplementedError

    def fetch_offset(self, tp: TopicIdPartition) -> int | None:
        """The fetch offset of ``tp`` in this fetch, or ``None`` if it is not part of it."""
        for candidate, request in self.partitions():
            if candidate == tp:
                return request.fetch_offset
        return None

    def response_partitions(self, updates: Updates) -> list[tuple[TopicIdPartition, Any]]:
        """The partitions the response would carry, without changing any state (to size a
        response for quotas before deciding to throttle)."""
        return list(updates.items())

    def update_and_generate_response(
        self,
        updates: Updates,
        *,
        now_ms: int,
        throttle_time_ms: int = 0,
        node_endpoints: Sequence[Any] = (),
    ) -> Any:
        """The ``FetchResponse`` for ``updates`` (one entry per partition of
        :meth:`partitions`); updates the session. Sets each entry's ``partition_index``."""
        raise NotImplementedError

    def throttled_response(self, throttle_time_ms: int, node_endpoints: Sequence[Any] = ()) -> Any:
        """An empty response for a throttled client; opens no session and changes none."""
        return _response(ErrorCode.NONE, INVALID_SESSION_ID, (), throttle_time_ms, node_endpoints)


class SessionErrorContext(FetchContext):
    """The request's session could not be used: the response is just the error."""

    kind = FetchKind.INCREMENTAL

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def partitions(self) -> FetchData:
        return []

    def response_partitions(self, updates: Updates) -> list[tuple[TopicIdPartition, Any]]:
        return []

    def update_and_generate_response(
        self, updates, *, now_ms, throttle_time_ms=0, node_endpoints=()
    ) -> Any:
        return _response(self.error, INVALID_SESSION_ID, (), throttle_time_ms, node_endpoints)


class SessionlessFetchContext(FetchContext):
    """A full fetch without a session: every partition is answered, session id 0."""

    kind = FetchKind.SESSIONLESS

    def __init__(self, fetch_data: FetchData) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> FetchData:
        return list(self.fetch_data)

    def update_and_generate_response(
        self, updates, *, now_ms, throttle_time_ms=0, node_endpoints=()
    ) -> Any:
        return _response(
            ErrorCode.NONE, INVALID_SESSION_ID, updates.items(), throttle_time_ms, node_endpoints
        )


class FullFetchContext(FetchContext):
    """A full fetch that opens a session when it answers, if the cache has or can free a
    slot; the session remembers what this response sent."""

    kind = FetchKind.FULL

    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: FetchData,
        uses_topic_ids: bool,
        privileged: bool,
    ) -> None:
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged

    def partitions(self) -> FetchData:
        return list(self.fetch_data)

    def update_and_generate_response(
        self, updates, *, now_ms, throttle_time_ms=0, node_endpoints=()
    ) -> Any:
        def create_partitions() -> dict[PartitionKey, CachedPartition]:
            # From the request, so a partition the handler left out is simply sent next time.
            return {
                _key(tp, self.uses_topic_ids): CachedPartition(tp, request, updates.get(tp))
                for tp, request in self.fetch_data
            }

        session_id = self.cache.maybe_create_session(
            now_ms, self.privileged, len(self.fetch_data), self.uses_topic_ids, create_partitions
        )
        return _response(
            ErrorCode.NONE, session_id, updates.items(), throttle_time_ms, node_endpoints
        )


class IncrementalFetchContext(FetchContext):
    """A fetch in an existing session: reads every partition of the session, answers only
    for those with news."""

    kind = FetchKind.INCREMENTAL

    def __init__(
        self,
        session: FetchSession,
        request_epoch: int,
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> None:
        self.session = session
        self.request_epoch = request_epoch
        self._topic_name = topic_name

    def partitions(self) -> FetchData:
        out = []
        for cached in self.session.partitions.values():
            if cached.topic is None and self.session.uses_topic_ids:
                cached.topic = self._topic_name(cached.topic_id)  # the topic may have appeared
            out.append((cached.topic_id_partition, cached.request))
        return out

    def fetch_offset(self, tp: TopicIdPartition) -> int | None:
        cached = self.session.partitions.get(_key(tp, self.session.uses_topic_ids))
        return None if cached is None else cached.fetch_offset

    def _epoch_current(self) -> bool:
        # The session moved on since this context was made: a duplicate or retried request.
        return self.session.epoch == next_epoch(self.request_epoch)

    def _select(self, updates: Updates, update: bool) -> list[tuple[TopicIdPartition, Any]]:
        selected = []
        partitions = self.session.partitions
        for tp, data in updates.items():
            key = _key(tp, self.session.uses_topic_ids)
            cached = partitions.get(key)
            if cached is None or cached.maybe_update_response_data(data, update):
                selected.append((tp, data))
                if update and cached is not None and _records_size(data) > 0:
                    partitions[key] = partitions.pop(key)  # to the back: fairness under MaxBytes
        return selected

    def response_partitions(self, updates: Updates) -> list[tuple[TopicIdPartition, Any]]:
        return self._select(updates, update=False) if self._epoch_current() else []

    def update_and_generate_response(
        self, updates, *, now_ms, throttle_time_ms=0, node_endpoints=()
    ) -> Any:
        if not self._epoch_current():
            error, items = ErrorCode.INVALID_FETCH_SESSION_EPOCH, []
        else:
            error, items = ErrorCode.NONE, self._select(updates, update=True)
        return _response(error, self.session.id, items, throttle_time_ms, node_endpoints)

    def throttled_response(self, throttle_time_ms: int, node_endpoints: Sequence[Any] = ()) -> Any:
        error = ErrorCode.NONE if self._epoch_current() else ErrorCode.INVALID_FETCH_SESSION_EPOCH
        return _response(error, self.session.id, (), throttle_time_ms, node_endpoints)


# -- the manager ------------------------------------------------------------------------------------


def replica_id_of(request: Any, version: int) -> int:
    """The fetching replica's id: ``ReplicaState.ReplicaId`` from v15, ``ReplicaId`` before;
    -1 for consumers."""
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def _fetch_data(
    request: Any, version: int, topic_name: Callable[[uuid.UUID], str | None]
) -> FetchData:
    uses_ids = version >= TOPIC_ID_MIN_VERSION
    data: dict[PartitionKey, tuple[TopicIdPartition, Any]] = {}
    for topic in request.topics:
        tid = topic.topic_id if uses_ids else _ZERO_UUID
        name = topic_name(tid) if uses_ids else topic.topic
        for p in topic.partitions:
            tp = TopicIdPartition(tid, name, p.partition)
            data[_key(tp, uses_ids)] = (tp, p)  # a repeated partition: the last one counts
    return list(data.values())


def _forgotten(
    request: Any, version: int, topic_name: Callable[[uuid.UUID], str | None]
) -> list[TopicIdPartition]:
    uses_ids = version >= TOPIC_ID_MIN_VERSION
    out = []
    for topic in request.forgotten_topics_data:
        tid = topic.topic_id if uses_ids else _ZERO_UUID
        name = topic_name(tid) if uses_ids else topic.topic
        out.extend(TopicIdPartition(tid, name, p) for p in topic.partitions)
    return out


class FetchManager:
    """Turns Fetch requests into :class:`FetchContext` objects over one session cache."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        request: Any,
        version: int,
        *,
        now_ms: int,
        topic_name: Callable[[uuid.UUID], str | None],
        privileged: bool | None = None,
    ) -> FetchContext:
        """The context for ``request`` (a decoded ``FetchRequest`` of ``version``).

        ``topic_name`` maps a topic id to its name from the broker's metadata (``None`` if
        unknown); it is used from v13. ``privileged`` defaults to "the request comes from a
        follower" (a replica id >= 0). Changes the cache: closes the session a full request
        names, applies an incremental request to its session, advances its epoch.
        """
        if privileged is None:
            privileged = replica_id_of(request, version) >= 0
        session_id, epoch = request.session_id, request.session_epoch
        uses_ids = version >= TOPIC_ID_MIN_VERSION
        fetch_data = _fetch_data(request, version, topic_name)
        kind = fetch_kind(epoch)
        if kind is not FetchKind.INCREMENTAL:
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)  # a full request closes the session it names
            if kind is FetchKind.SESSIONLESS:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.cache, fetch_data, uses_ids, privileged)
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, _forgotten(request, version, topic_name))
        if not session.partitions:
            self.cache.remove(session.id)
            return SessionlessFetchContext(fetch_data)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, epoch, topic_name)
