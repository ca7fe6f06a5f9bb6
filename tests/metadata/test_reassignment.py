"""Partition reassignment with replication (#17): Kafka's rules for the replica sets, the
controller's records through AlterPartitionReassignments, AlterPartition completing them,
cancellation, ListPartitionReassignments, and what each broker's delta makes of it."""

from __future__ import annotations

import pytest

from kcore.client.admin import reassignments_request
from kcore.metadata import decode_record
from kcore.metadata.delta import MetadataDelta
from kcore.metadata.reassignment_replicas import ReassignmentReplicas, revert
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from tests.metadata.harness import REPLICATING, Driver, assigned_topic_request
from tests.metadata.test_controller_brokers import _alter

# -- the replica sets (PartitionReassignmentReplicas / PartitionReassignmentRevert) -------------


def test_reassignment_replicas_start_puts_the_target_first_then_the_leaving_ones():
    r = ReassignmentReplicas.start([3, 1, 2], [4, 2, 3])
    assert (r.replicas, r.adding, r.removing) == ((4, 2, 3, 1), (4,), (1,))
    assert r.original_replicas == (2, 3, 1)
    r = ReassignmentReplicas.start([1, 2], [5, 4, 1])
    assert (r.replicas, r.adding, r.removing) == ((5, 4, 1, 2), (4, 5), (2,))


def test_reassignment_replicas_complete_only_when_every_staying_replica_is_in_sync():
    r = ReassignmentReplicas.start([1, 2, 3], [2, 3, 4])
    assert r.completed([1, 2, 3]) is None
    assert r.completed([1, 2, 4]) is None
    assert r.completed([3, 1, 2, 4]) == ((2, 3, 4), (3, 2, 4))
    # A removal alone completes with any ISR holding the staying replicas.
    assert ReassignmentReplicas.start([1, 2, 3], [2, 3]).completed([1, 2, 3]) == ((2, 3), (2, 3))
    assert ReassignmentReplicas((1, 2), (), ()).completed([1, 2]) is None  # nothing in progress


def test_reassignment_revert_keeps_the_original_replicas_and_is_unclean_without_them_in_sync():
    r = ReassignmentReplicas.start([1, 2, 3], [2, 3, 4])
    back = revert(r, [1, 2, 4])
    assert (back.replicas, back.isr, back.unclean) == ((2, 3, 1), (1, 2), False)
    only_new = ReassignmentReplicas.start([1], [4])
    back = revert(only_new, [4])
    assert (back.replicas, back.isr, back.unclean) == ((1,), (1,), True)


# -- the controller ----------------------------------------------------------------------------


@pytest.fixture
def d() -> Driver:
    drv = Driver(seed=7, max_replication_factor=REPLICATING)
    for b in (1, 2, 3, 4):
        drv.register(b)
    drv.run(drv.controller.create_topics(assigned_topic_request("t", [[1, 2, 3]])))
    return drv


def _part(d, name="t", index=0):
    return d.controller.image.topics.by_name[name].partitions[index]


def _reassign(d, targets, name="t", allow_rf_change=True, api_version=1):
    """AlterPartitionReassignments of ``name``'s partitions (``{index: replicas}``); the
    records are written; returns ``[(code, message)]`` and the records."""
    req = reassignments_request(
        {(name, i): r for i, r in targets.items()}, allow_replication_factor_change=allow_rf_change
    )
    result = d.controller.alter_partition_reassignments(req, api_version)
    d.run(result)
    errors = [(p.error_code, p.error_message) for p in result.response.responses[0].partitions]
    return errors, list(result.records)


def _listed(d, topics=None):
    L = m.ListPartitionReassignmentsRequest
    asked = None
    if topics is not None:
        asked = [L.ListPartitionReassignmentsTopics(name=n, partition_indexes=i) for n, i in topics]
    response = d.run(d.controller.list_partition_reassignments(L(topics=asked)))
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    }


def test_reassignment_starts_with_one_record_of_the_union_and_leaves_leader_and_epoch(d):
    before = _part(d)
    errors, records = _reassign(d, {0: [2, 3, 4]})
    assert errors == [(0, None)]
    assert len(records) == 1
    rec = decode_record(d.log[-1])[0]
    assert type(rec).__name__ == "PartitionChangeRecord"
    assert (rec.replicas, rec.adding_replicas, rec.removing_replicas) == ([2, 3, 4, 1], [4], [1])
    assert rec.isr is None and rec.leader == -2  # nothing else: the leader keeps its epoch
    after = _part(d)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (
        before.leader,
        before.leader_epoch,
        before.partition_epoch + 1,
    )
    assert _listed(d) == {("t", 0): ([2, 3, 4, 1], [4], [1])}
    assert _listed(d, [("t", [0, 7]), ("ghost", [0])]) == {("t", 0): ([2, 3, 4, 1], [4], [1])}


def test_reassignment_completes_when_the_leader_reports_the_new_replica_in_sync(d):
    _reassign(d, {0: [2, 3, 4]})
    leader_epoch = _part(d).leader_epoch
    # Broker 4 is not in sync yet: an unrelated ISR change completes nothing.
    d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2]), 3))
    assert _part(d).is_reassigning
    d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2, 3]), 3))
    res = d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2, 3, 4]), 3))
    # The old leader leaves: it is told NEW_LEADER_ELECTED and the first target replica leads.
    assert res.topics[0].partitions[0].error_code == ErrorCode.NEW_LEADER_ELECTED
    p = _part(d)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == (
        (2, 3, 4),
        (2, 3, 4),
        (),
        (),
    )
    assert (p.leader, p.leader_epoch) == (2, leader_epoch + 1)
    assert _listed(d) == {}


def test_reassignment_that_keeps_the_leader_bumps_its_epoch_when_replicas_leave(d):
    _reassign(d, {0: [1, 2, 4]})
    epoch = _part(d).leader_epoch
    res = d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2, 3, 4]), 3))
    assert res.topics[0].partitions[0].error_code == 0
    p = _part(d)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((1, 2, 4), (1, 2, 4), 1, epoch + 1)


def test_reassignment_that_only_removes_or_reorders_completes_at_once(d):
    _, records = _reassign(d, {0: [3, 2]})
    assert len(records) == 1
    p = _part(d)
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((3, 2), (2, 3), 3, False)
    _, records = _reassign(d, {0: [2, 3]})
    assert len(records) == 1 and _part(d).replicas == (2, 3)
    errors, records = _reassign(d, {0: [2, 3]})  # as it is: done, nothing written
    assert (errors, records) == ([(0, None)], [])


def test_reassignment_cancel_reverts_to_the_original_replicas(d):
    _reassign(d, {0: [2, 3, 4]})
    d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2, 4]), 3))  # 3 fell behind
    errors, records = _reassign(d, {0: None})
    assert errors == [(0, None)] and len(records) == 1
    p = _part(d)
    # Kafka's revert: the replicas without the adding ones, in the reassignment's order.
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((2, 3, 1), (1, 2), 1, False)
    assert _reassign(d, {0: None})[0][0][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_reassignment_cancel_refused_when_only_new_replicas_are_in_sync(d):
    d.run(d.controller.create_topics(assigned_topic_request("one", [[1]])))
    _reassign(d, {0: [4, 2]}, name="one")
    d.run(d.controller.alter_partition(_alter(d, "one", 0, [1, 4]), 3))  # 2 not in sync yet
    d.heartbeat(1, want_fence=True)  # 1 leaves the ISR: 4, an adding replica, leads alone
    p = _part(d, "one")
    assert (p.replicas, p.isr, p.leader, p.adding_replicas) == ((4, 2, 1), (4,), 4, (2, 4))
    errors, records = _reassign(d, {0: None}, name="one")
    assert errors == [
        (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Unable to revert partition assignment for one:0 because it would require an "
            "unclean leader election.",
        )
    ]
    assert records == []
    d.append([m.ConfigRecord(resource_type=2, resource_name="one",
                             name="unclean.leader.election.enable", value="true")])  # fmt: skip
    d.heartbeat(1)  # back, but not in sync
    errors, records = _reassign(d, {0: None}, name="one")
    assert errors == [(0, None)]
    p = _part(d, "one")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1,), (1,), 1, False)


def test_reassignment_refusals_are_kafkas(d):
    errors, records = _reassign(d, {0: [], 1: [2, 3, 4]})
    assert records == []
    assert errors == [
        (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:1."),
    ]
    errors, _ = _reassign(d, {0: [2, 9]})
    assert errors == [
        (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        )
    ]
    errors, _ = _reassign(d, {0: [2, 2, 3]})
    assert errors[0][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    errors, _ = _reassign(d, {0: [2, 3]}, allow_rf_change=False)
    assert errors == [
        (ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2")
    ]
    assert _reassign(d, {0: [1]}, name="ghost")[0] == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named ghost.")
    ]
    assert not _part(d).is_reassigning


def test_reassignment_to_a_fenced_broker_waits_for_it(d):
    d.heartbeat(4, want_fence=True)
    errors, _ = _reassign(d, {0: [2, 3, 4]})
    assert errors == [(0, None)]  # Kafka accepts it: it completes once 4 is back in sync
    assert _part(d).adding_replicas == (4,)


def test_reassignment_deltas_make_the_new_broker_a_follower_and_delete_the_old_replica(d):
    loader = d.loader()
    image = loader.image
    _reassign(d, {0: [2, 3, 4]})
    d.run(d.controller.alter_partition(_alter(d, "t", 0, [1, 2, 3, 4]), 3))
    tid = _part_id(d)
    # Replay the two changes as the brokers see them, one delta each.
    changes = [decode_record(b)[0] for b in d.log[-2:]]
    start = MetadataDelta(image)
    start.replay(changes[0])
    started = start.apply()
    at4 = start.topics_delta.local_changes(4)
    assert (tid, 0) in at4.followers and not at4.deletes
    finish = MetadataDelta(started)
    finish.replay(changes[1])
    at1 = finish.topics_delta.local_changes(1)
    assert at1.deletes == {(tid, 0)}
    assert (tid, 0) in finish.topics_delta.local_changes(2).leaders


def _part_id(d, name="t"):
    return d.controller.image.topics.by_name[name].topic_id
