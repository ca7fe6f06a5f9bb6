"""``kcore features``: describe, upgrade, downgrade and disable feature flags
(``kafka-features.sh``, Kafka's ``FeatureCommand``; ``mirror.version``: spec §11.7, M-110, D-30).

Kafka's subcommands and output lines::

    kcore features --bootstrap-server :9092 describe
    Feature: kraft.version	SupportedMinVersion: 0	SupportedMaxVersion: 0	FinalizedVersionLevel: 0	Epoch: 27
    Feature: metadata.version	SupportedMinVersion: 3.3-IV3	SupportedMaxVersion: 4.3-IV0	FinalizedVersionLevel: 4.3-IV0	Epoch: 27
    Feature: mirror.version	SupportedMinVersion: 0	SupportedMaxVersion: 1	FinalizedVersionLevel: 1	Epoch: 27
    kcore features --bootstrap-server :9092 disable --feature mirror.version
    mirror.version was disabled.
    kcore features --bootstrap-server :9092 upgrade --feature mirror.version=1 --dry-run
    mirror.version can be upgraded to 1.

``describe`` lists the features the broker answering supports (its ApiVersions), each with the
cluster's finalized level (0: disabled) and the epoch of the metadata the broker has.
``upgrade`` / ``downgrade`` take ``--feature name=level`` (repeatable) or the deprecated
``--metadata`` release name (``4.0-IV3``: ``metadata.version``); ``disable`` sets a feature to
level 0. ``--unsafe`` asks for an unsafe downgrade; ``--dry-run`` only validates. The cluster
applies all the updates of one command or none. ``mirror.version=0`` turns cluster mirroring's
APIs off (they answer UNSUPPORTED_VERSION) until it is upgraded to 1 again.

Not here: ``--release-version`` and the ``version-mapping`` / ``feature-dependencies``
subcommands (they need Kafka's per-release default levels of every feature, which kcore does
not keep). Exit status 0; 1 when an update failed (``N out of M operation(s) failed.``) or the
cluster refused; 2 for a usage error.
"""

from __future__ import annotations

import argparse

from kcore.client.admin import api_versions, update_features
from kcore.client.cluster import KafkaClient
from kcore.commands._common import Refused, error_text, run_tool
from kcore.commands._joptsimple import one_line_errors
from kcore.metadata.features import METADATA_VERSIONS, UpgradeType
from kcore.metadata.image import METADATA_VERSION
from kcore.protocol.errors import error_info

SUBCOMMANDS = ("describe", "upgrade", "downgrade", "disable")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Kafka's arguments (argparse4j there, argparse here: the same options and help)."""
    parser.description = "This tool manages feature flags in Kafka."
    bootstrap = parser.add_mutually_exclusive_group()
    bootstrap.add_argument(
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
        "to the Kafka cluster.",
    )
    bootstrap.add_argument(
        "--bootstrap-controller",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
        "to the KRaft quorum.",
    )
    parser.add_argument(
        "--command-config", help="Property file containing configs to be passed to Admin Client."
    )
    sub = parser.add_subparsers(dest="feature_command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    sub.add_parser("describe", help="Describes the current active feature flags.")
    for name, verb in (("upgrade", "upgrade"), ("downgrade", "downgrade")):
        p = sub.add_parser(name, help=f"{verb.capitalize()} one or more feature flags.")
        p.add_argument(
            "--metadata",
            help=f"DEPRECATED -- The level to which we should {verb} the metadata. For example, "
            "3.3-IV3.",
        )
        p.add_argument(
            "--feature",
            action="append",
            help=f"A feature {verb} we should perform, in feature=level format. For example: "
            "`mirror.version=1`.",
        )
        if name == "downgrade":
            p.add_argument(
                "--unsafe",
                action="store_true",
                help="Perform this downgrade even if it may irreversibly destroy metadata.",
            )
        p.add_argument(
            "--dry-run", action="store_true", help=f"Validate this {verb}, but do not perform it."
        )
    p = sub.add_parser(
        "disable",
        help="Disable one or more feature flags. This is the same as downgrading the version "
        "to zero.",
    )
    p.add_argument("--feature", action="append", help="A feature flag to disable.")
    p.add_argument(
        "--unsafe",
        action="store_true",
        help="Disable this feature flag even if it may irreversibly destroy metadata.",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="Perform a dry-run of this disable operation."
    )
    for p in (parser, *sub.choices.values()):
        one_line_errors(p)


def level_text(feature: str, level: int) -> str:
    """Kafka's ``levelToString``: ``metadata.version`` levels by release name."""
    if feature == METADATA_VERSION:
        return METADATA_VERSIONS.get(level, f"UNKNOWN {level}")
    return str(level)


def parse_name_and_level(text: str) -> tuple[str, int]:
    """``name=level`` (Kafka's ``parseNameAndLevel``). Raises Refused."""
    name, sep, level = text.partition("=")
    if not sep:
        raise Refused(f"Can't parse feature=level string {text}: equals sign not found.")
    try:
        value = int(level.strip())
        if not -(2**15) <= value < 2**15:
            raise ValueError
    except ValueError:
        raise Refused(
            f"Can't parse feature=level string {text}: unable to parse {level.strip()} as a short."
        ) from None
    return name.strip(), value


def _usage(args: argparse.Namespace) -> str | None:
    if args.feature_command is None:
        return "a subcommand is required: " + ", ".join(SUBCOMMANDS)
    if not args.bootstrap_server:
        return "one of --bootstrap-server or --bootstrap-controller is required"
    return None


def main(args: argparse.Namespace) -> int:
    if args.bootstrap_controller:
        args.bootstrap_server = args.bootstrap_controller

    def prepare(args: argparse.Namespace) -> None:
        if args.feature_command in ("upgrade", "downgrade", "disable"):
            args.updates = _updates(args)

    return run_tool("features", args, _usage, _run, prepare=prepare, refused_prefix="")


def _updates(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """``{feature: (level, upgrade type)}`` of the command line (Kafka's checks and messages)."""
    command = args.feature_command
    if command == "upgrade":
        upgrade_type = UpgradeType.UPGRADE
    else:
        upgrade_type = UpgradeType.UNSAFE_DOWNGRADE if args.unsafe else UpgradeType.SAFE_DOWNGRADE
    updates: dict[str, tuple[int, int]] = {}
    if command == "disable":
        for name in args.feature or ():
            if name in updates:
                raise Refused(f"Feature {name} was specified more than once.")
            updates[name] = (0, upgrade_type)
    else:
        if args.metadata is not None:
            print(" `metadata` flag is deprecated and may be removed in a future release.")
            levels = {v: k for k, v in METADATA_VERSIONS.items()}
            if args.metadata not in levels:
                raise Refused(
                    f"Unknown metadata.version {args.metadata}. Supported metadata.version are "
                    + ", ".join(METADATA_VERSIONS.values())
                )
            updates[METADATA_VERSION] = (levels[args.metadata], upgrade_type)
        for text in args.feature or ():
            name, level = parse_name_and_level(text)
            if name in updates:
                raise Refused(f"Feature {name} was specified more than once.")
            updates[name] = (level, upgrade_type)
    if not updates:
        raise Refused(f"You must specify at least one feature to {command}")
    return updates


async def _run(client: KafkaClient, args: argparse.Namespace) -> int:
    if args.feature_command == "describe":
        return await _describe(client)
    return await _update(client, args)


async def _describe(client: KafkaClient) -> int:
    response = await api_versions(client)
    if response.error_code:
        raise Refused(error_text(response.error_code))
    finalized = {f.name: f.max_version_level for f in response.finalized_features or ()}
    epoch = response.finalized_features_epoch
    for f in sorted(response.supported_features or (), key=lambda f: f.name):
        print(
            f"Feature: {f.name}\tSupportedMinVersion: {level_text(f.name, f.min_version)}"
            f"\tSupportedMaxVersion: {level_text(f.name, f.max_version)}"
            f"\tFinalizedVersionLevel: {level_text(f.name, finalized.get(f.name, 0))}"
            f"\tEpoch: {epoch if epoch is not None and epoch >= 0 else '-'}"
        )
    return 0


async def _update(client: KafkaClient, args: argparse.Namespace) -> int:
    command, dry_run = args.feature_command, args.dry_run
    response = await update_features(client, args.updates, validate_only=dry_run)
    # Every feature fails with the top-level error (v2 answers only there), else with its own.
    errors = {name: (response.error_code, response.error_message) for name in args.updates}
    if not response.error_code:
        own = {r.feature: (r.error_code, r.error_message) for r in response.results or ()}
        errors = {name: own.get(name, (0, None)) for name in args.updates}
    failures = 0
    for name in sorted(args.updates):
        level = args.updates[name][0]
        code, message = errors[name]
        action = f"disable {name}" if command == "disable" else f"{command} {name} to {level}"
        if code:
            failures += 1
            print(
                f"{'Can not' if dry_run else 'Could not'} {action}. "
                f"{message or error_info(code)[2]}"
            )
        else:
            done = "disabled." if command == "disable" else f"{command}d to {level}."
            print(f"{name}{' can be ' if dry_run else ' was '}{done}")
    if failures:
        raise Refused(f"{failures} out of {len(args.updates)} operation(s) failed.")
    return 0
