"""The pytest plugin of kcore: real Kafka-compatible brokers as fixtures.

* ``kcore_cluster`` — one single-node cluster for the whole test session (fast: tests share it;
  give each test its own topic names);
* ``kcore_cluster_factory`` — call it to get a fresh cluster for one test (``config=`` takes
  broker properties); it is stopped and its data removed after the test.
* ``kcore_dr_clusters`` — a source and a destination cluster with the cluster mirror ``dr``
  between them (:class:`~kcore.testing.mirroring.MirroredClusters`), for one test: mirror
  topics, wait until in sync, fail over, fail back.
"""

from __future__ import annotations

import pytest

from kcore.testing.embedded import EmbeddedCluster
from kcore.testing.mirroring import MirroredClusters


@pytest.fixture(scope="session")
def kcore_cluster():
    with EmbeddedCluster() as cluster:
        yield cluster


@pytest.fixture
def kcore_cluster_factory():
    clusters: list[EmbeddedCluster] = []

    def make(**kwargs) -> EmbeddedCluster:
        cluster = EmbeddedCluster(**kwargs)
        cluster.start()
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()
        cluster._cleanup()


@pytest.fixture
def kcore_dr_clusters():
    with MirroredClusters() as clusters:
        yield clusters
