"""Producer and consumer settings by Kafka's names (``acks``, ``group.id`` ...), typed and checked.

The console tools (and anyone holding a Kafka ``.properties`` file) pass settings as strings;
:func:`producer_config` and :func:`consumer_config` turn them into the typed dataclasses the
:class:`~kcore.client.producer.Producer` and :class:`~kcore.client.consumer.Consumer` take.
Each table lists every setting kcore's client honours with Kafka's default; a name outside it
(or one kcore does not implement, such as SASL mechanisms other than PLAIN and SCRAM, or
``enable.idempotence=true``)
is refused with :class:`ConfigError` rather than ignored, because a setting that silently does
nothing is worse than one that fails. Values are checked as Kafka's ``ConfigDef`` checks them and
a bad one is refused with Kafka's wording (``Invalid value x for configuration acks: ...``).
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) with Kafka's client ``ssl.*``
keys (PEM stores) and ``sasl.mechanism`` / ``sasl.jaas.config`` are read by
:mod:`kcore.security.client_security`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcore.client.partitioner import ROUND_ROBIN_PARTITIONER
from kcore.record.compression import CompressionType
from kcore.security.client_security import (
    CLIENT_SECURITY_KEYS,
    CLIENT_SECURITY_PROTOCOLS,
    ClientSecurity,
    ClientSecurityError,
    client_security,
)

__all__ = ["ConfigError", "ConsumerConfig", "ProducerConfig", "consumer_config", "producer_config"]

_BYTE_ARRAY_SERIALIZER = "org.apache.kafka.common.serialization.ByteArraySerializer"
_BYTE_ARRAY_DESERIALIZER = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
RANGE_ASSIGNOR = "org.apache.kafka.clients.consumer.RangeAssignor"
_BUILT_IN_PARTITIONERS = ("", "org.apache.kafka.clients.producer.internals.DefaultPartitioner")


class ConfigError(ValueError):
    """A client setting that is unknown, unsupported by kcore, or has a bad value."""


def _invalid(name: str, value: str, why: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {name}: {why}")


def _int(low: int | None = None, high: int = 2**63 - 1) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        try:
            n = int(value.strip())
        except ValueError:
            raise _invalid(name, value, "Not a number of type INT") from None
        if (low is not None and n < low) or n > high:
            raise _invalid(name, value, f"Value must be at least {low}")
        return n

    return parse


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise _invalid(name, value, "Expected value to be either true or false")
    return v == "true"


def _string(name: str, value: str) -> str:
    return value.strip()


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        v = value.strip().lower()
        if v not in allowed:
            raise _invalid(name, value, f"String must be one of: {', '.join(allowed)}")
        return v

    return parse


def _fixed(expected: tuple[str, ...], why: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        if value.strip() not in expected:
            raise ConfigError(f"{name}={value} is not supported: {why}")
        return value.strip()

    return parse


def _acks(name: str, value: str) -> int:
    v = value.strip().lower()
    if v == "all":
        return -1
    if v in ("-1", "0", "1"):
        return int(v)
    raise _invalid(name, value, "String must be one of: all, -1, 0, 1")


def _compression(name: str, value: str) -> CompressionType:
    v = value.strip().lower()
    try:
        return CompressionType[v.upper()]
    except KeyError:
        raise _invalid(
            name, value, "String must be one of: none, gzip, snappy, lz4, zstd"
        ) from None


def _idempotence(name: str, value: str) -> bool:
    if _bool(name, value):
        raise ConfigError(
            "enable.idempotence=true is not supported by kcore's producer; "
            "set enable.idempotence=false (or leave it out)"
        )
    return False


def _partitioner(name: str, value: str) -> str:
    v = value.strip()
    if v not in (*_BUILT_IN_PARTITIONERS, ROUND_ROBIN_PARTITIONER):
        raise ConfigError(
            f"partitioner.class {v} is not supported: kcore's producer has the built-in "
            f"partitioner and {ROUND_ROBIN_PARTITIONER}"
        )
    return v


def _assignors(name: str, value: str) -> str:
    for item in (s.strip() for s in value.split(",") if s.strip()):
        if item not in (RANGE_ASSIGNOR, "range"):
            raise ConfigError(
                f"partition.assignment.strategy {item} is not supported: kcore's consumer "
                f"assigns with {RANGE_ASSIGNOR}"
            )
    return "range"


def _protocol(name: str, value: str) -> str:
    protocol = value.strip().upper()
    if protocol not in CLIENT_SECURITY_PROTOCOLS:
        raise ConfigError(
            f"{name}={value} is not supported: kcore's client speaks "
            f"{', '.join(CLIENT_SECURITY_PROTOCOLS)}"
        )
    return protocol


Table = Mapping[str, tuple[str, Callable[[str, str], Any]]]

_COMMON: Table = {
    "bootstrap.servers": ("bootstrap_servers", _string),
    "client.id": ("client_id", _string),
    "request.timeout.ms": ("request_timeout_ms", _int(0, 2**31 - 1)),
    "retry.backoff.ms": ("retry_backoff_ms", _int(0)),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _int(0)),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int(0)),
    "security.protocol": ("security_protocol", _protocol),
}

_PRODUCER: Table = {
    **_COMMON,
    "acks": ("acks", _acks),
    "compression.type": ("compression_type", _compression),
    "compression.gzip.level": ("gzip_level", _int(1, 9)),
    "compression.lz4.level": ("lz4_level", _int(1, 17)),
    "compression.zstd.level": ("zstd_level", _int(-131072, 22)),
    "batch.size": ("batch_size", _int(0)),
    "linger.ms": ("linger_ms", _int(0)),
    "retries": ("retries", _int(0, 2**31 - 1)),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int(0, 2**31 - 1)),
    "max.block.ms": ("max_block_ms", _int(0)),
    "buffer.memory": ("buffer_memory", _int(0)),
    "max.request.size": ("max_request_size", _int(0, 2**31 - 1)),
    "partitioner.class": ("partitioner_class", _partitioner),
    "partitioner.ignore.keys": ("partitioner_ignore_keys", _bool),
    "enable.idempotence": ("enable_idempotence", _idempotence),
    "key.serializer": ("key_serializer", _fixed((_BYTE_ARRAY_SERIALIZER,), "bytes only")),
    "value.serializer": ("value_serializer", _fixed((_BYTE_ARRAY_SERIALIZER,), "bytes only")),
}

_CONSUMER: Table = {
    **_COMMON,
    "group.id": ("group_id", _string),
    "group.instance.id": ("group_instance_id", _string),
    "group.protocol": ("group_protocol", _fixed(("classic",), "kcore's consumer is classic")),
    "partition.assignment.strategy": ("assignor", _assignors),
    "auto.offset.reset": ("auto_offset_reset", _choice("latest", "earliest", "none")),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int(0, 2**31 - 1)),
    "isolation.level": ("isolation_level", _choice("read_uncommitted", "read_committed")),
    "session.timeout.ms": ("session_timeout_ms", _int(1, 2**31 - 1)),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int(1, 2**31 - 1)),
    "max.poll.interval.ms": ("max_poll_interval_ms", _int(1, 2**31 - 1)),
    "fetch.min.bytes": ("fetch_min_bytes", _int(0, 2**31 - 1)),
    "fetch.max.bytes": ("fetch_max_bytes", _int(0, 2**31 - 1)),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int(0, 2**31 - 1)),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int(0, 2**31 - 1)),
    "max.poll.records": ("max_poll_records", _int(1, 2**31 - 1)),
    "check.crcs": ("check_crcs", _bool),
    "exclude.internal.topics": ("exclude_internal_topics", _bool),
    "allow.auto.create.topics": ("allow_auto_create_topics", _bool),
    "client.rack": ("client_rack", _string),
    "key.deserializer": ("key_deserializer", _fixed((_BYTE_ARRAY_DESERIALIZER,), "bytes only")),
    "value.deserializer": (
        "value_deserializer",
        _fixed((_BYTE_ARRAY_DESERIALIZER,), "bytes only"),
    ),
}


@dataclass(frozen=True)
class _Common:
    bootstrap_servers: str = ""
    client_id: str = ""
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    metadata_max_age_ms: int = 300_000
    security_protocol: str = "PLAINTEXT"
    # security.protocol with the sasl.* and ssl.* settings as given (one of them holds a
    # password): kcore/security/client_security.py reads them.
    security_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def security(self) -> ClientSecurity:
        """The TLS context and SASL settings of the connections; ConfigError for a setting
        kcore's client cannot honour or a store that does not load."""
        try:
            return client_security(dict(self.security_settings))
        except ClientSecurityError as e:
            raise ConfigError(str(e)) from None


@dataclass(frozen=True)
class ProducerConfig(_Common):
    """Kafka's producer settings that kcore's producer honours, with Kafka's defaults (except
    ``enable.idempotence``, false: kcore's producer is not idempotent)."""

    acks: int = -1
    compression_type: CompressionType = CompressionType.NONE
    gzip_level: int | None = None
    lz4_level: int | None = None
    zstd_level: int | None = None
    batch_size: int = 16_384
    linger_ms: int = 5
    retries: int = 2**31 - 1
    delivery_timeout_ms: int = 120_000
    max_block_ms: int = 60_000
    buffer_memory: int = 33_554_432
    max_request_size: int = 1_048_576
    partitioner_class: str = ""
    partitioner_ignore_keys: bool = False
    enable_idempotence: bool = False
    key_serializer: str = _BYTE_ARRAY_SERIALIZER
    value_serializer: str = _BYTE_ARRAY_SERIALIZER

    @property
    def compression_level(self) -> int | None:
        return {
            CompressionType.GZIP: self.gzip_level,
            CompressionType.LZ4: self.lz4_level,
            CompressionType.ZSTD: self.zstd_level,
        }.get(self.compression_type)


@dataclass(frozen=True)
class ConsumerConfig(_Common):
    """Kafka's consumer settings that kcore's consumer honours, with Kafka's defaults."""

    group_id: str | None = None
    group_instance_id: str | None = None
    group_protocol: str = "classic"
    assignor: str = "range"
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    isolation_level: str = "read_uncommitted"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    check_crcs: bool = True
    exclude_internal_topics: bool = True
    allow_auto_create_topics: bool = True
    client_rack: str | None = None
    key_deserializer: str = _BYTE_ARRAY_DESERIALIZER
    value_deserializer: str = _BYTE_ARRAY_DESERIALIZER

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


def _build(cls: type, table: Table, kind: str, props: Mapping[str, str]) -> Any:
    values: dict[str, Any] = {}
    security = []
    for name, raw in props.items():
        if name in CLIENT_SECURITY_KEYS:
            security.append((name, str(raw)))
            if name != "security.protocol":
                continue
        entry = table.get(name)
        if entry is None:
            raise ConfigError(f"Unknown or unsupported {kind} config '{name}'")
        field, parse = entry
        values[field] = parse(name, str(raw))
    config = cls(**values, security_settings=tuple(security))
    config.security()  # refused now, with the settings, not at the first connection
    if kind == "consumer" and config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise ConfigError("heartbeat.interval.ms must be set lower than session.timeout.ms")
    return config


def producer_config(props: Mapping[str, str]) -> ProducerConfig:
    """A :class:`ProducerConfig` from Kafka-named string settings; :class:`ConfigError` for an
    unknown or unsupported name or a bad value."""
    return _build(ProducerConfig, _PRODUCER, "producer", props)


def consumer_config(props: Mapping[str, str]) -> ConsumerConfig:
    """A :class:`ConsumerConfig` from Kafka-named string settings; :class:`ConfigError` for an
    unknown or unsupported name or a bad value."""
    return _build(ConsumerConfig, _CONSUMER, "consumer", props)


def replace(config: Any, **changes: Any) -> Any:
    """A copy of ``config`` with ``changes`` (field names)."""
    return dataclasses.replace(config, **changes)
