"""One replicated partition under crashes, network partitions and message loss (see
``simulation.py`` for what runs and what is checked).

Every run is named by its seed; a failure lists the seeds with the line to replay one::

    SEED=1234 .venv/bin/pytest tests/replica/test_replication_simulation.py

``SEED`` restricts every test here to that one seed. The properties share their runs: each
seed of :data:`SEEDS` is run once (20 s of faults, then healed until it converges) and every
property test reads the same runs.
"""

from __future__ import annotations

import functools
import os

import pytest

from .simulation import MUTATIONS, Faults, Simulation, run_seed

SEEDS = 200
UNCLEAN_SEEDS = 100
HARSH_SEEDS = 50
MUTATION_SEEDS = 30  # a broken rule must be caught within this many seeds
CONVERGENCE_BOUND_MS = 15_000

HARSH = Faults(loss=0.2, max_delay_ms=100, fault_mean_interval_ms=500)
# The seed that shows the price of unclean election (any seed of the unclean runs would do).
UNCLEAN_LOSS_SEED = 3


def seeds(count: int) -> list[int]:
    if os.environ.get("SEED"):
        return [int(os.environ["SEED"])]
    return list(range(count))


@functools.cache
def clean(seed: int) -> Simulation:
    return run_seed(seed, quiet_ms=CONVERGENCE_BOUND_MS)


@functools.cache
def unclean(seed: int) -> Simulation:
    return run_seed(seed, unclean=True, quiet_ms=CONVERGENCE_BOUND_MS)


def failures(runs: dict[int, Simulation], prop: int) -> str:
    """The seeds that broke ``prop``, with their first violations ('' when none did)."""
    bad = {seed: sim.broken(prop) for seed, sim in runs.items() if sim.broken(prop)}
    return "\n".join(
        f"seed {seed} (SEED={seed} to replay): {'; '.join(what[:3])}" for seed, what in bad.items()
    )


def test_a_write_is_acknowledged_only_with_min_insync_replicas_holding_it():
    runs = {seed: clean(seed) for seed in seeds(SEEDS)}
    assert not failures(runs, 0)


def test_every_acknowledged_record_survives_clean_elections_in_every_isr_member():
    runs = {seed: clean(seed) for seed in seeds(SEEDS)}
    assert not failures(runs, 1)


def test_a_leaders_high_watermark_never_decreases_nor_passes_an_isr_members_log_end():
    runs = {seed: clean(seed) for seed in seeds(SEEDS)}
    assert not failures(runs, 2)


def test_isr_members_agree_with_the_leader_record_for_record_below_the_high_watermark():
    runs = {seed: clean(seed) for seed in seeds(SEEDS)}
    assert not failures(runs, 3)


def test_once_faults_stop_every_replica_converges_to_the_leaders_log():
    for seed in seeds(SEEDS):
        sim = clean(seed)
        assert sim.converged_after_ms is not None, (seed, sim.unconverged())
        # Convergence leaves nothing acknowledged behind either.
        assert not sim.broken(1), seed


def test_the_runs_exercise_elections_truncations_refusals_and_acknowledgements():
    """The properties are only as good as the runs: across the seeds, leaders move, followers
    truncate diverged records, produces are refused NOT_ENOUGH_REPLICAS, and many are acked."""
    if os.environ.get("SEED"):
        pytest.skip("SEED replays one seed; this test counts events across all of them")
    runs = [clean(seed) for seed in seeds(SEEDS)]
    assert sum(sim.stats["elections"] > 2 for sim in runs) > SEEDS // 3
    assert sum(sim.stats["truncated"] > 0 for sim in runs) > SEEDS // 4
    assert sum(sim.stats["refused"] > 0 for sim in runs) > SEEDS // 2
    assert sum(sim.stats["acked"] for sim in runs) > 100 * SEEDS


@pytest.mark.parametrize("seed", seeds(HARSH_SEEDS))
def test_harsh_faults_keep_every_property(seed):
    """A fifth of all messages lost, a fault every half second on average."""
    sim = run_seed(seed, faults=HARSH, quiet_ms=CONVERGENCE_BOUND_MS)
    assert sim.violations == []
    assert sim.converged_after_ms is not None, sim.unconverged()


def test_unclean_election_may_lose_acknowledged_records_the_documented_price():
    """With ``unclean.leader.election.enable`` a replica outside the ISR may lead: records
    acknowledged before are lost (property 1 fails), the rest still holds and it converges."""
    lost = unclean(UNCLEAN_LOSS_SEED)
    assert lost.broken(1), "the unclean seed lost nothing"
    assert not clean(UNCLEAN_LOSS_SEED).broken(1)  # the same faults, a clean election: nothing lost
    runs = {seed: unclean(seed) for seed in seeds(UNCLEAN_SEEDS)}
    for prop in (0, 2, 3):
        assert not failures(runs, prop)
    for seed, sim in runs.items():
        assert sim.converged_after_ms is not None, (seed, sim.unconverged())


def test_a_seed_replays_the_same_run():
    a, b = run_seed(7), run_seed(7)
    assert a.stats == b.stats
    assert [x.log.records for x in a.brokers.values()] == [
        x.log.records for x in b.brokers.values()
    ]


@pytest.mark.parametrize("mutation,prop", MUTATIONS.items(), ids=list(MUTATIONS))
def test_each_property_catches_its_broken_rule(mutation, prop):
    """Each property can fail: with the rule it guards broken (``MUTATIONS``), one of the first
    seeds breaks it (property 4: some seed never converges)."""
    for seed in range(MUTATION_SEEDS):
        sim = run_seed(seed, mutation=mutation, quiet_ms=5_000)
        if prop == 4 and sim.converged_after_ms is None or prop != 4 and sim.broken(prop):
            return
    pytest.fail(f"{mutation} went unnoticed by property {prop} in {MUTATION_SEEDS} seeds")


# A slow network (answers up to 800 ms on the way, the AlterPartition call given up on at 1 s).
SLOW = Faults(loss=0.02, max_delay_ms=400, fault_mean_interval_ms=3000)


@pytest.mark.xfail(
    strict=True,
    reason="kcore drops an ISR expansion whose AlterPartition got no answer (IsrChanges._send "
    "on an exception), while the controller may have committed it: the HW then passes the "
    "joined follower. Kafka keeps the change pending and sends it again.",
)
def test_a_lost_alter_partition_answer_does_not_let_the_hw_pass_a_joined_follower():
    sim = run_seed(2174, faults=SLOW, fault_ms=60_000, quiet_ms=20_000)
    assert not sim.broken(3), sim.broken(3)[:2]
