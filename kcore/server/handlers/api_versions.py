"""ApiVersions: what this listener speaks, derived from the handler registry, and from v3 the
node's supported and finalized features (KIP-584), which Kafka's ``kafka-features.sh describe``
and ``Admin.describeFeatures`` read from here.

Features, as a Kafka 4.x KRaft node answers them
------------------------------------------------
* **SupportedFeatures**: what this node supports, the same table it registers with
  (:data:`kcore.metadata.features.SUPPORTED_FEATURES`, whose docstring says what each range means
  for kcore). Kafka (``BrokerFeatures.defaultSupportedFeatures``) leaves out a feature whose
  maximum is 0: a node that can only run level 0 does not list it. For kcore that is
  ``kraft.version`` 0-0 (static voters, no KIP-853), and likewise Kafka's
  ``transaction.version``, ``group.version``, ``eligible.leader.replicas.version``,
  ``share.version`` and ``streams.version``, which kcore does not have in its table, so it
  supports them at level 0 only. That is what clients must see for ``transaction.version``:
  one that reads no level 2 finalized does not use KIP-890 part 2 (epoch bump per transaction),
  which kcore's coordinator does not implement (:mod:`kcore.coordinator.transaction.handlers`;
  level 1 changes only the ``__transaction_state`` value format, nothing on the wire).
  Listed: ``metadata.version`` 7-30 (every level kcore replays records for, 3.3-IV3 to
  4.3-IV0) and ``mirror.version`` 0-1 (D-30).
  Below v4 a feature whose minimum is 0 is left out as well (``alterFeatureLevel0``,
  KAFKA-17492): clients before 3.9 reject a 0 minimum. So a v3 answer lists only
  ``metadata.version``.
* **FinalizedFeatures**: the metadata image's levels, each with min = max = the level (Kafka's
  ``createFinalizedFeatureKeys``). A feature at level 0 is absent from the image, as in Kafka.
* **FinalizedFeaturesEpoch**: on broker listeners the offset of the metadata image
  (``KRaftMetadataCache.features``: ``image.highestOffsetAndEpoch().offset``); on controller
  listeners the offset of the image in which the features last changed (the controller's
  ``FeaturesPublisher`` only takes an image whose delta touched features). The server's
  ``features(listener_type)`` hook says which (:class:`FinalizedFeatures`).
* Until the image has a ``metadata.version`` (a controller listener answers before the log is
  read) nothing is finalized and the epoch is -1, as Kafka's controller answers without a quorum
  (KAFKA-19964). ``ZkMigrationReady`` stays false: there is no ZooKeeper.

A server object without the hook (the bare test servers) reports no features at all.

Caching
-------
Every client asks ApiVersions first on every connection, so the answer is encoded once per
(listener type, version) and sent as bytes (~45 us of building and encoding saved per request on
the 2-core dev VM). It is re-encoded when what it depends on changes: the registry generation
and, from v3, the finalized features and their epoch. On a broker listener the epoch is the image
offset, so every new image costs one re-encoding per version asked, which is rare next to
connections (an idle cluster writes no metadata records).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from kcore.metadata.features import SUPPORTED_FEATURES
from kcore.metadata.image import METADATA_VERSION
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.registry import BROKER, CONTROLLER, EncodedResponse, HandlerRegistry

__all__ = ["FinalizedFeatures", "UNKNOWN_FINALIZED_FEATURES_EPOCH", "register"]

# KIP-511: client software names and versions must look like this, or the request is invalid.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

UNKNOWN_FINALIZED_FEATURES_EPOCH = -1

# KIP-1022: ApiVersions v4 is the first whose clients accept a supported minimum of 0.
_ZERO_MINIMUM_VERSION = 4


class FinalizedFeatures(NamedTuple):
    """What a server's ``features(listener_type)`` hook returns (Kafka's ``FinalizedFeatures``).

    ``levels`` maps a feature name to its finalized level (levels of 0 are absent); ``epoch`` is
    the metadata offset they are reported at. Compared by value for the cache: return the
    image's own mapping (not a copy) so that the comparison stops at its identity.
    """

    levels: Mapping[str, int]
    epoch: int


def supported_feature_keys(version: int) -> list[m.ApiVersionsResponse.SupportedFeatureKey]:
    """The SupportedFeatures of an ApiVersions answer at ``version`` (see the module docstring:
    no feature whose maximum is 0, and below v4 none whose minimum is 0)."""
    Key = m.ApiVersionsResponse.SupportedFeatureKey
    return [
        Key(name=name, min_version=lo, max_version=hi)
        for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
        if hi > 0 and (lo > 0 or version >= _ZERO_MINIMUM_VERSION)
    ]


def _add_features(response: m.ApiVersionsResponse, version: int, features: FinalizedFeatures):
    response.supported_features = supported_feature_keys(version)
    if METADATA_VERSION not in features.levels:
        return  # nothing finalized yet: no levels, epoch -1
    Key = m.ApiVersionsResponse.FinalizedFeatureKey
    response.finalized_features = [
        Key(name=name, max_version_level=level, min_version_level=level)
        for name, level in sorted(features.levels.items())
        if level > 0
    ]
    response.finalized_features_epoch = features.epoch


# ``kcore.testing.fetch.max.version`` caps what is advertised for Fetch: a kcore broker then
# looks like a source older than KIP-595 (Fetch < 12) to a mirror's fetcher (M-28).
_FETCH = 1


def register(registry: HandlerRegistry) -> None:
    # (listener type, version) -> ((registry generation, features), the encoded answer)
    encoded: dict[tuple[str, int], tuple[tuple[int, FinalizedFeatures | None], EncodedResponse]]
    encoded = {}

    def build(listener_type: str, version: int, features, fetch_cap: int):
        response = m.ApiVersionsResponse(
            api_keys=[
                m.ApiVersionsResponse.ApiVersion(
                    api_key=k,
                    min_version=lo,
                    max_version=min(hi, fetch_cap) if k == _FETCH and fetch_cap >= 0 else hi,
                )
                for k, lo, hi in registry.advertised(listener_type)
            ]
        )
        if features is not None:
            _add_features(response, version, features)
        return response

    @registry.register(18, 0, 4, listeners=(BROKER, CONTROLLER))
    async def api_versions(ctx, body: m.ApiVersionsRequest):
        version = ctx.version
        features = None
        if version >= 3:
            if not (
                _SOFTWARE.fullmatch(body.client_software_name or "")
                and _SOFTWARE.fullmatch(body.client_software_version or "")
            ):
                return m.ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
            hook = getattr(ctx.server, "features", None)
            if hook is not None:
                features = hook(ctx.listener_type)
        stamp = (registry.generation, features)
        key = (ctx.listener_type, version)
        cached = encoded.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        config = getattr(ctx.server, "config", None)
        cap = -1 if config is None else config.value("kcore.testing.fetch.max.version")
        answer = EncodedResponse(18, version, build(ctx.listener_type, version, features, cap))
        encoded[key] = (stamp, answer)
        return answer
