"""BrokerConfig: Java properties syntax, Kafka's keys and defaults, kcore's defaults, errors."""

import logging

import pytest

from kcore.log.config import InvalidConfigError, LogConfig
from kcore.raft.config import RaftConfig
from kcore.server.config import (
    BROKER_CONFIGS,
    BrokerConfig,
    Listener,
    MalformedPropertiesError,
    QuorumVoter,
    load_properties,
    parse_override,
    parse_properties,
)
from kcore.server.listeners import parse_listeners, parse_protocol_map

# -- java.util.Properties ---------------------------------------------------------------------


def test_parse_properties_accepts_equals_colon_and_whitespace_separators():
    text = "a=1\nb:2\nc 3\nd\t4\ne = 5\nf : 6\ng\n"
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "",
    }


def test_parse_properties_skips_comments_and_blank_lines():
    text = "# a comment\n! another\n   # indented comment\n\n   \nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


def test_parse_properties_keeps_trailing_whitespace_and_second_separator_in_value():
    assert parse_properties("k = = v  \n") == {"k": "= v  "}
    assert parse_properties("k=a=b:c\n") == {"k": "a=b:c"}


def test_parse_properties_continues_lines_ending_in_odd_backslashes():
    text = "listeners=PLAINTEXT://:9092,\\\n    CONTROLLER://:9093\nnext=1\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "next": "1",
    }


def test_parse_properties_even_backslashes_do_not_continue():
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_parse_properties_comment_line_never_continues():
    assert parse_properties("# comment \\\nkey=value\n") == {"key": "value"}


def test_parse_properties_continued_line_starting_with_hash_is_data():
    assert parse_properties("key=a\\\n  #b\n") == {"key": "a#b"}


def test_parse_properties_continuation_at_end_of_input_drops_backslash():
    assert parse_properties("key=value\\") == {"key": "value"}


def test_parse_properties_decodes_java_escapes():
    text = "tab=a\\tb\nnl=a\\nb\nuni=caf\\u00e9\nother=\\q\\\\\nkey\\=with\\:seps\\ x=1\n"
    assert parse_properties(text) == {
        "tab": "a\tb",
        "nl": "a\nb",
        "uni": "café",
        "other": "q\\",
        "key=with:seps x": "1",
    }


def test_parse_properties_malformed_unicode_escape_raises_with_line():
    with pytest.raises(MalformedPropertiesError, match="line 2"):
        parse_properties("ok=1\nbad=\\u12g4\n")


def test_parse_properties_handles_crlf_and_cr_line_ends():
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_parse_properties_later_duplicate_wins():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_load_properties_reads_utf8_and_falls_back_to_latin1(tmp_path):
    utf8 = tmp_path / "utf8.properties"
    utf8.write_bytes("broker.rack=zürich\n".encode())
    latin1 = tmp_path / "latin1.properties"
    latin1.write_bytes("broker.rack=zürich\n".encode("iso-8859-1"))
    assert load_properties(utf8) == {"broker.rack": "zürich"}
    assert load_properties(latin1) == {"broker.rack": "zürich"}


def test_parse_override_splits_at_first_equals():
    assert parse_override("sasl.jaas.config=a=b") == ("sasl.jaas.config", "a=b")
    assert parse_override("broker.rack") == ("broker.rack", "")
    with pytest.raises(InvalidConfigError):
        parse_override("=1")


def test_broker_config_load_overrides_beat_file_and_later_overrides_win(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\ndefault.replication.factor=1\n# note\n")
    config = BrokerConfig.load(path, ["num.partitions=5", "num.partitions=7"])
    assert config.num_partitions == 7
    assert config.raw["default.replication.factor"] == "1"
    assert config.explicit >= {"num.partitions", "default.replication.factor"}


def test_broker_config_load_without_file_is_kcore_defaults():
    assert BrokerConfig.load(None).raw == {}


# -- defaults -------------------------------------------------------------------------------------

# Written by hand from the Apache Kafka 4.x broker configuration reference.
KAFKA_DEFAULTS = {
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "delete.topic.enable": True,
    "min.insync.replicas": 1,
    "message.max.bytes": 1048588,
    "socket.request.max.bytes": 104857600,
    "socket.send.buffer.bytes": 102400,
    "socket.receive.buffer.bytes": 102400,
    "connections.max.idle.ms": 600000,
    "queued.max.requests": 500,
    "max.connections": 2147483647,
    "max.connections.per.ip": 2147483647,
    "num.io.threads": 8,
    "num.network.threads": 3,
    "replica.fetch.max.bytes": 1048576,
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "fetch.max.bytes": 57671680,
    "max.incremental.fetch.session.cache.slots": 1000,
    "broker.session.timeout.ms": 9000,
    "broker.heartbeat.interval.ms": 2000,
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.backoff.max.ms": 1000,
    "controller.quorum.request.timeout.ms": 2000,
    "controller.quorum.retry.backoff.ms": 20,
    "metadata.log.max.record.bytes.between.snapshots": 20971520,
    "metadata.log.max.snapshot.interval.ms": 3600000,
    "metadata.log.dir": None,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.retention.minutes": 10080,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "group.coordinator.rebalance.protocols": ("classic", "consumer"),
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transactional.id.expiration.ms": 604800000,
    "transaction.max.timeout.ms": 900000,
    "producer.id.expiration.ms": 86400000,
    "log.retention.check.interval.ms": 300000,
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.flush.scheduler.interval.ms": 9223372036854775807,
    "log.dir": "/tmp/kafka-logs",
    "log.dirs": None,
    "listeners": ("PLAINTEXT://:9092",),
    "advertised.listeners": None,
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": "PLAINTEXT",
    "controller.quorum.voters": (),
    "controller.quorum.bootstrap.servers": (),
    "process.roles": None,
    "node.id": None,
}


@pytest.mark.parametrize("key", sorted(KAFKA_DEFAULTS))
def test_broker_configs_table_default_is_kafkas(key):
    assert BROKER_CONFIGS[key].default == KAFKA_DEFAULTS[key]


# Keys whose effective value in kcore is Kafka's default, checked on a default BrokerConfig.
SAME_AS_KAFKA = [
    k
    for k in KAFKA_DEFAULTS
    if k
    not in {
        "log.dir",
        "log.dirs",
        "listeners",
        "advertised.listeners",
        "inter.broker.listener.name",
        "controller.quorum.voters",
        "process.roles",
        "node.id",
        "metadata.log.dir",
        "controller.quorum.bootstrap.servers",
    }
]


@pytest.mark.parametrize("key", SAME_AS_KAFKA)
def test_broker_config_default_value_matches_kafka(key):
    config = BrokerConfig()
    assert config.value(key) == KAFKA_DEFAULTS[key]
    assert getattr(config, key.replace(".", "_")) == KAFKA_DEFAULTS[key]


def test_broker_config_kafka_security_protocol_map_default_plus_controller_plaintext():
    assert BrokerConfig().listener_security_protocol_map == {
        "PLAINTEXT": "PLAINTEXT",
        "SSL": "SSL",
        "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
        "CONTROLLER": "PLAINTEXT",
    }


def test_broker_config_kcore_single_node_defaults():
    config = BrokerConfig()
    assert config.process_roles == {"broker", "controller"}
    assert config.is_broker and config.is_controller
    assert config.node_id == 1
    assert config.listeners == (
        Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        Listener("CONTROLLER", "127.0.0.1", 9093, "PLAINTEXT"),
    )
    assert config.advertised_listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert config.advertised_controller_listeners == (
        Listener("CONTROLLER", "127.0.0.1", 9093, "PLAINTEXT"),
    )
    assert config.controller_listener_names == ("CONTROLLER",)
    assert config.controller_quorum_voters == (QuorumVoter(1, "127.0.0.1", 9093),)
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.log_dirs == ("./data",)
    assert config.metadata_log_dir == "./data"
    assert config.admin_listeners == ()
    assert config.unknown == ()


def test_broker_config_default_voters_follow_node_id_and_controller_listener():
    config = BrokerConfig({"node.id": "7", "listeners": "PLAINTEXT://:9192,CONTROLLER://:9193"})
    assert config.controller_quorum_voters == (QuorumVoter(7, "127.0.0.1", 9193),)
    assert config.listeners[0].host is None


def test_broker_config_default_listeners_follow_roles():
    broker = BrokerConfig({"process.roles": "broker", "controller.quorum.voters": "2@c:9093"})
    assert [str(x) for x in broker.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    controller = BrokerConfig({"process.roles": "controller"})
    assert [str(x) for x in controller.listeners] == ["CONTROLLER://127.0.0.1:9093"]
    assert controller.advertised_listeners == ()


def test_broker_config_log_dirs_beats_log_dir_and_feeds_metadata_log_dir():
    config = BrokerConfig({"log.dir": "/x", "log.dirs": "/a, /b"})
    assert config.log_dirs == ("/a", "/b")
    assert config.metadata_log_dir == "/a"
    assert BrokerConfig({"metadata.log.dir": "/m"}).metadata_log_dir == "/m"


def test_broker_config_internal_topic_replication_factor_is_capped_at_one_until_replication():
    # Kafka's default 3, or any value set: one replica while kcore cannot replicate (#17).
    for props in ({}, {"offsets.topic.replication.factor": "3"}):
        config = BrokerConfig(props)
        assert config.internal_topic_replication_factor("offsets.topic.replication.factor") == 1
    config = BrokerConfig({"transaction.state.log.replication.factor": "1"})
    assert config.internal_topic_replication_factor("transaction.state.log.replication.factor") == 1


def test_broker_config_internal_topic_replication_factor_with_replication_is_kafkas():
    on = {"kcore.replication.enable": "true"}
    config = BrokerConfig(on)
    assert config.internal_topic_replication_factor("offsets.topic.replication.factor") == 3
    assert config.internal_topic_replication_factor("mirror.state.topic.replication.factor") == 3
    assert config.transaction_state_log_min_isr_for(3) == 2  # transaction.state.log.min.isr
    config = BrokerConfig({**on, "transaction.state.log.replication.factor": "5"})
    assert config.internal_topic_replication_factor("transaction.state.log.replication.factor") == 5
    explicit = BrokerConfig({**on, "transaction.state.log.min.isr": "3"})
    assert explicit.transaction_state_log_min_isr_for(3) == 3


def test_broker_config_transaction_state_min_isr_is_capped_at_the_replication_factor():
    assert BrokerConfig().transaction_state_log_min_isr_for(1) == 1  # default 2, RF capped
    explicit = {"transaction.state.log.min.isr": "2"}
    # An explicit 2 beside a factor the limit lowered from 3 would refuse every write at RF 1.
    assert BrokerConfig(explicit).transaction_state_log_min_isr_for(1) == 1
    # Set for the factor it gets, it stays as set (Kafka's behaviour: writes then fail).
    same = {**explicit, "transaction.state.log.replication.factor": "1"}
    assert BrokerConfig(same).transaction_state_log_min_isr_for(1) == 2


def test_broker_config_mirroring_defaults():
    config = BrokerConfig()
    assert config.mirror_state_topic_num_partitions == 50  # D-08
    assert config.mirror_metadata_refresh_interval_ms == 30000  # spec §10.1
    assert config.mirror_failed_retry_backoff_ms == 5000  # D-13
    assert config.mirror_failed_max_retries == 5  # D-13
    assert config.mirror_support_unclean_leader_election is False


def test_broker_config_effective_text_feeds_raft_config():
    config = BrokerConfig({"node.id": "3"})
    assert config.effective["controller.quorum.voters"] == "3@127.0.0.1:9093"
    assert config.effective["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert config.effective["num.partitions"] == "1"
    assert RaftConfig.from_properties(config.effective).voter_ids == (3,)


def test_broker_config_is_immutable():
    config = BrokerConfig()
    with pytest.raises(AttributeError):
        config.num_partitions = 2
    with pytest.raises(TypeError):
        config.raw["num.partitions"] = "2"


# -- typed values and errors ------------------------------------------------------------------


def test_broker_config_parses_types_with_kafkas_trimming():
    config = BrokerConfig(
        {
            "num.partitions": " 4 ",
            "auto.create.topics.enable": "FALSE",
            "log.cleaner.io.buffer.load.factor": "0.5",
            "group.coordinator.rebalance.protocols": "classic , consumer",
            "broker.rack": "r1",
        }
    )
    assert config.num_partitions == 4
    assert config.auto_create_topics_enable is False
    assert config.log_cleaner_io_buffer_load_factor == 0.5
    assert config.group_coordinator_rebalance_protocols == ("classic", "consumer")
    assert config.broker_rack == "r1"


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        (
            "num.partitions",
            "abc",
            "Invalid value abc for configuration num.partitions: Not a number of type INT",
        ),
        (
            "num.partitions",
            "0",
            "Invalid value 0 for configuration num.partitions: Value must be at least 1",
        ),
        ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
        ("fetch.max.bytes", "1000", "Value must be at least 1024"),
        ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
        ("security.inter.broker.protocol", "TLS", "String must be one of"),
        ("process.roles", "broker,zookeeper", "String must be one of: broker, controller"),
        ("node.id", "-1", "Value must be at least 0"),
        ("log.retention.hours", "abc", "Invalid value abc for configuration log.retention.hours"),
        ("log.segment.bytes", "100", "Invalid value 100 for configuration log.segment.bytes"),
    ],
)
def test_broker_config_bad_value_error_names_the_key(key, text, message):
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({key: text})
    assert err.value.key == key
    assert message in err.value.message


def test_broker_config_reports_every_bad_key_at_once():
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"num.partitions": "x", "queued.max.requests": "0"})
    assert set(err.value.errors) == {"num.partitions", "queued.max.requests"}
    assert err.value.key is None


def test_broker_config_unknown_key_warns_and_is_kept(caplog):
    with caplog.at_level(logging.WARNING, logger="kcore.server.config"):
        config = BrokerConfig({"no.such.key": "1", "listener.name.plaintext.x": "2"})
    assert config.unknown == ("no.such.key",)
    assert config.raw["no.such.key"] == "1"
    assert "The configuration 'no.such.key' was supplied but isn't a known config." in caplog.text
    assert "listener.name" not in caplog.text


def test_broker_config_cluster_id_is_not_a_known_key():
    assert "cluster.id" not in BROKER_CONFIGS
    assert BrokerConfig({"cluster.id": "abc"}).unknown == ("cluster.id",)


def test_broker_config_raw_resolves_log_synonyms_in_log_config():
    config = BrokerConfig({"log.retention.hours": "1", "log.segment.bytes": "2097152"})
    log_config = LogConfig.from_layers({"segment.bytes": "4194304"}, config.raw)
    assert log_config.retention_ms == 3_600_000
    assert log_config.segment_bytes == 4194304
    assert config.log_config().segment_bytes == 2097152
    assert config.unknown == ()


# -- listeners --------------------------------------------------------------------------------


def test_listener_parsing_hosts_names_and_protocols():
    config = BrokerConfig(
        {
            "listeners": "client://0.0.0.0:9092,INTERNAL://[::1]:9094,CONTROLLER://:9093",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "advertised.listeners": "CLIENT://broker1.example:9092,INTERNAL://[::1]:9094",
            "inter.broker.listener.name": "internal",
        }
    )
    assert config.listeners == (
        Listener("CLIENT", "0.0.0.0", 9092, "PLAINTEXT"),
        Listener("INTERNAL", "::1", 9094, "PLAINTEXT"),
        Listener("CONTROLLER", None, 9093, "PLAINTEXT"),
    )
    assert str(config.listeners[1]) == "INTERNAL://[::1]:9094"
    assert str(config.listeners[2]) == "CONTROLLER://:9093"
    assert config.inter_broker_listener_name == "INTERNAL"
    assert [x.host for x in config.advertised_listeners] == ["broker1.example", "::1"]
    assert config.controller_quorum_voters == (QuorumVoter(1, "127.0.0.1", 9093),)


def test_listener_parsing_unparsable_entry_names_it():
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"listeners": "PLAINTEXT://:9092,localhost:9093"})
    assert err.value.key == "listeners"
    assert "Unable to parse localhost:9093 to a broker endpoint" in err.value.message


def test_listener_parsing_unmapped_name_has_no_security_protocol():
    with pytest.raises(InvalidConfigError, match="No security protocol defined for listener FOO"):
        BrokerConfig({"listeners": "FOO://:9092,CONTROLLER://:9093"})


def test_listener_parsing_refuses_duplicate_names_and_ports():
    with pytest.raises(InvalidConfigError, match="Each listener must have a different name"):
        BrokerConfig({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9094,CONTROLLER://:9093"})
    with pytest.raises(InvalidConfigError, match="Each listener must have a different port"):
        BrokerConfig({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9092"})


def test_listener_parsing_allows_one_ipv4_and_one_ipv6_on_a_port():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://[::1]:9092,CONTROLLER://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    )
    assert [x.port for x in config.listeners] == [9092, 9092, 9093]


def test_listener_parsing_bad_security_protocol_map_entry():
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER"})
    assert err.value.key == "listener.security.protocol.map"


def test_listener_explicit_map_without_controller_entry_is_refused_with_ssl_in_use():
    with pytest.raises(
        InvalidConfigError, match="No security protocol defined for listener CONTROLLER"
    ):
        BrokerConfig(
            {
                "listeners": "SSL://:9092,CONTROLLER://:9093",
                "listener.security.protocol.map": "SSL:SSL",
                "security.inter.broker.protocol": "SSL",
            }
        )


def test_listener_parsing_reads_every_kafka_security_protocol():
    # The map and the listeners parse whatever Kafka accepts; BrokerConfig refuses to *serve*
    # what kcore cannot (next tests).
    protocols = parse_protocol_map(("CLIENT:sasl_ssl", "INTERNAL:SSL", "OTHER:SASL_PLAINTEXT"))
    listeners = parse_listeners(
        "listeners", ("client://:9092", "INTERNAL://h:9094", "OTHER://h:9095"), protocols, True
    )
    assert [x.security_protocol for x in listeners] == ["SASL_SSL", "SSL", "SASL_PLAINTEXT"]


_PLAIN_LOGIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret";'
)
_INTERNAL_LISTENER_CASES = (
    (  # a client listener
        {
            "listeners": "CLIENT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
            "listener.security.protocol.map": "CLIENT:{p},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "CLIENT",
        },
        "listeners",
        "Listener CLIENT://127.0.0.1:9094 uses security protocol {p}, ",
    ),
    (  # the inter-broker listener, beside a plaintext client listener
        {
            "listeners": "PLAINTEXT://:9092,INTERNAL://:9094,CONTROLLER://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:{p},"
            "CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        },
        "listeners",
        "Listener INTERNAL://:9094 uses security protocol {p}, ",
    ),
    (  # the controller listener a combined node binds
        {
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:{p}",
        },
        "listeners",
        "Listener CONTROLLER://:9093 uses security protocol {p}, ",
    ),
    (  # the controller listener a broker-only node connects to
        {
            "process.roles": "broker",
            "node.id": "2",
            "controller.quorum.voters": "1@c1:9093",
            "listeners": "PLAINTEXT://:9092",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:{p}",
        },
        "controller.listener.names",
        "Controller listener CONTROLLER uses security protocol {p}, ",
    ),
    (  # a controller-only node
        {
            "process.roles": "controller",
            "listeners": "CONTROLLER://:9093",
            "listener.security.protocol.map": "CONTROLLER:{p}",
        },
        "listeners",
        "Listener CONTROLLER://:9093 uses security protocol {p}, ",
    ),
)


def _secured(props: dict, protocol: str) -> dict:
    props = {k: v.replace("{p}", protocol) for k, v in props.items()}
    if protocol.startswith("SASL"):
        props["sasl.enabled.mechanisms"] = "PLAIN"
        for name in ("client", "internal", "controller"):
            props[f"listener.name.{name}.plain.sasl.jaas.config"] = _PLAIN_LOGIN
    return props


# Every listener serves every protocol now, the controller and inter-broker ones included:
# kcore's own clients connect to those with the listener's protocol (#18).
@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("props, key, named", _INTERNAL_LISTENER_CASES)
def test_broker_config_serves_secured_controller_and_inter_broker_listeners(
    props, key, named, protocol
):
    props = _secured(props, protocol)
    props["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
    props["sasl.mechanism.controller.protocol"] = "PLAIN"
    config = BrokerConfig(props)
    assert protocol in config.listener_security_protocol_map.values()


# Kafka's default mechanism between nodes is GSSAPI, which kcore cannot speak: a SASL
# inter-broker or controller listener without a PLAIN/SCRAM mechanism set refuses to start.
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("props, key, named", _INTERNAL_LISTENER_CASES)
def test_broker_config_refuses_gssapi_between_nodes(props, key, named, protocol):
    props = _secured(props, protocol)
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(props)
    message = err.value.message
    assert err.value.key in (
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
    ), message
    assert f"{err.value.key}=GSSAPI (Kafka's default) is not supported by kcore" in message
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in message and "\n" not in message


_SASL_INTER_BROKER = {
    "listeners": "PLAINTEXT://:9092,INTERNAL://:9094,CONTROLLER://:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    "listener.name.internal.plain.sasl.jaas.config": _PLAIN_LOGIN,
    "listener.name.internal.scram-sha-256.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="broker-secret";'
    ),
}


def test_broker_config_reads_the_inter_broker_login_from_the_listeners_jaas_config():
    from kcore.security.internal_security import InternalSecurity

    config = BrokerConfig(_SASL_INTER_BROKER)
    login = InternalSecurity(config).inter_broker()
    assert (login.protocol, login.sasl.mechanism, login.sasl.username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "broker",
    )
    assert login.sasl.password == "broker-secret" and login.ssl_context is not None
    assert "broker-secret" not in repr(login)
    assert InternalSecurity(config).controller().connect_options() == {
        "ssl_context": None,
        "sasl": None,
    }


@pytest.mark.parametrize(
    "change, key, words",
    [
        (
            {"sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"},
            "sasl.mechanism.inter.broker.protocol",
            "sasl.mechanism.inter.broker.protocol=OAUTHBEARER is not supported by kcore",
        ),
        (
            {
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            },
            "sasl.mechanism.inter.broker.protocol",
            "must be included in sasl.enabled.mechanisms when SASL is used for inter-broker",
        ),
        (
            {"listener.name.internal.scram-sha-256.sasl.jaas.config": None},
            "listener.name.internal.scram-sha-256.sasl.jaas.config",
            "must be set: its username and password are this node's inter-broker login",
        ),
        (
            {
                "listener.name.internal.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            },
            "listener.name.internal.scram-sha-256.sasl.jaas.config",
            "has no username and no password",
        ),
        (
            {
                "listener.name.internal.scram-sha-256.sasl.jaas.config": _PLAIN_LOGIN,
            },
            "listener.name.internal.scram-sha-256.sasl.jaas.config",
            "names login module org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
    ],
)
def test_broker_config_refuses_an_inter_broker_login_kcore_cannot_use(change, key, words):
    props = {**_SASL_INTER_BROKER, **change}
    props = {k: v for k, v in props.items() if v is not None}
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(props)
    assert err.value.key == key and words in err.value.message, err.value.message
    assert "broker-secret" not in err.value.message


def test_broker_config_serves_an_ssl_client_listener():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,CLIENT://:9094,CONTROLLER://:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SSL,CONTROLLER:PLAINTEXT",
        }
    )
    assert [x.security_protocol for x in config.listeners] == ["PLAINTEXT", "SSL", "PLAINTEXT"]


def test_broker_config_refusing_a_listener_does_not_warn_about_its_ssl_keys(caplog):
    # The case: the only sign of trouble used to be "unknown config" warnings.
    props = {
        "listeners": "SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.location": "/etc/kafka/keystore.jks",
        "sasl.enabled.mechanisms": "PLAIN",
    }
    with (
        caplog.at_level(logging.WARNING, logger="kcore.server.config"),
        pytest.raises(InvalidConfigError, match="sasl.jaas.config is not set"),
    ):
        BrokerConfig(props)
    assert caplog.text == ""


def test_broker_config_unused_secured_protocol_in_the_map_is_fine():
    # Kafka's default map names all four protocols; only the listeners in use matter.
    config = BrokerConfig(
        {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,X:SSL"}
    )
    assert config.listener_security_protocol_map["X"] == "SSL"


def test_advertised_listeners_may_carry_the_controller_listener_as_in_kafka_4():
    config = BrokerConfig(
        {"advertised.listeners": "PLAINTEXT://b1.example:9092,CONTROLLER://c1.example:9093"}
    )
    assert [x.name for x in config.advertised_listeners] == ["PLAINTEXT"]
    assert config.advertised_controller_listeners == (
        Listener("CONTROLLER", "c1.example", 9093, "PLAINTEXT"),
    )


# -- cross-key validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        (
            {"process.roles": "broker"},
            "controller.quorum.voters",
            "either controller.quorum.bootstrap.servers must contain the set of bootstrap "
            "controllers or controller.quorum.voters must contain a parseable set",
        ),
        (
            {"process.roles": "broker", "controller.quorum.voters": "1@c:9093"},
            "node.id",
            "If process.roles contains just the 'broker' role, the node id 1 must not be "
            "included in the set of voters controller.quorum.voters={1}",
        ),
        (
            {
                "process.roles": "broker",
                "controller.quorum.voters": "2@c:9093",
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            },
            "controller.listener.names",
            "controller.listener.names must not contain a value appearing in the 'listeners' "
            "configuration when running KRaft with just the broker role",
        ),
        (
            {"process.roles": "controller", "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"},
            "listeners",
            "The listeners config must only contain KRaft controller listeners from "
            "controller.listener.names when process.roles=controller",
        ),
        (
            {"controller.quorum.voters": "2@c:9093,3@d:9093"},
            "node.id",
            "If process.roles contains the 'controller' role, the node id 1 must be included in "
            "the set of voters controller.quorum.voters={2, 3}",
        ),
        (
            {"listeners": "PLAINTEXT://:9092", "controller.quorum.voters": "1@h:9093"},
            "controller.listener.names",
            "controller.listener.names must contain at least one value appearing in the "
            "'listeners' configuration when running the KRaft controller role",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL"},
            "inter.broker.listener.name",
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
            "The valid options based on currently configured listeners are PLAINTEXT",
        ),
        (
            {
                "inter.broker.listener.name": "PLAINTEXT",
                "security.inter.broker.protocol": "PLAINTEXT",
            },
            "inter.broker.listener.name",
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            "advertised.listeners",
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0",
        ),
        (
            {"advertised.listeners": "SSL://h:9092"},
            "inter.broker.listener.name",
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
        (
            {"broker.id": "2"},
            "node.id",
            "You must set `node.id` to the same value as `broker.id`.",
        ),
        (
            {"replica.fetch.wait.max.ms": "40000"},
            "replica.socket.timeout.ms",
            "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms",
        ),
        (
            {"process.roles": ""},
            "process.roles",
            "a KRaft node needs the broker role, the controller role, or both",
        ),
        (
            {"controller.quorum.voters": "1@nohostport"},
            "controller.quorum.voters",
            "Invalid value 1@nohostport for configuration controller.quorum.voters",
        ),
    ],
)
def test_broker_config_cross_key_problem_is_refused_with_kafkas_message(props, key, message):
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(props)
    assert err.value.key == key
    assert message in err.value.message


def test_broker_config_broker_only_with_bootstrap_servers_is_valid():
    config = BrokerConfig(
        {
            "process.roles": "broker",
            "node.id": "4",
            "controller.quorum.bootstrap.servers": "c1:9093, [::1]:9093",
        }
    )
    assert config.controller_quorum_bootstrap_servers == (("c1", 9093), ("::1", 9093))
    assert config.controller_quorum_voters == ()
    assert not config.is_controller


def test_broker_config_three_node_quorum():
    config = BrokerConfig(
        {
            "node.id": "2",
            "controller.quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093",
            "listeners": "PLAINTEXT://h2:9092,CONTROLLER://h2:9093",
        }
    )
    assert [v.id for v in config.controller_quorum_voters] == [1, 2, 3]
    assert config.controller_quorum_voters[1] == QuorumVoter(2, "h2", 9093)


def test_listener_controller_gets_no_implicit_plaintext_when_ssl_is_in_use():
    # Kafka's KRaft rule: the CONTROLLER:PLAINTEXT default only applies without SSL/SASL.
    with pytest.raises(
        InvalidConfigError, match="No security protocol defined for listener CONTROLLER"
    ):
        BrokerConfig(
            {"listeners": "SSL://:9092,CONTROLLER://:9093", "security.inter.broker.protocol": "SSL"}
        )


def test_broker_config_copies_and_pickles_by_its_raw_map():
    import copy
    import pickle

    config = BrokerConfig({"num.partitions": "3"})
    for clone in (copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert clone.num_partitions == 3 and clone.raw == config.raw


def test_broker_configs_table_marks_thread_counts_unused_and_kcore_keys():
    assert {k for k, v in BROKER_CONFIGS.items() if v.unused} == {
        "num.io.threads",
        "num.network.threads",
        "background.threads",
        "num.recovery.threads.per.data.dir",
    }
    assert BROKER_CONFIGS["admin.listeners"].kcore_only
    assert BROKER_CONFIGS["admin.listeners"].default == ()
    assert BROKER_CONFIGS["log.dir"].effective_default == "./data"


def test_broker_config_unknown_name_in_value_lookup_is_an_error():
    with pytest.raises(InvalidConfigError):
        BrokerConfig().value("no.such.key")
    with pytest.raises(AttributeError):
        BrokerConfig().no_such_attribute  # noqa: B018


def test_embedded_cluster_refuses_an_ssl_listener_without_stores_before_starting(tmp_path):
    from kcore.testing import EmbeddedCluster

    cluster = EmbeddedCluster(
        config={"listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:PLAINTEXT"},
        data_dir=tmp_path,
    )
    with pytest.raises(InvalidConfigError, match="a TLS listener needs a key and certificate"):
        cluster.start()
    assert list(tmp_path.iterdir()) == []


def test_broker_config_refuses_mirror_unclean_leader_election_without_replication():
    # M-38's "wait for all replicas" has no meaning with one replica: refused, never ignored.
    assert BrokerConfig({}).value("mirror.support.unclean.leader.election") is False
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"mirror.support.unclean.leader.election": "true"})
    assert err.value.key == "mirror.support.unclean.leader.election"
    assert "kcore.replication.enable=true" in err.value.message
    # With replication the flag is honoured (kcore.mirror.manager waits for every replica).
    both = {"mirror.support.unclean.leader.election": "true", "kcore.replication.enable": "true"}
    assert BrokerConfig(both).value("mirror.support.unclean.leader.election") is True
    # Nor may it be set at runtime: not a dynamic broker config (IncrementalAlterConfigs).
    from kcore.metadata.config_control import is_dynamic_broker_config

    assert not is_dynamic_broker_config("mirror.support.unclean.leader.election")
