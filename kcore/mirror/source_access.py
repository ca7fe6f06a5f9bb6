"""What a mirror needs from its source cluster's security, and what to say when it is refused
(spec M-114, M-115).

The mirror logs in to the source with its own credentials (the ``security.protocol`` /
``sasl.*`` / ``ssl.*`` keys of its config, decision D-25) as one principal, which the source's
ACLs must allow (:data:`SOURCE_PERMISSIONS`, documented in docs/mirroring.md). A refusal is not
a network fault to wait out: its partitions go FAILED at once with a reason that names the
cause and, for a missing ACL, the ``kcore acls`` command that adds it on the source; the
retries of D-13 pick up a fixed source, an altered mirror config reconnects at once (M-68).

Pure: the reasons are built from error codes and names, never from a secret.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcore.protocol.errors import ErrorCode

__all__ = [
    "SOURCE_PERMISSIONS",
    "SourcePermission",
    "authentication_reason",
    "authorization_reason",
    "is_authorization_error",
    "principal_of",
]


@dataclass(frozen=True, slots=True)
class SourcePermission:
    operation: str  # kcore acls --operation
    resource: str  # kcore acls resource option: topic, group, cluster, cluster-mirror
    needed_for: str


#: The source-side ACLs of the mirror's principal (M-115), by resource.
SOURCE_PERMISSIONS = (
    SourcePermission("Describe", "topic", "Metadata: topic ids, partitions and leaders"),
    SourcePermission("Read", "topic", "Fetch of the mirrored topics' records"),
    SourcePermission("DescribeConfigs", "topic", "topic config sync and StartMirrorTopics"),
    SourcePermission("Describe", "group", "ListGroups and OffsetFetch (group offset sync)"),
    SourcePermission("Describe", "cluster", "DescribeAcls (ACL sync)"),
    SourcePermission(
        "Describe", "cluster-mirror", "failback: DescribeClusterMirrors reads the LME (M-69)"
    ),
)

_AUTHORIZATION_ERRORS = frozenset(
    {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def is_authorization_error(code: int) -> bool:
    return code in _AUTHORIZATION_ERRORS


def principal_of(username: str | None) -> str:
    """The principal the source sees: ``User:<sasl user>``; without SASL the certificate's
    mapped name (or ANONYMOUS), which only the source knows."""
    if username:
        return f"User:{username}"
    return "<the mirror's principal on the source>"


def authentication_reason(mirror: str, bootstrap: str, detail: str) -> str:
    """Why the source refused the mirror's login, and what to change."""
    return (
        f"the source cluster ({bootstrap}) refused the credentials of mirror '{mirror}' "
        f"({detail}): correct the mirror's sasl.jaas.config / ssl.* settings (kcore configs "
        f"--entity-type cluster-mirrors --entity-name {mirror} --alter --add-config ...) "
        "or the user on the source"
    )


def authorization_reason(
    code: int,
    *,
    username: str | None,
    bootstrap: str,
    operation: str,
    resource: str,
    name: str,
) -> str:
    """A source ACL missing for ``operation`` on ``resource`` ``name``: the command to add it."""
    option = "--cluster" if resource == "cluster" else f"--{resource} {name}"
    what = resource if resource == "cluster" else f"{resource} {name}"
    return (
        f"the source cluster refused {operation} on {what} "
        f"({ErrorCode(code).name}): on the source add the ACL with: kcore acls "
        f"--bootstrap-server {bootstrap} --add --allow-principal {principal_of(username)} "
        f"--operation {operation} {option}"
    )
