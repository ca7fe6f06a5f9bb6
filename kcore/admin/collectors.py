"""The broker's figures for ``/metrics``: prometheus-client collectors that read the node's
state when scraped.

Nothing here is updated per request: the request path counts into plain lists and dicts
(:mod:`kcore.server.request_metrics`) and the partitions, coordinators and controller are read
as they are, so a scrape costs one pass over the partitions this node hosts (small constants:
no sorting, no request to anyone) and nothing costs anything between scrapes. Each collector
yields prometheus-client metric families; :mod:`kcore.admin.metrics` formats them with
prometheus-client's exposition. The figures are Kafka's (``RequestsPerSec``, ``ErrorsPerSec``,
``TotalTimeMs``, ``BytesInPerSec``, ``UnderReplicatedPartitions``, ``ActiveControllerCount``,
``OfflinePartitionsCount``, ``Size``, ...) as Prometheus counters, gauges and histograms in
base units (seconds, bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from kcore.admin.partition_families import PartitionFamily, Rows
from kcore.protocol.api import APIS
from kcore.protocol.errors import error_info
from kcore.server.request_metrics import LATENCY_BOUNDS_S, TopicTraffic

NO_LEADER = -1
_BUCKET_LABELS = tuple(repr(float(b)) for b in LATENCY_BOUNDS_S) + ("+Inf",)


class RequestCollector:
    """Requests, errors and latency per API, counted by the Kafka listeners."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        metrics = self.broker.server.metrics
        requests = CounterMetricFamily(
            "kcore_requests", "Kafka requests answered, by API.", labels=["api"]
        )
        latency = HistogramMetricFamily(
            "kcore_request_latency_seconds",
            "Time from a request's decoding to its response (long polls and acks=all waits "
            "included), by API.",
            labels=["api"],
        )
        for key, counts in enumerate(metrics.latency_buckets):
            running, buckets = 0, []
            for label, n in zip(_BUCKET_LABELS, counts, strict=True):
                running += n
                buckets.append((label, running))
            if not running:
                continue  # an API nobody called
            name = APIS[key].name
            requests.add_metric([name], running)
            latency.add_metric([name], buckets, metrics.latency_sum[key])
        errors = CounterMetricFamily(
            "kcore_request_errors",
            "Error codes in Kafka responses (each partition's, topic's or resource's), by API "
            "and error.",
            labels=["api", "error"],
        )
        for (key, code), count in list(metrics.errors.items()):
            errors.add_metric([APIS[key].name, error_info(code)[0]], count)
        connections = GaugeMetricFamily(
            "kcore_connections", "Open connections on the Kafka listeners."
        )
        connections.add_metric([], self.broker.server.connections)
        yield from (requests, errors, latency, connections)


class TopicCollector:
    """Bytes and records in and out per topic, counted by Produce and Fetch."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        traffic: TopicTraffic = self.broker.topic_traffic
        traffic.forget_except(self.broker.metadata_image.topics.by_name)
        labels = ["topic"]
        families = (
            CounterMetricFamily(
                "kcore_topic_bytes_in", "Bytes of record batches produced.", labels=labels
            ),
            CounterMetricFamily(
                "kcore_topic_records_in", "Records produced (appended).", labels=labels
            ),
            CounterMetricFamily(
                "kcore_topic_bytes_out", "Bytes of record batches fetched by consumers.",
                labels=labels,
            ),
            CounterMetricFamily(
                "kcore_topic_replication_bytes_out",
                "Bytes of record batches fetched by follower replicas.", labels=labels,
            ),
        )  # fmt: skip
        for topic, counts in traffic.topics.items():
            for family, value in zip(families, counts, strict=True):
                family.add_metric([topic], value)
        yield from families


class PartitionCollector:
    """The partitions this node hosts, and what the active controller sees of all of them."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._size = PartitionFamily(
            GaugeMetricFamily,
            "kcore_log_size_bytes",
            "Bytes of a partition's log segments on this node.",
            ["topic"],
        )

    def collect(self) -> Iterator[Metric | Rows]:
        broker = self.broker
        node = broker.node_id
        size = self._size.rows()
        replicas = broker.replica_manager
        min_isr = replicas.min_insync_replicas
        hosted = led = under_replicated = under_min_isr = 0
        for (topic, index), partition in replicas.partitions.items():
            hosted += 1
            size.add((topic,), (index, partition.log.size_in_bytes()))
            state = partition.state
            if state.leader == node:
                led += 1
                if len(state.isr) < len(state.replicas):
                    under_replicated += 1
                if len(state.isr) < min_isr(topic):
                    under_min_isr += 1
        yield _gauge("kcore_partitions", "Partitions with a replica on this node.", hosted)
        yield _gauge("kcore_leader_partitions", "Partitions this node leads.", led)
        yield _gauge(
            "kcore_under_replicated_partitions",
            "Partitions this node leads whose ISR is smaller than their replica set.",
            under_replicated,
        )
        yield _gauge(
            "kcore_under_min_isr_partitions",
            "Partitions this node leads whose ISR is below min.insync.replicas.",
            under_min_isr,
        )
        yield size
        yield from self._controller()

    def _controller(self) -> Iterator[Metric]:
        """Kafka's controller gauges: 1 and the cluster's counts on the active controller, 0
        on every other node, so ``sum()`` over the cluster is the cluster's figure."""
        service = self.broker.controller_service
        active = service is not None and service.is_active
        topics = partitions = offline = 0
        if active:
            for topic in self.broker.metadata_image.topics.by_name.values():
                topics += 1
                for registration in topic.partitions.values():
                    partitions += 1
                    if registration.leader == NO_LEADER:
                        offline += 1
        yield _gauge(
            "kcore_active_controller", "1 on the active controller, 0 elsewhere.", int(active)
        )
        yield _gauge(
            "kcore_global_topics", "Topics in the cluster (on the active controller).", topics
        )
        yield _gauge(
            "kcore_global_partitions",
            "Partitions in the cluster (on the active controller).",
            partitions,
        )
        yield _gauge(
            "kcore_offline_partitions",
            "Partitions without a leader (on the active controller).",
            offline,
        )


class CoordinatorCollector:
    """The group, transaction and cluster mirror coordinators on this node."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        groups_core = broker.group_coordinator.core
        txn_core = broker.transaction_coordinator.core
        owned = GaugeMetricFamily(
            "kcore_coordinator_partitions",
            "Partitions of the coordinators' internal topics this node serves (loaded).",
            labels=["coordinator"],
        )
        owned.add_metric(["group"], len(groups_core.owned_partitions()))
        owned.add_metric(
            ["transaction"],
            len(txn_core.owned_partitions()) - len(txn_core.loading_partitions()),
        )
        owned.add_metric(["mirror"], len(broker.mirror_coordinator.core.owned_partitions()))
        yield owned
        groups = GaugeMetricFamily(
            "kcore_groups", "Consumer groups this node coordinates, by state.", labels=["state"]
        )
        for state, count in groups_core.group_states().items():
            groups.add_metric([state], count)
        yield groups
        txns = GaugeMetricFamily(
            "kcore_transactional_ids",
            "Transactional ids this node coordinates, by transaction state.",
            labels=["state"],
        )
        by_state: dict[str, int] = {}
        for txn in txn_core.all_metadata().values():
            name = txn.state.kafka_name
            by_state[name] = by_state.get(name, 0) + 1
        for state, count in by_state.items():
            txns.add_metric([state], count)
        yield txns


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family
