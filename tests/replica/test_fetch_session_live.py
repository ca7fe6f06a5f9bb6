"""Incremental fetch sessions (KIP-227) between the fetcher framework and kcore's broker over
real sockets: a fetcher's endpoint (the mirror's, a consumer fetch; the follower's endpoint
shares the same session handler and wire code) against an embedded kcore, which holds the
other side of the session (``kcore/server/fetch_session.py``)."""

from __future__ import annotations

import pytest
import trio

from kcore.client import KafkaClient
from kcore.client import admin as kadmin
from kcore.mirror.remote_endpoint import RemoteLeaderEndpoint
from kcore.record.records import RecordBatchBuilder
from kcore.replica.fetch_state import AppendRecords, FetcherConfig, FetcherCore
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

TOPIC = "sessions"
PARTITIONS = 3


@pytest.fixture(scope="module")
def leader():
    with EmbeddedCluster(config={"offsets.topic.num.partitions": "1"}) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS)
        yield c


async def produce(client, partition: int, count: int) -> None:
    builder = RecordBatchBuilder(base_offset=0)
    for i in range(count):
        builder.append(0, None, b"v%d" % i)
    await kadmin.produce(client, {(TOPIC, partition): builder.build()}, acks=1)


class Fetcher:
    """The fetch state core and one endpoint, driven a fetch at a time (the task's loop)."""

    def __init__(self, client, leader_id: int, topic_id, epochs) -> None:
        self.endpoint = RemoteLeaderEndpoint(client, leader_id)
        self.core = FetcherCore(FetcherConfig(max_wait_ms=50, isolation_level=1))
        for p in range(PARTITIONS):
            self.core.add_partition((TOPIC, p), topic_id, 0, epochs[p], None)

    async def fetch(self) -> dict:
        plan = self.core.build_fetch(trio.current_time())
        responses = await self.endpoint.fetch(plan)
        for out in self.core.handle_response(plan, responses, trio.current_time()):
            assert isinstance(out, AppendRecords), out
            self.core.appended(out.tp, out.high_watermark, None)  # as if appended up to it
        return {tp: r.high_watermark for tp, r in responses.items()}


def test_fetch_session_full_then_incremental_then_full_again_after_session_errors(leader):
    sessions = leader.broker.fetch_manager.cache

    async def main():
        async with KafkaClient(leader.bootstrap_servers) as client:
            await client.refresh_metadata([TOPIC])
            meta = client.metadata
            topic_id = client.topic_id(TOPIC)
            epochs = [meta.partition(TOPIC, p).leader_epoch for p in range(PARTITIONS)]
            await produce(client, 0, 2)
            f = Fetcher(client, meta.leader_for(TOPIC, 0), topic_id, epochs)
            handler = f.endpoint.session

            # Full: every partition answered; the broker opens a session of three.
            answered = await f.fetch()
            assert answered == {(TOPIC, 0): 2, (TOPIC, 1): 0, (TOPIC, 2): 0}
            first = handler.session_id
            assert first != 0 and sessions.get(first).size == PARTITIONS

            # Incremental: partition 0's new offset listed, nothing new anywhere: no answer.
            assert await f.fetch() == {}
            assert (handler.session_id, handler.epoch) == (first, 2)
            assert handler.incremental_fetches == 1

            # Records on partition 2 only: the answer carries partition 2 only.
            await produce(client, 2, 3)
            with trio.fail_after(10):
                while not (answered := await f.fetch()):
                    pass
            assert answered == {(TOPIC, 2): 3}

            # The broker lost the session (evicted): FETCH_SESSION_ID_NOT_FOUND answers
            # nothing, and the next fetch is a full one opening a new session.
            sessions.remove(first)
            assert await f.fetch() == {}
            assert (handler.session_id, handler.epoch) == (0, 0)
            full = handler.full_fetches
            assert set(await f.fetch()) == {(TOPIC, p) for p in range(PARTITIONS)}
            assert handler.full_fetches == full + 1
            second = handler.session_id
            assert second not in (0, first) and sessions.get(second).size == PARTITIONS

            # A request at the wrong epoch (as after a lost answer the broker did see):
            # INVALID_FETCH_SESSION_EPOCH, then a full fetch that closes the session it names.
            handler.epoch += 5
            assert await f.fetch() == {}
            assert set(await f.fetch()) == {(TOPIC, p) for p in range(PARTITIONS)}
            assert sessions.get(second) is None and handler.session_id not in (0, second)

    trio.run(main)
