"""The admin endpoint's settings: ``admin.listeners`` parsed, and the rules that keep an
unauthenticated endpoint off the network.

``admin.listeners`` is a comma-separated list of ``http://HOST:PORT`` / ``https://HOST:PORT``
(empty: no admin endpoint). Without ``admin.auth.token.file`` every request is served without a
credential, so such an endpoint may only bind a loopback address: an operator who leaves the
token out gets a startup error, not a cluster anyone on the network can stop mirrors on. An
``https://`` listener needs ``admin.ssl.certfile`` and ``admin.ssl.keyfile``; the TLS keys
without an ``https://`` listener are refused too, since they would do nothing.

``admin.ssl.client.auth`` (Kafka's ``ssl.client.auth``: ``required``, ``requested``, ``none``)
asks ``https://`` clients for a certificate that chains to ``admin.ssl.truststore.location``
(PEM; needed with client auth, refused without it); the certificate's subject, mapped by the
broker's ``ssl.principal.mapping.rules``, is the caller's principal
(:mod:`kcore.admin.client_certs`). ``required`` authenticates every ``https://`` request, so
such a listener may bind any address without a token file; ``http://`` listeners and
``requested`` ones still follow the loopback rule.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple

from kcore.admin.auth import TokenFile
from kcore.log.config import InvalidConfigError, invalid_value
from kcore.security.principal_mapping import DEFAULT_RULES, SslPrincipalMapper

SCHEMES = ("http", "https")
_ADMIN_LISTENER = re.compile(r"(https?)://\[?([0-9a-zA-Z\-%._:]+?)\]?:([0-9]+)")


class AdminListener(NamedTuple):
    scheme: str  # "http" or "https"
    host: str
    port: int

    @property
    def bind(self) -> str:
        """Hypercorn's bind string (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bind}"


def parse_admin_listeners(items: tuple[str, ...]) -> tuple[AdminListener, ...]:
    listeners = []
    for item in items:
        match = _ADMIN_LISTENER.fullmatch(item.strip().lower())
        if match is None or int(match.group(3)) > 65535:
            raise invalid_value(
                "admin.listeners", item, "expected http://HOST:PORT or https://HOST:PORT"
            )
        listeners.append(AdminListener(match.group(1), match.group(2), int(match.group(3))))
    ports = [listener.port for listener in listeners if listener.port != 0]
    if len(ports) != len(set(ports)):
        raise InvalidConfigError(
            "admin.listeners", f"each admin listener needs its own port: {','.join(items)}"
        )
    return tuple(listeners)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def validate_admin(values: Mapping[str, Any], raw: Mapping[str, str]) -> None:
    """Raise :class:`InvalidConfigError` for an admin endpoint kcore would not serve as asked."""
    listeners: tuple[AdminListener, ...] = values["admin_listeners"]
    token_file = values["admin_auth_token_file"]
    client_auth = values["admin_ssl_client_auth"]
    if token_file is None:
        exposed = [
            str(x)
            for x in listeners
            if not is_loopback(x.host) and not (x.scheme == "https" and client_auth == "required")
        ]
        if exposed:
            raise InvalidConfigError(
                "admin.listeners",
                f"admin listener {', '.join(exposed)} is not a loopback address and "
                "admin.auth.token.file is not set: an admin endpoint without authentication "
                "(bearer tokens, or admin.ssl.client.auth=required on https://) may only bind "
                "127.0.0.1, ::1 or localhost",
            )
    else:  # read now, so a missing or empty file is a startup error naming the key
        TokenFile(token_file)
    https = any(x.scheme == "https" for x in listeners)
    for key in ("admin.ssl.certfile", "admin.ssl.keyfile"):
        if https and not values[key.replace(".", "_")]:
            raise InvalidConfigError(key, f"an https:// admin listener needs {key}")
        if not https and values[key.replace(".", "_")]:
            raise InvalidConfigError(
                key, f"{key} is set but admin.listeners has no https:// listener"
            )
    _validate_client_auth(values, raw, https)


def _validate_client_auth(values: Mapping[str, Any], raw: Mapping[str, str], https: bool) -> None:
    client_auth = values["admin_ssl_client_auth"]
    truststore = values["admin_ssl_truststore_location"]
    if client_auth != "none" and not https:
        raise InvalidConfigError(
            "admin.ssl.client.auth",
            f"admin.ssl.client.auth={client_auth} but admin.listeners has no https:// listener",
        )
    if client_auth == "none":
        if truststore:
            raise InvalidConfigError(
                "admin.ssl.truststore.location",
                "admin.ssl.truststore.location is set but admin.ssl.client.auth is none",
            )
        return
    if not truststore:
        raise InvalidConfigError(
            "admin.ssl.truststore.location",
            f"admin.ssl.client.auth={client_auth} needs admin.ssl.truststore.location",
        )
    try:  # read now: a file that does not load is a startup error naming the key
        ssl.create_default_context().load_verify_locations(truststore)
    except (OSError, ssl.SSLError) as e:
        raise InvalidConfigError(
            "admin.ssl.truststore.location", f"cannot load {truststore}: {e}"
        ) from None
    rules = raw.get("ssl.principal.mapping.rules", DEFAULT_RULES)
    try:
        SslPrincipalMapper(rules)
    except ValueError as e:
        raise InvalidConfigError("ssl.principal.mapping.rules", str(e)) from None
