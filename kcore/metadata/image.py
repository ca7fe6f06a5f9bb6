"""The metadata image: an immutable picture of the cluster's metadata at one log offset.

What this is
------------
Kafka's ``MetadataImage``: everything the ``__cluster_metadata`` log says, folded into plain
frozen objects, one part per concern:

=====================  ====================================================================
``features``           finalized feature levels (``metadata.version``, ``kraft.version``,
                       ``mirror.version`` ...)
``cluster``            broker registrations (epoch, incarnation, listeners, rack, fenced,
                       controlled shutdown, supported features) and controller registrations
``topics``             topics by id and by name, each with its partitions (replicas, ISR,
                       leader, leader epoch, partition epoch, ELR ...)
``configs``            config overrides per resource ``(type, name)``: TOPIC (2), BROKER (4,
                       name ``""`` is the cluster default), CLUSTER_MIRROR (64) ...
``client_quotas``      quota values per client-quota entity
``producer_ids``       the first producer id of the next block to hand out
``acls``               ACL bindings by id
``scram``              SCRAM credentials per (mechanism, user)
``delegation_tokens``  delegation tokens by token id
``extensions``         parts contributed by later modules (cluster mirroring), by name
=====================  ====================================================================

Images are never changed: :class:`~kcore.metadata.delta.MetadataDelta` replays records on top
of one and ``apply()`` returns a new image that shares every object the records did not touch
(an untouched topic is the *same* ``TopicImage`` object in both). Mappings are read-only views
(``MappingProxyType``); equality is by value, so two images built from the same records are
equal.

Who uses it: the controller (its view of the cluster), the broker's metadata cache, replica
manager, coordinators and mirror manager (through :mod:`kcore.metadata.publisher`). Pure.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kcore.protocol import messages as m
from kcore.security.scram import ScramCredential  # one class for the image and the SASL server

__all__ = [
    "EMPTY_MAPPING",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "AclsImage",
    "BrokerRegistration",
    "ClientQuotasImage",
    "ClusterImage",
    "ConfigResourceType",
    "ConfigurationsImage",
    "ControllerRegistration",
    "DelegationToken",
    "DelegationTokensImage",
    "Endpoint",
    "FeaturesImage",
    "LeaderRecoveryState",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "ScramCredential",
    "ScramImage",
    "StandardAcl",
    "TopicImage",
    "TopicsImage",
    "frozen_map",
]

NO_LEADER = -1
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader: "leave the leader (and epoch) alone"
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
MIRROR_VERSION = "mirror.version"

EMPTY_MAPPING: Mapping[Any, Any] = MappingProxyType({})


def _empty_field() -> Any:  # a dataclass field defaulting to the shared empty mapping
    return field(default_factory=lambda: EMPTY_MAPPING)


def frozen_map(d: dict) -> Mapping:
    """A read-only view of ``d`` (which the caller must not keep changing)."""
    return MappingProxyType(d) if d else EMPTY_MAPPING


class LeaderRecoveryState(enum.IntEnum):
    RECOVERED = 0
    RECOVERING = 1  # after an unclean election, until the leader has rebuilt its state


class ConfigResourceType(enum.IntEnum):
    """``ConfigResource.Type`` wire ids, with kcore's CLUSTER_MIRROR (spec M-94)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32
    CLUSTER_MIRROR = 64


# -- topics ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition as the controller registered it (Kafka's ``PartitionRegistration``).

    ``leader_epoch`` grows by one whenever a change record names a leader (even the same one),
    and is raised to ``MinLeaderEpoch`` when a v3 change record carries one (spec M-88);
    ``partition_epoch`` grows by one with every change record. ``directories`` holds one log
    directory id per replica (all zero: the broker chooses).
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, rec: m.PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=tuple(rec.replicas),
            isr=tuple(rec.isr),
            leader=rec.leader,
            leader_epoch=rec.leader_epoch,
            partition_epoch=rec.partition_epoch,
            removing_replicas=tuple(rec.removing_replicas),
            adding_replicas=tuple(rec.adding_replicas),
            leader_recovery_state=rec.leader_recovery_state,
            directories=tuple(rec.directories),
            elr=tuple(rec.eligible_leader_replicas or ()),
            last_known_elr=tuple(rec.last_known_elr or ()),
        )

    def merge(self, rec: Any) -> PartitionRegistration:
        """The registration after a ``PartitionChangeRecord`` (null fields: unchanged)."""
        replicas = self.replicas if rec.replicas is None else tuple(rec.replicas)
        if rec.directories is not None:
            directories = tuple(rec.directories)
        elif rec.replicas is not None and len(replicas) != len(self.directories):
            directories = (uuid.UUID(int=0),) * len(replicas)
        else:
            directories = self.directories
        if rec.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = rec.leader, self.leader_epoch + 1
        # Spec M-88 / decision D-10: the epoch becomes at least MinLeaderEpoch.
        min_epoch = getattr(rec, "min_leader_epoch", -1)
        if min_epoch > leader_epoch:
            leader_epoch = min_epoch
        recovery = self.leader_recovery_state
        if rec.leader_recovery_state != -1:
            recovery = rec.leader_recovery_state
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if rec.isr is None else tuple(rec.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=(
                self.removing_replicas
                if rec.removing_replicas is None
                else tuple(rec.removing_replicas)
            ),
            adding_replicas=(
                self.adding_replicas if rec.adding_replicas is None else tuple(rec.adding_replicas)
            ),
            leader_recovery_state=recovery,
            directories=directories,
            elr=self.elr
            if rec.eligible_leader_replicas is None
            else tuple(rec.eligible_leader_replicas),
            last_known_elr=(
                self.last_known_elr if rec.last_known_elr is None else tuple(rec.last_known_elr)
            ),
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> m.PartitionRecord:
        return m.PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=list(self.replicas),
            isr=list(self.isr),
            removing_replicas=list(self.removing_replicas),
            adding_replicas=list(self.adding_replicas),
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=list(self.directories),
            eligible_leader_replicas=list(self.elr) if self.elr else None,
            last_known_elr=list(self.last_known_elr) if self.last_known_elr else None,
        )

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = _empty_field()

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: Mapping[uuid.UUID, TopicImage] = _empty_field()
    by_name: Mapping[str, TopicImage] = _empty_field()

    def get_partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)


# -- configs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Config overrides: ``resources[(resource type, resource name)]`` maps key to value."""

    resources: Mapping[tuple[int, str], Mapping[str, str]] = field(
        default_factory=lambda: EMPTY_MAPPING
    )

    def get(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.resources.get((int(resource_type), name), EMPTY_MAPPING)

    def topic(self, name: str) -> Mapping[str, str]:
        return self.get(ConfigResourceType.TOPIC, name)

    def broker(self, broker_id: int | str) -> Mapping[str, str]:
        """A broker's dynamic overrides; ``""`` is the cluster-wide default resource."""
        return self.get(ConfigResourceType.BROKER, str(broker_id))

    def cluster_defaults(self) -> Mapping[str, str]:
        return self.get(ConfigResourceType.BROKER, "")


# -- cluster -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``epoch`` is the offset of its ``RegisterBrokerRecord``."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    supported_features: Mapping[str, tuple[int, int]] = _empty_field()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    directories: tuple[uuid.UUID, ...] = ()

    @property
    def active(self) -> bool:
        """Unfenced and not shutting down: may lead partitions and join ISRs."""
        return not self.fenced and not self.in_controlled_shutdown

    def listener(self, name: str) -> Endpoint | None:
        for ep in self.listeners:
            if ep.name == name:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool = False
    listeners: tuple[Endpoint, ...] = ()
    supported_features: Mapping[str, tuple[int, int]] = _empty_field()


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = _empty_field()
    controllers: Mapping[int, ControllerRegistration] = _empty_field()

    def active_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if b.active]

    def is_active(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and b.active


# -- the small parts ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """Finalized feature levels; a feature at level 0 is simply absent."""

    finalized: Mapping[str, int] = _empty_field()

    def level(self, name: str) -> int:
        return self.finalized.get(name, 0)

    @property
    def metadata_version(self) -> int:
        return self.level(METADATA_VERSION)

    @property
    def kraft_version(self) -> int:
        return self.level(KRAFT_VERSION)

    @property
    def mirror_version(self) -> int:
        return self.level(MIRROR_VERSION)


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int = 0  # the first id of the next block AllocateProducerIds hands out


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL binding (the fields of ``AccessControlEntryRecord`` without its id)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclsImage:
    acls: Mapping[uuid.UUID, StandardAcl] = _empty_field()


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    """``quotas[entity]`` maps quota key to value; an entity is a sorted tuple of
    ``(entity type, entity name or None for the default)``."""

    quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(
        default_factory=lambda: EMPTY_MAPPING
    )


@dataclass(frozen=True, slots=True)
class ScramImage:
    """``credentials[(mechanism, user name)]``."""

    credentials: Mapping[tuple[int, str], ScramCredential] = field(
        default_factory=lambda: EMPTY_MAPPING
    )


@dataclass(frozen=True, slots=True)
class DelegationToken:
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


@dataclass(frozen=True, slots=True)
class DelegationTokensImage:
    tokens: Mapping[str, DelegationToken] = _empty_field()


# -- the whole ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything the metadata log says up to and including record ``offset`` (-1: none).

    ``cluster_id`` comes from ``meta.properties`` (it is not in the log); ``extensions`` holds
    the parts registered with :func:`kcore.metadata.delta.register_image_extension`.
    """

    offset: int = -1
    cluster_id: str | None = None
    features: FeaturesImage = field(default_factory=FeaturesImage)
    cluster: ClusterImage = field(default_factory=ClusterImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    configs: ConfigurationsImage = field(default_factory=ConfigurationsImage)
    client_quotas: ClientQuotasImage = field(default_factory=ClientQuotasImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    acls: AclsImage = field(default_factory=AclsImage)
    scram: ScramImage = field(default_factory=ScramImage)
    delegation_tokens: DelegationTokensImage = field(default_factory=DelegationTokensImage)
    extensions: Mapping[str, Any] = _empty_field()

    @classmethod
    def empty(cls, cluster_id: str | None = None) -> MetadataImage:
        """An image with no records in it (and every registered extension's empty part)."""
        from kcore.metadata.delta import empty_extension_parts

        return cls(cluster_id=cluster_id, extensions=empty_extension_parts())

    @property
    def is_empty(self) -> bool:
        return self.offset < 0 and not self.features.finalized and not self.topics.by_id

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.by_name.get(name)
