"""A DescribeClusterMirrors answer read for people and scripts: one JSON document per mirror,
the partitions not yet in sync, the mirror's topics an entry names.

One piece of code for ``kcore cluster-mirrors --describe --json`` / ``--stop --wait-for-sync``
(which rename the keys to the camelCase they have always printed) and the HTTP admin API's
``/v1/mirrors`` (which serves them as they are: snake_case, Kafka's vocabulary). Numbers are
the Kafka API's, -1 where not known (on a broker that does not lead the partition, or before
its first fetch). Pure: it reads response messages and returns plain data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# States in which a partition copies from the source: the ones whose lag a planned failover
# (D-31) waits on. The others copy nothing (paused, stopped, failed) and cannot catch up.
COPYING_STATES = frozenset({"LOG_TRUNCATION", "MIRRORING", "EPOCH_FENCING"})


def partition_document(p: Any, note: str | None = None) -> dict[str, Any]:
    """One ``PartitionDetail``: its state, the source's high watermark and last stable offset,
    the destination's log end offset, lag, last mirror epoch, age of the last fetch answer,
    recovery attempts, why it FAILED (None otherwise), and ``note``: why its numbers are not
    known where the one who merged the brokers' answers knows (its leader did not answer)."""
    return {
        "partition": p.partition_index,
        "state": p.state,
        "source_high_watermark": p.source_offset,
        "source_last_stable_offset": p.source_last_stable_offset,
        "destination_log_end_offset": p.destination_offset,
        "lag": p.lag,
        "last_mirror_epoch": p.last_mirror_epoch,
        "last_fetch_age_ms": p.last_fetch_age_ms,
        "retry_count": p.retry_count,
        "failed_reason": p.failed_reason,
        "note": note,
    }


def sync_document(x: Any) -> dict[str, Any]:
    """The metadata sync status of one ``DescribedMirror`` (issue #15)."""
    return {
        "last_sync_time_ms": x.last_sync_time_ms,
        "last_sync_age_ms": x.last_sync_age_ms,
        "last_change_time_ms": x.last_change_time_ms,
        "changes": [
            {"kind": c.kind, "resource": c.resource, "detail": c.detail} for c in x.sync_changes
        ],
        "errors": list(x.sync_errors),
        "notes": list(x.sync_notes),
    }


def mirror_document(
    x: Any, notes: Mapping[tuple[str, str, int], str] | None = None
) -> dict[str, Any]:
    """One ``DescribedMirror`` without an error: topics and partitions sorted, and its sync;
    ``notes``: ``(mirror, topic, partition)`` -> the partition's note."""
    notes = notes or {}
    return {
        "mirror": x.mirror_name,
        "topics": [
            {
                "topic": t.topic_name,
                "partitions": [
                    partition_document(
                        p, notes.get((x.mirror_name, t.topic_name, p.partition_index))
                    )
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)
                ],
            }
            for t in sorted(x.topics, key=lambda t: t.topic_name)
        ],
        "metadata_sync": sync_document(x),
    }


def camel_keys(value: Any) -> Any:
    """``value`` with every dict key in camelCase, the CLI's ``--json`` spelling. The CLI has
    always printed the Kafka field names for the two offsets (``sourceOffset``,
    ``destinationOffset``); they keep them."""
    if isinstance(value, dict):
        return {_CLI_NAMES.get(k) or _camel(k): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


_CLI_NAMES = {
    "source_high_watermark": "sourceOffset",
    "destination_log_end_offset": "destinationOffset",
}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.capitalize() for w in rest)


def not_in_sync(response: Any, mirror: str, topics: Iterable[str]) -> list[str]:
    """The partitions of ``topics`` in ``mirror`` that still copy and have not caught up (lag
    not 0, or not known), as ``topic-partition (lag N)``: what D-31's wait waits for."""
    wanted = set(topics)
    return [
        f"{t.topic_name}-{p.partition_index} (lag {p.lag})"
        for d in response.mirrors
        if d.mirror_name == mirror
        for t in d.topics
        if t.topic_name in wanted
        for p in t.partitions
        if p.state in COPYING_STATES and p.lag != 0
    ]


def matching_topics(described: Any, patterns: Iterable[str]) -> list[str]:
    """The topics of one ``DescribedMirror`` that a pattern matches as a whole (D-20), in the
    mirror's order. Raises ``re.error`` for a malformed pattern."""
    compiled = [re.compile(p) for p in patterns]
    return [
        t.topic_name for t in described.topics if any(c.fullmatch(t.topic_name) for c in compiled)
    ]
