"""The TLS side of a connection over a socket pair: the principal each ssl.client.auth
gives, and the handshakes that fail (no certificate where one is required, a subject no rule
maps, a client that says nothing)."""

from __future__ import annotations

import ssl

import pytest
import trio

from kcore.security.tls_config import resolve
from kcore.security.tls_transport import ANONYMOUS, HandshakeFailed, TlsListener

from .conftest import tls_config


def _listener(pki, **extra) -> TlsListener:
    return TlsListener(resolve("MTLS", [tls_config(pki, **extra)]))


def _client_context(pki, client: dict | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if client is not None:
        context.load_cert_chain(client["cert"], client["key"])
    return context


async def _handshake(listener: TlsListener, context: ssl.SSLContext | None):
    """(the server's channel or its HandshakeFailed, the client's error or None)."""
    a, b = trio.socket.socketpair()
    server_side, client_side = trio.SocketStream(a), trio.SocketStream(b)
    outcome: dict = {}
    done = trio.Event()

    async def server():
        try:
            outcome["server"] = await listener.accept(server_side)
        except HandshakeFailed as e:
            outcome["server"] = e
        done.set()
        await server_side.aclose()
        # the client's end is closed by the test when it is done

    async def client():
        if context is None:  # a client that never speaks, until the server gives up
            await done.wait()
            return
        tls = trio.SSLStream(client_side, context, server_hostname="127.0.0.1")
        try:
            await tls.do_handshake()
            await tls.send_all(b"x")  # TLS 1.3: a refused certificate shows on first use
            await tls.receive_some(1)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            outcome["client"] = e

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        with trio.move_on_after(30):
            await client()
        nursery.cancel_scope.cancel()
    return outcome.get("server"), outcome.get("client")


@pytest.mark.parametrize(
    "auth, with_cert, principal",
    [
        ("required", True, "User:alice@eng"),
        ("requested", True, "User:alice@eng"),
        ("requested", False, ANONYMOUS),
        ("none", True, ANONYMOUS),  # not asked for: not sent
    ],
)
def test_client_auth_gives_the_principal(pki, auth, with_cert, principal):
    listener = _listener(pki, **{"listener.name.mtls.ssl.client.auth": auth})
    context = _client_context(pki, pki.client("alice") if with_cert else None)
    channel, _ = trio.run(_handshake, listener, context)
    assert channel.principal == principal


def test_required_client_auth_without_a_certificate_fails_the_handshake(pki):
    failed, client_error = trio.run(_handshake, _listener(pki), _client_context(pki, None))
    assert isinstance(failed, HandshakeFailed) and "SSL handshake failed" in str(failed)
    assert client_error is not None


def test_a_subject_no_rule_maps_fails_the_handshake(pki):
    listener = _listener(
        pki, **{"listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=admin,.*$/admin/"}
    )
    failed, _ = trio.run(_handshake, listener, _client_context(pki, pki.client("alice")))
    assert isinstance(failed, HandshakeFailed) and "No rules apply to CN=alice" in str(failed)


def test_a_silent_client_is_given_up_after_the_handshake_timeout(pki):
    listener = _listener(pki, **{"kcore.ssl.handshake.timeout.ms": "200"})
    failed, _ = trio.run(_handshake, listener, None)
    assert isinstance(failed, HandshakeFailed) and "not done in 0.2 s" in str(failed)
