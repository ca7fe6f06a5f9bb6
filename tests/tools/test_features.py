"""``kcore features`` (``kafka-features.sh``) as a process against a running kcore: Kafka's
``describe`` lines, and ``mirror.version`` disabled and upgraded again gating the cluster-mirror
APIs (spec §11.7, D-30)."""

from __future__ import annotations

import re

import pytest

from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, usage_error, wrapper

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster() as c:
        yield c


def features(cluster, *argv: str):
    return kcore("features", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def _describe(cluster) -> list[str]:
    done = features(cluster, "describe")
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout.splitlines()


def _levels(cluster) -> dict[str, str]:
    return {
        line.split("\t")[0].removeprefix("Feature: "): line.split("\t")[3].split(": ")[1]
        for line in _describe(cluster)
    }


def _mirrors_list(cluster):
    return kcore("cluster-mirrors", "--bootstrap-server", cluster.bootstrap_servers, "--list")


def test_features_describe_prints_kafkas_lines(cluster):
    lines = _describe(cluster)
    epoch = re.search(r"\tEpoch: (\d+)$", lines[0]).group(1)
    assert lines == [
        "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0"
        f"\tFinalizedVersionLevel: 4.3-IV0\tEpoch: {epoch}",
        "Feature: mirror.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1"
        f"\tFinalizedVersionLevel: 1\tEpoch: {epoch}",
    ]


def test_features_disable_mirror_version_gates_the_mirror_apis_until_upgraded(cluster):
    assert _mirrors_list(cluster).returncode == 0
    dry = features(cluster, "disable", "--feature", "mirror.version", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "mirror.version can be disabled.\n")
    assert _levels(cluster)["mirror.version"] == "1"  # a dry run changes nothing

    done = features(cluster, "disable", "--feature", "mirror.version")
    assert (done.returncode, done.stdout) == (0, "mirror.version was disabled.\n")
    try:
        assert _levels(cluster)["mirror.version"] == "0"
        refused = _mirrors_list(cluster)
        assert "UNSUPPORTED_VERSION" in one_line(refused)
    finally:
        up = features(cluster, "upgrade", "--feature", "mirror.version=1")
    assert (up.returncode, up.stdout) == (0, "mirror.version was upgraded to 1.\n")
    assert _levels(cluster)["mirror.version"] == "1"
    assert _mirrors_list(cluster).returncode == 0


def test_features_refused_update_prints_kafkas_lines_and_changes_nothing(cluster):
    done = features(cluster, "upgrade", "--feature", "mirror.version=2", "--feature",
                    "metadata.version=30")  # fmt: skip
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    # All or nothing: the valid update fails with the invalid one, in Kafka's sorted order.
    assert lines[0].startswith(
        "Could not upgrade metadata.version to 30. The update failed for all features since the "
        "following feature had an error: Invalid update version 2 for feature mirror.version."
    )
    assert lines[1].startswith("Could not upgrade mirror.version to 2. ")
    assert done.stderr == "2 out of 2 operation(s) failed.\n"
    dry = features(cluster, "downgrade", "--metadata", "4.0-IV3", "--dry-run")
    assert dry.returncode == 1
    deprecated, refused = dry.stdout.splitlines()
    assert deprecated == " `metadata` flag is deprecated and may be removed in a future release."
    assert refused.startswith("Can not downgrade metadata.version to 25. ")
    assert _levels(cluster) == {"metadata.version": "4.3-IV0", "mirror.version": "1"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["upgrade", "--feature", "mirror.version"], "Can't parse feature=level string mirror.version: equals sign not found."),
        (["upgrade", "--feature", "mirror.version=x"], "unable to parse x as a short."),
        (["upgrade", "--feature", "a=1", "--feature", "a=1"], "Feature a was specified more than once."),
        (["upgrade"], "You must specify at least one feature to upgrade"),
        (["disable"], "You must specify at least one feature to disable"),
        (["downgrade", "--metadata", "9.9-IV9"], "Unknown metadata.version 9.9-IV9."),
    ],
)  # fmt: skip
def test_features_bad_updates_exit_1_with_one_line(cluster, argv, message):
    done = features(cluster, *argv)
    assert one_line(done) == message or message in one_line(done)
    assert done.returncode == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "a subcommand is required"),
        (["version-mapping"], "invalid choice: 'version-mapping'"),
        (["describe", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_features_usage_errors_exit_2_with_one_line(capsys, argv, message):
    status, _, err = usage_error(capsys, "features", "--bootstrap-server", "127.0.0.1:1", *argv)
    assert status == 2 and message in err and err.count("\n") == 1


def test_features_help_wrapper_and_the_controller_listener(cluster):
    done = wrapper("kafka-features.sh", "--help")
    assert done.returncode == 0
    assert "This tool manages feature flags in Kafka." in done.stdout
    assert "{describe,upgrade,downgrade,disable}" in done.stdout
    via_controller = kcore("features", "--bootstrap-controller",
                           f"127.0.0.1:{cluster.controller_port}", "describe")  # fmt: skip
    assert via_controller.returncode == 0, via_controller.stderr
    assert via_controller.stdout.startswith("Feature: metadata.version\tSupportedMinVersion: ")
    down = kcore("features", "--bootstrap-server", "127.0.0.1:1", "describe")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
