"""Topic name rules, as Kafka's ``org.apache.kafka.common.internals.Topic``.

A topic name is 1 to 249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. Because
metric names turn ``.`` into ``_``, two topics whose names differ only by ``.`` versus ``_``
collide (``a.b`` and ``a_b``): the controller refuses the second. The messages are Kafka's
(clients show them verbatim). Pure.
"""

from __future__ import annotations

import re

from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CLUSTER_METADATA_TOPIC",
    "MAX_NAME_LENGTH",
    "has_collision_chars",
    "unify_collision_chars",
    "validate_topic_name",
]

MAX_NAME_LENGTH = 249
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
MIRROR_STATE_TOPIC = "__mirror_state"  # the ClusterMirrorCoordinator's (KIP-1279, M-08)
# Kafka's Topic.INTERNAL_TOPICS: written only by their coordinators, flagged internal in
# Metadata, never counted as a client's topic in authorization.
INTERNAL_TOPICS = frozenset(
    {CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC, MIRROR_STATE_TOPIC}
)
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raise ``KafkaError(INVALID_TOPIC_EXCEPTION)`` with Kafka's message if ``name`` is bad."""
    if not name:
        message = "Topic name is illegal, it can't be empty"
    elif name in (".", ".."):
        message = 'Topic name cannot be "." or ".."'
    elif len(name) > MAX_NAME_LENGTH:
        message = (
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"Topic name: {name}"
        )
    elif not _LEGAL.fullmatch(name):
        message = (
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    else:
        return
    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)


def has_collision_chars(name: str) -> bool:
    return "_" in name or "." in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")
