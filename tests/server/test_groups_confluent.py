"""confluent-kafka consumer groups against a running kcore (issue #6's proofs).

Three consumers share a six-partition topic; members leave and join; every record is consumed
exactly once when each is committed synchronously; the same with the cooperative-sticky
assignor; static members keep their partitions across a restart; the AdminClient lists,
describes, reads, alters and deletes groups and their offsets; offsets survive a broker restart.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config={"offsets.topic.num.partitions": "10"}) as c:
        yield c


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _produce(cluster, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for v in values:
        producer.produce(topic, key=v.encode(), value=v.encode())
    assert producer.flush(30) == 0


class GroupMember:
    """One consumer polling in its own thread; a record counts once its commit succeeded."""

    def __init__(self, cluster, group: str, topic: str, **config) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                **config,
            }
        )
        self.committed: list[str] = []
        self.assigned: set[tuple[str, int]] = set()
        self.assign_calls = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        with self._lock:
            self.assign_calls += 1
            self.assigned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        with self._lock:
            self.assigned -= {(p.topic, p.partition) for p in partitions}

    def _loop(self) -> None:
        try:
            self._poll_until_stopped()
        finally:
            # Closed from the polling thread while the others still poll: a member's
            # LeaveGroup then completes the rebalance it starts at once.
            self.consumer.close()

    def _poll_until_stopped(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            try:
                self.consumer.commit(message=msg, asynchronous=False)
            except KafkaException:
                # Refused mid-rebalance: not processed. Read it again if the partition stays
                # here; if it moves, its new owner starts from the last committed offset.
                with contextlib.suppress(KafkaException):
                    self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                continue
            self.committed.append(msg.value().decode())

    def partitions(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self.assigned)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the consumer did not close"


def _close_all(members) -> None:
    for member in members:
        member.stop()
    for member in members:
        member.close()


def _all_committed(members: list[GroupMember]) -> list[str]:
    return [v for member in members for v in member.committed]


def _check_exactly_once(members, retired, expected: list[str], timeout: float = 60) -> None:
    everyone = members + retired
    _wait(
        lambda: len(set(_all_committed(everyone))) >= len(expected),
        timeout,
        f"{len(expected)} records consumed",
    )
    time.sleep(0.5)  # anything more would be a duplicate: give it the chance to show
    got = _all_committed(everyone)
    assert sorted(got) == sorted(expected), "a record was consumed twice or not at all"


def _check_partitions_owned_once(members, topic: str, partitions: int, timeout: float = 30):
    """Wait until every partition has exactly one owner and the members' shares differ by at
    most one (cooperative-sticky gets there in more than one rebalance)."""

    def owned_once() -> bool:
        shares = [m.partitions() for m in members]
        owned = [tp for share in shares for tp in share]
        sizes = [len(share) for share in shares]
        return (
            sorted(owned) == [(topic, p) for p in range(partitions)]
            and max(sizes) - min(sizes) <= 1
        )

    _wait(owned_once, timeout, "every partition owned by exactly one member, evenly")


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"], ids=lambda s: s)
def test_confluent_group_members_leave_and_join_records_consumed_exactly_once(cluster, strategy):
    topic, group = _name("grp"), _name("g")
    cluster.create_topic(topic, partitions=6)
    config = {"partition.assignment.strategy": strategy}
    values = [f"a{i}" for i in range(300)]
    _produce(cluster, topic, values)
    members = [GroupMember(cluster, group, topic, **config) for _ in range(3)]
    retired: list[GroupMember] = []
    try:
        _check_partitions_owned_once(members, topic, 6)
        _check_exactly_once(members, retired, values)

        leaving = members.pop(0)
        leaving.close()
        retired.append(leaving)
        more = [f"b{i}" for i in range(300)]
        _produce(cluster, topic, more)
        _check_partitions_owned_once(members, topic, 6)
        _check_exactly_once(members, retired, values + more)

        members.append(GroupMember(cluster, group, topic, **config))
        last = [f"c{i}" for i in range(300)]
        _produce(cluster, topic, last)
        _check_partitions_owned_once(members, topic, 6)
        _check_exactly_once(members, retired, values + more + last)
    finally:
        _close_all(members)


def test_confluent_static_member_keeps_its_partitions_across_a_restart(cluster):
    topic, group = _name("static"), _name("g")
    cluster.create_topic(topic, partitions=6)
    static = {"session.timeout.ms": 20000}
    members = [
        GroupMember(cluster, group, topic, **{"group.instance.id": f"i{n}", **static})
        for n in range(3)
    ]
    try:
        _check_partitions_owned_once(members, topic, 6)
        before = [m.partitions() for m in members]
        assigns = [m.assign_calls for m in members]

        members[1].close()  # a static member leaves no LeaveGroup behind: no rebalance
        members[1] = GroupMember(cluster, group, topic, **{"group.instance.id": "i1", **static})
        _wait(lambda: members[1].partitions() == before[1], 30, "the same partitions back")
        assert [m.partitions() for m in members] == before
        time.sleep(1)  # heartbeats of the others would learn of a rebalance by now
        assert [members[0].assign_calls, members[2].assign_calls] == [assigns[0], assigns[2]], (
            "a static rejoin must not rebalance the others"
        )
    finally:
        _close_all(members)


def _consume_and_commit(cluster, group: str, topic: str, count: int) -> list[str]:
    """A plain member that consumes ``count`` records, commits them, and leaves."""
    member = GroupMember(cluster, group, topic)
    try:
        _wait(lambda: len(member.committed) >= count, 60, f"{count} records committed")
    finally:
        member.close()
    return member.committed


def test_confluent_admin_lists_describes_alters_and_deletes_groups(cluster):
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic, group = _name("adm"), _name("g")
    cluster.create_topic(topic, partitions=2)
    _produce(cluster, topic, [f"v{i}" for i in range(20)])
    member = GroupMember(cluster, group, topic, **{"client.id": "described"})
    try:
        _wait(lambda: len(member.committed) == 20, 60, "20 records committed")
        listed = admin.list_consumer_groups().result(timeout=30)
        by_id = {g.group_id: g for g in listed.valid}
        assert group in by_id and by_id[group].state.name == "STABLE"
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert desc.state.name == "STABLE"
        assert not desc.is_simple_consumer_group and desc.partition_assignor == "range"
        assert desc.coordinator.id == 1 and desc.coordinator.port == cluster.port
        assert [mm.client_id for mm in desc.members] == ["described"]
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}

        refused = admin.delete_consumer_groups([group])[group]
        with pytest.raises(KafkaException) as info:
            refused.result(timeout=30)
        assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    got = offsets[group].result(timeout=30)
    committed = {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions}
    assert sum(committed.values()) == 20 and set(committed) == {(topic, 0), (topic, 1)}

    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])]
    )
    altered[group].result(timeout=30)
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets_now = {
        (tp.topic, tp.partition): tp.offset for tp in got[group].result(timeout=30).topic_partitions
    }
    assert offsets_now[(topic, 0)] == 1 and offsets_now[(topic, 1)] == committed[(topic, 1)]

    admin.delete_consumer_groups([group])[group].result(timeout=30)
    listed = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in listed.valid}
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    assert all(tp.offset < 0 for tp in got[group].result(timeout=30).topic_partitions)


def test_committed_offsets_survive_a_broker_restart(tmp_path):
    with EmbeddedCluster(
        data_dir=tmp_path, config={"offsets.topic.num.partitions": "5"}
    ) as cluster:
        topic, group = _name("restart"), _name("g")
        cluster.create_topic(topic, partitions=3)
        _produce(cluster, topic, [f"r{i}" for i in range(30)])
        first = _consume_and_commit(cluster, group, topic, 30)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
        tps = [TopicPartition(topic, p) for p in range(3)]
        before = {(tp.partition, tp.offset) for tp in consumer.committed(tps, timeout=30)}
        consumer.close()

        cluster.restart()

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
        after = {(tp.partition, tp.offset) for tp in consumer.committed(tps, timeout=30)}
        consumer.close()
        assert after == before and sum(o for _, o in after) == 30

        _produce(cluster, topic, [f"s{i}" for i in range(9)])
        second = _consume_and_commit(cluster, group, topic, 9)
        assert sorted(second) == sorted(f"s{i}" for i in range(9)), "resumed where it committed"
        assert len(first) == 30
