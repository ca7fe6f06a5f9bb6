"""process.roles: a controller-only node and a broker-only node, forwarding between them.

Both nodes run in one ``trio.run`` as real :class:`KafkaBroker` instances on real loopback
sockets; confluent-kafka (in a worker thread) talks to the broker-only node, which forwards the
controller work (registration, heartbeats, CreateTopics, AllocateProducerIds) to the controller.
"""

import uuid

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kcore.client import BrokerConnection
from kcore.log.log_dirs import random_uuid, uuid_to_base64
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.broker import ensure_formatted
from kcore.server.config import BrokerConfig
from kcore.server.controller_channel import (
    CONTROLLER_APIS,
    describe_operation,
    error_codes,
    operation_for,
)
from kcore.server.node import start_node
from kcore.server.registry import CONTROLLER
from kcore.testing import free_ports

pytestmark = pytest.mark.timeout(120)


def _configs(tmp_path):
    cport, bport = free_ports(2)
    voters = f"1@127.0.0.1:{cport}"
    common = {
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": voters,
        "broker.heartbeat.interval.ms": "100",
        "broker.session.timeout.ms": "9000",
        "group.initial.rebalance.delay.ms": "0",
    }
    controller = BrokerConfig(
        {
            **common,
            "node.id": "1",
            "process.roles": "controller",
            "listeners": f"CONTROLLER://127.0.0.1:{cport}",
            "log.dirs": str(tmp_path / "controller"),
        }
    )
    broker = BrokerConfig(
        {
            **common,
            "node.id": "2",
            "process.roles": "broker",
            "listeners": f"PLAINTEXT://127.0.0.1:{bport}",
            "log.dirs": str(tmp_path / "broker"),
        }
    )
    cluster_id = uuid_to_base64(random_uuid())
    for config in (controller, broker):
        ensure_formatted(config, cluster_id)
    return controller, broker, cport, bport


def _client_roundtrip(bootstrap: str, topic: str) -> list[bytes]:
    """CreateTopics, produce (idempotent: AllocateProducerIds is forwarded too), consume."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    assert len(admin.list_topics(timeout=10).topics[topic].partitions) == 2
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors = []
    for i in range(20):
        producer.produce(
            topic,
            value=f"v{i}".encode(),
            partition=i % 2,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert errors == []
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got = []
    try:
        for _ in range(200):
            if len(got) >= 20:
                break
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_roles_controller_only_and_broker_only_nodes(tmp_path):
    controller_config, broker_config, cport, bport = _configs(tmp_path)
    topic = f"roles-{uuid.uuid4().hex[:8]}"

    async def main():
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                controller = await nursery.start(start_node, controller_config)
                broker = await nursery.start(start_node, broker_config)
                try:
                    # The controller-only node: a controller service, no broker lifecycle, no
                    # BROKER listener; the broker-only node: no controller, a Raft observer.
                    assert controller.controller_service is not None
                    assert broker.controller_service is None
                    assert controller.broker_epoch == -1
                    assert not broker.quorum.core.is_voter
                    assert controller.quorum.core.is_voter
                    assert {spec_type for _, spec_type in _listener_types(controller)} == {
                        CONTROLLER
                    }
                    # start_node returned: the broker registered and was unfenced.
                    assert broker.broker_epoch >= 0
                    registration = controller.metadata_image.cluster.brokers[2]
                    assert not registration.fenced
                    assert 1 not in controller.metadata_image.cluster.brokers

                    got = await trio.to_thread.run_sync(
                        _client_roundtrip, f"127.0.0.1:{bport}", topic
                    )
                    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
                    # The controller committed the topic (its image has it) and the broker
                    # leads both partitions.
                    assert topic in controller.metadata_image.topics.by_name
                    assert (topic, 0) in broker.replica_manager.partitions
                    assert (topic, 1) in broker.replica_manager.partitions

                    # The controller listener serves the controller APIs; client APIs not.
                    async with await BrokerConnection.connect("127.0.0.1", cport) as conn:
                        assert 19 in conn.api_versions and 62 in conn.api_versions
                        assert 0 not in conn.api_versions  # Produce
                        C = m.CreateTopicsRequest
                        response = await conn.request(
                            C(
                                topics=[
                                    C.CreatableTopic(
                                        name=topic + "-direct",
                                        num_partitions=1,
                                        replication_factor=1,
                                    )
                                ],
                                timeout_ms=10000,
                            )
                        )
                        assert response.topics[0].error_code == 0
                    with trio.fail_after(10):
                        while (topic + "-direct", 0) not in broker.replica_manager.partitions:
                            await trio.sleep(0.02)
                finally:
                    controller.request_stop()
                    broker.request_stop()

    trio.run(main)


def _listener_types(node):
    return [(spec.name, spec.listener_type) for spec in node._listener_specs()]


def test_roles_broker_only_node_without_controller_times_out(tmp_path):
    """No controller running: registration keeps retrying; a forwarded call is bounded."""
    _, broker_config, _, _ = _configs(tmp_path)

    async def main():
        from kcore.server.node import build_node

        broker = build_node(broker_config)
        broker.controller_channel.timeout_s = 0.5
        request = m.AllocateProducerIdsRequest(broker_id=2, broker_epoch=-1)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker.run)
                with pytest.raises(KafkaError) as e:
                    await broker.controller_call(lambda c, now: c.allocate_producer_ids(request))
                assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
                assert broker.broker_epoch == -1
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_roles_operation_table_round_trip():
    request = m.DeleteTopicsRequest(topic_names=["a"], timeout_ms=1)
    call = describe_operation(lambda c, now: c.delete_topics(request, 3))
    assert call.api.api_key == 20 and call.request is request and call.api_version == 3
    heartbeat = m.BrokerHeartbeatRequest(broker_id=1, broker_epoch=5)
    call = describe_operation(lambda c, now: c.broker_heartbeat(heartbeat, now))
    assert call.api.api_key == 63 and call.api.takes_now and call.api_version is None

    class Fake:
        def broker_heartbeat(self, request, now):
            return ("hb", request, now)

        def delete_topics(self, request, version):
            return ("del", request, version)

    assert operation_for(CONTROLLER_APIS["broker_heartbeat"], heartbeat, 1)(Fake(), 42) == (
        "hb",
        heartbeat,
        42,
    )
    assert operation_for(CONTROLLER_APIS["delete_topics"], request, 4)(Fake(), 42) == (
        "del",
        request,
        4,
    )
    R = m.CreateTopicsResponse
    response = R(topics=[R.CreatableTopicResult(name="x", error_code=41)])
    assert error_codes(response) == {41}
