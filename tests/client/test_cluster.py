"""KafkaClient against fake brokers: metadata, routing, the pool, reconnects and retries."""

import random
import uuid

import pytest
import trio
from trio.testing import MockClock

from kcore.client import (
    ClientError,
    ConnectionFailed,
    ConnectionLost,
    KafkaClient,
    parse_bootstrap_servers,
    raise_for_error,
)
from kcore.client.errors import first_error
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

from .fake_broker import Drop, FakeBroker, free_port, running, trio_test


class _NoJitter(random.Random):
    def uniform(self, a, b):
        return 1.0


def _cluster(n=2, topics=None):
    brokers = [FakeBroker(node_id=i + 1, topics=topics or {}) for i in range(n)]
    for b in brokers:
        b.cluster = brokers
        b.controller_id = brokers[-1].node_id
    return brokers


def test_parse_bootstrap_servers_accepts_lists_and_ipv6_and_rejects_junk():
    assert parse_bootstrap_servers("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9092"]) == [("::1", 9092)]
    for bad in ("", "host", "host:", "host:0", "host:99999", ":9092"):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)


@trio_test
async def test_client_refresh_metadata_reads_brokers_topics_leaders_ids_and_controller():
    topics = {"orders": {0: 1, 1: 2}, "logs": {0: 2}}
    b1, b2 = _cluster(2, topics)
    async with running(b1, b2), KafkaClient(b1.address) as client:
        assert client.metadata is None
        md = await client.refresh_metadata()
        assert md.cluster_id == "fake-cluster" and md.controller_id == 2
        assert {n: (b.host, b.port) for n, b in md.brokers.items()} == {
            1: ("127.0.0.1", b1.port),
            2: ("127.0.0.1", b2.port),
        }
        assert set(md.topics) == {"orders", "logs"}
        assert md.topics["orders"].topic_id == b1.topic_ids["orders"]
        assert md.topic_by_id(b1.topic_ids["logs"]).name == "logs"
        assert client.leader_for("orders", 1) == 2
        assert md.topics["orders"].partitions[0].isr == (1,)
        assert client.topic_id("orders") == b1.topic_ids["orders"]


@trio_test
async def test_client_partial_refresh_merges_and_records_topic_errors():
    (b1,) = _cluster(1, {"a": {0: 1}, "b": {0: 1}})
    async with running(b1), KafkaClient(b1.address) as client:
        await client.refresh_metadata()
        del b1.topics["a"]
        b1.topics["b"] = {0: 1, 1: 1}
        md = await client.refresh_metadata(["a", "b"])
        assert set(md.topics) == {"b"} and set(md.topics["b"].partitions) == {0, 1}
        assert md.topic_errors == {"a": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        with pytest.raises(KafkaError) as info:
            client.leader_for("a", 0)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and info.value.retriable
        md = await client.refresh_metadata([])  # brokers only: topics kept
        assert set(md.topics) == {"b"}


@trio_test
async def test_client_leader_for_without_a_leader_raises_leader_not_available():
    (b1,) = _cluster(1, {"t": {0: -1}})
    async with running(b1), KafkaClient(b1.address) as client:
        with pytest.raises(KafkaError) as info:
            await client.find_leader("t", 0)
        assert info.value.code == ErrorCode.LEADER_NOT_AVAILABLE


@trio_test
async def test_client_request_routes_to_broker_id_controller_and_any():
    b1, b2 = _cluster(2)
    async with running(b1, b2), KafkaClient(b1.address) as client:
        await client.request(2, m.MetadataRequest(topics=[]))
        assert len(b2.requests_for(3)) == 1
        await client.request("controller", m.MetadataRequest(topics=[]))  # node 2
        assert len(b2.requests_for(3)) == 2
        assert len(b2.connections) == 1  # pooled
        await client.request("any", m.MetadataRequest(topics=[]))
        assert len(b1.connections) + len(b2.connections) == 2  # "any" reuses an open one
        with pytest.raises(KafkaError) as info:
            await client.request(7, m.MetadataRequest(topics=[]))
        assert info.value.code == ErrorCode.BROKER_NOT_AVAILABLE


@trio_test
async def test_client_concurrent_callers_share_one_connect():
    b1, b2 = _cluster(2)
    async with running(b1, b2), KafkaClient(b1.address) as client:
        await client.refresh_metadata()
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(client.request, 2, m.MetadataRequest(topics=[]))
        assert len(b2.connections) == 1 and len(b2.requests_for(3)) == 20


@trio_test
async def test_client_any_skips_an_unreachable_bootstrap_server():
    (b1,) = _cluster(1)
    dead = f"127.0.0.1:{free_port()}"
    async with running(b1), KafkaClient(f"{dead},{b1.address}") as client:
        md = await client.refresh_metadata()
        assert list(md.brokers) == [1]


@trio_test
async def test_client_reconnects_after_the_broker_drops_the_connection():
    async def drop_second(broker, conn, req):
        if conn.index == 0 and conn.handled == 2:  # ApiVersions, Metadata, then drop
            raise Drop
        return broker.metadata_response(req)

    (b1,) = _cluster(1)
    b1.handlers[3] = drop_second
    async with running(b1), KafkaClient(b1.address, reconnect_backoff=0.01) as client:
        await client.refresh_metadata()
        with pytest.raises(ConnectionLost):
            await client.refresh_metadata()
        assert client.connected() == []
        await client.refresh_metadata()  # a new connection
        assert len(b1.connections) == 2
        assert client.connected() == [("127.0.0.1", b1.port)]


@trio_test
async def test_client_reconnects_to_a_restarted_broker():
    (b1,) = _cluster(1)
    async with running(b1):
        client = KafkaClient(b1.address, reconnect_backoff=0.01, retry_backoff=0.01)
        await client.refresh_metadata()
    # the broker is gone (its connections closed); then it comes back on the same port
    with pytest.raises((ConnectionLost, ConnectionFailed)):
        await client.refresh_metadata()
    async with running(b1):
        md = await client.retry(client.refresh_metadata)
        assert list(md.brokers) == [1] and len(b1.connections) == 2
    await client.aclose()


# Trio's mock clock: the backoffs are exact, however loaded the machine. The connection
# attempts are real (refused on loopback at once); were the clock to jump while one is in
# flight, it could only make the measured waits longer, which the first check allows.
@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_client_failed_connect_backs_off_before_the_next_attempt():
    port = free_port()
    client = KafkaClient(
        f"127.0.0.1:{port}", reconnect_backoff=0.2, reconnect_backoff_max=1, rng=_NoJitter()
    )
    async with client:
        with pytest.raises(ConnectionFailed):
            await client.connection("any")
        start = trio.current_time()
        with pytest.raises(ConnectionFailed):
            await client.connection("any")
        assert trio.current_time() - start >= 0.2  # waited out the first backoff
        (endpoint,) = client._endpoints.values()
        failures = endpoint.failures
        assert failures == 2
        start = trio.current_time()
        with trio.move_on_after(0.3):  # the second backoff is 0.4 s: the caller's deadline wins
            await client.connection("any")
        assert trio.current_time() - start == pytest.approx(0.3)
        assert endpoint.failures == failures  # cancelled in the backoff, before any attempt


@trio_test
async def test_client_retry_refreshes_metadata_and_follows_the_moved_leader():
    topics = {"t": {0: 1}}
    b1, b2 = _cluster(2, topics)

    async def list_offsets(broker, conn, req):
        leader = broker.topics["t"][0]
        code = 0 if leader == broker.node_id else ErrorCode.NOT_LEADER_OR_FOLLOWER
        R = m.ListOffsetsResponse
        return R(
            topics=[
                R.ListOffsetsTopicResponse(
                    name="t",
                    partitions=[
                        R.ListOffsetsPartitionResponse(
                            partition_index=0, error_code=code, offset=42
                        )
                    ],
                )
            ]
        )

    for b in (b1, b2):
        b.handlers[2] = list_offsets
    body = m.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(
                name="t", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(timestamp=-1)]
            )
        ],
    )
    async with running(b1, b2), KafkaClient(b1.address, retry_backoff=0.01) as client:
        await client.refresh_metadata()
        b1.topics["t"] = b2.topics["t"] = {0: 2}  # the leader moves; the client does not know

        async def op():
            leader = client.leader_for("t", 0)
            return raise_for_error(await client.request(leader, body))

        response = await client.retry(op, refresh_topics=["t"])
        assert response.topics[0].partitions[0].offset == 42
        assert client.leader_for("t", 0) == 2
        assert len(b1.requests_for(2)) == 1 and len(b2.requests_for(2)) == 1


@trio_test
async def test_client_retry_gives_up_on_non_retriable_errors_and_after_attempts():
    (b1,) = _cluster(1)
    calls = []

    async def fails(code):
        calls.append(code)
        raise KafkaError(code)

    async with running(b1), KafkaClient(b1.address, retry_backoff=0.001) as client:
        with pytest.raises(KafkaError) as info:
            await client.retry(lambda: fails(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and len(calls) == 1
        calls.clear()
        with pytest.raises(KafkaError):
            await client.retry(lambda: fails(ErrorCode.NOT_ENOUGH_REPLICAS), attempts=3)
        assert len(calls) == 3


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_client_retry_backs_off_exponentially_up_to_the_cap():
    client = KafkaClient("127.0.0.1:1", retry_backoff=0.1, retry_backoff_max=0.3, rng=_NoJitter())
    times = []

    async def op():
        times.append(trio.current_time())
        if len(times) < 5:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)  # retriable, metadata not stale
        return "ok"

    assert await client.retry(op, attempts=5) == "ok"
    gaps = [round(b - a, 6) for a, b in zip(times, times[1:])]
    assert gaps == [0.1, 0.2, 0.3, 0.3]


@trio_test
async def test_client_closed_refuses_requests_and_fails_in_flight():
    async def never(broker, conn, req):
        await trio.sleep_forever()

    (b1,) = _cluster(1)
    async with running(b1):
        client = KafkaClient(b1.address)
        await client.refresh_metadata()
        b1.handlers[3] = never
        errors = []

        async def one():
            try:
                await client.refresh_metadata()
            except ConnectionLost as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            await trio.sleep(0.05)
            await client.aclose()
        assert len(errors) == 1
        with pytest.raises(ClientError, match="closed"):
            await client.refresh_metadata()


def test_first_error_walks_nested_responses_and_names_the_place():
    R = m.ProduceResponse
    resp = R(
        responses=[
            R.TopicProduceResponse(
                name="orders",
                partition_responses=[
                    R.PartitionProduceResponse(index=0),
                    R.PartitionProduceResponse(index=3, error_code=6),
                ],
            )
        ]
    )
    err = first_error(resp)
    assert err.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "responses[orders].partition_responses[3]" in str(err)
    assert first_error(resp, ignore=[6]) is None
    assert first_error(m.ProduceResponse()) is None
    assert first_error(m.MetadataResponse(brokers=[], topics=[])) is None


def test_cluster_metadata_topic_ids_by_id():
    R = m.MetadataResponse
    tid = uuid.uuid4()
    from kcore.client import ClusterMetadata

    md = ClusterMetadata.from_response(
        R(topics=[R.MetadataResponseTopic(name="x", topic_id=tid)], controller_id=-1)
    )
    assert md.topic_by_id(tid).name == "x" and md.controller_id == -1
