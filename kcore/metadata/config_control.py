"""Dynamic configuration in the metadata log (Kafka's ``ConfigurationControlManager``).

Resources and their rules:

* TOPIC (2): the topic must exist; every key a client sets or deletes must be a known topic
  config that clients may touch (``mirror.name`` is internal, spec M-04); the resulting set of
  overrides must pass :func:`kcore.log.config.validate` as a whole.
* BROKER (4): name ``""`` is the cluster-wide default, a number is one broker (registered, or
  this controller). Keys must be dynamic broker configs kcore knows: the ``log.*`` (and other)
  broker synonyms of topic configs, which supply topic defaults, the few thread-pool,
  connection and throttle settings in :data:`BROKER_DYNAMIC_CONFIGS`, and the rest of Kafka's
  dynamic broker configs, stored only (:data:`BROKER_STORED_ONLY_CONFIGS`; the listener, SSL
  and SASL ones for one broker only, and never the SSL keystore/truststore keys without a
  listener prefix, as Kafka).
* Any other type needs a validator registered by the module that owns it
  (``QuorumController.register_config_validator``; cluster mirroring registers CLUSTER_MIRROR,
  64). Without one: INVALID_REQUEST "Unsupported resource type.".

IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT (the last two only for LIST keys,
on the comma-separated value). Legacy AlterConfigs replaces the resource's overrides with the
request's, except that internal keys are kept (clients can neither set nor drop them).
A ``ConfigRecord`` is written only for a value that changes; ``validate_only`` writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kcore.log import config as log_config
from kcore.log.config import (
    TOPIC_CONFIGS,
    ConfigType,
    InvalidConfigError,
    ensure_client_alterable,
    validate,
)
from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import ConfigResourceType
from kcore.metadata.topic_names import validate_topic_name
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message
from kcore.security.tls_config import is_tls_dynamic_key, tls_dynamic_key_type

__all__ = [
    "BROKER_DYNAMIC_CONFIGS",
    "BROKER_STORED_ONLY_CONFIGS",
    "dynamic_broker_config_type",
    "is_dynamic_broker_config",
    "ConfigOp",
    "ConfigValidator",
    "alter_configs",
    "incremental_alter_configs",
]


class ConfigOp:
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_OP_NAMES = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}

#: A validator for another resource type: (resource name, new overrides, keys the request
#: touched, context) -> None, raising KafkaError; and which keys are lists (for APPEND).
ConfigValidator = Callable[[str, Mapping[str, str], set[str], ControllerContext], None]

# Dynamic broker settings that are not broker synonyms of topic configs: name -> (type, min).
BROKER_DYNAMIC_CONFIGS: dict[str, tuple[ConfigType, float | None]] = {
    "background.threads": (ConfigType.INT, 1),
    "num.io.threads": (ConfigType.INT, 1),
    "num.network.threads": (ConfigType.INT, 1),
    "num.replica.fetchers": (ConfigType.INT, 1),
    "num.recovery.threads.per.data.dir": (ConfigType.INT, 1),
    "log.cleaner.threads": (ConfigType.INT, 0),
    "log.cleaner.io.max.bytes.per.second": (ConfigType.DOUBLE, None),
    "log.cleaner.backoff.ms": (ConfigType.LONG, 0),
    "max.connections": (ConfigType.INT, 0),
    "max.connections.per.ip": (ConfigType.INT, 0),
    "max.connections.per.ip.overrides": (ConfigType.STRING, None),  # host:count,...
    "leader.replication.throttled.rate": (ConfigType.LONG, 0),
    "follower.replication.throttled.rate": (ConfigType.LONG, 0),
    "replica.alter.log.dirs.io.max.bytes.per.second": (ConfigType.LONG, 0),
    "mirror.replication.throttled.rate": (ConfigType.LONG, 0),  # spec M-95
    "mirror.metadata.refresh.interval.ms": (ConfigType.LONG, 1),  # spec M-95, issue #15
}

# Kafka's other dynamic broker configs (DynamicBrokerConfig.AllDynamicConfigs: the listener,
# SSL and SASL settings, the cleaner's buffers, metric reporters, producer
# state and remote storage) that kcore accepts and stores, as Kafka does, but does not act on:
# kcore has no metric reporters or tiered storage, and sizes its own cleaner. docs/configuration.md lists them as stored only. name -> (type, min).
BROKER_STORED_ONLY_CONFIGS: dict[str, tuple[ConfigType, float | None]] = {
    **dict.fromkeys(
        (
            "advertised.listeners",
            "listeners",
            "listener.security.protocol.map",
            "principal.builder.class",
            "ssl.protocol",
            "ssl.provider",
            "ssl.cipher.suites",
            "ssl.enabled.protocols",
            "ssl.keymanager.algorithm",
            "ssl.trustmanager.algorithm",
            "ssl.endpoint.identification.algorithm",
            "ssl.secure.random.implementation",
            "ssl.client.auth",
            "ssl.engine.factory.class",
            "sasl.mechanism.inter.broker.protocol",
            "sasl.jaas.config",
            "sasl.enabled.mechanisms",
            "sasl.kerberos.service.name",
            "sasl.kerberos.kinit.cmd",
            "sasl.kerberos.principal.to.local.rules",
            "metric.reporters",
        ),
        (ConfigType.STRING, None),
    ),
    "sasl.kerberos.ticket.renew.window.factor": (ConfigType.DOUBLE, None),
    "sasl.kerberos.ticket.renew.jitter": (ConfigType.DOUBLE, None),
    "sasl.kerberos.min.time.before.relogin": (ConfigType.LONG, None),
    "sasl.login.refresh.window.factor": (ConfigType.DOUBLE, None),
    "sasl.login.refresh.window.jitter": (ConfigType.DOUBLE, None),
    "sasl.login.refresh.min.period.seconds": (ConfigType.SHORT, None),
    "sasl.login.refresh.buffer.seconds": (ConfigType.SHORT, None),
    "log.cleaner.dedupe.buffer.size": (ConfigType.LONG, None),
    "log.cleaner.io.buffer.load.factor": (ConfigType.DOUBLE, None),
    "log.cleaner.io.buffer.size": (ConfigType.INT, 0),
    "producer.id.expiration.ms": (ConfigType.INT, 1),
    "transaction.partition.verification.enable": (ConfigType.BOOLEAN, None),
    "remote.log.index.file.cache.total.size.bytes": (ConfigType.LONG, 1),
    "remote.fetch.max.wait.ms": (ConfigType.INT, 1),
    "remote.log.manager.copy.max.bytes.per.second": (ConfigType.LONG, 1),
    "remote.log.manager.fetch.max.bytes.per.second": (ConfigType.LONG, 1),
    "remote.list.offsets.request.timeout.ms": (ConfigType.LONG, 1),
}

# Kafka's PerBrokerConfigs: the listener, SSL and SASL settings may only be set for one broker
# (a BROKER resource named by its id), not as the cluster-wide default.
_PER_BROKER_ONLY = frozenset(
    k
    for k in BROKER_STORED_ONLY_CONFIGS
    if k.split(".")[0] in ("ssl", "sasl") or "listener" in k or k == "principal.builder.class"
)

# SslConfigs.RECONFIGURABLE_CONFIGS: Kafka takes these only with a listener prefix
# (listener.name.<listener>.ssl.keystore.location); with it, every ssl.* key of
# kcore/security/tls_config.py is accepted for one broker, which reloads its TLS listener.
_LISTENER_PREFIX_ONLY = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)

# Kafka's PASSWORD-typed dynamic keys: stored, never shown by DescribeConfigs.
_PASSWORDS = frozenset({"sasl.jaas.config", "ssl.keystore.password", "ssl.key.password"})

# Broker synonyms of topic configs (log.retention.ms -> retention.ms ...).
_SYNONYMS = {s.name: (key, s) for key in TOPIC_CONFIGS.values() for s in key.synonyms}


def _key_type(resource_type: int, key: str) -> ConfigType | None:
    if resource_type == ConfigResourceType.TOPIC:
        k = TOPIC_CONFIGS.get(key)
        return None if k is None else k.type
    if resource_type == ConfigResourceType.BROKER:
        if key in _SYNONYMS:
            topic_key, synonym = _SYNONYMS[key]
            return topic_key.type if synonym.factor == 1 else ConfigType.INT
        entry = _broker_dynamic(key)
        return None if entry is None else entry[0]
    return None


# Kafka's ListenerReconfigurableConfigs: listener.name.<l>.max.connections, above 0.
_LISTENER_MAX_CONNECTIONS = re.compile(r"listener\.name\.[^.]+\.max\.connections")

# Accepted by Kafka but refused by kcore, which does not act on them: the message says why.
_REFUSED = {
    "max.connection.creation.rate": "kcore does not throttle new connections by rate "
    "(max.connections and max.connections.per.ip limit their number)",
}


def _broker_dynamic(key: str) -> tuple[ConfigType, float | None] | None:
    if _LISTENER_MAX_CONNECTIONS.fullmatch(key):
        return ConfigType.INT, 1
    if is_tls_dynamic_key(key):  # listener.name.<l>.ssl.*: a string (passwords too) or a list
        type_ = tls_dynamic_key_type(key)
        return (ConfigType.STRING if type_ is ConfigType.PASSWORD else type_), None
    return BROKER_DYNAMIC_CONFIGS.get(key) or BROKER_STORED_ONLY_CONFIGS.get(key)


def is_dynamic_broker_config(key: str) -> bool:
    """Whether AlterConfigs on a BROKER resource accepts ``key`` (DescribeConfigs' read-only
    flag is its negation)."""
    return key in _SYNONYMS or _broker_dynamic(key) is not None


def dynamic_broker_config_type(key: str) -> ConfigType:
    """The type of a dynamic broker config (PASSWORD for Kafka's password keys)."""
    if key in _PASSWORDS:
        return ConfigType.PASSWORD
    if is_tls_dynamic_key(key):
        return tls_dynamic_key_type(key)
    found = _key_type(ConfigResourceType.BROKER, key)
    return ConfigType.STRING if found is None else found


def _check_broker_value(key: str, text: str) -> None:
    if key in _SYNONYMS:
        topic_key, synonym = _SYNONYMS[key]
        log_config.parse_broker_synonym(topic_key, synonym, text)
        return
    if key in _LISTENER_PREFIX_ONLY:
        raise InvalidConfigError(
            key,
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {key}",
        )
    unprefixed = key.split(".", 3)[3] if key.startswith("listener.name.") else key
    reason = _REFUSED.get(unprefixed)
    if reason is not None:
        raise InvalidConfigError(key, f"{key} is not supported: {reason}")
    entry = _broker_dynamic(key)
    if entry is None:
        raise InvalidConfigError(key, f"Unknown or non-dynamic broker configuration {key}")
    if key == "max.connections.per.ip.overrides":
        log_config.parse_host_counts(key, text)
        return
    type_, low = entry
    if type_ is ConfigType.SHORT:  # parse_text knows INT and LONG; a SHORT is a small INT
        value = log_config.parse_text(key, text, ConfigType.INT)
        if not -(2**15) <= value < 2**15:
            raise InvalidConfigError(
                key, f"Invalid value {text} for configuration {key}: Not a number of type SHORT"
            )
    else:
        value = log_config.parse_text(key, text, type_)
    if low is not None and value < low:
        raise InvalidConfigError(
            key, f"Invalid value {text} for configuration {key}: Value must be at least {low}"
        )


def _check_resource(ctx: ControllerContext, rtype: int, name: str) -> None:
    """Kafka's ``checkConfigResource`` plus the existence check."""
    if rtype == ConfigResourceType.TOPIC:
        try:
            validate_topic_name(name)
        except KafkaError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Illegal topic name.") from None
        if name not in ctx.image.topics.by_name:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
    elif rtype == ConfigResourceType.BROKER:
        if name == "":
            return
        try:
            broker_id = int(name)
        except ValueError:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, "Illegal non-integral BROKER resource type name."
            ) from None
        if broker_id < 0:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, "Illegal negative broker ID in BROKER resource."
            )
        if broker_id not in ctx.image.cluster.brokers and broker_id != ctx.config.node_id:
            raise KafkaError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"No broker with id {broker_id} found."
            )
    elif rtype == ConfigResourceType.BROKER_LOGGER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unsupported resource type BROKER_LOGGER.")
    elif rtype not in ctx.config_validators:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unsupported resource type.")


def _validate(
    ctx: ControllerContext, rtype: int, name: str, new: Mapping[str, str], touched: set[str]
) -> None:
    try:
        if rtype == ConfigResourceType.TOPIC:
            for key in touched:
                ensure_client_alterable(key)
            validate(new, allow_internal=True, broker_config=ctx.broker_defaults())
        elif rtype == ConfigResourceType.BROKER:
            for key in sorted(touched):
                if key in new:
                    _check_broker_value(key, new[key])
                    if name == "" and (key in _PER_BROKER_ONLY or is_tls_dynamic_key(key)):
                        raise InvalidConfigError(
                            key,
                            "Cannot update these configs at default cluster level, broker id "
                            f"must be specified: {key}",
                        )
                elif key not in _SYNONYMS and _broker_dynamic(key) is None:
                    _check_broker_value(key, "")  # unknown key: refused even for DELETE
        else:
            ctx.config_validators[rtype](name, new, touched, ctx)
    except InvalidConfigError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, e.message) from None


def _records(
    rtype: int, name: str, old: Mapping[str, str], new: Mapping[str, str]
) -> list[Message]:
    out: list[Message] = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(
                m.ConfigRecord(
                    resource_type=rtype, resource_name=name, name=key, value=new.get(key)
                )
            )
    return out


def _duplicates(configs: list) -> bool:
    names = [c.name for c in configs]
    return len(set(names)) != len(names)


def _split(value: str) -> list[str]:
    return [v for v in (x.strip() for x in value.split(",")) if v]


def _incremental(ctx: ControllerContext, res: Message) -> list[Message]:
    rtype, name = res.resource_type, res.resource_name
    if _duplicates(res.configs):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    _check_resource(ctx, rtype, name)
    old = dict(ctx.image.configs.get(rtype, name))
    new = dict(old)
    touched: set[str] = set()
    for c in res.configs:
        touched.add(c.name)
        op = c.config_operation
        if op == ConfigOp.SET:
            if c.value is None:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}"
                )
            new[c.name] = c.value
        elif op == ConfigOp.DELETE:
            new.pop(c.name, None)
        elif op in (ConfigOp.APPEND, ConfigOp.SUBTRACT):
            if _key_type(rtype, c.name) is not ConfigType.LIST and not _is_list_key(
                ctx, rtype, c.name
            ):
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Can't {_OP_NAMES[op]} to key {c.name} because its type is not LIST.",
                )
            items = _split(new.get(c.name, ""))
            for v in _split(c.value or ""):
                if op == ConfigOp.APPEND and v not in items:
                    items.append(v)
                elif op == ConfigOp.SUBTRACT and v in items:
                    items.remove(v)
            new[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    _validate(ctx, rtype, name, new, touched)
    return _records(rtype, name, old, new)


def _is_list_key(ctx: ControllerContext, rtype: int, key: str) -> bool:
    validator = ctx.config_validators.get(rtype)
    list_keys = getattr(validator, "list_keys", ())
    return key in list_keys


def incremental_alter_configs(
    ctx: ControllerContext, request: m.IncrementalAlterConfigsRequest
) -> ControllerResult[m.IncrementalAlterConfigsResponse]:
    return _alter(ctx, request, m.IncrementalAlterConfigsResponse, _incremental)


def _alter(ctx: ControllerContext, request: Message, response_cls, apply) -> ControllerResult:
    """(Incremental)AlterConfigs: ``apply`` each resource; an error fails that resource only;
    ``validate_only`` answers without records."""
    response = response_cls()
    records: list[Message] = []
    for res in request.resources:
        out = response_cls.AlterConfigsResourceResponse(
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            error_message=None,
        )
        response.responses.append(out)
        try:
            records += apply(ctx, res)
        except KafkaError as e:
            out.error_code, out.error_message = int(e.code), e.message
    return ControllerResult.of([] if request.validate_only else records, response)


def _legacy(ctx: ControllerContext, res: Message) -> list[Message]:
    rtype, name = res.resource_type, res.resource_name
    if _duplicates(res.configs):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    _check_resource(ctx, rtype, name)
    old = dict(ctx.image.configs.get(rtype, name))
    new = {c.name: c.value for c in res.configs if c.value is not None}
    touched = set(new) | {c.name for c in res.configs}
    for key, value in old.items():
        if key not in touched:
            internal = (
                rtype == ConfigResourceType.TOPIC
                and key in TOPIC_CONFIGS
                and TOPIC_CONFIGS[key].internal_only
            )
            if internal:
                new[key] = value  # kept: only the controller's own operations change it
            else:
                touched.add(key)
    _validate(ctx, rtype, name, new, touched)
    return _records(rtype, name, old, new)


def alter_configs(
    ctx: ControllerContext, request: m.AlterConfigsRequest
) -> ControllerResult[m.AlterConfigsResponse]:
    return _alter(ctx, request, m.AlterConfigsResponse, _legacy)
