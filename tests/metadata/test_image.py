"""The metadata image and its deltas: replay properties, structural sharing, the record
semantics of partitions, brokers and configs, and the loader that feeds publishers."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcore.metadata import (
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
    MetadataReplayError,
    decode_record,
    image_records,
    replay_records,
)
from kcore.metadata import delta as delta_mod
from kcore.metadata import records as rec_mod
from kcore.metadata.image import ConfigResourceType, PartitionRegistration
from kcore.metadata.records import PartitionChangeRecord
from kcore.protocol import messages as m

from .harness import CLUSTER_ID, Driver
from .test_controller_model import random_operations

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)


def _topic_records(topic_id=T1, name="t1", partitions=2, replicas=(1, 2, 3)):
    out = [m.TopicRecord(name=name, topic_id=topic_id)]
    for p in range(partitions):
        out.append(
            PartitionRegistration(replicas=replicas, isr=replicas, leader=replicas[0]).to_record(
                topic_id, p
            )
        )
    return out


def _base_image() -> MetadataImage:
    recs = [
        m.FeatureLevelRecord(name="metadata.version", feature_level=30),
        *_topic_records(T1, "t1"),
        *_topic_records(T2, "t2"),
        m.ConfigRecord(resource_type=2, resource_name="t1", name="retention.ms", value="1000"),
    ]
    return replay_records(MetadataImage.empty(CLUSTER_ID), recs, 0)


def _random_log(seed: int, steps: int) -> list[bytes]:
    """A valid metadata log made by the controller from random operations."""
    d = Driver(seed=seed)
    random_operations(d, seed, steps)
    return d.log


# -- replay properties -------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), splits=st.lists(st.integers(0, 400), max_size=8))
def test_image_replaying_the_same_records_in_any_batches_gives_equal_images(seed, splits):
    log = [decode_record(b)[0] for b in _random_log(seed, 25)]
    whole = replay_records(MetadataImage.empty(CLUSTER_ID), log, 0)
    image = MetadataImage.empty(CLUSTER_ID)
    bounds = sorted({0, len(log), *(s % (len(log) + 1) for s in splits)})
    for lo, hi in zip(bounds, bounds[1:]):
        image = replay_records(image, log[lo:hi], lo)
    assert image == whole
    # ... and the image written back as records rebuilds it (a snapshot).
    rebuilt = replay_records(MetadataImage.empty(CLUSTER_ID), image_records(whole))
    assert rebuilt == MetadataImage(**{**_fields(whole), "offset": -1})


def _fields(image: MetadataImage) -> dict:
    return {f: getattr(image, f) for f in image.__dataclass_fields__}


def test_image_unchanged_topics_and_partitions_keep_their_objects():
    before = _base_image()
    change = PartitionChangeRecord(topic_id=T1, partition_id=1, isr=[1, 2])
    after = replay_records(before, [change], 10)
    assert after.topics.by_id[T2] is before.topics.by_id[T2]
    assert after.topics.by_name["t2"] is before.topics.by_id[T2]
    assert after.topics.by_id[T1] is not before.topics.by_id[T1]
    assert after.topics.by_id[T1].partitions[0] is before.topics.by_id[T1].partitions[0]
    assert after.topics.by_id[T1].partitions[1].isr == (1, 2)
    for part in ("features", "cluster", "configs", "acls", "producer_ids", "scram"):
        assert getattr(after, part) is getattr(before, part)
    assert (before.offset, after.offset) == (7, 10)


def test_image_a_leader_in_the_change_record_bumps_the_leader_epoch_even_if_unchanged():
    reg = _base_image().topics.by_id[T1].partitions[0]
    isr_only = reg.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, isr=[1, 2]))
    assert (isr_only.leader_epoch, isr_only.partition_epoch) == (0, 1)
    same_leader = reg.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=1))
    assert (same_leader.leader, same_leader.leader_epoch, same_leader.partition_epoch) == (1, 1, 1)
    moved = same_leader.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2))
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch) == (2, 2, 2)


@pytest.mark.parametrize(
    ("current", "minimum", "expected"), [(0, -1, 1), (0, 1, 1), (3, 10, 10), (10, 4, 11)]
)
def test_image_min_leader_epoch_makes_the_epoch_at_least_the_floor(current, minimum, expected):
    reg = PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=current)
    rec = PartitionChangeRecord(topic_id=T1, partition_id=0, leader=1, min_leader_epoch=minimum)
    assert reg.merge(rec).leader_epoch == expected


def test_image_removing_a_topic_drops_it_by_name_and_id_and_drops_its_configs():
    before = _base_image()
    after = replay_records(before, [m.RemoveTopicRecord(topic_id=T1)], 20)
    assert T1 not in after.topics.by_id and "t1" not in after.topics.by_name
    assert after.configs.topic("t1") == {}
    again = replay_records(after, _topic_records(uuid.uuid4(), "t1", 1), 21)
    assert again.configs.topic("t1") == {} and again.topics.by_name["t1"].num_partitions == 1


def test_image_config_records_set_and_delete_per_resource():
    image = replay_records(
        MetadataImage.empty(),
        [
            m.ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="5"),
            m.ConfigRecord(
                resource_type=64, resource_name="m1", name="bootstrap.servers", value="h:1"
            ),
            m.ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value=None),
        ],
    )
    assert image.configs.cluster_defaults() == {}
    assert (4, "") not in image.configs.resources
    assert image.configs.get(ConfigResourceType.CLUSTER_MIRROR, "m1") == {
        "bootstrap.servers": "h:1"
    }


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord(topic_id=uuid.UUID(int=9), partition_id=0, isr=[1]),
        PartitionChangeRecord(topic_id=T1, partition_id=7, isr=[1]),
        m.PartitionRecord(topic_id=uuid.UUID(int=9), partition_id=0),
        m.RemoveTopicRecord(topic_id=uuid.UUID(int=9)),
        m.FenceBrokerRecord(id=5, epoch=0),
        m.RemoveAccessControlEntryRecord(id=uuid.UUID(int=9)),
        m.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=0),
    ],
    ids=lambda rec: type(rec).__name__,
)
def test_image_a_change_to_something_that_does_not_exist_stops_the_replay(record):
    with pytest.raises(MetadataReplayError):
        replay_records(_base_image(), [record])


def test_image_broker_state_changes_need_the_registered_epoch():
    reg = m.RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.uuid4(), broker_epoch=7)
    image = replay_records(MetadataImage.empty(), [reg])
    assert image.cluster.brokers[1].fenced and not image.cluster.brokers[1].active
    with pytest.raises(MetadataReplayError, match="epoch"):
        replay_records(image, [m.UnfenceBrokerRecord(id=1, epoch=6)])
    image = replay_records(
        image,
        [
            m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, fenced=-1),
            m.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, in_controlled_shutdown=1),
        ],
    )
    b = image.cluster.brokers[1]
    assert not b.fenced and b.in_controlled_shutdown and not b.active


def test_image_snapshot_records_start_with_metadata_version():
    recs = image_records(_base_image())
    assert isinstance(recs[0], m.FeatureLevelRecord) and recs[0].name == "metadata.version"


# -- the loader and publishers -----------------------------------------------------------------


class Recorder:
    name = "recorder"

    def __init__(self):
        self.calls: list[tuple[MetadataDelta, MetadataImage]] = []

    def on_metadata_update(self, delta, image):
        self.calls.append((delta, image))


def test_loader_publishes_each_committed_batch_with_its_delta():
    loader = MetadataLoader(cluster_id=CLUSTER_ID)
    pub = Recorder()
    loader.install_publisher(pub)
    batch = [(i, rec_mod.encode_record(r)) for i, r in enumerate(_topic_records())]
    image = loader.handle_commit(batch)
    assert len(pub.calls) == 1
    delta, published = pub.calls[0]
    assert published is image is loader.image and image.offset == 2
    assert delta.topics_delta.created == {T1}
    changes = delta.topics_delta.local_changes(2)
    assert set(changes.followers) == {(T1, 0), (T1, 1)} and not changes.leaders
    assert set(delta.topics_delta.local_changes(1).leaders) == {(T1, 0), (T1, 1)}
    loader.handle_commit([(3, m.RemoveTopicRecord(topic_id=T1))])
    assert pub.calls[-1][0].topics_delta.local_changes(3).deletes == {(T1, 0), (T1, 1)}


def test_loader_catches_a_late_publisher_up_with_the_whole_image():
    loader = MetadataLoader(cluster_id=CLUSTER_ID)
    loader.handle_commit(list(enumerate(_topic_records())))
    pub = Recorder()
    loader.install_publisher(pub)
    delta, image = pub.calls[0]
    assert image is loader.image
    assert delta.topics_delta.created == {T1}
    assert delta.apply() == loader.image


def test_loader_publishes_a_metadata_transaction_only_when_it_ends():
    loader = MetadataLoader(cluster_id=CLUSTER_ID)
    pub = Recorder()
    loader.install_publisher(pub)
    topic = _topic_records()
    loader.handle_commit([(0, m.BeginTransactionRecord(name="t")), (1, topic[0])])
    assert pub.calls == [] and loader.image.topics.by_id == {}
    loader.handle_commit([(2, topic[1]), (3, topic[2]), (4, m.EndTransactionRecord())])
    assert len(pub.calls) == 1 and loader.image.topics.by_id[T1].num_partitions == 2
    other = _topic_records(T2, "t2")
    loader.handle_commit([(5, m.BeginTransactionRecord()), (6, other[0])])
    loader.handle_commit([(7, m.AbortTransactionRecord(reason="no"))])
    assert T2 not in loader.image.topics.by_id


def test_loader_snapshot_replaces_the_image_and_reports_topics_it_lacks():
    loader = MetadataLoader(cluster_id=CLUSTER_ID)
    loader.handle_commit(list(enumerate(_topic_records() + _topic_records(T2, "t2"))))
    pub = Recorder()
    loader.install_publisher(pub)
    snapshot = image_records(
        replay_records(MetadataImage.empty(CLUSTER_ID), _topic_records(T2, "t2"))
    )
    image = loader.load_snapshot(snapshot, last_offset=100)
    assert set(image.topics.by_id) == {T2} and image.offset == 100
    assert set(pub.calls[-1][0].topics_delta.deleted) == {T1}


def test_loader_runs_every_publisher_even_when_one_fails():
    class Failing:
        name = "failing"

        def on_metadata_update(self, delta, image):
            raise RuntimeError("boom")

    loader = MetadataLoader(cluster_id=CLUSTER_ID)
    good = Recorder()
    loader.install_publisher(Failing())
    loader.install_publisher(good)
    with pytest.raises(ExceptionGroup):
        loader.handle_commit(list(enumerate(_topic_records())))
    assert len(good.calls) == 1 and T1 in loader.image.topics.by_id


# -- extensions --------------------------------------------------------------------------------


class _CountingExtension:
    """An image part that counts NoOpRecords and forgets removed topics' names."""

    name = "test-ext"
    record_types = None

    def empty(self):
        return (0, frozenset())

    def new_delta(self, part, delta):
        class D:
            def __init__(self):
                self.noops, self.removed = part

            def replay(self, record):
                if isinstance(record, m.NoOpRecord):
                    self.noops += 1
                elif isinstance(record, m.RemoveTopicRecord):
                    self.removed = self.removed | {record.topic_id}

            def apply(self):
                return (self.noops, self.removed)

        return D()

    def snapshot_records(self, part):
        return [m.NoOpRecord() for _ in range(part[0])]


def test_image_extension_gets_its_part_and_sees_the_records_it_asked_for():
    ext = _CountingExtension()
    delta_mod.register_image_extension(ext)
    try:
        image = replay_records(_base_image(), [m.NoOpRecord(), m.NoOpRecord()])
        assert image.extensions["test-ext"] == (2, frozenset())
        image = replay_records(image, [m.RemoveTopicRecord(topic_id=T1)])
        assert image.extensions["test-ext"] == (2, frozenset({T1}))
        assert MetadataImage.empty().extensions["test-ext"] == (0, frozenset())
        assert sum(isinstance(r, m.NoOpRecord) for r in image_records(image)) == 2
    finally:
        delta_mod.unregister_image_extension("test-ext")
    assert "test-ext" not in MetadataImage.empty().extensions
