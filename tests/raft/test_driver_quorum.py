"""The Trio driver over real sockets on 127.0.0.1: one voter, then three voters, each with its
own KafkaServer serving the controller listener, all in one ``trio.run`` on the real clock.

The state machine of every node is the list of ``(offset, value)`` it was given, by commits and
by snapshots; the properties are that every node ends with the same list, and that no value
committed (a ``wait_for_commit`` returned) is ever missing from it.
"""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from kcore.client.connection import BrokerConnection
from kcore.protocol import messages as m
from kcore.raft import NotLeaderError, QuorumRole
from kcore.raft.config import RaftConfig, VoterAddress
from kcore.raft.driver import RaftDriver, register_raft_handlers
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.snapshot_files import snapshot_file_name
from kcore.server.handlers import api_versions
from kcore.server.network import KafkaServer, ListenerSpec
from kcore.server.registry import CONTROLLER, HandlerRegistry

# Timeouts shortened from Kafka's defaults (1000 / 2000 / 2000 ms) to keep the tests quick.
FAST = dict(
    election_timeout_ms=200,
    election_backoff_max_ms=200,
    fetch_timeout_ms=500,
    request_timeout_ms=1000,
    retry_backoff_ms=20,
    fetch_max_wait_ms=200,
)
SEGMENT_BYTES = 4096


def encode_state_entry(offset: int, value: bytes) -> bytes:
    return struct.pack(">q", offset) + value


class Node:
    """One process of the test cluster: a server, a driver, and the state it applied."""

    def __init__(self, node_id: int, directory) -> None:
        self.node_id = node_id
        self.directory = directory
        self.port = 0
        self.driver: RaftDriver | None = None
        self.scope: trio.CancelScope | None = None
        self.nursery: trio.Nursery | None = None
        self.stopped = trio.Event()
        self.state: list[tuple[int, bytes]] = []
        self.snapshots_loaded: list[OffsetAndEpoch] = []
        self.leader_changes: list[tuple[int | None, int]] = []

    async def handle(self, api_key, version, body):
        return await self.driver.handle(api_key, version, body)

    def _on_commit(self, entries) -> None:
        self.state += entries

    def _on_snapshot(self, reader) -> None:
        self.snapshots_loaded.append(reader.snapshot_id)
        self.state = [(struct.unpack(">q", r[:8])[0], r[8:]) for r in reader.records()]

    async def start_server(self, parent: trio.Nursery) -> None:
        async def body(task_status=trio.TASK_STATUS_IGNORED):
            registry = HandlerRegistry()
            api_versions.register(registry)
            register_raft_handlers(registry, self.handle)
            server = KafkaServer(registry, None)
            self.stopped = trio.Event()
            try:
                with trio.CancelScope() as self.scope:
                    async with trio.open_nursery() as self.nursery:
                        listener = ListenerSpec("CONTROLLER", "127.0.0.1", self.port, CONTROLLER)
                        bound = await self.nursery.start(server.serve, [listener])
                        self.port = bound["CONTROLLER"][1]
                        task_status.started()
                        await trio.sleep_forever()
            finally:
                self.stopped.set()

        await parent.start(body)

    async def start_driver(self, config: RaftConfig) -> None:
        """A new process life: the state machine starts empty, the driver reloads the disk."""
        self.state = []
        self.driver = RaftDriver(
            self.node_id, config, self.directory, cluster_id="test", segment_bytes=SEGMENT_BYTES
        )
        self.driver.on_commit(self._on_commit)
        self.driver.on_snapshot_loaded(self._on_snapshot)
        self.driver.on_leader_change(
            lambda leader, epoch: self.leader_changes.append((leader, epoch))
        )
        await self.nursery.start(self.driver.run)

    async def kill(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()

    @property
    def up(self) -> bool:
        return self.driver is not None and self.driver.running


async def wait_until(predicate, what: str, timeout: float = 10.0) -> None:
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.005)
        return
    raise AssertionError(f"not reached within {timeout} s: {what}")


def agreed_leader(nodes: list[Node]) -> Node | None:
    """The node every running node agrees leads, or None."""
    up = [n for n in nodes if n.up]
    leaders = [n for n in up if n.driver.core.role is QuorumRole.LEADER]
    if len(leaders) != 1:
        return None
    lead = leaders[0].driver.leader_and_epoch
    if all(n.driver.leader_and_epoch == lead for n in up):
        return leaders[0]
    return None


async def commit(node: Node, values: list[bytes]) -> range:
    offsets = await node.driver.propose(values)
    await node.driver.wait_for_commit(offsets[-1], 5)
    return offsets


def config_for(nodes: list[Node]) -> RaftConfig:
    return RaftConfig(voters={n.node_id: VoterAddress("127.0.0.1", n.port) for n in nodes}, **FAST)


# -- one voter --------------------------------------------------------------------------------------


def test_driver_single_voter_elects_itself_commits_and_restarts_with_its_log(tmp_path):
    async def main():
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                node = Node(1, tmp_path)
                await node.start_server(nursery)
                config = config_for([node])
                await node.start_driver(config)
                await wait_until(lambda: node.driver.is_leader, "a lone voter leads")
                assert node.leader_changes[-1] == (1, 1)
                for i in range(50):
                    await commit(node, [b"v%d" % i, b"w%d" % i])
                assert [v for _, v in node.state][:4] == [b"v0", b"w0", b"v1", b"w1"]
                assert len(node.state) == 100
                before = list(node.state)
                epoch = node.driver.leader_and_epoch.epoch
                with pytest.raises(ValueError):
                    node.driver.create_snapshot(node.driver.high_watermark + 1, [])
                await node.kill()

                await node.start_server(nursery)
                await node.start_driver(config)
                await wait_until(lambda: node.driver.is_leader, "the lone voter leads again")
                assert node.driver.leader_and_epoch.epoch == epoch + 1
                await wait_until(lambda: len(node.state) == 100, "the log replayed")
                assert node.state == before
                offsets = await commit(node, [b"after-restart"])
                assert node.state[-1] == (offsets[0], b"after-restart")
                assert offsets[0] > before[-1][0] + 1  # a new LeaderChangeMessage in between
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_driver_single_voter_snapshot_is_reloaded_after_a_restart(tmp_path):
    async def main():
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                node = Node(1, tmp_path)
                await node.start_server(nursery)
                config = config_for([node])
                await node.start_driver(config)
                await wait_until(lambda: node.driver.is_leader, "a lone voter leads")
                for i in range(300):
                    await commit(node, [b"value-%04d" % i])
                hw = node.driver.high_watermark
                sid = node.driver.create_snapshot(
                    hw, [encode_state_entry(o, v) for o, v in node.state]
                )
                assert sid == OffsetAndEpoch(hw, 1)
                meta = node.directory / "__cluster_metadata-0"
                assert (meta / snapshot_file_name(sid)).exists()
                assert node.driver.log.start_offset == hw
                assert min(p.name for p in meta.glob("*.log")) > "00000000000000000000.log"
                await commit(node, [b"after-snapshot"])
                expected = list(node.state)
                await node.kill()

                await node.start_server(nursery)
                await node.start_driver(config)
                assert node.snapshots_loaded == [sid]
                await wait_until(lambda: node.driver.is_leader, "the lone voter leads again")
                await wait_until(lambda: len(node.state) == len(expected), "replayed")
                assert node.state == expected
                nursery.cancel_scope.cancel()

    trio.run(main)


# -- three voters ------------------------------------------------------------------------------------


def test_driver_three_voters_elect_replicate_fail_over_and_catch_up_from_a_snapshot(tmp_path):
    async def main():
        with trio.fail_after(45):
            async with trio.open_nursery() as nursery:
                nodes = [Node(i, tmp_path / f"node-{i}") for i in (1, 2, 3)]
                for node in nodes:
                    await node.start_server(nursery)
                config = config_for(nodes)
                for node in nodes:
                    await node.start_driver(config)

                # A leader is elected and known to all.
                await wait_until(lambda: agreed_leader(nodes) is not None, "a first leader")
                lead = agreed_leader(nodes)
                followers = [n for n in nodes if n is not lead]
                with pytest.raises(NotLeaderError) as info:
                    await followers[0].driver.propose([b"refused"])
                assert info.value.leader.leader_id == lead.node_id

                # 200 proposals commit, and reach every node's state machine.
                committed: list[bytes] = []
                for i in range(200):
                    await commit(lead, [b"first-%03d" % i])
                    committed.append(b"first-%03d" % i)
                hw = lead.driver.high_watermark
                await wait_until(
                    lambda: all(n.driver.applied_offset >= hw for n in nodes), "applied on all"
                )
                assert all(n.state == lead.state for n in nodes)

                # The wire: DescribeQuorum on the controller listener, Vote v2 advertised.
                async with await BrokerConnection.connect("127.0.0.1", lead.port) as conn:
                    assert conn.api_versions[52] == (0, 2)
                    described = await conn.request(
                        m.DescribeQuorumRequest(
                            topics=[
                                m.DescribeQuorumRequest.TopicData(
                                    topic_name="__cluster_metadata",
                                    partitions=[
                                        m.DescribeQuorumRequest.PartitionData(partition_index=0)
                                    ],
                                )
                            ]
                        )
                    )
                part = described.topics[0].partitions[0]
                assert (part.error_code, part.leader_id) == (0, lead.node_id)
                assert part.high_watermark >= hw
                assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]

                # The leader dies (tasks cancelled, sockets closed): a new one within a few
                # election timeouts, and proposals continue.
                old_epoch = lead.driver.leader_and_epoch.epoch
                killed_at = trio.current_time()
                await lead.kill()
                await wait_until(
                    lambda: agreed_leader(followers) is not None, "a new leader", timeout=5
                )
                failover = trio.current_time() - killed_at
                new_lead = agreed_leader(followers)
                assert new_lead.driver.leader_and_epoch.epoch > old_epoch
                assert failover < 3.0, failover
                for i in range(100):
                    await commit(new_lead, [b"second-%03d" % i])
                    committed.append(b"second-%03d" % i)

                # The new leader snapshots and drops its old log: the dead node, far behind,
                # will have to fetch the snapshot.
                snap_end = new_lead.driver.high_watermark
                sid = new_lead.driver.create_snapshot(
                    snap_end, [encode_state_entry(o, v) for o, v in new_lead.state]
                )
                dead_end = lead.driver.log.end_offset
                assert new_lead.driver.log.start_offset == snap_end > dead_end
                for i in range(20):
                    await commit(new_lead, [b"third-%03d" % i])
                    committed.append(b"third-%03d" % i)

                # It comes back from its directory, installs the snapshot, catches up.
                await lead.start_server(nursery)
                await lead.start_driver(config)
                final = new_lead.driver.high_watermark
                await wait_until(
                    lambda: lead.driver.applied_offset >= final, "the restarted node caught up"
                )
                assert lead.snapshots_loaded[-1] == sid
                assert agreed_leader(nodes) is new_lead
                for i in range(10):
                    await commit(new_lead, [b"fourth-%03d" % i])
                    committed.append(b"fourth-%03d" % i)
                hw = new_lead.driver.high_watermark
                await wait_until(
                    lambda: all(n.driver.applied_offset >= hw for n in nodes), "all caught up"
                )

                # No committed entry lost, none duplicated, the same history everywhere.
                for node in nodes:
                    assert node.state == new_lead.state, node.node_id
                    assert [v for _, v in node.state] == committed, node.node_id
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_driver_three_voters_leader_shutdown_hands_over_at_once(tmp_path):
    async def main():
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nodes = [Node(i, tmp_path / f"node-{i}") for i in (1, 2, 3)]
                for node in nodes:
                    await node.start_server(nursery)
                # A fetch timeout of ten minutes: a follower that waited it out could not
                # become leader within this test's 30 s, so a successor at all means that
                # EndQuorumEpoch named it and it campaigned at once -- no clock measured.
                voters = {n.node_id: VoterAddress("127.0.0.1", n.port) for n in nodes}
                config = RaftConfig(voters=voters, **{**FAST, "fetch_timeout_ms": 600_000})
                for node in nodes:
                    await node.start_driver(config)
                await wait_until(lambda: agreed_leader(nodes) is not None, "a first leader")
                lead = agreed_leader(nodes)
                offsets = await commit(lead, [b"before"])
                others = [n for n in nodes if n is not lead]
                await lead.driver.begin_shutdown(timeout=5)
                assert not lead.driver.running
                await wait_until(lambda: agreed_leader(others) is not None, "a successor", 20)
                assert agreed_leader(others) is not None, "no successor without a fetch timeout"
                successor = agreed_leader(others)
                await commit(successor, [b"after"])
                assert [v for o, v in successor.state if o >= offsets[0]] == [b"before", b"after"]
                nursery.cancel_scope.cancel()

    trio.run(main)


def test_driver_runs_on_a_mock_clock_and_sleeps_until_its_deadlines(tmp_path):
    """Time is trio's: under MockClock a lone voter leads at once, and an idle leader's loop
    wakes only at the core's deadlines, not in a busy loop."""

    async def main():
        config = RaftConfig(voters={1: VoterAddress("127.0.0.1", 1)})
        driver = RaftDriver(1, config, tmp_path)
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            await wait_until(lambda: driver.is_leader, "a lone voter leads")
            polls = 0
            real_poll = driver.core.poll

            def counting_poll(now):
                nonlocal polls
                polls += 1
                return real_poll(now)

            driver.core.poll = counting_poll
            start = trio.current_time()
            await trio.sleep(3600)
            assert trio.current_time() - start == pytest.approx(3600)
            # With nothing due, the core asks to be polled again after an election timeout
            # (1 s): an hour of idleness is about 3,600 polls, not a busy loop.
            assert polls <= 3600 + 10
            offsets = await driver.propose([b"x"])
            with trio.fail_after(0.001):  # virtual time: commits take none
                await driver.wait_for_commit(offsets[-1])
            await driver.begin_shutdown()
            assert not driver.running
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_driver_handlers_share_fetch_with_the_broker_listener():
    """Fetch (key 1) has a handler per listener type: the broker's partitions on BROKER, the
    Raft log on CONTROLLER."""
    from kcore.server.registry import BROKER

    registry = HandlerRegistry()

    @registry.register(1, 0, 17)
    async def broker_fetch(ctx, body):
        return None

    async def handle(api_key, version, body):
        return None

    register_raft_handlers(registry, handle)
    assert registry.get(1, BROKER).handler is broker_fetch
    assert registry.get(1, CONTROLLER).handler is not broker_fetch
    assert (1, 4, 17) in registry.advertised(CONTROLLER)
    assert (52, 0, 2) in registry.advertised(CONTROLLER)
    assert [k for k, _, _ in registry.advertised(BROKER)] == [1]
    with pytest.raises(ValueError, match="registered twice"):
        register_raft_handlers(registry, handle)


class _FakeConnection:
    def __init__(self, vote_max: int) -> None:
        self.vote_max = vote_max

    def version_for(self, api_key: int) -> int:
        return self.vote_max if api_key == 52 else 17


def test_driver_transport_never_sends_a_pre_vote_below_vote_v2():
    from kcore.raft import rpc
    from kcore.raft.transport import PeerTransport

    failures = []
    transport = PeerTransport(
        1,
        {1: VoterAddress("h", 1), 2: VoterAddress("h", 2)},
        on_response=lambda *a: None,
        on_failure=lambda *a: failures.append(a),
        request_timeout_s=1,
        connect_timeout_s=1,
    )
    peer = transport._peers[2]

    def vote(pre_vote: bool):
        return rpc.vote_request(
            "c",
            candidate_epoch=4,
            candidate_id=1,
            voter_id=2,
            last_offset=OffsetAndEpoch(10, 3),
            pre_vote=pre_vote,
        )

    assert peer._version(_FakeConnection(2), vote(True)) == 2
    assert peer._version(_FakeConnection(1), vote(True)) is None  # would become a real vote
    assert peer._version(_FakeConnection(1), vote(False)) == 1
    transport.send(3, 99, vote(False))  # not a voter: reported as failed at once
    assert failures == [(3, 99)]
