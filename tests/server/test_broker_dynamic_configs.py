"""Legacy AlterConfigs on a BROKER resource with Kafka's dynamic broker keys (confluent-kafka):
accepted and stored, reported by DescribeConfigs with their source; read-only and unknown keys
refused; a key kcore honours takes effect."""

import uuid

import pytest
import trio
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def _alter(admin, name: str, configs: dict) -> None:
    resource = ConfigResource(ResourceType.BROKER, name, set_config=configs)
    admin.alter_configs([resource])[resource].result(30)


def _alter_default(cluster, configs: dict) -> tuple[int, str | None]:
    """Legacy AlterConfigs on the cluster-wide default (librdkafka refuses the empty name)."""
    A = m.AlterConfigsRequest
    request = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=4,
                resource_name="",
                configs=[A.AlterableConfig(name=k, value=v) for k, v in configs.items()],
            )
        ]
    )

    async def main():
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            return await client.request("any", request, version=2)

    (answer,) = trio.run(main).responses
    return answer.error_code, answer.error_message


def _describe(admin, name: str) -> dict:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource])[resource].result(30)


def test_alter_configs_broker_accepts_kafkas_per_broker_dynamic_keys(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    _alter(admin, "1", {"sasl.kerberos.min.time.before.relogin": "58000"})
    entry = _describe(admin, "1")["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not entry.is_read_only


def test_alter_configs_broker_default_reports_the_dynamic_default_source(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert _alter_default(cluster, {"log.cleaner.io.buffer.size": "1048576"})[0] == 0
    entry = _describe(admin, "1")["log.cleaner.io.buffer.size"]
    assert entry.value == "1048576"
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


@pytest.mark.parametrize(
    "name, key, value",
    [
        ("1", "process.roles", "broker"),  # read-only
        ("1", "no.such.config", "1"),  # unknown
        ("1", "ssl.keystore.location", "/tmp/ks"),  # only with a listener prefix in Kafka
    ],
)
def test_alter_configs_broker_refuses_what_kafka_refuses(cluster, name, key, value):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(KafkaException):
        _alter(admin, name, {key: value})


def test_alter_configs_broker_default_refuses_per_broker_keys(cluster):
    code, message = _alter_default(cluster, {"sasl.kerberos.min.time.before.relogin": "58000"})
    assert code == ErrorCode.INVALID_CONFIG
    assert "broker id must be specified" in message


def test_alter_configs_broker_log_default_takes_effect_on_topics(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic)
    _alter(admin, "1", {"log.retention.ms": "12345"})
    broker = cluster.broker
    assert broker._topic_config(topic).retention_ms == 12345


def test_alter_configs_broker_verification_switch_takes_effect(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    key = "transaction.partition.verification.enable"
    assert cluster.broker.dynamic_value(key) is True
    _alter(admin, "1", {key: "false"})
    assert cluster.broker.dynamic_value(key) is False
