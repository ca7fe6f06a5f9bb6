"""What a route handler reaches through the request: the broker, the caller's principal, and
:func:`kafka`, the one way a route performs a Kafka operation (see :mod:`kcore.admin.kafka`)."""

from __future__ import annotations

from typing import Any

from quart import current_app, g, request

from kcore.admin import kafka as _kafka

ANONYMOUS = "User:ANONYMOUS"


def broker() -> Any:
    """The :class:`~kcore.server.broker.KafkaBroker` this endpoint belongs to."""
    return current_app.extensions["kcore"].broker


def principal() -> str:
    """The caller: the principal of its bearer token, or ``User:ANONYMOUS`` on an endpoint
    without tokens (which is loopback only)."""
    return getattr(g, "principal", ANONYMOUS)


async def kafka(body: Any) -> Any:
    """Dispatch a Kafka request message to this broker as the caller; its response."""
    return await _kafka.call(broker(), principal(), request.remote_addr or "", body)
