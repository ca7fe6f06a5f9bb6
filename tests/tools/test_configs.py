"""``kcore configs`` (``kafka-configs.sh``) as a process against a running kcore: Kafka's output
lines compared whole, and the altered configs changing what the broker then does (a
``max.message.bytes`` makes a confluent-kafka produce fail)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from hypothesis import given
from hypothesis import strategies as st

from kcore.commands.configs import HELP, USAGE, parse_add_config
from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, usage_error, wrapper

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _topic(cluster) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1)
    return name


def configs(cluster, *argv: str):
    return kcore("configs", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def _produce(cluster, topic: str, size: int) -> None:
    """One record of ``size`` bytes, acks=all; raises KafkaException if the broker refuses."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    failures = []
    producer.produce(topic, b"v" * size, on_delivery=lambda err, _: err and failures.append(err))
    assert producer.flush(30) == 0
    if failures:
        raise KafkaException(failures[0])


def test_configs_help_is_kafkas_layout_and_the_wrapper_prints_it():
    done = wrapper("kafka-configs.sh", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout == HELP
    lines = [line.rstrip() for line in HELP.splitlines()]  # joptsimple pads every line
    assert lines[:3] == [
        USAGE,
        "Option                                 Description",
        "------                                 -----------",
    ]
    assert "--alter                                Alter the configuration for the entity." in lines
    # joptsimple breaks after a hyphen too ("cluster-").
    at = lines.index("--entity-type <String>                 Type of entity")
    assert (
        lines[at + 1] == "                                         (topics/brokers/users/cluster-"
    )
    assert lines[at + 2] == "                                         mirrors)"
    assert "--topic <String>                       The topic's name." in lines


def test_configs_alter_topic_max_message_bytes_makes_a_large_produce_fail(cluster):
    topic = _topic(cluster)
    _produce(cluster, topic, 2000)  # fine before
    done = configs(cluster, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--add-config", "max.message.bytes=1024")  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"Completed updating config for topic {topic}.\n",
        "",
    )
    with pytest.raises(KafkaException) as refused:
        _produce(cluster, topic, 2000)
    assert refused.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    _produce(cluster, topic, 500)

    described = configs(cluster, "--describe", "--topic", topic)
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  max.message.bytes=1024 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "max.message.bytes=1024, DEFAULT_CONFIG:message.max.bytes=1048588}",
    ]

    deleted = configs(cluster, "--alter", "--topic", topic, "--delete-config", "max.message.bytes")
    assert deleted.stdout == f"Completed updating config for topic {topic}.\n"
    _produce(cluster, topic, 2000)  # the limit is gone
    assert configs(cluster, "--describe", "--topic", topic).stdout == (
        f"Dynamic configs for topic {topic} are:\n"
    )


def test_configs_add_config_groups_a_list_value_in_square_brackets(cluster):
    topic = _topic(cluster)
    done = configs(cluster, "--alter", "--topic", topic,
                   "--add-config", "cleanup.policy=[compact,delete],retention.ms=86400000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert configs(cluster, "--describe", "--topic", topic).stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "retention.ms=86400000, DEFAULT_CONFIG:log.retention.hours=168}",
    ]


def test_configs_describe_all_lists_the_defaults_with_their_sources(cluster):
    topic = _topic(cluster)
    configs(cluster, "--alter", "--topic", topic, "--add-config", "segment.bytes=1048576")
    lines = configs(cluster, "--describe", "--all", "--topic", topic).stdout.splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    assert (
        "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "segment.bytes=1048576, DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    ) in lines
    assert (
        "  retention.ms=604800000 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.hours=168}"
    ) in lines
    names = [line.split("=")[0].strip() for line in lines[1:]]
    assert names == sorted(names) and len(names) > 20


def test_configs_broker_and_default_message_max_bytes_limit_what_topics_accept(cluster):
    topic = _topic(cluster)
    default = configs(
        cluster, "--alter", "--broker-defaults", "--add-config", "message.max.bytes=4096"
    )
    assert default.stdout == "Completed updating default config for brokers in the cluster.\n"
    try:
        with pytest.raises(KafkaException):
            _produce(cluster, topic, 5000)  # the topic inherits the cluster-wide default
        _produce(cluster, topic, 3000)
        own = configs(cluster, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                      "--add-config", "message.max.bytes=1024")  # fmt: skip
        assert own.stdout == "Completed updating config for broker 1.\n"
        with pytest.raises(KafkaException):
            _produce(cluster, topic, 2000)  # broker 1's own value wins over the default
        assert configs(cluster, "--describe", "--entity-type", "brokers").stdout.splitlines() == [
            "Dynamic configs for broker 1 are:",
            "  message.max.bytes=1024 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "message.max.bytes=1024, DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=4096, "
            "DEFAULT_CONFIG:message.max.bytes=1048588}",
            "Default configs for brokers in the cluster are:",
            "  message.max.bytes=4096 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "message.max.bytes=4096, DEFAULT_CONFIG:message.max.bytes=1048588}",
        ]
    finally:
        configs(cluster, "--alter", "--broker", "1", "--delete-config", "message.max.bytes")
        configs(cluster, "--alter", "--entity-type", "brokers", "--entity-default",
                "--delete-config", "message.max.bytes")  # fmt: skip
    _produce(cluster, topic, 5000)
    assert configs(cluster, "--describe", "--broker", "1").stdout == (
        "Dynamic configs for broker 1 are:\n"
    )


def test_configs_cluster_mirror_entity_alter_and_describe(cluster, tmp_path):
    mirror = f"m-{uuid.uuid4().hex[:6]}"
    props = tmp_path / "mirror.properties"
    props.write_text(f"bootstrap.servers={cluster.bootstrap_servers}\n")
    created = kcore("cluster-mirrors", "--bootstrap-server", cluster.bootstrap_servers,
                    "--create", "--mirror", mirror, "--mirror-config", str(props))  # fmt: skip
    assert created.returncode == 0, created.stderr
    done = configs(cluster, "--entity-type", "cluster-mirrors", "--entity-name", mirror,
                   "--alter", "--add-config", "mirror.topics.exclude=internal-.*")  # fmt: skip
    assert (done.returncode, done.stdout) == (
        0,
        f"Completed updating config for mirror {mirror}.\n",
    )
    lines = configs(cluster, "--describe", "--entity-type", "cluster-mirrors",
                    "--entity-name", mirror).stdout.splitlines()  # fmt: skip
    assert lines[0] == f"Dynamic configs for mirror {mirror} are:"
    assert "  mirror.topics.exclude=internal-.* sensitive=false synonyms={UNKNOWN:mirror.topics.exclude=internal-.*}" in lines  # fmt: skip
    assert f"  bootstrap.servers={cluster.bootstrap_servers} sensitive=false synonyms={{UNKNOWN:bootstrap.servers={cluster.bootstrap_servers}}}" in lines  # fmt: skip
    unknown = configs(
        cluster, "--describe", "--entity-type", "cluster-mirrors", "--entity-name", "nope"
    )
    assert one_line(unknown).startswith("Error while executing config command: MIRROR_NOT_FOUND")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe", "--entity-type", "users", "--entity-default"], "--entity-default must not be specified with --describe of users"),  # user quotas
        (["--alter", "--entity-type", "users", "--add-config", "a=1"], "An entity name must be specified with --alter of users"),
        (["--describe", "--entity-type", "clients", "--entity-name", "c"], "client quotas"),
        (["--describe", "--entity-type", "ips"], "IP connection quotas"),
        (["--describe", "--entity-type", "things"], "Invalid entity type things"),
        (["--describe"], "At least one entity type must be specified"),
        (["--alter", "--describe", "--topic", "t"], "exactly one action"),
        (["--alter", "--topic", "t"], "At least one of --add-config"),
        (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "An entity name must be specified"),
        (["--describe", "--broker", "x"], "must be a valid integer broker id"),
        (["--describe", "--topic", "t", "--entity-name", "u"], "should not be used in conjunction"),
        (["--describe", "--topic", "t", "--add-config", "a=1"], "can't be used with option"),
        (["--alter", "--topic", "t", "--all", "--add-config", "a=1"], "--all is only valid with --describe"),
        (["--describe", "--topic", "t", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)  # fmt: skip
def test_configs_usage_errors_exit_2_with_one_line(capsys, argv, message):
    status, out, err = usage_error(capsys, "configs", "--bootstrap-server", "127.0.0.1:1", *argv)
    assert (status, out) == (2, "")
    assert err.startswith("kcore configs: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe", "--topic", "no-such-topic"], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["--alter", "--topic", "{t}", "--add-config", "no.such.key=1"], "Unknown topic config name: no.such.key"),
        (["--alter", "--topic", "{t}", "--add-config", "max.message.bytes=lots"], "INVALID_CONFIG"),
        (["--alter", "--topic", "{t}", "--delete-config", "retention.ms"], "Invalid config(s): retention.ms"),
        (["--alter", "--topic", "{t}", "--add-config", "k=v=w"], 'must be in the format "key=val"'),
        (["--alter", "--topic", "{t}", "--add-config", "b@d=1"], "Invalid character found for config key: b@d"),
        (["--describe", "--broker", "7"], "broker 7 is not in the cluster (brokers: 1)"),
    ],
)  # fmt: skip
def test_configs_refusals_exit_1_with_one_line_and_change_nothing(cluster, argv, message):
    topic = _topic(cluster)
    done = configs(cluster, *[a.replace("{t}", topic) for a in argv])
    assert done.returncode == 1
    assert message in one_line(done)
    assert configs(cluster, "--describe", "--topic", topic).stdout == (
        f"Dynamic configs for topic {topic} are:\n"
    )


def test_configs_unreachable_broker_and_command_config_errors(cluster, tmp_path):
    down = kcore("configs", "--bootstrap-server", "127.0.0.1:1", "--describe", "--topic", "t")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
    props = tmp_path / "admin.properties"
    props.write_text("sasl.mechanism=PLAIN\n")  # SASL without SASL_PLAINTEXT: not honoured
    refused = configs(cluster, "--describe", "--topic", "t", "--command-config", str(props))
    assert "sasl.mechanism given with security.protocol=PLAINTEXT" in one_line(refused)
    props.write_text("ssl.truststore.location=/x\n")
    refused = configs(cluster, "--describe", "--topic", "t", "--command-config", str(props))
    assert (
        "ssl.truststore.location given with security.protocol=PLAINTEXT: set "
        "security.protocol=SSL to use TLS"
    ) in one_line(refused)
    props.write_text("client.id=ops-tool\nrequest.timeout.ms=5000\n")
    topic = _topic(cluster)
    ok = configs(cluster, "--describe", "--topic", topic, "--command-config", str(props))
    assert ok.returncode == 0, ok.stderr


_KEYS = st.text("abcdefghij0123456789._-", min_size=1, max_size=12)
_VALUES = st.text("ABCabc0123:./_ -", max_size=10).map(str.strip)


@given(st.dictionaries(_KEYS, st.lists(_VALUES, min_size=1, max_size=3), max_size=5))
def test_parse_add_config_reads_back_what_kafkas_syntax_writes(configs_in):
    text = ",".join(
        f"{k}={v[0]}" if len(v) == 1 else f"{k}=[{','.join(v)}]" for k, v in configs_in.items()
    )
    if not configs_in:
        return
    assert parse_add_config(text) == {k: ",".join(v) for k, v in configs_in.items()}
