"""``kcore acls``: add, remove and list ACLs (``kafka-acls.sh``, Kafka's ``AclCommand``; the
``--cluster-mirror`` resource: spec §11.4, M-107).

Kafka's options, checks and output lines, to the character (a tab starts each ACL line, as
Kafka's ``"\\t" + acl`` does)::

    kcore acls --bootstrap-server :9092 --add --allow-principal User:alice --operation Read \\
        --topic orders
    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    kcore acls --bootstrap-server :9092 --list --topic orders
    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

The resources are ``--topic``, ``--group``, ``--transactional-id``, ``--delegation-token``,
``--user-principal`` and ``--cluster-mirror`` (each repeatable; ``*`` is the wildcard) and
``--cluster``; ``--resource-pattern-type`` is ``literal`` (the default) or ``prefixed`` for
``--add``, and also ``any`` or ``match`` to list or remove. ``--producer`` and ``--consumer``
make Kafka's role ACLs (WRITE, DESCRIBE, CREATE on the topics and WRITE, DESCRIBE on the
transactional ids; READ, DESCRIBE on the topics and READ on the groups; ``--idempotent`` adds
IDEMPOTENT_WRITE on the cluster). ``--remove`` asks before deleting unless ``--force`` is given,
reading ``y`` from standard input as Kafka does.

The ACLs are in force once the cluster has an authorizer (``authorizer.class.name``, see
docs/operations.md); without one the broker answers SECURITY_DISABLED. Exit status 0, 1 when the
cluster refused (one line on stderr), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from kcore.client.acls import (
    AclBinding,
    AclBindingFilter,
    create_acls,
    delete_acls,
    describe_acls,
    exact_filter,
    pattern_of,
)
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text, repeated
from kcore.metadata.acls import (
    CLUSTER_RESOURCE_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    supported_operations,
)

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = "This tool helps to manage acls on kafka."


def pascal(name: str) -> str:
    """Kafka's ``toPascalCase``: ``DESCRIBE_CONFIGS`` -> ``DescribeConfigs``."""
    return "".join(part.capitalize() for part in name.split("_"))


# Kafka's AclEntry.ACL_OPERATIONS: every operation but UNKNOWN and ANY.
ACL_OPERATIONS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
_OPERATIONS_BY_NAME = {
    spelling: op
    for op in ACL_OPERATIONS
    for spelling in (pascal(op.name), pascal(op.name).upper(), op.name)
}
PATTERN_TYPES = {p.name.lower(): p for p in PatternType if p != PatternType.UNKNOWN}

OPTIONS = [
    Option(
        "bootstrap-server",
        "A list of host/port pairs to use for establishing the connection to the Kafka cluster."
        " This list should be in the form host1:port1,host2:port2,... This config is required "
        "for acl management using admin client API.",
        "server to connect to",
    ),
    Option(
        "command-config",
        "A property file containing configs to be passed to Admin Client.",
        "command-config",
    ),
    Option(
        "topic",
        "topic to which ACLs should be added or removed. A value of '*' indicates ACL should "
        "apply to all topics.",
        "topic",
        repeat=True,
    ),
    Option("cluster", "Add/Remove cluster ACLs."),
    Option(
        "group",
        "Consumer Group to which the ACLs should be added or removed. A value of '*' indicates "
        "the ACLs should apply to all groups.",
        "group",
        repeat=True,
    ),
    Option(
        "transactional-id",
        "The transactionalId to which ACLs should be added or removed. A value of '*' indicates "
        "the ACLs should apply to all transactionalIds.",
        "transactional-id",
        repeat=True,
    ),
    Option(
        "idempotent",
        "Enable idempotence for the producer. This should be used in combination with the "
        "--producer option. Note that idempotence is enabled automatically if the producer is "
        "authorized to a particular transactional-id.",
    ),
    Option(
        "delegation-token",
        "Delegation token to which ACLs should be added or removed. A value of '*' indicates "
        "ACL should apply to all tokens.",
        "delegation-token",
        repeat=True,
    ),
    Option(
        "cluster-mirror",
        "Cluster mirror to which ACLs should be added or removed. A value of '*' indicates the "
        "ACLs should apply to all cluster mirrors.",
        "cluster-mirror",
        repeat=True,
    ),
    Option(
        "resource-pattern-type",
        "The type of the resource pattern or pattern filter. When adding acls, this should be a "
        "specific pattern type, e.g. 'literal' or 'prefixed'. When listing or removing acls, a "
        "specific pattern type can be used to list or remove acls from specific resource "
        "patterns, or use the filter values of 'any' or 'match', where 'any' will match any "
        "pattern type, but will match the resource name exactly, where as 'match' will perform "
        "pattern matching to list or remove all acls that affect the supplied resource(s). "
        "WARNING: 'match', when used in combination with the '--remove' switch, should be used "
        "with care.",
        "ANY|MATCH|LITERAL|PREFIXED",
        type="ResourcePatternType",
        default="LITERAL",
    ),
    Option("add", "Indicates you are trying to add ACLs."),
    Option("remove", "Indicates you are trying to remove ACLs."),
    Option(
        "list",
        "List ACLs for the specified resource, use --topic <topic> or --group <group> or "
        "--cluster to specify a resource.",
    ),
    Option(
        "operation",
        "Operation that is being allowed or denied. Valid operation names are: \n"
        + "\n".join(f"\t{pascal(op.name)}" for op in ACL_OPERATIONS)
        + "\n",
        "",
        default="All",
        repeat=True,
    ),
    Option(
        "allow-principal",
        "principal is in principalType:name format. Note that principalType must be supported "
        "by the Authorizer being used. For example, User:'*' is the wild card indicating all "
        "users.",
        "allow-principal",
        repeat=True,
    ),
    Option(
        "deny-principal",
        "principal is in principalType:name format. By default anyone not added through "
        "--allow-principal is denied access. You only need to use this option as negation to "
        "already allowed set. Note that principalType must be supported by the Authorizer being "
        "used. For example if you wanted to allow access to all users in the system but not "
        "test-user you can define an ACL that allows access to User:'*' and specify "
        "--deny-principal=User:test@EXAMPLE.COM. AND PLEASE REMEMBER DENY RULES TAKES "
        "PRECEDENCE OVER ALLOW RULES.",
        "deny-principal",
        repeat=True,
    ),
    Option(
        "principal",
        "List ACLs for the specified principal. principal is in principalType:name format. Note "
        "that principalType must be supported by the Authorizer being used. Multiple "
        "--principal option can be passed.",
        "principal",
        optional=True,
        repeat=True,
    ),
    Option(
        "allow-host",
        "Host from which principals listed in --allow-principal will have access. If you have "
        "specified --allow-principal then the default for this option will be set to '*' which "
        "allows access from all hosts.",
        "allow-host",
        repeat=True,
    ),
    Option(
        "deny-host",
        "Host from which principals listed in --deny-principal will be denied access. If you "
        "have specified --deny-principal then the default for this option will be set to '*' "
        "which denies access from all hosts.",
        "deny-host",
        repeat=True,
    ),
    Option(
        "producer",
        "Convenience option to add/remove ACLs for producer role. This will generate ACLs that "
        "allows WRITE,DESCRIBE and CREATE on topic.",
    ),
    Option(
        "consumer",
        "Convenience option to add/remove ACLs for consumer role. This will generate ACLs that "
        "allows READ,DESCRIBE on topic and READ on group.",
    ),
    Option("force", "Assume Yes to all queries and do not prompt."),
    Option(
        "user-principal",
        "Specifies a user principal as a resource in relation with the operation. For instance "
        "one could grant CreateTokens or DescribeTokens permission on a given user principal.",
        "user-principal",
        repeat=True,
    ),
]
HELP = help_text(USAGE, OPTIONS)

# (option dest, resource type) of the named resources, in Kafka's order.
RESOURCE_OPTIONS = (
    ("topic", ResourceType.TOPIC),
    ("group", ResourceType.GROUP),
    ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ("delegation_token", ResourceType.DELEGATION_TOKEN),
    ("user_principal", ResourceType.USER),
    ("cluster_mirror", ResourceType.CLUSTER_MIRROR),
)
Pattern = tuple[int, str, int]  # (resource type, name, pattern type)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


class UsageError(Exception):
    """A command-line mistake found after parsing (exit status 2)."""


def resource_pattern(pattern: Pattern, *, filter_: bool = False) -> str:
    """Kafka's ``ResourcePattern`` (or ``ResourcePatternFilter``) ``toString``."""
    kind, name, pattern_type = pattern
    cls = "ResourcePatternFilter" if filter_ else "ResourcePattern"
    return (
        f"{cls}(resourceType={ResourceType(kind).name}, name={name}, "
        f"patternType={PatternType(pattern_type).name})"
    )


def entry_text(acl: AclBinding) -> str:
    """Kafka's ``AccessControlEntry`` ``toString``."""
    return (
        f"(principal={acl.principal}, host={acl.host}, "
        f"operation={AclOperation.of(acl.operation).name}, "
        f"permissionType={AclPermissionType.of(acl.permission_type).name})"
    )


def block(title: str, acls: Iterable[AclBinding]) -> str:
    """Kafka's ``s"$title: $Newline ${acls.map("\\t" + _).mkString(Newline)} $Newline"``
    printed with println: the title, the ACL lines, then an empty line."""
    body = "\n".join("\t" + entry_text(a) for a in acls)
    return f"{title}: \n {body} \n\n"


# -- the command line ----------------------------------------------------------------------


def _usage(args: argparse.Namespace) -> str | None:
    """Kafka's ``checkArgs``: the first failing check's message, or None."""
    if not args.bootstrap_server:
        return "One of --bootstrap-server or --bootstrap-controller must be specified"
    if [args.add, args.remove, args.list].count(True) != 1:
        return "Command must include exactly one action: --list, --add, --remove. "
    if args.list:
        for flag in ("producer", "consumer", "allow_host", "allow_principal", "deny_host",
                     "deny_principal"):  # fmt: skip
            if getattr(args, flag):
                return f'Option "[list]" can\'t be used with option "[{flag.replace("_", "-")}]"'
    for role in ("producer", "consumer"):
        if getattr(args, role):
            for flag in ("operation", "deny_principal", "deny_host"):
                if getattr(args, flag):
                    return (
                        f'Option "[{role}]" can\'t be used with option "[{flag.replace("_", "-")}]"'
                    )
    if args.principal is not None and not args.list:
        return "The --principal option is only available if --list is set"
    if args.producer and not args.topic:
        return "With --producer you must specify a --topic"
    if args.idempotent and not args.producer:
        return "The --idempotent option is only available if --producer is set"
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        return (
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )
    pattern_type = (args.resource_pattern_type or "LITERAL").lower()
    if pattern_type not in PATTERN_TYPES:
        return f"Unknown resource-pattern-type: {args.resource_pattern_type}"
    args.pattern_type = PATTERN_TYPES[pattern_type]
    try:
        args.resource_acls = _resource_acls(args)
    except UsageError as e:
        return str(e)
    return None


def _principals(values: list[str] | None) -> list[str]:
    out = []
    for value in repeated(values):
        value = value.strip()
        if ":" not in value or not value:
            raise UsageError(
                f"expected a string in format principalType:principalName but got {value}"
            )
        out.append(value)
    return list(dict.fromkeys(out))


def _hosts(hosts: list[str] | None, principals: list[str]) -> list[str]:
    if hosts:
        return list(dict.fromkeys(h.strip() for h in hosts))
    return ["*"] if principals else []


def _operation(name: str) -> AclOperation:
    op = _OPERATIONS_BY_NAME.get(name.strip())
    if op is None:
        valid = ", ".join(pascal(o.name) for o in ACL_OPERATIONS)
        raise UsageError(f"Unknown operation {name.strip()}: valid operation names are {valid}")
    return op


def _entries(args, operations: Iterable[AclOperation]) -> list[tuple[str, str, int, int]]:
    """Kafka's ``getAcl``: (principal, host, operation, permission) for every allowed
    principal and host, then every denied one."""
    allowed = _principals(args.allow_principal)
    denied = _principals(args.deny_principal)
    out = []
    for principals, hosts, permission in (
        (allowed, _hosts(args.allow_host, allowed), AclPermissionType.ALLOW),
        (denied, _hosts(args.deny_host, denied), AclPermissionType.DENY),
    ):
        for principal in principals:
            for op in dict.fromkeys(operations):
                for host in hosts:
                    out.append((principal, host, int(op), int(permission)))
    return out


def _resources(args, *, required: bool = True) -> list[Pattern]:
    """Kafka's ``getResourceFilter``: the resources named on the command line."""
    pattern_type = int(args.pattern_type)
    out: list[Pattern] = []
    for dest, kind in RESOURCE_OPTIONS:
        for name in repeated(getattr(args, dest)):
            out.append((int(kind), name.strip(), pattern_type))
    if args.pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        topics = len(repeated(args.topic))  # Kafka's order: the topics, then the cluster
        out.insert(topics, (int(ResourceType.CLUSTER), CLUSTER_RESOURCE_NAME, pattern_type))
    if not out and required:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group "
            "<group> or --delegation-token <Delegation Token ID>"
        )
    return list(dict.fromkeys(out))


def _resource_acls(args) -> dict[Pattern, list[tuple[str, str, int, int]]]:
    """Kafka's ``getResourceFilterToAcls``: the ACL entries for each resource (none given:
    the whole resource, for ``--remove``), checked against the resource type's operations."""
    if args.list:
        return {p: [] for p in _resources(args, required=False)}
    out: dict[Pattern, list] = {}
    resources = _resources(args)
    if not args.producer and not args.consumer:
        ops = [_operation(o) for o in repeated(args.operation)] or [AclOperation.ALL]
        out = {p: _entries(args, ops) for p in resources}
    if args.producer:
        W, D, C = AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE
        for p in resources:
            if p[0] == ResourceType.TOPIC:
                out[p] = _entries(args, (W, D, C))
            elif p[0] == ResourceType.TRANSACTIONAL_ID:
                out[p] = _entries(args, (W, D))
        if args.idempotent:
            cluster = (int(ResourceType.CLUSTER), CLUSTER_RESOURCE_NAME, int(args.pattern_type))
            out[cluster] = _entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for p in resources:
            if p[0] == ResourceType.TOPIC:
                ops = (AclOperation.READ, AclOperation.DESCRIBE)
            elif p[0] == ResourceType.GROUP:
                ops = (AclOperation.READ,)
            else:
                continue
            out[p] = list(dict.fromkeys([*_entries(args, ops), *out.get(p, [])]))
    for (kind, _, _), entries in out.items():
        valid = {*supported_operations(kind), AclOperation.ALL}
        if any(op not in valid for _, _, op, _ in entries):
            names = ", ".join(pascal(o.name) for o in sorted(valid))
            raise UsageError(f"ResourceType {pascal(ResourceType(kind).name)} only supports operations {names}")  # fmt: skip
    if args.add:
        if args.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise UsageError(
                f"A '--resource-pattern-type' value of '{args.pattern_type.name}' is not valid "
                "when adding acls."
            )
        if any(not entries for entries in out.values()):
            raise UsageError(
                "You must specify one of: --allow-principal, --deny-principal when trying to "
                "add ACLs."
            )
    return out


def main(args: argparse.Namespace) -> int:
    return run_tool("acls", args, _usage, _run, help_text=HELP)


# -- the actions ---------------------------------------------------------------------------


def _failed(code: int, message: str | None) -> Refused:
    return Refused(f"Error while executing ACL command: {error_text(code, message)}")


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.add:
        return await _add(client, args)
    if args.remove:
        return await _remove(client, args)
    return await _list(client, args)


async def _add(client: KafkaClient, args) -> int:
    for pattern, entries in args.resource_acls.items():
        acls = [AclBinding(*pattern, *entry) for entry in entries]
        sys.stdout.write(block(f"Adding ACLs for resource `{resource_pattern(pattern)}`", acls))
        sys.stdout.flush()
        response = await create_acls(client, acls)
        for result in response.results:
            if result.error_code:
                raise _failed(result.error_code, result.error_message)
    return 0


def _confirm(args, question: str) -> bool:
    if args.force:
        return True
    print(question, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


async def _remove(client: KafkaClient, args) -> int:
    for pattern, entries in args.resource_acls.items():
        shown = resource_pattern(pattern, filter_=True)
        acls = [AclBinding(*pattern, *entry) for entry in entries]
        if not acls:
            question = f"Are you sure you want to delete all ACLs for resource filter `{shown}`? (y/n)"  # fmt: skip
            filters = [AclBindingFilter(*pattern)]
        else:
            listed = "\n".join("\t" + entry_text(a) for a in acls)
            question = f"Are you sure you want to remove ACLs: \n {listed} \n from resource filter `{shown}`? (y/n)"  # fmt: skip
            filters = [exact_filter(a) for a in acls]
        if not _confirm(args, question):
            continue
        response = await delete_acls(client, filters)
        for result in response.filter_results:
            if result.error_code:
                raise _failed(result.error_code, result.error_message)
    return 0


async def _list(client: KafkaClient, args) -> int:
    patterns = list(args.resource_acls) or [None]
    found: dict[Pattern, list[AclBinding]] = {}
    for pattern in patterns:
        acl_filter = AclBindingFilter() if pattern is None else AclBindingFilter(*pattern)
        response, acls = await describe_acls(client, acl_filter)
        if response.error_code:
            raise _failed(response.error_code, response.error_message)
        for acl in acls:
            same = found.setdefault(pattern_of(acl), [])
            if acl not in same:
                same.append(acl)
    listed = sorted(found.items(), key=lambda item: (item[0][0], item[0][1], item[0][2]))
    if args.principal is None:
        _print_resource_acls(listed)
        return 0
    for principal in _principals(args.principal):
        print(f"ACLs for principal `{principal}`")
        _print_resource_acls(
            [(p, [a for a in acls if a.principal == principal]) for p, acls in listed]
        )
    return 0


def _print_resource_acls(listed) -> None:
    for pattern, acls in listed:
        if acls:
            title = f"Current ACLs for resource `{resource_pattern(pattern)}`"
            sys.stdout.write(block(title, acls))
