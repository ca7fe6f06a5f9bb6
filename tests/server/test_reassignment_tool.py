"""``kcore reassign-partitions`` on four in-process brokers with replication (#17): a plan from
``--generate`` fed back to ``--execute`` and verified; a reassignment that cannot finish (its
new replica is down) listed, refused a second ``--execute``, then cancelled back to the
original replicas; and the options and files the tool refuses, with Kafka's lines."""

from __future__ import annotations

import json

import pytest

from kcore.client.admin import alter_partition_reassignments
from kcore.client.cluster import KafkaClient
from kcore.testing import EmbeddedCluster
from tests.server.replicated import REPLICATED_CONFIG, registration, unique, wait_until
from tests.server.test_leader_elections import _create
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    config = {**REPLICATED_CONFIG, "auto.leader.rebalance.enable": "false"}
    with EmbeddedCluster(brokers=4, config=config) as c:
        yield c


def _reassign(cluster, targets):
    async def call():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await alter_partition_reassignments(client, targets)

    return cluster._call(call)


def _tool(cluster, *argv: str):
    return kcore("reassign-partitions", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def _plan(tmp_path, topic: str, targets: dict[int, list[int]], **extra):
    path = tmp_path / f"plan-{unique('p')}.json"
    partitions = [
        {"topic": topic, "partition": p, "replicas": r, **extra} for p, r in targets.items()
    ]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return str(path)


def test_generate_then_execute_and_verify(cluster, tmp_path):
    topic = unique("gen")
    _create(cluster, topic, [[1, 2], [2, 1], [1, 2]])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    out = _tool(cluster, "--generate", "--topics-to-move-json-file", str(topics),
                "--broker-list", "2,3,4")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1]) == {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any", "any"]}
        for p, r in enumerate([[1, 2], [2, 1], [1, 2]])]}  # fmt: skip
    assert lines[2:4] == ["", "Proposed partition reassignment configuration"]
    assert lines[5:] == [""]
    proposed = json.loads(lines[4])
    for p in proposed["partitions"]:
        assert len(set(p["replicas"])) == 2 and set(p["replicas"]) <= {2, 3, 4}
    plan = tmp_path / "proposed.json"
    plan.write_text(lines[4])
    done = _tool(cluster, "--execute", "--reassignment-json-file", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.endswith(
        f"Successfully started partition reassignments for {topic}-0,{topic}-1,{topic}-2\n"
    )
    wait_until(
        lambda: (
            "still in progress"
            not in (v := _tool(cluster, "--verify", "--reassignment-json-file", str(plan)).stdout)
            and v
        ),
        "the reassignments to complete",
    )
    for p in proposed["partitions"]:
        reg = registration(cluster, (topic, p["partition"]))
        assert list(reg.replicas) == p["replicas"] and not reg.is_reassigning


def test_a_stuck_reassignment_is_listed_and_cancelled(cluster, tmp_path):
    topic = unique("stuck")
    _create(cluster, topic, [[1, 2]])
    cluster.stop_node(4)
    try:
        plan = _plan(tmp_path, topic, {0: [2, 4]})
        # The tool, as Kafka's, moves only to live brokers (DescribeCluster's)...
        refused = _tool(cluster, "--execute", "--reassignment-json-file", plan)
        assert (refused.returncode, refused.stdout) == (1, "Error: Unknown broker id 4\n")
        # ... the API takes a registered one, fenced or not: the move waits for it.
        assert _reassign(cluster, {(topic, 0): [2, 4]}) == {(topic, 0): (0, None)}
        listed = _tool(cluster, "--list")
        assert listed.stdout == (
            f"Current partition reassignments:\n{topic}-0: replicas: 2,4,1. adding: 4. "
            "removing: 1.\n"
        )
        verify = _tool(cluster, "--verify", "--reassignment-json-file", plan)
        assert verify.stdout == (
            "Status of partition reassignment:\n"
            f"Reassignment of partition {topic}-0 is still in progress.\n\n"
        )
        again = _tool(cluster, "--execute", "--reassignment-json-file", plan)
        assert again.returncode == 1
        assert again.stdout.startswith("Cannot execute because there is an existing partition")

        cancelled = _tool(cluster, "--cancel", "--reassignment-json-file", plan)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert cancelled.stdout == (
            f"Successfully cancelled partition reassignment for: {topic}-0\n"
            "None of the specified partition moves are active."
            "Clearing broker-level throttles on brokers 1,2,3,4\n"
            f"Clearing topic-level throttles on topic {topic}\n"
        )
        reg = registration(cluster, (topic, 0))
        # Kafka's revert: the original replicas in the reassignment's order.
        assert (list(reg.replicas), reg.is_reassigning) == ([2, 1], False)
        assert _tool(cluster, "--list").stdout == "No partition reassignments found.\n"
        verify = _tool(
            cluster, "--verify", "--reassignment-json-file", plan, "--preserve-throttles"
        )
        assert verify.stdout == (
            "Status of partition reassignment:\n"
            f"There is no active reassignment of partition {topic}-0, but replica set is 2,1 "
            "rather than 2,4.\n\n"
        )
        none = _tool(cluster, "--cancel", "--reassignment-json-file", plan, "--preserve-throttles")
        assert none.stdout == (
            "None of the specified partition reassignments are active.\n"
            "None of the specified partition moves are active.\n"
        )
    finally:
        cluster.start_node(4)
    assert (topic, 0) not in cluster.node(4).replica_manager.partitions


@pytest.mark.parametrize(
    ("argv", "stderr"),
    [
        (["--list", "--verify"], "Command must include exactly one action: --generate, "
         "--execute, --verify, --cancel, --list"),
        (["--execute"], 'Missing required argument "[reassignment-json-file]"'),
        (["--list", "--broker-list", "1"], 'Option "[broker-list]" can\'t be used with action '
         '"[list]"'),
        (["--verify", "--reassignment-json-file", "x", "--timeout", "5"],
         'Option "[timeout]" can\'t be used with action "[verify]"'),
        (["--execute", "--reassignment-json-file", "x", "--throttle", "1000"],
         "--throttle is not supported: kcore does not throttle replication"),
    ],
)  # fmt: skip
def test_the_tool_refuses_bad_option_combinations(cluster, argv, stderr):
    out = _tool(cluster, *argv)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr.startswith(stderr), out.stderr


def test_the_tool_refuses_what_it_cannot_do_with_kafkas_lines(cluster, tmp_path):
    topic = unique("refuse")
    _create(cluster, topic, [[1, 2]])
    cases = [
        (_plan(tmp_path, topic, {0: [2, 9]}), "Error: Unknown broker id 9\n"),
        (
            _plan(tmp_path, "ghost-topic", {0: [2]}),
            "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic "
            "ghost-topic not found.\n",
        ),
        (
            _plan(tmp_path, topic, {5: [2]}),
            "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to "
            f"find partition: {topic}-5\n",
        ),
        (
            _plan(tmp_path, topic, {0: [2, 3]}, log_dirs=["/data", "any"]),
            f"Error: Partition {topic}-0 names a log directory (/data, any): kcore keeps one log "
            "directory per broker and does not move replicas between log directories, so every "
            'entry of "log_dirs" must be "any"\n',
        ),
    ]
    for plan, stdout in cases:
        out = _tool(cluster, "--execute", "--reassignment-json-file", plan)
        assert (out.returncode, out.stdout) == (1, stdout)
    assert list(registration(cluster, (topic, 0)).replicas) == [1, 2]
    controller = kcore("reassign-partitions", "--bootstrap-controller", "x:1", "--list")
    assert controller.returncode == 1
    assert controller.stderr.startswith("--bootstrap-controller is not supported")
