"""SASL on a connection of a SASL listener: the Trio shell of
:class:`kcore.security.authenticator.SaslAuthenticator`.

The connection task (:mod:`kcore.server.network`) asks the authenticator whether each request
may be read now; SaslHandshake and SaslAuthenticate (or, after SaslHandshake v0, bare SASL
tokens) come here and are answered from it. A failed authentication is logged with the
client's address and the mechanism's reason (never a password: the reasons hold none), and
answered after ``connection.failed.authentication.delay.ms``, as Kafka delays it, so a client
guessing passwords gets one guess per delay per connection; the connection is closed after the
answer. The principal the authenticator settles on becomes the connection's, which every
request's :class:`~kcore.server.network.RequestContext` carries to the authorizer.

On listeners without SASL, SaslHandshake and SaslAuthenticate reach :func:`register`'s
handlers, which answer ILLEGAL_SASL_STATE as Kafka's ``KafkaApis`` does (they are advertised on
every listener, as Kafka advertises them).
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

import trio

from kcore.protocol import encode_response
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.security.authenticator import SASL_HANDSHAKE, SaslAuthenticator
from kcore.server.registry import BROKER, CONTROLLER, HandlerRegistry

log = logging.getLogger(__name__)

__all__ = ["answer_raw_token", "answer_request", "new_authenticator", "register"]


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def _wall_ms(conn: Any) -> int:
    """The broker's wall clock (an OAUTHBEARER token's exp is wall time); the system's when
    the connection's server has none (the network tests' bare KafkaServer)."""
    clock = getattr(conn.server.state, "clock", None)
    return clock.wall_ms() if clock is not None else int(time.time() * 1000)


def new_authenticator(spec: Any, server_state: Any) -> SaslAuthenticator | None:
    """The authenticator of a new connection on ``spec``'s listener (None: no SASL there)."""
    config = getattr(spec, "sasl", None)
    if config is None:
        return None

    def scram_lookup(mechanism_type: int, user: str):
        return server_state.metadata_image.scram.credentials.get((mechanism_type, user))

    return SaslAuthenticator(config, scram_lookup)


async def _failed(conn: Any, auth: SaslAuthenticator, reason: str) -> None:
    log.info(
        "Failed authentication with /%s (connection %d, listener %s): %s",
        conn.peer,
        conn.id,
        auth.config.listener,
        reason,
    )
    await trio.sleep(auth.config.failed_delay_ms / 1000)


async def answer_request(conn: Any, auth: SaslAuthenticator, request: Any):
    """``(response parts, close reason or None)`` for a SaslHandshake or SaslAuthenticate the
    authenticator admitted."""
    version, correlation_id = request.version, request.correlation_id
    body = request.body
    if request.api.key == SASL_HANDSHAKE:
        result = auth.handshake(body.mechanism, version)
        response: Any = m.SaslHandshakeResponse(
            error_code=result.error_code, mechanisms=result.mechanisms
        )
        reason = auth.close_reason if result.failed else None
        if reason is not None:
            await _failed(conn, auth, reason)
    else:
        outcome = auth.authenticate(body.auth_bytes, _now_ms(), _wall_ms(conn))
        response = m.SaslAuthenticateResponse(
            error_code=outcome.error_code,
            error_message=outcome.error_message,
            auth_bytes=outcome.auth_bytes,
            session_lifetime_ms=outcome.session_lifetime_ms,
        )
        reason = auth.close_reason if outcome.failed else None
        if reason is not None:
            await _failed(conn, auth, f"{reason}: {outcome.error_message}")
        elif outcome.complete:
            _authenticated(conn, auth)
    return encode_response(request.api.key, version, correlation_id, response), reason


async def answer_raw_token(conn: Any, auth: SaslAuthenticator, token: bytes):
    """``(response parts, close reason or None)`` for a bare SASL token (SaslHandshake v0):
    the answer is a bare size-prefixed token; a failure has no answer, only the close."""
    outcome = auth.authenticate(token, _now_ms(), _wall_ms(conn))
    if outcome.failed:
        await _failed(conn, auth, f"{auth.close_reason}: {outcome.error_message}")
        return [], auth.close_reason
    if outcome.complete:
        _authenticated(conn, auth)
    return [struct.pack(">i", len(outcome.auth_bytes)), outcome.auth_bytes], None


def _authenticated(conn: Any, auth: SaslAuthenticator) -> None:
    conn.principal = auth.principal
    conn.decoder.max_frame_bytes = conn.server.limits.max_frame_bytes  # a client's requests now
    log.debug(
        "connection %d from %s authenticated as %s with %s",
        conn.id,
        conn.peer,
        auth.principal,
        auth.mechanism,
    )


def register(registry: HandlerRegistry) -> None:
    """SaslHandshake v0-1 and SaslAuthenticate v0-2 on every listener type; these handlers
    answer only where no authenticator took the request (see the module docstring)."""

    @registry.register(17, 0, 1, listeners=(BROKER, CONTROLLER))
    async def sasl_handshake(ctx, body: m.SaslHandshakeRequest) -> m.SaslHandshakeResponse:
        return m.SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE))

    @registry.register(36, 0, 2, listeners=(BROKER, CONTROLLER))
    async def sasl_authenticate(ctx, body: m.SaslAuthenticateRequest):
        return m.SaslAuthenticateResponse(
            error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
            error_message="Unexpected SASL authentication on a listener without SASL, or after "
            "successful authentication",
        )
