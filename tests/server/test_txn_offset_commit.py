"""Transactional offset commits on the wire, against a running kcore.

TxnOffsetCommit writes a transactional batch of the producer into ``__consumer_offsets``;
OffsetFetch does not show its offsets (and ``require_stable`` answers UNSTABLE_OFFSET_COMMIT)
until a COMMIT marker, sent with a real WriteTxnMarkers request, makes them the committed
offsets; an ABORT marker drops them. A broker restart replays the partition, transactional
batches and markers included, and rebuilds exactly that: committed ones stay, aborted ones stay
gone, an open transaction is still pending and completes after the restart. Last, the whole
producer path: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, by request and with
confluent-kafka's ``send_offsets_to_transaction``.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.log.log_reads import FetchIsolation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import iter_batches
from kcore.server.internal_topics import CONSUMER_OFFSETS
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    # These tests drive the group coordinator's side alone, with producer ids no transaction
    # coordinator knows: the partition check of the transaction coordinator is off here.
    "transaction.partition.verification.enable": "false",
}
RETRIABLE = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
)
TOPIC = "orders"
COMMITTED, ABORTED, OPEN = 7001, 7002, 7003  # producer ids (no InitProducerId needed here)
T = m.TxnOffsetCommitRequest
W = m.WriteTxnMarkersRequest


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _coordinator(client: KafkaClient, key: str, key_type: int = 0) -> int:
    with trio.fail_after(30):
        while True:
            resp = await client.request(
                "any", m.FindCoordinatorRequest(key=key, key_type=key_type), version=3
            )
            if resp.error_code == 0:
                return resp.node_id
            assert resp.error_code in RETRIABLE, resp
            await trio.sleep(0.05)


def _codes(resp) -> set[int]:
    return {p.error_code for t in resp.topics for p in t.partitions}


async def _retrying(client, node, request, version, error):
    """Send until the answer is not a retriable coordinator error."""
    with trio.fail_after(30):
        while True:
            resp = await client.request(node, request, version=version)
            if error(resp) not in RETRIABLE:
                return resp
            await trio.sleep(0.05)


async def _txn_commit(client, node, group, producer_id, offsets, *, epoch=0, tid=None) -> int:
    request = T(
        transactional_id=tid or f"tid-{producer_id}",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[
                    T.TxnOffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata="txn"
                    )
                    for p, o in sorted(offsets.items())
                ],
            )
        ],
    )
    resp = await _retrying(client, node, request, 3, lambda r: min(_codes(r)))
    (code,) = _codes(resp)
    return code


async def _fetch(client, node, group, *, require_stable=False) -> dict[int, tuple[int, int]]:
    """{partition: (error code, committed offset)} for partitions 0-2 of TOPIC (OffsetFetch v7)."""
    request = m.OffsetFetchRequest(
        group_id=group,
        topics=[
            m.OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1, 2])
        ],
        require_stable=require_stable,
    )
    resp = await _retrying(client, node, request, 7, lambda r: r.error_code)
    assert resp.error_code == 0, resp
    return {
        p.partition_index: (p.error_code, p.committed_offset)
        for t in resp.topics
        for p in t.partitions
    }


async def _plain_commit(client, node, group, partition, offset) -> None:
    C = m.OffsetCommitRequest
    request = C(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            C.OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[
                    C.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset
                    )
                ],
            )
        ],
    )
    resp = await _retrying(client, node, request, 8, lambda r: min(_codes(r)))
    assert _codes(resp) == {0}


async def _write_marker(client, node, partition, producer_id, commit, epoch=0) -> None:
    request = W(
        markers=[
            W.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[
                    W.WritableTxnMarkerTopic(name=CONSUMER_OFFSETS, partition_indexes=[partition])
                ],
                coordinator_epoch=0,
            )
        ]
    )
    resp = await client.request(node, request, version=1)
    codes = {p.error_code for mk in resp.markers for t in mk.topics for p in t.partitions}
    assert codes == {0}, resp


def _transactional_batches(broker, partition) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of the transactional data batches in the partition."""
    plog = broker.replica_manager.partitions[(CONSUMER_OFFSETS, partition)].log
    data = plog.read(plog.log_start_offset, 1 << 20, FetchIsolation.LOG_END)
    out = []
    for file_slice in data.records:
        for batch in iter_batches(file_slice.read()):
            if batch.is_transactional and not batch.is_control:
                out.append((batch.producer_id, batch.producer_epoch, batch.base_sequence))
    return out


def test_txn_offset_commit_pending_then_committed_or_aborted_and_kept_across_a_restart(tmp_path):
    group = _name("g")
    cluster = EmbeddedCluster(config=CONFIG, data_dir=tmp_path)
    cluster.start()
    try:
        cluster.create_topic(TOPIC, partitions=3)  # offsets of unknown topics are refused

        async def before_restart() -> int:
            broker = cluster.broker
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                node = await _coordinator(client, group)
                partition = broker.group_coordinator.core.partition_for(group)
                await _plain_commit(client, node, group, 0, 5)
                assert await _txn_commit(client, node, group, COMMITTED, {0: 10, 1: 11}) == 0
                assert await _txn_commit(client, node, group, ABORTED, {2: 22}) == 0
                assert await _txn_commit(client, node, group, OPEN, {1: 31}) == 0

                # Invisible before the markers; require_stable says why.
                assert await _fetch(client, node, group) == {0: (0, 5), 1: (0, -1), 2: (0, -1)}
                unstable = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
                stable = await _fetch(client, node, group, require_stable=True)
                assert {p: c for p, (c, _) in stable.items()} == {
                    0: unstable,
                    1: unstable,
                    2: unstable,
                }
                # Written as transactional batches of each producer, base sequence 0.
                batches = _transactional_batches(broker, partition)
                assert batches == [(COMMITTED, 0, 0), (ABORTED, 0, 0), (OPEN, 0, 0)]

                await _write_marker(client, node, partition, COMMITTED, True)
                await _write_marker(client, node, partition, ABORTED, False)
                assert await _fetch(client, node, group) == {0: (0, 10), 1: (0, 11), 2: (0, -1)}
                stable = await _fetch(client, node, group, require_stable=True)
                assert stable == {0: (0, 10), 1: (unstable, -1), 2: (0, -1)}  # OPEN holds 1
                return partition

        partition = cluster._call(before_restart)
        cluster.restart()

        async def after_restart() -> None:
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                node = await _coordinator(client, group)
                assert await _fetch(client, node, group) == {0: (0, 10), 1: (0, 11), 2: (0, -1)}
                unstable = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
                stable = await _fetch(client, node, group, require_stable=True)
                assert stable == {0: (0, 10), 1: (unstable, -1), 2: (0, -1)}
                # The transaction left open completes after the restart.
                await _write_marker(client, node, partition, OPEN, True)
                assert await _fetch(client, node, group, require_stable=True) == {
                    0: (0, 10),
                    1: (0, 31),
                    2: (0, -1),
                }

        cluster._call(after_restart)
        cluster.restart()

        async def after_second_restart() -> None:
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                node = await _coordinator(client, group)
                assert await _fetch(client, node, group, require_stable=True) == {
                    0: (0, 10),
                    1: (0, 31),
                    2: (0, -1),
                }

        cluster._call(after_second_restart)
    finally:
        cluster.stop()


def test_txn_offset_commit_through_the_transaction_coordinator():
    """The producer's path: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, EndTxn(commit);
    the coordinator's markers make the offsets visible, an aborted transaction's never are."""
    group, tid = _name("g"), _name("tid")

    async def main() -> None:
        async with (
            EmbeddedCluster(config=CONFIG) as cluster,
            KafkaClient([cluster.bootstrap_servers]) as client,
        ):
            await cluster.acreate_topic(TOPIC, partitions=3)
            txn_node = await _coordinator(client, tid, key_type=1)
            group_node = await _coordinator(client, group)
            init = await _retrying(
                client,
                txn_node,
                m.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
                4,
                lambda r: r.error_code,
            )
            assert init.error_code == 0, init
            pid, epoch = init.producer_id, init.producer_epoch
            for commit, offset in ((True, 40), (False, 50)):
                add = await _retrying(
                    client,
                    txn_node,
                    m.AddOffsetsToTxnRequest(
                        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
                    ),
                    3,
                    lambda r: r.error_code,
                )
                assert add.error_code == 0, add
                code = await _txn_commit(
                    client, group_node, group, pid, {0: offset}, epoch=epoch, tid=tid
                )
                assert code == 0
                end = await _retrying(
                    client,
                    txn_node,
                    m.EndTxnRequest(
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=epoch,
                        committed=commit,
                    ),
                    3,
                    lambda r: r.error_code,
                )
                assert end.error_code == 0, end
                # The markers are written after the EndTxn answer: wait for the outcome.
                with trio.fail_after(15):
                    while True:
                        got = await _fetch(client, group_node, group, require_stable=True)
                        if got[0][0] == 0:
                            break
                        await trio.sleep(0.05)
                assert got[0] == (0, 40)  # the aborted 50 never shows

    trio.run(main)


def test_txn_offset_commit_confluent_send_offsets_to_transaction():
    """librdkafka's consume-transform-produce: the committed transaction's offsets become the
    group's, an aborted transaction's offsets never do."""
    ck = pytest.importorskip("confluent_kafka")
    group = _name("g")
    with EmbeddedCluster(config=CONFIG) as cluster:
        cluster.create_topic(TOPIC)
        cluster.create_topic("out")
        plain = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(5):
            plain.produce(TOPIC, f"v{i}")
        plain.flush(10)
        consumer = ck.Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        producer = ck.Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": _name("tid")}
        )
        try:
            consumer.subscribe([TOPIC])
            producer.init_transactions(30)
            got = []
            for _ in range(30):
                msg = consumer.poll(1)
                if msg is not None and not msg.error():
                    got.append(msg)
                if len(got) == 5:
                    break
            assert len(got) == 5
            producer.begin_transaction()
            for msg in got:
                producer.produce("out", msg.value())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            (committed,) = consumer.committed([ck.TopicPartition(TOPIC, 0)], timeout=30)
            assert committed.offset == 5 and committed.error is None

            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                [ck.TopicPartition(TOPIC, 0, 99)], consumer.consumer_group_metadata(), 30
            )
            producer.abort_transaction(30)
            (after,) = consumer.committed([ck.TopicPartition(TOPIC, 0)], timeout=30)
            assert after.offset == 5
        finally:
            consumer.close()
