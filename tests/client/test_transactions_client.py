"""The transaction helpers against fake brokers: ListTransactions at every broker,
DescribeTransactions at each id's transaction coordinator, DescribeProducers and WriteTxnMarkers
at partition leaders, and the retries when the coordinator or leader moved."""

import pytest

from kcore.client import KafkaClient, UnsupportedVersionError
from kcore.client import transactions as txn
from kcore.protocol import APIS
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

from .fake_broker import FakeBroker, running, trio_test

METADATA, WRITE_TXN_MARKERS, FIND_COORDINATOR = 3, 27, 10
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def _cluster(n=2, topics=None, ranges=None, coordinators=None):
    """``n`` fake brokers sharing ``topics``; FindCoordinator answers transactional ids with
    ``coordinators[id]`` (a node id or an ErrorCode; default: the last broker), and refuses
    any key type but TRANSACTION."""
    ids = {}
    brokers = [FakeBroker(node_id=i + 1, topics=topics or {}, topic_ids=ids) for i in range(n)]
    table = coordinators if coordinators is not None else {}

    async def find(broker, conn, req):
        R = m.FindCoordinatorResponse
        assert req.body.key_type == 1, "transactional ids are looked up with key type 1"
        by_id = {b.node_id: b for b in brokers}
        out = []
        for key in req.body.coordinator_keys:
            node = table.get(key, brokers[-1].node_id)
            if isinstance(node, ErrorCode):
                out.append(R.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=node))
            else:
                b = by_id[node]
                out.append(R.Coordinator(key=key, node_id=node, host="127.0.0.1", port=b.port))
        return R(coordinators=out)

    for b in brokers:
        b.cluster = brokers
        b.handlers[FIND_COORDINATOR] = find
        if ranges:
            b.api_ranges = {
                k: ranges.get(k, (a.min_version, a.max_version)) for k, a in APIS.items()
            }
    return brokers


def _client(broker):
    return KafkaClient(broker.address, retry_backoff=0.001, retry_backoff_max=0.005)


def _listing(*entries, error_code=0):
    """A ListTransactions handler answering ``entries`` of (id, producer id, state)."""

    async def handler(broker, conn, req):
        R = m.ListTransactionsResponse
        wanted_states = set(req.body.state_filters)
        wanted_pids = set(req.body.producer_id_filters)
        return R(
            error_code=error_code,
            unknown_state_filters=[s for s in req.body.state_filters if s == "Sleeping"],
            transaction_states=[
                R.TransactionState(transactional_id=t, producer_id=p, transaction_state=s)
                for t, p, s in entries
                if (not wanted_states or s in wanted_states)
                and (not wanted_pids or p in wanted_pids)
            ],
        )

    return handler


def _describing(states):
    """A DescribeTransactions handler: ``states[id]`` is (state, producer id, {topic: [p]})."""

    async def handler(broker, conn, req):
        R = m.DescribeTransactionsResponse
        out = []
        for tid in req.body.transactional_ids:
            if tid not in states:
                out.append(
                    R.TransactionState(
                        transactional_id=tid,
                        error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                        transaction_state="",
                    )
                )
                continue
            state, pid, topics = states[tid]
            out.append(
                R.TransactionState(
                    transactional_id=tid,
                    transaction_state=state,
                    transaction_timeout_ms=60_000,
                    transaction_start_time_ms=1_700_000_000_000,
                    producer_id=pid,
                    producer_epoch=3,
                    topics=[R.TopicData(topic=t, partitions=ps) for t, ps in topics.items()],
                )
            )
        return R(transaction_states=out)

    return handler


def _producers(table, error_code=0):
    """A DescribeProducers handler: ``table[(topic, p)]`` is a list of (pid, start offset)."""

    async def handler(broker, conn, req):
        R = m.DescribeProducersResponse
        return R(
            topics=[
                R.TopicResponse(
                    name=t.name,
                    partitions=[
                        R.PartitionResponse(
                            partition_index=p,
                            error_code=error_code,
                            active_producers=[
                                R.ProducerState(
                                    producer_id=pid,
                                    producer_epoch=2,
                                    last_sequence=9,
                                    last_timestamp=1_700_000_000_000,
                                    coordinator_epoch=-1,
                                    current_txn_start_offset=start,
                                )
                                for pid, start in table.get((t.name, p), [])
                            ],
                        )
                        for p in t.partition_indexes
                    ],
                )
                for t in req.body.topics
            ]
        )

    return handler


def _markers(error_code=0):
    """A WriteTxnMarkers handler answering ``error_code`` for every partition."""

    async def handler(broker, conn, req):
        R = m.WriteTxnMarkersResponse
        return R(
            markers=[
                R.WritableTxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=[
                        R.WritableTxnMarkerTopicResult(
                            name=t.name,
                            partitions=[
                                R.WritableTxnMarkerPartitionResult(
                                    partition_index=p, error_code=error_code
                                )
                                for p in t.partition_indexes
                            ],
                        )
                        for t in marker.topics
                    ],
                )
                for marker in req.body.markers
            ]
        )

    return handler


# -- ListTransactions ----------------------------------------------------------------------------


@trio_test
async def test_transactions_list_asks_every_broker_and_merges_the_answers():
    b1, b2 = _cluster(2)
    b1.handlers[LIST_TRANSACTIONS] = _listing(("b", 11, "Ongoing"), ("c", 12, "Empty"))
    b2.handlers[LIST_TRANSACTIONS] = _listing(("a", 10, "CompleteCommit"))
    async with running(b1, b2), _client(b1) as client:
        by_broker = await txn.list_transactions_by_broker(client)
        assert {
            n: [t.transactional_id for t in r.transaction_states] for n, r in by_broker.items()
        } == {
            1: ["b", "c"],
            2: ["a"],
        }
        merged = await txn.list_transactions(client)
        assert [
            (t.transactional_id, t.producer_id, t.transaction_state)
            for t in merged.transaction_states
        ] == [
            ("a", 10, "CompleteCommit"),
            ("b", 11, "Ongoing"),
            ("c", 12, "Empty"),
        ]
        assert merged.error_code == 0


@trio_test
async def test_transactions_list_sends_the_filters_and_reports_unknown_states():
    b1, b2 = _cluster(2)
    for b in (b1, b2):
        b.handlers[LIST_TRANSACTIONS] = _listing(("x", 7, "Ongoing"), ("y", 8, "Ongoing"))
    async with running(b1, b2), _client(b1) as client:
        merged = await txn.list_transactions(
            client, states=["Ongoing", "Sleeping"], producer_ids=[8], duration_filter_ms=5000
        )
        assert [t.transactional_id for t in merged.transaction_states] == ["y", "y"]
        assert merged.unknown_state_filters == ["Sleeping"]
        for b in (b1, b2):
            (req,) = b.requests_for(LIST_TRANSACTIONS)
            assert req.body.state_filters == ["Ongoing", "Sleeping"]
            assert req.body.producer_id_filters == [8]
            assert req.body.duration_filter == 5000


@trio_test
async def test_transactions_list_retries_a_coordinator_that_is_loading():
    (b1,) = _cluster(1)
    answer = _listing(("x", 7, "Ongoing"))
    calls = []

    async def loading_once(broker, conn, req):
        calls.append(req)
        if len(calls) == 1:
            return m.ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return await answer(broker, conn, req)

    b1.handlers[LIST_TRANSACTIONS] = loading_once
    async with running(b1), _client(b1) as client:
        merged = await txn.list_transactions(client)
        assert [t.transactional_id for t in merged.transaction_states] == ["x"]
        assert len(calls) == 2


@trio_test
async def test_transactions_list_duration_filter_needs_v1():
    (b1,) = _cluster(1, ranges={LIST_TRANSACTIONS: (0, 0)})
    b1.handlers[LIST_TRANSACTIONS] = _listing()
    async with running(b1), _client(b1) as client:
        with pytest.raises(UnsupportedVersionError):
            await txn.list_transactions(client, duration_filter_ms=1000)
        assert not b1.requests_for(LIST_TRANSACTIONS)
        await txn.list_transactions(client)  # without the filter v0 is fine
        (req,) = b1.requests_for(LIST_TRANSACTIONS)
        assert req.version == 0


# -- DescribeTransactions ------------------------------------------------------------------------


@trio_test
async def test_transactions_describe_asks_each_ids_coordinator_in_order():
    b1, b2 = _cluster(2, coordinators={"on-1": 1, "on-2": 2, "unknown": 1})
    b1.handlers[DESCRIBE_TRANSACTIONS] = _describing({"on-1": ("Ongoing", 5, {"t": [0, 1]})})
    b2.handlers[DESCRIBE_TRANSACTIONS] = _describing({"on-2": ("Empty", 6, {})})
    async with running(b1, b2), _client(b1) as client:
        response = await txn.describe_transactions(client, ["on-2", "unknown", "on-1"])
        states = response.transaction_states
        assert [s.transactional_id for s in states] == ["on-2", "unknown", "on-1"]
        assert [s.error_code for s in states] == [0, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, 0]
        assert states[0].transaction_state == "Empty" and states[0].producer_id == 6
        assert [(t.topic, t.partitions) for t in states[2].topics] == [("t", [0, 1])]
        (at_1,) = b1.requests_for(DESCRIBE_TRANSACTIONS)
        (at_2,) = b2.requests_for(DESCRIBE_TRANSACTIONS)
        assert sorted(at_1.body.transactional_ids) == ["on-1", "unknown"]
        assert at_2.body.transactional_ids == ["on-2"]


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ],
)
@trio_test
async def test_transactions_describe_finds_the_coordinator_again_after_it_moved(code):
    table = {"tx": 1}
    b1, b2 = _cluster(2, coordinators=table)

    async def moved(broker, conn, req):
        table["tx"] = 2
        R = m.DescribeTransactionsResponse
        return R(
            transaction_states=[
                R.TransactionState(transactional_id="tx", error_code=code, transaction_state="")
            ]
        )

    b1.handlers[DESCRIBE_TRANSACTIONS] = moved
    b2.handlers[DESCRIBE_TRANSACTIONS] = _describing({"tx": ("Ongoing", 5, {"t": [0]})})
    async with running(b1, b2), _client(b1) as client:
        (state,) = (await txn.describe_transactions(client, ["tx"])).transaction_states
        assert state.error_code == 0 and state.transaction_state == "Ongoing"
        assert len(b1.requests_for(DESCRIBE_TRANSACTIONS)) == 1
        assert len(b2.requests_for(DESCRIBE_TRANSACTIONS)) == 1


@trio_test
async def test_transactions_describe_gives_up_with_the_coordinator_error():
    (b1,) = _cluster(1, coordinators={"tx": ErrorCode.COORDINATOR_NOT_AVAILABLE})
    async with running(b1), _client(b1) as client:
        (state,) = (await txn.describe_transactions(client, ["tx"], attempts=3)).transaction_states
        assert state.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert len(b1.requests_for(FIND_COORDINATOR)) == 3
        assert not b1.requests_for(DESCRIBE_TRANSACTIONS)


# -- DescribeProducers ---------------------------------------------------------------------------


@trio_test
async def test_transactions_describe_producers_asks_each_partition_leader():
    b1, b2 = _cluster(2, topics={"t": {0: 1, 1: 2, 2: 1}})
    b1.handlers[DESCRIBE_PRODUCERS] = _producers({("t", 0): [(100, 42)], ("t", 2): [(101, -1)]})
    b2.handlers[DESCRIBE_PRODUCERS] = _producers({("t", 1): [(102, 7)]})
    async with running(b1, b2), _client(b1) as client:
        response = await txn.describe_producers(client, "t", [2, 1, 0])
        (topic,) = response.topics
        assert topic.name == "t"
        assert [
            (
                p.partition_index,
                [(s.producer_id, s.current_txn_start_offset) for s in p.active_producers],
            )
            for p in topic.partitions
        ] == [(2, [(101, -1)]), (1, [(102, 7)]), (0, [(100, 42)])]
        (at_1,) = b1.requests_for(DESCRIBE_PRODUCERS)
        assert [(t.name, sorted(t.partition_indexes)) for t in at_1.body.topics] == [("t", [0, 2])]
        (at_2,) = b2.requests_for(DESCRIBE_PRODUCERS)
        assert [(t.name, t.partition_indexes) for t in at_2.body.topics] == [("t", [1])]


@trio_test
async def test_transactions_describe_producers_follows_a_leader_that_moved():
    topics = {"t": {0: 1}}
    b1, b2 = _cluster(2, topics=topics)

    async def not_leader(broker, conn, req):
        topics["t"][0] = 2  # the next Metadata names broker 2
        return await _producers({}, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)(broker, conn, req)

    b1.handlers[DESCRIBE_PRODUCERS] = not_leader
    b2.handlers[DESCRIBE_PRODUCERS] = _producers({("t", 0): [(5, 3)]})
    async with running(b1, b2), _client(b1) as client:
        answers = await txn.describe_producers_of(client, [("t", 0)])
        assert answers[("t", 0)].error_code == 0
        assert [s.producer_id for s in answers[("t", 0)].active_producers] == [5]
        assert len(b1.requests_for(DESCRIBE_PRODUCERS)) == 1
        assert len(b2.requests_for(DESCRIBE_PRODUCERS)) == 1


@trio_test
async def test_transactions_describe_producers_of_a_given_broker_is_not_rerouted():
    b1, b2 = _cluster(2, topics={"t": {0: 1}})
    b2.handlers[DESCRIBE_PRODUCERS] = _producers({}, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    async with running(b1, b2), _client(b1) as client:
        answers = await txn.describe_producers_of(client, [("t", 0)], broker_id=2)
        assert answers[("t", 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert not b1.requests_for(DESCRIBE_PRODUCERS)
        assert len(b2.requests_for(DESCRIBE_PRODUCERS)) == 1


@trio_test
async def test_transactions_find_open_transaction_matches_the_start_offset():
    (b1,) = _cluster(1, topics={"t": {0: 1}})
    b1.handlers[DESCRIBE_PRODUCERS] = _producers({("t", 0): [(100, -1), (101, 40), (102, 77)]})
    async with running(b1), _client(b1) as client:
        found = await txn.find_open_transaction(client, "t", 0, 40)
        assert found is not None and found.producer_id == 101
        assert await txn.find_open_transaction(client, "t", 0, 41) is None


@trio_test
async def test_transactions_find_open_transaction_raises_the_partition_error():
    (b1,) = _cluster(1, topics={"t": {0: 1}})
    b1.handlers[DESCRIBE_PRODUCERS] = _producers(
        {}, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    async with running(b1), _client(b1) as client:
        with pytest.raises(KafkaError) as err:
            await txn.find_open_transaction(client, "t", 0, 0)
        assert err.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- WriteTxnMarkers (abort) ---------------------------------------------------------------------


@trio_test
async def test_transactions_abort_sends_an_abort_marker_to_the_leader():
    b1, b2 = _cluster(2, topics={"t": {0: 2}})
    b2.handlers[WRITE_TXN_MARKERS] = _markers()
    async with running(b1, b2), _client(b1) as client:
        response = await txn.abort_transaction(client, "t", 0, 4000, 3, -1)
        assert txn.write_txn_markers_error(response) == 0
        assert not b1.requests_for(WRITE_TXN_MARKERS)
        (req,) = b2.requests_for(WRITE_TXN_MARKERS)
        (marker,) = req.body.markers
        assert marker.producer_id == 4000 and marker.producer_epoch == 3
        assert marker.transaction_result is False, "ABORT"
        assert marker.coordinator_epoch == 0, "-1 (no marker yet) is sent as 0"
        assert [(t.name, t.partition_indexes) for t in marker.topics] == [("t", [0])]


@trio_test
async def test_transactions_abort_follows_a_leader_that_moved_and_returns_other_errors():
    topics = {"t": {0: 1}}
    b1, b2 = _cluster(2, topics=topics)

    async def moved(broker, conn, req):
        topics["t"][0] = 2
        return await _markers(ErrorCode.NOT_LEADER_OR_FOLLOWER)(broker, conn, req)

    b1.handlers[WRITE_TXN_MARKERS] = moved
    b2.handlers[WRITE_TXN_MARKERS] = _markers(ErrorCode.INVALID_PRODUCER_EPOCH)
    async with running(b1, b2), _client(b1) as client:
        response = await txn.abort_transaction(client, "t", 0, 4000, 3, 5)
        assert txn.write_txn_markers_error(response) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert b2.requests_for(WRITE_TXN_MARKERS)[0].body.markers[0].coordinator_epoch == 5


@trio_test
async def test_transactions_abort_needs_a_broker_offering_write_txn_markers():
    (b1,) = _cluster(1, topics={"t": {0: 1}})
    b1.api_ranges.pop(WRITE_TXN_MARKERS)
    async with running(b1), _client(b1) as client:
        with pytest.raises(UnsupportedVersionError):
            await txn.abort_transaction(client, "t", 0, 1, 0, 0)
