"""The TLS side of a connection: handshake, principal, reads and response writes (Trio shell).

A TLS listener holds a :class:`TlsListener`: its current ``ssl.SSLContext`` (replaced when the
broker's dynamic ``listener.name.<l>.ssl.*`` configs change: new connections get the new
certificate, open ones keep the session they have) and its principal mapper.

Each accepted connection does its handshake in its **own** task, bounded by
``kcore.ssl.handshake.timeout.ms``: a slow client, a port scanner or a PLAINTEXT client (whose
first bytes are no ClientHello) costs only its own task, and is closed with
:class:`HandshakeFailed` (logged with the client's address, as Kafka logs a failed SSL
authentication). The channel (:class:`TlsChannel`, memory BIOs over the raw socket, as the
plaintext path reads and writes the fd) then decrypts every record a socket read completes at
once, and writes a response from one buffer: the byte parts and the file slices of a fetch are
gathered into it (a slice with one ``os.preadv`` straight into it; ``sendfile`` is impossible
when the kernel does not do the encryption), then encrypted and written in 256 KiB pieces, with
no per-part Python work.

The principal (Kafka's ``DefaultKafkaPrincipalBuilder``): ``User:ANONYMOUS`` without a client
certificate (``ssl.client.auth=none``, or ``requested`` and none sent), else ``User:`` + the
certificate subject (RFC 2253) through ``ssl.principal.mapping.rules``; a subject no rule maps
fails the handshake.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Mapping
from typing import Any

import trio

from kcore.log.config import InvalidConfigError
from kcore.security.principal_mapping import NoMatchingRule, certificate_principal
from kcore.security.tls_config import (
    TLS_PROTOCOLS,
    TlsSettings,
    build_server_context,
    is_tls_dynamic_key,
    keystore_identity,
    resolve,
)

__all__ = ["ANONYMOUS", "HandshakeFailed", "TlsChannel", "TlsListener", "TlsListeners"]

log = logging.getLogger(__name__)

_RAW_READ_BYTES = 256 * 1024  # ciphertext per socket read: 16 records of 16 KiB
_WRITE_PIECE_BYTES = 256 * 1024  # plaintext encrypted, then written, at a time

ANONYMOUS = "User:ANONYMOUS"


class HandshakeFailed(Exception):
    """The TLS handshake did not complete (the message says why); close the connection."""


class TlsListener:
    """One TLS listener's current context and principal mapper."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.context = build_server_context(settings)
        self.mapper = settings.principal_mapper()
        self.timeout_s = settings.handshake_timeout_s
        self.identity = keystore_identity(settings)
        self._files = _file_stamps(settings)

    def check(self, settings: TlsSettings) -> ssl.SSLContext:
        """The context ``settings`` give, if this listener may switch to them: they load, and
        the certificate keeps its subject and SANs unless ``ssl.allow.dn.changes`` /
        ``ssl.allow.san.changes`` (Kafka's ``SslFactory`` rule: clients that pinned the
        broker's identity keep trusting it). Raises InvalidConfigError."""
        context = build_server_context(settings)
        settings.principal_mapper()
        new = keystore_identity(settings)
        old = self.identity
        if old is not None and new is not None:
            if new[0] != old[0] and not settings.flag("ssl.allow.dn.changes"):
                raise InvalidConfigError(
                    "ssl.allow.dn.changes",
                    f"listener {settings.listener}: Keystore DistinguishedName does not match: "
                    f"existing={old[0]}, new={new[0]} (set ssl.allow.dn.changes=true to allow)",
                )
            if new[1] != old[1] and not settings.flag("ssl.allow.san.changes"):
                raise InvalidConfigError(
                    "ssl.allow.san.changes",
                    f"listener {settings.listener}: Keystore SubjectAltNames do not match: "
                    f"existing={list(old[1])}, new={list(new[1])} (set "
                    "ssl.allow.san.changes=true to allow)",
                )
        return context

    def reconfigure(self, settings: TlsSettings) -> bool:
        """Serve ``settings`` from now on, if they or the store files they name changed.
        Raises InvalidConfigError (and keeps the old context) when :meth:`check` does."""
        files = _file_stamps(settings)
        if settings == self.settings and files == self._files:
            return False
        context = self.check(settings)
        self.settings, self.context, self.mapper = settings, context, settings.principal_mapper()
        self.timeout_s = settings.handshake_timeout_s
        self.identity = keystore_identity(settings)
        self._files = files
        return True

    async def accept(self, stream: trio.SocketStream) -> TlsChannel:
        """Handshake over ``stream``; the channel, with the client's principal.

        Raises:
            HandshakeFailed: no handshake in time, bad TLS, a refused or unmapped certificate.
        """
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        channel = TlsChannel(stream.socket, tls, incoming, outgoing)
        mapper = self.mapper
        with trio.move_on_after(self.timeout_s) as scope:
            try:
                await channel.handshake()
            except ssl.SSLError as e:
                raise HandshakeFailed(f"SSL handshake failed: {e.reason or e}") from None
            except OSError as e:
                raise HandshakeFailed(f"SSL handshake failed: {e}") from None
        if scope.cancelled_caught:
            raise HandshakeFailed(f"SSL handshake not done in {self.timeout_s:g} s")
        try:
            channel.principal = certificate_principal(mapper, tls.getpeercert()) or ANONYMOUS
        except NoMatchingRule as e:
            raise HandshakeFailed(str(e)) from None
        return channel


def _file_stamps(settings: TlsSettings) -> tuple:
    """(path, mtime, size) of the store files, to see a file replaced under the same name."""
    stamps = []
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        path = settings.get(key)
        if path:
            try:
                st = os.stat(path)
                stamps.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamps.append((path, None))
    return tuple(stamps)


class TlsListeners:
    """The TLS listeners of a node, built from its configuration at startup (a store that does
    not load, or a value kcore cannot honour, stops the node there: InvalidConfigError), and
    reconfigured from its dynamic broker configs."""

    def __init__(self, config) -> None:
        self._static = dict(config.raw)
        self._dynamic: dict[str, str] = {}
        self.listeners: dict[str, TlsListener] = {
            listener.name: TlsListener(resolve(listener.name, [self._static]))
            for listener in config.listeners
            if listener.security_protocol in TLS_PROTOCOLS
        }

    def get(self, name: str) -> TlsListener | None:
        return self.listeners.get(name)

    def on_dynamic_configs(self, dynamic: Mapping[str, str]) -> list[str]:
        """Apply this broker's dynamic configs (``listener.name.<l>.ssl.*``), and re-read
        store files replaced since they were loaded; the listeners whose context changed. One
        whose new stores do not load keeps its old context (the error is logged): AlterConfigs
        checked them already, so only a file changed since then gets here."""
        self._dynamic = dict(dynamic)
        changed = []
        for name, listener in self.listeners.items():
            settings = resolve(name, [self._static, dynamic])
            try:
                if listener.reconfigure(settings):
                    changed.append(name)
                    log.info("listener %s: TLS settings reloaded for new connections", name)
            except InvalidConfigError as e:
                log.error("listener %s keeps its TLS settings: %s", name, e.message)
        return changed

    def reload_files(self) -> list[str]:
        """Re-read the store files replaced under the same names (Kafka reloads them on an
        AlterConfigs that sets a listener's keystore to the same path)."""
        return self.on_dynamic_configs(self._dynamic)

    def check_update(self, current: Mapping[str, str], entries, incremental: bool) -> str | None:
        """Why an AlterConfigs (``incremental``: IncrementalAlterConfigs) of this broker's
        resource would leave a TLS listener unable to load its stores, or None. Kafka's
        ``DynamicBrokerConfig.validate`` does the same on the broker before it forwards."""
        if not any(is_tls_dynamic_key(e.name) for e in entries):
            return None
        if incremental:  # SET = 0, DELETE = 1 (APPEND/SUBTRACT: on lists; the result is text)
            new = dict(current)
            for e in entries:
                if e.config_operation == 1:
                    new.pop(e.name, None)
                elif e.config_operation == 0 and e.value is not None:
                    new[e.name] = e.value
        else:  # legacy AlterConfigs replaces the resource's overrides
            new = {e.name: e.value for e in entries if e.value is not None}
        for name, listener in self.listeners.items():
            try:
                listener.check(resolve(name, [self._static, new]))
            except InvalidConfigError as e:
                return e.message
        return None


class TlsChannel:
    """A connection's TLS over its socket, with memory BIOs (``ssl.SSLObject``).

    Why not ``trio.SSLStream``: it decrypts one TLS record (16 KiB) per ``receive_some``, each
    a pass through its retry loop and the scheduler, which made a 1 MiB produce request cost
    64 of them. Here one ``os.read`` of up to 256 KiB feeds the incoming BIO and every record
    it completes is decrypted at once, straight into the frame's buffer; a response is
    encrypted in 256 KiB pieces, each written as soon as it is ready. Renegotiation is off
    (``OP_NO_RENEGOTIATION``), so a write never needs a read. The connection task reads
    through :meth:`reader`, a drop-in for its plaintext ``os.read``: the same wait for a
    readable socket, the same one checkpoint per read, the same idle timeout.
    """

    __slots__ = ("principal", "_sock", "_fd", "_tls", "_in", "_out")

    def __init__(self, sock, tls: ssl.SSLObject, incoming, outgoing) -> None:
        self.principal = ANONYMOUS
        self._sock = sock
        self._fd = sock.fileno()
        self._tls, self._in, self._out = tls, incoming, outgoing

    async def handshake(self) -> None:
        """Raises ssl.SSLError (bad TLS, a refused certificate, EOF) or OSError."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    await self._flush()  # the alert, if the client still listens
                raise
        await self._flush()  # the last flight (and TLS 1.3 session tickets)

    def reader(self, target: memoryview | None, want: int):
        """A read shaped like the plaintext path's ``os.read`` / ``os.readv`` of the socket:
        plaintext bytes (``b""`` at EOF), or with ``target`` the count decrypted into it (0 at
        EOF); BlockingIOError when no whole record is buffered and the socket has nothing
        more, so the caller waits until the socket is readable, as for plaintext."""

        def read():
            while True:
                try:
                    return self._decrypt(want, target)
                except ssl.SSLWantReadError:
                    pass
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return 0 if target is not None else b""
                except ssl.SSLError as e:
                    raise trio.BrokenResourceError(f"TLS error: {e}") from None
                if self._out.pending:  # a post-handshake answer (a TLS 1.3 key update)
                    self._write_pending()
                raw = os.read(self._fd, _RAW_READ_BYTES)  # BlockingIOError: wait, retry
                if raw:
                    self._in.write(raw)
                else:
                    self._in.write_eof()

        return read

    def _write_pending(self) -> None:
        """Write what the TLS layer owes the peer outside a response (a few bytes, rare);
        a full socket buffer fails the connection rather than stall a read."""
        data = self._out.read()
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        if sent != len(data):
            raise trio.BrokenResourceError("cannot answer the peer's TLS message")

    def _decrypt(self, want: int, target: memoryview | None):
        """Every buffered record, up to ``want``; SSLWantReadError when there is none."""
        read = self._tls.read
        if target is not None:
            size = len(target)
            total = read(size, target)  # raises SSLWantReadError when nothing is buffered
            while total and total < size:
                try:
                    n = read(size - total, target[total:])
                except ssl.SSLWantReadError:
                    break
                if not n:
                    break
                total += n
            return total
        first = read(want)
        if not first or len(first) >= want:
            return first
        chunks, total = [first], len(first)
        while total < want:
            try:
                chunk = read(want - total)
            except ssl.SSLWantReadError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)

    async def _fill(self) -> None:
        """Feed the incoming BIO one socket read (EOF marks it), waiting for one."""
        while True:
            try:
                raw = os.read(self._fd, _RAW_READ_BYTES)
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._sock)
        if raw:
            self._in.write(raw)
        else:
            self._in.write_eof()

    async def _flush(self) -> None:
        data = self._out.read()
        if not data:
            return
        view = memoryview(data)
        while view:
            try:
                sent = os.write(self._fd, view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._sock)
                continue
            view = view[sent:]

    async def send(self, parts: list[Any]) -> None:
        """One response: bytes parts and file slices (``fileno()``, ``position``,
        ``length``), gathered into one buffer, encrypted and written piece by piece."""
        size = sum(len(p) for p in parts)
        buffer = bytearray(size)
        view = memoryview(buffer)
        at = 0
        for part in parts:
            length = len(part)
            if isinstance(part, bytes | bytearray | memoryview):
                view[at : at + length] = part
            elif length:
                got = os.preadv(part.fileno(), [view[at : at + length]], part.position)
                if got != length:  # the file is shorter than the slice: truncated under us
                    raise trio.BrokenResourceError("segment file shrank while it was being sent")
            at += length
        write = self._tls.write
        for start in range(0, size, _WRITE_PIECE_BYTES):
            piece = view[start : start + _WRITE_PIECE_BYTES]
            done = 0
            while done < len(piece):
                done += write(piece[done:])
            await self._flush()
