"""One connection's SASL authentication on the broker's side (Kafka's
``SaslServerAuthenticator``), sans-IO: requests and time in, answers and decisions out.

States and what each admits (:data:`ADMITS`; anything else closes the connection, as Kafka
closes it with "Unexpected Kafka request of type ... during SASL handshake")::

    HANDSHAKE_OR_VERSIONS  ApiVersions (served; -> HANDSHAKE), SaslHandshake
    HANDSHAKE              SaslHandshake
    AUTHENTICATE           SaslAuthenticate (KIP-152: SASL tokens in Kafka requests)
    AUTHENTICATE_RAW       bare size-prefixed SASL tokens (after SaslHandshake v0, KIP-43)
    AUTHENTICATED          every request; SaslHandshake starts a re-authentication (KIP-368)
    REAUTHENTICATE         SaslAuthenticate
    SESSION_EXPIRED        nothing: AUTHENTICATED becomes this at the session's end, when the
                           re-authentication that was due has not happened
    FAILED                 nothing (the answer is sent after the failure delay, then the close)

OAUTHBEARER (:mod:`kcore.security.oauthbearer`) is a two-step failure: an invalid token is
answered with the JSON error and no error code, the client's ``\x01`` then fails the exchange.
Its token's expiry bounds the session (below).

SaslHandshake for a mechanism the listener does not enable is answered
UNSUPPORTED_SASL_MECHANISM with the enabled ones; wrong credentials SASL_AUTHENTICATION_FAILED
with the mechanism's message. Both are failures: the shell delays the answer by
``connection.failed.authentication.delay.ms`` and closes the connection after it.

Re-authentication: with ``connections.max.reauth.ms`` (per mechanism) above 0, or a credential
that expires (OAUTHBEARER's ``exp``; the earlier of the two), a successful SaslAuthenticate v1+
tells the client its session lifetime; any request after the session
expired closes the connection (clients re-authenticate before, at 85-95 % of the lifetime; a
client that cannot — SaslAuthenticate v0 or raw tokens, kafka-python, aiokafka — is thus closed
at its first request past the lifetime, and reconnects). Re-authenticating keeps the mechanism and the principal: another one fails.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcore.protocol.errors import ErrorCode
from kcore.security.oauthbearer import OAUTHBEARER_MECHANISM, OAuthBearerError, OAuthBearerServer
from kcore.security.plain import PLAIN_MECHANISM, PlainError, PlainServer
from kcore.security.sasl_config import SaslListenerConfig
from kcore.security.scram import ScramError, ScramServer, mechanism_by_name

__all__ = ["ADMITS", "Admission", "AuthResult", "SaslAuthenticator", "SaslState"]

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
ANONYMOUS = "User:ANONYMOUS"


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions expected"
    HANDSHAKE = "handshake expected"
    AUTHENTICATE = "authenticate"
    AUTHENTICATE_RAW = "authenticate (raw tokens)"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "re-authenticate"
    SESSION_EXPIRED = "session expired"
    FAILED = "failed"


class Admission(enum.Enum):
    SERVE = "serve"  # the request goes to its handler as on any listener
    SASL = "sasl"  # the authenticator answers it (handshake() / authenticate())
    CLOSE = "close"  # not allowed now: close the connection (reason in close_reason)


_S, _A = SaslState, Admission
# state -> {api key: (admission, next state or None to stay)}; "*" is every other key.
ADMITS: dict[SaslState, dict[Any, tuple[Admission, SaslState | None]]] = {
    _S.HANDSHAKE_OR_VERSIONS: {
        API_VERSIONS: (_A.SERVE, _S.HANDSHAKE),
        SASL_HANDSHAKE: (_A.SASL, None),
    },
    _S.HANDSHAKE: {SASL_HANDSHAKE: (_A.SASL, None)},
    _S.AUTHENTICATE: {SASL_AUTHENTICATE: (_A.SASL, None)},
    _S.AUTHENTICATE_RAW: {},  # raw tokens, not requests: see expects_raw_token
    _S.AUTHENTICATED: {SASL_HANDSHAKE: (_A.SASL, None), "*": (_A.SERVE, None)},
    _S.REAUTHENTICATE: {SASL_AUTHENTICATE: (_A.SASL, None)},
    _S.SESSION_EXPIRED: {},
    _S.FAILED: {},
}


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    error_code: int
    mechanisms: list[str]
    failed: bool  # answer after the failure delay, then close


@dataclass(frozen=True, slots=True)
class AuthResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int
    failed: bool  # answer after the failure delay, then close
    complete: bool  # authentication (or re-authentication) succeeded with this answer


ScramLookup = Callable[[int, str], Any]  # (mechanism type, user name) -> credential or None


class SaslAuthenticator:
    """The SASL state of one connection on a SASL listener (see the module docstring).

    ``scram_lookup(mechanism_type, user)`` reads the credential from the metadata image.
    """

    def __init__(self, config: SaslListenerConfig, scram_lookup: ScramLookup) -> None:
        self.config = config
        self._scram_lookup = scram_lookup
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.principal = ANONYMOUS
        self.mechanism: str | None = None
        self._server: Any = None
        self._reauth_principal: str | None = None
        self.session_expires_ms: int | None = None  # None: never
        self.close_reason: str | None = None

    # -- requests ------------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def expects_raw_token(self) -> bool:
        return self.state is SaslState.AUTHENTICATE_RAW

    def admit(self, api_key: int, api_name: str, now_ms: int) -> Admission:
        """May a request of ``api_key`` be read now? SERVE moves on as the table says."""
        # Past the session's end every request closes, a late SaslHandshake too, as Kafka's
        # SocketServer closes an expired channel before looking at the request.
        if (
            self.state is SaslState.AUTHENTICATED
            and self.session_expires_ms is not None
            and now_ms >= self.session_expires_ms
        ):
            self.state = SaslState.SESSION_EXPIRED
        table = ADMITS[self.state]
        entry = table.get(api_key) or table.get("*")
        if entry is None:
            if self.state is SaslState.SESSION_EXPIRED:
                self.close_reason = (
                    f"SASL session of {self.principal} expired (connections.max.reauth.ms) "
                    "without re-authentication"
                )
            else:
                self.close_reason = (
                    f"unexpected {api_name} request during SASL {self.state.value} "
                    "(only ApiVersions and the SASL handshake before authentication)"
                )
            return Admission.CLOSE
        admission, next_state = entry
        if next_state is not None:
            self.state = next_state
        return admission

    def handshake(self, mechanism: str, version: int) -> HandshakeResult:
        enabled = list(self.config.mechanisms)
        reauth = self.state is SaslState.AUTHENTICATED
        if mechanism not in enabled or (reauth and mechanism != self.mechanism):
            self.state = SaslState.FAILED
            self.close_reason = (
                f"SASL mechanism {mechanism} is not enabled on listener {self.config.listener}"
                if not reauth
                else f"re-authentication changed the SASL mechanism from {self.mechanism}"
            )
            return HandshakeResult(int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), enabled, True)
        if reauth and version == 0:
            self.state = SaslState.FAILED
            self.close_reason = "re-authentication needs SaslHandshake v1 or later"
            return HandshakeResult(int(ErrorCode.ILLEGAL_SASL_STATE), enabled, True)
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        if reauth:
            self._reauth_principal = self.principal
            self.state = SaslState.REAUTHENTICATE
        else:
            self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.AUTHENTICATE_RAW
        return HandshakeResult(int(ErrorCode.NONE), enabled, False)

    def _new_server(self, mechanism: str) -> Any:
        if mechanism == PLAIN_MECHANISM:
            return PlainServer(self.config.plain_users)
        if mechanism == OAUTHBEARER_MECHANISM:
            return OAuthBearerServer(self.config.oauthbearer)
        scram = mechanism_by_name(mechanism)
        assert scram is not None  # sasl_config admits only the supported mechanisms
        return ScramServer(scram, lambda user: self._scram_lookup(scram.type, user))

    def authenticate(self, token: bytes, now_ms: int, wall_ms: int | None = None) -> AuthResult:
        """One SASL token of the exchange (a SaslAuthenticate's, or a raw one). ``now_ms`` is
        the clock sessions expire on; ``wall_ms`` the wall clock a token's ``exp`` and ``iat``
        are compared with (``now_ms`` if None: the two are one clock)."""
        wall_ms = now_ms if wall_ms is None else wall_ms
        server = self._server
        try:
            if self.mechanism == OAUTHBEARER_MECHANISM:  # its token's expiry is checked now
                answer = server.evaluate(bytes(token), wall_ms)
            else:
                answer = server.evaluate(bytes(token))
        except (PlainError, ScramError, OAuthBearerError) as e:
            failure = self._fail(str(e))
            reason = getattr(server, "failure_reason", None)  # why a token was refused
            if reason:
                self.close_reason = f"{self.close_reason} ({reason})"
            return failure
        if not server.complete:
            return AuthResult(int(ErrorCode.NONE), None, answer, 0, False, False)
        principal = f"User:{self._server.username}"
        if self._reauth_principal is not None and principal != self._reauth_principal:
            return self._fail(
                f"Cannot change principals during re-authentication from "
                f"{self._reauth_principal}: {principal}"
            )
        self.principal = principal
        self._reauth_principal = None
        self._server = None
        self.state = SaslState.AUTHENTICATED
        lifetime = self.config.reauth_ms.get(self.mechanism or "", 0)
        expiry = getattr(server, "credential_expiry_ms", None)
        if expiry is not None:
            # KIP-368: a credential's expiry (an OAUTHBEARER token's exp) ends the session too,
            # whichever comes first, as Kafka's SaslServerAuthenticator computes it.
            remaining = max(0, expiry - wall_ms)
            lifetime = min(remaining, lifetime) if lifetime > 0 else remaining
            self.session_expires_ms = now_ms + lifetime
        else:
            self.session_expires_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthResult(int(ErrorCode.NONE), None, answer, max(lifetime, 0), False, True)

    def _fail(self, message: str) -> AuthResult:
        self.state = SaslState.FAILED
        self._server = None
        self.close_reason = f"failed authentication with SASL mechanism {self.mechanism}"
        return AuthResult(int(ErrorCode.SASL_AUTHENTICATION_FAILED), message, b"", 0, True, False)
