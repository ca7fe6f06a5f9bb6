"""One connection to one broker: a sans-IO core and a thin Trio shell with pipelining.

Theory of operation
-------------------
Kafka answers the requests of one connection **in the order they were sent**, each response
carrying the request's correlation id. That makes the client side a queue:

* :class:`ConnectionCore` (no I/O, no time) assigns correlation ids, encodes request frames, and
  keeps the in-flight table: a FIFO of :class:`InFlight` ``(api_key, version, correlation_id)``
  for every request that expects a response (Produce with ``acks=0`` does not). Bytes from the
  socket go in with :meth:`~ConnectionCore.receive_data`; :meth:`~ConnectionCore.next_response`
  cuts a frame, checks that its correlation id is the head of the queue, and decodes it with the
  API and version of *that* request (the response does not say which API it answers). A
  correlation id that is not the head — an out-of-order answer, or one never asked for — a frame
  larger than ``max_frame_bytes``, or a body that does not decode, is a :class:`ProtocolError`:
  the stream can no longer be trusted and the core refuses all further use.

* :class:`BrokerConnection` moves bytes. Many tasks may call :meth:`~BrokerConnection.request`
  at once (pipelining): a writer lock serialises ``send_all`` so that frames go out whole and in
  correlation-id order. There is **no background reader task**: Trio has no ownerless tasks, and
  a reader would need a nursery from every caller. Instead the waiting callers take turns being
  the reader (the way httpcore multiplexes HTTP/2 streams over one socket): the first waiter
  reads the socket and hands each decoded response to its waiter (per-request ``trio.Event``);
  when its own response has arrived — or it is cancelled — it passes the reader role to another
  waiter. Every byte is therefore read by a task its caller owns, a caller's timeout bounds only
  its own wait, and ``await BrokerConnection.connect(...)`` returns a plain object, like
  ``trio.open_tcp_stream``. ``SocketStream.receive_some`` loses no data when cancelled, which is
  what makes handing the role over safe.

* A request whose caller gave up (timeout, cancellation) stays in the in-flight table so that the
  order still matches; its response is read and dropped when it comes. The connection stays open.

* Writing a frame is atomic: ``send_all`` runs shielded from the caller's cancellation, bounded
  by the request timeout, because a half-written frame would corrupt every later request. If it
  cannot finish, the connection is failed.

* Any failure of the stream (EOF, reset, a protocol error, :meth:`~BrokerConnection.aclose`)
  fails **every** in-flight request at once with :class:`ConnectionLost` (or its subclass
  :class:`ProtocolError`) and closes the socket; later requests fail at once. Nobody hangs.

* SASL re-authentication (KIP-368): when the broker's last SaslAuthenticate answer gave the
  session a lifetime, the first request sent after 85-95 % of it first logs in again on the same
  connection (SaslHandshake + SaslAuthenticate, under the writer lock so that nothing goes out
  between them); requests already in flight are answered before it, in order, as usual. An idle
  connection does nothing: the broker closes only a connection whose next request is late.

Version negotiation (:meth:`BrokerConnection.connect`) follows Kafka's clients (KIP-511): send
ApiVersions at the highest version the codec knows; a broker that does not know it answers with
a **v0** body carrying UNSUPPORTED_VERSION (35) and its own ApiVersions range, and the client
retries at ``min(broker max, codec max)`` (v0 when the range is missing), always strictly lower,
so a misbehaving broker cannot make it loop. The broker's ranges are kept, and
:meth:`~BrokerConnection.request` picks ``min(broker max, codec max)`` for each API unless the
caller gives a version.
"""

from __future__ import annotations

import math
import ssl
from collections import deque
from typing import Any, NamedTuple

import trio

import kcore
from kcore.client.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    ConnectionLost,
    ConnectTimeout,
    ProtocolError,
    RequestTimeout,
    UnsupportedVersionError,
)
from kcore.protocol import APIS, FrameDecoder, MalformedMessage, decode_response, encode_request
from kcore.protocol import messages as m
from kcore.protocol.api import API_VERSIONS_KEY, UNSUPPORTED_VERSION, Api
from kcore.protocol.errors import KafkaError
from kcore.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from kcore.protocol.messages import Message
from kcore.protocol.primitives import INT16, INT32
from kcore.security.sasl_client import (
    SaslClientError,
    SaslClientExchange,
    SaslClientSettings,
    reauthentication_delay_ms,
)

__all__ = [
    "BrokerConnection",
    "ConnectionCore",
    "InFlight",
    "api_of",
    "expects_response",
]

PRODUCE_KEY = 0
DEFAULT_CLIENT_ID = "kcore"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds, TCP connect + ApiVersions
DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds, Kafka's request.timeout.ms default
_MAX_CORRELATION_ID = 0x7FFFFFFF
_RECV_MIN = 64 * 1024
_RECV_MAX = 4 * 1024 * 1024

_API_BY_REQUEST: dict[type, Api] = {api.request.cls: api for api in APIS.values()}


def api_of(body: Message) -> Api:
    """The API a request body belongs to (``m.FetchRequest(...)`` → the Fetch API)."""
    try:
        return _API_BY_REQUEST[type(body)]
    except KeyError:
        raise TypeError(f"{type(body).__qualname__} is not a request message") from None


def expects_response(api_key: int, body: Message) -> bool:
    """Whether the broker answers this request: all do except Produce with ``acks=0``."""
    return not (api_key == PRODUCE_KEY and body.acks == 0)


def _fresh(err: BaseException) -> BaseException:
    """A new exception like ``err`` (one instance must not be raised in several tasks)."""
    exc = type(err)(*err.args)
    exc.__cause__ = err
    return exc


class InFlight(NamedTuple):
    """A request waiting for its response: what is needed to decode the answer."""

    api_key: int
    version: int
    correlation_id: int


class ConnectionCore:
    """The sans-IO half of a client connection: correlation ids, framing, in-flight matching.

    Usage::

        core = ConnectionCore(client_id="me")
        entry, frame, expect = core.send_request(m.MetadataRequest(topics=[]), 1)
        ...write frame...
        core.receive_data(bytes_from_socket)
        while (got := core.next_response()) is not None:
            entry, body = got          # entry is the InFlight this body answers

    Correlation ids count up from ``first_correlation_id`` and wrap from 2**31 - 1 to 0.
    After a :class:`ProtocolError` every method raises it again: the byte stream is lost.
    """

    __slots__ = ("client_id", "_decoder", "_in_flight", "_next_id", "_error")

    def __init__(
        self,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        first_correlation_id: int = 0,
    ) -> None:
        self.client_id = client_id
        self._decoder = FrameDecoder(max_frame_bytes)
        self._in_flight: deque[InFlight] = deque()
        self._next_id = first_correlation_id & _MAX_CORRELATION_ID
        self._error: ProtocolError | None = None

    # -- sending -------------------------------------------------------------------------

    def send_request(
        self, body: Message, version: int, *, expect_response: bool | None = None
    ) -> tuple[InFlight, bytes, bool]:
        """Encode a request frame (size prefix included) and register it as in flight.

        ``expect_response`` defaults to :func:`expects_response`. Returns ``(entry, frame,
        expect_response)``; the frame must be written before any later call's frame. An
        encoding failure (``ValueError`` for a value the version cannot carry, an unknown
        version) raises before anything is registered.
        """
        self._check()
        api = api_of(body)
        if version not in api.versions:
            raise UnsupportedVersionError(
                f"the codec has no {api.name} v{version} (it knows {api.versions})"
            )
        if expect_response is None:
            expect_response = expects_response(api.key, body)
        correlation_id = self._next_id
        frame = encode_request(api.key, version, correlation_id, self.client_id, body)
        self._next_id = (correlation_id + 1) & _MAX_CORRELATION_ID
        entry = InFlight(api.key, version, correlation_id)
        if expect_response:
            self._in_flight.append(entry)
        return entry, frame, expect_response

    # -- receiving -----------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the socket (EOF is the shell's business, not an empty call)."""
        self._check()
        self._decoder.receive_data(data)

    def receive_buffer(self) -> memoryview | None:
        """Where the socket's next bytes may go directly (a large response being received), or
        ``None``: then read and call :meth:`receive_data`. See ``FrameDecoder.receive_buffer``."""
        self._check()
        return self._decoder.receive_buffer()

    def advance(self, n: int) -> None:
        """``n`` bytes were received into the last :meth:`receive_buffer`."""
        self._decoder.advance(n)

    def next_response(self) -> tuple[InFlight, Message] | None:
        """The next complete response and the request it answers, or ``None`` for now.

        Raises :class:`ProtocolError` for a frame that is too large, a correlation id that is
        not the oldest in flight, or a body that does not decode.
        """
        self._check()
        try:
            frame = self._decoder.next_frame()
        except MalformedMessage as e:
            raise self._broken(f"bad response frame: {e}") from None
        if frame is None:
            return None
        if len(frame) < 4:
            raise self._broken(f"a {len(frame)}-byte response has no correlation id")
        (correlation_id,) = INT32.unpack_from(frame, 0)
        if not self._in_flight:
            raise self._broken(f"response with correlation id {correlation_id}, none in flight")
        head = self._in_flight[0]
        if correlation_id != head.correlation_id:
            if any(e.correlation_id == correlation_id for e in self._in_flight):
                raise self._broken(
                    f"out-of-order response: correlation id {correlation_id} "
                    f"arrived before {head.correlation_id}"
                )
            raise self._broken(
                f"unknown correlation id {correlation_id} (expected {head.correlation_id})"
            )
        self._in_flight.popleft()
        try:
            body = self._decode(head, frame)
        except MalformedMessage as e:
            name = APIS[head.api_key].name
            raise self._broken(f"undecodable {name} v{head.version} response: {e}") from None
        return head, body

    @staticmethod
    def _decode(entry: InFlight, frame: bytes) -> Message:
        key, version = entry.api_key, entry.version
        if key == API_VERSIONS_KEY and version > 0:
            # A broker that does not know our ApiVersions version answers with a v0 body and
            # UNSUPPORTED_VERSION (KIP-511). The error code sits right after the correlation id
            # (the ApiVersions response header is always v0), so look before decoding; and, as
            # Kafka's ApiVersionsResponse.parse does, fall back to v0 if the body does not parse.
            if len(frame) >= 6 and INT16.unpack_from(frame, 4)[0] == UNSUPPORTED_VERSION:
                return decode_response(key, 0, frame)[1]
            try:
                return decode_response(key, version, frame)[1]
            except MalformedMessage:
                return decode_response(key, 0, frame)[1]
        return decode_response(key, version, frame)[1]

    # -- state ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> tuple[InFlight, ...]:
        """Requests sent and not yet answered, oldest first."""
        return tuple(self._in_flight)

    def bytes_wanted(self) -> int:
        """A hint for the next read: the rest of the frame being received, at least 1."""
        size = self._decoder.pending_frame_size()
        if size is None or size < 0:
            return 1
        return max(1, size + 4 - self._decoder.buffered)

    @property
    def error(self) -> ProtocolError | None:
        return self._error

    def _broken(self, message: str) -> ProtocolError:
        self._error = ProtocolError(message)
        self._in_flight.clear()
        return self._error

    def _check(self) -> None:
        if self._error is not None:
            raise _fresh(self._error)


class _Pending:
    """One caller waiting for one response."""

    __slots__ = ("entry", "event", "waiting", "done", "response", "error")

    def __init__(self, entry: InFlight) -> None:
        self.entry = entry
        self.event = trio.Event()
        self.waiting = False  # the caller is in _wait (not still sending)
        self.done = False
        self.response: Message | None = None
        self.error: BaseException | None = None


_DEFAULT: Any = object()


async def _tls_handshake(
    stream: trio.SocketStream, context: ssl.SSLContext, host: str, port: int
) -> trio.SSLStream:
    """TLS over ``stream``, the broker's certificate checked (and its host name, when the
    context says so). A TLS stream is safe for the reader hand-over: after the handshake a
    cancelled ``receive_some`` loses nothing either (TLS 1.3 has no renegotiation)."""
    tls = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as e:
        await trio.aclose_forcefully(stream)
        raise ConnectionFailed(
            f"TLS handshake with {host}:{port} failed: {e.__cause__ or e}"
        ) from e
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return tls


class BrokerConnection:
    """A pipelined connection to one broker (see the module docstring for how it works).

    Open one with :meth:`connect`; use it from any number of tasks; close it with
    :meth:`aclose` or ``async with``::

        async with await BrokerConnection.connect("127.0.0.1", 9092, client_id="tool") as conn:
            metadata = await conn.request(m.MetadataRequest(topics=None))

    Attributes: ``host``, ``port``; ``api_versions`` — the broker's ``{api_key: (min, max)}``;
    ``api_versions_response`` and ``api_versions_version`` — the ApiVersions answer and the
    version it was asked at; ``request_timeout`` — the default per-request timeout (seconds,
    ``None`` for none); ``reauthenticate_at`` — when (Trio time) the next request logs in again
    (KIP-368; ``None``: never), ``reauthentications`` — how many times it did.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        core: ConnectionCore,
        *,
        host: str = "?",
        port: int = 0,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        """Wrap an open stream. Most callers want :meth:`connect`, which also negotiates."""
        self.host = host
        self.port = port
        self.request_timeout = request_timeout
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_response: Message | None = None
        self.api_versions_version: int | None = None
        self._stream = stream
        self._core = core
        self._send_lock = trio.Lock()
        self._pending: dict[int, _Pending] = {}  # correlation id -> live waiter, oldest first
        self._reading = False  # some waiter is the reader
        self._error: ConnectionLost | None = None
        # KIP-368: the login to repeat, and when (trio time), once the broker gave the session
        # a lifetime; no re-authentication is due while it is None.
        self._sasl: SaslClientSettings | None = None
        self.reauthenticate_at: float | None = None
        self.reauthentications = 0

    # -- opening -------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        client_software_name: str = "kcore",
        client_software_version: str = kcore.__version__,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientSettings | None = None,
    ) -> BrokerConnection:
        """Open a TCP connection (TLS over it with ``ssl_context``: ``security.protocol=SSL`` or
        ``SASL_SSL``) and negotiate API versions with ApiVersions, then, with ``sasl``,
        authenticate (SaslHandshake v1 and SaslAuthenticate, KIP-152).

        ``connect_timeout`` bounds the TCP connect and the ApiVersions exchange together;
        ``request_timeout`` is the default timeout of later requests; ``max_frame_bytes`` the
        largest response frame accepted. The software name/version are sent in ApiVersions
        v3+ (KIP-511) and must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``.

        Raises :class:`ConnectTimeout` when ``connect_timeout`` passes, and
        :class:`ConnectionFailed` when the broker cannot be reached, breaks the connection or
        the protocol during ApiVersions, or answers it with an error (the cause is chained);
        :class:`AuthenticationFailed` (a ConnectionFailed) when it refuses the SASL login.
        """
        limit = math.inf if connect_timeout is None else connect_timeout
        with trio.move_on_after(limit):
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as e:
                raise ConnectionFailed(f"cannot connect to {host}:{port}: {e}") from e
            if ssl_context is not None:
                stream = await _tls_handshake(stream, ssl_context, host, port)
            core = ConnectionCore(client_id=client_id, max_frame_bytes=max_frame_bytes)
            conn = cls(stream, core, host=host, port=port, request_timeout=request_timeout)
            try:
                await conn._negotiate(client_software_name, client_software_version)
                if sasl is not None:
                    await conn._authenticate(sasl)
            except ConnectionLost as e:
                await conn.aclose()
                raise ConnectionFailed(
                    f"{host}:{port} failed while answering ApiVersions: {e}"
                ) from e
            except BaseException:
                await conn.aclose()
                raise
            return conn
        raise ConnectTimeout(f"connecting to {host}:{port} took longer than {connect_timeout} s")

    async def _negotiate(self, software_name: str, software_version: str) -> None:
        api = APIS[API_VERSIONS_KEY]
        version = api.max_version
        body = m.ApiVersionsRequest(
            client_software_name=software_name, client_software_version=software_version
        )
        while True:
            response = await self._roundtrip(api, version, body, True)
            if response.error_code == UNSUPPORTED_VERSION:
                # The v0 fallback lists the broker's ApiVersions range (or nothing: then v0).
                offered = next(
                    (k.max_version for k in response.api_keys if k.api_key == API_VERSIONS_KEY),
                    0,
                )
                retry = min(offered, api.max_version)
                if retry >= version or retry < api.min_version:
                    raise ConnectionFailed(
                        f"{self.address} refused ApiVersions v{version} "
                        f"and offered v{offered}: no version in common"
                    )
                version = retry
                continue
            if response.error_code != 0:
                raise ConnectionFailed(
                    f"{self.address} answered ApiVersions v{version} with "
                    f"{KafkaError(response.error_code)}"
                )
            break
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        self.api_versions_response = response
        self.api_versions_version = version

    async def _authenticate(self, sasl: SaslClientSettings, *, locked: bool = False) -> None:
        """The SASL exchange: right after ApiVersions (the broker serves nothing else before
        it), and again on the same connection before the session the broker answered expires
        (KIP-368, :meth:`_reauthenticate`; ``locked``: the caller holds the send lock)."""
        handshake = await self._roundtrip(
            APIS[17], 1, m.SaslHandshakeRequest(mechanism=sasl.mechanism), True, locked=locked
        )
        if handshake.error_code:
            raise AuthenticationFailed(
                f"{self.address} refused SASL mechanism {sasl.mechanism} "
                f"({KafkaError(handshake.error_code)}); it enables "
                f"{', '.join(handshake.mechanisms) or 'none'}"
            )
        exchange = SaslClientExchange(sasl)
        token: bytes | None = exchange.first_token()
        version = min(self.api_versions.get(36, (0, 0))[1], APIS[36].max_version)
        while token is not None:
            response = await self._roundtrip(
                APIS[36], version, m.SaslAuthenticateRequest(auth_bytes=token), True, locked=locked
            )
            if response.error_code:
                raise AuthenticationFailed(
                    f"{self.address}: SASL/{sasl.mechanism} authentication as "
                    f"{sasl.username} failed: {response.error_message or response.error_code}"
                )
            try:
                token = exchange.evaluate(bytes(response.auth_bytes))
            except SaslClientError as e:
                raise AuthenticationFailed(f"{self.address}: {e}") from None
        self._sasl = sasl
        delay_ms = reauthentication_delay_ms(getattr(response, "session_lifetime_ms", 0) or 0)
        self.reauthenticate_at = None if delay_ms is None else trio.current_time() + delay_ms / 1000

    async def _reauthenticate(self) -> None:
        """Log in again on this connection (KIP-368). The send lock is held throughout, so no
        request goes out between the SASL frames; requests already in flight are answered
        first (the broker answers in order) and reach their callers as usual. Shielded and
        bounded by the request timeout: an exchange cut in half would leave the session in
        the broker's re-authentication state. A refused login fails the connection."""
        async with self._send_lock:
            if self.reauthenticate_at is None or trio.current_time() < self.reauthenticate_at:
                return  # another task did it while this one waited for the lock
            self.reauthenticate_at = None
            limit = self.request_timeout
            with trio.CancelScope(shield=True) as scope:
                if limit is not None:
                    scope.deadline = trio.current_time() + limit
                try:
                    await self._authenticate(self._sasl, locked=True)
                except AuthenticationFailed as e:
                    await self._fail(ConnectionLost(f"re-authentication failed: {e}"))
                    raise _fresh(self._error) from e
            if scope.cancelled_caught:
                await self._fail(
                    ConnectionLost(f"re-authenticating to {self.address} took over {limit} s")
                )
                raise _fresh(self._error)
            self.reauthentications += 1

    # -- versions ------------------------------------------------------------------------

    def version_for(self, api_key: int) -> int:
        """The version :meth:`request` uses for an API: ``min(broker max, codec max)``.

        Raises :class:`UnsupportedVersionError` when the broker does not list the API or the
        two ranges do not overlap.
        """
        api = APIS.get(api_key)
        if api is None:
            raise UnsupportedVersionError(f"the codec does not know API key {api_key}")
        offered = self.api_versions.get(api_key)
        if offered is None:
            raise UnsupportedVersionError(f"{self.address} does not support {api.name}")
        lo, hi = max(offered[0], api.min_version), min(offered[1], api.max_version)
        if lo > hi:
            raise UnsupportedVersionError(
                f"{api.name}: {self.address} supports v{offered[0]}-{offered[1]}, "
                f"the codec v{api.min_version}-{api.max_version}"
            )
        return hi

    def supports(self, api_key: int, version: int) -> bool:
        """Whether both the broker and the codec support this API version."""
        api = APIS.get(api_key)
        offered = self.api_versions.get(api_key)
        return (
            api is not None
            and offered is not None
            and version in api.versions
            and offered[0] <= version <= offered[1]
        )

    # -- requests ------------------------------------------------------------------------

    async def request(
        self,
        body: Message,
        version: int | None = None,
        *,
        timeout: float | None = _DEFAULT,
    ) -> Any:
        """Send a request and return its decoded response body.

        ``version`` defaults to :meth:`version_for` the body's API; an explicit version is
        sent as is (the broker may refuse it). ``timeout`` (seconds; ``None`` for none)
        defaults to ``request_timeout`` and covers waiting for the writer, writing and waiting
        for the answer. Produce with ``acks=0`` returns ``None`` once written.

        Raises :class:`RequestTimeout` (the connection stays open, the late response is
        dropped), :class:`ConnectionLost` / :class:`ProtocolError` (the connection is closed),
        :class:`UnsupportedVersionError`, or what the codec raises for a body the version
        cannot carry. Error codes inside the response are not raised; see
        :func:`kcore.client.errors.raise_for_error`.
        """
        api = api_of(body)
        if version is None:
            version = self.version_for(api.key)
        elif version not in api.versions:
            raise UnsupportedVersionError(
                f"the codec has no {api.name} v{version} (it knows {api.versions})"
            )
        if timeout is _DEFAULT:
            timeout = self.request_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout):
            due = self.reauthenticate_at
            if due is not None and trio.current_time() >= due:
                # Before this request, not after: the broker closes a connection whose next
                # request comes after the session's end (checked when it is sent, as Kafka's
                # clients do, so an idle connection costs nothing).
                await self._reauthenticate()
            return await self._roundtrip(api, version, body, expects_response(api.key, body))
        raise RequestTimeout(
            f"{api.name} v{version} to {self.address}: no response within {timeout} s"
        )

    async def _roundtrip(
        self, api: Api, version: int, body: Message, expect: bool, *, locked: bool = False
    ) -> Any:
        self._check_open()
        if locked:  # the caller holds the send lock (re-authentication)
            pending = await self._send_request(body, version, expect)
        else:
            async with self._send_lock:
                pending = await self._send_request(body, version, expect)
        if pending is None:
            return None
        return await self._wait(pending)

    async def _send_request(self, body: Message, version: int, expect: bool) -> _Pending | None:
        self._check_open()
        entry, frame, expect = self._core.send_request(body, version, expect_response=expect)
        pending = None
        if expect:
            pending = self._pending[entry.correlation_id] = _Pending(entry)
        await self._send(frame)
        return pending

    async def _send(self, frame: bytes) -> None:
        # Shielded: a frame cut in half would corrupt the stream for every other request.
        limit = self.request_timeout
        with trio.CancelScope(shield=True) as scope:
            if limit is not None:
                scope.deadline = trio.current_time() + limit
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                if self._error is None:
                    await self._fail(ConnectionLost(f"writing to {self.address} failed: {e}"))
                raise _fresh(self._error) from e
        if scope.cancelled_caught:
            await self._fail(
                ConnectionLost(f"writing a request to {self.address} took over {limit} s")
            )
            raise _fresh(self._error)

    async def _wait(self, pending: _Pending) -> Any:
        pending.waiting = True
        try:
            while not pending.done:
                if self._reading:
                    pending.event = trio.Event()
                    await pending.event.wait()
                else:
                    self._reading = True
                    try:
                        await self._read_until(pending)
                    finally:
                        self._reading = False
        finally:
            pending.waiting = False
            if not pending.done:
                # Given up (timeout/cancel): the entry stays in the core's in-flight table so
                # that ordering still holds; the response is dropped when it arrives.
                self._pending.pop(pending.entry.correlation_id, None)
            if not self._reading:
                self._hand_off()
        if pending.error is not None:
            raise _fresh(pending.error)
        return pending.response

    def _hand_off(self) -> None:
        """Wake one waiting caller to take over reading (the oldest: its answer is next)."""
        for p in self._pending.values():
            if p.waiting:
                p.event.set()
                return

    async def _read_until(self, pending: _Pending) -> None:
        core = self._core
        # A plain TCP stream lets a large response be received in place (one copy, the
        # kernel's); a wrapped one (TLS) goes through receive_some.
        sock = getattr(self._stream, "socket", None)
        while not pending.done:
            try:
                target = None if sock is None else core.receive_buffer()
                if target is not None:
                    n = await sock.recv_into(target)
                    data = None
                else:
                    want = min(max(core.bytes_wanted(), _RECV_MIN), _RECV_MAX)
                    data = await self._stream.receive_some(want)
                    n = len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                await self._fail(ConnectionLost(f"connection to {self.address} broke: {e}"))
                return
            if not n:
                await self._fail(ConnectionLost(f"{self.address} closed the connection"))
                return
            try:
                if data is None:
                    core.advance(n)
                else:
                    core.receive_data(data)
                while (got := core.next_response()) is not None:
                    entry, body = got
                    p = self._pending.pop(entry.correlation_id, None)
                    if p is None:
                        continue  # its caller gave up
                    p.done = True
                    p.response = body
                    p.event.set()
            except ProtocolError as e:
                await self._fail(e)
                return

    # -- closing -------------------------------------------------------------------------

    async def _fail(self, error: ConnectionLost) -> None:
        """Fail every in-flight request with ``error`` and close the stream (idempotent)."""
        if self._error is None:
            self._error = error
        waiting, self._pending = list(self._pending.values()), {}
        for p in waiting:
            p.done = True
            p.error = self._error
            p.event.set()
        await trio.aclose_forcefully(self._stream)

    def _check_open(self) -> None:
        if self._error is not None:
            raise _fresh(self._error)

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; every request then fails at once."""
        return self._error is not None

    @property
    def error(self) -> ConnectionLost | None:
        """Why the connection is closed, or ``None`` while it is open."""
        return self._error

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered (including those whose callers gave up)."""
        return len(self._core.in_flight)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def aclose(self) -> None:
        """Close the connection; in-flight requests fail with :class:`ConnectionLost`."""
        await self._fail(ConnectionLost(f"connection to {self.address} was closed by the client"))

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.in_flight} in flight"
        return f"<BrokerConnection {self.address} {state}>"
