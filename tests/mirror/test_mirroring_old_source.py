"""Mirroring from a source that looks older than KIP-595 (Kafka 2.7): a kcore source with
``kcore.testing.fetch.max.version`` advertises no Fetch v12, so the mirror's fetches leave
``LastFetchedEpoch`` out and the source reports no diverging epoch (spec M-28): the data is
mirrored all the same, source epoch changes still fence and bump the destination (D-11), and a
destination ahead of the source is not truncated by a guess but FAILS with the reason (D-16)
until the operator's Start. A source below Fetch v4 cannot read committed data (D-19): refused.
"""

from __future__ import annotations

import pytest

from kcore.client.mirrors import pause_mirror_topics, resume_mirror_topics
from kcore.testing import MirroredClusters

from .clusters import CLUSTER_CONFIG, wait_until
from .test_mirror_fetcher import _assert_identical_batches, _bump_epoch, _inject
from .test_mirroring_recovery import _produce

pytestmark = pytest.mark.timeout(180)

TOPIC = "ledger"


def _fetch_versions(dr) -> set:
    fetcher = dr.destination.broker.mirror_fetchers[dr.mirror]
    return {task.endpoint.fetch_version for task in fetcher.manager.fetchers.values()}


def _state(dr) -> str:
    return dr.describe()[(TOPIC, 0)].state


def test_mirroring_from_a_source_without_fetch_v12_epoch_bump_and_divergence():
    old = {**CLUSTER_CONFIG, "kcore.testing.fetch.max.version": "11"}
    with MirroredClusters(
        source_config=old,
        destination_config={**CLUSTER_CONFIG, "mirror.failed.max.retries": "0"},
    ) as dr:
        dr.source.create_topic(TOPIC)
        _produce(dr.source, TOPIC, [b"entry-%d" % i for i in range(5)])
        dr.mirror_topics(TOPIC)
        dr.wait_in_sync()
        assert _fetch_versions(dr) == {11}
        _assert_identical_batches(dr.source, dr.destination, TOPIC, 0, 5)

        # A source leader epoch change: EPOCH_FENCING, then MIRRORING at the source's epoch.
        epoch = _bump_epoch(dr.source, TOPIC, 0)
        _produce(dr.source, TOPIC, [b"later-%d" % i for i in range(3)])
        dr.wait_in_sync()
        dest = dr.destination.leader_partition((TOPIC, 0))
        assert dest.latest_epoch == epoch and dest.leader_epoch >= epoch
        _assert_identical_batches(dr.source, dr.destination, TOPIC, 0, 8)

        # The destination holds what the source does not (at an epoch the source has): with
        # Fetch v12 the source would answer a diverging epoch; here it cannot, and the fetch
        # is out of range: FAILED with the reason, nothing cut (D-16, M-28).
        paused = dr._admin(dr.destination, lambda c: pause_mirror_topics(c, dr.mirror, [TOPIC]))
        assert [t.error_code for t in paused.topics] == [0]
        wait_until(lambda: _state(dr) == "PAUSED", 30, "PAUSED")
        _inject(dr.destination, TOPIC, 0, 12, epoch=epoch, start=8)
        resumed = dr._admin(dr.destination, lambda c: resume_mirror_topics(c, dr.mirror, [TOPIC]))
        assert [t.error_code for t in resumed.topics] == [0]
        wait_until(lambda: _state(dr) == "FAILED", 60, "FAILED")
        assert "above the source's log end offset 8" in dr.describe()[(TOPIC, 0)].failed_reason
        assert dest.log_end_offset == 12
        # The operator's Start: the source has no LME for the mirror, so the whole log is
        # copied again (D-16), identical to the source.
        assert dr.mirror_topics(TOPIC) == [TOPIC]
        dr.wait_in_sync()
        assert dest.log_end_offset == 8
        _assert_identical_batches(dr.source, dr.destination, TOPIC, 0, 8)


def test_mirroring_refuses_a_source_without_read_committed_fetch():
    with MirroredClusters(
        source_config={**CLUSTER_CONFIG, "kcore.testing.fetch.max.version": "3"},
        destination_config={**CLUSTER_CONFIG, "mirror.failed.max.retries": "0"},
    ) as dr:
        dr.source.create_topic(TOPIC)
        _produce(dr.source, TOPIC, [b"entry"])
        dr.mirror_topics(TOPIC)
        wait_until(lambda: _state(dr) == "FAILED", 60, "FAILED")
        reason = dr.describe()[(TOPIC, 0)].failed_reason
        assert reason.startswith("UNSUPPORTED_VERSION: ")
        assert "supports Fetch up to v3" in reason and "v4+" in reason
        assert dr.destination.leader_partition((TOPIC, 0)).log_end_offset == 0
