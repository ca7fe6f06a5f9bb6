"""ACLs the tests grant through confluent-kafka's AdminClient (the real client path)."""

from __future__ import annotations


def allow_literal(admin, resource_type, name: str, principal: str, operation, timeout=30) -> None:
    """An ALLOW ACL for ``principal`` on the literal resource ``name``, from any host, created
    and committed (``admin``: a confluent-kafka AdminClient, kept alive by the caller)."""
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType

    binding = AclBinding(
        resource_type,
        name,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding], request_timeout=timeout).values():
        future.result(timeout)
