"""Metadata deltas: records replayed on top of an image, then applied to make the next image.

Theory of operation
-------------------
``delta = MetadataDelta(image)``; ``delta.replay(record, offset)`` for each committed record;
``new_image = delta.apply()``. Each part of the image (features, cluster, topics, ...) gets its
own sub-delta the first time a record touches it; parts no record touched are carried over as
the very same objects, and inside the topics part only changed topics (and inside them only
changed partitions) are new objects. The sub-deltas stay readable after ``apply()``: publishers
look at ``delta.topics_delta`` to learn which partitions changed (``local_changes``), at
``delta.cluster_delta`` for broker changes, and so on.

Replay is strict where Kafka's is: a change for a topic, partition, broker or ACL that does not
exist raises :class:`MetadataReplayError`, because an image built past such a record is wrong.

``MetadataDelta(image, snapshot=True)`` loads a snapshot: the new image is built from the
snapshot's records alone, while ``image`` stays the reference the sub-deltas compare with
(topics missing from the snapshot show up in ``topics_delta.deleted``).

Extension point
---------------
A later part of kcore (cluster mirroring) adds an image part with
:func:`register_image_extension`: its record types are replayed into the extension's own delta
(``ImageExtension.record_types``; ``None`` means every record, so an extension can also react to
``RemoveTopicRecord``), and ``image.extensions[name]`` holds its part. New record types are
registered first with :func:`kcore.metadata.records.register_record_type`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kcore.metadata.image import (
    AclsImage,
    BrokerRegistration,
    ClientQuotasImage,
    ClusterImage,
    ConfigResourceType,
    ConfigurationsImage,
    ControllerRegistration,
    DelegationToken,
    DelegationTokensImage,
    Endpoint,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    ScramCredential,
    ScramImage,
    StandardAcl,
    TopicImage,
    TopicsImage,
    frozen_map,
)
from kcore.metadata.records import UnknownRecordTypeError, api_key_of
from kcore.protocol.messages import Message

__all__ = [
    "ExtensionDelta",
    "ImageExtension",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataReplayError",
    "TopicDelta",
    "TopicsDelta",
    "empty_extension_parts",
    "register_image_extension",
    "replay_records",
    "unregister_image_extension",
]


class MetadataReplayError(RuntimeError):
    """A record that cannot apply to the image (a change to something that does not exist)."""


# -- extensions --------------------------------------------------------------------------------


class ExtensionDelta(Protocol):
    def replay(self, record: Message) -> None: ...

    def apply(self) -> Any: ...


class ImageExtension(Protocol):
    """An image part contributed by another module (see the module docstring)."""

    name: str
    record_types: frozenset[int] | None  # api keys it replays; None: every record

    def empty(self) -> Any: ...

    def new_delta(self, part: Any, delta: MetadataDelta) -> ExtensionDelta: ...

    def snapshot_records(self, part: Any) -> list[Message]: ...


_EXTENSIONS: dict[str, ImageExtension] = {}


def register_image_extension(ext: ImageExtension) -> None:
    if ext.name in _EXTENSIONS and _EXTENSIONS[ext.name] is not ext:
        raise ValueError(f"an image extension named {ext.name!r} is already registered")
    _EXTENSIONS[ext.name] = ext


def unregister_image_extension(name: str) -> None:
    _EXTENSIONS.pop(name, None)


def registered_extensions() -> list[ImageExtension]:
    return list(_EXTENSIONS.values())


def empty_extension_parts() -> dict[str, Any]:
    return frozen_map({name: ext.empty() for name, ext in _EXTENSIONS.items()})


# -- topics ------------------------------------------------------------------------------------


class TopicDelta:
    """Changes to one topic: ``partition_changes`` holds the new registration of each changed
    (or created) partition; ``base`` is the topic as it was (no partitions if new)."""

    def __init__(self, base: TopicImage) -> None:
        self.base = base
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def topic_id(self) -> uuid.UUID:
        return self.base.topic_id

    def partition(self, index: int) -> PartitionRegistration | None:
        reg = self.partition_changes.get(index)
        return reg if reg is not None else self.base.partitions.get(index)

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.base
        parts = dict(self.base.partitions)
        parts.update(self.partition_changes)
        return TopicImage(
            self.base.name, self.base.topic_id, frozen_map(dict(sorted(parts.items())))
        )


@dataclass
class LocalReplicaChanges:
    """What a delta means for one broker's replicas (Kafka's ``LocalReplicaChanges``).

    ``deletes``: partitions whose replica on this broker must go (topic deleted, or the broker
    left the replica set). ``leaders`` / ``followers``: partitions where this broker is a replica
    and something changed, by the role it now has, with the topic name.
    """

    deletes: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    leaders: dict[tuple[uuid.UUID, int], tuple[str, PartitionRegistration]] = field(
        default_factory=dict
    )
    followers: dict[tuple[uuid.UUID, int], tuple[str, PartitionRegistration]] = field(
        default_factory=dict
    )


class TopicsDelta:
    def __init__(self, base: TopicsImage, previous: TopicsImage | None = None) -> None:
        self.base = base  # what the new image is built on (empty for a snapshot)
        self.previous = base if previous is None else previous  # what changes are relative to
        self.changed: dict[uuid.UUID, TopicDelta] = {}
        self.deleted: dict[uuid.UUID, TopicImage] = {}  # removed topics, as they were

    @property
    def created(self) -> set[uuid.UUID]:
        return {tid for tid in self.changed if tid not in self.previous.by_id}

    def topic(self, topic_id: uuid.UUID) -> TopicDelta | TopicImage | None:
        """The topic as the delta sees it now (None if absent or removed)."""
        if topic_id in self.changed:
            return self.changed[topic_id]
        if topic_id in self.deleted:
            return None
        return self.base.by_id.get(topic_id)

    def _delta_for(self, topic_id: uuid.UUID, what: str) -> TopicDelta:
        td = self.changed.get(topic_id)
        if td is None:
            base = None if topic_id in self.deleted else self.base.by_id.get(topic_id)
            if base is None:
                raise MetadataReplayError(f"{what}: no topic with id {topic_id}")
            td = self.changed[topic_id] = TopicDelta(base)
        return td

    def replay_topic(self, rec: Any) -> None:
        self.deleted.pop(rec.topic_id, None)
        self.changed[rec.topic_id] = TopicDelta(TopicImage(rec.name, rec.topic_id))

    def replay_partition(self, rec: Any) -> None:
        td = self._delta_for(rec.topic_id, "PartitionRecord")
        td.partition_changes[rec.partition_id] = PartitionRegistration.from_record(rec)

    def replay_partition_change(self, rec: Any) -> None:
        td = self._delta_for(rec.topic_id, "PartitionChangeRecord")
        current = td.partition(rec.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord: topic {td.name} has no partition {rec.partition_id}"
            )
        td.partition_changes[rec.partition_id] = current.merge(rec)

    def replay_remove(self, rec: Any) -> str:
        """Remove the topic; returns its name (its configs go too)."""
        td = self.changed.pop(rec.topic_id, None)
        old = self.base.by_id.get(rec.topic_id) if rec.topic_id not in self.deleted else None
        if td is None and old is None:
            raise MetadataReplayError(f"RemoveTopicRecord: no topic with id {rec.topic_id}")
        prev = self.previous.by_id.get(rec.topic_id)
        if prev is not None:
            self.deleted[rec.topic_id] = prev
        return td.name if td is not None else old.name

    def finish_snapshot(self) -> None:
        for tid, topic in self.previous.by_id.items():
            if tid not in self.changed:
                self.deleted[tid] = topic

    def apply(self) -> TopicsImage:
        by_id = dict(self.base.by_id)
        by_name = dict(self.base.by_name)
        for tid in self.deleted:
            gone = by_id.pop(tid, None)
            if gone is not None and by_name.get(gone.name) is gone:
                del by_name[gone.name]
        for tid, td in self.changed.items():
            old = by_id.get(tid)
            if old is not None and old.name != td.name and by_name.get(old.name) is old:
                del by_name[old.name]
            topic = td.apply()
            by_id[tid] = topic
            by_name[topic.name] = topic
        return TopicsImage(frozen_map(by_id), frozen_map(by_name))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        out = LocalReplicaChanges()
        for tid, topic in self.deleted.items():
            for index, reg in topic.partitions.items():
                if broker_id in reg.replicas:
                    out.deletes.add((tid, index))
        for tid, td in self.changed.items():
            prev_topic = self.previous.by_id.get(tid)
            for index, reg in td.partition_changes.items():
                key = (tid, index)
                if broker_id not in reg.replicas:
                    prev = None if prev_topic is None else prev_topic.partitions.get(index)
                    if prev is not None and broker_id in prev.replicas:
                        out.deletes.add(key)
                elif reg.leader == broker_id:
                    out.leaders[key] = (td.name, reg)
                else:
                    out.followers[key] = (td.name, reg)
        return out


# -- the other parts ---------------------------------------------------------------------------


class _MapDelta:
    """Changes to one ``Mapping`` attribute of an image part: key -> new value, or None."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.changes: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        if key in self.changes:
            return self.changes[key]
        return self.base.get(key)

    def merged(self) -> dict:
        out = dict(self.base)
        for k, v in self.changes.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out


class ConfigurationsDelta:
    def __init__(self, base: ConfigurationsImage) -> None:
        self.base = base
        self.changed: dict[tuple[int, str], dict[str, str]] = {}

    def _resource(self, key: tuple[int, str]) -> dict[str, str]:
        res = self.changed.get(key)
        if res is None:
            res = self.changed[key] = dict(self.base.resources.get(key, {}))
        return res

    def replay(self, rec: Any) -> None:
        res = self._resource((rec.resource_type, rec.resource_name))
        if rec.value is None:
            res.pop(rec.name, None)
        else:
            res[rec.name] = rec.value

    def delete_resource(self, resource_type: int, name: str) -> None:
        self._resource((int(resource_type), name)).clear()

    def apply(self) -> ConfigurationsImage:
        resources = dict(self.base.resources)
        for key, values in self.changed.items():
            if values:
                old = resources.get(key)
                if old is None or dict(old) != values:
                    resources[key] = frozen_map(dict(sorted(values.items())))
            else:
                resources.pop(key, None)
        return ConfigurationsImage(frozen_map(resources))


class ClusterDelta:
    def __init__(self, base: ClusterImage) -> None:
        self.base = base
        self.brokers = _MapDelta(base.brokers)
        self.controllers = _MapDelta(base.controllers)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def _broker_or_raise(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        reg = self.brokers.get(broker_id)
        if reg is None:
            raise MetadataReplayError(
                f"Tried to {what} broker {broker_id}, but it is not registered"
            )
        if reg.epoch != epoch:
            raise MetadataReplayError(
                f"Tried to {what} broker {broker_id} with epoch {epoch}, "
                f"but its current epoch is {reg.epoch}"
            )
        return reg

    def replay_register(self, rec: Any) -> None:
        self.brokers.changes[rec.broker_id] = BrokerRegistration(
            id=rec.broker_id,
            epoch=rec.broker_epoch,
            incarnation_id=rec.incarnation_id,
            listeners=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points
            ),
            supported_features=frozen_map(
                {f.name: (f.min_supported_version, f.max_supported_version) for f in rec.features}
            ),
            rack=rec.rack,
            fenced=rec.fenced,
            in_controlled_shutdown=rec.in_controlled_shutdown,
            is_migrating_zk_broker=rec.is_migrating_zk_broker,
            directories=tuple(rec.log_dirs),
        )

    def replay_unregister(self, rec: Any) -> None:
        if self.brokers.get(rec.broker_id) is None:
            raise MetadataReplayError(
                f"Tried to unregister broker {rec.broker_id}, but it is not registered"
            )
        self.brokers.changes[rec.broker_id] = None

    def set_state(
        self, broker_id: int, epoch: int, what: str, *, fenced: bool | None, shutdown: bool | None
    ) -> None:
        reg = self._broker_or_raise(broker_id, epoch, what)
        self.brokers.changes[broker_id] = _replace_broker(reg, fenced, shutdown)

    def replay_registration_change(self, rec: Any) -> None:
        # Fenced: 1 fence, -1 unfence, 0 unchanged; InControlledShutdown: 1 enter, 0 unchanged.
        fenced = {1: True, -1: False}.get(rec.fenced)
        shutdown = True if rec.in_controlled_shutdown == 1 else None
        reg = self._broker_or_raise(rec.broker_id, rec.broker_epoch, "change")
        reg = _replace_broker(reg, fenced, shutdown)
        if rec.log_dirs:
            reg = replace(reg, directories=tuple(rec.log_dirs))
        self.brokers.changes[rec.broker_id] = reg

    def replay_register_controller(self, rec: Any) -> None:
        self.controllers.changes[rec.controller_id] = ControllerRegistration(
            id=rec.controller_id,
            incarnation_id=rec.incarnation_id,
            zk_migration_ready=rec.zk_migration_ready,
            listeners=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points
            ),
            supported_features=frozen_map(
                {f.name: (f.min_supported_version, f.max_supported_version) for f in rec.features}
            ),
        )

    def apply(self) -> ClusterImage:
        return ClusterImage(
            frozen_map(dict(sorted(self.brokers.merged().items()))),
            frozen_map(dict(sorted(self.controllers.merged().items()))),
        )


def _replace_broker(reg: BrokerRegistration, fenced: bool | None, shutdown: bool | None):
    changes = {}
    if fenced is not None and fenced != reg.fenced:
        changes["fenced"] = fenced
    if shutdown is not None and shutdown != reg.in_controlled_shutdown:
        changes["in_controlled_shutdown"] = shutdown
    return replace(reg, **changes) if changes else reg


# -- MetadataDelta -----------------------------------------------------------------------------


class MetadataDelta:
    """Records replayed on top of ``image`` (see the module docstring)."""

    def __init__(self, image: MetadataImage, *, snapshot: bool = False) -> None:
        self.image = image
        self.snapshot = snapshot
        self._base = MetadataImage.empty(image.cluster_id) if snapshot else image
        self.offset = image.offset
        self.features: _MapDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.client_quotas: _MapDelta | None = None
        self.next_producer_id: int | None = None
        self.acls: _MapDelta | None = None
        self.scram: _MapDelta | None = None
        self.delegation_tokens: _MapDelta | None = None
        self.extension_deltas: dict[str, ExtensionDelta] = {}
        if snapshot:  # the topics delta reports what the snapshot no longer has
            self._topics()

    # -- sub-delta accessors (created on first use) --

    def _features(self) -> _MapDelta:
        if self.features is None:
            self.features = _MapDelta(self._base.features.finalized)
        return self.features

    def _cluster(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self._base.cluster)
        return self.cluster_delta

    def _topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self._base.topics, self.image.topics)
        return self.topics_delta

    def _configs(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self._base.configs)
        return self.configs_delta

    def _map(self, attr: str, base: Any) -> _MapDelta:
        d = getattr(self, attr)
        if d is None:
            d = _MapDelta(base)
            setattr(self, attr, d)
        return d

    @property
    def metadata_version_changed(self) -> bool:
        return self.features is not None and "metadata.version" in self.features.changes

    # -- replay --

    def replay(self, record: Message, offset: int | None = None) -> None:
        """Apply one record. Raises :class:`MetadataReplayError` or
        :class:`~kcore.metadata.records.UnknownRecordTypeError`."""
        key = api_key_of(record)
        handler = _HANDLERS.get(key)
        claimed = handler is not None
        if handler is not None:
            handler(self, record)
        for ext in _EXTENSIONS.values():
            if ext.record_types is None or key in ext.record_types:
                claimed = claimed or ext.record_types is not None
                d = self.extension_deltas.get(ext.name)
                if d is None:
                    part = self._base.extensions.get(ext.name)
                    if part is None:
                        part = ext.empty()
                    d = self.extension_deltas[ext.name] = ext.new_delta(part, self)
                d.replay(record)
        if not claimed:
            raise UnknownRecordTypeError(key)
        if offset is not None and offset > self.offset:
            self.offset = offset

    def _replay_remove_topic(self, rec: Any) -> None:
        name = self._topics().replay_remove(rec)
        self._configs().delete_resource(ConfigResourceType.TOPIC, name)

    def _replay_feature(self, rec: Any) -> None:
        self._features().changes[rec.name] = rec.feature_level if rec.feature_level > 0 else None

    def _replay_producer_ids(self, rec: Any) -> None:
        current = self.next_producer_id
        if current is None:
            current = self._base.producer_ids.next_producer_id
        if rec.next_producer_id <= current:
            raise MetadataReplayError(
                f"ProducerIdsRecord would move the next producer id back from {current} "
                f"to {rec.next_producer_id}"
            )
        self.next_producer_id = rec.next_producer_id

    def _replay_acl(self, rec: Any) -> None:
        self._map("acls", self._base.acls.acls).changes[rec.id] = StandardAcl(
            rec.resource_type,
            rec.resource_name,
            rec.pattern_type,
            rec.principal,
            rec.host,
            rec.operation,
            rec.permission_type,
        )

    def _replay_remove_acl(self, rec: Any) -> None:
        acls = self._map("acls", self._base.acls.acls)
        if acls.get(rec.id) is None:
            raise MetadataReplayError(f"Failed to find existing ACL with ID {rec.id}")
        acls.changes[rec.id] = None

    def _replay_quota(self, rec: Any) -> None:
        entity = tuple(sorted(((e.entity_type, e.entity_name) for e in rec.entity), key=_first))
        quotas = self._map("client_quotas", self._base.client_quotas.quotas)
        values = dict(quotas.get(entity) or {})
        if rec.remove:
            values.pop(rec.key, None)
        else:
            values[rec.key] = rec.value
        quotas.changes[entity] = frozen_map(dict(sorted(values.items()))) if values else None

    def _replay_scram(self, rec: Any) -> None:
        self._map("scram", self._base.scram.credentials).changes[(rec.mechanism, rec.name)] = (
            ScramCredential(
                bytes(rec.salt), bytes(rec.stored_key), bytes(rec.server_key), rec.iterations
            )
        )

    def _replay_remove_scram(self, rec: Any) -> None:
        self._map("scram", self._base.scram.credentials).changes[(rec.mechanism, rec.name)] = None

    def _replay_token(self, rec: Any) -> None:
        tokens = self._map("delegation_tokens", self._base.delegation_tokens.tokens)
        tokens.changes[rec.token_id] = DelegationToken(
            rec.owner,
            rec.requester,
            tuple(rec.renewers),
            rec.issue_timestamp,
            rec.max_timestamp,
            rec.expiration_timestamp,
        )

    def _replay_remove_token(self, rec: Any) -> None:
        self._map("delegation_tokens", self._base.delegation_tokens.tokens).changes[
            rec.token_id
        ] = None

    # -- apply --

    def apply(self) -> MetadataImage:
        """The image after every replayed record (``self.image`` is untouched)."""
        if self.snapshot and self.topics_delta is not None:
            self.topics_delta.finish_snapshot()
        base = self._base
        extensions = base.extensions
        if self.extension_deltas:
            extensions = dict(base.extensions)
            for name, d in self.extension_deltas.items():
                extensions[name] = d.apply()
            extensions = frozen_map(extensions)
        return MetadataImage(
            offset=self.offset,
            cluster_id=self.image.cluster_id,
            features=(
                base.features
                if self.features is None
                else FeaturesImage(frozen_map(dict(sorted(self.features.merged().items()))))
            ),
            cluster=base.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            topics=base.topics if self.topics_delta is None else self.topics_delta.apply(),
            configs=base.configs if self.configs_delta is None else self.configs_delta.apply(),
            client_quotas=(
                base.client_quotas
                if self.client_quotas is None
                else ClientQuotasImage(frozen_map(self.client_quotas.merged()))
            ),
            producer_ids=(
                base.producer_ids
                if self.next_producer_id is None
                else ProducerIdsImage(self.next_producer_id)
            ),
            acls=base.acls if self.acls is None else AclsImage(frozen_map(self.acls.merged())),
            scram=base.scram if self.scram is None else ScramImage(frozen_map(self.scram.merged())),
            delegation_tokens=(
                base.delegation_tokens
                if self.delegation_tokens is None
                else DelegationTokensImage(frozen_map(self.delegation_tokens.merged()))
            ),
            extensions=extensions,
        )


def _first(pair: tuple) -> Any:
    return pair[0]


def _noop(delta: MetadataDelta, rec: Any) -> None:
    pass


_HANDLERS: dict[int, Callable[[MetadataDelta, Any], None]] = {
    0: lambda d, r: d._cluster().replay_register(r),  # RegisterBrokerRecord
    1: lambda d, r: d._cluster().replay_unregister(r),  # UnregisterBrokerRecord
    2: lambda d, r: d._topics().replay_topic(r),  # TopicRecord
    3: lambda d, r: d._topics().replay_partition(r),  # PartitionRecord
    4: lambda d, r: d._configs().replay(r),  # ConfigRecord
    5: lambda d, r: d._topics().replay_partition_change(r),  # PartitionChangeRecord
    7: lambda d, r: d._cluster().set_state(r.id, r.epoch, "fence", fenced=True, shutdown=None),
    8: lambda d, r: d._cluster().set_state(r.id, r.epoch, "unfence", fenced=False, shutdown=None),
    9: MetadataDelta._replay_remove_topic,  # RemoveTopicRecord
    10: MetadataDelta._replay_token,  # DelegationTokenRecord
    11: MetadataDelta._replay_scram,  # UserScramCredentialRecord
    12: MetadataDelta._replay_feature,  # FeatureLevelRecord
    14: MetadataDelta._replay_quota,  # ClientQuotaRecord
    15: MetadataDelta._replay_producer_ids,  # ProducerIdsRecord
    17: lambda d, r: d._cluster().replay_registration_change(r),  # BrokerRegistrationChangeRecord
    18: MetadataDelta._replay_acl,  # AccessControlEntryRecord
    19: MetadataDelta._replay_remove_acl,  # RemoveAccessControlEntryRecord
    20: _noop,  # NoOpRecord
    22: MetadataDelta._replay_remove_scram,  # RemoveUserScramCredentialRecord
    # Begin/End/AbortTransactionRecord: the loader groups what lies between them (publisher.py).
    23: _noop,
    24: _noop,
    25: _noop,
    26: MetadataDelta._replay_remove_token,  # RemoveDelegationTokenRecord
    27: lambda d, r: d._cluster().replay_register_controller(r),  # RegisterControllerRecord
}


def replay_records(
    image: MetadataImage, records: Iterable[Message], first_offset: int | None = None
) -> MetadataImage:
    """``image`` with ``records`` applied (numbered from ``first_offset`` if given)."""
    delta = MetadataDelta(image)
    for i, rec in enumerate(records):
        delta.replay(rec, None if first_offset is None else first_offset + i)
    return delta.apply()
