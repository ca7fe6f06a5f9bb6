"""``kcore cluster-mirrors`` (``kafka-cluster-mirrors.sh``): the proposal's flags and output.

The ``--help`` text is compared with the spec's verbatim block (§11.2, M-101), and the action
lines and tables (M-102…M-104) with whole expected lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kcore import cli

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / ".." / "shared" / "spec" / "cluster-mirroring.md"


def _spec_block(after: str) -> str:
    """The fenced block of the spec that follows the line ``after`` (without the fences)."""
    if not SPEC.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{SPEC} is missing: CI must have the specification beside the repository")
        pytest.skip("the specification (../shared) is not beside this clone")
    lines = SPEC.read_text(encoding="utf-8").splitlines()
    start = lines.index(after) + 1
    end = lines.index("```", start)
    return "\n".join(lines[start:end]) + "\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["cluster-mirrors", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cluster_mirrors_help_is_the_proposals_text(capsys):
    status, out, _ = _run(capsys, "--help")
    assert status == 0
    # The proposal's text, then kcore's --wait-for-sync (D-31) in the same layout.
    proposal = _spec_block("$ bin/kafka-cluster-mirrors.sh --help")
    assert out.startswith(proposal)
    assert out[len(proposal) :].startswith("--wait-for-sync [Long: timeout ms]      With --stop")


def test_cluster_mirrors_shell_wrapper_prints_the_same_help():
    wrapper = ROOT / "tools" / "kafka-cluster-mirrors.sh"
    env = {**os.environ, "KCORE": str(Path(sys.executable).with_name("kcore"))}
    done = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(_spec_block("$ bin/kafka-cluster-mirrors.sh --help"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bootstrap-server", "h:1"], "exactly one of --create"),
        (["--bootstrap-server", "h:1", "--list", "--describe"], "exactly one of --create"),
        (["--list"], "--bootstrap-server is required"),
        (["--bootstrap-server", "h:1", "--create", "--mirror", "m"], "--create requires --mirror-config"),
        (["--bootstrap-server", "h:1", "--start", "--topics", "a"], "--start requires --mirror"),
        (["--bootstrap-server", "h:1", "--stop", "--mirror", "m"], "--stop requires --topics"),
        (
            ["--bootstrap-server", "h:1", "--stop", "--mirror", "m", "--topics", "a", "--exclude", "b"],
            "--exclude is only valid with --start",
        ),
        (["--bootstrap-server", "h:1", "--delete", "--mirror", "m", "--json"], "--json is only valid"),
        (
            ["--bootstrap-server", "h:1", "--start", "--mirror", "m", "--topics", "a", "--wait-for-sync"],
            "--wait-for-sync is only valid with --stop",
        ),
        (
            ["--bootstrap-server", "h:1", "--start", "--mirror", "m", "--topics", "orders-(.*"],
            "'orders-(.*' is not a valid regular expression",
        ),
    ],
)  # fmt: skip
def test_cluster_mirrors_usage_errors_exit_2_with_one_line(capsys, argv, message):
    status, out, err = _run(capsys, *argv)
    assert status == 2
    assert out == ""
    assert err.startswith("kcore cluster-mirrors: ") and message in err
    assert err.count("\n") == 1


def test_cluster_mirrors_topic_is_a_prefix_of_topics(capsys):
    # The disaster-recovery walkthrough writes --topic (joptsimple's unique-prefix rule, M-101).
    status, _, err = _run(capsys, "--bootstrap-server", "h:1", "--stop", "--topic", ".*")
    assert status == 2 and "--stop requires --mirror" in err  # --topic was taken as --topics


def test_cluster_mirrors_command_config_refuses_what_the_client_cannot_honour(capsys, tmp_path):
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    status, _, err = _run(
        capsys, "--bootstrap-server", "h:1", "--list", "--command-config", str(config)
    )
    assert status == 1
    assert re.search(r"security.protocol=SASL_SSL is not supported", err)
    config.write_text("client.id=ops\nretries=3\n")
    status, _, err = _run(
        capsys, "--bootstrap-server", "h:1", "--list", "--command-config", str(config)
    )
    assert status == 1 and "does not support retries" in err


# -- against two real clusters ---------------------------------------------------------------


class FixedStates:
    """A MirrorStateReader answering ``state`` for every partition (the coordinator's part)."""

    def __init__(self, state) -> None:
        self.state = state

    async def read_states(self, mirror, partitions):
        return dict.fromkeys(partitions, self.state)

    async def read_full(self, mirror, partitions):
        from kcore.mirror.coordinator import PartitionMirrorState

        return dict.fromkeys(partitions, PartitionMirrorState(self.state))


@pytest.fixture(scope="module")
def clusters():
    from kcore.testing import EmbeddedCluster

    with EmbeddedCluster() as source, EmbeddedCluster() as dest:
        for topic, partitions in (("orders-us", 2), ("orders-eu", 1), ("orders-internal", 1)):
            source.create_topic(topic, partitions)
        yield source, dest


def _on(capsys, dest, *argv: str) -> tuple[int, str, str]:
    return _run(capsys, "--bootstrap-server", dest.bootstrap_servers, *argv)


def test_cluster_mirrors_operator_session_prints_the_proposals_lines(capsys, clusters, tmp_path):
    from kcore.mirror.admission import UnknownMirrorStates
    from kcore.mirror.state import MirrorPartitionState

    source, dest = clusters
    props = tmp_path / "mirror.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap_servers}\n")
    assert _on(
        capsys, dest, "--create", "--mirror", "my-mirror", "--mirror-config", str(props)
    ) == (
        0,
        "Created mirror my-mirror\n",
        "",
    )

    status, out, err = _on(
        capsys, dest, "--start", "--topics", "orders-.*", "--exclude", "orders-internal",
        "--mirror", "my-mirror",
    )  # fmt: skip
    assert (status, err) == (0, "")
    match = re.fullmatch(r"Started 2 mirror topic\(s\) in mirror my-mirror: \[(.*)\]\n", out)
    assert match and sorted(match.group(1).split(", ")) == ["orders-eu", "orders-us"]

    cluster_id = source.broker.cluster_id
    status, out, _ = _on(capsys, dest, "--list")
    assert status == 0
    assert out.splitlines() == [
        "MIRROR                         TOPICS     CLUSTER-ID                 BOOTSTRAP-SERVER",
        f"{'my-mirror':<30} {'2':<10} {cluster_id:<26} {source.bootstrap_servers}",
    ]
    status, out, _ = _on(capsys, dest, "--list", "--json")
    assert json.loads(out) == {
        "mirrors": [
            {
                "mirror": "my-mirror",
                "topics": 2,
                "sourceClusterId": cluster_id,
                "sourceBootstrap": source.bootstrap_servers,
            }
        ]
    }

    status, out, _ = _on(capsys, dest, "--describe", "--mirror", "my-mirror")
    lines = out.splitlines()
    assert lines[0] == (
        "MIRROR                         TOPIC                                    PARTITION  "
        "SOURCE-OFFSET   DESTINATION-OFFSET LAG      STATE"
    )
    # Rows sorted by topic then partition; the exact columns of M-104. After the table, a
    # blank line and kcore's metadata sync status of each mirror (issue #15).
    table = lines[1 : lines.index("")]
    assert lines[lines.index("") + 1].startswith("Metadata sync of mirror my-mirror: ")
    assert [line[:82] for line in table] == [
        f"{'my-mirror':<30} {'orders-eu':<40} {'0':<10}",
        f"{'my-mirror':<30} {'orders-us':<40} {'0':<10}",
        f"{'my-mirror':<30} {'orders-us':<40} {'1':<10}",
    ]
    doc = json.loads(_on(capsys, dest, "--describe", "--json")[1])
    assert [
        (t["topic"], [p["partition"] for p in t["partitions"]]) for t in doc["mirrors"][0]["topics"]
    ] == [
        ("orders-eu", [0]),
        ("orders-us", [0, 1]),
    ]

    # Pause and resume match the mirror's own topics here (a pattern is not sent for them).
    dest.broker.mirror_state_reader = FixedStates(MirrorPartitionState.MIRRORING)
    try:
        assert _on(capsys, dest, "--pause", "--topics", "orders-u.", "--mirror", "my-mirror") == (
            0,
            "Paused mirroring for 1 topic(s) in mirror my-mirror: [orders-us]\n",
            "",
        )
        dest.broker.mirror_state_reader = FixedStates(MirrorPartitionState.PAUSED)
        assert _on(capsys, dest, "--resume", "--topics", "orders-us", "--mirror", "my-mirror") == (
            0,
            "Resumed mirroring for 1 topic(s) in mirror my-mirror: [orders-us]\n",
            "",
        )
        status, _, err = _on(
            capsys, dest, "--pause", "--topics", "nothing-.*", "--mirror", "my-mirror"
        )
        assert status == 1 and "no topic of mirror my-mirror matches nothing-.*" in err

        # The walkthrough's failover: --topic (prefix) '.*'.
        dest.broker.mirror_state_reader = FixedStates(MirrorPartitionState.MIRRORING)
        status, out, err = _on(
            capsys, dest, "--stop", "--topic", ".*", "--mirror", "my-mirror",
            "--wait-for-sync", "20000",
        )  # fmt: skip
        assert (status, err) == (0, "")
        match = re.fullmatch(
            r"Stopped mirroring for 2 topic\(s\) in mirror my-mirror: \[(.*)\]\n", out
        )
        assert match and sorted(match.group(1).split(", ")) == ["orders-eu", "orders-us"]

        dest.broker.mirror_state_reader = FixedStates(MirrorPartitionState.STOPPED)
        assert _on(capsys, dest, "--delete", "--mirror", "my-mirror") == (
            0,
            "Deleted mirror my-mirror\n",
            "",
        )
    finally:
        dest.broker.mirror_state_reader = UnknownMirrorStates()
    assert _on(capsys, dest, "--list")[1].splitlines()[1:] == []


def test_cluster_mirrors_refusals_print_kafkas_error_name_and_exit_1(capsys, clusters, tmp_path):
    source, dest = clusters
    props = tmp_path / "mirror.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap_servers}\n")
    status, out, err = _on(
        capsys, dest, "--create", "--mirror", "bad.stopped", "--mirror-config", str(props)
    )
    assert (status, out) == (1, "")
    assert err.startswith("Error: INVALID_MIRROR_NAME: ")
    status, out, err = _on(capsys, dest, "--delete", "--mirror", "no-such-mirror")
    assert (status, out) == (1, "") and err.startswith("Error: MIRROR_NOT_FOUND: ")
    assert _on(capsys, dest, "--create", "--mirror", "m2", "--mirror-config", str(props))[0] == 0
    try:
        status, out, err = _on(
            capsys, dest, "--start", "--topics", "no-such-topic", "--mirror", "m2"
        )
        assert status == 1
        assert "Error: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION" in err
    finally:
        _on(capsys, dest, "--delete", "--mirror", "m2")
