"""Listeners and connections: bytes from clients in, responses out, in order.

Theory of operation
-------------------
One Trio task accepts on each listener; each connection gets **one task** that reads, answers
and writes, in that order, over and over:

* it pulls bytes from the socket into a :class:`~kcore.protocol.FrameDecoder` (one read,
  ``os.read`` of the socket after ``wait_readable`` if nothing is there yet, of up to 64 KiB,
  or of the rest of a large frame up to 4 MiB), then answers every complete frame the decoder
  holds, in order, before it reads again. Requests of one
  connection are thus processed one at a time, exactly as Kafka mutes a channel while a
  request is in flight, which is what makes responses arrive in request order (clients pipeline
  and rely on it). While a request is processed nothing is read: a client that pipelines
  faster than the broker answers fills the socket buffers and TCP flow control pushes back on
  it, so the broker never buffers more than one read beyond the frame in progress. A frame
  larger than ``socket.request.max.bytes`` is refused from its size prefix, before it is read.
* a request is decoded, dispatched to its handler, and its response written straight to the
  socket (``os.writev`` of the encoded parts; parts that are file slices go with
  ``os.sendfile`` straight from the segment file); the task waits for the socket only when
  the kernel's send buffer is full.

Why one task and not a reader and a processor joined by a channel: every hop between tasks is
a pass through Trio's scheduler (~20-40 us each on the 2-core bench VM), and a request took
four of them (reader wakes, hands the frame over, processor wakes, writes and yields) where it
now takes one (the wake-up on readable data). Reading ahead bought nothing, since requests of
a connection are answered one at a time anyway and the kernel buffers what the client sends
meanwhile. The task yields to the others once per request (the read, or an explicit
checkpoint before each further frame already buffered), so a client pipelining hundreds of
small requests cannot starve other connections.

TLS (``SSL`` listeners, ``ListenerSpec.tls``): the connection's task first does the TLS
handshake, under ``kcore.ssl.handshake.timeout.ms``, so a slow or garbage handshake stalls only
itself; the client certificate gives the connection's ``principal`` (else ``User:ANONYMOUS``),
which every RequestContext carries to the authorizer. The reads are then the same socket
reads, decrypted (``TlsChannel.reader``), and a response is gathered and encrypted in pieces
(``sendfile`` cannot encrypt): see kcore/security/tls_transport.py.

Bad input: a frame that does not decode, an unknown API key, or a version the broker does not
serve closes the connection (Kafka does the same; there is no response format to answer an
undecodable request with), except an ApiVersions request at an unknown version, which gets the
v0 fallback answer so the client can retry lower. A handler's unexpected exception is logged
and answered with UNKNOWN_SERVER_ERROR where the response has an error code, else the
connection is closed. Nothing a client sends can stop the listener or other connections.
Idle connections are closed after ``connections.max.idle.ms``.

Connection limits (:mod:`kcore.server.connection_quotas`, Kafka's ``ConnectionQuotas``): after
each accept the listener's acceptor waits while the listener is at its
``listener.name.<l>.max.connections`` or the broker at ``max.connections`` (the inter-broker
listener excepted; the accepted client waits with it, later ones in the listen backlog), then
closes the connection at once if its address is at ``max.connections.per.ip`` (or its
override). Broker and controller listeners are counted apart, as Kafka's broker and controller
run a socket server each. Past ``max.connections`` (the inter-broker listener's, or a lowered
limit) the least recently used connections of the other listeners are closed.

Authentication: each connection has a ``principal`` (``User:ANONYMOUS`` until something
establishes another), which every request's :class:`RequestContext` carries to the authorizer.
On a SASL listener (:attr:`ListenerSpec.sasl`) the connection's
:class:`~kcore.security.authenticator.SaslAuthenticator` is asked before each request whether
it is served, answered by the authenticator (SaslHandshake, SaslAuthenticate, bare tokens after
SaslHandshake v0: :mod:`kcore.server.sasl_shell`), or closes the connection (anything but
ApiVersions before authentication, any request past the session lifetime); a failed
authentication is answered, then the connection is closed.

Startup: the controller listeners are served as soon as they are bound (the metadata quorum
needs them to catch up). The client listeners wait for
:meth:`KafkaServer.enable_request_processing`, which the broker calls once it has caught up with
the metadata log and been unfenced, as Kafka's ``BrokerServer.startup`` calls
``SocketServer.enableRequestProcessing`` last; until then no client can be told that an existing
topic does not exist. Like Kafka's ``Acceptor``, a waiting listener with a fixed port is not even
opened (a connect is refused, as by a broker that is down, and clients retry; whatever probes the
port for readiness is not misled), and one on port 0 is opened at once, so that its port is
known, but nothing is accepted from it until then (connections wait in the kernel's backlog).
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import trio

from kcore.protocol import (
    APIS,
    FrameDecoder,
    MalformedMessage,
    UnsupportedVersion,
    api_versions_fallback_response,
    decode_request,
    encode_response,
)
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.security.authenticator import Admission
from kcore.security.tls_transport import ANONYMOUS, HandshakeFailed
from kcore.server import sasl_shell
from kcore.server.connection_quotas import ConnectionLimitsConfig, ConnectionQuotas
from kcore.server.registry import CONTROLLER, EncodedResponse, HandlerRegistry
from kcore.server.request_metrics import FETCH_KEY, RequestMetrics

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
_RECV_BYTES = 65536
_RECV_MAX_BYTES = 4 * 1024 * 1024
_IOV_MAX = 1024  # Linux's limit on the buffers of one writev
_connection_ids = itertools.count(1)


def _reader(fd: int, want: int):
    """A read of up to ``want`` bytes (raises BlockingIOError when there are none yet)."""
    return lambda: os.read(fd, want)


def _reader_into(fd: int, target: memoryview):
    """A read into ``target``, returning the count (raises BlockingIOError when none yet)."""
    return lambda: os.readv(fd, (target,))


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: Any
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    listener_name: str
    listener_type: str
    client_host: str
    connection_id: int
    server: Any  # the broker object the handlers reach their services through
    principal: str = "User:ANONYMOUS"
    received_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    host: str
    port: int
    listener_type: str  # registry.BROKER or registry.CONTROLLER
    # Served at once; otherwise only after KafkaServer.enable_request_processing() (see the
    # module docstring). Kafka starts its controller listeners early and the others last.
    early_start: bool = True
    # A SASL listener's settings (kcore.security.sasl_config.SaslListenerConfig), else None.
    sasl: Any = None
    # SSL and SASL_SSL listeners: a kcore.security.tls_transport.TlsListener (its current
    # context; replaced on certificate reload). None: plaintext.
    tls: Any = None


@dataclass(slots=True)
class ConnectionLimits:
    max_frame_bytes: int = 104_857_600  # socket.request.max.bytes
    idle_timeout_s: float = 600.0  # connections.max.idle.ms
    # max.connections, max.connections.per.ip(.overrides), listener.name.<l>.max.connections
    quotas: ConnectionLimitsConfig = field(default_factory=ConnectionLimitsConfig)
    # The listener max.connections does not bound (Kafka's protected listener), if any.
    inter_broker_listener: str | None = None


class KafkaServer:
    """Serves the registry's handlers on one or more listeners."""

    def __init__(
        self,
        registry: HandlerRegistry,
        server_state: Any,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.registry = registry
        self.state = server_state
        self.limits = limits or ConnectionLimits()
        self.bound: dict[str, tuple[str, int]] = {}  # listener name -> actual (host, port)
        self.connections = 0
        # Requests, errors and latency per API, for /metrics (updated by every connection).
        self.metrics = RequestMetrics()
        self._accepting: list[trio.CancelScope] = []  # one per listener
        self._processing_enabled = trio.Event()
        # Listeners waiting for enable_request_processing: name -> sockets (None: not bound).
        self._waiting: dict[str, list[trio.SocketListener] | None] = {}
        self._waiting_specs: dict[str, ListenerSpec] = {}
        self._draining = False
        self._idle = trio.Event()
        self._open: set[_Connection] = set()
        # Counted connections per listener type (broker, controller): see connection_quotas.
        self.quotas: dict[str, ConnectionQuotas] = {}
        self._slot_freed = trio.Event()  # set (and replaced) whenever a slot may have opened

    async def serve(self, listeners: list[ListenerSpec], *, task_status=trio.TASK_STATUS_IGNORED):
        """Bind the listeners, report readiness with ``{name: (host, port)}``, then serve until
        cancelled. A listener that is not ``early_start`` waits for
        :meth:`enable_request_processing`; with a fixed port it is bound only then, and its
        configured address is reported."""
        for kind in {spec.listener_type for spec in listeners}:
            self.quotas[kind] = ConnectionQuotas(
                [spec.name for spec in listeners if spec.listener_type == kind],
                self.limits.inter_broker_listener,
                self.limits.quotas,
            )
        async with trio.open_nursery() as nursery:
            for spec in listeners:
                if spec.early_start or spec.port == 0:
                    sockets = await self._bind(spec)
                else:
                    sockets = None
                    self.bound[spec.name] = (spec.host, spec.port)
                if not spec.early_start:
                    self._waiting[spec.name] = sockets
                    self._waiting_specs[spec.name] = spec
                nursery.start_soon(self._accept_loop, spec, sockets, nursery)
            task_status.started(dict(self.bound))

    async def enable_request_processing(self) -> None:
        """Start serving the listeners that are not ``early_start`` (Kafka's
        ``SocketServer.enableRequestProcessing``); returns once every one of them is bound, so
        a client may connect at once. Idempotent.

        Raises:
            OSError: a listener cannot be bound (its port is taken, say).
        """
        if self._processing_enabled.is_set():
            return
        for name, sockets in list(self._waiting.items()):
            if sockets is None:
                spec = self._waiting_specs[name]
                self._waiting[name] = await self._bind(spec)
        log.info("enabling request processing on every listener")
        self._processing_enabled.set()

    @property
    def processing_enabled(self) -> bool:
        return self._processing_enabled.is_set()

    async def _bind(self, spec: ListenerSpec) -> list[trio.SocketListener]:
        sockets = await trio.open_tcp_listeners(spec.port, host=spec.host)
        host, port = sockets[0].socket.getsockname()[:2]
        self.bound[spec.name] = (host, port)
        log.info("listening on %s://%s:%d (%s)", spec.name, host, port, spec.listener_type)
        return sockets

    async def drain(self) -> None:
        """Stop accepting; let each connection finish the request it is processing, then close
        it; return when none is left."""
        self._draining = True
        for scope in self._accepting:
            scope.cancel()
        for conn in list(self._open):
            conn.stop_after_current()
        if self.connections:
            await self._idle.wait()

    async def _accept_loop(self, spec: ListenerSpec, sockets, connections_nursery) -> None:
        with trio.CancelScope() as scope:
            self._accepting.append(scope)
            if not spec.early_start:
                try:
                    await self._processing_enabled.wait()
                except BaseException:  # drained or cancelled before it was enabled
                    for listener in self._waiting.pop(spec.name, None) or ():
                        listener.socket.close()
                    raise
                sockets = self._waiting.pop(spec.name)
            async with trio.open_nursery() as nursery:
                for listener in sockets:
                    nursery.start_soon(self._accept, spec, listener, connections_nursery)

    def update_connection_limits(self, config: ConnectionLimitsConfig) -> None:
        """New connection limits (dynamic broker configs): waiting acceptors look again, and
        connections past a lowered ``max.connections`` are closed."""
        if config == self.limits.quotas:
            return
        log.info("connection limits now %s", config)
        self.limits.quotas = config
        for quotas in self.quotas.values():
            quotas.update(config)
            self._close_excess(quotas)
        self._wake_acceptors()

    def _wake_acceptors(self) -> None:
        self._slot_freed.set()
        self._slot_freed = trio.Event()

    def _close_excess(self, quotas: ConnectionQuotas) -> None:
        """Close the least recently used connections of unprotected listeners while the group
        is past ``max.connections`` (Kafka's ``closeExcessConnections``)."""
        closing = [c for c in self._open if c.quotas is quotas and c.evicted]
        excess = quotas.excess() - len(closing)
        if excess <= 0:
            return
        candidates = sorted(
            (
                c
                for c in self._open
                if c.quotas is quotas and not c.evicted and not quotas.is_protected(c.spec.name)
            ),
            key=lambda c: c.last_active,
        )
        for conn in candidates[:excess]:
            log.info(
                "closing connection %d from %s on %s: the broker is past max.connections=%d",
                conn.id,
                conn.peer,
                conn.spec.name,
                quotas.config.max_connections,
            )
            conn.evict()

    async def _accept(self, spec: ListenerSpec, listener, nursery) -> None:
        quotas = self.quotas[spec.listener_type]
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as e:  # EMFILE and friends: keep serving the others
                    if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.warning("accept failed on %s: %s", spec.name, e)
                        await trio.sleep(0.1)
                        continue
                    raise
                try:
                    peer = stream.socket.getpeername()[0]
                except OSError:  # the client left before we asked its address
                    stream.socket.close()
                    continue
                try:
                    # Kafka's Acceptor blocks in waitForConnectionSlot with the socket accepted.
                    while not quotas.slot_available(spec.name):
                        await self._slot_freed.wait()
                except BaseException:  # drained or cancelled while waiting
                    stream.socket.close()
                    raise
                if not quotas.admit(spec.name, peer):
                    log.info(
                        "Rejected connection from %s, address already has the configured "
                        "maximum of %d connections.",
                        peer,
                        quotas.limit_for(peer),
                    )
                    stream.socket.close()
                    continue
                nursery.start_soon(self._serve_connection, spec, stream, quotas, peer)
                if quotas.is_protected(spec.name):
                    self._close_excess(quotas)

    async def _serve_connection(
        self, spec: ListenerSpec, stream: trio.SocketStream, quotas: ConnectionQuotas, peer: str
    ) -> None:
        conn = _Connection(self, spec, stream)
        conn.quotas = quotas
        self.connections += 1
        self._open.add(conn)
        try:
            await conn.run()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except _CloseConnection as e:
            log.info("closing connection %d from %s: %s", conn.id, conn.peer, e)
        except Exception:
            log.exception("connection %d from %s failed", conn.id, conn.peer)
        finally:
            self.connections -= 1
            self._open.discard(conn)
            quotas.release(spec.name, peer)
            self._wake_acceptors()
            if self._draining and not self.connections:
                self._idle.set()
            with trio.CancelScope(shield=True):
                await stream.aclose()


class _CloseConnection(Exception):
    """The connection must be closed (bad input); the message says why."""


class _Connection:
    def __init__(self, server: KafkaServer, spec: ListenerSpec, stream: trio.SocketStream):
        self.server = server
        self.spec = spec
        self.stream = stream
        self.id = next(_connection_ids)
        try:
            self.peer = stream.socket.getpeername()[0]
        except OSError:
            self.peer = "?"
        self.decoder = FrameDecoder(server.limits.max_frame_bytes)
        self._controller_listener = spec.listener_type == CONTROLLER  # Raft's Fetch, not ours
        self._scope: trio.CancelScope | None = None
        self._busy = False
        self._stopping = False
        # Who the client is, for the authorizer: from its certificate on a TLS listener with
        # ssl.client.auth, else User:ANONYMOUS; SASL sets it once the client authenticated.
        self.principal = ANONYMOUS
        self._tls = None  # a TlsChannel on a TLS listener, after the handshake
        self.sasl = sasl_shell.new_authenticator(spec, server.state)
        if self.sasl is not None:  # until authenticated (sasl.server.max.receive.size)
            self.decoder.max_frame_bytes = min(
                server.limits.max_frame_bytes, self.sasl.config.max_receive_size
            )
        self._close_after: str | None = None  # close once this answer is sent (failed auth)
        self.quotas: ConnectionQuotas | None = None  # the counts this connection is in
        self.last_active = trio.current_time()  # its last request: max.connections' LRU
        self.evicted = False  # closed to bring the broker back under max.connections

    def evict(self) -> None:
        """Close now, whatever is in progress (past ``max.connections``, as Kafka closes it)."""
        self.evicted = True
        if self._scope is not None:
            self._scope.cancel()

    def stop_after_current(self) -> None:
        """Close once the request being processed (if any) is answered (graceful shutdown)."""
        self._stopping = True
        if not self._busy and self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        with trio.CancelScope() as self._scope:
            if self._stopping or self.evicted:
                return
            if self.spec.tls is not None:
                # In this connection's own task, under a timeout: a slow or garbage handshake
                # stalls nobody else.
                try:
                    self._tls = await self.spec.tls.accept(self.stream)
                except HandshakeFailed as e:
                    raise _CloseConnection(f"failed authentication ({e})") from None
                self.principal = self._tls.principal
            await self._serve()

    async def _serve(self) -> None:
        """Read, then answer every complete frame in order; repeat until EOF or stop."""
        idle = self.server.limits.idle_timeout_s
        # One scope for the connection's life whose deadline is set only while waiting for a
        # request: setting a deadline costs ~4 us, a move_on_after per read ~10 us.
        with trio.CancelScope() as idle_scope:
            await self._serve_frames(idle_scope, idle)
            return
        raise _CloseConnection(f"idle for {idle:.0f} s (connections.max.idle.ms)")

    async def _serve_frames(self, idle_scope: trio.CancelScope, idle: float) -> None:
        decoder = self.decoder
        sock = self.stream.socket
        fd = sock.fileno()
        while True:
            first = True  # the read that brought these frames was a checkpoint already
            while True:
                try:
                    frame = decoder.next_frame()
                except MalformedMessage as e:
                    raise _CloseConnection(str(e)) from None
                if frame is None:
                    break
                if not first:
                    # One yield per request: a client pipelining many small requests in one
                    # read must not keep the other connections waiting.
                    await trio.lowlevel.checkpoint()
                first = False
                self.last_active = trio.current_time()
                self._busy = True
                try:
                    if self._stopping:  # the last request of a draining connection
                        with trio.CancelScope(shield=True):
                            await self._answer(frame)
                    else:
                        await self._answer(frame)
                finally:
                    self._busy = False
                if self._stopping:
                    return
            # Straight from the socket, as the writes go (trio's SocketStream.receive_some costs
            # ~10 us more per read in wrappers and checkpoints).
            target = decoder.receive_buffer()
            if target is not None:
                # A large request (a produce of many batches) is received in place: the
                # kernel's copy is the only one.
                read = _reader_into(fd, target)
            else:
                # Small frames share the decoder's buffer; a frame in progress is read in
                # large pieces (fewer wake-ups and joins).
                pending = decoder.pending_frame_size() or 0
                want = min(max(_RECV_BYTES, pending + 4 - decoder.buffered), _RECV_MAX_BYTES)
                read = _reader(fd, want)
            if self._tls is not None:  # the same socket reads, decrypted (a count into target)
                read = self._tls.reader(target, want if target is None else len(target))
            try:
                got = read()
            except BlockingIOError:
                got = None
            if got is None:
                while got is None:
                    idle_scope.deadline = trio.current_time() + idle
                    await trio.lowlevel.wait_readable(sock)
                    if idle_scope.cancel_called:  # readable just as the idle timeout expired
                        raise _CloseConnection(f"idle for {idle:.0f} s (connections.max.idle.ms)")
                    idle_scope.deadline = math.inf
                    try:
                        got = read()
                    except BlockingIOError:
                        got = None
            else:
                # Data already there: yield once anyway, as the wait would have (one yield per
                # read keeps a pipelining client from starving the other connections).
                await trio.lowlevel.checkpoint()
            if not got:
                if decoder.buffered:
                    log.debug("connection %d closed mid-frame", self.id)
                return
            if target is not None:
                decoder.advance(got)
            else:
                decoder.receive_data(got)

    async def _answer(self, frame: bytes) -> None:
        parts = await self._handle(frame)
        if parts:
            await self._send(parts)
        if self._close_after is not None:
            raise _CloseConnection(self._close_after)

    async def _handle(self, frame: bytes) -> list[Any] | None:
        if self.sasl is not None and self.sasl.expects_raw_token:  # after SaslHandshake v0
            parts, self._close_after = await sasl_shell.answer_raw_token(self, self.sasl, frame)
            return parts
        try:
            request = decode_request(frame)
        except UnsupportedVersion as e:
            if e.api_key == API_VERSIONS_KEY and e.correlation_id is not None:
                return [api_versions_fallback_response(e.correlation_id)]
            raise _CloseConnection(str(e)) from None
        except MalformedMessage as e:
            raise _CloseConnection(str(e)) from None
        api_key, version = request.api.key, request.version
        spec = self.server.registry.get(api_key, self.spec.listener_type)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            if api_key == API_VERSIONS_KEY:
                return [api_versions_fallback_response(request.correlation_id)]
            raise _CloseConnection(
                f"{request.api.name} v{version} is not served on listener {self.spec.name}"
            )
        if self.sasl is not None:  # before authentication only ApiVersions and SASL
            admission = self.sasl.admit(api_key, request.api.name, int(trio.current_time() * 1000))
            if admission is Admission.CLOSE:
                raise _CloseConnection(self.sasl.close_reason)
            if admission is Admission.SASL:
                parts, self._close_after = await sasl_shell.answer_request(self, self.sasl, request)
                return parts
        ctx = RequestContext(
            header=request.header,
            api_key=api_key,
            version=version,
            correlation_id=request.correlation_id,
            client_id=request.header.client_id,
            listener_name=self.spec.name,
            listener_type=self.spec.listener_type,
            client_host=self.peer,
            connection_id=self.id,
            server=self.server.state,
            principal=self.principal,
        )
        metrics = self.server.metrics
        started = perf_counter()
        try:
            response = await spec.handler(ctx, request.body)
        except KafkaError as e:
            metrics.record(api_key, perf_counter() - started)
            metrics.count_error(api_key, e.code)
            response = _error_response(request.api.key, e.code, e.message)
        except Exception:
            metrics.record(api_key, perf_counter() - started)
            metrics.count_error(api_key, ErrorCode.UNKNOWN_SERVER_ERROR)
            log.exception("%s v%d handler failed", request.api.name, version)
            response = _error_response(request.api.key, ErrorCode.UNKNOWN_SERVER_ERROR, None)
        else:
            # The time to the response (its encoding and the write excluded), as the handler
            # saw it: long polls and acks=all waits included, as in Kafka's TotalTimeMs.
            metrics.record(api_key, perf_counter() - started)
            # The broker's Produce and Fetch count their partitions' errors where they set
            # them (Fetch's top-level one, a session error, is counted here); an encoded
            # answer is a shared one (ApiVersions, a cached Metadata) with no caller's errors.
            if response is not None and type(response) is not EncodedResponse:
                if api_key > FETCH_KEY or self._controller_listener:
                    metrics.count_response_errors(api_key, response)
                elif api_key == FETCH_KEY and response.error_code:
                    metrics.count_error(api_key, response.error_code)
        if response is None:
            return None
        if type(response) is EncodedResponse:
            return response.parts(request.correlation_id)
        return encode_response(api_key, version, request.correlation_id, response)

    async def _send(self, parts: list[Any]) -> None:
        """Write a response: byte parts with ``os.writev`` (no joining copy), file slices with
        ``os.sendfile``. Waits only while the socket's send buffer is full. On TLS, one
        encrypted write of them all (see kcore/security/tls_transport.py)."""
        if self._tls is not None:
            await self._tls.send(parts)
            return
        sock = self.stream.socket
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the connection is closed")
        buffers: list[Any] = []
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                if len(part):
                    buffers.append(part)
                continue
            if buffers:
                await _writev_all(sock, fd, buffers)
                buffers = []
            await _sendfile(sock, fd, part)
        if buffers:
            await _writev_all(sock, fd, buffers)


def resolve_host(host: str) -> str:
    """A host name's address for ``max.connections.per.ip.overrides``: the first IPv4 one if
    any (Java's ``InetAddress.getByName`` prefers IPv4), else the first. Raises OSError."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0]


def _error_response(api_key: int, code: int, message: str | None):
    """A response carrying ``code`` in its top-level error fields, or None if it has none
    (the connection is then closed: there is no way to report the error)."""
    cls = APIS[api_key].response.cls
    response = cls()
    if "error_code" not in cls._fields:
        raise _CloseConnection(
            f"{APIS[api_key].name} failed with error {code} and has no error field"
        )
    response.error_code = int(code)
    if "error_message" in cls._fields:
        response.error_message = message
    return response


async def _writev_all(sock, fd: int, buffers: list[Any]) -> None:
    """Write every buffer, in order (partial writes resumed once the socket is writable)."""
    while buffers:
        try:
            sent = os.writev(fd, buffers[:_IOV_MAX])
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        while sent:
            first = buffers[0]
            size = len(first)
            if sent >= size:
                sent -= size
                buffers.pop(0)
            else:
                buffers[0] = memoryview(first)[sent:]
                sent = 0


async def _sendfile(sock, fd: int, file_slice) -> None:
    """Send a file slice with ``os.sendfile``: segment bytes never pass through Python."""
    in_fd = file_slice.fileno()
    offset, remaining = file_slice.position, file_slice.length
    while remaining:
        try:
            sent = os.sendfile(fd, in_fd, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:  # the file is shorter than the slice: it was truncated under us
            raise _CloseConnection("segment file shrank while it was being sent")
        offset += sent
        remaining -= sent
