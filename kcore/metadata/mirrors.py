"""The cluster mirrors in the metadata image: each mirror's configs and its topics.

What this is
------------
An image part (``image.extensions["mirrors"]``, read it with :func:`mirrors_image`) that folds
two kinds of ``ConfigRecord`` into one picture of every mirror (spec §3.1-3.3):

* configs on the CLUSTER_MIRROR (64) resource named after a mirror (M-02): a mirror **exists**
  while its resource has configs (``bootstrap.servers`` is required, so it always has one);
  DeleteClusterMirror removes them all;
* the ``mirror.name`` topic config (M-04): ``<m>``, ``<m>.paused`` or ``<m>.stopped`` make the
  topic a member of mirror ``m`` in the mode :class:`MirrorMode` says. A ``RemoveTopicRecord``
  ends the membership with the topic. Topics keep ``<m>.stopped`` after their mirror is deleted
  (D-29), so :attr:`MirrorsImage.members` also knows mirrors that no longer exist.

The part is built by :class:`MirrorsDelta` beside the rest of a
:class:`~kcore.metadata.delta.MetadataDelta` and carries no records of its own into snapshots:
the configs part already writes every ``ConfigRecord``. Publishers learn what changed from the
delta (``delta.extension_deltas["mirrors"]``: :attr:`MirrorsDelta.changed_mirrors`,
:attr:`MirrorsDelta.changed_topics`), so the mirror manager can rebuild a mirror's connections
when its configs change (M-68) and start or stop partitions when a topic's mode changes.

Who uses it: the controller's mirror operations (:mod:`kcore.metadata.mirror_control`),
ListClusterMirrors and DescribeClusterMirrors (answered from the image, M-66), the mirror
manager. Pure.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcore.log.config import MIRROR_NAME_SUFFIXES
from kcore.metadata import mirror_configs as mc
from kcore.metadata.delta import MetadataDelta, register_image_extension
from kcore.metadata.image import EMPTY_MAPPING, ConfigResourceType, MetadataImage, frozen_map
from kcore.metadata.records import api_key_of
from kcore.protocol.messages import Message

__all__ = [
    "MIRROR_NAME_CONFIG",
    "RECOVERY_ID_CONFIG",
    "ClusterMirrorImage",
    "MirrorMode",
    "MirrorsDelta",
    "MirrorsImage",
    "mirror_membership",
    "mirror_name_value",
    "mirrors_image",
    "parse_mirror_name",
]

EXTENSION_NAME = "mirrors"
MIRROR_NAME_CONFIG = "mirror.name"
# Raised by the controller on each Start or Stop of an existing mirror topic (D-13 recovery).
RECOVERY_ID_CONFIG = "mirror.recovery.id"
_TOPIC_RECORD, _CONFIG_RECORD, _REMOVE_TOPIC_RECORD = 2, 4, 9


class MirrorMode(enum.Enum):
    """What a topic's ``mirror.name`` asks of the topic and its partitions (spec M-04); the
    one vocabulary of the controller, the image, the state machine and the write guard."""

    NONE = "not mirrored"  # absent or empty: a normal topic
    ACTIVE = "mirroring"  # "<m>": mirroring requested
    PAUSED = "paused"  # "<m>.paused": no fetching, still read-only
    STOPPED = "stopped"  # "<m>.stopped": failed over (writable once its partitions are STOPPED)

    @property
    def suffix(self) -> str:
        """What this mode appends to the mirror's name in ``mirror.name``."""
        return _SUFFIXES[self]


_SUFFIXES = {
    MirrorMode.NONE: "",
    MirrorMode.ACTIVE: "",
    MirrorMode.PAUSED: ".paused",
    MirrorMode.STOPPED: ".stopped",
}
assert (MirrorMode.PAUSED.suffix, MirrorMode.STOPPED.suffix) == MIRROR_NAME_SUFFIXES


def parse_mirror_name(value: str | None) -> tuple[str | None, MirrorMode]:
    """Split a ``mirror.name`` value into the mirror's name and the mode it asks for.

    ``None`` or ``""`` is ``(None, MirrorMode.NONE)``; ``"m.paused"`` is ``("m", PAUSED)``.
    The value was validated when it was set (``kcore.log.config.MirrorNameValue``).
    """
    if not value:
        return None, MirrorMode.NONE
    for mode in (MirrorMode.PAUSED, MirrorMode.STOPPED):
        if value.endswith(mode.suffix):
            return value[: -len(mode.suffix)], mode
    return value, MirrorMode.ACTIVE


def mirror_membership(value: str | None) -> tuple[str, MirrorMode] | None:
    """The mirror a ``mirror.name`` value makes its topic a member of, and how; None for an
    absent or empty value."""
    mirror, mode = parse_mirror_name(value)
    return None if mirror is None else (mirror, mode)


def mirror_name_value(mirror: str, mode: MirrorMode) -> str:
    """The ``mirror.name`` value for ``mirror`` in ``mode``."""
    return mirror + mode.suffix


@dataclass(frozen=True, slots=True)
class ClusterMirrorImage:
    """One existing mirror: its configs and its member topics (by name, with their mode)."""

    name: str
    configs: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAPPING)
    topics: Mapping[str, MirrorMode] = field(default_factory=lambda: EMPTY_MAPPING)

    @property
    def bootstrap_servers(self) -> str:
        return self.configs.get(mc.BOOTSTRAP_SERVERS, "")

    @property
    def source_cluster_id(self) -> str | None:
        """The source cluster id recorded on first contact (D-24), None until then."""
        return self.configs.get(mc.SOURCE_CLUSTER_ID) or None

    @property
    def include_patterns(self) -> list[str]:
        return mc.split_patterns(self.configs.get(mc.INCLUDE))

    @property
    def exclude_patterns(self) -> list[str]:
        return mc.split_patterns(self.configs.get(mc.EXCLUDE))

    def topics_in(self, *modes: MirrorMode) -> list[str]:
        """The member topics in one of ``modes``, sorted."""
        return sorted(t for t, mode in self.topics.items() if mode in modes)


@dataclass(frozen=True, slots=True)
class MirrorsImage:
    """Every mirror, and every topic's membership.

    ``mirrors``: the existing mirrors by name. ``members``: mirror name -> {topic: mode} for
    every ``mirror.name`` in the image, including names of deleted mirrors (their stopped
    topics). ``topics``: topic -> (mirror name, mode).
    """

    mirrors: Mapping[str, ClusterMirrorImage] = field(default_factory=lambda: EMPTY_MAPPING)
    members: Mapping[str, Mapping[str, MirrorMode]] = field(default_factory=lambda: EMPTY_MAPPING)
    topics: Mapping[str, tuple[str, MirrorMode]] = field(default_factory=lambda: EMPTY_MAPPING)

    def mirror(self, name: str) -> ClusterMirrorImage | None:
        return self.mirrors.get(name)

    def membership(self, topic: str) -> tuple[str, MirrorMode] | None:
        """(mirror name, mode) of ``topic``, or None for a topic of no mirror."""
        return self.topics.get(topic)


EMPTY = MirrorsImage()


def mirrors_image(image: MetadataImage) -> MirrorsImage:
    """The mirrors part of ``image`` (empty if the image has none)."""
    part = image.extensions.get(EXTENSION_NAME)
    return part if part is not None else EMPTY


class MirrorsDelta:
    """Mirror changes replayed beside a :class:`MetadataDelta` (see the module docstring)."""

    def __init__(self, base: MirrorsImage, delta: MetadataDelta) -> None:
        self.base = base
        self._delta = delta
        self._configs: dict[str, dict[str, str]] = {}  # mirror -> its whole new config map
        self._topics: dict[str, tuple[str, MirrorMode] | None] = {}  # topic -> membership
        self._names: dict[uuid.UUID, str] = {}  # topics created in this delta
        self.changed_mirrors: set[str] = set()  # configs or membership changed
        self.changed_topics: set[str] = set()  # membership or mode changed

    def _membership(self, topic: str) -> tuple[str, MirrorMode] | None:
        if topic in self._topics:
            return self._topics[topic]
        return self.base.topics.get(topic)

    def _set_membership(self, topic: str, new: tuple[str, MirrorMode] | None) -> None:
        old = self._membership(topic)
        self._topics[topic] = new
        if old != new:
            self.changed_topics.add(topic)
            self.changed_mirrors.update(pair[0] for pair in (old, new) if pair is not None)

    def replay(self, record: Message) -> None:
        key = api_key_of(record)
        if key == _TOPIC_RECORD:
            self._names[record.topic_id] = record.name
        elif key == _CONFIG_RECORD:
            if record.resource_type == ConfigResourceType.CLUSTER_MIRROR:
                name = record.resource_name
                configs = self._configs.get(name)
                if configs is None:
                    old = self.base.mirrors.get(name)
                    configs = self._configs[name] = dict(old.configs) if old else {}
                if record.value is None:
                    configs.pop(record.name, None)
                else:
                    configs[record.name] = record.value
                self.changed_mirrors.add(name)
            elif (
                record.resource_type == ConfigResourceType.TOPIC
                and record.name == MIRROR_NAME_CONFIG
            ):
                self._set_membership(record.resource_name, mirror_membership(record.value))
        elif key == _REMOVE_TOPIC_RECORD:
            name = self._names.get(record.topic_id)
            if name is None:
                topic = self._delta.image.topics.by_id.get(record.topic_id)
                name = None if topic is None else topic.name
            if name is not None:
                self._set_membership(name, None)

    def apply(self) -> MirrorsImage:
        if not self._configs and not self._topics:
            return self.base
        topics = dict(self.base.topics)
        members = {m: dict(t) for m, t in self.base.members.items()}
        for topic, new in self._topics.items():
            old = topics.pop(topic, None)
            if old is not None:
                members[old[0]].pop(topic, None)
            if new is not None:
                topics[topic] = new
                members.setdefault(new[0], {})[topic] = new[1]
        members = {m: t for m, t in members.items() if t}
        mirrors = dict(self.base.mirrors)
        for name, configs in self._configs.items():
            if configs:
                mirrors[name] = ClusterMirrorImage(name, frozen_map(dict(sorted(configs.items()))))
            else:
                mirrors.pop(name, None)
        for name in self.changed_mirrors:
            current = mirrors.get(name)
            if current is not None:
                mirrors[name] = ClusterMirrorImage(
                    name, current.configs, frozen_map(dict(sorted(members.get(name, {}).items())))
                )
        return MirrorsImage(
            frozen_map(dict(sorted(mirrors.items()))),
            frozen_map(
                {m: frozen_map(dict(sorted(t.items()))) for m, t in sorted(members.items())}
            ),
            frozen_map(dict(sorted(topics.items()))),
        )


class _MirrorsExtension:
    """The :class:`~kcore.metadata.delta.ImageExtension` registered for this part."""

    name = EXTENSION_NAME
    record_types = frozenset({_TOPIC_RECORD, _CONFIG_RECORD, _REMOVE_TOPIC_RECORD})

    def empty(self) -> MirrorsImage:
        return EMPTY

    def new_delta(self, part: Any, delta: MetadataDelta) -> MirrorsDelta:
        return MirrorsDelta(part, delta)

    def snapshot_records(self, part: Any) -> list[Message]:
        return []  # the configs part writes every ConfigRecord this part is built from


EXTENSION = _MirrorsExtension()
register_image_extension(EXTENSION)
