"""The broker's garbage collector policy (``kcore/server/gc_policy.py``): when it freezes the
long-lived objects, and that a serving broker has."""

from __future__ import annotations

import gc
import time

import pytest

from kcore.server.gc_policy import SETTLE_S, GcFreezePolicy
from kcore.testing import EmbeddedCluster


def frozen(policy: GcFreezePolicy, partitions: int, now: float) -> bool:
    if policy.due(partitions, now):
        policy.frozen(partitions)
        return True
    return False


def test_gc_policy_freezes_at_the_first_check():
    assert frozen(GcFreezePolicy(), 12, 0.0)


@pytest.mark.parametrize(
    "frozen_at, partitions",
    [(1_000, 1_400), (1_000, 600), (1_000, 1_001), (4_000, 4_900)],  # < 500 or < 25 % apart
)
def test_gc_policy_small_changes_do_not_freeze_again(frozen_at, partitions):
    policy = GcFreezePolicy(frozen_at=frozen_at)
    policy.due(partitions, 0.0)
    assert not policy.due(partitions, 100.0)


def test_gc_policy_a_start_of_many_partitions_freezes_once_the_count_settles():
    policy = GcFreezePolicy(frozen_at=50)
    now = 0.0
    for count in range(200, 10_000, 200):  # a mirror's discovery, delta after delta
        now += 1.0
        assert not frozen(policy, count, now)
    assert not frozen(policy, 10_050, now + 1)
    assert not frozen(policy, 10_050, now + SETTLE_S)
    assert frozen(policy, 10_050, now + 1 + SETTLE_S)
    assert not frozen(policy, 10_050, now + 100)  # and not again


def test_gc_policy_deleting_a_quarter_of_the_partitions_freezes_again():
    policy = GcFreezePolicy(frozen_at=10_000)
    policy.due(7_000, 0.0)
    assert frozen(policy, 7_000, SETTLE_S)


def test_gc_policy_a_serving_broker_has_frozen_its_objects():
    gc.unfreeze()
    with EmbeddedCluster() as cluster:
        deadline = time.monotonic() + 30
        while cluster.broker.gc_policy.frozen_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster.broker.gc_policy.frozen_at is not None
        assert gc.get_freeze_count() > 0
    gc.unfreeze()
