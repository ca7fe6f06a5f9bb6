"""The ACL authorizer: Kafka's ``StandardAuthorizer`` over the ACLs of the metadata image.

Theory of operation
-------------------
ACLs live in the metadata log (``AccessControlEntryRecord``; see :mod:`kcore.metadata.acls`) and
so in every node's metadata image. The authorizer reads them through a callable returning the
image's :class:`~kcore.metadata.image.AclsImage`: a request is judged against whatever the
broker's image holds at that moment, so an ACL is in force as soon as the image has it. The
image is immutable and an unchanged ACL set keeps its object, so the lookup index below is
rebuilt only when the ``AclsImage`` object changes.

``authorize(principal, host, operation, resource_type, name)`` follows Kafka's rules, in order:

1. a **super user** (``super.users``, exact principal string) may do everything, DENY ACLs
   notwithstanding;
2. the ACLs that **match the resource** are those of its type whose pattern is the LITERAL name,
   the LITERAL wildcard ``*``, or a PREFIXED pattern the name starts with (KIP-290);
3. if **none** matches the resource — for any principal, host or operation — the answer is
   ``allow.everyone.if.no.acl.found`` (default false: only super users);
4. otherwise an ACL **applies** when its principal is the caller's or ``User:*``, its host is
   the caller's address or ``*``, and its operation is the one asked, ``ALL``, or — for ALLOW
   ACLs only — one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
   implies DESCRIBE_CONFIGS. A DENY READ does not deny DESCRIBE;
5. any applying **DENY** refuses; else any applying ALLOW allows; else refused.

``authorize_by_resource_type`` answers "may this principal do *operation* on some resource of
this type" (Kafka's ``Authorizer.authorizeByResourceType``, used for IDEMPOTENT_WRITE /
"may write some transactional id"): no implied operations there, and a DENY only cancels the
ALLOWs it dominates (a wildcard DENY, or a PREFIXED DENY whose prefix starts the allowed name).

The module is pure: no I/O, no clock. Who calls it: the request handlers, through
``broker.authorizer`` (None when ``authorizer.class.name`` is empty: everything is allowed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kcore.log.config import InvalidConfigError, invalid_value
from kcore.metadata.acls import (
    WILDCARD_RESOURCE,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operations_bitfield,
    supported_operations,
)
from kcore.metadata.image import AclsImage, StandardAcl

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "WILDCARD_PRINCIPAL",
    "AuthorizerClassName",
    "StandardAuthorizer",
    "SuperUsers",
    "build_authorizer",
    "parse_super_users",
]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_CLASS_NAMES = (STANDARD_AUTHORIZER, "kcore.StandardAuthorizer")
"""The values of ``authorizer.class.name`` that turn this authorizer on (empty: none)."""

WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"

# Kafka's StandardAuthorizerData: ALLOW ACLs for these operations also allow the implied one.
_IMPLIES_DESCRIBE = frozenset(
    (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
     AclOperation.ALTER)
)  # fmt: skip
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS))

# Any resource name works for the "may a super user / allow-everyone caller" probe of
# authorize_by_resource_type; Kafka's default implementation uses this one.
_PROBE_NAME = "hardcode"


# -- configuration ------------------------------------------------------------------------------


class AuthorizerClassName:
    """Validator of ``authorizer.class.name``: empty, or one of :data:`AUTHORIZER_CLASS_NAMES`."""

    def ensure_valid(self, name: str, value: str) -> None:
        if value and value not in AUTHORIZER_CLASS_NAMES:
            raise invalid_value(
                name,
                value,
                "kcore has no such authorizer; set "
                + " or ".join(AUTHORIZER_CLASS_NAMES)
                + ", or leave it empty for none (every request allowed)",
            )

    def __str__(self) -> str:
        return '["", ' + ", ".join(AUTHORIZER_CLASS_NAMES) + "]"


class SuperUsers:
    """Validator of ``super.users``: ``;``-separated ``Type:name`` principals."""

    def ensure_valid(self, name: str, value: str) -> None:
        parse_super_users(value, key=name)

    def __str__(self) -> str:
        return "principals separated by ';' (User:alice;User:bob)"


def parse_super_users(text: str | None, *, key: str = "super.users") -> frozenset[str]:
    """``super.users`` as a set of principal strings (Kafka splits on ``;`` and trims each).

    Raises:
        InvalidConfigError: an item without ``:`` between principal type and name.
    """
    users = set()
    for item in (text or "").split(";"):
        principal = item.strip()
        if not principal:
            continue
        if ":" not in principal:
            raise InvalidConfigError(
                key,
                f"Invalid value {text} for configuration {key}: expected a string in format "
                f"principalType:principalName but got {principal}",
            )
        users.add(principal)
    return frozenset(users)


def build_authorizer(
    class_name: str,
    acls: Callable[[], AclsImage],
    *,
    super_users: Iterable[str] = (),
    allow_everyone_if_no_acl_found: bool = False,
) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` asks for: None when empty.

    Raises:
        InvalidConfigError: a class name kcore does not provide.
    """
    AuthorizerClassName().ensure_valid("authorizer.class.name", class_name)
    if not class_name:
        return None
    return StandardAuthorizer(
        acls,
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
    )


# -- the index --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AclIndex:
    """The ACLs of one AclsImage, by how a resource finds them."""

    literal: dict[tuple[int, str], tuple[StandardAcl, ...]]  # (type, name); name may be "*"
    prefixed: dict[int, dict[str, tuple[StandardAcl, ...]]]  # type -> prefix -> ACLs
    by_type: dict[int, tuple[StandardAcl, ...]]

    @classmethod
    def build(cls, acls: Iterable[StandardAcl]) -> _AclIndex:
        literal: dict[tuple[int, str], list[StandardAcl]] = {}
        prefixed: dict[int, dict[str, list[StandardAcl]]] = {}
        by_type: dict[int, list[StandardAcl]] = {}
        for acl in acls:
            by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type == PatternType.LITERAL:
                literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                prefixes = prefixed.setdefault(acl.resource_type, {})
                prefixes.setdefault(acl.resource_name, []).append(acl)
        return cls(
            {k: tuple(v) for k, v in literal.items()},
            {t: {p: tuple(v) for p, v in ps.items()} for t, ps in prefixed.items()},
            {k: tuple(v) for k, v in by_type.items()},
        )

    def matching(self, resource_type: int, name: str) -> list[StandardAcl]:
        """Every ACL whose resource pattern matches the resource (any principal)."""
        found = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found += self.literal.get((resource_type, WILDCARD_RESOURCE), ())
        prefixes = self.prefixed.get(resource_type)
        if prefixes:
            if len(prefixes) <= len(name):
                for prefix, acls in prefixes.items():
                    if name.startswith(prefix):
                        found += acls
            else:  # fewer lookups by walking the name's own prefixes
                for end in range(1, len(name) + 1):
                    found += prefixes.get(name[:end], ())
        return found


_EMPTY_INDEX = _AclIndex({}, {}, {})


# -- the authorizer -----------------------------------------------------------------------------


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over the metadata image's ACLs (see the module docstring).

    Args:
        acls: returns the current :class:`AclsImage` (``lambda: broker.metadata_image.acls``).
        super_users: principals allowed everything (``super.users``).
        allow_everyone_if_no_acl_found: the answer for a resource no ACL matches.
    """

    def __init__(
        self,
        acls: Callable[[], AclsImage],
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._indexed: AclsImage | None = None
        self._index = _EMPTY_INDEX

    def _current(self) -> _AclIndex:
        image = self._acls()
        if image is not self._indexed:
            self._index = _AclIndex.build(image.acls.values())
            self._indexed = image
        return self._index

    # -- single decisions ----------------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May ``principal`` connecting from ``host`` perform ``operation`` on the resource?

        Args:
            principal: ``Type:name``, e.g. ``"User:alice"`` (``ctx.principal``).
            host: the client's address as text (``ctx.client_host``).
            operation: a concrete operation (READ, WRITE, DESCRIBE, ...).
            resource_type: TOPIC, GROUP, CLUSTER (name ``kafka-cluster``), TRANSACTIONAL_ID, ...
            name: the resource's name.
        """
        if principal in self.super_users:
            return True
        matching = self._current().matching(int(resource_type), name)
        if not matching:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for acl in matching:
            verdict = _applies(acl, principal, host, int(operation))
            if verdict == AclPermissionType.DENY:
                return False
            if verdict == AclPermissionType.ALLOW:
                allowed = True
        return allowed

    def authorize_many(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> list[bool]:
        """:meth:`authorize` for each name, in order (e.g. the topics of one request)."""
        return [self.authorize(principal, host, operation, resource_type, n) for n in names]

    def authorized_names(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> list[str]:
        """The names among ``names`` that :meth:`authorize` allows, in order."""
        return [n for n in names if self.authorize(principal, host, operation, resource_type, n)]

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The 32-bit field of the operations allowed on the resource, among those that apply
        to its type (bit ``1 << op``; Metadata/DescribeGroups/DescribeCluster's
        ``authorized_operations``)."""
        return operations_bitfield(
            op
            for op in supported_operations(resource_type)
            if self.authorize(principal, host, op, resource_type, name)
        )

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May ``principal`` perform ``operation`` on *some* resource of ``resource_type``?

        Kafka's ``Authorizer.authorizeByResourceType``: true for a super user (and whenever a
        resource without ACLs would be allowed); otherwise there must be an ALLOW ACL for the
        operation (or ALL) applying to the principal and host that no DENY dominates: a literal
        name not denied literally nor by a prefix of it, or a prefix no shorter denied prefix
        covers. A DENY on the wildcard refuses; else an ALLOW on the wildcard allows.
        """
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        op = int(operation)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        wildcard_allow = False
        for acl in self._current().by_type.get(int(resource_type), ()):
            if acl.host != WILDCARD_HOST and acl.host != host:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != AclOperation.ALL:
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if acl.permission_type == AclPermissionType.DENY:
                if literal and acl.resource_name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.resource_name)
            elif acl.permission_type == AclPermissionType.ALLOW:
                if literal and acl.resource_name == WILDCARD_RESOURCE:
                    wildcard_allow = True  # wins over named DENYs, not over a wildcard DENY
                else:
                    allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return True
        for pattern, name in allow:
            if pattern == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:end] in deny_prefixed for end in range(1, len(name) + 1)):
                continue
            return True
        return False

    # Another name for the same question, as the enforcement side may ask it.
    authorize_any = authorize_by_resource_type

    # -- listing -------------------------------------------------------------------------------

    def acls(self, binding_filter: AclBindingFilter) -> list[StandardAcl]:
        """Every ACL the filter matches (DescribeAcls), in a stable order."""
        found = [acl for acl in self._acls().acls.values() if binding_filter.matches(acl)]
        return sorted(found, key=_sort_key)


def _applies(acl: StandardAcl, principal: str, host: str, operation: int) -> int | None:
    """ALLOW or DENY when ``acl`` applies to this caller and operation, else None (Kafka's
    ``StandardAuthorizerData.findResult``); the resource already matched."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL and acl.operation != operation:
        if acl.permission_type != AclPermissionType.ALLOW:
            return None  # a DENY covers only its own operation (or ALL)
        if operation == AclOperation.DESCRIBE:
            if acl.operation not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    if acl.permission_type == AclPermissionType.DENY:
        return AclPermissionType.DENY
    if acl.permission_type == AclPermissionType.ALLOW:
        return AclPermissionType.ALLOW
    return None


def _sort_key(acl: StandardAcl) -> tuple:
    return (
        acl.resource_type,
        acl.pattern_type,
        acl.resource_name,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission_type,
    )
