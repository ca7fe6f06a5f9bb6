"""The group helpers: FindCoordinator first, requests at the coordinator, retries when it moved,
and the bodies they build for each version."""

import struct

import pytest

from kcore.client import KafkaClient, UnsupportedVersionError, groups
from kcore.protocol import APIS
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

from .fake_broker import FakeBroker, running, trio_test

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS = 10, 8, 9, 16
DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 42, 47


def _cluster(n=2, topics=None, ranges=None, coordinators=None):
    """``n`` fake brokers; FindCoordinator names ``coordinators[group]`` (default: the last)."""
    ids = {}  # one topic id per topic in the whole cluster
    brokers = [FakeBroker(node_id=i + 1, topics=topics or {}, topic_ids=ids) for i in range(n)]
    table = coordinators if coordinators is not None else {}

    async def find(broker, conn, req):
        R = m.FindCoordinatorResponse
        by_id = {b.node_id: b for b in brokers}

        def answer(key):
            node = table.get(key, brokers[-1].node_id)
            if isinstance(node, ErrorCode):
                return None, node
            return by_id[node], 0

        if req.version >= 4:
            out = []
            for key in req.body.coordinator_keys:
                b, code = answer(key)
                out.append(
                    R.Coordinator(
                        key=key,
                        node_id=b.node_id if b else -1,
                        host="127.0.0.1",
                        port=b.port if b else -1,
                        error_code=code,
                    )
                )
            return R(coordinators=out)
        b, code = answer(req.body.key)
        return R(
            error_code=code,
            node_id=b.node_id if b else -1,
            host="127.0.0.1",
            port=b.port if b else -1,
        )

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


def _fetch_answer(committed):
    """An OffsetFetch handler answering ``committed[(topic, p)]`` (else -1) at any version."""

    async def handler(broker, conn, req):
        R = m.OffsetFetchResponse
        if req.version >= 8:
            (g,) = req.body.groups
            wanted = (
                {t.name or _name(broker, t.topic_id): t.partition_indexes for t in g.topics}
                if g.topics is not None
                else _by_topic(committed)
            )
            return R(
                groups=[
                    R.OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        topics=[
                            R.OffsetFetchResponseTopics(
                                name=t,
                                topic_id=broker.topic_ids.get(t),
                                partitions=[
                                    R.OffsetFetchResponsePartitions(
                                        partition_index=p,
                                        committed_offset=committed.get((t, p), -1),
                                    )
                                    for p in ps
                                ],
                            )
                            for t, ps in wanted.items()
                        ],
                    )
                ]
            )
        wanted = (
            {t.name: t.partition_indexes for t in req.body.topics}
            if req.body.topics is not None
            else _by_topic(committed)
        )
        return R(
            topics=[
                R.OffsetFetchResponseTopic(
                    name=t,
                    partitions=[
                        R.OffsetFetchResponsePartition(
                            partition_index=p, committed_offset=committed.get((t, p), -1)
                        )
                        for p in ps
                    ],
                )
                for t, ps in wanted.items()
            ]
        )

    return handler


def _name(broker, topic_id):
    return next(n for n, i in broker.topic_ids.items() if i == topic_id)


def _by_topic(tps):
    out = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return out


# -- FindCoordinator -----------------------------------------------------------------------------


@pytest.mark.parametrize("max_version, batched", [(6, True), (4, True), (3, False), (0, False)])
@trio_test
async def test_groups_find_coordinator_batches_keys_from_v4_and_asks_one_by_one_before(
    max_version, batched
):
    b1, b2 = _cluster(2, ranges={FIND_COORDINATOR: (0, max_version)}, coordinators={"a": 1})
    async with running(b1, b2), _client(b1) as client:
        found = await groups.find_coordinators(client, ["a", "b"])
        assert {k: (c.node_id, c.port) for k, c in found.items()} == {
            "a": (1, b1.port),
            "b": (2, b2.port),
        }
        seen = b1.requests_for(FIND_COORDINATOR) + b2.requests_for(FIND_COORDINATOR)
        assert {s.version for s in seen} == {max_version}
        if batched:
            (req,) = seen
            assert req.body.coordinator_keys == ["a", "b"]
        else:
            assert [s.body.key for s in seen] == ["a", "b"]
        one = await groups.find_coordinator(client, "a")
        assert one == groups.Coordinator("a", 1, "127.0.0.1", b1.port)
        assert one.address == ("127.0.0.1", b1.port)


@trio_test
async def test_groups_find_coordinator_raises_the_answers_error():
    (b1,) = _cluster(1, coordinators={"g": ErrorCode.COORDINATOR_NOT_AVAILABLE})
    async with running(b1), _client(b1) as client:
        with pytest.raises(KafkaError) as err:
            await groups.find_coordinator(client, "g")
        assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert err.value.retriable


@trio_test
async def test_groups_find_coordinator_v0_cannot_find_transaction_coordinators():
    (b1,) = _cluster(1, ranges={FIND_COORDINATOR: (0, 0)})
    async with running(b1), _client(b1) as client:
        with pytest.raises(UnsupportedVersionError):
            await groups.find_coordinator(client, "tx", groups.CoordinatorType.TRANSACTION)


# -- OffsetFetch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [10, 9, 8, 7, 2])
@trio_test
async def test_groups_offset_fetch_asks_the_coordinator_in_the_form_of_its_version(max_version):
    topics = {"t": {0: 1, 1: 1}}
    b1, b2 = _cluster(2, topics, ranges={OFFSET_FETCH: (0, max_version)})
    b2.handlers[OFFSET_FETCH] = _fetch_answer({("t", 0): 5, ("t", 1): 7})
    async with running(b1, b2), _client(b1) as client:
        response = await groups.offset_fetch(client, "g", [("t", 1)])
        assert {
            tp: p.committed_offset for tp, p in groups.offset_fetch_partitions(response).items()
        } == {("t", 1): 7}
        everything = await groups.offset_fetch(client, "g")
        assert {
            tp: p.committed_offset for tp, p in groups.offset_fetch_partitions(everything).items()
        } == {("t", 0): 5, ("t", 1): 7}
        assert not b1.requests_for(OFFSET_FETCH), "sent to the coordinator only"
        first, second = b2.requests_for(OFFSET_FETCH)
        assert first.version == max_version
        if max_version >= 8:
            (g,) = first.body.groups
            assert g.group_id == "g"
            (t,) = g.topics
            assert t.partition_indexes == [1]
            if max_version >= 10:
                assert t.topic_id == b1.topic_ids["t"]
            else:
                assert t.name == "t"
            assert second.body.groups[0].topics is None
        else:
            assert first.body.group_id == "g"
            assert [(t.name, t.partition_indexes) for t in first.body.topics] == [("t", [1])]
            assert second.body.topics is None


@trio_test
async def test_groups_offset_fetch_of_all_partitions_needs_v2():
    b1, b2 = _cluster(2, ranges={OFFSET_FETCH: (0, 1)})
    b2.handlers[OFFSET_FETCH] = _fetch_answer({})
    async with running(b1, b2), _client(b1) as client:
        with pytest.raises(UnsupportedVersionError):
            await groups.offset_fetch(client, "g")
        assert not b2.requests_for(OFFSET_FETCH)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ],
)
@trio_test
async def test_groups_offset_fetch_finds_the_coordinator_again_after_a_coordinator_error(code):
    table = {"g": 1}
    b1, b2 = _cluster(2, {"t": {0: 1}}, coordinators=table)
    answer = _fetch_answer({("t", 0): 3})

    async def moved(broker, conn, req):
        table["g"] = 2  # the group moved to broker 2
        R = m.OffsetFetchResponse
        return R(groups=[R.OffsetFetchResponseGroup(group_id="g", error_code=code)])

    b1.handlers[OFFSET_FETCH] = moved
    b2.handlers[OFFSET_FETCH] = answer
    async with running(b1, b2), _client(b1) as client:
        response = await groups.offset_fetch(client, "g", [("t", 0)])
        assert groups.offset_fetch_partitions(response)[("t", 0)].committed_offset == 3
        finds = b1.requests_for(FIND_COORDINATOR) + b2.requests_for(FIND_COORDINATOR)
        assert len(finds) == 2
        assert len(b1.requests_for(OFFSET_FETCH)) == 1
        assert len(b2.requests_for(OFFSET_FETCH)) == 1


@trio_test
async def test_groups_offset_fetch_gives_up_after_its_attempts_with_the_last_error():
    (b1,) = _cluster(1, coordinators={"g": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
    async with running(b1), _client(b1) as client:
        with pytest.raises(KafkaError) as err:
            await groups.offset_fetch(client, "g", attempts=3)
        assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert len(b1.requests_for(FIND_COORDINATOR)) == 3


@trio_test
async def test_groups_offset_fetch_returns_other_group_errors_without_retrying():
    async def unknown(broker, conn, req):
        R = m.OffsetFetchResponse
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return R(groups=[R.OffsetFetchResponseGroup(group_id="g", error_code=code)])

    (b1,) = _cluster(1)
    b1.handlers[OFFSET_FETCH] = unknown
    async with running(b1), _client(b1) as client:
        response = await groups.offset_fetch(client, "g")
        assert response.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert len(b1.requests_for(OFFSET_FETCH)) == 1


# -- OffsetCommit --------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [10, 9, 7, 2, 1, 0])
@trio_test
async def test_groups_offset_commit_is_a_simple_commit_at_the_coordinator(max_version):
    async def commit(broker, conn, req):
        R = m.OffsetCommitResponse
        return R(
            topics=[
                R.OffsetCommitResponseTopic(
                    name=t.name,
                    topic_id=t.topic_id,
                    partitions=[
                        R.OffsetCommitResponsePartition(partition_index=p.partition_index)
                        for p in t.partitions
                    ],
                )
                for t in req.body.topics
            ]
        )

    b1, b2 = _cluster(2, {"t": {0: 1, 1: 1}}, ranges={OFFSET_COMMIT: (0, max_version)})
    b2.handlers[OFFSET_COMMIT] = commit
    async with running(b1, b2), _client(b1) as client:
        response = await groups.offset_commit(client, "g", {("t", 0): 10, ("t", 1): 20})
        assert [(t.name, [p.error_code for p in t.partitions]) for t in response.topics] == [
            ("t", [0, 0])
        ]
        (seen,) = b2.requests_for(OFFSET_COMMIT)
        assert seen.version == max_version
        body = seen.body
        assert body.group_id == "g"
        if max_version >= 1:
            assert (body.generation_id_or_member_epoch, body.member_id) == (-1, "")
        (t,) = body.topics
        if max_version >= 10:
            assert t.topic_id == b1.topic_ids["t"]
        else:
            assert t.name == "t"
        assert [(p.partition_index, p.committed_offset) for p in t.partitions] == [
            (0, 10),
            (1, 20),
        ]


@trio_test
async def test_groups_offset_commit_retries_a_partition_level_not_coordinator():
    calls = []

    async def commit(broker, conn, req):
        calls.append(req)
        R = m.OffsetCommitResponse
        code = ErrorCode.NOT_COORDINATOR if len(calls) == 1 else 0
        return R(
            topics=[
                R.OffsetCommitResponseTopic(
                    name="t", partitions=[R.OffsetCommitResponsePartition(error_code=code)]
                )
            ]
        )

    (b1,) = _cluster(1, {"t": {0: 1}}, ranges={OFFSET_COMMIT: (0, 9)})
    b1.handlers[OFFSET_COMMIT] = commit
    async with running(b1), _client(b1) as client:
        response = await groups.offset_commit(client, "g", {("t", 0): 1}, 4, "member-1")
        assert response.topics[0].partitions[0].error_code == 0
        assert len(calls) == 2
        assert calls[-1].body.generation_id_or_member_epoch == 4
        assert calls[-1].body.member_id == "member-1"


# -- DescribeGroups / DeleteGroups / ListGroups / OffsetDelete ---------------------------------


@trio_test
async def test_groups_describe_groups_splits_by_coordinator_and_merges_in_order():
    async def describe(broker, conn, req):
        R = m.DescribeGroupsResponse
        return R(
            groups=[
                R.DescribedGroup(
                    group_id=g, group_state="Stable", protocol_data=f"on-{broker.node_id}"
                )
                for g in req.body.groups
            ]
        )

    b1, b2 = _cluster(2, coordinators={"a": 1, "b": 2, "c": 1})
    for b in (b1, b2):
        b.handlers[DESCRIBE_GROUPS] = describe
    async with running(b1, b2), _client(b1) as client:
        response = await groups.describe_groups(client, ["c", "b", "a"])
        assert [(g.group_id, g.protocol_data) for g in response.groups] == [
            ("c", "on-1"),
            ("b", "on-2"),
            ("a", "on-1"),
        ]
        assert b1.requests_for(DESCRIBE_GROUPS)[0].body.groups == ["c", "a"]
        assert b2.requests_for(DESCRIBE_GROUPS)[0].body.groups == ["b"]


@trio_test
async def test_groups_describe_groups_retries_only_the_groups_whose_coordinator_moved():
    table = {"a": 1, "b": 1}

    async def describe(broker, conn, req):
        R = m.DescribeGroupsResponse
        out = []
        for g in req.body.groups:
            if g == "b" and broker.node_id == 1:
                table["b"] = 2
                out.append(R.DescribedGroup(group_id=g, error_code=ErrorCode.NOT_COORDINATOR))
            else:
                out.append(R.DescribedGroup(group_id=g, group_state="Empty"))
        return R(groups=out)

    b1, b2 = _cluster(2, coordinators=table)
    for b in (b1, b2):
        b.handlers[DESCRIBE_GROUPS] = describe
    async with running(b1, b2), _client(b1) as client:
        response = await groups.describe_groups(client, ["a", "b"])
        assert [(g.group_id, g.error_code, g.group_state) for g in response.groups] == [
            ("a", 0, "Empty"),
            ("b", 0, "Empty"),
        ]
        assert [s.body.groups for s in b1.requests_for(DESCRIBE_GROUPS)] == [["a", "b"]]
        assert [s.body.groups for s in b2.requests_for(DESCRIBE_GROUPS)] == [["b"]]


@trio_test
async def test_groups_describe_groups_reports_a_coordinator_never_found_as_the_groups_error():
    async def describe(broker, conn, req):
        R = m.DescribeGroupsResponse
        return R(groups=[R.DescribedGroup(group_id=g) for g in req.body.groups])

    (b1,) = _cluster(1, coordinators={"gone": ErrorCode.COORDINATOR_NOT_AVAILABLE})
    b1.handlers[DESCRIBE_GROUPS] = describe
    async with running(b1), _client(b1) as client:
        response = await groups.describe_groups(client, ["ok", "gone"], attempts=2)
        assert [(g.group_id, g.error_code) for g in response.groups] == [
            ("ok", 0),
            ("gone", ErrorCode.COORDINATOR_NOT_AVAILABLE),
        ]


@trio_test
async def test_groups_delete_groups_returns_non_empty_group_without_retrying():
    async def delete(broker, conn, req):
        R = m.DeleteGroupsResponse
        return R(
            results=[
                R.DeletableGroupResult(
                    group_id=g, error_code=ErrorCode.NON_EMPTY_GROUP if g == "busy" else 0
                )
                for g in req.body.groups_names
            ]
        )

    b1, b2 = _cluster(2)
    b2.handlers[DELETE_GROUPS] = delete
    async with running(b1, b2), _client(b1) as client:
        response = await groups.delete_groups(client, ["idle", "busy"])
        assert [(r.group_id, r.error_code) for r in response.results] == [
            ("idle", 0),
            ("busy", ErrorCode.NON_EMPTY_GROUP),
        ]
        assert len(b2.requests_for(DELETE_GROUPS)) == 1


@trio_test
async def test_groups_list_groups_asks_every_broker_and_merges():
    async def listing(broker, conn, req):
        R = m.ListGroupsResponse
        return R(
            groups=[
                R.ListedGroup(
                    group_id=f"g{broker.node_id}", protocol_type="consumer", group_state="Empty"
                )
            ]
        )

    b1, b2 = _cluster(2)
    for b in (b1, b2):
        b.handlers[LIST_GROUPS] = listing
    async with running(b1, b2), _client(b1) as client:
        response = await groups.list_groups(client, states_filter=["Empty"])
        assert sorted(g.group_id for g in response.groups) == ["g1", "g2"]
        assert b1.requests_for(LIST_GROUPS)[0].body.states_filter == ["Empty"]
        one = await groups.list_groups(client, target=2)
        assert [g.group_id for g in one.groups] == ["g2"]


@trio_test
async def test_groups_list_groups_cannot_filter_states_before_v4():
    (b1,) = _cluster(1, ranges={LIST_GROUPS: (0, 3)})
    async with running(b1), _client(b1) as client:
        with pytest.raises(UnsupportedVersionError):
            await groups.list_groups(client, states_filter=["Stable"])


@trio_test
async def test_groups_offset_delete_goes_to_the_coordinator_and_returns_the_groups_error():
    async def delete(broker, conn, req):
        return m.OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND)

    b1, b2 = _cluster(2)
    b2.handlers[OFFSET_DELETE] = delete
    async with running(b1, b2), _client(b1) as client:
        response = await groups.offset_delete(client, "g", [("t", 0), ("t", 2), ("u", 1)])
        assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        (seen,) = b2.requests_for(OFFSET_DELETE)
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in seen.body.topics] == [
            ("t", [0, 2]),
            ("u", [1]),
        ]


# -- the consumer protocol -----------------------------------------------------------------------


def test_groups_decode_assignment_reads_every_version_and_tolerates_newer_ones():
    A = m.ConsumerProtocolAssignment
    body = A(assigned_partitions=[A.TopicPartition(topic="t", partitions=[0, 2])])
    for version in range(4):
        data = struct.pack(">h", version) + body.encode(version)
        assert groups.decode_assignment(data) == {"t": [0, 2]}
    newer = struct.pack(">h", 9) + body.encode(3) + b"future fields"
    assert groups.decode_assignment(newer) == {"t": [0, 2]}
    assert groups.decode_assignment(b"") == {}


def test_groups_decode_subscription_reads_the_topics():
    S = m.ConsumerProtocolSubscription
    data = struct.pack(">h", 1) + S(topics=["a", "b"]).encode(1)
    assert groups.decode_subscription(data) == ["a", "b"]
    assert groups.decode_subscription(None) == []
