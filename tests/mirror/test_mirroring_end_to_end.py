"""Cluster mirroring end to end between two real kcore clusters, through the public interfaces
only: the admin RPCs create a mirror and start a topic, the destination's mirror manager runs
each partition's state machine (coordinator, fetcher, truncation), and confluent-kafka clients
read, are refused, fail over and write.

What is asserted is what an operator relies on: the destination's batches are the source's
(same offsets, same bytes but CRC and producer id ``-(p+2)``), a read_committed consumer reads
the same records on both sides, a producer to a mirror topic gets TOPIC_IS_MIRROR and nothing
is appended, and after ``stop`` the topic is writable with no hanging transaction.
"""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import KafkaException, Producer

from kcore.client import KafkaClient
from kcore.client.mirrors import (
    create_cluster_mirror,
    describe_cluster_mirrors,
    start_mirror_topics,
    stop_mirror_topics,
)
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster

from .clusters import CLUSTER_CONFIG, partition, topic_id, wait_until
from .test_mirror_fetcher import (
    PARTITIONS,
    _assert_identical_batches,
    _bump_epoch,
    _name,
    _produce,
    _read_committed,
)
from .test_mirror_fetcher import _write_source as write_every_kind_of_batch

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def clusters():
    with (
        EmbeddedCluster(config=CLUSTER_CONFIG) as source,
        EmbeddedCluster(config=CLUSTER_CONFIG) as destination,
    ):
        yield source, destination


def _admin(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def _describe(cluster, mirror: str) -> dict[tuple[str, int], object]:
    response = _admin(cluster, lambda c: describe_cluster_mirrors(c, [mirror]))
    (described,) = response.mirrors
    assert described.error_code == 0, described.error_message
    return {(t.topic_name, p.partition_index): p for t in described.topics for p in t.partitions}


def _wait_state(cluster, mirror: str, topic: str, state: str, timeout: float = 60.0) -> dict:
    last = {}

    def reached() -> bool:
        nonlocal last
        last = _describe(cluster, mirror)
        return all(last[(topic, p)].state == state for p in range(PARTITIONS))

    try:
        wait_until(reached, timeout, f"{topic} {state}")
    except AssertionError:
        raise AssertionError(f"{topic} did not reach {state}: {last}") from None
    return last


def test_mirroring_copies_refuses_local_writes_fails_over_and_fails_back(clusters):
    source, destination = clusters
    topic = _name("orders")
    source.create_topic(topic, partitions=PARTITIONS)
    open_txn = write_every_kind_of_batch(source, topic)

    mirror = _name("dr")
    created = _admin(
        destination,
        lambda c: create_cluster_mirror(c, mirror, {"bootstrap.servers": source.bootstrap_servers}),
    )
    assert created.error_code == 0, created.error_message
    started = _admin(destination, lambda c: start_mirror_topics(c, mirror, [topic]))
    assert [(t.name, t.error_code) for t in started.topics] == [(topic, 0)]
    assert topic_id(destination, topic) == topic_id(source, topic)  # M-06

    # The destination catches up to the source's LSO (READ_COMMITTED, D-19): partition 1
    # holds the open transaction, so its LSO stops at that transaction's first offset.
    _wait_state(destination, mirror, topic, "MIRRORING")
    ends = {p: partition(source, topic, p).last_stable_offset for p in range(PARTITIONS)}
    wait_until(
        lambda: all(partition(destination, topic, p).log_end_offset == ends[p] for p in ends),
        60,
        "the destination at the source's LSO",
    )
    pids = set()
    for p in range(PARTITIONS):
        pids |= _assert_identical_batches(source, destination, topic, p, ends[p])
    assert pids, "no idempotent or transactional batch was mirrored"
    assert _read_committed(destination, topic) == _read_committed(source, topic)

    # Read-only (D-18): TOPIC_IS_MIRROR, nothing appended.
    before = partition(destination, topic, 0).log_end_offset
    producer = Producer({"bootstrap.servers": destination.bootstrap_servers, "retries": 0})
    errors = []
    producer.produce(topic, b"local", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert [e.code() for e in errors] == [int(ErrorCode.TOPIC_IS_MIRROR)]
    assert partition(destination, topic, 0).log_end_offset == before

    # Failover: STOPPED, the open transaction aborted (LSO = HW), then writable.
    stopped = _admin(destination, lambda c: stop_mirror_topics(c, mirror, [topic]))
    assert [(t.name, t.error_code) for t in stopped.topics] == [(topic, 0)]
    described = _wait_state(destination, mirror, topic, "STOPPED")
    for p in range(PARTITIONS):
        dest = partition(destination, topic, p)
        assert dest.last_stable_offset == dest.high_watermark == dest.log_end_offset
        assert not dest.producer_state.ongoing_transactions
        assert dest.leader_epoch > partition(source, topic, p).leader_epoch  # LME + 1
        assert described[(topic, p)].last_mirror_epoch >= 0  # recorded for failback (M-56)
    deadline = time.monotonic() + 30
    while True:
        try:
            writer = Producer(
                {"bootstrap.servers": destination.bootstrap_servers, "enable.idempotence": True}
            )
            writer.produce(topic, b"after-failover", partition=1)
            assert writer.flush(30) == 0
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
    assert any(r[3] == b"after-failover" for r in _read_committed(destination, topic))

    # Failback (M-69): the old source comes back; its coordinator aborts the transaction left
    # open (a marker beyond what was mirrored: the logs have diverged). A mirror of the same
    # name, created on the old source towards the promoted cluster, truncates by the LME and
    # by the diverging epoch, and copies back what the promoted cluster wrote.
    open_txn.abort_transaction(30)
    old_end = partition(source, topic, 1).log_end_offset
    assert old_end > ends[1]  # the open transaction's records and its marker
    back = _admin(
        source,
        lambda c: create_cluster_mirror(
            c, mirror, {"bootstrap.servers": destination.bootstrap_servers}
        ),
    )
    assert back.error_code == 0, back.error_message
    restarted = _admin(source, lambda c: start_mirror_topics(c, mirror, [topic]))
    assert [(t.name, t.error_code) for t in restarted.topics] == [(topic, 0)]
    _wait_state(source, mirror, topic, "MIRRORING")
    promoted = {p: partition(destination, topic, p).log_end_offset for p in range(PARTITIONS)}
    wait_until(
        lambda: all(partition(source, topic, p).log_end_offset == promoted[p] for p in promoted),
        60,
        "the old source at the promoted cluster's end",
    )
    for p in range(PARTITIONS):
        # Batch for batch; the producer id rewrite is its own inverse, so the batches the old
        # source wrote itself are back with their original ids.
        _assert_identical_batches(destination, source, topic, p, promoted[p])
        old = partition(source, topic, p)
        assert old.last_stable_offset == old.high_watermark
    records = _read_committed(source, topic)
    assert records == _read_committed(destination, topic)
    assert not any(r[3].startswith(b"open-") for r in records if r[3])


def test_mirroring_follows_a_source_leader_epoch_bump_through_epoch_fencing(clusters):
    # D-11: batches of a newer source epoch wait until the destination's own epoch covers
    # them (EPOCH_FENCING: BumpLeaderEpochs), then mirroring goes on with the epochs kept.
    source, destination = clusters
    topic = _name("epochs")
    source.create_topic(topic, partitions=PARTITIONS)
    mirror = _name("dr")
    created = _admin(
        destination,
        lambda c: create_cluster_mirror(c, mirror, {"bootstrap.servers": source.bootstrap_servers}),
    )
    assert created.error_code == 0
    assert (
        _admin(destination, lambda c: start_mirror_topics(c, mirror, [topic])).topics[0].error_code
        == 0
    )
    _wait_state(destination, mirror, topic, "MIRRORING")
    for p in range(PARTITIONS):
        _produce(source, topic, [b"before-%d" % i for i in range(5)], index=p)
    new_epoch = _bump_epoch(source, topic, 0, min_epoch=7)
    _produce(source, topic, [b"after-%d" % i for i in range(5)], index=0)
    end = partition(source, topic, 0).log_end_offset
    wait_until(lambda: partition(destination, topic, 0).log_end_offset == end, 60, "caught up")
    _wait_state(destination, mirror, topic, "MIRRORING")
    assert partition(destination, topic, 0).leader_epoch >= new_epoch  # the bump (D-10)
    assert partition(destination, topic, 0).latest_epoch == new_epoch  # the source's, kept
    _assert_identical_batches(source, destination, topic, 0, end)
