"""The mirror partitions' batched ops (``kcore.mirror.partition_ops``): many drivers' requests
of one kind become one, every answer reaches its own driver, and one partition's refusal fails
that partition alone. The coalescer and the ops under Trio with in-test drivers and a
coordinator double; then two real clusters starting and restarting 100 mirror partitions."""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import Producer
from trio.testing import MockClock

from kcore.mirror.coordinator import PartitionMirrorState
from kcore.mirror.events import OpCompleted, OpFailed, PersistedState, StateLoaded
from kcore.mirror.partition_ops import Coalescer, MirrorPartitionOps
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.testing import MirroredClusters
from tests.client.fake_broker import trio_test

from .clusters import wait_until

S = MirrorPartitionState


# -- the coalescer ----------------------------------------------------------------------------


async def _coalesce(submissions, *, max_batch=100, key=None, failing=()):
    """Run a Coalescer: ``submissions`` is a list of item lists, each submitted in one pass of
    the loop, the next once the previous batch has started. Returns (batches, failed)."""
    batches, failed, started = [], [], trio.Event()

    async def run(batch):
        batches.append(batch)
        started.set()
        await trio.sleep(0.01)
        if set(batch) & set(failing):
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "moved")

    def fail(batch, e):
        failed.append((batch, e.code))

    coalescer = Coalescer("test", run, fail, max_batch=max_batch, key=key)
    async with trio.open_nursery() as nursery:
        for items in submissions:
            started = trio.Event()
            for item in items:
                coalescer.submit(nursery, item)
            await started.wait()
    return batches, failed


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_coalescer_one_batch_for_what_is_submitted_in_one_pass():
    batches, failed = await _coalesce([list(range(50))])
    assert batches == [list(range(50))] and not failed


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_coalescer_what_arrives_during_a_batch_is_the_next_batch():
    batches, _ = await _coalesce([[1], [2, 3, 4], [5]])
    assert batches == [[1], [2, 3, 4], [5]]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_coalescer_batches_hold_at_most_max_batch_items_in_order():
    batches, _ = await _coalesce([list(range(7))], max_batch=3)
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_coalescer_equal_keys_never_share_a_batch_and_keep_their_order():
    items = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)]
    batches, _ = await _coalesce([items], key=lambda item: item[0])
    assert batches == [[("a", 1), ("b", 1), ("c", 1)], [("a", 2)], [("a", 3)]]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_coalescer_a_failed_batch_is_answered_by_fail_and_the_next_still_runs():
    batches, failed = await _coalesce([[1, 2], [3]], failing=[1])
    assert batches == [[1, 2], [3]]
    assert failed == [([1, 2], ErrorCode.NOT_COORDINATOR)]


def test_coalescer_refuses_an_empty_batch_size():
    with pytest.raises(ValueError, match="max_batch"):
        Coalescer("x", None, None, max_batch=0)


# -- the ops, with in-test drivers ------------------------------------------------------------


class _Driver:
    def __init__(self, tp, leader_epoch=3):
        self.tp, self.mirror, self.leader_epoch = tp, "m", leader_epoch
        self.alive = True
        self.events = []
        self.fetch_generation = 0

    def send(self, event):
        self.events.append(event)


class _Access:
    """The coordinator: records every call; refuses writes naming a ``fenced`` partition."""

    def __init__(self, stored=None, fenced=()):
        self.stored = dict(stored or {})
        self.fenced = set(fenced)
        self.reads, self.writes = [], []

    async def read_full(self, mirror, partitions):
        partitions = list(partitions)
        self.reads.append(partitions)
        return {tp: self.stored.get(tp, PartitionMirrorState()) for tp in partitions}

    async def write_states(self, mirror, updates):
        updates = list(updates)
        self.writes.append([(u.topic, u.partition) for u in updates])
        if any((u.topic, u.partition) in self.fenced for u in updates):
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, "a former leader")


class _Manager:
    def __init__(self, nursery):
        self._nursery = nursery


async def _with_ops(access, work):
    async with trio.open_nursery() as nursery:
        ops = MirrorPartitionOps(_Manager(nursery), access)
        await work(ops)
        await trio.sleep(0.05)  # the batches run
    return ops


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_ops_reads_of_many_drivers_are_one_read_and_each_gets_its_own_state():
    stored = {("t", 1): PartitionMirrorState(S.MIRRORING, S.LOG_TRUNCATION, 0, None, 4)}
    access = _Access(stored)
    drivers = [_Driver(("t", p)) for p in range(300)]

    async def work(ops):
        for op, driver in enumerate(drivers):
            ops.read_state(driver, op)

    await _with_ops(access, work)
    assert len(access.reads) == 1 and len(access.reads[0]) == 300
    assert drivers[0].events == [StateLoaded(0, None)]
    assert drivers[1].events == [
        StateLoaded(1, PersistedState(S.MIRRORING, S.LOG_TRUNCATION, 0, 4, None))
    ]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_ops_a_fenced_write_fails_only_its_partition():
    access = _Access(fenced=[("t", 2)])
    drivers = [_Driver(("t", p)) for p in range(4)]

    async def work(ops):
        for op, driver in enumerate(drivers):
            ops.persist(driver, op, PersistedState(S.LOG_TRUNCATION))

    await _with_ops(access, work)
    # One write of all four, refused for t-2's sake; then each alone.
    assert access.writes == [[("t", p) for p in range(4)]] + [[("t", p)] for p in range(4)]
    assert [d.events for d in drivers[:2]] == [[OpCompleted(0)], [OpCompleted(1)]]
    assert [type(e) for e in drivers[2].events] == [OpFailed]
    assert drivers[2].events[0].error is ErrorCode.FENCED_LEADER_EPOCH
    assert drivers[3].events == [OpCompleted(3)]


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_ops_a_write_carries_the_drivers_leader_epoch_and_drops_ended_drivers():
    access = _Access()
    live, ended = _Driver(("t", 0), leader_epoch=7), _Driver(("t", 1))
    ended.alive = False
    written = []

    async def write_states(mirror, updates):
        written.extend(updates)

    access.write_states = write_states

    async def work(ops):
        ops.persist(live, 1, PersistedState(S.MIRRORING, S.LOG_TRUNCATION))
        ops.persist(ended, 2, PersistedState(S.MIRRORING, S.LOG_TRUNCATION))

    await _with_ops(access, work)
    assert [(u.topic, u.partition, u.leader_epoch, u.state) for u in written] == [
        ("t", 0, 7, int(S.MIRRORING))
    ]
    assert live.events == [OpCompleted(1)] and ended.events == []


class _Broker:
    """The controller (one call per BumpLeaderEpochs, ``unknown`` partitions refused) and the
    replica manager of an in-test broker."""

    def __init__(self, unknown=()):
        self.unknown = set(unknown)
        self.bumps = []
        self.config = self
        self.replica_manager = self

    def value(self, key):
        return 0

    def partition_or_error(self, topic, index):
        return _Partition(uuid.uuid5(uuid.NAMESPACE_OID, topic))

    async def controller_call(self, operation):
        return operation(self, 0)

    def bump_leader_epochs(self, request):
        asked = [(t.topic_id, p.partition_index, p.min_leader_epoch) for t in request.topics
                 for p in t.partitions]  # fmt: skip
        self.bumps.append(asked)
        R = m.BumpLeaderEpochsResponse
        return R(
            topics=[
                R.TopicPartitions(
                    topic_name=f"t{i}",
                    partitions=[
                        R.PartitionDetail(
                            partition_index=p.partition_index,
                            error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                            if (f"t{i}", p.partition_index) in self.unknown
                            else 0,
                        )
                        for p in t.partitions
                    ],
                )
                for i, t in enumerate(request.topics)
            ]
        )


class _Partition:
    def __init__(self, topic_id):
        self.topic_id = topic_id


@trio_test(clock=lambda: MockClock(autojump_threshold=0))
async def test_ops_epoch_bumps_of_many_partitions_are_one_controller_call():
    broker = _Broker(unknown=[("t1", 0)])
    drivers = [_Driver((f"t{i}", p)) for i in range(2) for p in range(3)]

    async def work(ops):
        ops.manager.broker = broker
        for op, driver in enumerate(drivers):
            ops.bump_epoch(driver, op, 10 + op)

    await _with_ops(_Access(), work)
    assert len(broker.bumps) == 1
    assert [(p, e) for _, p, e in broker.bumps[0]] == [(0, 10), (1, 11), (2, 12), (0, 13), (1, 14),
                                                       (2, 15)]  # fmt: skip
    assert [d.events for d in drivers[:3]] == [[OpCompleted(0)], [OpCompleted(1)], [OpCompleted(2)]]
    refused = drivers[3].events
    assert len(refused) == 1 and refused[0].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert drivers[4].events == [OpCompleted(4)] and drivers[5].events == [OpCompleted(5)]


# -- two real clusters --------------------------------------------------------------------------


TOPICS = [f"fleet-{i}" for i in range(4)]
PARTITIONS = 25


def _produce(cluster, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for topic in TOPICS:
        for p in range(PARTITIONS):
            for i in range(count):
                producer.produce(topic, b"%s-%d-%d" % (topic.encode(), p, i), partition=p)
    assert producer.flush(60) == 0


def _batches(cluster) -> dict[str, int]:
    ops = cluster.broker.mirror_manager.ops
    return {kind: ops.coalescer(kind, "dr").batches for kind in ("read", "write", "lme", "add")}


@pytest.mark.timeout(300)
def test_mirror_start_and_restart_of_100_partitions_take_a_few_requests_of_each_kind():
    with MirroredClusters() as dr:
        for topic in TOPICS:
            dr.source.create_topic(topic, partitions=PARTITIONS)
        _produce(dr.source, 2)
        dr.mirror_topics(*TOPICS)
        dr.wait_in_sync()
        started = _batches(dr.destination)
        # 100 partitions: each read its state, fetched its LME, wrote two transitions and
        # joined the fetcher; far fewer requests than partitions (one per pass of the loop).
        assert 1 <= started["read"] <= 10 and 1 <= started["lme"] <= 10, started
        assert 2 <= started["write"] <= 20 and 1 <= started["add"] <= 10, started

        dr.destination.restart()  # every partition resumes from its persisted MIRRORING
        wait_until(
            lambda: all(s.state == "MIRRORING" for s in dr.describe().values()),
            120,
            "MIRRORING after the restart",
        )
        _produce(dr.source, 3)
        dr.wait_in_sync()
        restarted = _batches(dr.destination)
        assert 1 <= restarted["read"] <= 10 and 1 <= restarted["add"] <= 10, restarted
        for topic in TOPICS:
            for p in range(PARTITIONS):
                log = dr.destination.broker.replica_manager.partitions[(topic, p)]
                assert log.high_watermark == 5  # no record lost or doubled by the restart
