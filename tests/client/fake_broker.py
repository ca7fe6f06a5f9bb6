"""A tiny in-test Kafka broker on 127.0.0.1, and the runner for async tests.

:class:`FakeBroker` listens on an ephemeral port, decodes requests with
``kcore.protocol.decode_request`` and answers with ``encode_response`` — one request at a time
per connection, in order, as Kafka does. Its behaviour is a table of handlers by API key that a
test overrides; a handler gets ``(broker, conn, request)`` and returns:

* a response body (a Message): encoded at the request's version and sent;
* ``None``: no answer (Produce acks=0, or a request to leave unanswered);
* ``bytes``: sent as they are (garbage, hand-made frames);
* or raises :class:`Drop`: the connection is closed.

A handler may ``await trio.sleep(...)`` to delay its answer. The defaults answer ApiVersions
(``api_ranges``, with the KIP-511 v0 fallback above ``api_versions_max``) and Metadata (the
brokers of ``cluster``, the topics of ``topics`` with their leaders), and record every request
in ``broker.requests``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from kcore.protocol import APIS, FrameDecoder, MalformedMessage, decode_request
from kcore.protocol import messages as m
from kcore.protocol.api import encode_response_bytes

TEST_TIMEOUT = 10.0  # seconds: every async test runs under trio.fail_after(TEST_TIMEOUT)


def trio_test(fn=None, *, timeout: float = TEST_TIMEOUT, clock=None):
    """Run an ``async def`` test with ``trio.run``, bounded by ``trio.fail_after(timeout)``.

    ``clock`` is a factory of a Trio clock (e.g. ``lambda: MockClock(autojump_threshold=0)``)
    for tests that involve no real I/O.
    """

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            async def main():
                with trio.fail_after(timeout):
                    await f(*args, **kwargs)

            trio.run(main, clock=None if clock is None else clock())

        return wrapper

    return deco(fn) if fn is not None else deco


class Drop(Exception):
    """Raised by a handler: close the connection without answering."""


@dataclass
class Seen:
    """One request the fake broker received."""

    conn: int  # index of the connection (0 = first accepted)
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


@dataclass
class FakeConn:
    index: int
    stream: trio.SocketStream
    handled: int = 0  # requests answered (or dropped) so far


Handler = Callable[["FakeBroker", FakeConn, Any], Awaitable[Any]]


@dataclass
class FakeBroker:
    node_id: int = 1
    cluster_id: str | None = "fake-cluster"
    controller_id: int | None = None  # None: this broker
    #: {api_key: (min, max)} advertised in ApiVersions; default: everything the codec knows.
    api_ranges: dict[int, tuple[int, int]] | None = None
    #: the highest ApiVersions version understood; above it the KIP-511 v0 fallback is sent.
    api_versions_max: int = 4
    #: the ApiVersions range put in the fallback (None: omit it, as some old brokers do).
    fallback_range: tuple[int, int] | None = None
    #: {topic: {partition: leader node id}}
    topics: dict[str, dict[int, int]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    #: brokers advertised in Metadata; default [self]
    cluster: list[FakeBroker] | None = None
    handlers: dict[int, Handler] = field(default_factory=dict)
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    connections: list[FakeConn] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.api_ranges is None:
            self.api_ranges = {k: (a.min_version, a.max_version) for k, a in APIS.items()}
        if self.fallback_range is None and self.api_versions_max is not None:
            self.fallback_range = (0, self.api_versions_max)

    # -- serving -------------------------------------------------------------------------

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(trio.serve_tcp, self._serve_conn, self.port, host="127.0.0.1")
            )
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def requests_for(self, api_key: int) -> list[Seen]:
        return [r for r in self.requests if r.api_key == api_key]

    async def _serve_conn(self, stream: trio.SocketStream) -> None:
        conn = FakeConn(len(self.connections), stream)
        self.connections.append(conn)
        decoder = FrameDecoder()
        async with stream:
            try:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    decoder.receive_data(data)
                    while (frame := decoder.next_frame()) is not None:
                        if not await self._handle(conn, frame):
                            return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def _handle(self, conn: FakeConn, frame: bytes) -> bool:
        try:
            req = decode_request(frame)
        except MalformedMessage:
            return False
        self.requests.append(
            Seen(
                conn.index,
                req.api.key,
                req.version,
                req.correlation_id,
                req.header.client_id,
                req.body,
            )
        )
        handler = self.handlers.get(req.api.key) or _DEFAULTS.get(req.api.key)
        if handler is None:
            return False
        try:
            answer = await handler(self, conn, req)
        except Drop:
            return False
        finally:
            conn.handled += 1
        if answer is None:
            return True
        if not isinstance(answer, bytes | bytearray):
            answer = encode_response_bytes(req.api.key, req.version, req.correlation_id, answer)
        await conn.stream.send_all(answer)
        return True

    # -- default answers -----------------------------------------------------------------

    def metadata_response(self, req) -> Any:
        R = m.MetadataResponse
        brokers = self.cluster or [self]
        wanted = req.body.topics
        names = (
            list(self.topics)
            if wanted is None or (req.version == 0 and not wanted)
            else [t.name for t in wanted]
        )
        topics = []
        for name in names:
            parts = self.topics.get(name)
            if parts is None:
                topics.append(R.MetadataResponseTopic(name=name, error_code=3))
                continue
            topic_id = self.topic_ids.setdefault(name, uuid.uuid4())
            topics.append(
                R.MetadataResponseTopic(
                    name=name,
                    topic_id=topic_id,
                    partitions=[
                        R.MetadataResponsePartition(
                            partition_index=p,
                            leader_id=leader,
                            leader_epoch=0,
                            replica_nodes=[leader],
                            isr_nodes=[leader],
                        )
                        for p, leader in sorted(parts.items())
                    ],
                )
            )
        return R(
            brokers=[
                R.MetadataResponseBroker(node_id=b.node_id, host="127.0.0.1", port=b.port)
                for b in brokers
            ],
            cluster_id=self.cluster_id,
            controller_id=self.node_id if self.controller_id is None else self.controller_id,
            topics=topics,
        )


async def _api_versions(broker: FakeBroker, conn: FakeConn, req) -> Any:
    R = m.ApiVersionsResponse
    if req.version > broker.api_versions_max:
        keys = []
        if broker.fallback_range is not None:
            lo, hi = broker.fallback_range
            keys = [R.ApiVersion(api_key=18, min_version=lo, max_version=hi)]
        return encode_response_bytes(18, 0, req.correlation_id, R(error_code=35, api_keys=keys))
    return R(
        api_keys=[
            R.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(broker.api_ranges.items())
        ]
    )


async def _metadata(broker: FakeBroker, conn: FakeConn, req) -> Any:
    return broker.metadata_response(req)


_DEFAULTS: dict[int, Handler] = {18: _api_versions, 3: _metadata}


@asynccontextmanager
async def running(*brokers: FakeBroker):
    """Serve the brokers for the duration of the block (they get their ports on entry)."""
    async with trio.open_nursery() as nursery:
        for b in brokers:
            await nursery.start(b.serve)
        try:
            yield brokers[0] if len(brokers) == 1 else brokers
        finally:
            nursery.cancel_scope.cancel()


def free_port() -> int:
    """A port nothing listens on (bound and released at once)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
