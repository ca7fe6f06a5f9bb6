"""Authorization in the request handlers: may this request's principal do this?

Each handler asks, as Kafka's ``KafkaApis`` does, whether the request's principal
(``ctx.principal``, from ``ctx.client_host``) may perform an :class:`AclOperation` on a resource
(a topic, a group, a transactional id, or the cluster, named :data:`CLUSTER_NAME`), and answers
a refused resource with the resource's error (:func:`denied_error`). Without an authorizer
(``authorizer.class.name`` unset, ``broker.authorizer`` None) everything is allowed, as in Kafka.

The authorizer is ``ctx.server.authorizer``: an object with
``authorize(principal, host, operation, resource_type, name) -> bool``; it decides whether an
operation implies another (READ, WRITE, DELETE and ALTER imply DESCRIBE), not this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kcore.metadata.acls import AclOperation, ResourceType
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CLUSTER_NAME",
    "NO_OPERATIONS",
    "allowed",
    "allowed_on_any_topic",
    "allowed_on_cluster",
    "authorized_operations",
    "denied_error",
    "filter_allowed",
    "replace",
    "require",
]

CLUSTER_NAME = "kafka-cluster"
# "authorized operations" fields hold this when the client did not ask for them.
NO_OPERATIONS = -2147483648

_DENIED = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    # Kafka has no CLUSTER_MIRROR error; a mirror is cluster-level configuration (spec §12.1).
    ResourceType.CLUSTER_MIRROR: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
}

# Kafka's AclEntry.supportedOperations: what an "authorized operations" bit field may hold.
_O = AclOperation
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DESCRIBE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
        _O.ALTER,
        _O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
}


def _authorizer(ctx) -> Any:
    return ctx.server.authorizer


def enabled(ctx) -> bool:
    """Whether this broker authorizes requests at all."""
    return _authorizer(ctx) is not None


def allowed(ctx, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """May the request's principal perform ``operation`` on the named resource? True when the
    broker has no authorizer."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return bool(
        authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)
    )


def allowed_on_cluster(ctx, operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def filter_allowed(
    ctx, operation: AclOperation, resource_type: ResourceType, names: Iterable[str | None]
) -> set[str]:
    """The names (each asked once) on which the principal may perform ``operation``."""
    distinct = {n for n in names if n is not None}
    if _authorizer(ctx) is None:
        return distinct
    return {n for n in distinct if allowed(ctx, operation, resource_type, n)}


def allowed_on_any_topic(ctx, operation: AclOperation) -> bool:
    """Kafka's ``authorizeByResourceType``: could the principal perform ``operation`` on some
    topic (existing or not)?"""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return bool(
        authorizer.authorize_by_resource_type(
            ctx.principal, ctx.client_host, operation, ResourceType.TOPIC
        )
    )


def denied_error(resource_type: ResourceType) -> ErrorCode:
    """The error Kafka answers for a resource of this type that the principal may not use."""
    return _DENIED[resource_type]


def require(ctx, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """Raise the resource type's authorization error unless the operation is allowed."""
    if not allowed(ctx, operation, resource_type, name):
        code = denied_error(resource_type)
        raise KafkaError(code, code.message)


def authorized_operations(ctx, resource_type: ResourceType, name: str) -> int:
    """Kafka's "authorized operations" bit field (bit ``1 << operation code``) of the
    operations the resource type supports that the principal may perform (all of them without
    an authorizer)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(ctx, op, resource_type, name):
            bits |= 1 << int(op)
    return bits


def replace(message, **changes):
    """A shallow copy of a protocol message with some fields replaced (requests are narrowed
    to their authorized part before a coordinator or the controller sees them)."""
    fields = {f: getattr(message, f) for f in message._fields}
    fields.update(changes)
    return type(message)(**fields)
