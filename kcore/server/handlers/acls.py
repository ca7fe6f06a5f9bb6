"""CreateAcls, DescribeAcls, DeleteAcls: the ACLs of the metadata log (Kafka's ``AclApis``).

CreateAcls and DeleteAcls are forwarded to the controller, which writes (or removes)
``AccessControlEntryRecord``s; the handler answers once they are committed, so on the node that
runs the active controller a DescribeAcls right after sees them (read-your-writes, as for
topics). DescribeAcls reads this broker's metadata image through the authorizer.

As in Kafka, all three need an authorizer (``authorizer.class.name``): without one they answer
SECURITY_DISABLED, "No Authorizer is configured." With one, CreateAcls and DeleteAcls need ALTER
and DescribeAcls needs DESCRIBE on the CLUSTER resource, else CLUSTER_AUTHORIZATION_FAILED (in
the top-level error of DescribeAcls, in every result of the other two).

Versions: 1-3, what Kafka 4.0 advertises (version 0, without the pattern type, was removed by
KIP-896 although the codec still declares it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcore.metadata.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBindingFilter,
    AclOperation,
    ResourceType,
)
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.handlers.controller_apis import error_response
from kcore.server.registry import HandlerRegistry

NO_AUTHORIZER = "No Authorizer is configured."


def _cluster_denied(ctx, operation: AclOperation) -> str | None:
    """The error message when an authorizer refuses ``operation`` on the cluster, else None."""
    authorizer = ctx.server.authorizer
    if authorizer is None or authorizer.authorize(
        ctx.principal, ctx.client_host, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME
    ):
        return None
    return f"{ctx.principal} is not authorized to {operation.name} the cluster."


def _refused(ctx, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Why this ACL request cannot be served at all: no authorizer, or not authorized."""
    message = _cluster_denied(ctx, operation)
    if message is not None:
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message
    if ctx.server.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    return None


def _creation_error(creation: Any) -> str | None:
    """The checks Kafka's broker makes before handing a creation to the controller (which
    validates the rest: pattern type, resource type, operation, permission, principal)."""
    if (
        creation.resource_type == ResourceType.CLUSTER
        and creation.resource_name != CLUSTER_RESOURCE_NAME
    ):
        return f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
    if not creation.resource_name:
        return "Invalid empty resource name"
    return None


async def _forward(ctx, api_key: int, request: Any, operation: Callable[[Any, int], Any]):
    """``controller_call``; a failure (timeout, no controller) answered in every result of
    ``request``, as the controller itself answers one it cannot serve."""
    try:
        return await ctx.server.controller_call(operation)
    except KafkaError as e:
        return error_response(api_key, request, e.code, e.message)


def _describe_response(acls) -> m.DescribeAclsResponse:
    R = m.DescribeAclsResponse
    response = R(error_message=None)
    resources: dict[tuple[int, str, int], Any] = {}
    for acl in acls:  # sorted by resource: the grouping keeps that order
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resource = resources.get(key)
        if resource is None:
            resource = resources[key] = R.DescribeAclsResource(
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
            )
            response.resources.append(resource)
        resource.acls.append(
            R.AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )
        )
    return response


def register(registry: HandlerRegistry) -> None:
    @registry.register(29, 1, 3)
    async def describe_acls(ctx, body: m.DescribeAclsRequest) -> m.DescribeAclsResponse:
        refused = _refused(ctx, AclOperation.DESCRIBE)
        if refused is not None:
            return m.DescribeAclsResponse(error_code=int(refused[0]), error_message=refused[1])
        binding_filter = AclBindingFilter(
            body.resource_type_filter,
            body.resource_name_filter,
            body.pattern_type_filter,
            body.principal_filter,
            body.host_filter,
            body.operation,
            body.permission_type,
        )
        if binding_filter.is_unknown:
            return m.DescribeAclsResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message="The filter contains UNKNOWN elements.",
            )
        return _describe_response(ctx.server.authorizer.acls(binding_filter))

    @registry.register(30, 1, 3)
    async def create_acls(ctx, body: m.CreateAclsRequest) -> m.CreateAclsResponse:
        R = m.CreateAclsResponse
        refused = _refused(ctx, AclOperation.ALTER)
        if refused is not None:
            return error_response(30, body, *refused)
        results: list[Any] = [None] * len(body.creations)
        valid: list[int] = []
        for i, creation in enumerate(body.creations):
            message = _creation_error(creation)
            if message is None:
                valid.append(i)
            else:
                results[i] = R.AclCreationResult(
                    error_code=int(ErrorCode.INVALID_REQUEST), error_message=message
                )
        if valid:
            request = m.CreateAclsRequest(creations=[body.creations[i] for i in valid])
            response = await _forward(ctx, 30, request, lambda c, now: c.create_acls(request))
            for i, result in zip(valid, response.results, strict=True):
                results[i] = result
        return R(results=results)

    @registry.register(31, 1, 3)
    async def delete_acls(ctx, body: m.DeleteAclsRequest) -> m.DeleteAclsResponse:
        refused = _refused(ctx, AclOperation.ALTER)
        if refused is not None:
            return error_response(31, body, *refused)
        if not body.filters:
            return m.DeleteAclsResponse()
        return await _forward(ctx, 31, body, lambda c, now: c.delete_acls(body))
