"""SASL/OAUTHBEARER (RFC 7628) with Kafka's *unsecured* JWS tokens, sans-IO: Kafka's
``OAuthBearerSaslServer`` with its ``OAuthBearerUnsecuredValidatorCallbackHandler``.

What is checked
---------------
The client's first message is ``n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[key=value\\x01...]\\x01``
(``OAuthBearerClientInitialResponse``); anything else fails the exchange at once. The token is an
unsecured JWS (``alg`` ``none``, no signature: ``<header>.<claims>.``), which a test or
development setup mints itself (librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt``, the Java
client's ``OAuthBearerUnsecuredLoginCallbackHandler``). **Anyone can mint one: this proves no
identity**, exactly as in Kafka, where it is meant "for non-production use".

The token is valid when, in Kafka's order: its header says ``"alg":"none"`` and it has no
signature; it has an ``exp`` number (seconds) and a non-blank string principal claim (``sub``,
or the JAAS option ``unsecuredValidatorPrincipalClaimName``); ``iat``, if present, is a number
not after now plus ``unsecuredValidatorAllowableClockSkewMs``; now minus the skew is before
``exp``; ``exp`` is after ``iat``; and its scope claim (``scope`` or
``unsecuredValidatorScopeClaimName``, a string or a list) holds every element of
``unsecuredValidatorRequiredScope`` (space-separated). The principal is ``User:<claim>``; the
session lasts until ``exp`` (KIP-368: :attr:`OAuthBearerServer.credential_expiry_ms`, which
the authenticator turns into the session lifetime).

An invalid token is not refused at once (RFC 7628 §3.2.2): the server answers the error as
JSON, ``{"status":"invalid_token"}`` (``insufficient_scope`` with the required ``scope`` for a
missing scope), the client answers ``\\x01``, and only then does the exchange fail, with that
JSON as the message (SASL_AUTHENTICATION_FAILED on the wire). Extensions are accepted, as the
unsecured validator accepts them all; an authorization id other than the principal fails.

Base64: Kafka documents the sections as Base64URL; either alphabet is decoded here (Kafka's
decoder takes only the standard one, so tokens holding ``-`` or ``_`` fail there).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OAUTHBEARER_LOGIN_MODULE",
    "OAUTHBEARER_MECHANISM",
    "OAuthBearerError",
    "OAuthBearerServer",
    "UnsecuredJws",
    "UnsecuredValidatorOptions",
    "client_first_message",
    "unsecured_jws",
    "validate_unsecured_jws",
]

OAUTHBEARER_MECHANISM = "OAUTHBEARER"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SEP = "\x01"

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_FIRST_MESSAGE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_SEP}(?P<kvpairs>(?:{_KEY}={_VALUE}{_SEP})*){_SEP}"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class OAuthBearerError(ValueError):
    """The exchange failed; the message is what the client is told."""


class InvalidToken(ValueError):
    """A token the validator refuses (Kafka's ``OAuthBearerIllegalTokenException``): ``reason``
    for the log, ``scope`` the required scope when that is what is missing."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope

    def json_error(self) -> str:
        """The server's error answer, byte for byte as Kafka's ``jsonErrorResponse``."""
        if self.scope is None:
            return '{"status":"invalid_token"}'
        return f'{{"status":"insufficient_scope", "scope":"{self.scope}"}}'


@dataclass(frozen=True)
class UnsecuredValidatorOptions:
    """The ``unsecuredValidator*`` options of the listener's OAuthBearerLoginModule."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> UnsecuredValidatorOptions:
        """From JAAS options (blank ones take the defaults). Raises ValueError for a skew that
        is not a non-negative INT."""
        principal = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip()
        scope = (options.get("unsecuredValidatorScopeClaimName") or "").strip()
        required = (options.get("unsecuredValidatorRequiredScope") or "").split()
        skew_text = (options.get("unsecuredValidatorAllowableClockSkewMs") or "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(
                f"unsecuredValidatorAllowableClockSkewMs is not a number: {skew_text}"
            ) from None
        if skew < 0 or skew >= 2**31:
            raise ValueError(
                f"Allowable clock skew millis must not be negative (nor above an INT): {skew}"
            )
        return cls(principal or "sub", scope or "scope", tuple(required), skew)


@dataclass(frozen=True)
class UnsecuredJws:
    """A parsed unsecured JWS: its claims and what the broker takes from them."""

    claims: Mapping[str, Any]
    principal_name: str
    expiry_ms: int  # exp, in ms since the epoch (Kafka's lifetimeMs)
    scope: frozenset[str]


def _b64_json(part: str) -> dict[str, Any]:
    padded = part.replace("-", "+").replace("_", "/") + "=" * (-len(part) % 4)
    try:
        raw = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return {key: _claim_value(v) for key, v in value.items()}


def _claim_value(value: Any) -> Any:
    """Jackson's view as Kafka keeps it: arrays as lists of text, numbers as numbers, the
    rest as text (``true``, ``null``; an object's text is empty)."""
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return _text(value)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return json.dumps(value)
    return ""


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is not None and not isinstance(value, int | float):
        raise InvalidToken(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    return value


def unsecured_jws(token: str, principal_claim: str = "sub", scope_claim: str = "scope"):
    """Parse ``token`` as Kafka's ``OAuthBearerUnsecuredJws`` does. Raises InvalidToken."""
    if ".." in token:
        raise InvalidToken("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken(
            "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
            "values"
        )
    header, claims = _b64_json(parts[0]), _b64_json(parts[1])
    if header.get("alg") != "none":
        raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise InvalidToken("Unsecured JWS must not contain a digital signature")
    scope_value = claims.get(scope_claim)
    if isinstance(scope_value, str):
        scope = frozenset({scope_value.strip()} if scope_value.strip() else ())
    elif isinstance(scope_value, list) or scope_value is None:
        scope = frozenset(s.strip() for s in scope_value or () if s.strip())
    else:
        raise InvalidToken(f"The '{scope_claim}' claim was not of type List")
    exp = _number(claims, "exp")
    if exp is None:
        raise InvalidToken("No expiration time in JWT")
    principal = claims.get(principal_claim)
    if principal is not None and not isinstance(principal, str):
        raise InvalidToken(f"The '{principal_claim}' claim was not of type String")
    if not (principal or "").strip():
        raise InvalidToken(f"No principal name in JWT claim: {principal_claim}")
    return UnsecuredJws(claims, principal, _round_ms(exp), scope)


def _round_ms(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise InvalidToken("The 'exp' claim is not a finite number")
    return round(seconds * 1000)


def validate_unsecured_jws(
    token: str, options: UnsecuredValidatorOptions, now_ms: int
) -> UnsecuredJws:
    """Kafka's unsecured validator over ``token`` at ``now_ms``. Raises InvalidToken."""
    jws = unsecured_jws(token, options.principal_claim, options.scope_claim)
    skew = options.allowable_clock_skew_ms
    iat = _number(jws.claims, "iat")
    if iat is not None and 1000 * iat > now_ms + skew:
        raise InvalidToken(
            f"The Issued At value ({iat:f} seconds) was after the indicated time ({now_ms} ms) "
            f"plus allowable clock skew ({skew} ms)"
        )
    exp = jws.claims["exp"]
    if now_ms - skew >= 1000 * exp:
        raise InvalidToken(
            f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or "
            f"after the Expiration Time value ({exp:f} seconds)"
        )
    if iat is not None and exp <= iat:
        raise InvalidToken(
            f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time "
            f"({iat:f} seconds)"
        )
    for element in options.required_scope:
        if element not in jws.scope:
            raise InvalidToken(
                f"The provided scope ({sorted(jws.scope)}) was missing a required scope "
                f"({element}).  All required scope elements: {list(options.required_scope)}",
                scope="[" + ", ".join(options.required_scope) + "]",
            )
    return jws


def client_first_message(token: str, authzid: str = "", **extensions: str) -> bytes:
    """What an OAUTHBEARER client sends first (``OAuthBearerClientInitialResponse.toBytes``)."""
    extra = "".join(f"{_SEP}{k}={v}" for k, v in extensions.items())
    head = f"a={authzid}" if authzid else ""
    return f"n,{head},{_SEP}auth=Bearer {token}{extra}{_SEP}{_SEP}".encode()


class OAuthBearerServer:
    """One OAUTHBEARER exchange (see the module docstring): :meth:`evaluate` each client
    message with the current time; returns the answer, raises :class:`OAuthBearerError`."""

    def __init__(self, options: UnsecuredValidatorOptions) -> None:
        self._options = options
        self._error: str | None = None  # the JSON answered; the client's \x01 fails with it
        self.complete = False
        self.username: str | None = None
        self.credential_expiry_ms: int | None = None
        self.failure_reason: str | None = None  # why the token was refused (for the log)

    def evaluate(self, message: bytes, now_ms: int) -> bytes:
        if self.complete:
            raise OAuthBearerError("SASL/OAUTHBEARER exchange already complete")
        if message == _SEP.encode() and self._error is not None:
            raise OAuthBearerError(self._error)
        self._error = None
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
        first = _FIRST_MESSAGE.fullmatch(text)
        if first is None:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message")
        pairs = dict(item.split("=", 1) for item in first.group("kvpairs").split(_SEP) if item)
        auth = pairs.get("auth")
        if auth is None:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        bearer = _AUTH.fullmatch(auth)
        if bearer is None:
            raise OAuthBearerError(
                "Invalid OAUTHBEARER client first message: invalid 'auth' format"
            )
        if bearer.group("scheme").lower() != "bearer":
            raise OAuthBearerError(
                f"Invalid scheme in OAUTHBEARER client first message: {bearer.group('scheme')}"
            )
        try:
            jws = validate_unsecured_jws(bearer.group("token"), self._options, now_ms)
        except InvalidToken as e:
            self._error = e.json_error()
            self.failure_reason = str(e)
            return self._error.encode()
        authzid = first.group("authzid") or ""
        if authzid and authzid != jws.principal_name:
            raise OAuthBearerError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({jws.principal_name})"
            )
        self.complete = True
        self.username = jws.principal_name
        self.credential_expiry_ms = jws.expiry_ms
        return b""
