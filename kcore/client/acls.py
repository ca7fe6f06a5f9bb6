"""ACL requests for tools and tests: CreateAcls, DescribeAcls, DeleteAcls.

An ACL travels as an :class:`AclBinding` — a resource pattern (type, name, pattern type) and an
entry (principal, host, operation, permission), with the wire codes of
:mod:`kcore.metadata.acls` — and a filter as an :class:`AclBindingFilter`, whose fields may be
``None`` (any name, principal or host) or the ANY codes. Each helper sends one request to any
broker (which forwards changes to the controller) and returns the raw response; error codes are
returned, not raised, as in :mod:`kcore.client.admin`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kcore.client.cluster import KafkaClient, Target
from kcore.metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from kcore.metadata.image import StandardAcl
from kcore.protocol import messages as m

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "create_acls",
    "delete_acls",
    "describe_acls",
    "exact_filter",
    "pattern_of",
]


# One ACL: ``principal`` (``User:alice``) may (ALLOW) or may not (DENY) do ``operation`` from
# ``host`` (``*``: any) on the resources matching the pattern — the metadata image's own record.
AclBinding = StandardAcl


def pattern_of(acl: AclBinding) -> tuple[int, str, int]:
    """The ACL's resource pattern: (resource type, name, pattern type)."""
    return (acl.resource_type, acl.resource_name, acl.pattern_type)


def exact_filter(acl: AclBinding) -> AclBindingFilter:
    """The filter matching exactly this ACL."""
    return AclBindingFilter(
        acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
        acl.operation, acl.permission_type,
    )  # fmt: skip


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls match: a None name, principal or host matches any; a
    pattern type of MATCH matches every pattern that applies to the name (LITERAL, the ``*``
    wildcard, and the PREFIXED patterns the name starts with)."""

    resource_type: int = int(ResourceType.ANY)
    resource_name: str | None = None
    pattern_type: int = int(PatternType.ANY)
    principal: str | None = None
    host: str | None = None
    operation: int = int(AclOperation.ANY)
    permission_type: int = int(AclPermissionType.ANY)


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """A filter as DescribeAcls and DeleteAcls spell it (the same fields in both)."""
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission_type,
    }


def _bindings(resources: Iterable[Any]) -> list[AclBinding]:
    return [
        AclBinding(
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission_type,
        )
        for r in resources
        for a in r.acls
    ]


async def create_acls(
    client: KafkaClient, acls: Iterable[AclBinding], *, target: Target = "any"
) -> Any:
    """CreateAcls; ``response.results[i]`` answers ``acls[i]``."""
    C = m.CreateAclsRequest
    body = C(
        creations=[
            C.AclCreation(
                resource_type=a.resource_type,
                resource_name=a.resource_name,
                resource_pattern_type=a.pattern_type,
                principal=a.principal,
                host=a.host,
                operation=a.operation,
                permission_type=a.permission_type,
            )
            for a in acls
        ]
    )
    return await client.request(target, body)


async def describe_acls(
    client: KafkaClient, acl_filter: AclBindingFilter, *, target: Target = "any"
) -> tuple[Any, list[AclBinding]]:
    """DescribeAcls: ``(response, the matching ACLs)`` (check ``response.error_code``)."""
    body = m.DescribeAclsRequest(**_filter_fields(acl_filter))
    response = await client.request(target, body)
    return response, _bindings(response.resources)


async def delete_acls(
    client: KafkaClient, filters: Iterable[AclBindingFilter], *, target: Target = "any"
) -> Any:
    """DeleteAcls; ``response.filter_results[i]`` answers ``filters[i]`` with the ACLs it
    deleted (``.matching_acls``)."""
    D = m.DeleteAclsRequest
    body = D(filters=[D.DeleteAclsFilter(**_filter_fields(f)) for f in filters])
    return await client.request(target, body)
