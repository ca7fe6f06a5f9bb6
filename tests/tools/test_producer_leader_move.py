"""The producer follows a partition leader that moved: NOT_LEADER_OR_FOLLOWER from the old
leader, a metadata refresh, and the same batch sent to the new one (two fake brokers)."""

from kcore.client import KafkaClient
from kcore.client.client_configs import producer_config
from kcore.client.producer import Producer
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from tests.client.fake_broker import FakeBroker, running, trio_test


def _answer(req, code: int, base_offset: int = -1):
    R = m.ProduceResponse
    return R(
        responses=[
            R.TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    R.PartitionProduceResponse(
                        index=p.index, error_code=code, base_offset=base_offset
                    )
                    for p in t.partition_data
                ],
            )
            for t in req.body.topic_data
        ]
    )


@trio_test
async def test_producer_follows_a_moved_leader_and_fails_after_its_retries():
    topics = {"t": {0: 1}}
    old, new = FakeBroker(node_id=1, topics=topics), FakeBroker(node_id=2, topics=topics)
    for b in (old, new):
        b.cluster = [old, new]

    async def moved(broker, conn, req):
        topics["t"][0] = 2  # the next Metadata names broker 2
        return _answer(req, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    async def accept(broker, conn, req):
        return _answer(req, 0, base_offset=41)

    old.handlers[0], new.handlers[0] = moved, accept
    async with running(old, new), KafkaClient(old.address, retry_backoff=0.01) as client:
        producer = Producer(client, producer_config({"retry.backoff.ms": "10"}))
        deliveries = [await producer.send("t", b"v%d" % i, partition=0) for i in range(2)]
        await producer.flush()
        assert [(d.error, d.offset) for d in deliveries] == [(None, 41), (None, 42)]
        sent_old, sent_new = old.requests_for(0), new.requests_for(0)
        assert len(sent_old) == 1 and len(sent_new) == 1
        assert bytes(sent_old[0].body.topic_data[0].partition_data[0].records) == bytes(
            sent_new[0].body.topic_data[0].partition_data[0].records
        )

        async def refuse(broker, conn, req):
            return _answer(req, ErrorCode.NOT_LEADER_OR_FOLLOWER)

        new.handlers[0] = refuse
        producer = Producer(client, producer_config({"retries": "2", "retry.backoff.ms": "1"}))
        failed = await producer.send("t", b"x", partition=0)
        await producer.flush()
        assert failed.done and failed.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert len(new.requests_for(0)) == 1 + 3  # the first try and 2 retries
