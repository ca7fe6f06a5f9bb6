"""The ClusterMirrorCoordinator on a running kcore, over real sockets.

FindCoordinator key type 3 creates ``__mirror_state`` (not compacted, everything kept: D-07)
and names the mirror's coordinator; WriteMirrorStates then ReadMirrorStates through the client
helper; what the broker wrote to the segment file on disk is the dump example of spec §8.4;
a restart reloads the state; a failed load answers NOT_COORDINATOR and is retried; bad input,
mirror.version 0 and a missing permission are refused and change nothing; and in a three-node
cluster the wrong broker answers NOT_COORDINATOR while the client helper finds the right one.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from mirror.dump_log import DUMP_EXAMPLE, dump_lines  # tests/mirror

from kcore.client.cluster import KafkaClient
from kcore.client.mirror_states import read_mirror_states, write_mirror_states
from kcore.metadata.acls import AclOperation as Op
from kcore.metadata.acls import ResourceType as Rt
from kcore.mirror import records as rec
from kcore.mirror.coordinator import StateUpdate
from kcore.mirror.state import MirrorPartitionState as S
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode as E
from kcore.testing import EmbeddedCluster

from . import embedded

pytestmark = pytest.mark.timeout(120)

CONFIG = {"mirror.state.topic.num.partitions": "3"}
RETRIABLE = (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR)
R = m.ReadMirrorStatesRequest
W = m.WriteMirrorStatesRequest


def _name(prefix: str = "mirror") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _find(client: KafkaClient, mirror: str, target="any", version: int = 4):
    """FindCoordinator type 3 until it is not retriable; the Coordinator entry (v4) or the
    response (v3)."""
    with trio.fail_after(30):
        while True:
            if version >= 4:
                resp = await client.request(
                    target,
                    m.FindCoordinatorRequest(key_type=3, coordinator_keys=[mirror]),
                    version=version,
                )
                answer = resp.coordinators[0]
            else:
                answer = await client.request(
                    target, m.FindCoordinatorRequest(key_type=3, key=mirror), version=version
                )
            if answer.error_code not in RETRIABLE:
                return answer
            await trio.sleep(0.05)


async def _retrying(client, target, request):
    with trio.fail_after(30):
        while True:
            resp = await client.request(target, request, version=0)
            if resp.error_code not in RETRIABLE:
                return resp
            await trio.sleep(0.05)


def _states(response) -> dict:
    assert response.error_code == 0, response
    return {
        (t.name, p.partition_index): (S(p.state), S(p.previous_state), p.retry_attempt, p.reason)
        for t in response.topics
        for p in t.partitions
    }


def _log_end(broker, index: int) -> int:
    return broker.replica_manager.partitions[(rec.MIRROR_STATE, index)].log.log_end_offset


with_broker = embedded.with_broker(CONFIG)


@with_broker
async def test_mirror_coordinator_find_creates_the_topic_then_write_and_read(cluster, client):
    mirror = _name()
    found = await _find(client, mirror)
    assert found.error_code == 0 and found.node_id == cluster.broker.node_id
    assert (found.host, found.port) == ("127.0.0.1", cluster.port)
    old = await _find(client, mirror, version=3)  # the single-key form answers the same
    assert (old.error_code, old.node_id) == (0, found.node_id)

    image = cluster.broker.metadata_image
    topic = image.topics.by_name[rec.MIRROR_STATE]
    assert len(topic.partitions) == 3
    configs = dict(image.configs.topic(rec.MIRROR_STATE))
    assert configs["cleanup.policy"] == "delete"  # D-07: never compacted
    assert configs["retention.ms"] == "-1" and configs["retention.bytes"] == "-1"

    response = await write_mirror_states(
        client,
        mirror,
        [
            StateUpdate("orders", 0, S.LOG_TRUNCATION),
            StateUpdate("orders", 1, S.FAILED, reason="source unreachable"),
            StateUpdate("audit", 0, S.STOPPING, last_mirror_epoch=7),
        ],
    )
    assert response.error_code == 0
    assert [p.error_code for t in response.topics for p in t.partitions] == [0, 0, 0]
    await write_mirror_states(client, mirror, [StateUpdate("orders", 0, S.MIRRORING)])

    got = await read_mirror_states(client, mirror)
    assert _states(got) == {
        ("orders", 0): (S.MIRRORING, S.LOG_TRUNCATION, 0, None),
        ("orders", 1): (S.FAILED, S.UNKNOWN, 0, "source unreachable"),
        ("audit", 0): (S.STOPPING, S.UNKNOWN, 0, None),
    }
    lme = {
        (t.name, p.partition_index): p.last_mirror_epoch for t in got.topics for p in t.partitions
    }
    assert lme == {("orders", 0): -1, ("orders", 1): -1, ("audit", 0): 7}
    some = await read_mirror_states(client, mirror, {"orders": [1, 5]})
    assert _states(some) == {
        ("orders", 1): (S.FAILED, S.UNKNOWN, 0, "source unreachable"),
        ("orders", 5): (S.UNKNOWN, S.UNKNOWN, 0, None),  # nothing recorded (M-35)
    }
    # The coordinator's own broker sees the same through the local path (M-11).
    local = await cluster.broker.mirror_coordinator.read_states(mirror, {"audit": [0]})
    assert local[("audit", 0)].last_mirror_epoch == 7


@with_broker
async def test_mirror_coordinator_reader_answers_unknown_without_creating_the_topic(
    cluster, client
):
    reader = cluster.broker.mirror_state_reader
    assert await reader.read_states("fresh", [("t", 0)]) == {("t", 0): S.UNKNOWN}
    assert rec.MIRROR_STATE not in cluster.broker.metadata_image.topics.by_name
    await reader.write_states("fresh", [StateUpdate("t", 0, S.LOG_TRUNCATION)])  # creates it
    assert await reader.read_states("fresh", [("t", 0)]) == {("t", 0): S.LOG_TRUNCATION}


@with_broker
async def test_mirror_coordinator_refuses_bad_writes_and_changes_nothing(cluster, client):
    mirror = _name()
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.MIRRORING)])
    index = rec.partition_for(mirror, 3)
    end = _log_end(cluster.broker, index)
    bad = await write_mirror_states(
        client, mirror, [StateUpdate("t", 0, S.PAUSING), StateUpdate("t", 1, S.UNKNOWN)]
    )
    assert bad.error_code == E.INVALID_REQUEST
    assert "t-1" in bad.error_message and "never written" in bad.error_message
    assert [p.error_code for p in bad.topics[0].partitions] == [E.INVALID_REQUEST] * 2
    bad = await write_mirror_states(client, mirror, [StateUpdate("t", 0, 12)])
    assert bad.error_code == E.INVALID_REQUEST and "12 is no state code" in bad.error_message
    assert _log_end(cluster.broker, index) == end
    assert _states(await read_mirror_states(client, mirror)) == {
        ("t", 0): (S.MIRRORING, S.UNKNOWN, 0, None)
    }
    empty = await client.request("any", m.FindCoordinatorRequest(key_type=3, key=""), version=3)
    assert empty.error_code == E.INVALID_REQUEST


@with_broker
async def test_mirror_coordinator_fences_a_write_from_a_former_partition_leader(cluster, client):
    # A broker that led t-0 at epoch 2 lost it to one at epoch 3, which paused it: the former
    # leader's late WriteMirrorStates is refused whole, over the wire, and nothing is appended.
    mirror = _name()
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.MIRRORING, leader_epoch=2)])
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.PAUSED, leader_epoch=3)])
    index = rec.partition_for(mirror, 3)
    end = _log_end(cluster.broker, index)
    late = await write_mirror_states(
        client, mirror, [StateUpdate("t", 0, S.FAILED, leader_epoch=2, reason="late")]
    )
    assert late.error_code == E.FENCED_LEADER_EPOCH
    assert "leader epoch 2 < 3" in late.error_message
    assert [p.error_code for p in late.topics[0].partitions] == [E.FENCED_LEADER_EPOCH]
    assert _log_end(cluster.broker, index) == end
    assert _states(await read_mirror_states(client, mirror)) == {
        ("t", 0): (S.PAUSED, S.MIRRORING, 0, None)
    }
    ok = await write_mirror_states(
        client, mirror, [StateUpdate("t", 0, S.MIRRORING, leader_epoch=3)]
    )
    assert ok.error_code == 0


@with_broker
async def test_mirror_coordinator_rpcs_off_at_mirror_version_zero(cluster, client):
    mirror = _name()
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.MIRRORING)])
    F = m.UpdateFeaturesRequest
    resp = await client.request(
        "any",
        F(
            feature_updates=[
                F.FeatureUpdateKey(feature="mirror.version", max_version_level=0, upgrade_type=2)
            ]
        ),
        version=1,
    )
    assert resp.error_code == 0, resp
    with trio.fail_after(10):
        while cluster.broker.metadata_image.features.mirror_version != 0:
            await trio.sleep(0.02)
    end = _log_end(cluster.broker, rec.partition_for(mirror, 3))
    read = await client.request("any", R(mirror_name=mirror), version=0)
    assert read.error_code == E.UNSUPPORTED_VERSION and "mirror.version" in read.error_message
    write = await client.request(
        "any",
        W(
            mirror_name=mirror,
            topics=[W.TopicData(name="t", partitions=[W.PartitionData(state=S.PAUSING)])],
        ),
        version=0,
    )
    assert write.error_code == E.UNSUPPORTED_VERSION
    assert write.topics[0].partitions[0].error_code == E.UNSUPPORTED_VERSION
    found = await client.request("any", m.FindCoordinatorRequest(key_type=3, key=mirror), version=3)
    assert found.error_code == E.UNSUPPORTED_VERSION
    assert _log_end(cluster.broker, rec.partition_for(mirror, 3)) == end


class _Authorizer:
    def __init__(self, *denied) -> None:
        self.denied = set(denied)

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) not in self.denied


@with_broker
async def test_mirror_coordinator_needs_cluster_action_and_describe_on_the_mirror(cluster, client):
    mirror = _name()
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.MIRRORING)])
    end = _log_end(cluster.broker, rec.partition_for(mirror, 3))
    cluster.broker.authorizer = _Authorizer(
        (Op.CLUSTER_ACTION, Rt.CLUSTER, "kafka-cluster"), (Op.DESCRIBE, Rt.CLUSTER_MIRROR, mirror)
    )
    read = await client.request("any", R(mirror_name=mirror), version=0)
    assert read.error_code == E.CLUSTER_AUTHORIZATION_FAILED and read.topics == []
    write = await client.request(
        "any",
        W(
            mirror_name=mirror,
            topics=[W.TopicData(name="t", partitions=[W.PartitionData(state=3)])],
        ),
        version=0,
    )
    assert write.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert write.topics[0].partitions[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    found = await client.request("any", m.FindCoordinatorRequest(key_type=3, key=mirror), version=3)
    assert found.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert _log_end(cluster.broker, rec.partition_for(mirror, 3)) == end
    cluster.broker.authorizer = _Authorizer()  # allowed: served
    assert _states(await read_mirror_states(client, mirror))[("t", 0)][0] is S.MIRRORING


class _FlakyWriter:
    """The broker's PartitionWriter, but it can hide this node's leaderships and fail reads."""

    def __init__(self, real) -> None:
        self.real = real
        self.hide = False
        self.failing_reads = 0

    def led_partitions(self, topic):
        return {} if self.hide else self.real.led_partitions(topic)

    def read(self, topic, index, offset, max_bytes):
        if self.failing_reads:
            self.failing_reads -= 1
            raise OSError("disk read failed (injected)")
        return self.real.read(topic, index, offset, max_bytes)

    def __getattr__(self, name):
        return getattr(self.real, name)


@with_broker
async def test_mirror_coordinator_failed_load_answers_not_coordinator_and_is_retried(
    cluster, client
):
    mirror = _name()
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.PAUSED)])
    service = cluster.broker.mirror_coordinator
    flaky = service.writer = _FlakyWriter(service.writer)
    flaky.hide = True
    service.leadership_changed()  # leadership lost ...
    flaky.hide, flaky.failing_reads = False, 1
    service.leadership_changed()  # ... and won again: the load fails once
    with trio.fail_after(10):
        while flaky.failing_reads:
            await trio.sleep(0.01)
    direct = await client.request("any", R(mirror_name=mirror), version=0)
    assert direct.error_code == E.NOT_COORDINATOR  # visible, not "loading" forever
    with trio.fail_after(20):  # retried after a backoff
        while (await client.request("any", R(mirror_name=mirror), version=0)).error_code:
            await trio.sleep(0.05)
    assert _states(await read_mirror_states(client, mirror)) == {
        ("t", 0): (S.PAUSED, S.UNKNOWN, 0, None)
    }


def test_mirror_coordinator_state_survives_a_restart(tmp_path):
    mirror, gone = _name(), _name("deleted")
    cluster = EmbeddedCluster(config=CONFIG, data_dir=tmp_path)
    cluster.start()
    try:

        async def write():
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.LOG_TRUNCATION)])
                await write_mirror_states(
                    client, mirror, [StateUpdate("t", 0, S.FAILED, reason="x")]
                )
                await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.LOG_TRUNCATION)])
                await write_mirror_states(
                    client, gone, [StateUpdate("t", 0, S.STOPPED, last_mirror_epoch=3)]
                )
                await cluster.broker.mirror_coordinator.delete_mirror(gone)  # the local path
                return _states(await read_mirror_states(client, mirror))

        before = cluster._call(write)
        assert before == {("t", 0): (S.LOG_TRUNCATION, S.FAILED, 1, "x")}
        cluster.restart()

        async def read():
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                after = _states(await read_mirror_states(client, mirror))
                deleted = await read_mirror_states(client, gone)
                return after, deleted

        after, deleted = cluster._call(read)
        assert after == before
        assert deleted.error_code == 0 and deleted.topics == []  # dropped on replay (D-29)
    finally:
        cluster.stop()


def test_mirror_coordinator_snapshot_deletes_older_records_and_reloads(tmp_path):
    """D-07: past ``mirror.state.snapshot.records`` the coordinator writes the whole state and
    deletes what is below it; a restart replays from the new log start to the same state."""
    mirror = _name()
    config = {**CONFIG, "mirror.state.snapshot.records": "5"}
    index = rec.partition_for(mirror, 3)
    cluster = EmbeddedCluster(config=config, data_dir=tmp_path)
    cluster.start()
    try:

        async def write():
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                for i in range(30):
                    state = (S.MIRRORING, S.PAUSING, S.PAUSED)[i % 3]
                    response = await write_mirror_states(
                        client, mirror, [StateUpdate("t", i % 2, state, last_mirror_epoch=i)]
                    )
                    assert response.error_code == 0
                plog = cluster.broker.replica_manager.partitions[(rec.MIRROR_STATE, index)].log
                with trio.fail_after(10):
                    while plog.log_start_offset == 0:
                        await trio.sleep(0.02)
                assert plog.log_end_offset - plog.log_start_offset < 15
                return _states(await read_mirror_states(client, mirror)), plog.log_start_offset

        before, start = cluster._call(write)
        cluster.restart()

        async def read():
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                got = await read_mirror_states(client, mirror)
                lme = {
                    (t.name, p.partition_index): p.last_mirror_epoch
                    for t in got.topics
                    for p in t.partitions
                }
                plog = cluster.broker.replica_manager.partitions[(rec.MIRROR_STATE, index)].log
                return _states(got), lme, plog.log_start_offset

        after, lme, start_after = cluster._call(read)
        assert after == before and lme == {("t", 0): 28, ("t", 1): 29}
        assert start_after >= start > 0
    finally:
        cluster.stop()


class _SetClock:
    """A wall clock that says what the test sets."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def wall_ms(self) -> int:
        return self.now


def test_mirror_coordinator_segment_on_disk_is_the_spec_dump_example(tmp_path):
    """§8.4 reproduced from the bytes the broker wrote, CRCs included: the shell's injected
    clock gives the records the example's times, and the default 50 partitions its layout.

    The example predates PreviousState (spec §20 A-4): its second record does not record the
    state before MIRRORING, so the writer says "not recorded" (UNKNOWN) for it. Derived by
    the coordinator (the third record), PreviousState is a tagged field: 3 bytes more (tag,
    size, value)."""
    cluster = EmbeddedCluster(data_dir=tmp_path)
    cluster.start()
    try:

        async def write():
            clock = cluster.broker.mirror_coordinator.clock = _SetClock(0)
            async with KafkaClient([cluster.bootstrap_servers]) as client:
                for now, state, previous in (
                    (1771239071191, S.LOG_TRUNCATION, None),
                    (1771239071219, S.MIRRORING, S.UNKNOWN),
                    (1771239071300, S.PAUSING, None),  # PreviousState derived: MIRRORING
                ):
                    clock.now = now
                    update = StateUpdate("my-topic", 0, state, previous_state=previous)
                    response = await write_mirror_states(client, "my-mirror", [update])
                    assert response.error_code == 0

        cluster._call(write)
        index = rec.partition_for("my-mirror", 50)
        (segment,) = tmp_path.rglob(f"{rec.MIRROR_STATE}-{index}/{0:020d}.log")
        lines = dump_lines(segment.read_bytes())
    finally:
        cluster.stop()
    assert lines[:4] == DUMP_EXAMPLE
    assert "size: 101" in lines[4] and "valueSize: 20" in lines[5]
    assert lines[5].endswith('"partition":0,"state":3,"previousState":1}}')


# -- three nodes: the coordinator is another broker ---------------------------------------------


def test_mirror_coordinator_three_nodes_wrong_broker_then_helper_finds_it():
    async def main():
        async with (
            EmbeddedCluster(brokers=3, config=CONFIG) as cluster,
            KafkaClient(cluster.bootstrap_servers.split(",")) as client,
        ):
            await client.refresh_metadata()
            await _three_nodes(client, cluster.brokers)

    trio.run(main)


async def _three_nodes(client: KafkaClient, nodes) -> None:
    await _find(client, "probe")  # creates __mirror_state
    leaders: dict[int, int] = {}
    with trio.fail_after(30):
        while len(leaders) < 3:
            topic = nodes[0].metadata_image.topics.by_name.get(rec.MIRROR_STATE)
            if topic is not None:
                leaders = {i: p.leader for i, p in topic.partitions.items() if p.leader >= 0}
            await trio.sleep(0.05)
    # A mirror whose coordinator is not node 1, and node 1 is asked first.
    mirror = next(n for n in (f"m{i}" for i in range(100)) if leaders[rec.partition_for(n, 3)] != 1)
    coordinator = leaders[rec.partition_for(mirror, 3)]
    found = await _find(client, mirror, target=1)
    assert found.error_code == 0 and found.node_id == coordinator

    wrong = await client.request(
        1,
        W(
            mirror_name=mirror,
            topics=[W.TopicData(name="t", partitions=[W.PartitionData(state=0)])],
        ),
        version=0,
    )
    assert wrong.error_code == E.NOT_COORDINATOR
    assert wrong.topics[0].partitions[0].error_code == E.NOT_COORDINATOR
    assert (await client.request(1, R(mirror_name=mirror), version=0)).error_code == (
        E.NOT_COORDINATOR
    )

    response = await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.LOG_TRUNCATION)])
    assert response.error_code == 0
    await write_mirror_states(client, mirror, [StateUpdate("t", 0, S.MIRRORING)])
    assert _states(await read_mirror_states(client, mirror)) == {
        ("t", 0): (S.MIRRORING, S.LOG_TRUNCATION, 0, None)
    }
    # It is the coordinator's partition that holds them, and only the coordinator serves them.
    by_id = {n.node_id: n for n in nodes}
    assert by_id[coordinator].mirror_coordinator.is_coordinator(mirror)
    assert not by_id[1].mirror_coordinator.is_coordinator(mirror)
    direct = await _retrying(client, coordinator, R(mirror_name=mirror))
    assert _states(direct)[("t", 0)][0] is S.MIRRORING

    # MirrorStateAccess (the broker's MirrorStateReader): remote from node 1, local on the
    # coordinator; the same answers either way.
    remote, local = by_id[1].mirror_state_reader, by_id[coordinator].mirror_state_reader
    await remote.write_states(mirror, [StateUpdate("t", 1, S.FAILED, reason="r")])
    for access in (remote, local):
        assert await access.read_states(mirror, [("t", 0), ("t", 1), ("t", 2)]) == {
            ("t", 0): S.MIRRORING,
            ("t", 1): S.FAILED,
            ("t", 2): S.UNKNOWN,
        }
        assert (await access.read_full(mirror))[("t", 1)].reason == "r"
