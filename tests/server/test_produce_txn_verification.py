"""KIP-890 part 1 on the produce path, over the wire against an embedded broker: a transactional
batch is appended only to a partition its producer added to the transaction (AddPartitionsToTxn),
the coordinator is asked once per transaction and partition, the errors are Kafka's for each
Produce version, and ``transaction.partition.verification.enable=false`` turns the check off.

Every test counts the questions put to the transaction coordinator by wrapping the shell's
``verify_partitions``, the entry point the produce handler and TxnOffsetCommit share.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.client.errors import ConnectionFailed
from kcore.log.log_reads import FetchIsolation
from kcore.log.producer_state import AppendOrigin
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record import RecordBatchBuilder, iter_batches
from kcore.record.control import build_end_txn_marker_batch
from kcore.testing import EmbeddedCluster

from .batches import produce_raw, producer_batch

pytestmark = pytest.mark.timeout(90)

CONFIG = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
RETRIABLE = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
)
P = m.ProduceRequest
A = m.AddPartitionsToTxnRequest


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _run(test, config=None):
    """Run ``test(cluster, conn, asks)`` on a fresh broker; ``asks`` lists the partitions of
    every verification the transaction coordinator was asked for."""

    def run():
        async def main():
            with trio.fail_after(60):
                async with EmbeddedCluster(config={**CONFIG, **(config or {})}) as cluster:
                    svc = cluster.broker.transaction_coordinator
                    real = svc.verify_partitions
                    asks: list[list[tuple[str, int]]] = []

                    async def counting(tid, pid, epoch, partitions):
                        partitions = list(partitions)
                        asks.append(partitions)
                        return await real(tid, pid, epoch, partitions)

                    svc.verify_partitions = counting
                    conn = await _connect(cluster.port)
                    async with conn:
                        await test(cluster, conn, asks)

        trio.run(main)

    run.__name__ = test.__name__
    return run


async def _connect(port: int) -> BrokerConnection:
    # The client listener may open a moment after the cluster is up (Kafka enables request
    # processing last): retry a refused connect for a while.
    with trio.fail_after(10):
        while True:
            try:
                return await BrokerConnection.connect("127.0.0.1", port)
            except ConnectionFailed:
                await trio.sleep(0.05)


async def _retrying(conn, request, version, error=lambda r: r.error_code):
    while True:
        resp = await conn.request(request, version)
        if error(resp) not in RETRIABLE:
            return resp
        await trio.sleep(0.05)


async def _init(conn, tid: str) -> tuple[int, int]:
    resp = await _retrying(
        conn, m.FindCoordinatorRequest(key=tid, key_type=1), 3
    )  # loads __transaction_state
    assert resp.error_code == 0, resp
    resp = await _retrying(
        conn, m.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000), 4
    )
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


def _add_error(resp) -> int:
    (code,) = {
        p.partition_error_code
        for t in resp.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    return code


async def _add(conn, tid, pid, epoch, topic, partition=0) -> None:
    request = A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
    )
    resp = await _retrying(conn, request, 3, error=_add_error)
    assert _add_error(resp) == 0, resp


async def _end(conn, tid, pid, epoch, commit: bool) -> None:
    request = m.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    resp = await _retrying(conn, request, 3)
    assert resp.error_code == 0, resp


def _txn_batch(pid, epoch, sequence, values) -> bytearray:
    return producer_batch(values, pid, epoch, sequence, transactional=True)


async def _produce(conn, tid, topic, batches: dict[int, bytearray], version=9):
    """Produce one batch per partition; returns {partition: PartitionProduceResponse}."""
    return await produce_raw(conn, topic, batches, transactional_id=tid, version=version)


async def _latest_offset(conn, topic, partition=0) -> int:
    L = m.ListOffsetsRequest
    resp = await conn.request(
        L(
            replica_id=-1,
            topics=[
                L.ListOffsetsTopic(
                    name=topic,
                    partitions=[L.ListOffsetsPartition(partition_index=partition, timestamp=-1)],
                )
            ],
        ),
        5,
    )
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0, part
    return part.offset


def _values(cluster, topic, partition=0) -> list[bytes]:
    """Every data record's value in the partition (the log end, transactions or not)."""
    plog = cluster.broker.replica_manager.partitions[(topic, partition)].log
    data = plog.read(plog.log_start_offset, 1 << 20, FetchIsolation.LOG_END)
    out = []
    for file_slice in data.records:
        for batch in iter_batches(file_slice.read()):
            if not batch.is_control:
                out += [bytes(r.value) for r in batch.records()]
    return out


# -- the check ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (9, ErrorCode.INVALID_TXN_STATE),  # v3-10 do not know TRANSACTION_ABORTABLE
        (10, ErrorCode.INVALID_TXN_STATE),
        (11, ErrorCode.TRANSACTION_ABORTABLE),  # KIP-890: v11 does
    ],
)
def test_produce_txn_to_a_partition_never_added_is_refused_and_nothing_appended(version, expected):
    @_run
    async def test(cluster, conn, asks):
        topic, tid = _name("t"), _name("txn")
        await cluster.acreate_topic(topic, partitions=2)
        pid, epoch = await _init(conn, tid)
        await _add(conn, tid, pid, epoch, topic, 1)  # a transaction is open, without -0
        parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"a"])}, version)
        assert parts[0].error_code == expected, parts[0]
        assert parts[0].base_offset == -1
        if expected == ErrorCode.INVALID_TXN_STATE:
            assert parts[0].error_message == "Partition was not added to the transaction"
        assert asks == [[(topic, 0)]]
        assert await _latest_offset(conn, topic) == 0
        assert _values(cluster, topic) == []
        # The refused batch left no transaction open here: nothing pins the LSO.
        plog = cluster.broker.replica_manager.partitions[(topic, 0)].log
        assert plog.producer_state.ongoing_transactions == []

    test()


@_run
async def test_produce_txn_without_any_transaction_open_is_refused(cluster, conn, asks):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    pid, epoch = await _init(conn, tid)  # EMPTY: no AddPartitionsToTxn at all
    parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"a"])})
    assert parts[0].error_code == ErrorCode.INVALID_TXN_STATE, parts[0]
    assert _values(cluster, topic) == []


@_run
async def test_produce_txn_after_add_partitions_is_appended_and_asks_once_per_transaction(
    cluster, conn, asks
):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    pid, epoch = await _init(conn, tid)
    refused = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"early"])})
    assert refused[0].error_code == ErrorCode.INVALID_TXN_STATE
    await _add(conn, tid, pid, epoch, topic)
    # The same batch again (as a producer retries it), now verified.
    first = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"early"])})
    assert first[0].error_code == 0 and first[0].base_offset == 0, first[0]
    assert len(asks) == 2
    # Later batches of the transaction: producer state shows it ongoing, nobody is asked.
    second = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 1, [b"b", b"c"])})
    assert second[0].error_code == 0 and second[0].base_offset == 1, second[0]
    third = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 3, [b"d"])})
    assert third[0].error_code == 0
    assert len(asks) == 2
    assert _values(cluster, topic) == [b"early", b"b", b"c", b"d"]
    # A new transaction after the commit: its first batch is verified again.
    await _end(conn, tid, pid, epoch, True)
    state = cluster.broker.replica_manager.partitions[(topic, 0)].log.producer_state
    with trio.fail_after(15):
        while state.ongoing_transactions:  # the COMMIT marker is in
            await trio.sleep(0.02)
    refused = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 4, [b"late"])})
    assert refused[0].error_code == ErrorCode.INVALID_TXN_STATE
    assert len(asks) == 3


@_run
async def test_produce_txn_asks_once_for_all_new_partitions_of_a_request(cluster, conn, asks):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic, partitions=3)
    pid, epoch = await _init(conn, tid)
    await _add(conn, tid, pid, epoch, topic, 0)
    await _add(conn, tid, pid, epoch, topic, 2)
    parts = await _produce(
        conn,
        tid,
        topic,
        {i: _txn_batch(pid, epoch, 0, [b"p%d" % i]) for i in range(3)},
    )
    assert {i: p.error_code for i, p in parts.items()} == {
        0: 0,
        1: ErrorCode.INVALID_TXN_STATE,
        2: 0,
    }
    assert [sorted(a) for a in asks] == [[(topic, 0), (topic, 1), (topic, 2)]]
    assert [_values(cluster, topic, i) for i in range(3)] == [[b"p0"], [], [b"p2"]]


@_run
async def test_produce_txn_unknown_producer_id_is_refused(cluster, conn, asks):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    pid, epoch = await _init(conn, tid)
    await _add(conn, tid, pid, epoch, topic)
    parts = await _produce(conn, tid, topic, {0: _txn_batch(pid + 1000, 0, 0, [b"x"])})
    assert parts[0].error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING, parts[0]
    assert _values(cluster, topic) == []


@_run
async def test_produce_txn_fenced_producer_gets_invalid_producer_epoch(cluster, conn, asks):
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    pid, old_epoch = await _init(conn, tid)
    pid2, epoch = await _init(conn, tid)  # a new instance bumps the epoch
    assert pid2 == pid and epoch > old_epoch
    await _add(conn, tid, pid, epoch, topic)
    parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, old_epoch, 0, [b"x"])})
    # The coordinator says PRODUCER_FENCED; producers expect INVALID_PRODUCER_EPOCH here.
    assert parts[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH, parts[0]
    assert _values(cluster, topic) == []


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    ],
)
def test_produce_txn_coordinator_unable_to_answer_is_not_enough_replicas(code):
    @_run
    async def test(cluster, conn, asks):
        topic, tid = _name("t"), _name("txn")
        await cluster.acreate_topic(topic)
        pid, epoch = await _init(conn, tid)
        await _add(conn, tid, pid, epoch, topic)
        core = cluster.broker.transaction_coordinator.core

        def unable(*args):
            raise KafkaError(code, "not now")

        core.verify_partitions = unable
        parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"x"])}, 11)
        # Kafka's ReplicaManager: retriable for every producer, no metadata refresh.
        assert parts[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS, parts[0]
        assert code.name in parts[0].error_message
        assert _values(cluster, topic) == []
        del core.verify_partitions  # the coordinator answers again: the retry goes through
        parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"x"])}, 11)
        assert parts[0].error_code == 0, parts[0]

    test()


@_run
async def test_produce_txn_marker_during_verification_refuses_the_append(cluster, conn, asks):
    # The race the verification guard closes: the coordinator says "in the transaction", but
    # an ABORT marker for the producer reached the partition while the answer travelled.
    # Appending would open a transaction the coordinator has already ended.
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic)
    pid, epoch = await _init(conn, tid)
    await _add(conn, tid, pid, epoch, topic)
    broker = cluster.broker
    svc = broker.transaction_coordinator
    asking = svc.verify_partitions

    async def with_marker_in_between(tid_, pid_, epoch_, partitions):
        answer = await asking(tid_, pid_, epoch_, partitions)
        assert answer == {(topic, 0): ErrorCode.NONE}
        marker = build_end_txn_marker_batch(pid, epoch, False, 0, partition_leader_epoch=0)
        broker.replica_manager.append_records(
            topic, 0, marker, required_acks=1, now_ms=0, origin=AppendOrigin.COORDINATOR
        )
        return answer

    svc.verify_partitions = with_marker_in_between
    parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"x"])})
    assert parts[0].error_code == ErrorCode.INVALID_TXN_STATE, parts[0]
    assert _values(cluster, topic) == []
    plog = broker.replica_manager.partitions[(topic, 0)].log
    assert plog.log_end_offset == 1  # the marker only
    assert plog.producer_state.ongoing_transactions == []


@_run
async def test_produce_txn_without_transactional_id_is_refused_whole(cluster, conn, asks):
    # Kafka's handleProduceRequest, with or without an authorizer: transactional batches with
    # no transactional id get TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, and
    # nothing is appended (nor anybody asked).
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic, partitions=2)
    pid, epoch = await _init(conn, tid)
    plain = RecordBatchBuilder()
    plain.append(int(time.time() * 1000), key=None, value=b"plain")
    parts = await _produce(
        conn, None, topic, {0: _txn_batch(pid, epoch, 0, [b"x"]), 1: plain.build()}
    )
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert [parts[i].error_code for i in (0, 1)] == [refused, refused]
    assert asks == []
    assert [await _latest_offset(conn, topic, i) for i in (0, 1)] == [0, 0]


@_run
async def test_produce_non_transactional_batches_are_not_verified(cluster, conn, asks):
    topic = _name("t")
    await cluster.acreate_topic(topic)
    builder = RecordBatchBuilder()
    builder.append(int(time.time() * 1000), key=None, value=b"plain")
    parts = await _produce(conn, _name("txn"), topic, {0: builder.build()})
    assert parts[0].error_code == 0
    assert asks == []


def test_produce_txn_with_verification_disabled_appends_unverified_batches():
    async def test(cluster, conn, asks):
        topic, tid = _name("t"), _name("txn")
        await cluster.acreate_topic(topic)
        pid, epoch = await _init(conn, tid)
        parts = await _produce(conn, tid, topic, {0: _txn_batch(pid, epoch, 0, [b"x"])})
        assert parts[0].error_code == 0, parts[0]
        assert asks == []
        assert _values(cluster, topic) == [b"x"]
        assert await _latest_offset(conn, topic) == 1

    _run(test, {"transaction.partition.verification.enable": "false"})()


# -- the shared entry point, remotely ------------------------------------------------------------


@_run
async def test_verify_partitions_remote_path_asks_with_add_partitions_verify_only(
    cluster, conn, asks
):
    # One node only: aim the inter-broker path (AddPartitionsToTxn v4+ verify_only) at it.
    topic, tid = _name("t"), _name("txn")
    await cluster.acreate_topic(topic, partitions=2)
    pid, epoch = await _init(conn, tid)
    await _add(conn, tid, pid, epoch, topic, 0)
    svc = cluster.broker.transaction_coordinator
    node = cluster.broker.node_id
    codes = await svc._verify_remote(node, tid, pid, epoch, [(topic, 0), (topic, 1)])
    assert codes == {(topic, 0): ErrorCode.NONE, (topic, 1): ErrorCode.TRANSACTION_ABORTABLE}
    codes = await svc._verify_remote(node, tid, pid, epoch + 1, [(topic, 0)])
    assert codes == {(topic, 0): ErrorCode.PRODUCER_FENCED}


# -- TxnOffsetCommit shares the entry point ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "expected"),
    [(3, ErrorCode.INVALID_TXN_STATE), (4, ErrorCode.TRANSACTION_ABORTABLE)],
)
def test_txn_offset_commit_for_a_group_not_added_asks_the_same_entry_point(version, expected):
    # TxnOffsetCommit v4 is the first to know TRANSACTION_ABORTABLE (TxnOffsetCommitRequest.json;
    # Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation).
    @_run
    async def test(cluster, conn, asks):
        topic, tid, group = _name("t"), _name("txn"), _name("g")
        await cluster.acreate_topic(topic)
        pid, epoch = await _init(conn, tid)
        await _add(conn, tid, pid, epoch, topic)
        found = await _retrying(conn, m.FindCoordinatorRequest(key=group, key_type=0), 3)
        assert found.error_code == 0
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
                        T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                    ],
                )
            ],
        )
        resp = await _retrying(
            conn, commit, version, error=lambda r: r.topics[0].partitions[0].error_code
        )
        assert resp.topics[0].partitions[0].error_code == expected, resp
        assert asks == [[("__consumer_offsets", 0)]]  # one offsets partition in CONFIG

    test()
