"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` checks it, sans-IO.

The client sends one message, ``authzid NUL authcid NUL passwd``; the broker compares the
password with ``user_<authcid>`` of the listener's ``PlainLoginModule`` options
(``listener.name.<l>.plain.sasl.jaas.config``) in constant time. An authorization id other than
the username is refused, as Kafka refuses it. Kafka's messages, which clients show.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from kcore.security.jaas import JaasModule

__all__ = ["PLAIN_MECHANISM", "PlainError", "PlainServer", "plain_message", "plain_users"]

PLAIN_MECHANISM = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


class PlainError(ValueError):
    """A malformed PLAIN message or wrong credentials."""


def plain_users(module: JaasModule) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of a PlainLoginModule entry, by user name."""
    return {k[len("user_") :]: v for k, v in module.options.items() if k.startswith("user_")}


def plain_message(username: str, password: str) -> bytes:
    """What a PLAIN client sends (no authorization id)."""
    return b"\0" + username.encode() + b"\0" + password.encode()


class PlainServer:
    """One PLAIN exchange: :meth:`evaluate` the client's message; returns ``b""`` (PLAIN's
    server has nothing to say) or raises :class:`PlainError`."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, message: bytes) -> bytes:
        if self.complete:
            raise PlainError("SASL/PLAIN exchange already complete")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise PlainError("Authentication failed: username not specified")
        if not password:
            raise PlainError("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise PlainError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        expected = self._users.get(username)
        # Compared against something even for an unknown user: the same time either way.
        known = expected is not None
        ok = hmac.compare_digest(password.encode(), (expected or "\0").encode())
        if not (ok and known):
            raise PlainError(INVALID_CREDENTIALS)
        self.complete = True
        self.username = username
        return b""
