"""The pytest plugin is registered through the package's entry points: its fixtures exist here
without any import or conftest, exactly as in another project that installed kcore."""

from confluent_kafka import Consumer, Producer, TopicPartition


def test_pytest_plugin_kcore_cluster_fixture_serves_real_clients(kcore_cluster):
    kcore_cluster.create_topic("plugin-topic")
    producer = Producer({"bootstrap.servers": kcore_cluster.bootstrap_servers})
    producer.produce("plugin-topic", b"from the fixture")
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kcore_cluster.bootstrap_servers,
            "group.id": "plugin",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("plugin-topic", 0, 0)])
    msg = None
    for _ in range(20):
        msg = consumer.poll(0.5)
        if msg is not None:
            break
    consumer.close()
    assert msg is not None and msg.value() == b"from the fixture"


def test_pytest_plugin_factory_gives_each_call_its_own_cluster(kcore_cluster_factory):
    first = kcore_cluster_factory()
    second = kcore_cluster_factory(config={"num.partitions": "3"})
    assert first.bootstrap_servers != second.bootstrap_servers
    first.create_topic("only-here")
    assert "only-here" in first.topics() and "only-here" not in second.topics()
