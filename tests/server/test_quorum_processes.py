"""A 3-voter metadata quorum of real ``kcore server`` processes: leader crash and rejoin.

Each node runs ``process.roles=broker,controller`` (combined mode): every node then is both a
voter of the quorum and a registered broker, so topics can be created through any surviving
node's client listener (a node that does not lead forwards the request to the active controller)
and every node's own metadata image can be read back with a Metadata request — the check that no
committed record was lost anywhere. (Controller-only nodes could not place the topics' replicas
without a separate broker.)

Scenario: start three nodes on loopback (ports chosen up front), wait for a leader, create
topics, ``kill -9`` the Raft leader (found with DescribeQuorum), check that a new leader is
elected and topic creation continues through a survivor within a few election timeouts, restart
the killed node, and check that it catches up: every topic exists on every node.
"""

from __future__ import annotations

import time

import pytest
import trio

from kcore.client import BrokerConnection, ClientError
from kcore.protocol import messages as m
from kcore.raft.disk_log import METADATA_LOG_DIR_NAME
from kcore.testing.processes import ProcessCluster, ServerProcess, run_then_kill

pytestmark = pytest.mark.timeout(120)

NODES = (1, 2, 3)
ELECTION_TIMEOUT_MS = 500
TEST_DEADLINE_S = 90


def _snapshot_ends(node: ServerProcess) -> list[int]:
    """End offsets of the node's metadata snapshots (``<offset>-<epoch>.checkpoint``)."""
    directory = node.data_dir / METADATA_LOG_DIR_NAME
    return sorted(int(p.name.split("-")[0]) for p in directory.glob("*.checkpoint"))


async def _connect(port: int) -> BrokerConnection:
    return await BrokerConnection.connect(
        "127.0.0.1", port, connect_timeout=2.0, request_timeout=5.0
    )


async def _describe_quorum(node: ServerProcess) -> tuple[int, int, int] | None:
    """(leader id, epoch, high watermark) from ``node`` if it leads, else None (unreachable,
    not the leader)."""
    return await describe_quorum_at(node.controller_port)


async def describe_quorum_at(port: int) -> tuple[int, int, int] | None:
    """(leader id, epoch, high watermark) from DescribeQuorum on ``port``, or None (unreachable,
    refused: a controller listener that does not lead)."""
    D = m.DescribeQuorumRequest
    request = D(
        topics=[D.TopicData(topic_name="__cluster_metadata", partitions=[D.PartitionData()])]
    )
    try:
        async with await _connect(port) as conn:
            response = await conn.request(request)
    except ClientError:
        return None
    if response.error_code or not response.topics:
        return None
    part = response.topics[0].partitions[0]
    if part.error_code or part.leader_id < 0:
        return None
    return part.leader_id, part.leader_epoch, part.high_watermark


async def _wait_for_leader(nodes: list[ServerProcess], timeout: float, *, not_: int | None = None):
    """(leader id, epoch) from the leader among ``nodes`` (only the leader answers
    DescribeQuorum; the others refuse it), once it is not ``not_``."""
    with trio.fail_after(timeout):
        while True:
            answers = [a for a in [await _describe_quorum(n) for n in nodes] if a is not None]
            if len({a[:2] for a in answers}) == 1 and answers[0][0] != not_:
                return answers[0]
            await trio.sleep(0.1)


async def _create_topic(node: ServerProcess, name: str, timeout: float) -> None:
    """CreateTopics through ``node``'s client listener, retrying until it is created."""
    C = m.CreateTopicsRequest
    request = C(
        topics=[C.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
        timeout_ms=5000,
    )
    last = None
    with trio.move_on_after(timeout):
        while True:
            try:
                async with await _connect(node.port) as conn:
                    result = (await conn.request(request, timeout=10.0)).topics[0]
            except ClientError as e:
                last = e
            else:
                # TOPIC_ALREADY_EXISTS (36): an earlier try was committed before its answer.
                if result.error_code in (0, 36):
                    return
                last = (result.error_code, result.error_message)
            await trio.sleep(0.1)
    raise AssertionError(f"creating {name} through node {node.node_id} failed: {last}")


async def _topics(node: ServerProcess) -> set[str] | None:
    try:
        async with await _connect(node.port) as conn:
            response = await conn.request(m.MetadataRequest(topics=None))
    except ClientError:
        return None
    return {t.name for t in response.topics if t.error_code == 0}


async def _wait_for_topics(node: ServerProcess, expected: set[str], timeout: float) -> None:
    seen: set[str] | None = None
    with trio.move_on_after(timeout):
        while True:
            seen = await _topics(node)
            if seen is not None and expected <= seen:
                return
            await trio.sleep(0.1)
    missing = expected - (seen or set())
    raise AssertionError(f"node {node.node_id} lacks {sorted(missing)} (it has {seen})")


def test_quorum_processes_leader_kill_and_rejoin(tmp_path):
    cluster = ProcessCluster(
        tmp_path,
        len(NODES),
        config={
            "controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS),
            "controller.quorum.fetch.timeout.ms": str(2 * ELECTION_TIMEOUT_MS),
            "broker.session.timeout.ms": "2000",
            # Small: snapshots are taken on every node while the test runs, and the restarted
            # node may have to fetch one (the leader's log start moved past its log end).
            "metadata.log.max.record.bytes.between.snapshots": "1500",
        },
    )
    nodes = {n.node_id: n for n in cluster.nodes}
    for node in nodes.values():
        node.format(cluster.cluster_id)

    async def main() -> None:
        with trio.fail_after(TEST_DEADLINE_S):
            for node in nodes.values():
                node.start(wait=False)
            await _wait_for_leader(list(nodes.values()), 30)
            before = {f"before-{i}" for i in range(5)}
            for i, name in enumerate(sorted(before)):
                await _create_topic(nodes[NODES[i % 3]], name, 30)
            leader, epoch, hw_at_kill = await _wait_for_leader(list(nodes.values()), 10)

            # kill -9 the Raft leader.
            nodes[leader].kill()
            killed_at = time.monotonic()
            survivors = [n for i, n in nodes.items() if i != leader]
            new_leader, new_epoch, _ = await _wait_for_leader(survivors, 15, not_=leader)
            assert new_epoch > epoch
            after = {f"after-{i}" for i in range(12)}
            for i, name in enumerate(sorted(after)):
                await _create_topic(survivors[i % 2], name, 15)
            recovered_s = time.monotonic() - killed_at
            # A few election timeouts (and the forwarding retries) — not the test's deadline.
            assert recovered_s < 15, f"metadata writes resumed only after {recovered_s:.1f} s"
            print(f"leader {leader} killed: new leader {new_leader}, writes in {recovered_s:.2f} s")

            # The survivors snapshot and cut their logs well past the killed node's log end
            # (at most a few records past hw_at_kill): it will have to fetch a snapshot.
            with trio.fail_after(10):
                while not all(
                    max(_snapshot_ends(n), default=0) > hw_at_kill + 10 for n in survivors
                ):
                    await trio.sleep(0.1)

            # The killed node restarts from its own log, fetches the leader's snapshot and the
            # log after it, and catches up.
            nodes[leader].start(wait=False)
            everything = before | after
            for node in nodes.values():
                await _wait_for_topics(node, everything, 30)
            await _wait_for_leader(list(nodes.values()), 15)
            assert max(_snapshot_ends(nodes[leader]), default=0) > hw_at_kill

            # And metadata writes still work through the restarted node.
            await _create_topic(nodes[leader], "rejoined", 15)
            for node in nodes.values():
                await _wait_for_topics(node, everything | {"rejoined"}, 15)

    run_then_kill(nodes.values(), main)
