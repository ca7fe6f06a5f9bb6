"""Topic-level configuration: every key Kafka accepts, its type, default, valid values, synonyms.

What this is
------------
One table, :data:`TOPIC_CONFIGS`, with one :class:`ConfigKey` per topic-level configuration key
of Apache Kafka, plus kcore's own ``mirror.name``. Nothing else in kcore restates these facts:
the storage engine reads ``segment.bytes`` or ``retention.ms`` through :class:`LogConfig`, the
controller checks CreateTopics / (Incremental)AlterConfigs with :func:`validate`, and the
DescribeConfigs handler maps :func:`describe`'s entries onto its response.

Where the facts come from
-------------------------
Apache Kafka **4.4**: key names from ``TopicConfig.java``; types, defaults and validators from
``LogConfig.java`` (storage module) and the broker defaults in ``ServerLogConfigs`` /
``RemoteLogManagerConfig``; broker synonyms and their order from
``ServerTopicConfigSynonyms.java``; text parsing and error messages from ``ConfigDef`` and its
validators; checked against the 4.x "Topic-Level Configs" documentation and upgrade notes.
The 4.x changes that matter here:

* 4.0 (KIP-1030): ``segment.bytes`` must be at least 1 MiB; ``message.timestamp.after.max.ms``
  defaults to one hour. ``message.format.version`` and ``message.timestamp.difference.max.ms``
  are gone; ``message.downconversion.enable`` stays, deprecated, as a no-op.
* 4.2 (KIP-1161): a list may not repeat an item or hold an empty one; ``cleanup.policy`` may be
  the empty list (no cleanup at all: infinite retention).
* 4.4 (KIP-1241): ``remote.copy.lag.ms`` / ``remote.copy.lag.bytes``.

``internal.segment.bytes`` is Kafka 4.0's testing-only key: when set it replaces
``segment.bytes`` without its 1 MiB floor (tests roll segments every few hundred bytes). Like
``mirror.name`` it is ``internal_only``: clients can neither set nor see it.

Theory of use
-------------
Topic overrides live in the metadata log as ``ConfigRecord`` entries on the TOPIC resource,
name to string. The controller runs :func:`validate` before it writes them, so every string in
the log parses; clients may never set or delete an ``internal_only`` key (``mirror.name``: only
the controller's cluster-mirroring operations write it, spec M-04).

A broker resolves a topic's settings with its own ``log.*`` settings:
:meth:`LogConfig.from_layers` takes, for each key, the topic override; else the first broker
synonym that is set (in Kafka's order, e.g. ``log.retention.ms``, then ``log.retention.minutes``
× 60000, then ``log.retention.hours`` × 3600000), looking in the dynamic per-broker, dynamic
cluster-default, then static (``server.properties``) layer; else the default. It builds a new
``LogConfig`` whenever a ``ConfigRecord`` for the topic (or a broker default) changes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from kcore.protocol.errors import ErrorCode, KafkaError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MINUTES_TO_MS = 60_000
HOURS_TO_MS = 3_600_000


class ConfigType(enum.IntEnum):
    """``ConfigType`` of DescribeConfigs v3+ (Kafka's ``ConfigDef.Type`` with wire ids)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a value came from: DescribeConfigs' ``ConfigSource`` (wire ids)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4  # kcore: server.properties
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class InvalidConfigError(KafkaError, ValueError):
    """A config key is unknown or a value is bad; the handler answers INVALID_CONFIG (40).

    ``key`` names the bad key (``None`` when :func:`validate` found several); ``errors`` maps
    every bad key to its message; ``message`` (and ``str()``) names each of them.
    """

    def __init__(self, key: str | None, message: str, errors: Mapping[str, str] | None = None):
        self.key = key
        self.errors = dict(errors) if errors is not None else {key or "": message}
        super().__init__(ErrorCode.INVALID_CONFIG, message)

    def __reduce__(self):
        return type(self), (self.key, self.message, self.errors)


def invalid_value(name: str, value: Any, reason: str) -> InvalidConfigError:
    # Kafka's ConfigException(name, value, message) wording, which clients show as is.
    return InvalidConfigError(
        name, f"Invalid value {java_str(value)} for configuration {name}: {reason}"
    )


# -- validators (Kafka's ConfigDef validators; str() is the docs' "Valid Values") -------------


@dataclass(frozen=True)
class Range:
    min: int | None = None
    max: int | None = None

    def ensure_valid(self, name: str, value: Any) -> None:
        if self.min is not None and value < self.min:
            raise invalid_value(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        low = "" if self.min is None else f"{self.min},"
        high = "" if self.max is None else f",{self.max}"
        return f"[{low}...{high}]"


@dataclass(frozen=True)
class OneOf:
    """``ValidString.in``: one of the strings, case-sensitive."""

    values: tuple[str, ...]

    def ensure_valid(self, name: str, value: Any) -> None:
        if value not in self.values:
            raise invalid_value(name, value, "String must be one of: " + ", ".join(self.values))

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ListOf:
    """``ValidList.in`` since 4.2: empty list allowed; no repeated or empty item."""

    values: tuple[str, ...]

    def ensure_valid(self, name: str, value: Any) -> None:
        if len(set(value)) != len(value):
            raise InvalidConfigError(name, f"Configuration '{name}' values must not be duplicated.")
        for item in value:
            if not item:
                raise InvalidConfigError(name, f"Configuration '{name}' values must not be empty.")
            OneOf(self.values).ensure_valid(name, item)

    def __str__(self) -> str:
        return str(OneOf(self.values))


# Utils.validHostPattern's characters (the host part of a host:count item).
_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")
_COUNT = re.compile(r"[0-9]+")


def parse_host_counts(name: str, text: str) -> dict[str, int]:
    """``host:count,...`` (``max.connections.per.ip.overrides``) as Kafka's ``Csv.parseCsvMap``
    reads it: items split at commas, each at its *last* colon (so ``::1:5`` is IPv6 ``::1``),
    the count an INT. Raises :class:`InvalidConfigError` naming ``name``."""
    out: dict[str, int] = {}
    trimmed = text.strip(_JAVA_TRIM)
    for item in (x.strip() for x in trimmed.split(",")) if trimmed else ():
        host, colon, count = item.rpartition(":")
        host, count = host.strip(), count.strip()
        if not colon or not host or not _COUNT.fullmatch(count) or int(count) > INT_MAX:
            raise InvalidConfigError(
                name,
                f"Error parsing configuration property '{name}': bad entry '{item}' "
                "(host:count expected)",
            )
        if not _HOST.fullmatch(host):
            raise InvalidConfigError(name, f"{name} contains invalid addresses : {host}")
        out[host] = int(count)
    return out


class HostCounts:
    """``max.connections.per.ip.overrides``' items: :func:`parse_host_counts`."""

    def ensure_valid(self, name: str, value: Any) -> None:
        parse_host_counts(name, value or "")

    def __str__(self) -> str:
        return "host:count,..."


_REPLICA = re.compile(r"(?:[0-9]+:[0-9]+)?")


class ThrottledReplicas:
    """``ThrottledReplicaListValidator``: ``*`` or ``partition:broker`` items (empty items pass)."""

    def ensure_valid(self, name: str, value: Any) -> None:
        if not (all(_REPLICA.fullmatch(s.strip()) for s in value) or "".join(value) == "*"):
            raise invalid_value(
                name,
                value,
                f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


class GzipLevel:
    """``GzipCompression.LevelValidator``: 1..9, or -1 for zlib's default."""

    def ensure_valid(self, name: str, value: Any) -> None:
        if value > 9 or (value < 1 and value != -1):
            raise invalid_value(name, value, "Value must be between 1 and 9 or equal to -1")

    def __str__(self) -> str:
        return "[1,...,9] or -1"


MIRROR_NAME_SUFFIXES = (".paused", ".stopped")
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def is_valid_mirror_name(name: str) -> bool:
    """Spec M-03: a topic-name-valid name that does not end with a reserved suffix."""
    return (
        _LEGAL_NAME.fullmatch(name) is not None
        and name not in (".", "..")
        and not name.endswith(MIRROR_NAME_SUFFIXES)
    )


class MirrorNameValue:
    """``mirror.name`` (spec M-04): empty, ``<m>``, ``<m>.paused`` or ``<m>.stopped``."""

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is None or value == "":
            return
        base = value
        for suffix in MIRROR_NAME_SUFFIXES:
            if value.endswith(suffix):
                base = value[: -len(suffix)]
                break
        if not is_valid_mirror_name(base):
            raise invalid_value(
                name,
                value,
                "a mirror name is 1 to 249 of [a-zA-Z0-9._-], not '.' or '..', "
                "optionally followed by .paused or .stopped",
            )

    def __str__(self) -> str:
        return "<mirror name>[.paused|.stopped], or empty"


Validator = Range | OneOf | ListOf | ThrottledReplicas | GzipLevel | MirrorNameValue


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker setting that supplies a topic key's value when the topic has no override.

    ``factor`` converts its unit to the topic key's (``log.retention.hours`` × 3600000); such a
    synonym is an INT on the broker. ``default`` is the broker's own default as text (``None``:
    the broker key has no default), reported as a DEFAULT_CONFIG synonym by :func:`describe`.
    """

    name: str
    default: str | None = None
    factor: int = 1


@dataclass(frozen=True)
class ConfigKey:
    """One topic config key; ``attr`` is its :class:`LogConfig` attribute."""

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    synonyms: tuple[BrokerSynonym, ...]
    doc: str
    internal_only: bool = False  # never set or deleted by clients (kcore's mirror.name)
    deprecated: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


# Short names keep one table row to two or three lines.
_s = BrokerSynonym
_B, _S, _I, _L = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG
_D, _LI = ConfigType.DOUBLE, ConfigType.LIST
_THROTTLED = ThrottledReplicas()
_LM = str(LONG_MAX)

_KEYS = [
    # name, type, default, validator, broker synonyms in Kafka's order, doc
    ConfigKey("cleanup.policy", _LI, ("delete",), ListOf(("compact", "delete")),
              (_s("log.cleanup.policy", "delete"),),
              "Retention policy of old segments: delete, compact, both, or none (empty list)."),
    ConfigKey("compression.gzip.level", _I, -1, GzipLevel(), (_s("compression.gzip.level", "-1"),),
              "Compression level when compression.type is gzip."),
    ConfigKey("compression.lz4.level", _I, 9, Range(1, 17), (_s("compression.lz4.level", "9"),),
              "Compression level when compression.type is lz4."),
    ConfigKey("compression.type", _S, "producer",
              OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
              (_s("compression.type", "producer"),),
              "Final compression of stored batches; 'producer' keeps the producer's codec."),
    # zstd-jni's minCompressionLevel() is -(1 << 17); its maximum is 22.
    ConfigKey("compression.zstd.level", _I, 3, Range(-131072, 22),
              (_s("compression.zstd.level", "3"),),
              "Compression level when compression.type is zstd."),
    ConfigKey("delete.retention.ms", _L, 86_400_000, Range(0),
              (_s("log.cleaner.delete.retention.ms", "86400000"),),
              "How long tombstones are kept in a compacted log."),
    ConfigKey("file.delete.delay.ms", _L, 60_000, Range(0),
              (_s("log.segment.delete.delay.ms", "60000"),),
              "Delay before a deleted segment's files are removed from disk."),
    ConfigKey("flush.messages", _L, LONG_MAX, Range(1), (_s("log.flush.interval.messages", _LM),),
              "Force an fsync after this many messages."),
    ConfigKey("flush.ms", _L, LONG_MAX, Range(0),
              (_s("log.flush.interval.ms"), _s("log.flush.scheduler.interval.ms", _LM)),
              "Force an fsync after this many milliseconds."),
    ConfigKey("follower.replication.throttled.replicas", _LI, (), _THROTTLED, (),
              "Replicas throttled on the follower side ('*' for all)."),
    ConfigKey("index.interval.bytes", _I, 4096, Range(0), (_s("log.index.interval.bytes", "4096"),),
              "Bytes of log between two offset-index entries."),
    ConfigKey("leader.replication.throttled.replicas", _LI, (), _THROTTLED, (),
              "Replicas throttled on the leader side ('*' for all)."),
    ConfigKey("local.retention.bytes", _L, -2, Range(-2), (_s("log.local.retention.bytes", "-2"),),
              "Local bytes kept when tiered; -2 means retention.bytes."),
    ConfigKey("local.retention.ms", _L, -2, Range(-2), (_s("log.local.retention.ms", "-2"),),
              "Local time kept when tiered; -2 means retention.ms."),
    ConfigKey("max.compaction.lag.ms", _L, LONG_MAX, Range(1),
              (_s("log.cleaner.max.compaction.lag.ms", _LM),),
              "Longest time a record stays ineligible for compaction."),
    # 1 MiB + 12 bytes of log overhead (offset and length) per batch.
    ConfigKey("max.message.bytes", _I, 1_048_588, Range(0), (_s("message.max.bytes", "1048588"),),
              "Largest record batch accepted, after compression."),
    # A no-op since 4.0 (KAFKA-18269), kept until 5.0 so old clients' settings still pass.
    ConfigKey("message.downconversion.enable", _B, True, None, (),
              "Deprecated no-op: Kafka 4.x never down-converts.", deprecated=True),
    ConfigKey("message.timestamp.after.max.ms", _L, 3_600_000, Range(0),
              (_s("log.message.timestamp.after.max.ms", "3600000"),),
              "How far ahead of the broker's clock a CreateTime timestamp may be."),
    ConfigKey("message.timestamp.before.max.ms", _L, LONG_MAX, Range(0),
              (_s("log.message.timestamp.before.max.ms", _LM),),
              "How far behind the broker's clock a CreateTime timestamp may be."),
    ConfigKey("message.timestamp.type", _S, "CreateTime", OneOf(("CreateTime", "LogAppendTime")),
              (_s("log.message.timestamp.type", "CreateTime"),),
              "Whether batches keep the producer's timestamp or get the append time."),
    ConfigKey("min.cleanable.dirty.ratio", _D, 0.5, Range(0, 1),
              (_s("log.cleaner.min.cleanable.ratio", "0.5"),),
              "Dirty fraction of the log above which the cleaner compacts it."),
    ConfigKey("min.compaction.lag.ms", _L, 0, Range(0),
              (_s("log.cleaner.min.compaction.lag.ms", "0"),),
              "Shortest time a record stays uncompacted."),
    ConfigKey("min.insync.replicas", _I, 1, Range(1), (_s("min.insync.replicas", "1"),),
              "In-sync replicas needed to accept an acks=all write."),
    ConfigKey("preallocate", _B, False, None, (_s("log.preallocate", "false"),),
              "Preallocate a new segment's file on disk."),
    ConfigKey("remote.copy.lag.bytes", _L, 0, Range(-1), (_s("log.remote.copy.lag.bytes", "0"),),
              "Size-based delay before a segment is copied to remote storage."),
    ConfigKey("remote.copy.lag.ms", _L, 0, Range(-1), (_s("log.remote.copy.lag.ms", "0"),),
              "Time-based delay before a segment is copied to remote storage."),
    ConfigKey("remote.log.copy.disable", _B, False, None, (),
              "Stop copying to remote storage; remote data stays readable."),
    ConfigKey("remote.log.delete.on.disable", _B, False, None, (),
              "Delete the remote data when remote storage is disabled."),
    ConfigKey("remote.storage.enable", _B, False, None, (),
              "Tier this topic's data to remote storage."),
    # No validator: any negative value means no size limit.
    ConfigKey("retention.bytes", _L, -1, None, (_s("log.retention.bytes", "-1"),),
              "Largest partition size before old segments are deleted; -1: no limit."),
    ConfigKey("retention.ms", _L, 604_800_000, Range(-1),
              (_s("log.retention.ms"), _s("log.retention.minutes", None, MINUTES_TO_MS),
               _s("log.retention.hours", "168", HOURS_TO_MS)),
              "Longest time a segment is kept under the delete policy; -1: no limit."),
    ConfigKey("segment.bytes", _I, 1_073_741_824, Range(1_048_576),
              (_s("log.segment.bytes", "1073741824"),),
              "Size at which the active segment is rolled."),
    ConfigKey("segment.index.bytes", _I, 10_485_760, Range(4),
              (_s("log.index.size.max.bytes", "10485760"),),
              "Preallocated size of a segment's offset and time indexes."),
    ConfigKey("segment.jitter.ms", _L, 0, Range(0),
              (_s("log.roll.jitter.ms"), _s("log.roll.jitter.hours", "0", HOURS_TO_MS)),
              "Largest random amount taken off segment.ms, to spread rolls."),
    ConfigKey("segment.ms", _L, 604_800_000, Range(1),
              (_s("log.roll.ms"), _s("log.roll.hours", "168", HOURS_TO_MS)),
              "Age at which the active segment is rolled even if not full."),
    ConfigKey("unclean.leader.election.enable", _B, False, None,
              (_s("unclean.leader.election.enable", "false"),),
              "Allow an out-of-sync replica to become leader, losing data."),
    ConfigKey("internal.segment.bytes", _I, None, Range(0), (),
              "Testing only (Kafka 4.0): overrides segment.bytes without its 1 MiB floor.",
              internal_only=True),
    # kcore (spec M-04, M-96): which cluster mirror owns the topic, and its requested mode.
    ConfigKey("mirror.name", _S, None, MirrorNameValue(), (),
              "kcore internal: the topic's cluster mirror, <m>, <m>.paused or <m>.stopped.",
              internal_only=True),
    # kcore (D-13): raised by each accepted Start or Stop of an existing mirror topic, so that
    # every broker leading one of its FAILED partitions sees the operator's recovery.
    ConfigKey("mirror.recovery.id", _L, 0, Range(0), (),
              "kcore internal: counts the operator's Starts and Stops of the mirror topic.",
              internal_only=True),
]  # fmt: skip

TOPIC_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({k.name: k for k in _KEYS})
"""Every topic config key by name, in alphabetical order except kcore's ``mirror.*`` keys last."""


def config_key(name: str) -> ConfigKey:
    """The table entry for ``name``; raises :class:`InvalidConfigError` for an unknown key."""
    try:
        return TOPIC_CONFIGS[name]
    except KeyError:
        raise InvalidConfigError(name, f"Unknown topic config name: {name}") from None


# -- text <-> typed values (ConfigDef.parseType / convertToString) ------------------------------

# Java's String.trim() strips every char <= U+0020, and no other whitespace.
_JAVA_TRIM = "".join(map(chr, range(0x21)))
_JAVA_WS = "[ \t\n\x0b\f\r]*"  # Java's \s
_LIST_SEPARATOR = re.compile(f"{_JAVA_WS},{_JAVA_WS}")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt / Long.parseLong (ASCII digits)
# Double.parseDouble's decimal forms; NaN, Infinity and hex floats are refused on purpose (a NaN
# would slip through Kafka's range checks, which compare with <).
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")
_INT_BOUNDS = {ConfigType.INT: (INT_MIN, INT_MAX), ConfigType.LONG: (LONG_MIN, LONG_MAX)}


def parse_text(name: str, text: str, type_: ConfigType) -> Any:
    """``text`` as a value of ``type_`` by Kafka's ConfigDef rules; errors name ``name``."""
    trimmed = text.strip(_JAVA_TRIM)
    if type_ is ConfigType.BOOLEAN:
        if trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise invalid_value(name, text, "Expected value to be either true or false")
    if type_ is ConfigType.STRING:
        return trimmed
    if type_ is ConfigType.LIST:
        return tuple(_LIST_SEPARATOR.split(trimmed)) if trimmed else ()
    if type_ in _INT_BOUNDS:
        low, high = _INT_BOUNDS[type_]
        if _INTEGER.fullmatch(trimmed) and low <= int(trimmed) <= high:
            return int(trimmed)
    elif type_ is ConfigType.DOUBLE and _DOUBLE.fullmatch(trimmed):
        number = float(trimmed.rstrip("dDfF"))
        if number not in (float("inf"), float("-inf")):
            return number
    raise invalid_value(name, text, f"Not a number of type {type_.name}")


def parse_value(key: str, text: str) -> Any:
    """Parse and check one topic config value as Kafka does.

    Returns ``bool``, ``int``, ``float``, ``str`` or, for a list, a ``tuple[str, ...]`` (Kafka
    splits on commas with the whitespace around them; ``""`` is the empty list). Raises
    :class:`InvalidConfigError` naming ``key`` for an unknown key, unparsable text, or a value
    its validator refuses (``Invalid value -5 for configuration retention.ms: ...``).
    """
    definition = config_key(key)
    value = parse_text(key, text, definition.type)
    if definition.validator is not None:
        definition.validator.ensure_valid(key, value)
    return value


def _java_double(value: float) -> str:
    # Double.toString: plain notation for 1e-3 <= |x| < 1e7, else d.dddE<exp>; shortest digits.
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{len(text) - 1 + int(exponent)}"


def java_str(value: Any) -> str:
    # What Java's toString prints for a parsed value, for error messages.
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    return "null" if value is None else str(value)


def format_value(key: str, value: Any) -> str | None:
    """The text Kafka shows for a typed value (``ConfigDef.convertToString``); ``parse_value``
    of it gives ``value`` back. Lists join with a bare comma; ``None`` stays ``None``."""
    if value is None:
        return None
    if config_key(key).type is ConfigType.LIST:
        return ",".join(value)
    return java_str(value)


# -- resolution over the layers ---------------------------------------------------------------


class _Layers:
    """The broker's settings in precedence order, each with the source DescribeConfigs reports."""

    def __init__(
        self,
        static: Mapping[str, str] | None,
        dynamic_broker: Mapping[str, str] | None,
        dynamic_default: Mapping[str, str] | None,
    ) -> None:
        self.ordered = (
            (dynamic_broker or {}, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (dynamic_default or {}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (static or {}, ConfigSource.STATIC_BROKER_CONFIG),
        )

    def lookup(self, synonym: str) -> tuple[str, ConfigSource] | None:
        for values, source in self.ordered:
            if synonym in values:
                return values[synonym], source
        return None


def parse_broker_synonym(key: ConfigKey, synonym: BrokerSynonym, text: str) -> Any:
    """A broker synonym's text as the topic key's typed value; errors name the broker key.

    The controller uses it to validate broker-level AlterConfigs of ``log.*`` keys."""
    if synonym.factor == 1:
        value = parse_text(synonym.name, text, key.type)
        if key.validator is not None:
            key.validator.ensure_valid(synonym.name, value)
        return value
    # An hours or minutes setting: an INT on the broker, checked in the topic key's unit.
    value = parse_text(synonym.name, text, ConfigType.INT) * synonym.factor
    if key.name == "retention.ms" and value < 0:
        return -1  # KafkaConfig.logRetentionTimeMillis: any negative means unlimited
    try:
        if key.validator is not None:
            key.validator.ensure_valid(synonym.name, value)
    except InvalidConfigError as err:  # a Range: show the text given, not the converted value
        raise invalid_value(synonym.name, text, err.message.partition(": ")[2]) from None
    return value


def _resolve(
    key: ConfigKey, overrides: Mapping[str, Any], layers: _Layers
) -> tuple[Any, ConfigSource]:
    if key.name in overrides:
        return overrides[key.name], ConfigSource.DYNAMIC_TOPIC_CONFIG
    # Synonym order first, then layer: log.retention.ms in server.properties beats a dynamic
    # log.retention.hours, as in KafkaConfig.
    for synonym in key.synonyms:
        found = layers.lookup(synonym.name)
        if found is not None:
            return parse_broker_synonym(key, synonym, found[0]), found[1]
    return key.default, ConfigSource.DEFAULT_CONFIG


def _parse_overrides(overrides: Mapping[str, str]) -> dict[str, Any]:
    return {name: parse_value(name, text) for name, text in overrides.items()}


def _d(name: str) -> Any:
    return field(default=TOPIC_CONFIGS[name].default)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """A topic's resolved settings: one typed attribute per key (``segment.bytes`` ->
    ``segment_bytes``). ``LogConfig()`` is all defaults; build real ones with
    :meth:`from_layers`. ``overridden`` names the keys the topic itself sets."""

    cleanup_policy: tuple[str, ...] = _d("cleanup.policy")
    compression_gzip_level: int = _d("compression.gzip.level")
    compression_lz4_level: int = _d("compression.lz4.level")
    compression_type: str = _d("compression.type")
    compression_zstd_level: int = _d("compression.zstd.level")
    delete_retention_ms: int = _d("delete.retention.ms")
    file_delete_delay_ms: int = _d("file.delete.delay.ms")
    flush_messages: int = _d("flush.messages")
    flush_ms: int = _d("flush.ms")
    follower_replication_throttled_replicas: tuple[str, ...] = _d(
        "follower.replication.throttled.replicas"
    )
    index_interval_bytes: int = _d("index.interval.bytes")
    leader_replication_throttled_replicas: tuple[str, ...] = _d(
        "leader.replication.throttled.replicas"
    )
    local_retention_bytes: int = _d("local.retention.bytes")
    local_retention_ms: int = _d("local.retention.ms")
    max_compaction_lag_ms: int = _d("max.compaction.lag.ms")
    max_message_bytes: int = _d("max.message.bytes")
    message_downconversion_enable: bool = _d("message.downconversion.enable")
    message_timestamp_after_max_ms: int = _d("message.timestamp.after.max.ms")
    message_timestamp_before_max_ms: int = _d("message.timestamp.before.max.ms")
    message_timestamp_type: str = _d("message.timestamp.type")
    min_cleanable_dirty_ratio: float = _d("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _d("min.compaction.lag.ms")
    min_insync_replicas: int = _d("min.insync.replicas")
    preallocate: bool = _d("preallocate")
    remote_copy_lag_bytes: int = _d("remote.copy.lag.bytes")
    remote_copy_lag_ms: int = _d("remote.copy.lag.ms")
    remote_log_copy_disable: bool = _d("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _d("remote.log.delete.on.disable")
    remote_storage_enable: bool = _d("remote.storage.enable")
    retention_bytes: int = _d("retention.bytes")
    retention_ms: int = _d("retention.ms")
    segment_bytes: int = _d("segment.bytes")
    segment_index_bytes: int = _d("segment.index.bytes")
    segment_jitter_ms: int = _d("segment.jitter.ms")
    segment_ms: int = _d("segment.ms")
    unclean_leader_election_enable: bool = _d("unclean.leader.election.enable")
    internal_segment_bytes: int | None = _d("internal.segment.bytes")
    mirror_name: str | None = _d("mirror.name")
    mirror_recovery_id: int = _d("mirror.recovery.id")
    overridden: frozenset[str] = frozenset()

    @classmethod
    def from_layers(
        cls,
        topic_overrides: Mapping[str, str],
        broker_config: Mapping[str, str] | None = None,
        *,
        dynamic_broker_config: Mapping[str, str] | None = None,
        dynamic_default_broker_config: Mapping[str, str] | None = None,
    ) -> LogConfig:
        """Resolve every key: topic override, else the first broker synonym set (Kafka's
        order, unit-converted; per-broker dynamic, cluster-default dynamic, then static
        ``broker_config``), else the default. Other broker keys are ignored.

        Raises :class:`InvalidConfigError` for an unknown override key, or a bad value in an
        override or in a broker synonym it reads (the message names that key).
        """
        overrides = _parse_overrides(topic_overrides)
        layers = _Layers(broker_config, dynamic_broker_config, dynamic_default_broker_config)
        values = {key.attr: _resolve(key, overrides, layers)[0] for key in TOPIC_CONFIGS.values()}
        return cls(**values, overridden=frozenset(overrides))

    def value(self, key: str) -> Any:
        """The typed value of ``key`` (``config.value("segment.bytes")``)."""
        return getattr(self, config_key(key).attr)

    @property
    def compact(self) -> bool:
        """The cleaner compacts this log (``cleanup.policy`` holds ``compact``)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Old segments are deleted by time and size (``cleanup.policy`` holds ``delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def segment_size(self) -> int:
        """The size a segment rolls at: ``internal.segment.bytes`` if set, else
        ``segment.bytes`` (Kafka's ``LogConfig.segmentSize``)."""
        return self.internal_segment_bytes or self.segment_bytes

    @property
    def max_segment_ms(self) -> int:
        """Kafka's ``maxSegmentMs``: a compacted log also rolls by ``max.compaction.lag.ms``,
        so a record can become cleanable in time."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, where its -2 means ``retention.ms``."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, where its -2 means ``retention.bytes``."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def mirror(self) -> str | None:
        """The ``mirror.name`` value when the topic belongs to a mirror, else ``None``."""
        return self.mirror_name or None


# -- controller-side validation -----------------------------------------------------------------


def ensure_client_alterable(key: str) -> None:
    """Refuse a client's set or delete of ``key``: unknown, or internal (``mirror.name``).

    For IncrementalAlterConfigs' DELETE / APPEND / SUBTRACT operations, which never reach
    :func:`validate` with a value. Raises :class:`InvalidConfigError`.
    """
    if config_key(key).internal_only:
        raise InvalidConfigError(
            key,
            f"Configuration {key} is internal: only the controller's cluster-mirroring "
            "operations set it",
        )


def _cross_key_errors(resolved: Mapping[str, Any]) -> dict[str, str]:
    # Kafka's LogConfig.validateValues, and its refusal of tiered storage on a broker without
    # it (remote.log.storage.system.enable=false, its default; kcore has no tiered storage).
    errors: dict[str, str] = {}
    low, high = resolved["min.compaction.lag.ms"], resolved["max.compaction.lag.ms"]
    if low > high:
        errors["min.compaction.lag.ms"] = (
            "conflict topic config setting "
            f"min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"
        )
    if resolved["remote.storage.enable"]:
        errors["remote.storage.enable"] = (
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    return errors


def validate(
    overrides: Mapping[str, str],
    *,
    allow_internal: bool = False,
    broker_config: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Check a topic's overrides all at once (CreateTopics, AlterConfigs) and return them typed.

    Every key must be known and its value valid; ``internal_only`` keys are refused unless
    ``allow_internal`` (the controller's own mirror operations). Then, with ``broker_config``
    filling the keys not overridden, Kafka's cross-key rules: ``min.compaction.lag.ms`` at most
    ``max.compaction.lag.ms``; ``remote.storage.enable=true`` refused, as Kafka does on a broker
    without tiered storage (kcore has none).

    Raises one :class:`InvalidConfigError` whose ``errors`` holds every bad key and whose
    message names each (``"; "``-separated).
    """
    errors: dict[str, str] = {}
    typed: dict[str, Any] = {}
    for name, text in overrides.items():
        try:
            if not allow_internal:
                ensure_client_alterable(name)
            typed[name] = parse_value(name, text)
        except InvalidConfigError as err:
            errors[name] = err.message
    if not errors:
        layers = _Layers(broker_config, None, None)
        resolved = {key.name: _resolve(key, typed, layers)[0] for key in TOPIC_CONFIGS.values()}
        errors = _cross_key_errors(resolved)
    if errors:
        key = next(iter(errors)) if len(errors) == 1 else None
        raise InvalidConfigError(key, "; ".join(errors.values()), errors)
    return typed


def _check_table() -> None:
    # Import-time guard: LogConfig has exactly one attribute per key, and every default passes
    # its own validator, as Kafka's ConfigKey constructor insists.
    attrs = {f.name for f in fields(LogConfig)} - {"overridden"}
    if attrs != {key.attr for key in TOPIC_CONFIGS.values()}:
        raise AssertionError(f"LogConfig fields do not match TOPIC_CONFIGS: {sorted(attrs)}")
    for key in TOPIC_CONFIGS.values():
        if key.validator is not None and key.default is not None:
            key.validator.ensure_valid(key.name, key.default)


_check_table()


# DescribeConfigs lives in its own module; its names stay importable from here.
from kcore.log import config_describe as _describe  # noqa: E402

ConfigEntry = _describe.ConfigEntry
ConfigSynonym = _describe.ConfigSynonym
describe = _describe.describe
