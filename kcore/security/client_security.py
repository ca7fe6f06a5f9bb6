"""The security of kcore's own client connections, from Kafka's client keys: one place that
reads ``security.protocol`` with the ``ssl.*`` and ``sasl.*`` keys, for the tools'
``--command-config`` / ``--producer.config`` and the client configs alike.

``SSL`` and ``SASL_SSL`` give a TLS context (:func:`~kcore.security.tls_config.build_client_context`),
``SASL_PLAINTEXT`` and ``SASL_SSL`` the SASL settings
(:func:`~kcore.security.sasl_client.sasl_client_settings`); a setting kcore's client cannot
honour raises :class:`ClientSecurityError`, never a connection that is less secure than asked.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kcore.log.config import InvalidConfigError
from kcore.security.sasl_client import (
    SASL_CLIENT_KEYS,
    SaslClientError,
    SaslClientSettings,
    sasl_client_settings,
)
from kcore.security.tls_config import CLIENT_SSL_KEYS, build_client_context

CLIENT_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_SECURITY_KEYS = frozenset(SASL_CLIENT_KEYS) | CLIENT_SSL_KEYS


class ClientSecurityError(ValueError):
    """A client security setting kcore cannot honour (never with a password in it); ``key``
    names the setting when one is to blame, so a caller that checks a stored config (a
    mirror's) can point at it."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str
    ssl_context: ssl.SSLContext | None
    sasl: SaslClientSettings | None


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """The TLS context and SASL settings ``props`` ask for (other keys are ignored)."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in CLIENT_SECURITY_PROTOCOLS:
        raise ClientSecurityError(
            f"security.protocol={props['security.protocol']} is not supported by kcore's "
            f"client: {', '.join(CLIENT_SECURITY_PROTOCOLS)}",
            "security.protocol",
        )
    try:
        sasl = sasl_client_settings(props)
    except SaslClientError as e:
        raise ClientSecurityError(str(e)) from None
    context = None
    stray = sorted(k for k in props if k in CLIENT_SSL_KEYS)
    if stray and protocol not in ("SSL", "SASL_SSL"):
        # Kafka's clients ignore them there; a TLS setting that silently does nothing would let
        # an operator believe the connection is encrypted.
        secured = "SSL" if protocol == "PLAINTEXT" else "SASL_SSL"
        raise ClientSecurityError(
            f"{', '.join(stray)} given with security.protocol={protocol}: set "
            f"security.protocol={secured} to use TLS",
            stray[0],
        )
    if protocol in ("SSL", "SASL_SSL"):
        try:
            context = build_client_context({k: v for k, v in props.items() if k in CLIENT_SSL_KEYS})
        except InvalidConfigError as e:
            raise ClientSecurityError(e.message, e.key) from None
    return ClientSecurity(protocol, context, sasl)
