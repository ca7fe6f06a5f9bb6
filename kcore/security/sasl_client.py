"""SASL on kcore's own client connections (console tools, admin, later the mirror's source
connection), sans-IO: the standard client keys in, SASL tokens out.

:func:`sasl_client_settings` reads Kafka's client keys — ``security.protocol``
(SASL for ``SASL_PLAINTEXT`` and ``SASL_SSL``), ``sasl.mechanism`` (Kafka's default ``GSSAPI`` is
refused: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are served) and ``sasl.jaas.config`` (a
``PlainLoginModule`` or ``ScramLoginModule`` entry with ``username`` and ``password``) — and
refuses what kcore's client cannot honour with :class:`SaslClientError`. :class:`SaslClientExchange` then plays the client's half of one
exchange over SaslHandshake v1 + SaslAuthenticate: :meth:`~SaslClientExchange.first_token`,
then :meth:`~SaslClientExchange.evaluate` on each server token until it is ``complete``.

Re-authentication (KIP-368): a broker with ``connections.max.reauth.ms`` answers the last
SaslAuthenticate (v1+) with the session's lifetime and closes a connection whose next request
comes after it. :func:`reauthentication_delay_ms` is when the client logs in again on the same
connection: as Kafka's clients, at a random point between 85 % and 95 % of the lifetime, so the
connections of many clients do not all re-authenticate at once.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from kcore.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    parse_jaas_config,
)
from kcore.security.plain import PLAIN_MECHANISM, plain_message
from kcore.security.scram import MECHANISMS, ScramClient, ScramError

__all__ = [
    "SASL_CLIENT_KEYS",
    "SaslClientError",
    "SaslClientExchange",
    "SaslClientSettings",
    "reauthentication_delay_ms",
    "sasl_client_settings",
]

SASL_CLIENT_KEYS = ("security.protocol", "sasl.mechanism", "sasl.jaas.config")
_SUPPORTED = (PLAIN_MECHANISM, *MECHANISMS)
# Kafka's SaslClientAuthenticator: re-authenticate at 85 % of the lifetime plus up to 10 %.
REAUTH_WINDOW = (0.85, 0.95)


def reauthentication_delay_ms(session_lifetime_ms: int, rng: random.Random | None = None):
    """How long after a successful login to re-authenticate (ms), or None when the broker set
    no lifetime (``session_lifetime_ms`` 0, or SaslAuthenticate v0)."""
    if session_lifetime_ms <= 0:
        return None
    low, high = REAUTH_WINDOW
    return int(session_lifetime_ms * (low + (high - low) * (rng or random).random()))


class SaslClientError(ValueError):
    """A client setting kcore cannot honour, or a failed exchange (never with the password)."""


@dataclass(frozen=True)
class SaslClientSettings:
    mechanism: str
    username: str
    password: str = field(repr=False)


def sasl_client_settings(props: Mapping[str, str]) -> SaslClientSettings | None:
    """The SASL settings of Kafka-named client settings (None: PLAINTEXT or SSL, no SASL)."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol in ("PLAINTEXT", "SSL"):
        stray = [k for k in ("sasl.mechanism", "sasl.jaas.config") if props.get(k)]
        if stray:
            raise SaslClientError(
                f"{', '.join(stray)} given with security.protocol={protocol}: set "
                f"security.protocol=SASL_{protocol} to authenticate"
            )
        return None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise SaslClientError(
            f"security.protocol={props['security.protocol']} is not supported by kcore's "
            "client: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
        )
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip()
    if mechanism not in _SUPPORTED:
        raise SaslClientError(
            f"sasl.mechanism={mechanism} is not supported by kcore's client: it speaks "
            f"{', '.join(_SUPPORTED)}"
        )
    text = props.get("sasl.jaas.config")
    if not text:
        raise SaslClientError(
            f"sasl.jaas.config must be set for SASL/{mechanism} (kcore reads no JAAS file)"
        )
    try:
        module = parse_jaas_config(text)
    except JaasConfigError as e:
        raise SaslClientError(str(e)) from None
    expected = PLAIN_LOGIN_MODULE if mechanism == PLAIN_MECHANISM else SCRAM_LOGIN_MODULE
    if module.class_name != expected:
        raise SaslClientError(
            f"sasl.jaas.config names {module.class_name}; sasl.mechanism={mechanism} needs "
            f"{expected}"
        )
    missing = [k for k in ("username", "password") if not module.options.get(k)]
    if missing:
        raise SaslClientError(f"sasl.jaas.config has no {' and no '.join(missing)}")
    return SaslClientSettings(mechanism, module.options["username"], module.options["password"])


class SaslClientExchange:
    """The client's half of one SASL exchange."""

    def __init__(self, settings: SaslClientSettings, *, nonce: str | None = None) -> None:
        self.settings = settings
        self.mechanism = settings.mechanism
        self._scram: ScramClient | None = None
        if settings.mechanism != PLAIN_MECHANISM:
            self._scram = ScramClient(
                MECHANISMS[settings.mechanism], settings.username, settings.password, nonce=nonce
            )
        self.complete = False

    def first_token(self) -> bytes:
        if self._scram is None:
            return plain_message(self.settings.username, self.settings.password)
        return self._scram.first_message()

    def evaluate(self, token: bytes) -> bytes | None:
        """The next token to send, or None when the exchange is complete."""
        if self._scram is None:
            self.complete = True
            return None
        try:
            answer = self._scram.evaluate(token)
        except ScramError as e:
            raise SaslClientError(str(e)) from None
        if self._scram.complete:
            self.complete = True
            return None
        return answer
