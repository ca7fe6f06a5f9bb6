"""The mirror fetcher between two real kcore clusters (spec §4.3; D-11, D-16, D-17, D-19).

confluent-kafka writes to the source — idempotent producers with every codec, keys, headers,
null and empty values, transactions committed and aborted, one left open — and the mirror
fetcher manager of the destination (partitions added directly: the coordinator and state
machine are other pieces of #13) copies them. Then:

* the destination partitions are identical to the source's batch for batch over a raw Fetch:
  the same bytes except the CRC and the producer id, which is ``-(pid + 2)`` (D-17), at the
  same offsets, with the same topic id (created through CreateTopics ``MirrorInfo``);
* the destination stops at the source's LSO (READ_COMMITTED, D-19): the open transaction's
  records are not there, and a read_committed consumer reads the same on both sides;
* the destination's producer state knows the rewritten ids (DescribeProducers-level state);
* a source leader epoch bump mid-stream stops the partition with the D-11 signal, and it
  resumes once the destination's epoch is bumped (BumpLeaderEpochs);
* a destination restart resumes with no gap and no duplicate.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record.batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    PRODUCER_ID_POS,
    RecordBatch,
    mirror_producer_id,
)
from kcore.testing import EmbeddedCluster
from tests.mirror.clusters import (
    CLUSTER_CONFIG,
    create_mirror_topic,
    partition,
    raw_batches,
    topic_id,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
MIRROR = "dr-mirror"


@pytest.fixture(scope="module")
def source():
    with EmbeddedCluster(config=CLUSTER_CONFIG) as c:
        yield c


@pytest.fixture(scope="module")
def destination():
    with EmbeddedCluster(config=CLUSTER_CONFIG) as c:
        yield c


class Signals:
    """The MirrorFetchListener of the tests: what the fetcher told the state machine."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fenced: list[tuple[tuple[str, int], int]] = []
        self.failed: list[tuple[tuple[str, int], str]] = []

    def on_epoch_fencing(self, tp, epoch) -> None:
        with self.lock:
            self.fenced.append((tp, epoch))

    def on_partition_failed(self, tp, reason) -> None:
        with self.lock:
            self.failed.append((tp, reason))


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _start_fetcher(destination, source, signals: Signals, mirror: str = MIRROR):
    async def start():
        return await destination.broker.start_mirror_fetcher(
            mirror, source.bootstrap_servers, listener=signals
        )

    return destination._call(start)


def _add_partitions(destination, manager, topic: str) -> None:
    async def add():
        await manager.add_partitions([(topic, p) for p in range(PARTITIONS)])

    destination._call(add)


def _start_mirroring(source, destination, topic: str, signals: Signals | None = None):
    """The destination's mirror fetcher started, with every partition of ``topic`` added."""
    signals = signals or Signals()
    manager = _start_fetcher(destination, source, signals)
    _add_partitions(destination, manager, topic)
    return manager, signals


def _stop_fetcher(destination, mirror: str = MIRROR) -> None:
    async def stop():
        destination.broker.stop_mirror_fetcher(mirror)

    destination._call(stop)


def _write_source(source, topic: str) -> Producer:
    """Every kind of write; returns the producer whose transaction is left open."""
    for codec in CODECS:
        producer = Producer(
            {
                "bootstrap.servers": source.bootstrap_servers,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 5,
            }
        )
        for i in range(40):
            p = i % PARTITIONS
            value = None if i % 10 == 3 else b"" if i % 10 == 4 else f"{codec}-{i}".encode() * 3
            key = None if i % 7 == 0 else f"key-{i}".encode()
            headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0 else None
            producer.produce(topic, value=value, key=key, headers=headers, partition=p)
        assert producer.flush(30) == 0
    for outcome in ("commit", "abort"):
        txn = Producer(
            {"bootstrap.servers": source.bootstrap_servers, "transactional.id": _name(outcome)}
        )
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(10):
            txn.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % PARTITIONS)
        txn.flush(30)
        if outcome == "commit":
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
    open_txn = Producer(
        {"bootstrap.servers": source.bootstrap_servers, "transactional.id": _name("open")}
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(5):
        open_txn.produce(topic, value=f"open-{i}".encode(), partition=1)
    open_txn.flush(30)
    return open_txn


def _read_committed(cluster, topic: str) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": _name("reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "the consumer did not reach the end of every partition"
    return sorted(out)


def _assert_identical_batches(
    source, destination, topic: str, index: int, end: int, start: int = 0
) -> set:
    """Batch for batch over a raw Fetch: same bytes but CRC and producer id; returns the
    source producer ids the batches carried."""
    src = raw_batches(source, topic, index, start, end)
    dst = raw_batches(destination, topic, index, start, end)
    assert len(src) == len(dst) and src, (len(src), len(dst))
    pids = set()
    for a, b in zip(src, dst, strict=True):
        sa, sb = RecordBatch(a), RecordBatch(b)
        assert (sa.base_offset, sa.last_offset) == (sb.base_offset, sb.last_offset)
        assert sa.partition_leader_epoch == sb.partition_leader_epoch
        assert sb.is_valid_crc()
        # Everything outside the CRC and the producer id is the same bytes.
        assert a[:CRC_POS] == b[:CRC_POS]
        assert a[ATTRIBUTES_POS:PRODUCER_ID_POS] == b[ATTRIBUTES_POS:PRODUCER_ID_POS]
        assert a[PRODUCER_ID_POS + 8 :] == b[PRODUCER_ID_POS + 8 :]
        assert sb.producer_id == mirror_producer_id(sa.producer_id)
        if sa.producer_id == -1:  # no producer: nothing to rewrite
            assert a == b
        else:  # a source's own id (>= 0) or one it mirrored (<= -2, failback): rewritten
            if sa.producer_id >= 0:
                pids.add(sa.producer_id)
            assert a[CRC_POS:ATTRIBUTES_POS] != b[CRC_POS:ATTRIBUTES_POS]
    return pids


def test_mirror_fetcher_copies_every_kind_of_write_batch_for_batch(source, destination):
    topic = _name("orders")
    source.create_topic(topic, partitions=PARTITIONS)
    open_txn = _write_source(source, topic)
    create_mirror_topic(destination, topic, topic_id(source, topic), PARTITIONS, MIRROR)
    assert topic_id(destination, topic) == topic_id(source, topic)
    manager, signals = _start_mirroring(source, destination, topic)
    try:
        # D-19: the destination reaches the source's LSO, never beyond it.
        ends = {}
        for p in range(PARTITIONS):
            src_p = partition(source, topic, p)
            wait_until(
                lambda p=p, s=src_p: (
                    partition(destination, topic, p).log_end_offset == s.last_stable_offset
                ),
                what=f"partition {p} to reach the source LSO",
            )
            ends[p] = src_p.last_stable_offset
        assert (
            partition(source, topic, 1).last_stable_offset
            < partition(source, topic, 1).high_watermark
        )  # the open transaction
        time.sleep(0.3)  # and it stays there while the transaction is open
        assert partition(destination, topic, 1).log_end_offset == ends[1]

        for p in range(PARTITIONS):
            mirrored_pids = _assert_identical_batches(source, destination, topic, p, ends[p])
            # Idempotent and transactional producers of every codec (not the open one).
            assert len(mirrored_pids) == len(CODECS) + 2
            dst_p = partition(destination, topic, p)
            assert dst_p.high_watermark == dst_p.log_end_offset  # HW moved as for any append
            # M-30: the destination's producer state learnt the rewritten ids.
            dst_ids = set(dst_p.producer_state.producers)
            assert dst_ids == {mirror_producer_id(pid) for pid in mirrored_pids}
            assert dst_p.last_stable_offset == dst_p.high_watermark  # no open txn mirrored
        assert _read_committed(destination, topic) == _read_committed(source, topic)
        assert signals.fenced == [] and signals.failed == []
        # What DescribeClusterMirrors reports: the source's HW and LSO (D-19), the local end.
        for p in range(PARTITIONS):
            src_p = partition(source, topic, p)
            stats = destination.broker.mirror_stats.partition_stats(MIRROR, topic, p)
            assert (stats.source_offset, stats.source_lso) == (
                src_p.high_watermark,
                src_p.last_stable_offset,
            )
            assert stats.destination_offset == ends[p] and stats.last_fetch_age_ms >= 0
        assert destination.broker.mirror_stats.partition_stats(MIRROR, topic, 1).lag > 0
    finally:
        open_txn.abort_transaction(30)
        _stop_fetcher(destination)


def _bump_epoch(cluster, topic: str, index: int, min_epoch: int = -1) -> int:
    B = m.BumpLeaderEpochsRequest
    request = B(
        topics=[
            B.TopicState(
                topic_id=topic_id(cluster, topic),
                partitions=[B.LeaderEpochState(partition_index=index, min_leader_epoch=min_epoch)],
            )
        ]
    )

    async def bump():
        return await cluster.broker.controller_call(lambda c, now: c.bump_leader_epochs(request))

    response = cluster._call(bump)
    assert response.error_code == 0 and response.topics[0].partitions[0].error_code == 0
    wait_until(
        lambda: partition(cluster, topic, index).leader_epoch >= max(min_epoch, 1),
        what="the bumped epoch",
    )
    return partition(cluster, topic, index).leader_epoch


def _produce(cluster, topic: str, values, index: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 2})
    for v in values:
        producer.produce(topic, value=v, partition=index)
    assert producer.flush(30) == 0


def _mirrored_topic(source, destination, prefix: str, values) -> str:
    """A source topic holding ``values`` in partition 0 and its empty mirror topic."""
    topic = _name(prefix)
    source.create_topic(topic, partitions=PARTITIONS)
    _produce(source, topic, values)
    create_mirror_topic(destination, topic, topic_id(source, topic), PARTITIONS, MIRROR)
    return topic


def test_mirror_fetcher_source_epoch_bump_fences_then_resumes(source, destination):
    topic = _mirrored_topic(source, destination, "fenced", [b"before-%d" % i for i in range(20)])
    manager, signals = _start_mirroring(source, destination, topic)
    try:
        wait_until(lambda: partition(destination, topic, 0).log_end_offset == 20)
        new_epoch = _bump_epoch(source, topic, 0)
        assert new_epoch > partition(destination, topic, 0).leader_epoch
        _produce(source, topic, [b"after-%d" % i for i in range(10)])
        wait_until(lambda: signals.fenced, what="the D-11 signal")
        assert signals.fenced == [((topic, 0), new_epoch)]
        time.sleep(0.3)  # fenced: nothing of the new epoch is appended meanwhile
        assert partition(destination, topic, 0).log_end_offset == 20
        # What EPOCH_FENCING does: bump the destination's epoch to at least the source's.
        assert _bump_epoch(destination, topic, 0, min_epoch=new_epoch) >= new_epoch

        async def resume():
            manager.resume_partition((topic, 0))

        destination._call(resume)
        wait_until(lambda: partition(destination, topic, 0).log_end_offset == 30)
        _assert_identical_batches(source, destination, topic, 0, 30)
        assert partition(destination, topic, 0).latest_epoch == new_epoch
    finally:
        _stop_fetcher(destination)


def test_mirror_fetcher_destination_restart_resumes_with_no_gap_and_no_duplicate(
    source, destination
):
    topic = _mirrored_topic(source, destination, "restart", [b"first-%d" % i for i in range(50)])
    manager = _start_fetcher(destination, source, Signals())
    _add_partitions(destination, manager, topic)
    wait_until(lambda: partition(destination, topic, 0).log_end_offset == 50)
    # The source moves on while the destination is down.
    destination.restart()
    _produce(source, topic, [b"second-%d" % i for i in range(50)])
    assert partition(destination, topic, 0).log_end_offset == 50
    manager = _start_fetcher(destination, source, Signals())
    try:
        _add_partitions(destination, manager, topic)
        wait_until(lambda: partition(destination, topic, 0).log_end_offset == 100)
        _assert_identical_batches(source, destination, topic, 0, 100)
        values = [v for (_, _, _, v, _) in _read_committed(destination, topic)]
        assert values == [b"first-%d" % i for i in range(50)] + [
            b"second-%d" % i for i in range(50)
        ]
    finally:
        _stop_fetcher(destination)


def _delete_records(cluster, topic: str, index: int, offset: int) -> None:
    async def delete():
        cluster.broker.replica_manager.delete_records(topic, index, offset, 0)

    cluster._call(delete)


def _inject(cluster, topic: str, index: int, end: int, epoch: int, start: int = 0) -> None:
    """Batches appended as the mirror appends them (a destination ahead of its source)."""
    from kcore.log.producer_state import AppendOrigin
    from kcore.record.records import RecordBatchBuilder

    async def inject():
        for offset in range(start, end):
            builder = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch)
            builder.append(1, None, b"local-only")
            cluster.broker.replica_manager.append_as_follower(
                (topic, index), builder.build(), now_ms=1, origin=AppendOrigin.MIRROR
            )

    cluster._call(inject)


def test_mirror_fetcher_below_the_source_log_start_restarts_there(source, destination):
    # D-16: retention (here DeleteRecords) removed what the destination has not copied.
    topic = _name("retention")
    source.create_topic(topic, partitions=PARTITIONS)
    _produce(source, topic, [b"gone-%d" % i for i in range(20)])
    _produce(source, topic, [b"kept-%d" % i for i in range(10)])
    _delete_records(source, topic, 0, 20)
    create_mirror_topic(destination, topic, topic_id(source, topic), PARTITIONS, MIRROR)
    manager, signals = _start_mirroring(source, destination, topic)
    try:
        wait_until(lambda: partition(destination, topic, 0).log_end_offset == 30)
        dst_p = partition(destination, topic, 0)
        assert dst_p.log_start_offset == 20  # the offsets stay the source's
        _assert_identical_batches(source, destination, topic, 0, 30, start=20)
        assert signals.failed == []
    finally:
        _stop_fetcher(destination)


def test_mirror_fetcher_diverging_epoch_truncates_the_destination(source, destination):
    # M-27: the destination holds epoch-0 batches the source lost (its next leader, at epoch
    # 1, wrote other records there). The source's diverging epoch (Fetch v12+
    # LastFetchedEpoch) truncates them; then D-11 fences epoch 1 until the destination's
    # epoch is bumped, and the copy goes on identical to the source.
    topic = _mirrored_topic(source, destination, "diverged", [b"source-%d" % i for i in range(3)])
    signals = Signals()
    manager = _start_fetcher(destination, source, signals)
    _add_partitions(destination, manager, topic)
    wait_until(lambda: partition(destination, topic, 0).log_end_offset == 3)
    _stop_fetcher(destination)
    _inject(destination, topic, 0, 8, epoch=0, start=3)  # what the old source leader lost
    new_epoch = _bump_epoch(source, topic, 0)
    _produce(source, topic, [b"new-leader-%d" % i for i in range(2)])
    manager = _start_fetcher(destination, source, signals)
    try:
        _add_partitions(destination, manager, topic)
        wait_until(lambda: signals.fenced, what="the truncation, then the fence")
        assert partition(destination, topic, 0).log_end_offset == 3  # truncated to epoch 0's end
        _bump_epoch(destination, topic, 0, min_epoch=new_epoch)

        async def resume():
            manager.resume_partition((topic, 0))

        destination._call(resume)
        wait_until(lambda: partition(destination, topic, 0).log_end_offset == 5)
        _assert_identical_batches(source, destination, topic, 0, 5)
    finally:
        _stop_fetcher(destination)


def test_mirror_fetcher_above_the_source_end_without_divergence_fails(source, destination):
    # D-16: no epoch to truncate by, the destination is ahead of the source: FAILED, with why.
    topic = _mirrored_topic(source, destination, "ahead", [b"source-%d" % i for i in range(2)])
    _inject(destination, topic, 0, 5, epoch=-1)
    manager, signals = _start_mirroring(source, destination, topic)
    try:
        wait_until(lambda: signals.failed, what="the failure")
        ((tp, reason),) = signals.failed
        assert tp == (topic, 0)
        assert "above the source's log end offset 2" in reason
        assert (topic, 0) not in manager.partitions  # it left the fetcher
        assert partition(destination, topic, 0).log_end_offset == 5  # nothing was removed
    finally:
        _stop_fetcher(destination)


def test_mirror_fetcher_add_refuses_only_the_partitions_it_cannot_fetch(source, destination):
    topic, gone = _name("kept"), _name("gone")
    source.create_topic(topic, partitions=PARTITIONS)
    create_mirror_topic(destination, topic, topic_id(source, topic), PARTITIONS, MIRROR)
    create_mirror_topic(destination, gone, uuid.uuid4(), 1, MIRROR)  # not on the source
    manager = _start_fetcher(destination, source, Signals())
    skipped = (topic, 1)

    async def add():
        return await manager.add_partitions(
            [(topic, 0), skipped, (gone, 0)], lambda tp: tp != skipped
        )

    try:
        result = destination._call(add)
        assert result.added == [(topic, 0)] and manager.partitions == {(topic, 0)}
        assert list(result.refused) == [(gone, 0)]
        assert result.refused[(gone, 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        _stop_fetcher(destination)
