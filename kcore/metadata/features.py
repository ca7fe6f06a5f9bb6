"""Feature levels: ``metadata.version``, ``kraft.version``, ``mirror.version`` (Kafka's
``FeatureControlManager``, ``MetadataVersion``, and kcore's decision D-30).

What kcore supports
-------------------
* ``metadata.version`` 7 (3.3-IV3, Kafka's minimum for KRaft) to 30 (4.3-IV0); new clusters
  start at :data:`LATEST_METADATA_VERSION`. Upgrades only: kcore does not track which levels
  changed the record formats, so every downgrade is refused as Kafka refuses an unsafe one.
* ``kraft.version`` 0 only: kcore's quorum has static voters (``controller.quorum.voters``).
  Its level lives in the Raft log, not in a ``FeatureLevelRecord``.
* ``mirror.version`` 0-1 (D-30): 1 turns cluster mirroring on, and new clusters start there;
  0 makes the mirroring RPCs answer UNSUPPORTED_VERSION. Level 1 needs ``metadata.version`` at
  least :data:`MIRROR_MIN_METADATA_VERSION` (4.0-IV3: the first production level of the 4.x
  line kcore implements; the spec leaves the minimum open). Downgrading it to 0 needs a
  downgrade upgrade type, like any feature.

UpdateFeatures is all-or-nothing, as in Kafka 3.9+: the first invalid update fails the whole
request (INVALID_UPDATE_VERSION) and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import KRAFT_VERSION, METADATA_VERSION, MIRROR_VERSION
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.protocol.messages import Message

__all__ = [
    "LATEST_METADATA_VERSION",
    "METADATA_VERSIONS",
    "MINIMUM_METADATA_VERSION",
    "MIRROR_MIN_METADATA_VERSION",
    "SUPPORTED_FEATURES",
    "UpgradeType",
    "registration_feature_error",
    "update_features",
]

# Kafka's MetadataVersion feature levels and release names, 3.3-IV3 (7) to 4.3-IV0 (30).
METADATA_VERSIONS: dict[int, str] = {
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
    13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
    19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2",
    25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1", 30: "4.3-IV0",
}  # fmt: skip
MINIMUM_METADATA_VERSION = 7
LATEST_METADATA_VERSION = 30
MIRROR_MIN_METADATA_VERSION = 25

#: What this node supports, for its BrokerRegistration / ApiVersions (name -> (min, max)).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    KRAFT_VERSION: (0, 0),
    MIRROR_VERSION: (0, 1),
}


class UpgradeType:
    """``UpdateFeatures`` v1+ ``UpgradeType``."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def metadata_version_name(level: int) -> str:
    return METADATA_VERSIONS.get(level, f"level {level}")


def registration_feature_error(
    finalized: Mapping[str, int], supported: Mapping[str, tuple[int, int]]
) -> str | None:
    """Why a broker supporting ``supported`` may not register, or None (Kafka's rules: a
    broker that does not list ``metadata.version`` supports only the minimum level; one that
    does not list another feature supports only level 0)."""
    for name, level in sorted(finalized.items()):
        if name in supported:
            lo, hi = supported[name]
        elif name == METADATA_VERSION:
            lo = hi = MINIMUM_METADATA_VERSION
        else:
            lo = hi = 0
        if not lo <= level <= hi:
            return (
                f"Unable to register because the broker does not support finalized version "
                f"{level} of {name}. The broker wants a version between {lo} and {hi}, inclusive."
            )
    return None


def invalid_value(name: str, level: int, reason: str) -> tuple[ErrorCode, str]:
    return (
        ErrorCode.INVALID_UPDATE_VERSION,
        f"Invalid update version {level} for feature {name}. {reason}",
    )


def _check_update(
    ctx: ControllerContext, name: str, level: int, upgrade_type: int, proposed: dict[str, int]
) -> tuple[ErrorCode, str] | None:
    if upgrade_type not in (
        UpgradeType.UPGRADE,
        UpgradeType.SAFE_DOWNGRADE,
        UpgradeType.UNSAFE_DOWNGRADE,
    ):
        return invalid_value(name, level, "The controller does not support the given upgrade type.")
    current = ctx.image.features.level(name)
    if level < 0:
        return invalid_value(name, level, "A feature version cannot be less than 0.")
    if name not in SUPPORTED_FEATURES:
        return invalid_value(name, level, "The controller does not support the given feature.")
    lo, hi = SUPPORTED_FEATURES[name]
    if name != METADATA_VERSION and level == 0:
        lo = 0  # level 0 removes a feature
    if not lo <= level <= hi:
        return invalid_value(
            name, level, f"Local controller {ctx.config.node_id} only supports versions {lo}-{hi}"
        )
    for broker in ctx.image.cluster.brokers.values():
        blo, bhi = broker.supported_features.get(
            name, (MINIMUM_METADATA_VERSION,) * 2 if name == METADATA_VERSION else (0, 0)
        )
        if level != 0 and not blo <= level <= bhi:
            return invalid_value(
                name, level, f"Broker {broker.id} only supports versions {blo}-{bhi}"
            )
    if level < current and upgrade_type == UpgradeType.UPGRADE:
        return invalid_value(
            name,
            level,
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade.",
        )
    if level > current and upgrade_type != UpgradeType.UPGRADE:
        return invalid_value(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION and level < current:
        return (
            ErrorCode.INVALID_UPDATE_VERSION,
            f"Invalid metadata.version {level}. Refusing to perform the requested downgrade "
            "because it might delete metadata information.",
        )
    mv = proposed.get(METADATA_VERSION, ctx.image.features.metadata_version)
    mirror = proposed.get(MIRROR_VERSION, ctx.image.features.mirror_version)
    if mirror >= 1 and mv < MIRROR_MIN_METADATA_VERSION:
        return invalid_value(
            name,
            level,
            f"mirror.version 1 requires metadata.version at least {MIRROR_MIN_METADATA_VERSION} "
            f"({metadata_version_name(MIRROR_MIN_METADATA_VERSION)}).",
        )
    return None


def update_features(
    ctx: ControllerContext, request: m.UpdateFeaturesRequest, api_version: int
) -> ControllerResult[m.UpdateFeaturesResponse]:
    """UpdateFeatures v0-2 (v0's ``AllowDowngrade`` means SAFE_DOWNGRADE)."""
    records: list[Message] = []
    proposed: dict[str, int] = {}
    error: tuple[ErrorCode, str] | None = None
    seen: set[str] = set()
    for u in request.feature_updates:
        if u.feature in seen:
            error = (ErrorCode.INVALID_REQUEST, f"Duplicate feature update for {u.feature}.")
            break
        seen.add(u.feature)
        if api_version == 0:
            upgrade_type = UpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else UpgradeType.UPGRADE
        else:
            upgrade_type = u.upgrade_type
        proposed[u.feature] = u.max_version_level
        error = _check_update(ctx, u.feature, u.max_version_level, upgrade_type, proposed)
        if error is not None:
            break
        if u.max_version_level != ctx.image.features.level(u.feature):
            records.append(m.FeatureLevelRecord(name=u.feature, feature_level=u.max_version_level))
    response = m.UpdateFeaturesResponse(error_message=None)
    if error is not None:
        response.error_code = int(error[0])
        response.error_message = (
            "The update failed for all features since the following feature had an error: "
            + error[1]
        )
        return ControllerResult.of([], response)
    if api_version <= 1:
        response.results = [
            m.UpdateFeaturesResponse.UpdatableFeatureResult(feature=u.feature, error_message=None)
            for u in request.feature_updates
        ]
    return ControllerResult.of([] if request.validate_only else records, response)
