"""A follower's replica fetcher against a leader's replica manager, in one process: real logs on
disk, the real handler (kcore.replica.follower) and fetcher framework, an endpoint that calls
the leader's ``ReplicaManager.fetch`` as the Fetch handler does (no sockets).

What it shows: batches copied byte for byte with the leader's HW following; after a leader
change the old leader truncates what only it had, by the diverging epoch, before it copies the
new leader's records; out of range above the leader's end truncates to it (an unclean
leader), below its log start restarts the log there.
"""

from __future__ import annotations

import time
import uuid

import trio

from kcore.log.config import LogConfig
from kcore.log.log_manager import LogManager
from kcore.log.log_reads import FetchIsolation
from kcore.protocol.errors import KafkaError
from kcore.replica.fetch_state import PartitionResponse
from kcore.replica.fetch_wire import ListOffsetsMixin
from kcore.replica.fetcher import FetcherManager
from kcore.replica.follower import FollowerFetchers, FollowerPartitionHandler, LocalLeaders
from kcore.replica.partition import FetchParams, PartitionState
from kcore.replica.replica_manager import PartitionChanges, ReplicaManager
from tests.client.fake_broker import trio_test
from tests.server.batches import producer_batch

T0 = 1_700_000_000_000
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
TOPIC, TID = "orders", uuid.UUID(int=7)
TP = (TOPIC, 0)


def replica_manager(tmp_path, node_id: int) -> ReplicaManager:
    logs = LogManager([tmp_path / f"logs-{node_id}"], lambda topic: LogConfig.from_layers({}))
    logs.format(CLUSTER, node_id)
    logs.startup(T0)
    return ReplicaManager(node_id, logs)


class Endpoint(ListOffsetsMixin):
    """A leader reached by calling its replica manager, as the Fetch handler would."""

    supports_last_fetched_epoch = True

    def __init__(self, brokers: dict, leader_id: int, follower_id: int) -> None:
        self.leader = brokers[leader_id]
        self.follower_id = follower_id

    async def fetch(self, plan):
        await trio.sleep(0.001)
        out = {}
        for req in plan.partitions:
            params = FetchParams(
                fetch_offset=req.fetch_offset,
                max_bytes=req.partition_max_bytes,
                isolation=FetchIsolation.LOG_END,
                current_leader_epoch=req.current_leader_epoch,
                last_fetched_epoch=req.last_fetched_epoch,
                replica_id=self.follower_id,
                now_ms=T0,
            )
            try:
                result = self.leader.fetch(req.topic, req.partition, params)
            except KafkaError as e:
                out[(req.topic, req.partition)] = PartitionResponse(error_code=int(e.code))
                continue
            out[(req.topic, req.partition)] = PartitionResponse(
                high_watermark=result.high_watermark,
                log_start_offset=result.log_start_offset,
                records=b"".join(bytes(s.read()) for s in result.info.records),
                diverging_epoch=result.diverging_epoch,
            )
        return out

    async def _list_offset(self, tp, leader_epoch, timestamp):
        partition = self.leader.partition_or_error(*tp)
        return partition.log_end_offset if timestamp == -1 else partition.log_start_offset

    async def epoch_end_offsets(self, partitions):
        raise AssertionError("the fetchers truncate on fetch")

    async def aclose(self):
        pass


def state(leader: int, epoch: int, isr=(1, 2)) -> PartitionState:
    return PartitionState(leader, epoch, epoch, (1, 2), tuple(isr))


def host(brokers, st: PartitionState) -> None:
    for rm in brokers.values():
        rm.apply_partition(TOPIC, TID, 0, st, T0)


def produce(rm: ReplicaManager, *values: bytes) -> None:
    now = int(time.time() * 1000)  # the batch is stamped now: the validator checks it
    rm.append_records(TOPIC, 0, producer_batch(values), required_acks=1, now_ms=now)


def log_bytes(rm: ReplicaManager) -> bytes:
    plog = rm.partitions[TP].log
    info = plog.read(plog.log_start_offset, 1 << 24, FetchIsolation.LOG_END)
    return b"".join(bytes(s.read()) for s in info.records)


async def until(predicate) -> None:
    with trio.fail_after(30):
        while not predicate():
            await trio.sleep(0.005)


class Follower:
    """One broker's replica fetchers, as the broker wires them."""

    def __init__(self, brokers, node_id: int, nursery) -> None:
        rm = brokers[node_id]
        self.handler = FollowerPartitionHandler(rm, now_ms=lambda: T0)
        self.manager = FetcherManager(
            f"replica-{node_id}",
            lambda leader, number: Endpoint(brokers, leader, node_id),
            self.handler,
            LocalLeaders(rm),
        )
        self.listener = FollowerFetchers(rm, self.manager)
        self.rm = rm
        self.nursery = nursery

    async def start(self) -> None:
        await self.nursery.start(self.manager.run)

    def follow(self) -> None:
        """What the broker's listener hears after the metadata made ``TP`` follow here."""
        self.listener(PartitionChanges(followers=[self.rm.partitions[TP]]))


@trio_test
async def test_a_follower_copies_the_leader_and_truncates_by_the_diverging_epoch(tmp_path):
    brokers = {1: replica_manager(tmp_path, 1), 2: replica_manager(tmp_path, 2)}
    async with trio.open_nursery() as nursery:
        f1, f2 = Follower(brokers, 1, nursery), Follower(brokers, 2, nursery)
        await f1.start()
        await f2.start()
        host(brokers, state(leader=1, epoch=0))
        f2.follow()
        produce(brokers[1], b"a", b"b")
        produce(brokers[1], b"c")
        await until(lambda: log_bytes(brokers[2]) == log_bytes(brokers[1]))
        leader = brokers[1].partitions[TP]
        await until(lambda: leader.high_watermark == 3)
        await until(lambda: brokers[2].partitions[TP].high_watermark == 3)

        # Broker 2 stops copying; broker 1 writes what only it will have (epoch 0, 3..5).
        f2.manager.remove_fetcher_for_partitions([TP])
        produce(brokers[1], b"lost-1", b"lost-2")
        produce(brokers[1], b"lost-3")
        assert brokers[1].partitions[TP].log_end_offset == 6
        # Leader change: 2 leads at epoch 1 and writes its own records from 3.
        host(brokers, state(leader=2, epoch=1, isr=(2,)))
        f1.follow()
        produce(brokers[2], b"new-1")
        produce(brokers[2], b"new-2", b"new-3", b"new-4")
        await until(lambda: log_bytes(brokers[1]) == log_bytes(brokers[2]))
        old = brokers[1].partitions[TP]
        assert old.log_end_offset == 7 and old.latest_epoch == 1
        assert old.end_offset_for_epoch(0) == (0, 3)  # epoch 0 ends where the two agreed
        nursery.cancel_scope.cancel()


@trio_test
async def test_out_of_range_above_the_leaders_end_truncates_and_below_its_start_restarts(
    tmp_path,
):
    brokers = {1: replica_manager(tmp_path, 1), 2: replica_manager(tmp_path, 2)}
    host(brokers, state(leader=1, epoch=0, isr=(1,)))
    produce(brokers[1], b"a", b"b", b"c")
    handler = FollowerPartitionHandler(brokers[2], now_ms=lambda: T0)
    endpoint = Endpoint(brokers, 1, 2)
    follower = brokers[2].partitions[TP]
    # The follower has more than the leader (an unclean election made a lagging leader).
    brokers[2].partitions[TP].make_leader(state(leader=2, epoch=0), T0)
    for value in (b"x", b"y", b"z", b"w", b"v"):  # one batch each: 3 is a batch boundary
        produce(brokers[2], value)
    brokers[2].partitions[TP].make_follower(state(leader=1, epoch=0, isr=(1,)))
    action = await handler.resolve_out_of_range(TP, 5, endpoint, 0)
    assert action.truncate_to == 3 and follower.log_end_offset == 3
    # The leader deleted records below 2; a follower restarting from 0 is told out of range
    # from below and restarts empty at the leader's log start offset.
    brokers[1].partitions[TP].delete_records(2, T0)
    follower.truncate_fully_and_start_at(0, T0)
    action = await handler.resolve_out_of_range(TP, 0, endpoint, 0)
    assert action.restart_at == 2
    assert (follower.log_start_offset, follower.log_end_offset) == (2, 2)


@trio_test
async def test_a_follower_with_an_epoch_above_every_epoch_of_its_leader_truncates(tmp_path):
    # A cluster mirror's destination: the leader's log holds only the source's epochs (0
    # here), a follower has a batch at a higher epoch the leader does not have (the failover's
    # markers at the bumped epoch, before a Start copied the source again). The leader names
    # its latest epoch, ending at its log end, and the follower cuts its batch.
    brokers = {1: replica_manager(tmp_path, 1), 2: replica_manager(tmp_path, 2)}
    async with trio.open_nursery() as nursery:
        f2 = Follower(brokers, 2, nursery)
        await f2.start()
        host(brokers, state(leader=1, epoch=0))
        f2.follow()
        produce(brokers[1], b"a", b"b")
        await until(lambda: log_bytes(brokers[2]) == log_bytes(brokers[1]))
        f2.manager.remove_fetcher_for_partitions([TP])
        # Broker 2 led at epoch 5 for one batch that broker 1 never got; 1 leads again at 6
        # without writing (its cache still ends at epoch 0).
        brokers[2].partitions[TP].make_leader(state(leader=2, epoch=5), T0)
        produce(brokers[2], b"only-on-2")
        assert brokers[2].partitions[TP].latest_epoch == 5
        host(brokers, state(leader=1, epoch=6))
        f2.follow()
        await until(lambda: brokers[2].partitions[TP].log_end_offset == 2)
        produce(brokers[1], b"c")
        await until(lambda: log_bytes(brokers[2]) == log_bytes(brokers[1]))
        nursery.cancel_scope.cancel()
