"""``/health/live`` and ``/health/ready``, for orchestrators; served without a token.

Live: the process serves HTTP at all (its Trio loop runs). Ready: the node has caught up with
the metadata log and serves its Kafka clients -- the moment the broker opens its client
listeners (``KafkaBroker.ready``) -- and is not shutting down; otherwise 503 and the reason,
so a load balancer stops sending clients to a node that would tell them a topic does not exist.
"""

from __future__ import annotations

from quart import Blueprint

from kcore.admin.context import broker

health = Blueprint("health", __name__)


@health.get("/health/live")
async def live():
    return {"status": "live"}


def readiness(node) -> str | None:
    """Why ``node`` is not ready, or None when it is."""
    if node.stopping:
        return "shutting down"
    if not node.ready.is_set():
        return "catching up with the metadata log"
    return None


@health.get("/health/ready")
async def ready():
    reason = readiness(broker())
    if reason is not None:
        return {"status": "not ready", "reason": reason}, 503
    return {"status": "ready"}
