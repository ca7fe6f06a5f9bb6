"""Fetch semantics over the wire against an embedded broker, with raw requests (the test picks
versions and fields): long polling, fetch sessions, diverging epochs and isolation levels."""

from __future__ import annotations

import time

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import RecordBatch, RecordBatchBuilder, iter_batches
from kcore.record.control import build_end_txn_marker_batch
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(90)

F = m.FetchRequest
P = m.ProduceRequest
FETCH_V = 12  # flexible, topic names, last_fetched_epoch, diverging epochs


def _now_ms() -> int:
    return int(time.time() * 1000)


def _batch(n: int, *, base_offset=0, epoch=-1, prefix=b"v", **kw) -> bytearray:
    builder = RecordBatchBuilder(base_offset, partition_leader_epoch=epoch, **kw)
    for i in range(n):
        builder.append(_now_ms(), key=b"%d" % i, value=prefix + b"%d" % i)
    return builder.build()


async def _produce(conn, topic: str, partition: int, records) -> int:
    r = await conn.request(
        P(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                P.TopicProduceData(
                    name=topic,
                    partition_data=[P.PartitionProduceData(index=partition, records=records)],
                )
            ],
        ),
        9,
    )
    part = r.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def _fetch(
    partitions,
    *,
    max_wait_ms=0,
    min_bytes=0,
    session_id=0,
    session_epoch=-1,
    isolation_level=0,
    replica_id=-1,
    forgotten=(),
) -> F:
    """``partitions``: [(topic, partition, fetch_offset)] or with a 4th item, last_fetched_epoch."""
    topics: dict[str, list] = {}
    for topic, index, offset, *rest in partitions:
        topics.setdefault(topic, []).append(
            F.FetchPartition(
                partition=index,
                fetch_offset=offset,
                last_fetched_epoch=rest[0] if rest else -1,
                partition_max_bytes=1 << 20,
            )
        )
    return F(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 24,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[F.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[F.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten],
    )


def _parts(response) -> dict:
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def _values(records) -> list[bytes]:
    out = []
    for batch in iter_batches(bytes(records or b"")):
        if batch.is_control:
            continue
        out += [bytes(r.value) for r in batch.records()]
    return out


def _run(body, config=None):
    async def main():
        with trio.fail_after(60):
            async with EmbeddedCluster(config=config) as c:
                conn = await BrokerConnection.connect("127.0.0.1", c.port)
                async with conn:
                    await body(c, conn)

    trio.run(main)


# -- (a) long polling -----------------------------------------------------------------------


def test_long_poll_returns_when_a_produce_arrives():
    async def body(c, conn):
        await c.acreate_topic("lp")
        producer = await BrokerConnection.connect("127.0.0.1", c.port)
        result = {}

        async def poll():
            # max_wait far beyond the test's deadline (60 s): an answer at all is the produce's.
            response = await conn.request(
                _fetch([("lp", 0, 0)], max_wait_ms=600_000, min_bytes=1), FETCH_V, timeout=600
            )
            result["response"] = response

        async with producer, trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(0.3)  # the fetch is parked in the purgatory by now
            assert "response" not in result
            await _produce(producer, "lp", 0, _batch(3, prefix=b"long-poll-"))
        part = _parts(result["response"])[("lp", 0)]
        assert part.error_code == 0 and part.high_watermark == 3
        assert _values(part.records) == [b"long-poll-0", b"long-poll-1", b"long-poll-2"]

    _run(body)


def test_long_poll_without_data_waits_max_wait():
    async def body(c, conn):
        await c.acreate_topic("lp-idle")
        start = trio.current_time()
        response = await conn.request(
            _fetch([("lp-idle", 0, 0)], max_wait_ms=1000, min_bytes=1), FETCH_V, timeout=20
        )
        # At least max_wait (a loaded machine only makes it longer); that it answered at all
        # before the 20 s request timeout shows the purgatory let it go.
        assert trio.current_time() - start >= 0.9
        part = _parts(response)[("lp-idle", 0)]
        assert part.error_code == 0 and _values(part.records) == []

    _run(body)


# -- (b) fetch sessions ---------------------------------------------------------------------


def test_fetch_session_incremental_lifecycle():
    async def body(c, conn):
        await c.acreate_topic("sess", partitions=2)
        producer = await BrokerConnection.connect("127.0.0.1", c.port)
        async with producer:
            full = await conn.request(
                _fetch([("sess", 0, 0), ("sess", 1, 0)], session_id=0, session_epoch=0), FETCH_V
            )
            assert full.error_code == 0 and full.session_id > 0
            assert set(_parts(full)) == {("sess", 0), ("sess", 1)}
            sid = full.session_id

            epoch = 1
            for _ in range(50):  # nothing changes: incremental answers are empty
                r = await conn.request(_fetch([], session_id=sid, session_epoch=epoch), FETCH_V)
                assert r.error_code == 0 and r.session_id == sid
                assert _parts(r) == {}, f"epoch {epoch}: unchanged partitions were sent"
                epoch += 1

            await _produce(producer, "sess", 1, _batch(2, prefix=b"s"))
            r = await conn.request(_fetch([], session_id=sid, session_epoch=epoch), FETCH_V)
            epoch += 1
            assert r.error_code == 0
            parts = _parts(r)
            assert set(parts) == {("sess", 1)}, "only the partition with new data is sent"
            assert _values(parts[("sess", 1)].records) == [b"s0", b"s1"]
            assert parts[("sess", 1)].high_watermark == 2

            # move the session's fetch offset past the data: quiet again
            r = await conn.request(
                _fetch([("sess", 1, 2)], session_id=sid, session_epoch=epoch), FETCH_V
            )
            epoch += 1
            assert r.error_code == 0 and _parts(r) == {}

            # a wrong epoch is refused, and the session is still there afterwards
            r = await conn.request(_fetch([], session_id=sid, session_epoch=epoch + 5), FETCH_V)
            assert r.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            assert _parts(r) == {}
            r = await conn.request(_fetch([], session_id=sid, session_epoch=epoch), FETCH_V)
            epoch += 1
            assert r.error_code == 0 and r.session_id == sid

            # close it (epoch -1): a sessionless full fetch, and the id is gone
            r = await conn.request(
                _fetch([("sess", 0, 0), ("sess", 1, 0)], session_id=sid, session_epoch=-1),
                FETCH_V,
            )
            assert r.error_code == 0 and r.session_id == 0
            assert set(_parts(r)) == {("sess", 0), ("sess", 1)}
            r = await conn.request(_fetch([], session_id=sid, session_epoch=epoch), FETCH_V)
            assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    _run(body)


# -- (c) diverging epochs -------------------------------------------------------------------


def test_fetch_with_a_diverging_last_fetched_epoch():
    async def body(c, conn):
        await c.acreate_topic("div")
        partition = c.broker.replica_manager.partitions[("div", 0)]
        plog = partition.log
        # epoch 1 holds offsets 0-4, epoch 3 offsets 5-9: epoch 2 never existed here
        plog.append_as_follower(_batch(5, base_offset=0, epoch=1), now_ms=_now_ms())
        plog.append_as_follower(_batch(5, base_offset=5, epoch=3), now_ms=_now_ms())
        partition.maybe_advance_high_watermark()
        assert plog.log_end_offset == 10
        assert plog.end_offset_for_epoch(2) == (1, 5)

        # the follower's last epoch (2) is unknown: truncate to the end of epoch 1, offset 5
        r = await conn.request(_fetch([("div", 0, 8, 2)]), FETCH_V)
        part = _parts(r)[("div", 0)]
        assert part.error_code == 0
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (1, 5)
        assert _values(part.records) == []

        # the follower is ahead of epoch 3's end: truncate to offset 10
        r = await conn.request(_fetch([("div", 0, 12, 3)]), FETCH_V)
        part = _parts(r)[("div", 0)]
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (3, 10)

        # consistent history: records, no divergence
        r = await conn.request(_fetch([("div", 0, 5, 1)]), FETCH_V)
        part = _parts(r)[("div", 0)]
        assert part.error_code == 0 and part.diverging_epoch.epoch == -1
        assert _values(part.records) == [b"v%d" % i for i in range(5)]
        assert [RecordBatch(bytes(part.records)).partition_leader_epoch] == [3]

        # before v12 there is no last_fetched_epoch: plain records (the whole batch holding
        # offset 8, as Kafka sends them)
        r = await conn.request(_fetch([("div", 0, 8)]), 11)
        assert _values(_parts(r)[("div", 0)].records) == [b"v%d" % i for i in range(5)]

    _run(body)


# -- (d) isolation levels -------------------------------------------------------------------


def test_read_committed_stops_at_the_last_stable_offset():
    async def body(c, conn):
        await c.acreate_topic("txn")
        rm = c.broker.replica_manager
        partition = rm.partitions[("txn", 0)]
        plog = partition.log
        pid, pepoch = 4242, 0

        def append(records):
            plog.append_as_follower(records, now_ms=_now_ms())
            partition.maybe_advance_high_watermark()
            rm.notify(("txn", 0))

        append(_batch(2, base_offset=0, prefix=b"plain"))  # offsets 0-1
        append(
            _batch(
                3,
                base_offset=2,
                prefix=b"txn",
                producer_id=pid,
                producer_epoch=pepoch,
                base_sequence=0,
                is_transactional=True,
            )
        )  # offsets 2-4, open transaction
        append(_batch(1, base_offset=5, prefix=b"after"))  # offset 5
        assert plog.high_watermark == 6 and plog.last_stable_offset == 2

        uncommitted = _parts(await conn.request(_fetch([("txn", 0, 0)]), FETCH_V))[("txn", 0)]
        committed = _parts(await conn.request(_fetch([("txn", 0, 0)], isolation_level=1), FETCH_V))[
            ("txn", 0)
        ]
        assert uncommitted.high_watermark == committed.high_watermark == 6
        assert uncommitted.last_stable_offset == committed.last_stable_offset == 2
        assert _values(uncommitted.records) == [
            b"plain0",
            b"plain1",
            b"txn0",
            b"txn1",
            b"txn2",
            b"after0",
        ]
        assert _values(committed.records) == [b"plain0", b"plain1"]

        # read_committed at the LSO: nothing, even with a long poll it waits then answers empty
        r = await conn.request(
            _fetch([("txn", 0, 2)], isolation_level=1, max_wait_ms=200, min_bytes=1), FETCH_V
        )
        assert _values(_parts(r)[("txn", 0)].records) == []

        # abort the transaction: the LSO moves to the end, the aborted range is reported
        append(
            build_end_txn_marker_batch(pid, pepoch, False, 0, base_offset=6, timestamp=_now_ms())
        )
        assert plog.last_stable_offset == plog.high_watermark == 7
        committed = _parts(await conn.request(_fetch([("txn", 0, 0)], isolation_level=1), FETCH_V))[
            ("txn", 0)
        ]
        assert committed.last_stable_offset == 7
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
            (pid, 2)
        ]
        # the bytes are all there; the consumer drops the aborted ones using that list
        assert len(_values(committed.records)) == 6
        uncommitted = _parts(await conn.request(_fetch([("txn", 0, 0)]), FETCH_V))[("txn", 0)]
        # Kafka sends null here; kcore sends an empty list (equivalent for clients)
        assert not uncommitted.aborted_transactions

    _run(body)
