"""A topic config changed through the Kafka API takes effect on the partition's log at once."""

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kcore.testing import EmbeddedCluster


def test_altered_max_message_bytes_applies_to_the_next_produce():
    with EmbeddedCluster() as cluster:
        cluster.create_topic("limited")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = ConfigResource(
            ResourceType.TOPIC,
            "limited",
            incremental_configs=[
                ConfigEntry(
                    "max.message.bytes", "5000", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(30)
        log = cluster.broker.replica_manager.partitions[("limited", 0)].log
        assert log.config.max_message_bytes == 5000
        errors = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce("limited", b"x" * 10_000, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(10)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].name() == "MSG_SIZE_TOO_LARGE"
        assert log.log_end_offset == 0
