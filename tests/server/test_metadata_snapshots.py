"""Periodic metadata snapshots: the log is cut, and a restart rebuilds from snapshot + log."""

import pytest

from kcore.raft.disk_log import METADATA_LOG_DIR_NAME
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

THRESHOLD = "2000"  # bytes of committed metadata records between snapshots


def _checkpoints(cluster: EmbeddedCluster) -> list[str]:
    directory = cluster.data_dir / "logs" / METADATA_LOG_DIR_NAME
    return sorted(p.name for p in directory.glob("*.checkpoint"))


def test_metadata_snapshots_taken_and_restart_loads_them(tmp_path):
    config = {
        "metadata.log.max.record.bytes.between.snapshots": THRESHOLD,
        # A restarted broker re-registers once its previous session expired: keep that short.
        "broker.session.timeout.ms": "1500",
    }
    first = [f"snap-{i:03d}" for i in range(40)]
    later = [f"late-{i:03d}" for i in range(10)]
    cluster = EmbeddedCluster(config=config, data_dir=tmp_path)
    with cluster:
        for name in first:
            cluster.create_topic(name, partitions=2)
        assert cluster.broker.snapshotter.snapshots_taken >= 1
        assert _checkpoints(cluster), "no .checkpoint file was written"
        # The driver cut the log before the latest snapshot.
        assert cluster.broker.quorum.log.start_offset > 0

        cluster.restart()
        assert set(first) <= set(cluster.topics())
        assert all(
            (name, p) in cluster.broker.replica_manager.partitions for name in first for p in (0, 1)
        )
        # Metadata writes continue after a restart from a snapshot, and are kept too.
        for name in later:
            cluster.create_topic(name)
        cluster.restart()
        assert set(first) | set(later) <= set(cluster.topics())
        image = cluster.broker.metadata_image
        assert image.topics.by_name["snap-000"].partitions.keys() == {0, 1}


def test_metadata_snapshotter_waits_for_threshold(tmp_path):
    config = {"metadata.log.max.record.bytes.between.snapshots": "100000000"}
    with EmbeddedCluster(config=config, data_dir=tmp_path) as cluster:
        for i in range(5):
            cluster.create_topic(f"t{i}")
        assert cluster.broker.snapshotter.snapshots_taken == 0
        assert cluster.broker.snapshotter.bytes_since_snapshot > 0
        assert _checkpoints(cluster) == []
