"""The fetching side of incremental fetch sessions (KIP-227): Kafka's ``FetchSessionHandler``.

Theory of operation
-------------------
A fetcher asks its leader for the same partitions again and again. Without a session every
Fetch names every partition and the leader answers every partition, news or not: with 10,000
mirror partitions that is 10,000 partitions encoded, decoded and matched per request on both
sides, twice a second, for nothing. In a session the leader remembers the partitions and their
fetch parameters; each request then lists only what changed since the last one (a partition
added, or its fetch offset, leader epoch, last fetched epoch or byte limit moved) and the
partitions to forget, and the answer carries only partitions with news (the broker's side is
``kcore/server/fetch_session.py``).

One :class:`FetchSessionHandler` belongs to one fetcher's endpoint (one leader). Before each
Fetch, :meth:`FetchSessionHandler.build` turns the partitions the fetcher wants now into what
the request must carry; the answer goes through :meth:`FetchSessionHandler.handle_response`.
What the next request is, by what happened (Kafka's ``FetchMetadata``)::

    state before            event                                next request
    ----------------------  -----------------------------------  -------------------------
    no session (id 0)       answered, session id S               incremental (S, epoch 1)
    no session (id 0)       answered, session id 0 (no slot)     full again (0, 0)
    session S, epoch E      answered, session id S               incremental (S, E+1)
    session S, epoch E      answered, session id 0 (closed)      full (0, 0)
    any                     FETCH_SESSION_ID_NOT_FOUND           full (0, 0)
    session S               INVALID_FETCH_SESSION_EPOCH, any     full closing S (S, 0)
                            other top-level error, no answer
                            (network error, timeout, cancelled)
    session S               a different Fetch version            full closing S (S, 0)

A full request lists every partition; an incremental one the changed and the new ones, and
forgets those the fetcher no longer wants (removed, or not fetchable now: delayed, held,
truncating), as Kafka's fetcher threads do. The handler remembers what the leader's session
holds as of the last request *sent*: if that request's answer never comes, the session's state
on the leader is unknown and the next request starts over with a full one.

Below Fetch v7 there are no sessions: every request is sessionless (0, -1).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kcore.protocol.errors import ErrorCode
from kcore.replica.fetch_state import FetchPartitionRequest, TopicPartition

__all__ = ["SESSION_VERSION", "FetchSessionHandler", "SessionFetch"]

SESSION_VERSION = 7  # Fetch v7 brought SessionId, SessionEpoch and ForgottenTopicsData
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a session
FINAL_EPOCH = -1  # a full fetch without a session
_INT32_MAX = 2**31 - 1

# The leader's answer to a session it cannot use: start over with a full fetch.
SESSION_ERRORS = frozenset(
    {
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """What one Fetch request carries: its session id and epoch, the partitions it lists
    with the byte limit each is sent with, and the partitions it forgets."""

    session_id: int
    session_epoch: int
    to_send: list[tuple[FetchPartitionRequest, int]]
    to_forget: list[tuple[str, uuid.UUID, int]]  # (topic, topic id, partition)

    @property
    def full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """One fetcher's session with its leader (see the module docstring)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request
        self.full_fetches = 0  # requests built, by kind (tests and metrics)
        self.incremental_fetches = 0
        # What the leader's session holds, as of the last request built.
        self._sent: dict[TopicPartition, tuple[FetchPartitionRequest, int]] = {}
        self._version: int | None = None
        self._in_flight = False

    @property
    def partitions(self) -> set[TopicPartition]:
        """The partitions the leader's session holds (as of the last request built)."""
        return set(self._sent)

    def build(
        self,
        partitions: Iterable[FetchPartitionRequest],
        version: int,
        partition_max_bytes: int | None = None,
    ) -> SessionFetch:
        """The request for the partitions the fetcher wants now, at Fetch ``version``;
        ``partition_max_bytes`` lowers each partition's limit (a throttle)."""
        if self._in_flight or (self._version is not None and version != self._version):
            self._close_and_start_over()  # the last answer never came, or the leader changed
        self._in_flight = True
        self._version = version

        def limited(p: FetchPartitionRequest) -> int:
            limit = p.partition_max_bytes
            return limit if partition_max_bytes is None else min(limit, partition_max_bytes)

        if version < SESSION_VERSION:
            self.full_fetches += 1
            self._sent = {}
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            return SessionFetch(
                INVALID_SESSION_ID, FINAL_EPOCH, [(p, limited(p)) for p in partitions], []
            )
        sent = self._sent
        nxt: dict[TopicPartition, tuple[FetchPartitionRequest, int]] = {}
        to_send = []
        full = self.epoch == INITIAL_EPOCH
        for p in partitions:
            tp = (p.topic, p.partition)
            entry = (p, limited(p))
            nxt[tp] = entry
            if full:
                to_send.append(entry)
                continue
            before = sent.get(tp)
            # The fetch state hands out the same request object while nothing changed: `is`
            # settles most partitions without comparing fields.
            if before is None or before[1] != entry[1] or not (before[0] is p or before[0] == p):
                to_send.append(entry)
        to_forget = []
        if not full:
            to_forget = [(q.topic, q.topic_id, q.partition) for tp, (q, _) in sent.items()
                         if tp not in nxt]  # fmt: skip
        self._sent = nxt
        if full:
            self.full_fetches += 1
        else:
            self.incremental_fetches += 1
        return SessionFetch(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Take the answer's top-level error and session id; False when the answer is to be
        dropped (an error: the next request is a full one)."""
        self._in_flight = False
        if self._version is not None and self._version < SESSION_VERSION:
            return error_code == ErrorCode.NONE
        if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self._start_over()
            return False
        if error_code != ErrorCode.NONE:
            self._close_and_start_over()
            return False
        if session_id == INVALID_SESSION_ID:
            # No session (the leader had no slot) or it was closed: ask again next time.
            self._start_over()
        elif self.epoch == INITIAL_EPOCH or session_id != self.session_id:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch == _INT32_MAX else self.epoch + 1
        return True

    def _start_over(self) -> None:
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        self._sent = {}

    def _close_and_start_over(self) -> None:
        # A full request naming the session closes it on the leader and opens a new one.
        self.epoch = INITIAL_EPOCH
        self._sent = {}
