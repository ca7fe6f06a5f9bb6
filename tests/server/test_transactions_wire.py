"""Transactions on the wire, request by request, against a running kcore.

The transaction coordinator served by the broker: InitProducerId for a transactional id,
AddPartitionsToTxn, EndTxn and the COMMIT/ABORT markers it writes to the data partitions (the
last stable offset follows), bad input that must change nothing, the proactive abort of a
transaction left open past its timeout, and a coordinator restart between the EndTxn answer and
the markers.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.coordinator.transaction import MarkerRequest
from kcore.log.log_reads import FetchIsolation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.record import RecordBatchBuilder, iter_batches
from kcore.record.control import ControlRecordType, read_control_record
from kcore.testing import EmbeddedCluster

from . import embedded
from .batches import produce_request, producer_batch

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
}
RETRIABLE = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
)
A = m.AddPartitionsToTxnRequest


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _coordinator(client: KafkaClient, tid: str) -> int:
    with trio.fail_after(30):
        while True:
            resp = await client.request(
                "any", m.FindCoordinatorRequest(key=tid, key_type=1), version=3
            )
            if resp.error_code == 0:
                return resp.node_id
            assert resp.error_code in RETRIABLE, resp
            await trio.sleep(0.05)


async def _retrying(client, node, request, version, error=lambda r: r.error_code):
    """Send until the answer is not a retriable coordinator error."""
    with trio.fail_after(30):
        while True:
            resp = await client.request(node, request, version=version)
            if error(resp) not in RETRIABLE:
                return resp
            await trio.sleep(0.05)


async def _init(client, node, tid, timeout_ms=60_000) -> tuple[int, int]:
    resp = await _retrying(
        client,
        node,
        m.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms),
        4,
    )
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


def _add_partitions(tid, pid, epoch, topic, partitions=(0,)) -> A:
    return A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=list(partitions))],
    )


def _add_error(resp) -> int:
    codes = {
        p.partition_error_code
        for t in resp.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert len(codes) == 1, resp
    return codes.pop()


async def _add(client, node, tid, pid, epoch, topic) -> int:
    resp = await _retrying(
        client, node, _add_partitions(tid, pid, epoch, topic), 3, error=_add_error
    )
    return _add_error(resp)


def _txn_batch(pid, epoch, sequence, values) -> bytearray:
    return producer_batch(values, pid, epoch, sequence, transactional=True)


def _open_txn_in_log(cluster, topic, pid, values) -> None:
    """A transaction no coordinator knows, straight into the log (past the produce handler,
    whose partition verification would refuse it): what a marker test needs to close."""
    cluster.broker.replica_manager.append_records(
        topic, 0, _txn_batch(pid, 0, 0, values), required_acks=1, now_ms=int(time.time() * 1000)
    )


async def _produce_txn(client, tid, topic, pid, epoch, sequence, values) -> None:
    batch = _txn_batch(pid, epoch, sequence, values)
    request = produce_request(topic, {0: batch}, transactional_id=tid)
    resp = await client.request("any", request, version=9)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part


async def _end(client, node, tid, pid, epoch, commit) -> int:
    resp = await _retrying(
        client,
        node,
        m.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
        ),
        3,
    )
    return resp.error_code


async def _describe(client, node, tid):
    resp = await _retrying(
        client,
        node,
        m.DescribeTransactionsRequest(transactional_ids=[tid]),
        0,
        error=lambda r: r.transaction_states[0].error_code,
    )
    return resp.transaction_states[0]


def _markers(broker, topic) -> list[tuple[ControlRecordType, int]]:
    """(type, producer id) of every control batch in ``topic``-0."""
    plog = broker.replica_manager.partitions[(topic, 0)].log
    data = plog.read(plog.log_start_offset, 1 << 20, FetchIsolation.LOG_END)
    out = []
    for file_slice in data.records:
        for batch in iter_batches(file_slice.read()):
            if batch.is_control:
                out.append((read_control_record(batch).type, batch.producer_id))
    return out


async def _until(predicate, timeout=15.0):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


with_broker = embedded.with_broker(CONFIG)


@with_broker
async def test_transactions_commit_writes_the_commit_marker_and_the_lso_advances(cluster, client):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, tid)
    pid, epoch = await _init(client, node, tid)
    assert epoch == 0 and pid >= 0
    assert await _add(client, node, tid, pid, epoch, topic) == 0
    await _produce_txn(client, tid, topic, pid, epoch, 0, [b"a", b"b", b"c"])
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    assert plog.last_stable_offset == 0  # the open transaction holds it back
    ongoing = await _describe(client, node, tid)
    assert ongoing.transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in ongoing.topics] == [(topic, [0])]

    assert await _end(client, node, tid, pid, epoch, True) == 0
    await _until(lambda: _markers(cluster.broker, topic) == [(ControlRecordType.COMMIT, pid)])
    await _until(lambda: plog.last_stable_offset == plog.log_end_offset == 4)
    await _until(lambda: cluster.broker.transaction_coordinator.core.pending_markers() == {})
    done = await _describe(client, node, tid)
    assert done.transaction_state == "CompleteCommit" and done.topics == []
    listed = await client.request(node, m.ListTransactionsRequest(), version=1)
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        (tid, "CompleteCommit")
    ]


@with_broker
async def test_transactions_idempotent_init_producer_id_gives_fresh_ids_at_epoch_zero(
    cluster, client
):
    first = await client.request(
        "any", m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=0), version=0
    )
    second = await client.request(
        "any", m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=0), version=4
    )
    assert first.error_code == second.error_code == 0
    assert first.producer_epoch == second.producer_epoch == 0
    assert second.producer_id > first.producer_id >= 0


@with_broker
async def test_transactions_end_txn_for_an_unknown_transactional_id_is_refused(cluster, client):
    tid = _name("unknown")
    node = await _coordinator(client, tid)
    assert await _end(client, node, tid, 12345, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    described = await _describe(client, node, tid)
    assert described.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


@with_broker
async def test_transactions_add_partitions_with_a_stale_epoch_is_fenced_and_changes_nothing(
    cluster, client
):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, tid)
    pid, old_epoch = await _init(client, node, tid)
    pid2, epoch = await _init(client, node, tid)  # a second instance fences the first
    assert (pid2, epoch) == (pid, old_epoch + 1)
    stale = _add_partitions(tid, pid, old_epoch, topic)
    assert _add_error(await client.request(node, stale, version=3)) == ErrorCode.PRODUCER_FENCED
    # Before KIP-588 (v0-1) the same refusal is INVALID_PRODUCER_EPOCH.
    assert _add_error(await client.request(node, stale, version=1)) == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    described = await _describe(client, node, tid)
    assert described.transaction_state == "Empty" and described.topics == []
    assert described.producer_epoch == epoch
    # A partition that does not exist: refused, the others not attempted, nothing added.
    both = A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            A.AddPartitionsToTxnTopic(name=topic, partitions=[0]),
            A.AddPartitionsToTxnTopic(name=_name("missing"), partitions=[0]),
        ],
    )
    resp = await client.request(node, both, version=3)
    codes = sorted(
        p.partition_error_code
        for t in resp.results_by_topic_v3_and_below
        for p in t.results_by_partition
    )
    assert codes == sorted(
        [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    )
    assert (await _describe(client, node, tid)).transaction_state == "Empty"


@with_broker
async def test_transactions_a_timed_out_transaction_is_aborted_by_the_coordinator(cluster, client):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, tid)
    pid, epoch = await _init(client, node, tid, timeout_ms=300)
    assert await _add(client, node, tid, pid, epoch, topic) == 0
    await _produce_txn(client, tid, topic, pid, epoch, 0, [b"x"])
    await _until(lambda: _markers(cluster.broker, topic) == [(ControlRecordType.ABORT, pid)])
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    await _until(lambda: plog.last_stable_offset == plog.log_end_offset == 2)
    aborted = await _describe(client, node, tid)
    await _until(lambda: cluster.broker.transaction_coordinator.core.pending_markers() == {})
    aborted = await _describe(client, node, tid)
    assert aborted.transaction_state == "CompleteAbort"
    assert aborted.producer_epoch == epoch + 1  # the abort fenced the producer
    # The fenced producer's next call is refused.
    assert await _end(client, node, tid, pid, epoch, True) == ErrorCode.PRODUCER_FENCED


def test_transactions_a_commit_acknowledged_before_a_restart_completes_after_it(tmp_path):
    topic, tid = _name("t"), _name("txn")
    cluster = EmbeddedCluster(config=CONFIG, data_dir=tmp_path)
    cluster.start()
    try:
        cluster.create_topic(topic)

        async def begin_and_commit():
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                node = await _coordinator(client, tid)
                pid, epoch = await _init(client, node, tid)
                assert await _add(client, node, tid, pid, epoch, topic) == 0
                await _produce_txn(client, tid, topic, pid, epoch, 0, [b"1", b"2"])
                # The coordinator "dies" before sending any marker: hold them back.
                service = cluster.broker.transaction_coordinator
                service._send_due_markers = lambda now: None
                assert await _end(client, node, tid, pid, epoch, True) == 0
                described = await _describe(client, node, tid)
                assert described.transaction_state == "PrepareCommit"
                await trio.sleep(0.2)
                assert _markers(cluster.broker, topic) == []
                return pid

        # Both phases run on the broker's own Trio loop (the broker lives in another thread).
        pid = cluster._call(begin_and_commit)
        cluster.restart()

        async def after_restart():
            broker = cluster.broker
            await _until(lambda: _markers(broker, topic) == [(ControlRecordType.COMMIT, pid)])
            plog = broker.replica_manager.partitions[(topic, 0)].log
            await _until(lambda: plog.last_stable_offset == plog.log_end_offset == 3)
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                node = await _coordinator(client, tid)
                with trio.fail_after(15):
                    while (await _describe(client, node, tid)).transaction_state != (
                        "CompleteCommit"
                    ):
                        await trio.sleep(0.05)

        cluster._call(after_restart)
    finally:
        cluster.stop()


W = m.WriteTxnMarkersRequest


def _marker(pid, epoch, commit, coordinator_epoch, topics) -> W.WritableTxnMarker:
    return W.WritableTxnMarker(
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=[W.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in topics],
        coordinator_epoch=coordinator_epoch,
    )


def _marker_errors(resp) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.error_code
        for marker in resp.markers
        for t in marker.topics
        for p in t.partitions
    }


@with_broker
async def test_write_txn_markers_appends_a_marker_per_partition_with_per_partition_errors(
    cluster, client
):
    topic, missing = _name("t"), _name("missing")
    await cluster.acreate_topic(topic)
    pid = 777_000
    _open_txn_in_log(cluster, topic, pid, [b"x", b"y"])
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    assert plog.last_stable_offset == 0
    request = W(markers=[_marker(pid, 0, True, 5, [(topic, [0, 7]), (missing, [0])])])
    resp = await client.request("any", request, version=1)
    assert _marker_errors(resp) == {
        (topic, 0): 0,
        (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (missing, 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert _markers(cluster.broker, topic) == [(ControlRecordType.COMMIT, pid)]
    assert plog.last_stable_offset == plog.log_end_offset == 3
    # A marker from an older coordinator epoch is refused and writes nothing.
    stale = W(markers=[_marker(pid, 0, False, 4, [(topic, [0])])])
    resp = await client.request("any", stale, version=0)
    assert _marker_errors(resp) == {(topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    assert plog.log_end_offset == 3


@with_broker
async def test_marker_sender_reaches_a_broker_over_the_network_and_reports_unreachable_ones(
    cluster, client
):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    pid = 888_000
    _open_txn_in_log(cluster, topic, pid, [b"x"])
    service = cluster.broker.transaction_coordinator
    # The remote path (WriteTxnMarkers on the inter-broker listener), aimed at this node.
    results = await service._send_remote(1, [_marker(pid, 0, False, 0, [(topic, [0])])])
    assert [(r.producer_id, r.topics[0].partitions[0].error_code) for r in results] == [(pid, 0)]
    assert _markers(cluster.broker, topic) == [(ControlRecordType.ABORT, pid)]
    # A node the metadata does not know: every partition sent there gets a retriable error.
    marker = MarkerRequest("tid", pid, 0, 0, True, ((topic, 0),))
    errors: dict = {"tid": {}}
    await service._send_to_node(99, [(marker, [(topic, 0)])], errors)
    assert errors == {"tid": {(topic, 0): ErrorCode.BROKER_NOT_AVAILABLE}}
    assert _markers(cluster.broker, topic) == [(ControlRecordType.ABORT, pid)]


@with_broker
async def test_txn_offset_commit_for_a_group_not_in_the_transaction_is_refused(cluster, client):
    # The broker does not install the check yet (tests/server/test_txn_offset_commit.py commits
    # with producers no coordinator knows): install it here as the broker would.
    broker = cluster.broker
    broker.group_coordinator.verify_txn_offset_commit = (
        broker.transaction_coordinator.verify_txn_offset_commit
    )
    topic, tid, group = _name("t"), _name("txn"), _name("g")
    await cluster.acreate_topic(topic)
    node = await _coordinator(client, tid)
    pid, epoch = await _init(client, node, tid)
    assert await _add(client, node, tid, pid, epoch, topic) == 0  # the transaction is open
    group_node = await _retrying(client, "any", m.FindCoordinatorRequest(key=group, key_type=0), 3)
    T = m.TxnOffsetCommitRequest
    commit = T(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)
                ],
            )
        ],
    )

    def error(resp):
        return resp.topics[0].partitions[0].error_code

    refused = await _retrying(client, group_node.node_id, commit, 3, error=error)
    assert error(refused) == ErrorCode.INVALID_TXN_STATE
    added = await _retrying(
        client,
        node,
        m.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        ),
        3,
    )
    assert added.error_code == 0
    accepted = await _retrying(client, group_node.node_id, commit, 3, error=error)
    assert error(accepted) == 0
    assert await _end(client, node, tid, pid, epoch, True) == 0
    OF = m.OffsetFetchRequest

    async def committed() -> int:
        resp = await client.request(
            group_node.node_id,
            OF(
                group_id=group,
                topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
            ),
            version=5,
        )
        return resp.topics[0].partitions[0].committed_offset

    with trio.fail_after(15):
        while await committed() != 5:
            await trio.sleep(0.05)


@with_broker
async def test_idempotent_produce_answers_a_duplicate_with_its_offsets_and_refuses_a_gap(
    cluster, client
):
    """The producer state on the wire: a retried batch (same producer, epoch and sequence) is
    not written again and gets its first offsets back; a sequence gap is
    OUT_OF_ORDER_SEQUENCE_NUMBER and writes nothing."""
    topic = _name("idem")
    await cluster.acreate_topic(topic)
    init = await client.request(
        "any", m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=0), version=4
    )
    pid, epoch = init.producer_id, init.producer_epoch
    P = m.ProduceRequest

    async def produce(sequence: int, values: list[bytes]):
        builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
        for v in values:
            builder.append(int(time.time() * 1000), key=None, value=v)
        resp = await client.request(
            "any",
            P(
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic,
                        partition_data=[P.PartitionProduceData(index=0, records=builder.build())],
                    )
                ],
            ),
            version=9,
        )
        return resp.responses[0].partition_responses[0]

    first = await produce(0, [b"a", b"b"])
    second = await produce(2, [b"c"])
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    retried = await produce(0, [b"a", b"b"])
    assert (retried.error_code, retried.base_offset) == (0, 0)
    gap = await produce(7, [b"z"])
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
    assert plog.log_end_offset == 3
