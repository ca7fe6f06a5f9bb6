"""Topic configs: Kafka 4.x's keys, defaults and synonyms, parsing, resolution, DescribeConfigs."""

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.log.config import (
    LONG_MAX,
    LONG_MIN,
    MIRROR_NAME_SUFFIXES,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    GzipLevel,
    InvalidConfigError,
    ListOf,
    LogConfig,
    MirrorNameValue,
    OneOf,
    Range,
    ThrottledReplicas,
    describe,
    ensure_client_alterable,
    format_value,
    is_valid_mirror_name,
    parse_value,
    validate,
)
from kcore.protocol.errors import ErrorCode, KafkaError

DEFAULT, STATIC = ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG
TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG

# The topic configs of Apache Kafka 4.4 (kafka.apache.org/44, "Topic-Level Configs"), by hand.
KAFKA_4X_TOPIC_KEYS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.downconversion.enable",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.copy.lag.bytes", "remote.copy.lag.ms", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes", "retention.ms",
    "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}  # fmt: skip

# Kafka's documented defaults, written out rather than computed.
KAFKA_DEFAULTS = [
    ("segment.bytes", 1073741824),
    ("segment.ms", 604800000),
    ("segment.jitter.ms", 0),
    ("segment.index.bytes", 10485760),
    ("index.interval.bytes", 4096),
    ("retention.ms", 604800000),
    ("retention.bytes", -1),
    ("max.message.bytes", 1048588),
    ("delete.retention.ms", 86400000),
    ("file.delete.delay.ms", 60000),
    ("flush.messages", 9223372036854775807),
    ("flush.ms", 9223372036854775807),
    ("min.insync.replicas", 1),
    ("cleanup.policy", ("delete",)),
    ("compression.type", "producer"),
    ("compression.gzip.level", -1),
    ("compression.lz4.level", 9),
    ("compression.zstd.level", 3),
    ("message.timestamp.type", "CreateTime"),
    ("message.timestamp.after.max.ms", 3600000),
    ("message.timestamp.before.max.ms", 9223372036854775807),
    ("min.cleanable.dirty.ratio", 0.5),
    ("min.compaction.lag.ms", 0),
    ("max.compaction.lag.ms", 9223372036854775807),
    ("unclean.leader.election.enable", False),
    ("preallocate", False),
    ("local.retention.ms", -2),
    ("local.retention.bytes", -2),
    ("remote.storage.enable", False),
    ("leader.replication.throttled.replicas", ()),
    ("mirror.name", None),
]

# ServerTopicConfigSynonyms: the broker settings for each topic key, in Kafka's order.
KAFKA_SYNONYMS = {
    "segment.bytes": ["log.segment.bytes"],
    "segment.ms": ["log.roll.ms", "log.roll.hours"],
    "segment.jitter.ms": ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    "segment.index.bytes": ["log.index.size.max.bytes"],
    "flush.messages": ["log.flush.interval.messages"],
    "flush.ms": ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
    "retention.bytes": ["log.retention.bytes"],
    "retention.ms": ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    "max.message.bytes": ["message.max.bytes"],
    "index.interval.bytes": ["log.index.interval.bytes"],
    "delete.retention.ms": ["log.cleaner.delete.retention.ms"],
    "min.compaction.lag.ms": ["log.cleaner.min.compaction.lag.ms"],
    "max.compaction.lag.ms": ["log.cleaner.max.compaction.lag.ms"],
    "file.delete.delay.ms": ["log.segment.delete.delay.ms"],
    "min.cleanable.dirty.ratio": ["log.cleaner.min.cleanable.ratio"],
    "cleanup.policy": ["log.cleanup.policy"],
    "unclean.leader.election.enable": ["unclean.leader.election.enable"],
    "min.insync.replicas": ["min.insync.replicas"],
    "compression.type": ["compression.type"],
    "compression.gzip.level": ["compression.gzip.level"],
    "compression.lz4.level": ["compression.lz4.level"],
    "compression.zstd.level": ["compression.zstd.level"],
    "preallocate": ["log.preallocate"],
    "message.timestamp.type": ["log.message.timestamp.type"],
    "message.timestamp.before.max.ms": ["log.message.timestamp.before.max.ms"],
    "message.timestamp.after.max.ms": ["log.message.timestamp.after.max.ms"],
    "local.retention.ms": ["log.local.retention.ms"],
    "local.retention.bytes": ["log.local.retention.bytes"],
    "remote.copy.lag.ms": ["log.remote.copy.lag.ms"],
    "remote.copy.lag.bytes": ["log.remote.copy.lag.bytes"],
}


# -- the table -----------------------------------------------------------------------------------


KCORE_INTERNAL_KEYS = {"mirror.name", "mirror.recovery.id", "internal.segment.bytes"}


def test_topic_configs_cover_every_kafka_4x_key_plus_the_internal_ones():
    assert set(TOPIC_CONFIGS) == KAFKA_4X_TOPIC_KEYS | KCORE_INTERNAL_KEYS


@pytest.mark.parametrize(("key", "expected"), KAFKA_DEFAULTS)
def test_topic_configs_default_is_kafkas(key, expected):
    assert TOPIC_CONFIGS[key].default == expected
    assert LogConfig().value(key) == expected


def test_topic_configs_broker_synonyms_are_kafkas_in_order():
    actual = {k: [s.name for s in d.synonyms] for k, d in TOPIC_CONFIGS.items() if d.synonyms}
    assert actual == KAFKA_SYNONYMS


@pytest.mark.parametrize(
    ("key", "type_"),
    [
        ("segment.bytes", ConfigType.INT),
        ("retention.ms", ConfigType.LONG),
        ("cleanup.policy", ConfigType.LIST),
        ("min.cleanable.dirty.ratio", ConfigType.DOUBLE),
        ("preallocate", ConfigType.BOOLEAN),
        ("compression.type", ConfigType.STRING),
        ("leader.replication.throttled.replicas", ConfigType.LIST),
        ("max.message.bytes", ConfigType.INT),
        ("message.timestamp.after.max.ms", ConfigType.LONG),
    ],
)
def test_topic_configs_type_is_kafkas(key, type_):
    assert TOPIC_CONFIGS[key].type is type_


def test_topic_configs_valid_values_read_like_kafkas_docs():
    assert str(TOPIC_CONFIGS["segment.bytes"].validator) == "[1048576,...]"
    assert str(TOPIC_CONFIGS["min.cleanable.dirty.ratio"].validator) == "[0,...,1]"
    assert str(TOPIC_CONFIGS["cleanup.policy"].validator) == "[compact, delete]"
    assert str(TOPIC_CONFIGS["compression.gzip.level"].validator) == "[1,...,9] or -1"
    assert str(TOPIC_CONFIGS["compression.zstd.level"].validator) == "[-131072,...,22]"
    assert str(TOPIC_CONFIGS["compression.type"].validator) == (
        "[uncompressed, zstd, lz4, snappy, gzip, producer]"
    )


def test_topic_configs_only_mirror_name_and_internal_segment_bytes_are_internal():
    assert {k for k, d in TOPIC_CONFIGS.items() if d.internal_only} == KCORE_INTERNAL_KEYS


def test_log_config_internal_segment_bytes_replaces_segment_bytes_below_its_floor():
    assert LogConfig.from_layers({"internal.segment.bytes": "500"}).segment_size == 500
    assert LogConfig().segment_size == 1_073_741_824
    with pytest.raises(InvalidConfigError):
        LogConfig.from_layers({"segment.bytes": "500"})


@pytest.mark.parametrize("key", [k for k, d in TOPIC_CONFIGS.items() if d.synonyms])
def test_topic_configs_broker_defaults_resolve_to_the_topic_default(key):
    # A broker holding nothing but its own defaults must give every topic key its default.
    broker = {s.name: s.default for s in TOPIC_CONFIGS[key].synonyms if s.default is not None}
    assert broker, f"{key}: some synonym must carry the broker default"
    assert LogConfig.from_layers({}, broker).value(key) == TOPIC_CONFIGS[key].default


# -- LogConfig -----------------------------------------------------------------------------------


def test_log_config_has_one_attribute_per_key():
    attrs = {f.name for f in dataclasses.fields(LogConfig)} - {"overridden"}
    assert attrs == {k.replace(".", "_") for k in TOPIC_CONFIGS}


def test_log_config_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LogConfig().segment_bytes = 1  # type: ignore[misc]


def test_log_config_from_layers_topic_override_beats_broker():
    config = LogConfig.from_layers({"segment.bytes": "2097152"}, {"log.segment.bytes": "3145728"})
    assert config.segment_bytes == 2097152
    assert config.overridden == frozenset({"segment.bytes"})


def test_log_config_from_layers_broker_synonym_beats_default():
    config = LogConfig.from_layers({}, {"log.segment.bytes": "3145728", "message.max.bytes": "5"})
    assert (config.segment_bytes, config.max_message_bytes) == (3145728, 5)
    assert config.overridden == frozenset()


@pytest.mark.parametrize(
    ("broker", "retention_ms"),
    [
        ({"log.retention.hours": "24"}, 24 * 3600000),
        ({"log.retention.minutes": "30"}, 30 * 60000),
        ({"log.retention.minutes": "30", "log.retention.hours": "24"}, 30 * 60000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "30"}, 1234),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-5"}, -1),  # any negative means unlimited
        ({}, 7 * 24 * 3600000),
    ],
)
def test_log_config_from_layers_retention_synonyms_convert_units(broker, retention_ms):
    assert LogConfig.from_layers({}, broker).retention_ms == retention_ms


def test_log_config_from_layers_roll_hours_give_segment_ms():
    assert LogConfig.from_layers({}, {"log.roll.hours": "2"}).segment_ms == 7200000
    both = {"log.roll.ms": "60000", "log.roll.hours": "2"}
    assert LogConfig.from_layers({}, both).segment_ms == 60000
    assert LogConfig.from_layers({}, {"log.roll.jitter.hours": "1"}).segment_jitter_ms == 3600000


def test_log_config_from_layers_flush_ms_falls_back_to_scheduler_interval():
    broker = {"log.flush.scheduler.interval.ms": "500"}
    assert LogConfig.from_layers({}, broker).flush_ms == 500
    broker["log.flush.interval.ms"] = "100"
    assert LogConfig.from_layers({}, broker).flush_ms == 100


def test_log_config_from_layers_dynamic_layers_beat_static_for_one_synonym():
    config = LogConfig.from_layers(
        {},
        {"log.segment.bytes": "3145728"},
        dynamic_default_broker_config={"log.segment.bytes": "4194304"},
        dynamic_broker_config={"log.segment.bytes": "5242880"},
    )
    assert config.segment_bytes == 5242880
    config = LogConfig.from_layers(
        {},
        {"log.segment.bytes": "3145728"},
        dynamic_default_broker_config={"log.segment.bytes": "4194304"},
    )
    assert config.segment_bytes == 4194304


def test_log_config_from_layers_synonym_order_beats_layer_order():
    # KafkaConfig picks log.retention.ms if set anywhere before it looks at the hours.
    config = LogConfig.from_layers(
        {}, {"log.retention.ms": "1000"}, dynamic_broker_config={"log.retention.hours": "1"}
    )
    assert config.retention_ms == 1000


def test_log_config_from_layers_ignores_other_broker_settings():
    broker = {"num.network.threads": "x", "log.dirs": "/tmp/k", "node.id": "1"}
    assert LogConfig.from_layers({}, broker) == LogConfig()


@pytest.mark.parametrize(
    ("broker", "fragment"),
    [
        ({"log.retention.hours": "abc"}, "Invalid value abc for configuration log.retention.hours"),
        ({"log.roll.hours": "0"}, "Invalid value 0 for configuration log.roll.hours"),
        ({"log.segment.bytes": "100"}, "configuration log.segment.bytes: Value must be at least"),
        ({"log.cleanup.policy": "tidy"}, "Invalid value tidy for configuration log.cleanup.policy"),
    ],
)
def test_log_config_from_layers_bad_broker_value_names_broker_key(broker, fragment):
    with pytest.raises(InvalidConfigError, match=fragment):
        LogConfig.from_layers({}, broker)


def test_log_config_from_layers_bad_override_refused():
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_layers({"retention.ms": "-5"})
    assert info.value.key == "retention.ms"


@pytest.mark.parametrize(
    ("policy", "compact", "delete"),
    [
        ("delete", False, True),
        ("compact", True, False),
        ("compact,delete", True, True),
        ("", False, False),
    ],
)
def test_log_config_compact_and_delete_follow_cleanup_policy(policy, compact, delete):
    config = LogConfig.from_layers({"cleanup.policy": policy})
    assert (config.compact, config.delete) == (compact, delete)


def test_log_config_max_segment_ms_bounded_by_compaction_lag_when_compacted():
    overrides = {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"}
    assert LogConfig.from_layers(overrides).max_segment_ms == 1000
    overrides["cleanup.policy"] = "delete"
    assert LogConfig.from_layers(overrides).max_segment_ms == 604800000


def test_log_config_effective_local_retention_defaults_to_retention():
    config = LogConfig.from_layers({"retention.ms": "5000", "retention.bytes": "100"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (
        5000,
        100,
    )
    config = LogConfig.from_layers({"local.retention.ms": "10", "local.retention.bytes": "20"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (10, 20)


def test_log_config_mirror_is_none_unless_set():
    assert LogConfig().mirror is None
    assert LogConfig.from_layers({"mirror.name": ""}).mirror is None
    assert LogConfig.from_layers({"mirror.name": "east.paused"}).mirror == "east.paused"


# -- parse_value / format_value ------------------------------------------------------------------


# (key, text, what Kafka's message says after "...for configuration <key>: " or, for the list
# checks of KIP-1161, the whole message). Every message also names the key.
BAD_VALUES = [
    ("retention.ms", "-5", "Value must be at least -1"),
    ("segment.bytes", "1048575", "Value must be at least 1048576"),
    ("segment.bytes", "abc", "Not a number of type INT"),
    ("segment.bytes", "2147483648", "Not a number of type INT"),
    ("retention.ms", "9223372036854775808", "Not a number of type LONG"),
    ("retention.ms", "1_000", "Not a number of type LONG"),
    ("retention.ms", "1e3", "Not a number of type LONG"),
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "NaN", "Not a number of type DOUBLE"),
    ("preallocate", "yes", "Expected value to be either true or false"),
    ("compression.type", "GZIP", "String must be one of: uncompressed, zstd, lz4, snappy, gzip,"),
    ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
    ("cleanup.policy", "compact,tidy", "String must be one of: compact, delete"),
    ("cleanup.policy", "compact,compact", "Configuration 'cleanup.policy' values must not be dup"),
    ("cleanup.policy", "compact,", "Configuration 'cleanup.policy' values must not be empty."),
    ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.zstd.level", "-131073", "Value must be at least -131072"),
    ("leader.replication.throttled.replicas", "0:1,x", "must be the literal '*' or a list of"),
    ("follower.replication.throttled.replicas", "*,0:1", "must be the literal '*'"),
    ("mirror.name", "east.stopped.paused", "a mirror name is 1 to 249 of"),
    ("mirror.name", "..", "a mirror name is 1 to 249 of"),
    ("mirror.name", "a b", "a mirror name is 1 to 249 of"),
]


@pytest.mark.parametrize(("key", "text", "reason"), BAD_VALUES)
def test_parse_value_bad_value_refused_with_key(key, text, reason):
    with pytest.raises(InvalidConfigError) as info:
        parse_value(key, text)
    assert info.value.key == key
    assert reason in info.value.message
    assert key in info.value.message
    assert info.value.errors == {key: info.value.message}


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("retention.ms", "-5", "Invalid value -5 for configuration retention.ms: Value must be"),
        ("segment.bytes", " abc", "Invalid value  abc for configuration segment.bytes: Not a"),
        ("min.cleanable.dirty.ratio", "2", "Invalid value 2.0 for configuration min.cleanable"),
        ("cleanup.policy", "compact,tidy", "Invalid value tidy for configuration cleanup.policy:"),
        ("leader.replication.throttled.replicas", "x", "Invalid value [x] for configuration"),
    ],
)
def test_parse_value_message_shows_the_value_as_kafka_does(key, text, message):
    # The text as given when it does not parse; else the parsed value as Java prints it.
    with pytest.raises(InvalidConfigError) as info:
        parse_value(key, text)
    assert info.value.message.startswith(message)


def test_parse_value_unknown_key_refused():
    with pytest.raises(
        InvalidConfigError, match="Unknown topic config name: retention.hours"
    ) as info:
        parse_value("retention.hours", "1")
    assert info.value.key == "retention.hours"


@pytest.mark.parametrize(("text", "value"), [("true", True), ("FALSE", False), (" True ", True)])
def test_parse_value_booleans_ignore_case(text, value):
    assert parse_value("preallocate", text) is value


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("cleanup.policy", "compact,delete", ("compact", "delete")),
        ("cleanup.policy", " delete , compact ", ("delete", "compact")),
        ("cleanup.policy", "", ()),
        ("cleanup.policy", "   ", ()),
        ("leader.replication.throttled.replicas", "0:101, 1:102", ("0:101", "1:102")),
        ("leader.replication.throttled.replicas", "*", ("*",)),
        ("follower.replication.throttled.replicas", "", ()),
    ],
)
def test_parse_value_lists_split_on_commas(key, text, value):
    assert parse_value(key, text) == value


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("segment.bytes", " 2097152\n", 2097152),
        ("segment.bytes", "+2097152", 2097152),
        ("retention.ms", "-1", -1),
        ("retention.ms", "9223372036854775807", LONG_MAX),
        ("retention.bytes", "-9223372036854775808", LONG_MIN),
        ("min.cleanable.dirty.ratio", "0.25", 0.25),
        ("min.cleanable.dirty.ratio", "1.0E-4", 0.0001),
        ("min.cleanable.dirty.ratio", ".5", 0.5),
        ("compression.type", " zstd ", "zstd"),
        ("compression.gzip.level", "-1", -1),
        ("mirror.name", "east", "east"),
        ("mirror.name", "east.paused", "east.paused"),
        ("mirror.name", "east.stopped", "east.stopped"),
        ("mirror.name", "", ""),
    ],
)
def test_parse_value_accepts_kafka_syntax(key, text, value):
    assert parse_value(key, text) == value


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("cleanup.policy", ("compact", "delete"), "compact,delete"),
        ("cleanup.policy", (), ""),
        ("min.cleanable.dirty.ratio", 0.5, "0.5"),
        ("min.cleanable.dirty.ratio", 1.0, "1.0"),
        ("min.cleanable.dirty.ratio", 0.0001, "1.0E-4"),
        ("min.cleanable.dirty.ratio", 1.5e-7, "1.5E-7"),
        ("preallocate", False, "false"),
        ("retention.ms", -1, "-1"),
        ("mirror.name", None, None),
    ],
)
def test_format_value_prints_like_kafka(key, value, text):
    assert format_value(key, value) == text


def test_is_valid_mirror_name_follows_topic_name_rules():
    assert is_valid_mirror_name("us-east_1.prod")
    assert not is_valid_mirror_name("x" * 250)
    assert not is_valid_mirror_name(".")
    assert not is_valid_mirror_name("east.paused")
    assert not is_valid_mirror_name("")


def test_invalid_config_error_is_a_value_error_carrying_invalid_config():
    with pytest.raises(ValueError) as info:
        parse_value("segment.ms", "0")
    err = info.value
    assert isinstance(err, KafkaError) and err.code is ErrorCode.INVALID_CONFIG
    assert "segment.ms" in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.key, copy.message, copy.errors) == (err.key, err.message, err.errors)


# -- validate ------------------------------------------------------------------------------------


def test_validate_returns_typed_overrides():
    typed = validate({"cleanup.policy": "compact", "retention.ms": "-1", "preallocate": "TRUE"})
    assert typed == {"cleanup.policy": ("compact",), "retention.ms": -1, "preallocate": True}


def test_validate_reports_every_bad_key_in_one_error():
    with pytest.raises(InvalidConfigError) as info:
        validate(
            {"retention.ms": "-5", "segment.ms": "1000", "bogus.key": "1", "cleanup.policy": "x"}
        )
    err = info.value
    assert err.key is None
    assert set(err.errors) == {"retention.ms", "bogus.key", "cleanup.policy"}
    for key in err.errors:
        assert key in err.message


def test_validate_refuses_mirror_name_from_clients():
    with pytest.raises(InvalidConfigError, match="mirror.name is internal") as info:
        validate({"mirror.name": "east"})
    assert info.value.key == "mirror.name"
    assert validate({"mirror.name": "east.stopped"}, allow_internal=True) == {
        "mirror.name": "east.stopped"
    }


def test_validate_refuses_min_compaction_lag_above_max():
    with pytest.raises(
        InvalidConfigError, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms \(5\)"
    ):
        validate({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    # The broker's setting counts for the key the topic leaves alone.
    broker = {"log.cleaner.max.compaction.lag.ms": "5"}
    with pytest.raises(InvalidConfigError) as info:
        validate({"min.compaction.lag.ms": "10"}, broker_config=broker)
    assert info.value.key == "min.compaction.lag.ms"


def test_validate_refuses_remote_storage_without_tiered_storage():
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
        validate({"remote.storage.enable": "true"})
    assert validate({"remote.storage.enable": "false"}) == {"remote.storage.enable": False}


def test_ensure_client_alterable_refuses_internal_and_unknown_keys():
    ensure_client_alterable("retention.ms")
    with pytest.raises(InvalidConfigError, match="internal"):
        ensure_client_alterable("mirror.name")
    with pytest.raises(InvalidConfigError, match="Unknown topic config name"):
        ensure_client_alterable("retention.hours")


# -- describe ------------------------------------------------------------------------------------


def _entry(name, overrides=None, broker=None, **layers):
    (entry,) = describe(overrides or {}, broker, keys=[name], **layers)
    return entry


def test_describe_default_value_source_and_synonyms():
    entry = _entry("segment.bytes")
    assert (entry.value, entry.source, entry.is_default, entry.read_only) == (
        "1073741824",
        DEFAULT,
        True,
        False,
    )
    assert entry.synonyms == (ConfigSynonym("log.segment.bytes", "1073741824", DEFAULT),)
    assert entry.config_type is ConfigType.INT
    assert entry.documentation


def test_describe_topic_override_comes_first():
    entry = _entry("retention.ms", {"retention.ms": "1000"}, {"log.retention.hours": "24"})
    assert (entry.value, entry.source, entry.is_default) == ("1000", TOPIC, False)
    assert entry.synonyms == (
        ("retention.ms", "1000", TOPIC),
        ("log.retention.hours", "24", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    )


def test_describe_broker_value_reported_as_static_broker_config():
    entry = _entry("retention.ms", broker={"log.retention.minutes": "30"})
    assert (entry.value, entry.source, entry.is_default) == ("1800000", STATIC, False)
    assert entry.synonyms == (
        ("log.retention.minutes", "30", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    )


def test_describe_synonyms_grouped_by_source_then_synonym_order():
    entry = _entry(
        "retention.ms",
        broker={"log.retention.hours": "5", "log.retention.ms": "100"},
        dynamic_broker_config={"log.retention.hours": "2"},
        dynamic_default_broker_config={"log.retention.minutes": "3"},
    )
    assert entry.synonyms == (
        ("log.retention.hours", "2", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.minutes", "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "100", STATIC),
        ("log.retention.hours", "5", STATIC),
        ("log.retention.hours", "168", DEFAULT),
    )
    # The value comes from the first synonym set anywhere: log.retention.ms, statically.
    assert (entry.value, entry.source) == ("100", STATIC)


def test_describe_formats_values_like_kafka():
    overrides = {"cleanup.policy": " compact , delete ", "preallocate": "TRUE"}
    entries = {e.name: e for e in describe(overrides)}
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["cleanup.policy"].synonyms[0] == ("cleanup.policy", "compact,delete", TOPIC)
    assert entries["preallocate"].value == "true"
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["leader.replication.throttled.replicas"].value == ""
    assert entries["remote.storage.enable"].synonyms == ()


def test_describe_lists_every_key_in_table_order_hiding_unset_internal_keys():
    names = [e.name for e in describe({})]
    assert names == [k for k in TOPIC_CONFIGS if k not in KCORE_INTERNAL_KEYS]
    (mirror,) = [e for e in describe({"mirror.name": "east"}) if e.name == "mirror.name"]
    assert (mirror.value, mirror.source, mirror.read_only) == ("east", TOPIC, True)


def test_describe_keys_limit_the_answer_and_skip_unknown_names():
    names = [e.name for e in describe({}, keys=["segment.ms", "nope", "cleanup.policy"])]
    assert names == ["segment.ms", "cleanup.policy"]


# -- property: every valid value survives format then parse --------------------------------------

_BOUNDS = {ConfigType.INT: (-(2**31), 2**31 - 1), ConfigType.LONG: (LONG_MIN, LONG_MAX)}
_mirror_base = st.from_regex(r"[a-zA-Z0-9._-]{1,30}", fullmatch=True).filter(is_valid_mirror_name)


def _valid_values(key: str) -> st.SearchStrategy:
    definition = TOPIC_CONFIGS[key]
    validator, type_ = definition.validator, definition.type
    if type_ is ConfigType.BOOLEAN:
        return st.booleans()
    if type_ is ConfigType.DOUBLE:
        return st.floats(validator.min, validator.max, allow_nan=False)
    if isinstance(validator, Range) or (validator is None and type_ in _BOUNDS):
        low, high = _BOUNDS[type_]
        if validator is not None:
            low = low if validator.min is None else validator.min
            high = high if validator.max is None else validator.max
        return st.integers(low, high)
    if isinstance(validator, OneOf):
        return st.sampled_from(validator.values)
    if isinstance(validator, ListOf):
        return st.permutations(validator.values).flatmap(
            lambda order: st.integers(0, len(order)).map(lambda n: tuple(order[:n]))
        )
    if isinstance(validator, ThrottledReplicas):
        pair = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)).map("{0[0]}:{0[1]}".format)
        return st.one_of(st.just(("*",)), st.lists(pair).map(tuple))
    if isinstance(validator, GzipLevel):
        return st.sampled_from([-1, *range(1, 10)])
    if isinstance(validator, MirrorNameValue):
        suffix = st.sampled_from(("", *MIRROR_NAME_SUFFIXES))
        return st.one_of(st.just(""), st.tuples(_mirror_base, suffix).map("".join))
    raise AssertionError(f"{key}: a new kind of value needs a strategy here")


@pytest.mark.parametrize("key", sorted(TOPIC_CONFIGS))
@given(data=st.data())
def test_parse_value_round_trips_formatted_values(key, data):
    value = data.draw(_valid_values(key))
    assert parse_value(key, format_value(key, value)) == value


_RANGED_INTEGER_KEYS = sorted(
    k for k, d in TOPIC_CONFIGS.items() if isinstance(d.validator, Range) and d.type in _BOUNDS
)


@pytest.mark.parametrize("key", _RANGED_INTEGER_KEYS)
@given(data=st.data())
def test_parse_value_refuses_exactly_the_integers_outside_the_range(key, data):
    validator = TOPIC_CONFIGS[key].validator
    low, high = _BOUNDS[TOPIC_CONFIGS[key].type]
    # Half the draws near the bounds, where an off-by-one would hide.
    edges = [b + d for b in (validator.min, validator.max) if b is not None for d in (-1, 0, 1)]
    value = data.draw(st.one_of(st.integers(low, high), st.sampled_from(edges)))
    inside = (validator.min is None or value >= validator.min) and (
        validator.max is None or value <= validator.max
    )
    if inside:
        assert parse_value(key, str(value)) == value
    else:
        with pytest.raises(InvalidConfigError, match=f"for configuration {key}: Value must be"):
            parse_value(key, str(value))
