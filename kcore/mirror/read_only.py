"""Read-only mirror topics (decision D-18, spec M-05): the write guard of a mirroring broker.

A topic whose ``mirror.name`` config names a mirror without the ``.stopped`` suffix
(``<m>`` or ``<m>.paused``) is a copy of a source topic: every local write to it is refused
with TOPIC_IS_MIRROR and a message naming the mirror, so that a librdkafka, Java or
kafka-python producer shows its user why. The writes covered are the Produce path (plain,
idempotent and transactional batches), DeleteRecords, and adding the partition to a
transaction (AddPartitionsToTxn; the KIP-890 produce-path verification then never starts).
The mirror's own writes — ``AppendOrigin.MIRROR``: mirrored batches, the ABORT markers and the
MIRROR_PID_RESET record of STOPPING — pass, and so do a follower's copies of its leader
(``REPLICATION``). Reads, configs and describes are untouched.

A partition stays read-only while its STOPPING sequence runs even though the config already
says ``<m>.stopped``: the mirror layer holds it (``ReplicaManager.hold_read_only``, recorded in
``Partition.read_only_hold``) until the sequence's last step, so it becomes writable only once
STOPPED (M-05).

Pure: no I/O. The broker builds one :class:`MirrorWriteGuard` over its topic configs and
passes it to the replica manager at construction.
"""

from __future__ import annotations

from collections.abc import Callable

from kcore.log.producer_state import AppendOrigin
from kcore.mirror.state import MirrorMode, parse_mirror_name
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["MIRROR_WRITERS", "STOPPED_SUFFIX", "MirrorWriteGuard", "active_mirror"]

STOPPED_SUFFIX = ".stopped"
PAUSED_SUFFIX = ".paused"

#: The origins allowed to write to a read-only mirror topic.
MIRROR_WRITERS = frozenset({AppendOrigin.MIRROR, AppendOrigin.REPLICATION})


def active_mirror(mirror_name_config: str | None) -> str | None:
    """The mirror that keeps a topic read-only according to its ``mirror.name`` value: the
    mirror's name for ``<m>`` and ``<m>.paused``, None for no value, ``""`` or ``<m>.stopped``."""
    mirror, mode = parse_mirror_name(mirror_name_config)
    return None if mode in (MirrorMode.NONE, MirrorMode.STOPPED) else mirror


def topic_is_mirror_error(topic: str, mirror: str, what: str = "write to") -> KafkaError:
    """The TOPIC_IS_MIRROR refusal, naming the topic and its mirror."""
    return KafkaError(
        ErrorCode.TOPIC_IS_MIRROR,
        f"Cannot {what} topic {topic}: it is a read-only mirror topic of cluster mirror "
        f"{mirror} (writable once the mirror stops it)",
    )


class MirrorWriteGuard:
    """The replica layer's write guard (``kcore.replica.partition.WriteGuard``) for D-18.

    ``mirror_name_of(topic)`` returns the topic's ``mirror.name`` config (None when unset);
    it is read on every write, so a new value takes effect with the metadata that carries it.
    """

    __slots__ = ("_mirror_name_of",)

    def __init__(self, mirror_name_of: Callable[[str], str | None]) -> None:
        self._mirror_name_of = mirror_name_of

    def mirror_of(self, topic: str, hold: str | None = None) -> str | None:
        """The mirror keeping ``topic`` read-only (a hold first, then the config), or None."""
        return hold or active_mirror(self._mirror_name_of(topic))

    def __call__(self, partition, origin: AppendOrigin) -> None:
        """Refuse (KafkaError TOPIC_IS_MIRROR) a write of ``origin`` to a read-only partition."""
        if origin in MIRROR_WRITERS:
            return
        mirror = self.mirror_of(partition.topic, partition.read_only_hold)
        if mirror is not None:
            raise topic_is_mirror_error(partition.topic, mirror)

    def check_topic(self, topic: str, what: str = "write to") -> None:
        """The same verdict by topic name for a client write (AddPartitionsToTxn, which the
        transaction coordinator answers without hosting the partition)."""
        mirror = self.mirror_of(topic)
        if mirror is not None:
            raise topic_is_mirror_error(topic, mirror, what)
