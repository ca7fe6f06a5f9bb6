"""kcore as a test dependency: :class:`EmbeddedCluster` and the ``kcore_cluster`` fixture.

Install kcore and its pytest plugin registers itself (entry point ``pytest11``)::

    def test_orders(kcore_cluster):
        kcore_cluster.create_topic("orders")
        ...  # point any Kafka client at kcore_cluster.bootstrap_servers
"""

from kcore.testing.embedded import EmbeddedCluster, free_port, free_ports
from kcore.testing.mirroring import MirroredClusters
from kcore.testing.processes import ProcessCluster, ServerProcess

__all__ = [
    "EmbeddedCluster",
    "MirroredClusters",
    "ProcessCluster",
    "ServerProcess",
    "free_port",
    "free_ports",
]
