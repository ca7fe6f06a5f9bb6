"""``kcore configs``: describe and change the configs of topics, brokers and cluster mirrors
(``kafka-configs.sh``, Kafka's ``ConfigCommand``; cluster mirrors: spec §11.3, M-106).

Kafka's options, checks and output lines::

    kcore configs --bootstrap-server :9092 --entity-type topics --entity-name orders \\
        --alter --add-config 'max.message.bytes=1024,cleanup.policy=[compact,delete]'
    Completed updating config for topic orders.
    kcore configs --bootstrap-server :9092 --describe --topic orders
    Dynamic configs for topic orders are:
      cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}
      max.message.bytes=1024 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=1024, DEFAULT_CONFIG:message.max.bytes=1048588}
    kcore configs --bootstrap-server :9092 --alter --broker-defaults --delete-config log.retention.ms
    Completed updating default config for brokers in the cluster.
    kcore configs --bootstrap-server :9094 --entity-type cluster-mirrors --entity-name my-mirror \\
        --alter --add-config bootstrap.servers=localhost:9092
    Completed updating config for mirror my-mirror.

``--describe`` lists the dynamic configs (those set on the entity: for a broker, its own or —
with ``--broker-defaults`` / ``--entity-default`` — the cluster-wide defaults); ``--all`` every
config with its source. Without a name every topic, or every broker and then the defaults, or
every mirror is described. ``--alter`` sends one IncrementalAlterConfigs (SET for
``--add-config``, DELETE for ``--delete-config``); a key to delete that the entity does not set
is refused first, as Kafka refuses it (``Invalid config(s): k``).

kcore serves the entity types ``topics``, ``brokers``, ``cluster-mirrors`` and ``users`` (SCRAM
credentials only: :mod:`kcore.commands.configs_users`); the other types of Kafka's tool (client,
user and IP quotas, broker loggers, client metrics, group configs) are refused with one line. Exit status 0, 1 when the cluster refused (one line on
stderr), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from kcore.client import mirrors as mirror_admin
from kcore.client.admin import (
    AlterConfigOp,
    ConfigResourceType,
    describe_configs,
    incremental_alter_configs,
)
from kcore.client.cluster import KafkaClient
from kcore.commands import configs_users
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import Option, add_options, help_text
from kcore.log.config import TOPIC_CONFIGS, ConfigSource
from kcore.metadata import mirror_configs
from kcore.metadata.config_control import BROKER_DYNAMIC_CONFIGS
from kcore.metadata.topic_names import validate_topic_name
from kcore.properties import load_properties
from kcore.protocol.errors import KafkaError

ADD_HELP = False  # Kafka's own --help text (joptsimple's layout), not argparse's

USAGE = (
    "This tool helps to manipulate and describe entity config for a topic, broker or cluster mirror"
)


def _valid_keys(title: str, names) -> str:
    return f"For entity-type '{title}': \n" + "".join(f"\t{n}\n" for n in sorted(names))


OPTIONS = [
    Option("bootstrap-server", "The Kafka servers to connect to.", "server to connect to"),
    Option(
        "command-config",
        "Property file containing configs to be passed to Admin Client. This is used only with "
        "--bootstrap-server option for describing and altering broker configs.",
        "command config property file",
    ),
    Option("alter", "Alter the configuration for the entity."),
    Option("describe", "List configs for the given entity."),
    Option("all", "List all configs for the given entity, including static configs if available."),
    Option("entity-type", "Type of entity (topics/brokers/users/cluster-mirrors)", "", repeat=True),
    Option(
        "entity-name",
        "Name of entity (topic name/broker id/user principal name/cluster mirror name)",
        "",
        repeat=True,
    ),
    Option(
        "entity-default",
        "Default entity name for brokers (applies to corresponding entity type)",
    ),
    Option(
        "add-config",
        "Key Value pairs of configs to add. Square brackets can be used to group values which "
        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'. The following is a list of valid "
        "configurations: "
        + _valid_keys("topics", TOPIC_CONFIGS)
        + _valid_keys(
            "brokers",
            {
                *BROKER_DYNAMIC_CONFIGS,
                *(s.name for k in TOPIC_CONFIGS.values() for s in k.synonyms),
            },
        )
        + _valid_keys("users", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
        + _valid_keys(
            "cluster-mirrors", [*mirror_configs.MIRROR_KEYS, *mirror_configs.CLIENT_KEYS]
        ).rstrip("\n"),
        "",
    ),
    Option(
        "add-config-file",
        "Path to a properties file with configs to add. See add-config for a list of valid "
        "configurations.",
        "",
    ),
    Option("delete-config", "config keys to remove 'k1,k2'", "", repeat=True),
    Option("force", "Suppress console prompts"),
    Option("topic", "The topic's name.", ""),
    Option("broker", "The broker's ID.", ""),
    Option("broker-defaults", "The config defaults for all brokers."),
]
HELP = help_text(USAGE, OPTIONS)


@dataclass(frozen=True)
class EntityType:
    """An entity type of the command line: its resource type, the word its messages use, and
    the config source of what ``--describe`` lists without ``--all``."""

    resource_type: int
    word: str
    dynamic_source: int


ENTITY_TYPES = {
    "topics": EntityType(ConfigResourceType.TOPIC, "topic", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    "brokers": EntityType(ConfigResourceType.BROKER, "broker", ConfigSource.DYNAMIC_BROKER_CONFIG),
    # A mirror's own settings have no config source of Kafka's: UNKNOWN (spec M-106). The
    # spec's output line says "mirror" (the type's older spelling was "mirrors").
    "cluster-mirrors": EntityType(ConfigResourceType.CLUSTER_MIRROR, "mirror", ConfigSource.UNKNOWN),
}  # fmt: skip
USERS = "users"  # SCRAM credentials (kcore/commands/configs_users.py), not in ENTITY_TYPES
# Kafka's entity types that kcore does not serve.
NOT_SERVED = {
    "clients": "client quotas",
    "ips": "IP connection quotas",
    "broker-loggers": "broker log levels",
    "client-metrics": "client metrics subscriptions",
    "groups": "group configs",
}
# Kafka's ConfigEntry.ConfigSource names, by wire code.
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"  # Kafka's lookahead: not inside [...]
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's options. ``parser`` must be made with ``add_help=False`` (ADD_HELP)."""
    add_options(parser, OPTIONS)


def _entities(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Kafka's ``entityTypes`` and ``entityNames`` ("" for a default)."""
    types = list(args.entity_type or [])
    names = list(args.entity_name or [])
    if args.entity_default:
        names.append("")
    for flag, kind in (("topic", "topics"), ("broker", "brokers")):
        if getattr(args, flag) is not None:
            types.append(kind)
            names.append(getattr(args, flag))
    if args.broker_defaults:
        types.append("brokers")
        names.append("")
    return types, names


def _usage(args: argparse.Namespace) -> str | None:
    """Kafka's ``checkArgs`` for what kcore serves: the first failing check's message."""
    if args.alter == args.describe:
        return "Command must include exactly one action: --describe, --alter"
    if args.describe:
        for flag in ("add_config", "add_config_file", "delete_config"):
            if getattr(args, flag) is not None:
                return (
                    f'Option "[describe]" can\'t be used with option "[{flag.replace("_", "-")}]"'
                )
    if args.all and not args.describe:
        return "--all is only valid with --describe"
    types, names = _entities(args)
    if len(types) != len(set(types)):
        return f"Duplicate entity type(s) specified: {', '.join(sorted(set(types)))}"
    for kind in types:
        if kind in NOT_SERVED:
            return (
                f"kcore does not serve {NOT_SERVED[kind]} (entity type {kind}); it serves "
                "topics, brokers, users (SCRAM credentials) and cluster-mirrors"
            )
        if kind not in ENTITY_TYPES and kind != USERS:
            return (
                f"Invalid entity type {kind}, the entity type must be one of "
                f"{', '.join(ENTITY_TYPES)} with a --bootstrap-server argument"
            )
    if not types:
        return "At least one entity type must be specified"
    if len(types) > 1:
        return "Only one entity type may be specified"
    specific = args.topic is not None or args.broker is not None or args.broker_defaults
    if specific and (args.entity_name or args.entity_type or args.entity_default):
        return "--entity-{type,name,default} should not be used in conjunction with specific entity flags"
    if not args.bootstrap_server:
        return "The --bootstrap-server argument must be specified"
    if len(names) > 1:
        return "Only one entity name or default may be specified"
    kind, name = types[0], (names[0] if names else None)
    if kind == "brokers" and name:
        try:
            int(name)
        except ValueError:
            return (
                f"The entity name for brokers must be a valid integer broker id, but it is: {name}"
            )
    if name == "" and kind != "brokers":
        action = "--describe" if args.describe else "--alter"
        return f"--entity-default must not be specified with {action} of {kind}"
    if args.alter:
        if name is None:
            if kind == "brokers":
                return "An entity-name or default entity must be specified with --alter of brokers"
            return f"An entity name must be specified with --alter of {kind}"
        if kind == USERS and args.add_config_file is not None:
            return "--add-config-file is not supported with --entity-type users: use --add-config"
        if args.add_config is not None and args.add_config_file is not None:
            return "Only one of --add-config or --add-config-file must be specified"
        if args.add_config is None and args.add_config_file is None and not args.delete_config:
            return (
                "At least one of --add-config, --add-config-file, or --delete-config must be "
                "specified with --alter"
            )
    args.kind, args.name = kind, name
    return None


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``--add-config`` syntax: ``k1=v1,k2=[v1,v2],k3=`` — commas inside brackets
    belong to the value, the brackets are dropped, an empty value is kept.

    Raises:
        Refused: an entry is not ``key=value``, or a key has a character Kafka refuses.
    """
    out: dict[str, str] = {}
    for entry in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, entry)
        if len(pair) != 2:
            raise Refused(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out


def _configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    if args.add_config_file is not None:
        try:
            props = load_properties(args.add_config_file)
        except (OSError, ValueError) as e:
            raise Refused(f"Cannot read --add-config-file {args.add_config_file}: {e}") from None
    else:
        props = parse_add_config(args.add_config) if args.add_config is not None else {}
    for key in props:
        if not _KEY.fullmatch(key):
            raise Refused(f"Invalid character found for config key: {key}")
    return props


def _configs_to_delete(args: argparse.Namespace) -> list[str]:
    return [k.strip() for value in args.delete_config or () for k in value.split(",")]


def main(args: argparse.Namespace) -> int:
    return run_tool("configs", args, _usage, _run, help_text=HELP)


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.kind == USERS:
        to_add = _configs_to_add(args) if args.alter else {}
        return await configs_users.run(client, args, to_add, _configs_to_delete(args))
    if args.alter:
        return await _alter(client, args)
    return await _describe(client, args)


# -- describe ------------------------------------------------------------------------------


def _failed(error: int, message: str | None) -> Refused:
    return Refused(f"Error while executing config command: {error_text(error, message)}")


async def _entity_configs(
    client: KafkaClient, kind: str, name: str, describe_all: bool
) -> list[Any]:
    """The entity's config entries ``--describe`` prints, sorted by name (Kafka's
    ``getResourceConfig``): the dynamic ones, or all of them with ``describe_all``."""
    entity = ENTITY_TYPES[kind]
    if kind == "topics":
        try:
            validate_topic_name(name)
        except KafkaError as e:
            raise Refused(f"Error while executing config command: {e}") from None
    if kind == "brokers" and name:
        await _check_broker(client, int(name))
    response = await describe_configs(client, [(entity.resource_type, name)], include_synonyms=True)
    (result,) = response.results
    if result.error_code:
        raise _failed(result.error_code, result.error_message)
    source = entity.dynamic_source
    if kind == "brokers" and name == "":
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    entries = result.configs
    if not describe_all:
        entries = [e for e in entries if e.config_source == source]
    return sorted(entries, key=lambda e: e.name)


async def _check_broker(client: KafkaClient, broker: int) -> None:
    metadata = await client.refresh_metadata([])
    if broker not in metadata.brokers:
        known = ", ".join(map(str, sorted(metadata.brokers)))
        raise Refused(
            f"Error while executing config command: broker {broker} is not in the cluster "
            f"(brokers: {known})"
        )


def _java(value: Any) -> str:
    """A value as Java's string concatenation prints it (``null``, ``true``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def entry_line(entry: Any) -> str:
    """Kafka's line for one config entry, with its synonyms."""
    synonyms = ", ".join(
        f"{SOURCE_NAMES.get(s.source, 'UNKNOWN')}:{s.name}={_java(s.value)}" for s in entry.synonyms
    )
    return (
        f"  {entry.name}={_java(entry.value)} sensitive={_java(entry.is_sensitive)} "
        f"synonyms={{{synonyms}}}"
    )


async def _entity_names(client: KafkaClient, kind: str) -> list[str]:
    """Every entity of ``kind``: the topics (internal ones too), the brokers then the
    cluster-wide default (""), or the mirrors."""
    if kind == "topics":
        metadata = await client.refresh_metadata(None)
        return sorted(metadata.topics)
    if kind == "brokers":
        metadata = await client.refresh_metadata([])
        return [str(b) for b in sorted(metadata.brokers)] + [""]
    response = await mirror_admin.list_cluster_mirrors(client)
    if response.error_code:
        raise _failed(response.error_code, response.error_message)
    return sorted(x.mirror_name for x in response.mirrors)


async def _describe(client: KafkaClient, args: argparse.Namespace) -> int:
    kind = args.kind
    names = [args.name] if args.name is not None else await _entity_names(client, kind)
    word = ENTITY_TYPES[kind].word
    for name in names:
        entries = await _entity_configs(client, kind, name, args.all)
        if name == "":
            print(f"Default configs for {kind} in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {word} {name} are:")
        for entry in entries:
            print(entry_line(entry))
    return 0


# -- alter ---------------------------------------------------------------------------------


async def _alter(client: KafkaClient, args: argparse.Namespace) -> int:
    kind, name = args.kind, args.name
    entity = ENTITY_TYPES[kind]
    to_add = _configs_to_add(args)
    to_delete = _configs_to_delete(args)
    current = {e.name for e in await _entity_configs(client, kind, name, describe_all=False)}
    invalid = [k for k in to_delete if k not in current]
    if invalid:
        raise Refused(f"Invalid config(s): {','.join(invalid)}")
    ops = [(k, AlterConfigOp.SET, v) for k, v in to_add.items()]
    ops += [(k, AlterConfigOp.DELETE, None) for k in to_delete]
    target = int(name) if kind == "brokers" and name else None
    response = await incremental_alter_configs(
        client, {(entity.resource_type, name): ops}, target=target
    )
    (result,) = response.responses
    if result.error_code:
        raise _failed(result.error_code, result.error_message)
    if name:
        print(f"Completed updating config for {entity.word} {name}.")
    else:
        print(f"Completed updating default config for {kind} in the cluster.")
    return 0
