"""The mirror's metadata sync between two real kcore clusters (spec §4.2, D-20...D-24).

Everything is driven the way an operator and an application would: topics, partitions, configs,
groups and ACLs are changed on the source with real clients (confluent-kafka, kafka-python,
kcore's admin client), and the destination is read the same way. The destination's refresh
interval is short (``mirror.metadata.refresh.interval.ms``), so "within one interval" is a
fraction of a second.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from kcore.client import KafkaClient
from kcore.client import mirrors as madmin
from kcore.client.groups import offset_fetch, offset_fetch_partitions
from kcore.metadata.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from kcore.metadata.image import StandardAcl
from kcore.mirror.metadata_sync import create_acls_request, delete_acls_request
from kcore.protocol import messages as m
from kcore.testing.mirroring import MirroredClusters

from .clusters import CLUSTER_CONFIG, wait_until

pytestmark = pytest.mark.timeout(300)

INTERVAL_MS = 300
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def dr():
    with MirroredClusters(
        "sync",
        source_config={**CLUSTER_CONFIG, **AUTHORIZER},
        destination_config={
            **CLUSTER_CONFIG,
            "mirror.metadata.refresh.interval.ms": str(INTERVAL_MS),
        },
        mirror_config={"mirror.topics.include": "auto-.*", "mirror.topics.exclude": "auto-skip-.*"},
    ) as clusters:
        yield clusters


def _admin(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def _status(dr):
    (mirror,) = _admin(
        dr.destination, lambda c: madmin.describe_cluster_mirrors(c, [dr.mirror])
    ).mirrors
    return mirror


def _sync_round(dr) -> None:
    """Wait for a round that begins after now and ends."""
    begun = int(time.time() * 1000)
    wait_until(lambda: _status(dr).last_sync_time_ms > begun, 30, "a sync round")


def _produce(cluster, topic: str, values, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for v in values:
        producer.produce(topic, v, partition=partition)
    assert producer.flush(30) == 0


def _committed(cluster, group: str) -> dict:
    response = _admin(cluster, lambda c: offset_fetch(c, group))
    return {
        tp: p.committed_offset
        for tp, p in offset_fetch_partitions(response).items()
        if p.committed_offset >= 0
    }


def _alter_mirror(dr, changes: dict) -> None:
    """IncrementalAlterConfigs of the mirror's configs: ``{key: (operation, value)}``."""
    op = m.IncrementalAlterConfigsRequest
    body = op(
        resources=[
            op.AlterConfigsResource(
                resource_type=64,  # CLUSTER_MIRROR
                resource_name=dr.mirror,
                configs=[
                    op.AlterableConfig(name=k, config_operation=o, value=v)
                    for k, (o, v) in changes.items()
                ],
            )
        ]
    )
    response = _admin(dr.destination, lambda c: c.request("any", body))
    assert [(r.error_code, r.error_message) for r in response.responses] == [(0, None)]


def _topic_configs(cluster, topic: str) -> dict:
    return dict(cluster.broker.metadata_image.configs.topic(topic))


# -- consumer groups -----------------------------------------------------------------------------


def test_sync_confluent_group_resumes_on_the_destination_at_exactly_the_next_record(dr):
    topic, group = _name("orders"), _name("billing")
    dr.source.create_topic(topic)
    values = [f"order-{i}".encode() for i in range(40)]
    _produce(dr.source, topic, values)
    dr.mirror_topics(topic)
    dr.wait_in_sync()

    reader = Consumer(
        {
            "bootstrap.servers": dr.source.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([topic])
    seen = []
    while len(seen) < 17:
        msg = reader.poll(10)
        assert msg is not None and msg.error() is None
        seen.append(msg.value())
    reader.commit(asynchronous=False)
    reader.close()
    assert _committed(dr.source, group) == {(topic, 0): 17}

    wait_until(lambda: _committed(dr.destination, group) == {(topic, 0): 17}, 30, "offsets synced")
    _sync_round(dr)
    assert dr.failover(topic) == [topic]

    resumed = Consumer(
        {
            "bootstrap.servers": dr.destination.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",  # a missing offset would re-read from 0
        }
    )
    resumed.subscribe([topic])
    rest = []
    deadline = time.monotonic() + 30
    while len(rest) < 23 and time.monotonic() < deadline:
        msg = resumed.poll(1)
        if msg is not None and msg.error() is None:
            rest.append(msg.value())
    resumed.close()
    assert seen + rest == values  # no duplicate, no gap


def test_sync_kafka_python_group_resumes_on_the_destination(dr):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic, group = _name("payments"), _name("ledger")
    dr.source.create_topic(topic, partitions=2)
    for p in range(2):
        _produce(dr.source, topic, [f"p{p}-{i}".encode() for i in range(10)], partition=p)
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    consumer = KafkaConsumer(
        bootstrap_servers=dr.source.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.assign([KTP(topic, 0), KTP(topic, 1)])
    consumer.commit({KTP(topic, 0): _offset_meta(4), KTP(topic, 1): _offset_meta(7)})
    consumer.close()
    want = {(topic, 0): 4, (topic, 1): 7}
    wait_until(lambda: _committed(dr.destination, group) == want, 30, "offsets synced")
    dr.failover(topic)

    resumed = KafkaConsumer(
        topic,
        bootstrap_servers=dr.destination.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    got = sorted((r.partition, r.value) for r in resumed)
    resumed.close()
    assert got == sorted(
        [(0, f"p0-{i}".encode()) for i in range(4, 10)]
        + [(1, f"p1-{i}".encode()) for i in range(7, 10)]
    )


def _offset_meta(offset: int):
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:  # kafka-python before 2.1 has no leader epoch
        return OffsetAndMetadata(offset, "")


def test_sync_skips_a_group_with_an_active_destination_member(dr):
    topic, group = _name("active"), _name("busy")
    dr.source.create_topic(topic)
    _produce(dr.source, topic, [b"x"] * 10)
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    # A member of the group is live on the destination (reading the mirror is allowed).
    member = Consumer(
        {
            "bootstrap.servers": dr.destination.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
        }
    )
    member.subscribe([topic])
    wait_until(lambda: (member.poll(0.2), member.assignment())[1], 30, "a destination member")
    _admin(dr.source, lambda c: _commit(c, group, {(topic, 0): 6}))
    _sync_round(dr)
    _sync_round(dr)
    status = _status(dr)
    assert any(group in n and "active on the destination" in n for n in status.sync_notes)
    assert _committed(dr.destination, group) == {}
    member.close()
    wait_until(lambda: _committed(dr.destination, group) == {(topic, 0): 6}, 30, "synced once idle")


async def _commit(client, group, offsets):
    from kcore.client.groups import offset_commit

    return await offset_commit(client, group, offsets)


# -- topics, partitions, configs -----------------------------------------------------------------


def test_sync_discovers_an_included_topic_within_one_interval_but_not_an_excluded_one(dr):
    included, excluded, internal_like = _name("auto-new"), _name("auto-skip-x"), "__auto-x"
    dr.source.create_topic(excluded)
    dr.source.create_topic(included, partitions=2)
    start = time.monotonic()
    wait_until(
        lambda: included in dr.destination.broker.metadata_image.topics.by_name, 30, "discovery"
    )
    took = time.monotonic() - start
    assert took < 10 * INTERVAL_MS / 1000 + 5  # a round, not a restart
    _produce(dr.source, included, [b"a", b"b"])
    dr.wait_in_sync()
    image = dr.destination.broker.metadata_image
    assert (
        image.topics.by_name[included].topic_id
        == dr.source.broker.metadata_image.topics.by_name[included].topic_id
    )
    assert excluded not in image.topics.by_name
    assert internal_like not in image.topics.by_name
    status = _status(dr)  # the last round that changed something started it
    assert ("topic-started", included) in [(c.kind, c.resource) for c in status.sync_changes]
    assert status.last_change_time_ms <= status.last_sync_time_ms


def test_sync_adds_partitions_that_then_mirror(dr):
    topic = _name("grow")
    dr.source.create_topic(topic, partitions=1)
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    wait_until(
        lambda: dr.destination.broker.metadata_image.topics.by_name[topic].num_partitions == 3,
        30,
        "partitions added",
    )
    _produce(dr.source, topic, [b"new-2"], partition=2)
    dr.wait_in_sync()
    assert dr.describe()[(topic, 2)].state == "MIRRORING"
    assert dr.destination.broker.replica_manager.partitions[(topic, 2)].log_end_offset == 1


def test_sync_copies_configs_but_not_deny_listed_ones_and_removes_local_overrides(dr):
    topic = _name("conf")
    dr.source.create_topic(topic)
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
    wanted = {
        "retention.ms": "123456789",
        "cleanup.policy": "compact,delete",
        "max.message.bytes": "2000000",
        "compression.type": "lz4",
    }
    resource = ConfigResource("topic", topic, set_config={**wanted, "min.insync.replicas": "1"})
    admin.alter_configs([resource])[resource].result(30)

    def synced() -> bool:
        configs = _topic_configs(dr.destination, topic)
        return all(configs.get(k) == v for k, v in wanted.items())

    wait_until(synced, 30, "configs synced")
    configs = _topic_configs(dr.destination, topic)
    assert "min.insync.replicas" not in configs  # D-21: destination-local, never copied
    assert configs["mirror.name"] == dr.mirror  # kept
    # A key dropped on the source goes on the destination too.
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "123456789"})
    admin.alter_configs([resource])[resource].result(30)  # AlterConfigs replaces the set
    wait_until(
        lambda: "compression.type" not in _topic_configs(dr.destination, topic), 30, "removed"
    )
    assert _topic_configs(dr.destination, topic)["retention.ms"] == "123456789"


def test_sync_an_exclude_pattern_added_later_stops_the_topic(dr):
    topic = _name("later")
    dr.source.create_topic(topic)
    _produce(dr.source, topic, [b"kept"])
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    _alter_mirror(dr, {"mirror.topics.exclude": (2, topic)})  # APPEND
    wait_until(lambda: dr.describe().get((topic, 0)).state == "STOPPED", 30, "stopped by exclude")
    # The record, then STOPPING's MIRROR_PID_RESET control record: the data stays.
    assert dr.destination.broker.replica_manager.partitions[(topic, 0)].log_end_offset == 2


def test_sync_source_topic_deleted_stops_the_mirror_topic_and_keeps_its_data(dr):
    topic = _name("doomed")
    dr.source.create_topic(topic, partitions=2)
    _produce(dr.source, topic, [b"a", b"b", b"c"])
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    dr.source.delete_topic(topic)
    wait_until(
        lambda: all(dr.describe()[(topic, p)].state == "STOPPED" for p in range(2)), 60, "stopped"
    )
    assert topic in dr.destination.broker.metadata_image.topics.by_name
    reader = Consumer(
        {
            "bootstrap.servers": dr.destination.bootstrap_servers,
            "group.id": _name("after"),
            "auto.offset.reset": "earliest",
        }
    )
    reader.assign([CTP(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        msg = reader.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    reader.close()
    assert got == [b"a", b"b", b"c"]


# -- ACLs ----------------------------------------------------------------------------------------


def _acl(topic: str, principal: str) -> StandardAcl:
    return StandardAcl(
        int(ResourceType.TOPIC),
        topic,
        int(PatternType.LITERAL),
        principal,
        "*",
        int(AclOperation.READ),
        int(AclPermissionType.ALLOW),
    )


async def _create_acls(client, acls):
    return await client.request("any", create_acls_request(acls))


async def _delete_acls(client, acls):
    return await client.request("any", delete_acls_request(acls))


def _acls(cluster) -> set:
    return set(cluster.broker.metadata_image.acls.acls.values())


def test_sync_acls_follow_the_source_and_a_hand_made_one_survives(dr):
    topic = _name("secure")
    alice, bob, carol = (_acl(topic, f"User:{u}") for u in ("alice", "bob", "carol"))
    response = _admin(dr.source, lambda c: _create_acls(c, [alice, bob]))
    assert [r.error_code for r in response.results] == [0, 0]
    # carol's ACL is made by hand on the destination; bob's too (the same binding as the source's)
    dr.destination._call(_controller_acls, dr.destination, [carol, bob])
    wait_until(lambda: {alice, bob, carol} <= _acls(dr.destination), 30, "ACLs created")
    _admin(dr.source, lambda c: _delete_acls(c, [alice, bob]))
    wait_until(lambda: alice not in _acls(dr.destination), 30, "alice's ACL deleted")
    for _ in range(3):
        _sync_round(dr)
    assert {bob, carol} <= _acls(dr.destination)  # not created by the mirror: never deleted
    # The record of what the sync created no longer holds it (restarts: test_metadata_sync_faults).
    assert alice not in dr.destination.broker.mirror_coordinator.synced_acls(dr.mirror)


async def _controller_acls(cluster, acls):
    """ACLs made on ``cluster`` by hand (not through the sync)."""
    request = create_acls_request(acls)
    await cluster.broker.controller_call(lambda c, now: c.create_acls(request))


# -- the operator's view ---------------------------------------------------------------------


def test_sync_status_in_describe_and_describe_json(dr, capsys):
    import json

    from kcore import cli

    topic = _name("shown")
    dr.source.create_topic(topic)
    dr.mirror_topics(topic)
    admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "777000"})
    admin.alter_configs([resource])[resource].result(30)
    wait_until(
        lambda: _topic_configs(dr.destination, topic).get("retention.ms") == "777000", 30, "synced"
    )
    _sync_round(dr)
    argv = ["cluster-mirrors", "--bootstrap-server", dr.destination.bootstrap_servers]
    capsys.readouterr()
    assert cli.main([*argv, "--describe", "--mirror", dr.mirror, "--json"]) == 0
    (mirror,) = json.loads(capsys.readouterr().out)["mirrors"]
    sync = mirror["metadataSync"]
    assert sync["lastSyncTimeMs"] > 0 and 0 <= sync["lastSyncAgeMs"] < 60_000
    assert sync["errors"] == []
    assert any("share-group offset sync" in n for n in sync["notes"])  # kcore has none
    assert {"kind": "configs-altered", "resource": topic, "detail": "retention.ms=777000"} in (
        sync["changes"]
    )
    assert cli.main([*argv, "--describe", "--mirror", dr.mirror]) == 0
    out = capsys.readouterr().out
    assert f"Metadata sync of mirror {dr.mirror}: last round " in out
    assert "note: share-group offset sync (M-21) does not run" in out
    assert f"configs-altered {topic}: retention.ms=777000" in out


def test_sync_pause_halts_config_and_offset_sync_until_resumed(dr):
    topic, group = _name("paused"), _name("waiting")
    dr.source.create_topic(topic)
    _produce(dr.source, topic, [b"p"] * 4)
    dr.mirror_topics(topic)
    dr.wait_in_sync()
    done = _admin(dr.destination, lambda c: madmin.pause_mirror_topics(c, dr.mirror, [topic]))
    assert [t.error_code for t in done.topics] == [0]
    admin = AdminClient({"bootstrap.servers": dr.source.bootstrap_servers})
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "999000"})
    admin.alter_configs([resource])[resource].result(30)
    _admin(dr.source, lambda c: _commit(c, group, {(topic, 0): 2}))
    # Several intervals: rounds of the mirror's other topics (or none, when every topic of the
    # mirror is paused) leave this one alone.
    time.sleep(6 * INTERVAL_MS / 1000)
    assert "retention.ms" not in _topic_configs(dr.destination, topic)  # M-24
    assert _committed(dr.destination, group) == {}
    wait_until(lambda: dr.describe()[(topic, 0)].state == "PAUSED", 30, "PAUSED")
    done = _admin(dr.destination, lambda c: madmin.resume_mirror_topics(c, dr.mirror, [topic]))
    assert [t.error_code for t in done.topics] == [0]
    wait_until(
        lambda: _topic_configs(dr.destination, topic).get("retention.ms") == "999000", 30, "resumed"
    )
    wait_until(
        lambda: _committed(dr.destination, group) == {(topic, 0): 2}, 30, "offsets after resume"
    )


def test_sync_refresh_interval_is_a_dynamic_broker_config(dr):
    # mirror.metadata.refresh.interval.ms (M-12) altered at run time takes effect at once.
    op = m.IncrementalAlterConfigsRequest
    key = "mirror.metadata.refresh.interval.ms"

    def alter(value):
        body = op(
            resources=[
                op.AlterConfigsResource(
                    resource_type=4,  # BROKER, "" = the cluster-wide default
                    resource_name="",
                    configs=[
                        op.AlterableConfig(
                            name=key, config_operation=0 if value else 1, value=value
                        )
                    ],
                )
            ]
        )
        response = _admin(dr.destination, lambda c: c.request("any", body))
        assert [(r.error_code, r.error_message) for r in response.responses] == [(0, None)]

    _sync_round(dr)
    alter("3600000")
    try:
        time.sleep(1.5)
        before = _status(dr).last_sync_time_ms
        time.sleep(10 * INTERVAL_MS / 1000)
        assert _status(dr).last_sync_time_ms == before  # no round in an hour-long interval
    finally:
        alter(None)
    _sync_round(dr)  # back to the broker's 300 ms
