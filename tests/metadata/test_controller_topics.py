"""The controller's topic and config operations, through its own interface: what is created,
and the error code and message for each kind of bad input."""

from __future__ import annotations

import uuid

import pytest

from kcore.client.admin import reassignments_request
from kcore.metadata import decode_record
from kcore.metadata.context import ControllerConfig, uuid_text
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .harness import REPLICATING, Driver


@pytest.fixture
def d() -> Driver:
    """Three brokers and kcore's limit: one replica per partition until issue #17."""
    drv = Driver(seed=42, props={"num.partitions": "3"})
    for b in (1, 2, 3):
        drv.register(b)
    return drv


@pytest.fixture
def replicating() -> Driver:
    """Three brokers and a controller as replication (#17) will run it: several replicas."""
    drv = Driver(seed=42, props={"num.partitions": "3"}, max_replication_factor=REPLICATING)
    for b in (1, 2, 3):
        drv.register(b)
    return drv


def _records_since(d: Driver, start: int):
    return [decode_record(b)[0] for b in d.log[start:]]


# -- CreateTopics ------------------------------------------------------------------------------


def test_create_topics_uses_the_broker_config_defaults_and_writes_one_batch(d):
    start = len(d.log)
    res = d.create_topic("orders", configs={"retention.ms": "1000"})
    assert (res.error_code, res.error_message) == (0, None)
    assert (res.num_partitions, res.replication_factor) == (3, 1)
    assert {c.name: c.value for c in res.configs}["retention.ms"] == "1000"
    recs = _records_since(d, start)
    assert [type(r).__name__ for r in recs] == ["TopicRecord", "ConfigRecord"] + [
        "PartitionRecord"
    ] * 3
    assert recs[0].topic_id == res.topic_id
    topic = d.controller.image.topics.by_name["orders"]
    for reg in topic.partitions.values():
        assert len(reg.replicas) == 1 and reg.isr == reg.replicas and reg.leader == reg.replicas[0]
        assert (reg.leader_epoch, reg.partition_epoch) == (0, 0)
    assert d.controller.image.configs.topic("orders") == {"retention.ms": "1000"}


def test_create_topics_spreads_leaders_over_the_brokers(d):
    d.create_topic("spread", 30, 1)
    leaders = [p.leader for p in d.controller.image.topics.by_name["spread"].partitions.values()]
    assert {leaders.count(b) for b in (1, 2, 3)} == {10}


def test_create_topics_places_replicas_on_distinct_racks_when_brokers_have_racks():
    d = Driver(seed=3, max_replication_factor=REPLICATING)
    for b, rack in [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]:
        d.register(b, rack=rack)
    d.create_topic("racked", 12, 3)
    racks = {b: d.controller.image.cluster.brokers[b].rack for b in range(1, 7)}
    for reg in d.controller.image.topics.by_name["racked"].partitions.values():
        assert len({racks[r] for r in reg.replicas}) == 3


def test_create_topics_topic_ids_are_random_nonzero_and_never_start_with_a_dash(d):
    ids = [d.create_topic(f"t{i}", 1, 1).topic_id for i in range(50)]
    assert len(set(ids)) == 50
    assert all(i != uuid.UUID(int=0) and not uuid_text(i).startswith("-") for i in ids)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        (".", 'Topic name cannot be "." or ".."'),
        ("..", 'Topic name cannot be "." or ".."'),
        ("a" * 250, "Topic name is illegal, it can't be longer than 249 characters, Topic name: " + "a" * 250),
        ("bad name", "Topic name \"bad name\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
        ("ünïcode", "Topic name \"ünïcode\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
    ],
)  # fmt: skip
def test_create_topics_invalid_topic_names_are_refused_with_kafkas_messages(d, name, message):
    res = d.create_topic(name)
    assert (res.error_code, res.error_message) == (ErrorCode.INVALID_TOPIC_EXCEPTION, message)
    assert name not in d.controller.image.topics.by_name


def test_create_topics_a_249_character_name_is_fine(d):
    assert d.create_topic("a" * 249, 1, 1).error_code == 0


def test_create_topics_dot_and_underscore_collide(d):
    assert d.create_topic("a.b", 1, 1).error_code == 0
    res = d.create_topic("a_b", 1, 1)
    assert res.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert res.error_message == "Topic 'a_b' collides with existing topic: a.b"


def test_create_topics_colliding_names_in_one_request_create_only_the_first(d):
    req = m.CreateTopicsRequest(
        topics=[m.CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in ("x.y", "x_y")]
    )  # fmt: skip
    res = d.run(d.controller.create_topics(req))
    assert [t.error_code for t in res.topics] == [0, ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_create_topics_an_existing_topic_is_refused(d):
    d.create_topic("orders")
    res = d.create_topic("orders")
    assert (res.error_code, res.error_message) == (36, "Topic 'orders' already exists.")


def test_create_topics_a_name_twice_in_one_request_is_an_invalid_request(d):
    topic = m.CreateTopicsRequest.CreatableTopic(
        name="twice", num_partitions=1, replication_factor=1
    )
    res = d.run(d.controller.create_topics(m.CreateTopicsRequest(topics=[topic, topic])))
    assert [(t.name, t.error_code, t.error_message) for t in res.topics] == [
        ("twice", ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    ]
    assert "twice" not in d.controller.image.topics.by_name


def test_create_topics_replication_factor_above_the_active_broker_count_is_refused(replicating):
    d = replicating
    res = d.create_topic("big", 1, 4)
    assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert res.error_message == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
        "cannot be reached because only 3 broker(s) are registered and active."
    )
    d.heartbeat(3, want_fence=True)  # broker 3 fences itself: two active brokers remain
    assert d.create_topic("three", 1, 3).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert d.create_topic("two", 1, 2).error_code == 0


@pytest.mark.parametrize(
    ("partitions", "rf", "code", "message"),
    [
        (0, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (-2, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value."),
        (20_000, 1, ErrorCode.INVALID_REQUEST, "Unable to perform excessively large batch operation."),
    ],
)  # fmt: skip
def test_create_topics_bad_counts_are_refused(d, partitions, rf, code, message):
    res = d.create_topic("counts", partitions, rf)
    assert (res.error_code, res.error_message) == (code, message)


def test_create_topics_unknown_and_bad_config_keys_are_refused_all_at_once(d):
    res = d.create_topic("cfg", configs={"no.such.key": "1", "retention.ms": "soon"})
    assert res.error_code == ErrorCode.INVALID_CONFIG
    assert "no.such.key" in res.error_message and "retention.ms" in res.error_message
    assert "cfg" not in d.controller.image.topics.by_name


def test_create_topics_clients_cannot_set_the_internal_mirror_name(d):
    res = d.create_topic("m", configs={"mirror.name": "east"})
    assert res.error_code == ErrorCode.INVALID_CONFIG and "internal" in res.error_message


def test_create_topics_null_config_values_are_refused(d):
    res = d.create_topic("nulls", configs={"retention.ms": None})
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_CONFIG,
        "Null value not supported for topic configs: retention.ms",
    )


def _assigned(name, assignment, **kw):
    return m.CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=kw.get("partitions", -1),
        replication_factor=kw.get("rf", -1),
        assignments=[
            m.CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in assignment
        ],
        mirror_info=kw.get("mirror_info"),
    )


@pytest.mark.parametrize(
    ("assignment", "kw", "code", "message"),
    [
        ([(0, [1, 2])], {"rf": 2}, ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not set to -1."),
        ([(0, [1, 2])], {"partitions": 1}, ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not set to -1."),
        ([(0, [])], {}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        ([(0, [1, 9])], {}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 9, but no such broker is registered."),
        ([(0, [2, 2])], {}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 2 more than once."),
        ([(0, [1, 2]), (1, [3])], {}, ErrorCode.INVALID_REPLICATION_FACTOR, "The manual partition assignment includes a partition with 2 replicas, but replication is not available yet: kcore does not copy partitions between brokers (issue #17), so a partition can have at most 1 replica."),
        ([(0, [1]), (2, [2])], {}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"),
        ([(0, [1]), (0, [2])], {}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for partition 0"),
    ],
)  # fmt: skip
def test_create_topics_bad_manual_assignments_are_refused(d, assignment, kw, code, message):
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("man", assignment, **kw)])
        )
    )
    assert (res.topics[0].error_code, res.topics[0].error_message) == (code, message)


def test_create_topics_manual_assignment_is_used_as_given(d):
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("man", [(0, [3]), (1, [2])])])
        )
    )
    assert res.topics[0].error_code == 0
    parts = d.controller.image.topics.by_name["man"].partitions
    assert (parts[0].replicas, parts[0].leader, parts[1].replicas) == ((3,), 3, (2,))


def test_create_topics_manual_assignment_of_several_replicas_is_used_as_given(replicating):
    d = replicating
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("man", [(0, [3, 1]), (1, [2, 3])])])
        )
    )
    assert res.topics[0].error_code == 0
    parts = d.controller.image.topics.by_name["man"].partitions
    assert (parts[0].replicas, parts[0].leader, parts[1].replicas) == ((3, 1), 3, (2, 3))
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("uneven", [(0, [1, 2]), (1, [3])])])
        )
    )
    assert (res.topics[0].error_code, res.topics[0].error_message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes a partition with 1 replica(s), but this is "
        "not consistent with previous partitions, which have 2 replica(s).",
    )


_NO_REPLICATION = (
    ", but replication is not available yet: kcore does not copy partitions between brokers "
    "(issue #17), so a partition can have at most 1 replica."
)


@pytest.mark.parametrize("rf", [2, 3])
def test_create_topics_replication_factor_above_one_is_refused_until_replication(d, rf):
    start = len(d.log)
    res = d.create_topic("replicated", 1, rf)
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        f"Replication factor {rf} was requested" + _NO_REPLICATION,
    )
    mirror = d.create_topic(
        "mirrored", 1, rf, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=uuid.uuid4())
    )
    assert mirror.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert len(d.log) == start and not d.controller.image.topics.by_name
    assert d.create_topic("single", 1, 1).error_code == 0


def test_create_topics_default_replication_factor_above_one_is_refused_not_capped():
    # Kafka makes an unreachable default.replication.factor visible where it is used: the
    # create fails (INVALID_REPLICATION_FACTOR). kcore does the same rather than refusing to
    # start, and never silently creates fewer replicas than the default asks for.
    d = Driver(props={"default.replication.factor": "3"})
    for b in (1, 2, 3):
        d.register(b)
    res = d.create_topic("defaulted")
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "The default replication factor is 3 (default.replication.factor)" + _NO_REPLICATION,
    )
    assert d.create_topic("explicit", 1, 1).error_code == 0


def test_create_topics_validate_only_writes_nothing(d):
    req = m.CreateTopicsRequest(
        topics=[
            m.CreateTopicsRequest.CreatableTopic(name="dry", num_partitions=2, replication_factor=1)
        ],
        validate_only=True,
    )
    result = d.controller.create_topics(req)
    assert result.records == () and result.response.topics[0].error_code == 0
    assert result.response.topics[0].num_partitions == 2


# -- CreateTopics v8 MirrorInfo (spec M-72 / M-73) ----------------------------------------------


def test_create_topics_mirror_info_topic_id_is_used(d):
    tid = uuid.UUID("5c0ffee0-0000-4000-8000-000000000001")
    res = d.create_topic(
        "mirrored", 2, 1, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=tid)
    )
    assert (res.error_code, res.topic_id) == (0, tid)
    assert d.controller.image.topics.by_id[tid].name == "mirrored"


def test_create_topics_mirror_info_duplicate_topic_id_is_refused(d):
    tid = d.create_topic("local", 1, 1).topic_id
    res = d.create_topic("copy", 1, 1, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=tid))
    assert res.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert res.error_message == f"Topic id {tid} is already used by topic 'local'."
    other = uuid.uuid4()
    req = m.CreateTopicsRequest(
        topics=[
            m.CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=other))
            for n in ("first", "second")
        ]
    )  # fmt: skip
    res = d.run(d.controller.create_topics(req))
    assert [t.error_code for t in res.topics] == [0, ErrorCode.TOPIC_ALREADY_EXISTS]


def test_create_topics_mirror_info_reserved_topic_ids_are_refused(d):
    for tid in (uuid.UUID(int=0), uuid.UUID(int=1)):
        res = d.create_topic("r", 1, 1, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=tid))
        assert res.error_code == ErrorCode.INVALID_REQUEST


def test_create_topics_mirror_info_needs_every_replica_on_an_active_broker(replicating):
    d = replicating
    d.heartbeat(2, want_shut_down=True)  # broker 2 leads nothing: it shuts down at once
    assert d.controller.image.cluster.brokers[2].fenced
    mirror_info = m.CreateTopicsRequest.MirrorInfo(topic_id=uuid.uuid4())
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("mt", [(0, [1, 2])], mirror_info=mirror_info)])
        )
    )
    assert res.topics[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert res.topics[0].error_message.startswith(
        "Broker 2 in the assignment of partition 0 is fenced"
    )
    # Without MirrorInfo Kafka accepts a fenced replica (it joins the ISR later).
    res = d.run(
        d.controller.create_topics(
            m.CreateTopicsRequest(topics=[_assigned("plain", [(0, [1, 2])])])
        )
    )
    assert res.topics[0].error_code == 0
    assert d.controller.image.topics.by_name["plain"].partitions[0].isr == (1,)


def test_create_topics_mirror_info_is_refused_while_mirroring_is_off(d):
    d.run(d.controller.update_features(m.UpdateFeaturesRequest(feature_updates=[
        m.UpdateFeaturesRequest.FeatureUpdateKey(feature="mirror.version", max_version_level=0, upgrade_type=2)
    ])))  # fmt: skip
    res = d.create_topic(
        "m", 1, 1, mirror_info=m.CreateTopicsRequest.MirrorInfo(topic_id=uuid.uuid4())
    )
    assert res.error_code == ErrorCode.UNSUPPORTED_VERSION


# -- DeleteTopics ------------------------------------------------------------------------------


def test_delete_topics_by_name_and_by_id(d):
    a = d.create_topic("a", 1, 1).topic_id
    b = d.create_topic("b", 1, 1).topic_id
    req = m.DeleteTopicsRequest(
        topics=[m.DeleteTopicsRequest.DeleteTopicState(name="a"), m.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=b)]
    )  # fmt: skip
    res = d.run(d.controller.delete_topics(req))
    assert [(r.name, r.topic_id, r.error_code) for r in res.responses] == [("a", a, 0), ("b", b, 0)]
    assert not d.controller.image.topics.by_id


def test_delete_topics_unknown_name_or_id_is_refused(d):
    req = m.DeleteTopicsRequest(
        topics=[m.DeleteTopicsRequest.DeleteTopicState(name="ghost"), m.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())]
    )  # fmt: skip
    res = d.run(d.controller.delete_topics(req))
    assert [r.error_code for r in res.responses] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    ]
    old = d.run(
        d.controller.delete_topics(m.DeleteTopicsRequest(topic_names=["ghost"]), api_version=5)
    )
    assert old.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics_can_be_disabled():
    d = Driver(props={"delete.topic.enable": "false"})
    d.register(1)
    d.create_topic("keep", 1, 1)
    res = d.run(
        d.controller.delete_topics(m.DeleteTopicsRequest(topic_names=["keep"]), api_version=5)
    )
    assert res.responses[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED


# -- CreatePartitions --------------------------------------------------------------------------


def _grow(d, name, count, assignments=None, validate_only=False):
    req = m.CreatePartitionsRequest(
        topics=[m.CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=assignments)],
        validate_only=validate_only,
    )  # fmt: skip
    return d.run(d.controller.create_partitions(req)).results[0]


def test_create_partitions_adds_partitions_with_the_topics_replication_factor(replicating):
    d = replicating
    d.create_topic("grow", 2, 2)
    assert _grow(d, "grow", 5).error_code == 0
    parts = d.controller.image.topics.by_name["grow"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4] and all(len(p.replicas) == 2 for p in parts.values())


def test_create_partitions_only_increases(d):
    d.create_topic("grow", 3, 1)
    same = _grow(d, "grow", 3)
    assert (same.error_code, same.error_message) == (
        ErrorCode.INVALID_PARTITIONS,
        "Topic already has 3 partition(s).",
    )
    fewer = _grow(d, "grow", 2)
    assert (fewer.error_code, fewer.error_message) == (
        ErrorCode.INVALID_PARTITIONS,
        "The topic grow currently has 3 partition(s); 2 would not be an increase.",
    )
    assert _grow(d, "ghost", 4).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _grow(d, "grow", 4, validate_only=True).error_code == 0
    assert d.controller.image.topics.by_name["grow"].num_partitions == 3


def test_create_partitions_checks_manual_assignments(d):
    d.create_topic("grow", 1, 1)
    a = m.CreatePartitionsRequest.CreatePartitionsAssignment
    res = _grow(d, "grow", 3, [a(broker_ids=[1])])
    assert (
        res.error_message
        == "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    )
    res = _grow(d, "grow", 2, [a(broker_ids=[9])])
    assert res.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _grow(d, "grow", 2, [a(broker_ids=[2])]).error_code == 0
    assert d.controller.image.topics.by_name["grow"].partitions[1].replicas == (2,)


def test_create_partitions_checks_manual_assignments_of_several_replicas(replicating):
    d = replicating
    d.create_topic("grow", 1, 2)
    a = m.CreatePartitionsRequest.CreatePartitionsAssignment
    res = _grow(d, "grow", 2, [a(broker_ids=[1])])
    assert res.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _grow(d, "grow", 2, [a(broker_ids=[3, 1])]).error_code == 0
    assert d.controller.image.topics.by_name["grow"].partitions[1].replicas == (3, 1)


def test_create_partitions_with_several_replicas_is_refused_until_replication(d):
    d.create_topic("grow", 1, 1)
    a = m.CreatePartitionsRequest.CreatePartitionsAssignment
    res = _grow(d, "grow", 2, [a(broker_ids=[1, 2])])
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "The manual partition assignment includes a partition with 2 replicas" + _NO_REPLICATION,
    )
    assert d.controller.image.topics.by_name["grow"].num_partitions == 1


def test_create_partitions_of_a_topic_with_several_replicas_is_refused(replicating):
    # A topic an older kcore created with RF 2 (its metadata log outlives the limit) gets no
    # new partition of 2 replicas that would report followers in sync that never fetch.
    d = replicating
    d.create_topic("old", 1, 2)
    limited = Driver(seed=42)
    limited.log = d.log
    limited.controller = type(d.controller)(limited.config, rng=limited.rng)
    limited.controller.replay_batch([decode_record(b)[0] for b in d.log], 0)
    limited.controller.commit(len(d.log) - 1)
    res = _grow(limited, "old", 2)
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "The topic old has replication factor 2" + _NO_REPLICATION,
    )


# -- configs -----------------------------------------------------------------------------------


def _incremental(d, rtype, name, *ops, validate_only=False):
    req = m.IncrementalAlterConfigsRequest(
        resources=[
            m.IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=rtype,
                resource_name=name,
                configs=[m.IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops],
            )
        ],
        validate_only=validate_only,
    )  # fmt: skip
    return d.run(d.controller.incremental_alter_configs(req)).responses[0]


def test_incremental_alter_configs_set_delete_append_subtract_on_a_topic(d):
    d.create_topic("cfg", 1, 1)
    assert (
        _incremental(
            d, 2, "cfg", ("retention.ms", 0, "100"), ("cleanup.policy", 0, "delete")
        ).error_code
        == 0
    )
    assert _incremental(d, 2, "cfg", ("cleanup.policy", 2, "compact")).error_code == 0
    assert d.controller.image.configs.topic("cfg") == {
        "retention.ms": "100",
        "cleanup.policy": "delete,compact",
    }
    assert (
        _incremental(
            d, 2, "cfg", ("cleanup.policy", 3, "delete"), ("retention.ms", 1, None)
        ).error_code
        == 0
    )
    assert d.controller.image.configs.topic("cfg") == {"cleanup.policy": "compact"}
    res = _incremental(d, 2, "cfg", ("retention.ms", 2, "5"))
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_CONFIG,
        "Can't APPEND to key retention.ms because its type is not LIST.",
    )


def test_incremental_alter_configs_writes_only_changed_values(d):
    d.create_topic("cfg", 1, 1, configs={"retention.ms": "100"})
    start = len(d.log)
    assert (
        _incremental(d, 2, "cfg", ("retention.ms", 0, "100"), ("segment.ms", 1, None)).error_code
        == 0
    )
    assert len(d.log) == start


def test_alter_configs_of_an_unknown_topic_is_refused(d):
    res = _incremental(d, 2, "ghost", ("retention.ms", 0, "100"))
    assert (res.error_code, res.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "The topic 'ghost' does not exist.",
    )
    legacy = d.run(d.controller.alter_configs(m.AlterConfigsRequest(resources=[
        m.AlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name="ghost")
    ]))).responses[0]  # fmt: skip
    assert legacy.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_unknown_keys_and_bad_values_are_refused(d):
    d.create_topic("cfg", 1, 1)
    res = _incremental(d, 2, "cfg", ("no.such", 0, "1"))
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_CONFIG,
        "Unknown topic config name: no.such",
    )
    res = _incremental(d, 2, "cfg", ("min.insync.replicas", 0, "0"))
    assert res.error_code == ErrorCode.INVALID_CONFIG
    res = _incremental(d, 2, "cfg", ("mirror.name", 0, "east"))
    assert res.error_code == ErrorCode.INVALID_CONFIG
    res = _incremental(d, 2, "cfg", ("retention.ms", 0, "1"), ("retention.ms", 1, None))
    assert (res.error_code, res.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Error due to duplicate config keys",
    )
    assert d.controller.image.configs.topic("cfg") == {}


def test_alter_configs_validate_only_writes_nothing(d):
    d.create_topic("cfg", 1, 1)
    res = _incremental(d, 2, "cfg", ("retention.ms", 0, "100"), validate_only=True)
    assert res.error_code == 0 and d.controller.image.configs.topic("cfg") == {}


def test_alter_configs_broker_resources(d):
    assert _incremental(d, 4, "", ("log.retention.ms", 0, "1000")).error_code == 0
    assert _incremental(d, 4, "1", ("num.io.threads", 0, "4")).error_code == 0
    assert d.controller.image.configs.cluster_defaults() == {"log.retention.ms": "1000"}
    assert d.controller.image.configs.broker(1) == {"num.io.threads": "4"}
    assert (
        _incremental(d, 4, "", ("no.such.broker.key", 0, "1")).error_code
        == ErrorCode.INVALID_CONFIG
    )
    assert _incremental(d, 4, "", ("num.io.threads", 0, "0")).error_code == ErrorCode.INVALID_CONFIG
    assert (
        _incremental(d, 4, "9", ("num.io.threads", 0, "2")).error_code
        == ErrorCode.BROKER_ID_NOT_REGISTERED
    )
    assert (
        _incremental(d, 4, "x", ("num.io.threads", 0, "2")).error_code == ErrorCode.INVALID_REQUEST
    )
    assert (
        _incremental(d, 16, "m1", ("interval.ms", 0, "1")).error_code == ErrorCode.INVALID_REQUEST
    )
    # CLUSTER_MIRROR has its validator (kcore.metadata.mirror_control): the mirror must exist.
    assert (
        _incremental(d, 64, "m1", ("bootstrap.servers", 0, "h:1")).error_code
        == ErrorCode.MIRROR_NOT_FOUND
    )


def test_alter_configs_legacy_replaces_the_overrides_but_keeps_internal_keys(d):
    d.create_topic("cfg", 1, 1, configs={"retention.ms": "100", "segment.ms": "99999"})
    # The controller's mirror operations set mirror.name; simulate one.
    d.append(
        [m.ConfigRecord(resource_type=2, resource_name="cfg", name="mirror.name", value="east")]
    )
    req = m.AlterConfigsRequest(resources=[m.AlterConfigsRequest.AlterConfigsResource(
        resource_type=2, resource_name="cfg", configs=[m.AlterConfigsRequest.AlterableConfig(name="retention.ms", value="5")]
    )])  # fmt: skip
    assert d.run(d.controller.alter_configs(req)).responses[0].error_code == 0
    assert d.controller.image.configs.topic("cfg") == {"retention.ms": "5", "mirror.name": "east"}


def test_controller_config_reads_kafkas_property_names():
    cfg = ControllerConfig.from_properties(
        {"node.id": "1", "default.replication.factor": "3", "num.partitions": "6", "broker.session.timeout.ms": "18000"},
        cluster_id="c",
    )  # fmt: skip
    assert (cfg.default_replication_factor, cfg.num_partitions, cfg.broker_session_timeout_ms) == (
        3,
        6,
        18000,
    )
    assert (
        ControllerConfig.from_properties({"node.id": "1"}, cluster_id="c").broker_session_timeout_ms
        == 9000
    )
    with pytest.raises(ValueError):
        ControllerConfig.from_properties({"node.id": "1", "num.partitions": "0"}, cluster_id="c")


# -- AlterPartitionReassignments / ListPartitionReassignments -----------------------------------


def _reassign(d, name, *targets, allow_rf_change=True, api_version=1):
    # A list of pairs, not a dict: one partition may be asked several times.
    R = m.AlterPartitionReassignmentsRequest
    req = reassignments_request({}, allow_replication_factor_change=allow_rf_change)
    req.topics = [R.ReassignableTopic(name=name, partitions=[
        R.ReassignablePartition(partition_index=i, replicas=r) for i, r in targets])]  # fmt: skip
    result = d.controller.alter_partition_reassignments(req, api_version)
    assert result.records == ()  # nothing is ever moved
    return [(p.error_code, p.error_message) for p in result.response.responses[0].partitions]


def test_alter_partition_reassignments_refuses_what_needs_replication(d):
    d.create_topic("r", 1, 1)
    leader = _part_of(d, "r").leader
    other = 1 if leader != 1 else 2
    assert _reassign(d, "r", (0, [leader]), (0, [leader, other]), (0, [other])) == [
        (0, None),  # the current replicas: done at once
        (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "The manual partition assignment includes a partition with 2 replicas"
            + _NO_REPLICATION,
        ),
        (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Reassigning r-0 from replicas [{leader}] to [{other}] takes 2 replicas while the "
            "new ones copy the log" + _NO_REPLICATION,
        ),
    ]
    assert _part_of(d, "r").replicas == (leader,)


def test_alter_partition_reassignments_kafkas_per_partition_errors(d):
    d.create_topic("r", 1, 1)
    assert [code for code, _ in _reassign(d, "r", (0, None), (5, [1]), (0, [9]))] == [
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    ]
    assert _reassign(d, "ghost", (0, [1]))[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_partition_reassignments_without_replication_factor_change(replicating):
    d = replicating
    d.create_topic("r", 1, 2)
    assert _reassign(d, "r", (0, [1, 2, 3]), allow_rf_change=False) == [
        (ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")
    ]


def test_list_partition_reassignments_is_empty(d):
    d.create_topic("r", 1, 1)
    L = m.ListPartitionReassignmentsRequest
    for topics in (None, [L.ListPartitionReassignmentsTopics(name="r", partition_indexes=[0])]):
        result = d.controller.list_partition_reassignments(L(topics=topics))
        assert result.records == () and result.response.topics == []


def _part_of(d, name, index=0):
    return d.controller.image.topics.by_name[name].partitions[index]
