"""ACLs in the metadata log (Kafka's ``AclControlManager``) and the filters that match them.

Each ACL binding is stored as an ``AccessControlEntryRecord`` with a random id; deleting it
writes ``RemoveAccessControlEntryRecord(id)``. CreateAcls is idempotent: creating a binding that
already exists succeeds and writes nothing. DeleteAcls answers, per filter, every binding the
filter matches (a binding matched by two filters is listed under both, removed once).

The enumerations are Kafka's wire codes, with kcore's ``CLUSTER_MIRROR`` ACL resource type (8,
spec M-94). A code this broker does not know reads as UNKNOWN, as Kafka's ``fromCode`` does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import StandardAcl
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "CLUSTER_RESOURCE_NAME",
    "PatternType",
    "ResourceType",
    "WILDCARD_RESOURCE",
    "create_acls",
    "delete_acls",
    "operations_bitfield",
    "supported_operations",
]

WILDCARD_RESOURCE = "*"
CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one name of the CLUSTER resource


class _Coded(enum.IntEnum):
    @classmethod
    def of(cls, code: int):
        try:
            return cls(code)
        except ValueError:
            return cls(0)  # UNKNOWN


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    CLUSTER_MIRROR = 8


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (
        AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT,
    ),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
    # spec M-94: the operations a mirror's ACLs grant (kafka-acls.sh --cluster-mirror)
    ResourceType.CLUSTER_MIRROR: (
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS,
    ),
}  # fmt: skip


def supported_operations(resource_type: int) -> tuple[AclOperation, ...]:
    """The operations that apply to a resource type (Kafka's ``AclEntry.supportedOperations``):
    the bits an ``authorized_operations`` field may hold. Empty for UNKNOWN / ANY."""
    return _SUPPORTED_OPERATIONS.get(ResourceType.of(resource_type), ())


def operations_bitfield(operations) -> int:
    """``authorized_operations`` as Kafka encodes it: bit ``1 << op`` per operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def invalid_value(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def validate_new_acl(acl: StandardAcl) -> None:
    """Kafka's ``validateNewAcl``: raises INVALID_REQUEST naming what is wrong."""
    pattern = PatternType.of(acl.pattern_type)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise invalid_value(f"Invalid patternType {pattern.name}")
    rtype = ResourceType.of(acl.resource_type)
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise invalid_value(f"Invalid resourceType {rtype.name}")
    op = AclOperation.of(acl.operation)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise invalid_value(f"Invalid operation {op.name}")
    perm = AclPermissionType.of(acl.permission_type)
    if perm not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise invalid_value(f"Invalid permissionType {perm.name}")
    if not acl.resource_name:
        raise invalid_value("Resource name should not be empty")
    if ":" not in acl.principal:
        raise invalid_value(
            f"Could not parse principal from `{acl.principal}` (no colon is present separating "
            "the principal type from the principal name)"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: None / ANY match anything; MATCH also matches wildcard
    literals and prefixes of the name."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    @property
    def is_unknown(self) -> bool:
        return (
            ResourceType.of(self.resource_type) is ResourceType.UNKNOWN
            or PatternType.of(self.pattern_type) is PatternType.UNKNOWN
            or AclOperation.of(self.operation) is AclOperation.UNKNOWN
            or AclPermissionType.of(self.permission_type) is AclPermissionType.UNKNOWN
        )

    def matches(self, acl: StandardAcl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        ptype = self.pattern_type
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if ptype in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:  # ptype is MATCH here
            return acl.resource_name in (self.resource_name, WILDCARD_RESOURCE)
        if acl.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(acl.resource_name)
        return False

    def _matches_entry(self, acl: StandardAcl) -> bool:
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation == AclOperation.ANY or self.operation == acl.operation)
            and (
                self.permission_type == AclPermissionType.ANY
                or self.permission_type == acl.permission_type
            )
        )


def create_acls(
    ctx: ControllerContext, request: m.CreateAclsRequest
) -> ControllerResult[m.CreateAclsResponse]:
    existing = set(ctx.image.acls.acls.values())
    records: list[Message] = []
    response = m.CreateAclsResponse()
    for c in request.creations:
        acl = StandardAcl(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        result = m.CreateAclsResponse.AclCreationResult(error_message=None)
        response.results.append(result)
        try:
            validate_new_acl(acl)
        except KafkaError as e:
            result.error_code, result.error_message = int(e.code), e.message
            continue
        if acl in existing:
            continue
        existing.add(acl)
        records.append(
            m.AccessControlEntryRecord(
                id=_new_acl_id(ctx),
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )
        )
    return ControllerResult.of(records, response)


def _new_acl_id(ctx: ControllerContext):
    acl_id = ctx.new_uuid()
    while acl_id in ctx.image.acls.acls:
        acl_id = ctx.new_uuid()
    return acl_id


def delete_acls(
    ctx: ControllerContext, request: m.DeleteAclsRequest
) -> ControllerResult[m.DeleteAclsResponse]:
    records: dict[object, Message] = {}
    response = m.DeleteAclsResponse()
    for f in request.filters:
        flt = AclBindingFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        result = m.DeleteAclsResponse.DeleteAclsFilterResult(error_message=None)
        response.filter_results.append(result)
        if flt.is_unknown:
            result.error_code = int(ErrorCode.INVALID_REQUEST)
            result.error_message = "Unknown patternFilter or entryFilter."
            continue
        for acl_id, acl in ctx.image.acls.acls.items():
            if not flt.matches(acl):
                continue
            records.setdefault(acl_id, m.RemoveAccessControlEntryRecord(id=acl_id))
            result.matching_acls.append(
                m.DeleteAclsResponse.DeleteAclsMatchingAcl(
                    error_message=None,
                    resource_type=acl.resource_type,
                    resource_name=acl.resource_name,
                    pattern_type=acl.pattern_type,
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission_type,
                )
            )
    return ControllerResult.of(list(records.values()), response)
