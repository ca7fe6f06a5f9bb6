"""Disaster-recovery clusters for tests: a source and a destination kcore cluster with a cluster
mirror between them, so an application's own failover can be tested in a few lines::

    def test_orders_survive_a_failover(kcore_dr_clusters):
        dr = kcore_dr_clusters
        dr.source.create_topic("orders", partitions=3)
        dr.mirror_topics("orders")
        ...  # produce to dr.source.bootstrap_servers
        dr.wait_in_sync()
        dr.failover()           # kafka-cluster-mirrors.sh --stop: orders is writable now
        ...  # consume and produce on dr.destination.bootstrap_servers, same offsets

Both clusters are :class:`~kcore.testing.EmbeddedCluster` nodes in this process on loopback;
everything goes through the same RPCs an operator's tools send (CreateClusterMirror,
StartMirrorTopics, StopMirrorTopics, DescribeClusterMirrors). :meth:`MirroredClusters.failback`
mirrors the other way, under the same mirror name, after a failover (spec M-69).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from kcore.client import KafkaClient
from kcore.client import mirrors as admin
from kcore.protocol.errors import KafkaError
from kcore.testing.embedded import EmbeddedCluster

__all__ = ["MirroredClusters"]

SYNC_TIMEOUT_S = 60.0


class MirroredClusters:
    """A source cluster, a destination cluster and the mirror ``mirror`` from one to the other.

    ``source_config`` / ``destination_config`` are broker properties of each side;
    ``mirror_config`` extra configs of the mirror (``bootstrap.servers`` is set for you);
    ``source_brokers`` / ``destination_brokers`` the brokers of each cluster (one by default:
    with several, a topic's partitions are led by different brokers).
    """

    def __init__(
        self,
        mirror: str = "dr",
        *,
        source_config: Mapping[str, str] | None = None,
        destination_config: Mapping[str, str] | None = None,
        mirror_config: Mapping[str, str] | None = None,
        source_brokers: int = 1,
        destination_brokers: int = 1,
    ) -> None:
        self.mirror = mirror
        self.source = EmbeddedCluster(source_brokers, config=source_config)
        self.destination = EmbeddedCluster(destination_brokers, config=destination_config)
        self._mirror_config = dict(mirror_config or {})

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> MirroredClusters:
        self.source.start()
        self.destination.start()
        self._create_mirror(self.destination, self.source)
        return self

    def stop(self) -> None:
        for cluster in (self.destination, self.source):
            cluster.stop()
            cluster._cleanup()

    def __enter__(self) -> MirroredClusters:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the operations ---------------------------------------------------------------------

    def mirror_topics(
        self, *topics: str, include: Iterable[str] = (), exclude: Iterable[str] = ()
    ) -> list[str]:
        """Start mirroring ``topics`` (and the source topics matching ``include``, minus
        ``exclude``) into the destination; returns the topics started. Raises KafkaError."""
        response = self._admin(
            self.destination,
            lambda c: admin.start_mirror_topics(
                c,
                self.mirror,
                list(topics),
                include_patterns=list(include),
                exclude_patterns=list(exclude),
            ),
        )
        return self._topic_results(response)

    def wait_in_sync(self, timeout: float = SYNC_TIMEOUT_S) -> None:
        """Return once every mirror partition is MIRRORING and the destination holds all that
        the source has made stable (its last stable offset: D-19); AssertionError after
        ``timeout`` seconds, naming the partitions behind."""
        deadline = time.monotonic() + timeout
        while True:
            behind = self._behind()
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"mirror {self.mirror} not in sync: {behind}")
            time.sleep(0.05)

    def failover(self, *topics: str, timeout: float = SYNC_TIMEOUT_S) -> list[str]:
        """Stop mirroring ``topics`` (default: every topic, the pattern ``.*``) and wait until
        each partition is STOPPED: the topics are then writable on the destination."""
        patterns = [] if topics else [".*"]
        response = self._admin(
            self.destination,
            lambda c: admin.stop_mirror_topics(c, self.mirror, list(topics), patterns=patterns),
        )
        stopped = self._topic_results(response)
        self._wait_states(self.destination, set(stopped), {"STOPPED"}, timeout)
        return stopped

    def failback(self, *topics: str, timeout: float = SYNC_TIMEOUT_S) -> list[str]:
        """After :meth:`failover`: mirror ``topics`` back from the destination into the source
        under the same mirror name (the source truncates what diverged, M-69); waits until they
        mirror. Swaps nothing: ``source`` stays the cluster it was."""
        listed = self._admin(self.source, lambda c: admin.list_cluster_mirrors(c)).mirrors
        if all(m.mirror_name != self.mirror for m in listed):
            self._create_mirror(self.source, self.destination)
        response = self._admin(
            self.source, lambda c: admin.start_mirror_topics(c, self.mirror, list(topics))
        )
        started = self._topic_results(response)
        self._wait_states(self.source, set(started), {"MIRRORING"}, timeout)
        return started

    def describe(self, cluster: EmbeddedCluster | None = None) -> dict[tuple[str, int], Any]:
        """``{(topic, partition): PartitionDetail}`` of the mirror on ``cluster`` (default the
        destination): state, source and destination offsets, lag, LME, ..."""
        response = self._admin(
            cluster or self.destination,
            lambda c: admin.describe_cluster_mirrors(c, [self.mirror]),
        )
        out = {}
        for described in response.mirrors:
            if described.error_code:
                raise KafkaError(described.error_code, described.error_message)
            for t in described.topics:
                for p in t.partitions:
                    out[(t.topic_name, p.partition_index)] = p
        return out

    # -- helpers ----------------------------------------------------------------------------

    def _create_mirror(self, on: EmbeddedCluster, source: EmbeddedCluster) -> None:
        configs = {"bootstrap.servers": source.bootstrap_servers, **self._mirror_config}
        response = self._admin(on, lambda c: admin.create_cluster_mirror(c, self.mirror, configs))
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message)

    @staticmethod
    def _admin(cluster: EmbeddedCluster, call) -> Any:
        async def main():
            async with KafkaClient(cluster.bootstrap_servers) as client:
                return await call(client)

        return trio.run(main)

    @staticmethod
    def _topic_results(response) -> list[str]:
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message)
        for t in response.topics:
            if t.error_code:
                raise KafkaError(t.error_code, t.error_message or f"topic {t.name}")
        return [t.name for t in response.topics]

    def _behind(self) -> dict[tuple[str, int], str]:
        behind = {}
        for tp, detail in self.describe().items():
            if detail.state == "STOPPED":
                continue
            src, dst = self.source.leader_partition(tp), self.destination.leader_partition(tp)
            if detail.state != "MIRRORING" or src is None or dst is None:
                behind[tp] = detail.state
            elif dst.log_end_offset < src.last_stable_offset:
                behind[tp] = f"at {dst.log_end_offset} of {src.last_stable_offset}"
        return behind

    def _wait_states(self, cluster, topics: set[str], states: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            seen = {tp: d.state for tp, d in self.describe(cluster).items() if tp[0] in topics}
            if seen and all(s in states for s in seen.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"mirror {self.mirror} did not reach {states}: {seen}")
            time.sleep(0.05)
