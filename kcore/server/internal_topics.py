"""The coordinators' internal topics, created on first use through the controller.

``__consumer_offsets`` (groups), ``__transaction_state`` (transactions) and ``__mirror_state``
(cluster mirrors, FindCoordinator key type 3) do not exist until a client first looks for a
coordinator (FindCoordinator), as in Kafka. They are created then with Kafka's settings:
``offsets.topic.num.partitions`` / ``transaction.state.log.num.partitions`` /
``mirror.state.topic.num.partitions`` partitions, uncompressed (``compression.type=producer``,
the coordinators write uncompressed batches), their segment size, and for
``__transaction_state`` its ``min.insync.replicas``. The first two are compacted;
``__mirror_state`` is not (decision D-07: its keys hold only the mirror name, so the coordinator
replays it whole) and keeps everything: ``cleanup.policy=delete``, ``retention.ms=-1``,
``retention.bytes=-1``. The replication factor follows
:meth:`~kcore.server.config.BrokerConfig.internal_topic_replication_factor`: with
``kcore.replication.enable``, Kafka's rule (the configured factor; COORDINATOR_NOT_AVAILABLE,
which clients retry, until that many brokers are alive); without it, capped at one replica,
and this broker logs a warning saying so the first time it creates the topic.
``__transaction_state`` gets ``min.insync.replicas`` = ``transaction.state.log.min.isr``; the
other two follow the broker's ``min.insync.replicas``, as in Kafka. The coordinators write with
acks=all semantics (:mod:`kcore.server.coordinator_shell`): an append is refused while the ISR
is below ``min.insync.replicas``, and a response waits for the high watermark.

A key maps to a partition by Kafka's rule, ``abs(javaStringHash(key)) % partitions``; the
coordinator of the key is that partition's leader.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from kcore.coordinator.group.records import CONSUMER_OFFSETS
from kcore.coordinator.partitioning import partition_for
from kcore.coordinator.transaction.records import TRANSACTION_STATE
from kcore.metadata.topic_names import MIRROR_STATE_TOPIC
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# FindCoordinator key types (Kafka's CoordinatorType).
GROUP = 0
TRANSACTION = 1
CLUSTER_MIRROR = 3  # KIP-1279 (spec §9): the key is the mirror name


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions_key: str
    replication_key: str
    segment_bytes_key: str
    # Topic configs beyond partitions, replicas and segment size.
    configs: tuple[tuple[str, str], ...] = (("cleanup.policy", "compact"),)


TOPICS = {
    GROUP: InternalTopic(
        CONSUMER_OFFSETS,
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.topic.segment.bytes",
    ),
    TRANSACTION: InternalTopic(
        TRANSACTION_STATE,
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.segment.bytes",
    ),
    CLUSTER_MIRROR: InternalTopic(
        MIRROR_STATE_TOPIC,
        "mirror.state.topic.num.partitions",
        "mirror.state.topic.replication.factor",
        "mirror.state.topic.segment.bytes",
        (("cleanup.policy", "delete"), ("retention.ms", "-1"), ("retention.bytes", "-1")),
    ),
}


class InternalTopics:
    """Finds (creating when missing) the partition and leader of a coordinator key."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._locks = {kind: trio.Lock() for kind in TOPICS}
        self._limit_logged: set[str] = set()  # topics whose replica limit was logged

    def partition_count(self, key_type: int) -> int:
        return self.broker.config.value(TOPICS[key_type].partitions_key)

    def partition_for(self, key_type: int, key: str) -> int:
        return partition_for(key, self.partition_count(key_type))

    async def coordinator(self, key_type: int, key: str) -> int:
        """The node id leading the key's partition; raises KafkaError (clients retry
        COORDINATOR_NOT_AVAILABLE) while the topic is being created or has no leader."""
        spec = TOPICS.get(key_type)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        topic = self.broker.metadata_image.topics.by_name.get(spec.name)
        if topic is None:
            await self._create(key_type)
            topic = self.broker.metadata_image.topics.by_name.get(spec.name)
            if topic is None:
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{spec.name} is being created"
                )
        index = partition_for(key, len(topic.partitions))
        registration = topic.partitions.get(index)
        if registration is None or registration.leader < 0:
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{spec.name}-{index} has no leader"
            )
        return registration.leader

    async def _create(self, key_type: int) -> None:
        spec = TOPICS[key_type]
        async with self._locks[key_type]:
            if spec.name in self.broker.metadata_image.topics.by_name:
                return
            config = self.broker.config
            live = sum(1 for b in self.broker.metadata_image.cluster.brokers.values() if b.active)
            rf = config.internal_topic_replication_factor(spec.replication_key)
            if rf > live:
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{spec.name} needs {rf} live brokers ({spec.replication_key}), "
                    f"{live} are alive",
                )
            configured = config.value(spec.replication_key)
            if rf < configured and spec.name not in self._limit_logged:
                self._limit_logged.add(spec.name)
                log.warning(
                    "Creating %s with replication factor %d, not %d (%s): "
                    "kcore.replication.enable is not set",
                    spec.name,
                    rf,
                    configured,
                    spec.replication_key,
                )
            configs = {
                **dict(spec.configs),
                "compression.type": "producer",
                "segment.bytes": str(config.value(spec.segment_bytes_key)),
            }
            if key_type == TRANSACTION:
                configs["min.insync.replicas"] = str(config.transaction_state_log_min_isr_for(rf))
            Req = m.CreateTopicsRequest
            request = Req(
                topics=[
                    Req.CreatableTopic(
                        name=spec.name,
                        num_partitions=self.partition_count(key_type),
                        replication_factor=rf,
                        configs=[
                            Req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
                        ],
                    )
                ],
                timeout_ms=30000,
            )
            response = await self.broker.controller_call(lambda c, now: c.create_topics(request))
            result = response.topics[0]
            if result.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"creating {spec.name} failed: {ErrorCode(result.error_code).name} "
                    f"{result.error_message or ''}".rstrip(),
                )
