"""The records a freshly formatted cluster starts with (what ``kcore format`` writes as the
bootstrap checkpoint, and what an active controller writes into an empty log).

Kafka's ``BootstrapMetadata``: a ``FeatureLevelRecord`` for ``metadata.version`` first (every
reader needs it before anything else), then the other finalized features: kcore's
``mirror.version=1`` (decision D-30: mirroring is on in new clusters). ``kraft.version`` is the
quorum's business and is not written here. Extra records (SCRAM credentials given to
``format --add-scram``, for example) follow.
"""

from __future__ import annotations

from collections.abc import Iterable

from kcore.metadata.features import (
    LATEST_METADATA_VERSION,
    METADATA_VERSIONS,
    MIRROR_MIN_METADATA_VERSION,
)
from kcore.metadata.image import METADATA_VERSION, MIRROR_VERSION
from kcore.protocol import messages as m
from kcore.protocol.messages import Message

__all__ = ["bootstrap_records"]


def bootstrap_records(
    *,
    metadata_version: int = LATEST_METADATA_VERSION,
    mirror_version: int | None = None,
    extra: Iterable[Message] = (),
) -> list[Message]:
    """The bootstrap records of a new cluster.

    ``mirror_version`` defaults to 1 when ``metadata_version`` allows it (at least 4.0-IV3),
    else 0. Raises ``ValueError`` for an unknown ``metadata_version`` or an explicit
    ``mirror_version=1`` the metadata version does not allow.
    """
    if metadata_version not in METADATA_VERSIONS:
        raise ValueError(
            f"metadata.version {metadata_version} is not supported "
            f"(valid: {min(METADATA_VERSIONS)}-{max(METADATA_VERSIONS)})"
        )
    if mirror_version is None:
        mirror_version = 1 if metadata_version >= MIRROR_MIN_METADATA_VERSION else 0
    if mirror_version not in (0, 1):
        raise ValueError(f"mirror.version must be 0 or 1, got {mirror_version}")
    if mirror_version == 1 and metadata_version < MIRROR_MIN_METADATA_VERSION:
        raise ValueError(
            f"mirror.version=1 needs metadata.version {MIRROR_MIN_METADATA_VERSION} or later"
        )
    records: list[Message] = [
        m.FeatureLevelRecord(name=METADATA_VERSION, feature_level=metadata_version)
    ]
    if mirror_version:
        records.append(m.FeatureLevelRecord(name=MIRROR_VERSION, feature_level=mirror_version))
    records += list(extra)
    return records
