"""The controller's broker, partition-state, producer-id, feature and ACL operations, and its
own life cycle (activation, commit, renounce, rebuild from the log)."""

from __future__ import annotations

import random
import uuid

import pytest

from kcore.metadata import QuorumController, bootstrap_records, decode_record
from kcore.metadata.features import LATEST_METADATA_VERSION
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import CLUSTER_ID, REPLICATING, Driver


@pytest.fixture
def d() -> Driver:
    drv = Driver(seed=11)
    for b in (1, 2, 3):
        drv.register(b)
    return drv


@pytest.fixture
def replicating() -> Driver:
    """Three brokers and a controller as replication (issue #17) will run it, for the tests
    of partitions with several replicas: ISR changes on fencing, shutdown and AlterPartition,
    and elections. kcore creates no such partition yet, but this code runs for every partition
    and for those an older kcore's metadata log holds."""
    drv = Driver(seed=11, max_replication_factor=REPLICATING)
    for b in (1, 2, 3):
        drv.register(b)
    return drv


def _part(d, name="t", index=0):
    return d.controller.image.topics.by_name[name].partitions[index]


# -- registration and heartbeats ---------------------------------------------------------------


def test_bootstrap_writes_metadata_version_first_and_turns_mirroring_on():
    recs = bootstrap_records()
    assert [(r.name, r.feature_level) for r in recs] == [
        ("metadata.version", LATEST_METADATA_VERSION),
        ("mirror.version", 1),
    ]
    assert [r.name for r in bootstrap_records(metadata_version=21)] == ["metadata.version"]
    with pytest.raises(ValueError):
        bootstrap_records(metadata_version=21, mirror_version=1)
    d = Driver()
    assert (
        d.controller.image.features.metadata_version,
        d.controller.image.features.mirror_version,
    ) == (30, 1)
    assert d.controller.activate(0).records == ()  # not an empty log any more


def test_register_broker_epoch_is_the_offset_of_its_record_and_it_starts_fenced():
    d = Driver()
    epoch = d.register(1, unfence=False)
    assert epoch == len(d.log) - 1
    assert isinstance(decode_record(d.log[epoch])[0], m.RegisterBrokerRecord)
    b = d.controller.image.cluster.brokers[1]
    assert (b.epoch, b.fenced, b.listeners[0].port) == (epoch, True, 9093)


def test_heartbeat_unfences_a_broker_once_it_has_caught_up_with_its_registration():
    d = Driver()
    epoch = d.register(1, unfence=False)
    behind = d.heartbeat(1, offset=epoch - 1)
    assert behind.is_fenced and d.controller.image.cluster.brokers[1].fenced
    assert not behind.is_caught_up
    caught_up = d.heartbeat(1, offset=epoch)
    assert not caught_up.is_fenced and not d.controller.image.cluster.brokers[1].fenced
    assert d.heartbeat(1).is_caught_up
    # Metadata moving on (here: another broker registering) does not make it "behind" again:
    # caught up means its image holds its own registration (current Kafka), not the latest.
    d.register(2)
    assert len(d.log) - 1 > epoch
    assert d.heartbeat(1, offset=epoch).is_caught_up


def test_register_broker_refusals():
    d = Driver()
    d.register(1)
    req = m.BrokerRegistrationRequest(broker_id=2, cluster_id="other", incarnation_id=uuid.uuid4())
    assert (
        d.run(d.controller.register_broker(req, 0)).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    )
    twin = m.BrokerRegistrationRequest(
        broker_id=1, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4()
    )
    assert (
        d.run(d.controller.register_broker(twin, 0)).error_code
        == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    )
    old = m.BrokerRegistrationRequest(
        broker_id=3, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4()
    )
    res = d.run(d.controller.register_broker(old, 0))  # lists no metadata.version: only level 7
    assert res.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_heartbeat_with_a_stale_broker_epoch_is_refused(d):
    req = m.BrokerHeartbeatRequest(broker_id=1, broker_epoch=999, current_metadata_offset=0)
    assert (
        d.run(d.controller.broker_heartbeat(req, d.now)).error_code == ErrorCode.STALE_BROKER_EPOCH
    )
    req = m.BrokerHeartbeatRequest(broker_id=42, broker_epoch=1, current_metadata_offset=0)
    assert (
        d.run(d.controller.broker_heartbeat(req, d.now)).error_code == ErrorCode.STALE_BROKER_EPOCH
    )


# -- fencing by session timeout ----------------------------------------------------------------


def test_a_broker_whose_heartbeats_stop_is_fenced_after_the_session_timeout(replicating):
    d = replicating
    d.create_topic("t", 3, 3)
    led_by_1 = [
        i for i, p in d.controller.image.topics.by_name["t"].partitions.items() if p.leader == 1
    ]
    assert led_by_1
    d.now = 8000
    d.heartbeat(2)
    d.heartbeat(3)
    assert d.run(d.controller.poll(d.now)) is None  # 8000 ms without a heartbeat: still in session
    assert d.controller.next_deadline_ms(d.now) == 9001
    d.now = 9001
    assert d.run(d.controller.poll(d.now)) == 1
    image = d.controller.image
    assert image.cluster.brokers[1].fenced
    for i, p in image.topics.by_name["t"].partitions.items():
        assert 1 not in p.isr and p.leader in (2, 3)
        if i in led_by_1:
            assert p.leader_epoch == 1  # a new leader: a new epoch
    assert d.run(d.controller.poll(d.now)) is None


def test_fencing_the_only_in_sync_replica_leaves_the_partition_leaderless_until_it_returns(
    replicating,
):
    d = replicating
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=-1, replication_factor=-1,
        assignments=[m.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])],
    )])  # fmt: skip
    d.run(d.controller.create_topics(req))
    d.append(d.controller.alter_partition(_alter(d, "t", 0, [1])).records)  # ISR shrinks to [1]
    d.now = 10_000
    d.heartbeat(2)
    d.heartbeat(3)
    assert d.run(d.controller.poll(d.now)) == 1
    p = _part(d)
    assert (p.leader, p.isr) == (-1, (1,))  # the last ISR member stays in the ISR
    d.heartbeat(1)  # broker 1 comes back and is unfenced: it leads again, cleanly
    p = _part(d)
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 2)  # 0 -> none (1) -> broker 1 (2)


def test_unclean_leader_election_picks_a_live_replica_when_the_topic_allows_it(replicating):
    d = replicating
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=-1, replication_factor=-1,
        assignments=[m.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])],
        configs=[m.CreateTopicsRequest.CreatableTopicConfig(name="unclean.leader.election.enable", value="true")],
    )])  # fmt: skip
    d.run(d.controller.create_topics(req))
    d.append(d.controller.alter_partition(_alter(d, "t", 0, [1])).records)
    d.heartbeat(1, want_fence=True)
    p = _part(d)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), 1)


def test_controlled_shutdown_moves_leadership_then_lets_the_broker_go(replicating):
    d = replicating
    d.create_topic("t", 3, 3)
    res = d.heartbeat(1, want_shut_down=True)
    assert not res.should_shut_down
    b = d.controller.image.cluster.brokers[1]
    assert b.in_controlled_shutdown and not b.active
    assert all(
        p.leader != 1 and 1 not in p.isr
        for p in d.controller.image.topics.by_name["t"].partitions.values()
    )
    d.heartbeat(2)
    d.heartbeat(3)
    res = d.heartbeat(1, want_shut_down=True)
    assert res.should_shut_down and d.controller.image.cluster.brokers[1].fenced
    assert d.heartbeat(1).should_shut_down  # it must register again to come back
    d.incarnations.pop(1)
    d.register(1)
    assert d.controller.image.cluster.brokers[1].active


def test_unregister_broker_removes_it_and_its_isr_places(replicating):
    d = replicating
    d.create_topic("t", 2, 3)
    res = d.run(d.controller.unregister_broker(m.UnregisterBrokerRequest(broker_id=2)))
    assert res.error_code == 0 and 2 not in d.controller.image.cluster.brokers
    assert all(2 not in p.isr for p in d.controller.image.topics.by_name["t"].partitions.values())
    res = d.run(d.controller.unregister_broker(m.UnregisterBrokerRequest(broker_id=2)))
    assert res.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


# -- AlterPartition ----------------------------------------------------------------------------


def _alter(
    d,
    name,
    index,
    isr,
    *,
    leader_epoch=None,
    partition_epoch=None,
    broker=None,
    broker_epoch=None,
    version=3,
):
    p = _part(d, name, index)
    leader = p.leader if broker is None else broker
    t = d.controller.image.topics.by_name[name]
    pd = m.AlterPartitionRequest.PartitionData(
        partition_index=index,
        leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
    )
    if version >= 3:
        pd.new_isr_with_epochs = [
            m.AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1) for b in isr
        ]
    else:
        pd.new_isr = list(isr)
    return m.AlterPartitionRequest(
        broker_id=leader,
        broker_epoch=d.controller.image.cluster.brokers[leader].epoch if broker_epoch is None else broker_epoch,
        topics=[m.AlterPartitionRequest.TopicData(topic_id=t.topic_id, topic_name=name, partitions=[pd])],
    )  # fmt: skip


def _alter_result(d, req, version=3):
    res = d.run(d.controller.alter_partition(req, version))
    return res if res.error_code else res.topics[0].partitions[0]


def test_alter_partition_shrinks_and_expands_the_isr_bumping_the_partition_epoch(replicating):
    d = replicating
    d.create_topic("t", 1, 3)
    leader = _part(d).leader
    out = _alter_result(d, _alter(d, "t", 0, [leader]))
    assert (out.error_code, out.isr, out.leader_epoch, out.partition_epoch) == (0, [leader], 0, 1)
    out = _alter_result(d, _alter(d, "t", 0, [1, 2, 3]))
    assert (out.error_code, sorted(out.isr), out.partition_epoch) == (0, [1, 2, 3], 2)
    assert _part(d).isr == (1, 2, 3)


def test_alter_partition_with_stale_epochs_is_fenced(replicating):
    d = replicating
    d.create_topic("t", 1, 3)
    d.run(
        d.controller.bump_leader_epochs(_bump(d, "t", {0: -1}))
    )  # leader epoch 1, partition epoch 1
    before = _part(d)
    cases = [
        ({"leader_epoch": 0}, ErrorCode.FENCED_LEADER_EPOCH),
        ({"partition_epoch": 0}, ErrorCode.INVALID_UPDATE_VERSION),
        ({"leader_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"partition_epoch": 5}, ErrorCode.NOT_CONTROLLER),
    ]
    for kw, code in cases:
        assert _alter_result(d, _alter(d, "t", 0, [before.leader], **kw)).error_code == code
    follower = next(r for r in before.replicas if r != before.leader)
    assert (
        _alter_result(d, _alter(d, "t", 0, [follower], broker=follower)).error_code
        == ErrorCode.INVALID_REQUEST
    )
    assert (
        _alter_result(d, _alter(d, "t", 0, [follower])).error_code == ErrorCode.INVALID_REQUEST
    )  # drops the leader
    assert (
        _alter_result(d, _alter(d, "t", 0, [before.leader, 9])).error_code
        == ErrorCode.INVALID_REQUEST
    )
    res = _alter_result(d, _alter(d, "t", 0, [before.leader], broker_epoch=12345))
    assert res.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert _part(d) == before


def test_alter_partition_refuses_fenced_isr_members(replicating):
    d = replicating
    d.create_topic("t", 1, 3)
    p = _part(d)
    out = _alter_result(d, _alter(d, "t", 0, [p.leader]))
    assert out.error_code == 0
    other = next(r for r in p.replicas if r != p.leader)
    d.heartbeat(other, want_fence=True)
    assert (
        _alter_result(d, _alter(d, "t", 0, [p.leader, other])).error_code
        == ErrorCode.INELIGIBLE_REPLICA
    )
    assert (
        _alter_result(d, _alter(d, "t", 0, [p.leader, other], version=1), 1).error_code
        == ErrorCode.OPERATION_NOT_ATTEMPTED
    )


def test_alter_partition_unknown_topic_or_partition(d):
    d.create_topic("t", 1, 1)
    req = _alter(d, "t", 0, [_part(d).leader])
    req.topics[0].topic_id = uuid.uuid4()
    assert _alter_result(d, req).error_code == ErrorCode.UNKNOWN_TOPIC_ID
    req = _alter(d, "t", 0, [_part(d).leader])
    req.topics[0].partitions[0].partition_index = 5
    assert _alter_result(d, req).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- BumpLeaderEpochs (decision D-10) ----------------------------------------------------------


def _bump(d, name, mins, topic_id=None):
    t = d.controller.image.topics.by_name.get(name)
    return m.BumpLeaderEpochsRequest(topics=[m.BumpLeaderEpochsRequest.TopicState(
        topic_id=topic_id or t.topic_id,
        partitions=[m.BumpLeaderEpochsRequest.LeaderEpochState(partition_index=i, min_leader_epoch=e) for i, e in mins.items()],
    )])  # fmt: skip


def test_bump_leader_epochs_new_epoch_is_max_of_current_plus_one_and_the_minimum(replicating):
    d = replicating
    d.create_topic("t", 3, 2)
    before = {i: p for i, p in d.controller.image.topics.by_name["t"].partitions.items()}
    res = d.run(d.controller.bump_leader_epochs(_bump(d, "t", {0: -1, 1: 0, 2: 10})))
    assert res.error_code == 0 and res.topics[0].topic_name == "t"
    assert [p.error_code for p in res.topics[0].partitions] == [0, 0, 0]
    after = d.controller.image.topics.by_name["t"].partitions
    assert [after[i].leader_epoch for i in range(3)] == [1, 1, 10]
    assert all(
        after[i].leader == before[i].leader and after[i].isr == before[i].isr for i in range(3)
    )
    d.run(d.controller.bump_leader_epochs(_bump(d, "t", {2: 4})))
    assert d.controller.image.topics.by_name["t"].partitions[2].leader_epoch == 11  # current + 1


def test_bump_leader_epochs_writes_partition_change_v3_with_min_leader_epoch(d):
    d.create_topic("t", 1, 1)
    start = len(d.log)
    d.run(d.controller.bump_leader_epochs(_bump(d, "t", {0: 7})))
    rec, version = decode_record(d.log[start])
    assert (version, rec.min_leader_epoch, rec.leader) == (3, 7, _part(d).leader)


def test_bump_leader_epochs_unknown_topic_or_partition_and_feature_off(d):
    d.create_topic("t", 1, 1)
    res = d.run(d.controller.bump_leader_epochs(_bump(d, "t", {0: 3}, topic_id=uuid.uuid4())))
    assert res.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    res = d.run(d.controller.bump_leader_epochs(_bump(d, "t", {4: 3})))
    assert res.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    d.run(d.controller.update_features(_features(("mirror.version", 0, 2))))
    res = d.controller.bump_leader_epochs(_bump(d, "t", {0: 3}))
    assert res.response.error_code == ErrorCode.UNSUPPORTED_VERSION and res.records == ()


# -- producer ids ------------------------------------------------------------------------------


def _pids(d, broker=1):
    b = d.controller.image.cluster.brokers[broker]
    return d.run(
        d.controller.allocate_producer_ids(
            m.AllocateProducerIdsRequest(broker_id=broker, broker_epoch=b.epoch)
        )
    )


def test_producer_id_blocks_are_consecutive_and_never_reused_across_a_controller_restart(d):
    blocks = [
        (r.producer_id_start, r.producer_id_len) for r in (_pids(d, 1), _pids(d, 2), _pids(d, 1))
    ]
    assert blocks == [(0, 1000), (1000, 1000), (2000, 1000)]
    # A new controller rebuilt from the log continues after the last block.
    restarted = QuorumController(d.config, rng=random.Random(5))
    restarted.replay_batch([decode_record(b)[0] for b in d.log], 0)
    d.controller = restarted
    assert _pids(d, 3).producer_id_start == 3000
    stale = d.run(
        d.controller.allocate_producer_ids(
            m.AllocateProducerIdsRequest(broker_id=1, broker_epoch=-5)
        )
    )
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_producer_ids_from_an_uncommitted_block_are_not_reused_after_renounce(d):
    first = _pids(d).producer_id_start
    result = d.controller.allocate_producer_ids(
        m.AllocateProducerIdsRequest(
            broker_id=1, broker_epoch=d.controller.image.cluster.brokers[1].epoch
        )
    )
    d.controller.replay_batch(list(result.records), len(d.log))  # appended, never committed
    assert d.controller.image.producer_ids.next_producer_id == first + 2000
    d.controller.renounce()  # lost leadership: the uncommitted block is gone with the log tail
    assert d.controller.image.producer_ids.next_producer_id == first + 1000
    assert d.controller.last_offset == len(d.log) - 1
    assert _pids(d).producer_id_start == first + 1000  # its response was never sent


# -- features ----------------------------------------------------------------------------------


def _features(*updates, validate_only=False):
    return m.UpdateFeaturesRequest(
        feature_updates=[m.UpdateFeaturesRequest.FeatureUpdateKey(feature=f, max_version_level=lvl, upgrade_type=t) for f, lvl, t in updates],
        validate_only=validate_only,
    )  # fmt: skip


def test_update_features_mirror_version_can_be_turned_off_and_on(d):
    res = d.run(d.controller.update_features(_features(("mirror.version", 0, 1))))
    assert res.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert "without setting the upgrade type" in res.error_message
    assert d.run(d.controller.update_features(_features(("mirror.version", 0, 2)))).error_code == 0
    assert d.controller.image.features.mirror_version == 0
    assert "mirror.version" not in d.controller.image.features.finalized
    assert d.run(d.controller.update_features(_features(("mirror.version", 1, 1)))).error_code == 0
    assert d.controller.image.features.mirror_version == 1


@pytest.mark.parametrize(
    ("update", "fragment"),
    [
        (("mirror.version", 2, 1), "only supports versions 0-1"),
        (("metadata.version", 31, 1), "only supports versions 7-30"),
        (("metadata.version", 29, 2), "Refusing to perform the requested downgrade"),
        (("no.such.feature", 1, 1), "does not support the given feature"),
        (("kraft.version", 1, 1), "only supports versions 0-0"),
        (("mirror.version", 1, 0), "upgrade type"),
        (("mirror.version", -1, 1), "cannot be less than 0"),
    ],
)
def test_update_features_invalid_updates_are_refused(d, update, fragment):
    start = len(d.log)
    res = d.run(d.controller.update_features(_features(update)))
    assert res.error_code == ErrorCode.INVALID_UPDATE_VERSION and fragment in res.error_message
    assert len(d.log) == start


def test_update_features_one_invalid_update_fails_the_whole_request(d):
    res = d.run(
        d.controller.update_features(
            _features(("mirror.version", 0, 2), ("metadata.version", 31, 1))
        )
    )
    assert res.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert res.error_message.startswith("The update failed for all features")
    assert d.controller.image.features.mirror_version == 1


def test_update_features_v1_reports_each_feature_and_validate_only_writes_nothing(d):
    result = d.controller.update_features(
        _features(("mirror.version", 0, 2), validate_only=True), api_version=1
    )
    assert result.records == ()
    assert [(r.feature, r.error_code) for r in result.response.results] == [("mirror.version", 0)]


def test_update_features_checks_what_registered_brokers_support():
    d = Driver()
    req = m.BrokerRegistrationRequest(
        broker_id=1, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
        features=[m.BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7, max_supported_version=30)],
    )  # fmt: skip
    d.run(d.controller.update_features(_features(("mirror.version", 0, 2))))
    assert d.run(d.controller.register_broker(req, 0)).error_code == 0  # mirror.version 0: fine
    res = d.run(d.controller.update_features(_features(("mirror.version", 1, 1))))
    assert (
        res.error_code == ErrorCode.INVALID_UPDATE_VERSION
        and "Broker 1 only supports versions 0-0" in res.error_message
    )


# -- ACLs --------------------------------------------------------------------------------------


def _acl(name="orders", op=3, pattern=3, principal="User:alice", rtype=2):
    return m.CreateAclsRequest.AclCreation(
        resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host="*", operation=op, permission_type=3,
    )  # fmt: skip


def _filter(name=None, pattern=1, op=1, principal=None, rtype=1):
    return m.DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=principal, host_filter=None, operation=op, permission_type=1,
    )  # fmt: skip


def test_create_acls_is_idempotent_and_validates_each_binding(d):
    res = d.run(
        d.controller.create_acls(m.CreateAclsRequest(creations=[_acl(), _acl(), _acl(op=4)]))
    )
    assert [r.error_code for r in res.results] == [0, 0, 0]
    assert len(d.controller.image.acls.acls) == 2
    bad = d.run(d.controller.create_acls(m.CreateAclsRequest(creations=[
        _acl(pattern=2), _acl(rtype=1), _acl(op=1), _acl(name=""), _acl(principal="alice"),
    ])))  # fmt: skip
    assert {r.error_code for r in bad.results} == {ErrorCode.INVALID_REQUEST}
    assert bad.results[4].error_message.startswith("Could not parse principal from `alice`")
    assert len(d.controller.image.acls.acls) == 2


def test_delete_acls_matches_as_kafka_filters_do(d):
    d.run(d.controller.create_acls(m.CreateAclsRequest(creations=[
        _acl("orders"), _acl("*"), _acl("ord", pattern=4), _acl("payments"), _acl("mirror-a", rtype=8),
    ])))  # fmt: skip
    match = d.controller.delete_acls(m.DeleteAclsRequest(filters=[_filter("orders", pattern=2)]))
    names = sorted(a.resource_name for a in match.response.filter_results[0].matching_acls)
    assert names == ["*", "ord", "orders"]
    literal = d.controller.delete_acls(m.DeleteAclsRequest(filters=[_filter("orders", pattern=3)]))
    assert [a.resource_name for a in literal.response.filter_results[0].matching_acls] == ["orders"]
    mirror = d.controller.delete_acls(m.DeleteAclsRequest(filters=[_filter(rtype=8)]))
    assert [a.resource_name for a in mirror.response.filter_results[0].matching_acls] == [
        "mirror-a"
    ]
    # Two filters matching the same binding: listed under both, removed once.
    res = d.run(
        d.controller.delete_acls(
            m.DeleteAclsRequest(
                filters=[_filter("orders", pattern=3), _filter(principal="User:alice")]
            )
        )
    )
    assert len(res.filter_results[1].matching_acls) == 5
    assert not d.controller.image.acls.acls
    unknown = d.controller.delete_acls(m.DeleteAclsRequest(filters=[_filter(rtype=0)]))
    assert unknown.response.filter_results[0].error_code == ErrorCode.INVALID_REQUEST


# -- the controller's life cycle ---------------------------------------------------------------


def test_renounce_drops_uncommitted_records_and_keeps_committed_ones(d):
    committed = d.controller.image
    result = d.controller.create_topics(m.CreateTopicsRequest(topics=[
        m.CreateTopicsRequest.CreatableTopic(name="pending", num_partitions=1, replication_factor=1)
    ]))  # fmt: skip
    first = len(d.log)
    d.controller.replay_batch(list(result.records), first)
    assert "pending" in d.controller.image.topics.by_name
    d.controller.commit(first)  # only the TopicRecord got committed
    d.controller.renounce()
    image = d.controller.image
    assert "pending" in image.topics.by_name and image.topics.by_name["pending"].num_partitions == 0
    assert image.offset == first and committed.offset == first - 1


def test_replay_skips_offsets_it_has_already_replayed(d):
    before = d.controller.image
    d.controller.replay_batch([decode_record(b)[0] for b in d.log], 0)
    assert d.controller.image is before
