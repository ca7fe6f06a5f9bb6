"""Authorization in the request handlers, API family by API family, against a running kcore.

The broker gets a fake authorizer (``broker.authorizer``) that allows everything except the
(operation, resource type, name) triples a test denies. Each refused request gets Kafka's error
for the resource (TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and changes
nothing; the same request allowed works. Without an authorizer everything is allowed (the rest
of the suite).
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.log.log_reads import FetchIsolation
from kcore.metadata.acls import AclOperation as Op
from kcore.metadata.acls import ResourceType as Rt
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import iter_batches
from kcore.record.control import read_control_record
from kcore.testing import EmbeddedCluster

from .batches import produce_request, producer_batch
from .fetch_requests import fetch_request

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.min.session.timeout.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
}
CLUSTER = "kafka-cluster"
E = ErrorCode
RETRIABLE = (
    E.COORDINATOR_NOT_AVAILABLE,
    E.COORDINATOR_LOAD_IN_PROGRESS,
    E.NOT_COORDINATOR,
    E.CONCURRENT_TRANSACTIONS,
)


class FakeAuthorizer:
    """Allows everything except the denied ``(operation, resource type, name)`` triples."""

    def __init__(self, *denied: tuple[Op, Rt, str]) -> None:
        self.denied = set(denied)
        self.asked: list[tuple[str, Op, Rt, str]] = []

    def deny(self, *denied: tuple[Op, Rt, str]) -> None:
        self.denied |= set(denied)

    def allow_all(self) -> None:
        self.denied.clear()

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked.append((principal, operation, resource_type, name))
        return (operation, resource_type, name) not in self.denied

    def authorize_by_resource_type(self, principal, host, operation, resource_type) -> bool:
        """Some resource of the type allowed: everything is, but what was denied by name, and
        a denial of the wildcard name ``*`` stands for the whole type."""
        return (operation, resource_type, "*") not in self.denied


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def with_broker(test):
    """Run ``test(cluster, client, authorizer)`` under Trio on a fresh broker whose
    authorizer denies nothing until the test says so."""

    def run():
        async def main():
            async with (
                EmbeddedCluster(config=CONFIG) as cluster,
                KafkaClient([cluster.bootstrap_servers]) as client,
            ):
                await client.refresh_metadata()
                authorizer = FakeAuthorizer()
                cluster.broker.authorizer = authorizer
                await test(cluster, client, authorizer)

        trio.run(main)

    run.__name__ = test.__name__
    return run


async def _retrying(client, node, request, version, error=lambda r: r.error_code):
    with trio.fail_after(30):
        while True:
            resp = await client.request(node, request, version=version)
            if error(resp) not in RETRIABLE:
                return resp
            await trio.sleep(0.05)


async def _coordinator(client, key: str, key_type: int = 0) -> int:
    resp = await _retrying(client, "any", m.FindCoordinatorRequest(key=key, key_type=key_type), 3)
    assert resp.error_code == 0, resp
    return resp.node_id


def _produce_request(topic, records, transactional_id=None, partitions=(0,)) -> m.ProduceRequest:
    return produce_request(
        topic, {i: records for i in partitions}, transactional_id=transactional_id
    )


async def _produce(client, topic, records, transactional_id=None) -> int:
    resp = await client.request(
        "any", _produce_request(topic, records, transactional_id), version=9
    )
    return resp.responses[0].partition_responses[0].error_code


def _log(cluster, topic, partition=0):
    return cluster.broker.replica_manager.partitions[(topic, partition)].log


def _control_batches(cluster, topic) -> list:
    plog = _log(cluster, topic)
    data = plog.read(plog.log_start_offset, 1 << 20, FetchIsolation.LOG_END)
    return [
        read_control_record(b).type
        for s in data.records
        for b in iter_batches(s.read())
        if b.is_control
    ]


# -- Produce / Fetch / ListOffsets / DeleteRecords ----------------------------------------------


@with_broker
async def test_produce_without_write_on_the_topic_is_refused_and_appends_nothing(
    cluster, client, authorizer
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    authorizer.deny((Op.WRITE, Rt.TOPIC, topic))
    assert await _produce(client, topic, producer_batch([b"x"])) == E.TOPIC_AUTHORIZATION_FAILED
    assert _log(cluster, topic).log_end_offset == 0
    # A topic that does not exist answers the same: nothing is disclosed about it.
    missing = _name("missing")
    authorizer.deny((Op.WRITE, Rt.TOPIC, missing))
    assert await _produce(client, missing, producer_batch([b"x"])) == E.TOPIC_AUTHORIZATION_FAILED
    authorizer.allow_all()
    assert await _produce(client, topic, producer_batch([b"x"])) == 0
    assert _log(cluster, topic).log_end_offset == 1


@with_broker
async def test_transactional_produce_needs_write_on_the_transactional_id(
    cluster, client, authorizer
):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    authorizer.deny((Op.WRITE, Rt.TRANSACTIONAL_ID, tid))
    records = producer_batch([b"x"], pid=5000, epoch=0, sequence=0, transactional=True)
    assert await _produce(client, topic, records, tid) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Transactional batches without a transactional id are refused too, with an authorizer.
    assert await _produce(client, topic, records, None) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _log(cluster, topic).log_end_offset == 0
    # Idempotent (non-transactional) batches need no transactional id.
    assert await _produce(client, topic, producer_batch([b"y"], pid=5001, epoch=0, sequence=0)) == 0


def _fetched(resp) -> tuple[int, int]:
    p = resp.responses[0].partitions[0]
    return p.error_code, len(bytes(p.records or b""))


@with_broker
async def test_fetch_needs_read_on_the_topic_and_a_follower_cluster_action(
    cluster, client, authorizer
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    assert await _produce(client, topic, producer_batch([b"x"])) == 0
    topic_id = cluster.broker.metadata_image.topics.by_name[topic].topic_id
    authorizer.deny((Op.READ, Rt.TOPIC, topic))
    resp = await client.request("any", fetch_request(topic, topic_id), version=12)
    assert _fetched(resp) == (E.TOPIC_AUTHORIZATION_FAILED, 0)
    authorizer.allow_all()
    resp = await client.request("any", fetch_request(topic, topic_id), version=12)
    error, size = _fetched(resp)
    assert error == 0 and size > 0
    # A follower's fetch (replica id >= 0) needs CLUSTER_ACTION, not READ.
    authorizer.deny((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER))
    resp = await client.request("any", fetch_request(topic, topic_id, replica_id=7), version=12)
    assert _fetched(resp)[0] == E.TOPIC_AUTHORIZATION_FAILED


@with_broker
async def test_list_offsets_needs_describe_and_delete_records_needs_delete(
    cluster, client, authorizer
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    assert await _produce(client, topic, producer_batch([b"a", b"b"])) == 0
    LO = m.ListOffsetsRequest
    list_offsets = LO(
        replica_id=-1,
        topics=[
            LO.ListOffsetsTopic(
                name=topic, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )
    authorizer.deny((Op.DESCRIBE, Rt.TOPIC, topic), (Op.DELETE, Rt.TOPIC, topic))
    p = (await client.request("any", list_offsets, version=7)).topics[0].partitions[0]
    assert (p.error_code, p.offset) == (E.TOPIC_AUTHORIZATION_FAILED, -1)
    D = m.DeleteRecordsRequest
    delete = D(
        topics=[
            D.DeleteRecordsTopic(
                name=topic, partitions=[D.DeleteRecordsPartition(partition_index=0, offset=1)]
            )
        ],
        timeout_ms=5000,
    )
    p = (await client.request("any", delete, version=2)).topics[0].partitions[0]
    assert p.error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert _log(cluster, topic).log_start_offset == 0
    authorizer.allow_all()
    p = (await client.request("any", list_offsets, version=7)).topics[0].partitions[0]
    assert (p.error_code, p.offset) == (0, 2)
    p = (await client.request("any", delete, version=2)).topics[0].partitions[0]
    assert (p.error_code, p.low_watermark) == (0, 1)


# -- Metadata and topic administration ----------------------------------------------------------


def _metadata(*names, auto_create=False) -> m.MetadataRequest:
    topics = None
    if names:
        topics = [m.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return m.MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create)


@with_broker
async def test_metadata_hides_topics_the_principal_may_not_describe(cluster, client, authorizer):
    shown, hidden, missing = _name("shown"), _name("hidden"), _name("missing")
    await cluster.acreate_topic(shown)
    await cluster.acreate_topic(hidden)
    authorizer.deny((Op.DESCRIBE, Rt.TOPIC, hidden), (Op.DESCRIBE, Rt.TOPIC, missing))
    every = await client.request("any", _metadata(), version=12)
    names = {t.name for t in every.topics}
    assert shown in names and hidden not in names
    asked = await client.request("any", _metadata(shown, hidden, missing), version=12)
    errors = {t.name: t.error_code for t in asked.topics}
    # An existing and a missing topic answer alike when they may not be described.
    assert errors == {
        shown: 0,
        hidden: E.TOPIC_AUTHORIZATION_FAILED,
        missing: E.TOPIC_AUTHORIZATION_FAILED,
    }
    by_hidden = {t.name: t for t in asked.topics}[hidden]
    assert by_hidden.partitions == [] and by_hidden.topic_id == uuid.UUID(int=0)


@with_broker
async def test_metadata_auto_creation_needs_create_on_the_cluster_or_the_topic(
    cluster, client, authorizer
):
    refused, allowed = _name("refused"), _name("allowed")
    authorizer.deny((Op.CREATE, Rt.CLUSTER, CLUSTER), (Op.CREATE, Rt.TOPIC, refused))
    resp = await client.request("any", _metadata(refused, allowed, auto_create=True), version=12)
    errors = {t.name: t.error_code for t in resp.topics}
    assert errors[refused] == E.TOPIC_AUTHORIZATION_FAILED
    assert errors[allowed] in (0, E.LEADER_NOT_AVAILABLE)
    assert allowed in cluster.broker.metadata_image.topics.by_name
    assert refused not in cluster.broker.metadata_image.topics.by_name


@with_broker
async def test_metadata_reports_authorized_operations_when_asked(cluster, client, authorizer):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    authorizer.deny((Op.WRITE, Rt.TOPIC, topic))
    request = _metadata(topic)
    request.include_topic_authorized_operations = True
    resp = await client.request("any", request, version=12)
    ops = resp.topics[0].topic_authorized_operations
    assert ops & (1 << Op.READ) and not ops & (1 << Op.WRITE)


def _create_topics(*names) -> m.CreateTopicsRequest:
    C = m.CreateTopicsRequest
    return C(
        topics=[C.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names],
        timeout_ms=10000,
    )


@with_broker
async def test_topic_administration_is_authorized_per_topic(cluster, client, authorizer):
    allowed, refused = _name("allowed"), _name("refused")
    authorizer.deny(
        (Op.CREATE, Rt.CLUSTER, CLUSTER),
        (Op.CREATE, Rt.TOPIC, refused),
        (Op.DESCRIBE_CONFIGS, Rt.TOPIC, allowed),
    )
    resp = await client.request("any", _create_topics(allowed, refused), version=7)
    assert {t.name: t.error_code for t in resp.topics} == {
        allowed: 0,
        refused: E.TOPIC_AUTHORIZATION_FAILED,
    }
    # The created topic's configs are withheld from a principal that may not describe them.
    created = {t.name: t for t in resp.topics}[allowed]
    assert (created.topic_config_error_code, created.configs) == (E.TOPIC_AUTHORIZATION_FAILED, [])
    image = cluster.broker.metadata_image
    assert allowed in image.topics.by_name and refused not in image.topics.by_name

    # CreatePartitions needs ALTER on the topic.
    authorizer.deny((Op.ALTER, Rt.TOPIC, allowed))
    CP = m.CreatePartitionsRequest
    grow = CP(
        topics=[CP.CreatePartitionsTopic(name=allowed, count=3, assignments=None)],
        timeout_ms=10000,
    )
    resp = await client.request("any", grow, version=3)
    assert resp.results[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert len(cluster.broker.metadata_image.topics.by_name[allowed].partitions) == 1

    # DeleteTopics needs DELETE (and DESCRIBE) on the topic, or DELETE on the cluster.
    authorizer.deny((Op.DELETE, Rt.TOPIC, allowed), (Op.DELETE, Rt.CLUSTER, CLUSTER))
    delete = m.DeleteTopicsRequest(topic_names=[allowed], timeout_ms=10000)
    resp = await client.request("any", delete, version=5)
    assert resp.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert allowed in cluster.broker.metadata_image.topics.by_name
    authorizer.allow_all()
    resp = await client.request("any", delete, version=5)
    assert resp.responses[0].error_code == 0
    assert allowed not in cluster.broker.metadata_image.topics.by_name


@with_broker
async def test_configs_need_describe_configs_and_alter_configs(cluster, client, authorizer):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    broker_id = str(cluster.broker.node_id)
    authorizer.deny(
        (Op.DESCRIBE_CONFIGS, Rt.TOPIC, topic),
        (Op.DESCRIBE_CONFIGS, Rt.CLUSTER, CLUSTER),
        (Op.ALTER_CONFIGS, Rt.TOPIC, topic),
    )
    D = m.DescribeConfigsRequest
    describe = D(
        resources=[
            D.DescribeConfigsResource(
                resource_type=2, resource_name=topic, configuration_keys=None
            ),
            D.DescribeConfigsResource(
                resource_type=4, resource_name=broker_id, configuration_keys=None
            ),
        ]
    )
    resp = await client.request("any", describe, version=4)
    assert [(r.error_code, r.configs) for r in resp.results] == [
        (E.TOPIC_AUTHORIZATION_FAILED, []),
        (E.CLUSTER_AUTHORIZATION_FAILED, []),
    ]
    A = m.IncrementalAlterConfigsRequest
    alter = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=2,
                resource_name=topic,
                configs=[A.AlterableConfig(name="retention.ms", config_operation=0, value="1000")],
            )
        ],
        validate_only=False,
    )
    resp = await client.request("any", alter, version=1)
    assert resp.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert "retention.ms" not in dict(cluster.broker.metadata_image.configs.topic(topic))
    authorizer.allow_all()
    resp = await client.request("any", alter, version=1)
    assert resp.responses[0].error_code == 0
    resp = await client.request("any", describe, version=4)
    assert [r.error_code for r in resp.results] == [0, 0]


@with_broker
async def test_describe_log_dirs_needs_describe_on_the_cluster(cluster, client, authorizer):
    authorizer.deny((Op.DESCRIBE, Rt.CLUSTER, CLUSTER))
    request = m.DescribeLogDirsRequest(topics=None)
    resp = await client.request("any", request, version=4)
    assert (resp.error_code, resp.results) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    authorizer.allow_all()
    resp = await client.request("any", request, version=4)
    assert resp.error_code == 0 and resp.results


@with_broker
async def test_elect_leaders_needs_alter_on_the_cluster(cluster, client, authorizer):
    E_ = m.ElectLeadersRequest
    request = E_(election_type=0, topic_partitions=[E_.TopicPartitions(topic="t", partitions=[0])])
    authorizer.deny((Op.ALTER, Rt.CLUSTER, CLUSTER))
    for version in (0, 2):  # v0 has no top-level error: every partition carries it
        resp = await client.request("any", request, version=version)
        codes = [p.error_code for r in resp.replica_election_results for p in r.partition_result]
        assert codes == [E.CLUSTER_AUTHORIZATION_FAILED]
        assert resp.error_code == (E.CLUSTER_AUTHORIZATION_FAILED if version else 0)
    authorizer.allow_all()
    resp = await client.request("any", request, version=2)
    codes = [p.error_code for r in resp.replica_election_results for p in r.partition_result]
    assert (resp.error_code, codes) == (0, [E.UNKNOWN_TOPIC_OR_PARTITION])


# -- Groups -------------------------------------------------------------------------------------


def _commit(group, topic_offsets, generation=-1, member="") -> m.OffsetCommitRequest:
    C = m.OffsetCommitRequest
    return C(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[
            C.OffsetCommitRequestTopic(
                name=t,
                partitions=[
                    C.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=o, committed_metadata=""
                    )
                ],
            )
            for t, o in topic_offsets
        ],
    )


def _commit_errors(resp) -> dict[str, int]:
    return {t.name: t.partitions[0].error_code for t in resp.topics}


async def _committed(client, node, group, *topics) -> dict[str, tuple[int, int]]:
    F = m.OffsetFetchRequest
    request = F(
        groups=[
            F.OffsetFetchRequestGroup(
                group_id=group,
                topics=[F.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in topics],
            )
        ]
    )
    resp = await _retrying(client, node, request, 8, lambda r: r.groups[0].error_code)
    g = resp.groups[0]
    assert g.error_code == 0, g
    return {
        t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in g.topics
    }


@with_broker
async def test_offset_commit_needs_read_on_the_group_and_on_each_topic(cluster, client, authorizer):
    group, readable, unreadable = _name("g"), _name("r"), _name("u")
    await cluster.acreate_topic(readable)
    await cluster.acreate_topic(unreadable)
    node = await _coordinator(client, group)
    authorizer.deny((Op.READ, Rt.GROUP, group))
    request = _commit(group, [(readable, 5), (unreadable, 7)])
    resp = await client.request(node, request, version=8)
    assert _commit_errors(resp) == {
        readable: E.GROUP_AUTHORIZATION_FAILED,
        unreadable: E.GROUP_AUTHORIZATION_FAILED,
    }
    assert await _committed(client, node, group, readable) == {readable: (0, -1)}

    authorizer.allow_all()
    authorizer.deny((Op.READ, Rt.TOPIC, unreadable))
    resp = await _retrying(client, node, request, 8, lambda r: r.topics[0].partitions[0].error_code)
    assert _commit_errors(resp) == {readable: 0, unreadable: E.TOPIC_AUTHORIZATION_FAILED}
    authorizer.allow_all()
    assert await _committed(client, node, group, readable, unreadable) == {
        readable: (0, 5),
        unreadable: (0, -1),
    }


@with_broker
async def test_offset_fetch_list_describe_and_delete_groups_are_authorized(
    cluster, client, authorizer
):
    group, other, topic, secret = _name("g"), _name("other"), _name("t"), _name("s")
    await cluster.acreate_topic(topic)
    await cluster.acreate_topic(secret)
    nodes = {g: await _coordinator(client, g) for g in (group, other)}
    for g in (group, other):
        resp = await _retrying(
            client,
            nodes[g],
            _commit(g, [(topic, 3), (secret, 4)]),
            8,
            lambda r: r.topics[0].partitions[0].error_code,
        )
        assert set(_commit_errors(resp).values()) == {0}

    authorizer.deny((Op.DESCRIBE, Rt.TOPIC, secret), (Op.DESCRIBE, Rt.GROUP, other))
    # OffsetFetch of every topic leaves out the topics the principal may not describe; named,
    # they answer TOPIC_AUTHORIZATION_FAILED. A group it may not describe: GROUP_AUTH...
    F = m.OffsetFetchRequest
    request = F(
        groups=[
            F.OffsetFetchRequestGroup(group_id=group, topics=None),
            F.OffsetFetchRequestGroup(
                group_id=group,
                topics=[F.OffsetFetchRequestTopics(name=secret, partition_indexes=[0])],
            ),
        ]
    )
    resp = await client.request(nodes[group], request, version=8)
    every, named = resp.groups
    assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == [(topic, 3)]
    assert [(t.name, t.partitions[0].error_code) for t in named.topics] == [
        (secret, E.TOPIC_AUTHORIZATION_FAILED)
    ]
    old = F(group_id=other, topics=None)
    assert (await client.request(nodes[other], old, version=7)).error_code == (
        E.GROUP_AUTHORIZATION_FAILED
    )

    # ListGroups without DESCRIBE on the cluster lists only describable groups.
    authorizer.deny((Op.DESCRIBE, Rt.CLUSTER, CLUSTER))
    listed = set()
    for node in set(nodes.values()):
        resp = await client.request(node, m.ListGroupsRequest(), version=4)
        listed |= {g.group_id for g in resp.groups}
    assert group in listed and other not in listed

    D = m.DescribeGroupsRequest
    resp = await client.request(
        nodes[other], D(groups=[other], include_authorized_operations=True), version=5
    )
    assert resp.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    resp = await client.request(
        nodes[group], D(groups=[group], include_authorized_operations=True), version=5
    )
    ops = resp.groups[0].authorized_operations
    assert resp.groups[0].error_code == 0 and ops & (1 << Op.DESCRIBE)

    authorizer.deny((Op.DELETE, Rt.GROUP, other))
    resp = await client.request(
        nodes[other], m.DeleteGroupsRequest(groups_names=[other]), version=2
    )
    assert resp.results[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    authorizer.allow_all()
    assert await _committed(client, nodes[other], other, topic) == {topic: (0, 3)}


@with_broker
async def test_join_group_and_find_coordinator_need_the_group(cluster, client, authorizer):
    group = _name("g")
    node = await _coordinator(client, group)
    authorizer.deny((Op.DESCRIBE, Rt.GROUP, group), (Op.READ, Rt.GROUP, group))
    resp = await client.request("any", m.FindCoordinatorRequest(key=group), version=3)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED and resp.node_id == -1
    J = m.JoinGroupRequest
    join = J(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"m")],
    )
    resp = await client.request(node, join, version=9)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED
    heartbeat = m.HeartbeatRequest(group_id=group, generation_id=1, member_id="x")
    resp = await client.request(node, heartbeat, version=4)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED
    authorizer.allow_all()
    resp = await client.request(node, join, version=9)
    assert resp.error_code == E.MEMBER_ID_REQUIRED


# -- Transactions -------------------------------------------------------------------------------


W = m.WriteTxnMarkersRequest


def _markers_request(pid, topic, commit=True) -> m.WriteTxnMarkersRequest:
    return W(
        markers=[
            W.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=0,
                transaction_result=commit,
                topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                coordinator_epoch=0,
            )
        ]
    )


def _marker_errors(resp) -> list[int]:
    return [p.error_code for mk in resp.markers for t in mk.topics for p in t.partitions]


@with_broker
async def test_write_txn_markers_without_cluster_action_is_refused_and_changes_nothing(
    cluster, client, authorizer
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    pid = 424_242
    records = producer_batch([b"x", b"y"], pid=pid, epoch=0, sequence=0, transactional=True)
    # Appended past the produce handler: no coordinator knows this producer, so a Produce would
    # fail KIP-890's partition verification.
    cluster.broker.replica_manager.append_records(
        topic, 0, records, required_acks=1, now_ms=int(time.time() * 1000)
    )
    plog = _log(cluster, topic)
    end = plog.log_end_offset
    assert plog.last_stable_offset == 0

    authorizer.deny((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER))
    resp = await client.request("any", _markers_request(pid, topic), version=1)
    assert _marker_errors(resp) == [E.CLUSTER_AUTHORIZATION_FAILED]
    assert [mk.producer_id for mk in resp.markers] == [pid]
    assert _control_batches(cluster, topic) == []
    assert (plog.log_end_offset, plog.last_stable_offset) == (end, 0)

    authorizer.allow_all()
    resp = await client.request("any", _markers_request(pid, topic), version=1)
    assert _marker_errors(resp) == [0]
    assert len(_control_batches(cluster, topic)) == 1
    assert plog.last_stable_offset == plog.log_end_offset == end + 1


@with_broker
async def test_transactional_apis_need_write_on_the_transactional_id(cluster, client, authorizer):
    topic, tid, group = _name("t"), _name("txn"), _name("g")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, tid, key_type=1)
    init = m.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000)

    authorizer.deny((Op.WRITE, Rt.TRANSACTIONAL_ID, tid))
    resp = await client.request(node, init, version=4)
    assert (resp.error_code, resp.producer_id) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    authorizer.allow_all()
    resp = await _retrying(client, node, init, 4)
    assert resp.error_code == 0
    pid, epoch = resp.producer_id, resp.producer_epoch

    A = m.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])
        ],
    )

    def add_error(r):
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    authorizer.deny((Op.WRITE, Rt.TOPIC, topic))
    assert add_error(await client.request(node, add, version=3)) == E.TOPIC_AUTHORIZATION_FAILED
    authorizer.allow_all()
    authorizer.deny((Op.WRITE, Rt.TRANSACTIONAL_ID, tid))
    assert add_error(await client.request(node, add, version=3)) == (
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    offsets = m.AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    resp = await client.request(node, offsets, version=3)
    assert resp.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    end = m.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
    )
    resp = await client.request(node, end, version=3)
    assert resp.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # The batched broker form (v4+) needs CLUSTER_ACTION.
    authorizer.deny((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER))
    batched = A(
        transactions=[
            A.AddPartitionsToTxnTransaction(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
            )
        ]
    )
    resp = await client.request(node, batched, version=4)
    assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED

    authorizer.allow_all()
    authorizer.deny((Op.READ, Rt.GROUP, group))
    resp = await client.request(node, offsets, version=3)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED

    # DescribeTransactions / ListTransactions: DESCRIBE on the transactional id.
    authorizer.deny((Op.DESCRIBE, Rt.TRANSACTIONAL_ID, tid))
    resp = await client.request(
        node, m.DescribeTransactionsRequest(transactional_ids=[tid]), version=0
    )
    assert resp.transaction_states[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    resp = await client.request(node, m.ListTransactionsRequest(), version=1)
    assert tid not in {t.transactional_id for t in resp.transaction_states}
    authorizer.allow_all()
    resp = await client.request(node, m.ListTransactionsRequest(), version=1)
    assert tid in {t.transactional_id for t in resp.transaction_states}


@with_broker
async def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_a_topic(
    cluster, client, authorizer
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    init = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
    authorizer.deny((Op.IDEMPOTENT_WRITE, Rt.CLUSTER, CLUSTER))
    resp = await _retrying(client, "any", init, 4)
    assert resp.error_code == 0  # WRITE on some topic is enough
    authorizer.deny((Op.WRITE, Rt.TOPIC, "*"))  # WRITE on no topic at all
    resp = await client.request("any", init, version=4)
    assert (resp.error_code, resp.producer_id) == (E.CLUSTER_AUTHORIZATION_FAILED, -1)


@with_broker
async def test_txn_offset_commit_needs_the_transactional_id_the_group_and_the_topics(
    cluster, client, authorizer
):
    topic, tid, group = _name("t"), _name("txn"), _name("g")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, group)
    T = m.TxnOffsetCommitRequest
    commit = T(
        transactional_id=tid,
        group_id=group,
        producer_id=1,
        producer_epoch=0,
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    T.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata=""
                    )
                ],
            )
        ],
    )

    async def error():
        resp = await client.request(node, commit, version=3)
        return resp.topics[0].partitions[0].error_code

    authorizer.deny((Op.WRITE, Rt.TRANSACTIONAL_ID, tid), (Op.READ, Rt.GROUP, group))
    assert await error() == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    authorizer.allow_all()
    authorizer.deny((Op.READ, Rt.GROUP, group))
    assert await error() == E.GROUP_AUTHORIZATION_FAILED
    authorizer.allow_all()
    authorizer.deny((Op.READ, Rt.TOPIC, topic))
    assert await error() == E.TOPIC_AUTHORIZATION_FAILED


# -- The real authorizer, end to end ------------------------------------------------------------


@pytest.mark.parametrize("super_user", [False, True])
def test_standard_authorizer_without_acls_refuses_write_txn_markers_unless_super_user(
    super_user,
):
    config = dict(
        CONFIG,
        **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
        },
    )
    if super_user:
        config["super.users"] = "User:ANONYMOUS"

    async def main():
        async with (
            EmbeddedCluster(config=config) as cluster,
            KafkaClient([cluster.bootstrap_servers]) as client,
        ):
            assert cluster.broker.authorizer is not None
            topic = _name("t")
            await cluster.acreate_topic(topic)
            resp = await client.request("any", _markers_request(99, topic), version=1)
            expected = 0 if super_user else E.CLUSTER_AUTHORIZATION_FAILED
            assert _marker_errors(resp) == [expected]
            assert len(_control_batches(cluster, topic)) == (1 if super_user else 0)

    trio.run(main)


# -- A real client ------------------------------------------------------------------------------


def test_confluent_consumer_denied_read_on_its_group_gets_group_authorization_failed():
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError as CKafkaError

    group, topic = _name("g"), _name("t")
    with EmbeddedCluster(config=CONFIG) as cluster:
        cluster.create_topic(topic)
        cluster.broker.authorizer = FakeAuthorizer((Op.READ, Rt.GROUP, group))
        errors = []
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "error_cb": errors.append,
            }
        )
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is not None:
                    errors.append(msg.error())
                if any(e.code() == CKafkaError.GROUP_AUTHORIZATION_FAILED for e in errors):
                    break
            codes = {e.code() for e in errors}
            assert CKafkaError.GROUP_AUTHORIZATION_FAILED in codes, errors
            assert (
                cluster.broker.group_coordinator.core.list_groups(m.ListGroupsRequest(), 4).groups
                == []
            )
        finally:
            consumer.close()


@with_broker
async def test_controller_listener_authorizes_broker_apis_and_direct_admin_requests(
    cluster, client, authorizer
):
    from kcore.client.connection import BrokerConnection

    async with await BrokerConnection.connect("127.0.0.1", cluster.controller_port) as conn:
        authorizer.deny((Op.CLUSTER_ACTION, Rt.CLUSTER, CLUSTER))
        allocate = m.AllocateProducerIdsRequest(broker_id=1, broker_epoch=0)
        resp = await conn.request(allocate, 0, timeout=10)
        assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        # Without CLUSTER_ACTION the caller is not a forwarding broker: per-topic rules apply.
        refused, allowed = _name("refused"), _name("allowed")
        authorizer.deny((Op.CREATE, Rt.CLUSTER, CLUSTER), (Op.CREATE, Rt.TOPIC, refused))
        resp = await conn.request(_create_topics(refused, allowed), 7, timeout=10)
        assert {t.name: t.error_code for t in resp.topics} == {
            refused: E.TOPIC_AUTHORIZATION_FAILED,
            allowed: 0,
        }
        assert refused not in cluster.broker.metadata_image.topics.by_name
