"""Client certificates on ``https://`` admin listeners (``admin.ssl.client.auth``): the
principal of the certificate a request's connection presented.

Hypercorn verifies the certificate (``verify_mode``, ``ca_certs``) but does not hand it to the
application: the ASGI scope has no TLS extension. The certificate is caught where it becomes
known instead. The listener's ``SSLContext`` makes its connections' ``SSLObject`` of
:class:`_CertificateRecorder`, whose handshake, once done, stores the verified peer
certificate in a context variable. Hypercorn does the handshake in the task that serves the
connection, and Trio gives every task that task starts (the application's, one per request) a
copy of its context, so a request reads its own connection's certificate and never another's.

The certificate's subject is named as Kafka names an SSL client (``User:`` + the RFC 2253
subject through ``ssl.principal.mapping.rules``, :mod:`kcore.security.principal_mapping`), so
the ACLs that apply to a client over a Kafka SSL listener apply to it over HTTP too.
"""

from __future__ import annotations

import contextvars
import ssl
from typing import Any

from hypercorn.config import Config as HypercornConfig

from kcore.security.principal_mapping import (
    NoMatchingRule,
    SslPrincipalMapper,
    certificate_principal,
)

_peer_certificate: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "kcore_admin_peer_certificate", default=None
)


class _CertificateRecorder(ssl.SSLObject):
    def do_handshake(self) -> None:
        super().do_handshake()  # raises SSLWantReadError until the handshake is done
        _peer_certificate.set(self.getpeercert() or None)


class ClientCertHypercornConfig(HypercornConfig):
    """Hypercorn's config whose TLS connections record their client certificate."""

    def create_ssl_context(self) -> ssl.SSLContext | None:
        context = super().create_ssl_context()
        if context is not None:
            context.sslobject_class = _CertificateRecorder
        return context


class CertificateRefused(Exception):
    """A verified certificate whose subject no ``ssl.principal.mapping.rules`` rule maps."""


class ClientCertificates:
    """The principal of a request's client certificate, mapped by ``rules``."""

    def __init__(self, rules: str) -> None:
        self.mapper = SslPrincipalMapper(rules)

    def principal(self) -> str | None:
        """``User:<mapped subject>`` of this request's connection's verified certificate;
        None without one. Raises :class:`CertificateRefused` when no rule maps it."""
        try:
            return certificate_principal(self.mapper, _peer_certificate.get())
        except NoMatchingRule as e:
            raise CertificateRefused(str(e)) from None
