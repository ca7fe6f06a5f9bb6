"""A 3-voter quorum of real ``kcore server`` processes whose controller listeners are SASL_SSL
(#18): the voters' Raft connections (Vote, BeginQuorumEpoch, Fetch) and the brokers'
registrations and heartbeats log in with PLAIN over TLS, checked against the test CA. A leader
is elected, a topic created through a follower reaches every node, and after ``kill -9`` of the
leader the two survivors elect another over the same secured connections.
"""

from __future__ import annotations

import pytest
import trio

from kcore.testing.processes import ProcessCluster, ServerProcess, run_then_kill
from tests.security.conftest import make_pki
from tests.server.test_quorum_processes import (
    _create_topic,
    _wait_for_topics,
    describe_quorum_at,
)

pytestmark = pytest.mark.timeout(150)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def _config(pki) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{PLAIN} username="controller" password="controller-secret" '
            'user_controller="controller-secret";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.truststore.type": "PEM",
        "listener.name.controller.ssl.keystore.location": str(pki.server_file),
        "listener.name.controller.ssl.truststore.location": str(pki.ca_file),
        "controller.quorum.election.timeout.ms": "500",
        "controller.quorum.fetch.timeout.ms": "1000",
        "broker.session.timeout.ms": "2000",
    }


async def _leader(node: ServerProcess) -> tuple[int, int] | None:
    """(leader, epoch) from DescribeQuorum through ``node``'s client listener (forwarded to
    the quorum leader over the secured controller listener)."""
    answer = await describe_quorum_at(node.port)
    return None if answer is None else answer[:2]


async def _wait_for_leader(nodes, timeout: float, not_: int | None = None) -> tuple[int, int]:
    with trio.fail_after(timeout):
        while True:
            answers = {await _leader(n) for n in nodes} - {None}
            if len(answers) == 1 and next(iter(answers))[0] != not_:
                return next(iter(answers))
            await trio.sleep(0.1)


def test_a_quorum_of_processes_over_sasl_ssl_elects_replicates_and_fails_over(tmp_path):
    pki = make_pki(tmp_path)
    cluster = ProcessCluster(tmp_path / "nodes", 3, config=_config(pki))
    nodes = {n.node_id: n for n in cluster.nodes}

    async def main() -> None:
        for node in nodes.values():
            node.format(cluster.cluster_id)
            node.start(wait=False)
        leader, epoch = await _wait_for_leader(list(nodes.values()), 45)
        follower = next(n for i, n in nodes.items() if i != leader)
        await _create_topic(follower, "over-sasl-ssl", 30)
        for node in nodes.values():
            await _wait_for_topics(node, {"over-sasl-ssl"}, 30)

        nodes[leader].kill()
        survivors = [n for i, n in nodes.items() if i != leader]
        new_leader, new_epoch = await _wait_for_leader(survivors, 30, not_=leader)
        assert new_epoch > epoch
        await _create_topic(survivors[0], "after-failover", 30)
        for node in survivors:
            await _wait_for_topics(node, {"over-sasl-ssl", "after-failover"}, 30)

    run_then_kill(nodes.values(), main)
    for node in nodes.values():  # the nodes talked TLS and SASL: no plaintext fallback logged
        assert "authentication to" not in node.output()
