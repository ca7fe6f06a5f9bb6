"""``mirror.replication.throttled.rate``: the pure throttle with a fake clock, then the mirror
between two real clusters under a low rate, measured by the throttle's own accounting."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.mirror.throttle import UNLIMITED, MirrorThrottle
from kcore.testing import MirroredClusters

from .clusters import CLUSTER_CONFIG
from .test_mirror_fetcher import _assert_identical_batches


def test_throttle_unlimited_by_default_never_waits():
    throttle = MirrorThrottle(lambda: UNLIMITED)
    throttle.record(10**9, 0.0)
    assert throttle.delay(0.0) == 0.0 and throttle.max_bytes(64 << 20) == 64 << 20


def test_throttle_waits_out_the_debt_at_the_rate():
    rate = 1000
    throttle = MirrorThrottle(lambda: rate)
    assert throttle.delay(0.0) == 0.0  # a full bucket: one second's worth
    assert throttle.max_bytes(64 << 20) == 1000
    throttle.record(3000, 0.0)  # 1000 in credit, 3000 taken: 2000 of debt
    assert throttle.delay(0.0) == pytest.approx(2.0)
    assert throttle.delay(1.5) == pytest.approx(0.5)
    assert throttle.delay(2.0) == 0.0
    rate = UNLIMITED  # a dynamic change takes effect at the next call
    throttle.record(10**6, 2.0)
    assert throttle.delay(2.0) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    rate=st.integers(100, 10_000),
    responses=st.lists(st.integers(0, 20_000), min_size=1, max_size=30),
)
def test_throttle_a_fetcher_that_obeys_it_stays_under_the_rate(rate, responses):
    # A fetcher that waits as told and asks for max_bytes (one response may exceed it by at
    # most a batch, here by anything): bytes <= rate * elapsed + one second + the last answer.
    throttle = MirrorThrottle(lambda: rate)
    now = 0.0
    for size in responses:
        now += throttle.delay(now)
        throttle.record(size, now)
        now += 0.001  # the round trip
    elapsed = throttle.last_s - throttle.first_s
    assert throttle.recorded_bytes <= rate * elapsed + rate + max(responses) + 1e-6


@pytest.mark.timeout(180)
def test_mirroring_is_held_to_the_throttled_rate():
    rate = 20_000  # bytes per second, for every mirror on the destination broker
    with MirroredClusters(
        source_config=CLUSTER_CONFIG,
        destination_config={**CLUSTER_CONFIG, "mirror.replication.throttled.rate": str(rate)},
    ) as dr:
        dr.source.create_topic("ledger")
        # ~80 KiB in batches of one record each.
        producer = Producer(
            {"bootstrap.servers": dr.source.bootstrap_servers, "batch.num.messages": 1}
        )
        for i in range(80):
            producer.produce("ledger", b"%04d" % i + b"x" * 1000, partition=0)
        assert producer.flush(30) == 0
        dr.mirror_topics("ledger")
        dr.wait_in_sync(timeout=120)
        end = dr.source.leader_partition(("ledger", 0)).log_end_offset
        _assert_identical_batches(dr.source, dr.destination, "ledger", 0, end)
        throttle = dr.destination.broker.mirror_manager.throttle
        assert throttle.recorded_bytes > 4 * rate  # well past the first second's credit
        assert throttle.waited_s > 0  # the fetcher was held back
        elapsed = throttle.last_s - throttle.first_s
        # The largest single answer is at most one second's worth or one batch (~1 KiB).
        assert throttle.recorded_bytes <= rate * elapsed + 2 * rate + 2048
