"""What every controller operation works with: its config, its state, and its result type.

The controller's managers (``replication``, ``cluster_control``, ``config_control``,
``features``, ``producer_ids``, ``acls``) are functions over a :class:`ControllerContext`: the
latest metadata image (uncommitted records included), the configuration, the injected random
source, the offsets the driver reported, and the broker heartbeat soft state. They never change
the image themselves: they return a :class:`ControllerResult` whose records change it once the
driver appends them and replays them into the controller. Pure: no I/O, time is passed in.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kcore.metadata.image import ConfigResourceType, MetadataImage
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "METADATA_TOPIC_ID",
    "ControllerConfig",
    "ControllerContext",
    "ControllerResult",
    "MAX_RECORDS_PER_USER_OP",
    "REPLICATION_FACTOR_LIMIT",
    "random_topic_id",
]

T = TypeVar("T")

# Kafka's QuorumController refuses user operations that would write more than this many records
# in one batch (BoundedList); a CreateTopics for a billion partitions must not stall the quorum.
MAX_RECORDS_PER_USER_OP = 10_000

# Replication (issue #17) is experimental: follower fetchers, the ISR, acks=all, internal
# topics, reassignment and the mirror on a replicated destination are there behind
# kcore.replication.enable. Unless it is set, every operation that would give a partition more
# replicas answers INVALID_REPLICATION_FACTOR, and the internal topics are created with at most
# this many.
REPLICATION_FACTOR_LIMIT = 1
REPLICATION_FACTOR_MAX = 32767  # Kafka's bound on a replication factor (an int16)

# Uuid.METADATA_TOPIC_ID: reserved for __cluster_metadata, never given to a user topic.
METADATA_TOPIC_ID = uuid.UUID(int=1)


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """Records to append (as one batch) and the response to send once they are committed.

    ``records`` may be empty (a validation failure, a validate-only request, a no-op): the
    response can then be sent at once.
    """

    records: tuple[Message, ...]
    response: T

    @classmethod
    def of(cls, records: list[Message] | tuple[Message, ...], response: T) -> ControllerResult[T]:
        return cls(tuple(records), response)


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    text = props.get(key)
    if text is None:
        return default
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {text!r}") from None


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    text = props.get(key)
    if text is None:
        return default
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {text!r}")
    return value == "true"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The settings the controller reads, with Kafka's names and defaults.

    ``static_config`` is the node's whole ``server.properties``: topic-config validation uses
    its ``log.*`` defaults (Kafka's cross-key checks) and ``unclean.leader.election.enable``.
    """

    node_id: int
    cluster_id: str
    default_replication_factor: int = 1  # default.replication.factor
    num_partitions: int = 1  # num.partitions
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    broker_heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    delete_topic_enable: bool = True  # delete.topic.enable
    static_config: Mapping[str, str] = field(default_factory=dict)
    # REPLICATION_FACTOR_LIMIT. No server.properties key sets it: the controller's own tests
    # raise it to exercise the placement, ISR and election code for several replicas.
    max_replication_factor: int = REPLICATION_FACTOR_LIMIT
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, cluster_id: str) -> ControllerConfig:
        """Read the settings from ``server.properties`` (``node.id`` is required)."""
        if "node.id" not in props:
            raise ValueError("node.id is required")
        cfg = cls(
            node_id=_int(props, "node.id", -1),
            cluster_id=cluster_id,
            default_replication_factor=_int(props, "default.replication.factor", 1),
            num_partitions=_int(props, "num.partitions", 1),
            broker_session_timeout_ms=_int(props, "broker.session.timeout.ms", 9000),
            broker_heartbeat_interval_ms=_int(props, "broker.heartbeat.interval.ms", 2000),
            delete_topic_enable=_bool(props, "delete.topic.enable", True),
            static_config=dict(props),
            # kcore.replication.enable (experimental, #17): several replicas stay refused
            # unless asked for.
            max_replication_factor=(
                REPLICATION_FACTOR_MAX
                if _bool(props, "kcore.replication.enable", False)
                else REPLICATION_FACTOR_LIMIT
            ),
            auto_leader_rebalance_enable=_bool(props, "auto.leader.rebalance.enable", True),
            leader_imbalance_check_interval_ms=1000
            * _int(props, "leader.imbalance.check.interval.seconds", 300),
            leader_imbalance_per_broker_percentage=_int(
                props, "leader.imbalance.per.broker.percentage", 10
            ),
        )
        if cfg.default_replication_factor < 1 or cfg.default_replication_factor > 32767:
            raise ValueError("default.replication.factor must be between 1 and 32767")
        if cfg.num_partitions < 1:
            raise ValueError("num.partitions must be at least 1")
        return cfg


def random_topic_id(rng: random.Random) -> uuid.UUID:
    """A random id as Kafka's ``Uuid.randomUuid``: never zero, never the metadata topic's id,
    and its URL-safe base64 form never starts with ``-`` (it would read as a CLI option)."""
    while True:
        u = uuid.UUID(int=rng.getrandbits(128), version=4)
        if u in (uuid.UUID(int=0), METADATA_TOPIC_ID):
            continue
        if base64.urlsafe_b64encode(u.bytes).startswith(b"-"):
            continue
        return u


def uuid_text(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


class ControllerContext:
    """The state an operation reads. Owned and updated by :class:`QuorumController`."""

    def __init__(
        self,
        config: ControllerConfig,
        image: MetadataImage,
        rng: random.Random,
    ) -> None:
        self.config = config
        self.image = image
        self.rng = rng
        self.last_offset = image.offset  # the last record replayed
        self.committed_offset = image.offset  # the last record known committed
        self.next_write_offset: int | None = None  # the log end offset, when the driver says
        self.heartbeats: Any = None  # cluster_control.BrokerHeartbeatTracker, set by the owner
        self.config_validators: dict[int, Any] = {}  # resource type -> extra validator

    @property
    def next_offset(self) -> int:
        """The offset the first record of the next appended batch will get."""
        guess = self.last_offset + 1
        if self.next_write_offset is not None and self.next_write_offset > guess:
            return self.next_write_offset
        return guess

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        """Raise STALE_BROKER_EPOCH unless ``broker_id`` is registered with ``broker_epoch``."""
        reg = self.image.cluster.brokers.get(broker_id)
        if reg is None:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker {broker_id}"
            )
        if reg.epoch != broker_epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}",
            )

    def new_uuid(self) -> uuid.UUID:
        return random_topic_id(self.rng)

    def broker_defaults(self) -> dict[str, str]:
        """Static ``server.properties`` overlaid with the dynamic cluster-wide defaults."""
        out = dict(self.config.static_config)
        out.update(self.image.configs.get(ConfigResourceType.BROKER, ""))
        return out

    def unclean_election_enabled(self, topic: str) -> bool:
        key = "unclean.leader.election.enable"
        value = self.image.configs.topic(topic).get(key)
        if value is None:
            value = self.image.configs.cluster_defaults().get(key)
        if value is None:
            value = self.config.static_config.get(key, "false")
        return str(value).strip().lower() == "true"
