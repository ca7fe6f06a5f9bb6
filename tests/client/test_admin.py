"""The admin helpers: the bodies they build for each version and where they send them."""

import pytest
import trio

from kcore.client import KafkaClient, admin, raise_for_error
from kcore.protocol import APIS
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import RecordBatch, RecordBatchBuilder

from .fake_broker import FakeBroker, running, trio_test


def _cluster(n=2, topics=None, ranges=None):
    brokers = []
    for i in range(n):
        b = FakeBroker(node_id=i + 1, topics=topics or {})
        if ranges:
            b.api_ranges = {
                k: ranges.get(k, (a.min_version, a.max_version)) for k, a in APIS.items()
            }
        brokers.append(b)
    for b in brokers:
        b.cluster = brokers
        b.controller_id = brokers[-1].node_id
    return brokers


def _batch(*values: bytes) -> bytes:
    b = RecordBatchBuilder(base_offset=0)
    for i, v in enumerate(values):
        b.append(timestamp=1_700_000_000_000 + i, key=None, value=v)
    return bytes(b.build())


async def _create(broker, conn, req):
    R = m.CreateTopicsResponse
    return R(topics=[R.CreatableTopicResult(name=t.name, error_code=0) for t in req.body.topics])


@trio_test
async def test_admin_create_topics_goes_to_the_controller_with_partitions_and_configs():
    b1, b2 = _cluster(2)
    b2.handlers[19] = _create
    async with running(b1, b2), KafkaClient(b1.address) as client:
        resp = await admin.create_topics(
            client,
            [admin.NewTopic("orders", 3, 1, configs={"cleanup.policy": "compact"}), "plain"],
            timeout_ms=1234,
        )
        assert [t.name for t in resp.topics] == ["orders", "plain"]
        (seen,) = b2.requests_for(19)
        orders, plain = seen.body.topics
        assert (orders.num_partitions, orders.replication_factor) == (3, 1)
        assert [(c.name, c.value) for c in orders.configs] == [("cleanup.policy", "compact")]
        assert (plain.num_partitions, plain.replication_factor) == (-1, -1)
        assert seen.body.timeout_ms == 1234


@trio_test
async def test_admin_create_topics_errors_are_returned_and_raised_on_request():
    async def exists(broker, conn, req):
        R = m.CreateTopicsResponse
        return R(topics=[R.CreatableTopicResult(name="t", error_code=36, error_message="there")])

    (b1,) = _cluster(1)
    b1.handlers[19] = exists
    async with running(b1), KafkaClient(b1.address) as client:
        resp = await admin.create_topics(client, ["t"])
        raise_for_error(resp, ignore=[ErrorCode.TOPIC_ALREADY_EXISTS])
        with pytest.raises(KafkaError, match="there"):
            raise_for_error(resp)


@pytest.mark.parametrize("max_version, by_state", [(6, True), (5, False)])
@trio_test
async def test_admin_delete_topics_uses_topic_states_from_v6_and_names_before(
    max_version, by_state
):
    async def delete(broker, conn, req):
        return m.DeleteTopicsResponse()

    (b1,) = _cluster(1, ranges={20: (0, max_version)})
    b1.handlers[20] = delete
    async with running(b1), KafkaClient(b1.address) as client:
        await admin.delete_topics(client, ["a", "b"])
        (seen,) = b1.requests_for(20)
        assert seen.version == max_version
        if by_state:
            assert [t.name for t in seen.body.topics] == ["a", "b"]
        else:
            assert seen.body.topic_names == ["a", "b"]


@trio_test
async def test_admin_describe_configs_of_a_broker_goes_to_that_broker():
    async def describe(broker, conn, req):
        R = m.DescribeConfigsResponse
        return R(
            results=[
                R.DescribeConfigsResult(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[R.DescribeConfigsResourceResult(name="x", value=str(broker.node_id))],
                )
                for r in req.body.resources
            ]
        )

    b1, b2 = _cluster(2)
    for b in (b1, b2):
        b.handlers[32] = describe
    async with running(b1, b2), KafkaClient(b1.address) as client:
        resp = await admin.describe_configs(
            client, [(admin.ConfigResourceType.BROKER, "2")], keys=["x"]
        )
        assert resp.results[0].configs[0].value == "2"
        assert b2.requests_for(32)[0].body.resources[0].configuration_keys == ["x"]
        resp = await admin.describe_configs(client, [(admin.ConfigResourceType.TOPIC, "t")])
        assert resp.results[0].resource_name == "t"
        assert b1.requests_for(32) or len(b2.requests_for(32)) == 2


@trio_test
async def test_admin_list_offsets_asks_each_leader_and_merges():
    async def offsets(broker, conn, req):
        R = m.ListOffsetsResponse
        assert req.body.replica_id == -1
        return R(
            topics=[
                R.ListOffsetsTopicResponse(
                    name=t.name,
                    partitions=[
                        R.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            offset=100 * broker.node_id + p.partition_index,
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.body.topics
            ]
        )

    b1, b2 = _cluster(2, {"t": {0: 1, 1: 2, 2: 1}})
    for b in (b1, b2):
        b.handlers[2] = offsets
    async with running(b1, b2), KafkaClient(b1.address) as client:
        got = await admin.list_offsets(
            client, {("t", 0): admin.LATEST_TIMESTAMP, ("t", 1): -2, ("t", 2): -1}
        )
        assert {tp: p.offset for tp, p in got.items()} == {
            ("t", 0): 100,
            ("t", 1): 201,
            ("t", 2): 102,
        }
        assert len(b1.requests_for(2)) == 1 and len(b2.requests_for(2)) == 1
        ts = {
            p.partition_index: p.timestamp for p in b2.requests_for(2)[0].body.topics[0].partitions
        }
        assert ts == {1: -2}


async def _fetch_handler(broker, conn, req):
    R = m.FetchResponse
    return R(
        responses=[
            R.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionData(
                        partition_index=p.partition, high_watermark=2, records=_batch(b"a", b"b")
                    )
                    for p in t.partitions
                ],
            )
            for t in req.body.topics
        ]
    )


@pytest.mark.parametrize("fetch_max", [12, APIS[1].max_version])
@trio_test
async def test_admin_fetch_names_topics_before_v13_and_ids_after(fetch_max):
    (b1,) = _cluster(1, {"t": {0: 1, 1: 1}}, ranges={1: (0, fetch_max)})
    b1.handlers[1] = _fetch_handler
    async with running(b1), KafkaClient(b1.address) as client:
        resp = await admin.fetch(client, {("t", 0): 5, ("t", 1): 7}, max_wait_ms=10)
        (seen,) = b1.requests_for(1)
        assert seen.version == fetch_max
        (topic,) = seen.body.topics
        if fetch_max >= 13:
            assert topic.topic_id == b1.topic_ids["t"]
            got = client.metadata.topic_by_id(resp.responses[0].topic_id).name
        else:
            assert topic.topic == "t"
            got = resp.responses[0].topic
        assert got == "t"
        assert [(p.partition, p.fetch_offset) for p in topic.partitions] == [(0, 5), (1, 7)]
        assert (seen.body.session_id, seen.body.session_epoch) == (0, -1)
        records = resp.responses[0].partitions[0].records
        assert isinstance(records, memoryview)
        assert [r.value for r in RecordBatch(records).records()] == [b"a", b"b"]


@trio_test
async def test_admin_fetch_of_partitions_with_different_leaders_needs_a_target():
    b1, b2 = _cluster(2, {"t": {0: 1, 1: 2}})
    async with running(b1, b2), KafkaClient(b1.address) as client:
        with pytest.raises(ValueError, match="target"):
            await admin.fetch(client, {("t", 0): 0, ("t", 1): 0})


@pytest.mark.parametrize("produce_max", [12, 13])
@trio_test
async def test_admin_produce_sends_batches_to_the_leader_by_name_or_id(produce_max):
    async def produce(broker, conn, req):
        if req.body.acks == 0:
            return None
        R = m.ProduceResponse
        return R(
            responses=[
                R.TopicProduceResponse(
                    name=t.name,
                    topic_id=t.topic_id,
                    partition_responses=[
                        R.PartitionProduceResponse(index=p.index, base_offset=10)
                        for p in t.partition_data
                    ],
                )
                for t in req.body.topic_data
            ]
        )

    if produce_max > APIS[0].max_version:
        pytest.skip(f"the codec has no Produce v{produce_max}")
    b1, b2 = _cluster(2, {"t": {0: 2}}, ranges={0: (3, produce_max)})
    b2.handlers[0] = produce
    batch = _batch(b"hello")
    async with running(b1, b2), KafkaClient(b1.address) as client:
        resp = await admin.produce(client, {("t", 0): batch}, acks=1)
        assert resp.responses[0].partition_responses[0].base_offset == 10
        assert await admin.produce(client, {("t", 0): batch}, acks=0) is None
        while len(b2.requests_for(0)) < 2:  # nothing to wait for but the broker itself
            await trio.sleep(0.001)
        first, second = b2.requests_for(0)
        assert first.version == produce_max and [first.body.acks, second.body.acks] == [1, 0]
        data = first.body.topic_data[0]
        if produce_max >= 13:
            assert data.topic_id == b1.topic_ids["t"]
        else:
            assert data.name == "t"
        assert bytes(data.partition_data[0].records) == batch
        with pytest.raises(ValueError):
            await admin.produce(client, {("t", 0): batch}, acks=2)


@trio_test
async def test_admin_api_versions_returns_the_broker_ranges():
    (b1,) = _cluster(1, ranges={3: (0, 7)})
    async with running(b1), KafkaClient(b1.address) as client:
        resp = await admin.api_versions(client)
        assert {k.api_key: k.max_version for k in resp.api_keys}[3] == 7
