"""The quorum under a seeded, faulty network (see ``simulation.py`` for what is checked).

Every test names its seed; a failure prints it with the line to replay it::

    SEED=1234 .venv/bin/pytest tests/raft/test_simulation.py

``SEED`` restricts every test here to that one seed. The default suite runs
:data:`CHAOS_SEEDS` seeds of :data:`CHAOS_STEPS` events for each quorum size (about 15 s);
``--run-slow`` adds the soak: many more seeds, longer runs, harsher faults.
"""

from __future__ import annotations

import os

import pytest

from .simulation import (
    CHAOS,
    LIVENESS_BOUND_MS,
    Faults,
    QuorumRole,
    Simulation,
    run_chaos,
    run_graceful_shutdown,
    run_minority_leader,
    run_returning_voter,
)

CHAOS_SEEDS = 60
CHAOS_STEPS = 5_000
SCENARIO_SEEDS = 6
SOAK_SEEDS = 200
SOAK_STEPS = 10_000

# 1, 3 and 5 voters, each with one observer (a broker-only node replicating the log).
QUORUMS = [(1, 1), (3, 1), (5, 1)]

HARSH = Faults(
    drop=0.2, duplicate=0.1, max_delay_ms=300, fault_mean_interval_ms=400, mid_output_crash=0.01
)
CRASHY = Faults(
    drop=0.01, duplicate=0.01, max_delay_ms=10, fault_mean_interval_ms=200, mid_output_crash=0.05
)


def seeds(count: int, base: int = 0) -> list[int]:
    """``count`` seeds, or only the one in the SEED environment variable."""
    if os.environ.get("SEED"):
        return [int(os.environ["SEED"])]
    return list(range(base, base + count))


@pytest.mark.parametrize("voters,observers", QUORUMS, ids=lambda v: str(v))
@pytest.mark.parametrize("seed", seeds(CHAOS_SEEDS))
def test_simulation_chaos_keeps_committed_entries_and_recovers(voters, observers, seed):
    sim = run_chaos(seed, voters, observers, CHAOS_STEPS)
    assert sim.steps >= CHAOS_STEPS
    assert sim.leader() is not None


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", seeds(SCENARIO_SEEDS, base=1000))
def test_simulation_returning_partitioned_voter_does_not_bump_the_epoch(voters, seed):
    pre_vote_rounds, highest_epoch = run_returning_voter(seed, voters)
    # It really did try (20 s cut off, a pre-vote round every few seconds) and failed.
    assert pre_vote_rounds >= 3
    assert highest_epoch >= 1


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", seeds(SCENARIO_SEEDS, base=2000))
def test_simulation_majority_elects_a_leader_when_the_leader_is_cut_off(voters, seed):
    took = run_minority_leader(seed, voters)
    # Fetch timeout (2 s), then a pre-vote and a vote, perhaps a split vote and a backoff.
    assert took <= 12_000


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", seeds(SCENARIO_SEEDS, base=3000))
def test_simulation_graceful_shutdown_hands_leadership_over(voters, seed):
    took = run_graceful_shutdown(seed, voters)
    # The preferred successor starts at once; a lost race with EndQuorumEpoch costs at most
    # one fetch timeout (2 s). Without the handover it would be the fetch timeout plus an
    # election at least.
    assert took <= 2_500


@pytest.mark.parametrize("voters,observers", QUORUMS, ids=lambda v: str(v))
@pytest.mark.parametrize("seed", seeds(3, base=500))
def test_simulation_through_the_wire_codec(voters, observers, seed):
    # Every message encoded and decoded at Kafka 4.0's versions (Fetch v17, Vote v1, ...).
    sim = run_chaos(seed, voters, observers, 3_000, wire=True)
    assert sim.leader() is not None


def test_simulation_same_seed_replays_the_same_run():
    def fingerprint(seed):
        sim = Simulation(seed, 3, 1, faults=CHAOS)
        sim.run_steps(2_000)
        return (
            sim.now,
            sorted(sim.committed.items()),
            sim.max_epoch_seen,
            [
                (n.core.role, n.core.epoch, n.core.high_watermark) if n.core else None
                for n in sim.nodes.values()
            ],
        )

    assert fingerprint(7) == fingerprint(7)
    assert fingerprint(7) != fingerprint(8)


def test_simulation_single_voter_leads_at_once_and_observer_follows():
    sim = Simulation(11, 1, 1)
    sim.run_until(sim.converged, LIVENESS_BOUND_MS, "convergence")
    leader = sim.nodes[1].core
    observer = sim.nodes[2].core
    assert leader.role is QuorumRole.LEADER and leader.epoch == 1
    assert observer.role is QuorumRole.FOLLOWER and observer.leader_id == 1
    assert observer.high_watermark == leader.log.end_offset


@pytest.mark.slow
@pytest.mark.parametrize("voters,observers", QUORUMS, ids=lambda v: str(v))
@pytest.mark.parametrize("faults", [CHAOS, HARSH, CRASHY], ids=["chaos", "harsh", "crashy"])
def test_simulation_soak(voters, observers, faults):
    for seed in seeds(SOAK_SEEDS, base=10_000):
        sim = Simulation(seed, voters, observers, faults=faults, snapshot_every=10)
        sim.run_steps(SOAK_STEPS)
        sim.heal()
        sim.client_on = False
        sim.run_until(sim.converged, LIVENESS_BOUND_MS, "a leader known to all after healing")
        sim.check_converged_states()


@pytest.mark.slow
@pytest.mark.parametrize("voters", [3, 5])
def test_simulation_scenarios_soak(voters):
    for seed in seeds(100, base=20_000):
        run_returning_voter(seed, voters)
        assert run_minority_leader(seed, voters) <= 12_000
        assert run_graceful_shutdown(seed, voters) <= 2_500
