"""``kcore cluster-mirrors`` (``kafka-cluster-mirrors.sh``): the proposal's flags and output.

The ``--help`` text is compared with the spec's verbatim block (§11.2, M-101), and the action
lines and tables (M-102…M-104) with whole expected lines.
"""

from __future__ import annotations

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
    assert out == _spec_block("$ bin/kafka-cluster-mirrors.sh --help")


def test_cluster_mirrors_shell_wrapper_prints_the_same_help():
    wrapper = ROOT / "tools" / "kafka-cluster-mirrors.sh"
    env = {**os.environ, "KCORE": str(Path(sys.executable).with_name("kcore"))}
    done = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _spec_block("$ bin/kafka-cluster-mirrors.sh --help")


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
