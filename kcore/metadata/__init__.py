"""Cluster metadata: KRaft records, the immutable image and its deltas, and the controller.

Modules, inside out:

* :mod:`~kcore.metadata.records` — metadata records in Kafka's framing
  (``encode_record`` / ``decode_record``), the record-type registry.
* :mod:`~kcore.metadata.image` / :mod:`~kcore.metadata.delta` — the immutable
  :class:`MetadataImage` and :class:`MetadataDelta` (replay, then ``apply``).
* :mod:`~kcore.metadata.publisher` — :class:`MetadataLoader` (committed batches in, images
  out) and the :class:`MetadataPublisher` interface.
* :mod:`~kcore.metadata.snapshot` — an image written back as records.
* :mod:`~kcore.metadata.controller` — :class:`QuorumController`, the pure controller state
  machine, over the managers ``replication``, ``cluster_control``, ``config_control``,
  ``features``, ``producer_ids``, ``acls`` (and ``partition_change``, ``placement``,
  ``topic_names``).
* :mod:`~kcore.metadata.mirrors` — the cluster mirrors' image part (registered on import),
  with :mod:`~kcore.metadata.mirror_configs` (a mirror's config keys) and
  :mod:`~kcore.metadata.mirror_control` (the controller's mirror operations).
* :mod:`~kcore.metadata.bootstrap` — the records a new cluster starts with.

Nothing here performs I/O or imports ``trio``.
"""

from kcore.metadata import mirrors as _mirrors  # noqa: F401 - registers the image part
from kcore.metadata.bootstrap import bootstrap_records
from kcore.metadata.context import ControllerConfig, ControllerResult
from kcore.metadata.controller import QuorumController
from kcore.metadata.delta import MetadataDelta, MetadataReplayError, replay_records
from kcore.metadata.image import MetadataImage
from kcore.metadata.publisher import MetadataLoader, MetadataPublisher
from kcore.metadata.records import (
    MetadataRecordError,
    UnknownRecordTypeError,
    decode_record,
    encode_record,
)
from kcore.metadata.snapshot import image_records

__all__ = [
    "ControllerConfig",
    "ControllerResult",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLoader",
    "MetadataPublisher",
    "MetadataRecordError",
    "MetadataReplayError",
    "QuorumController",
    "UnknownRecordTypeError",
    "bootstrap_records",
    "decode_record",
    "encode_record",
    "image_records",
    "replay_records",
]
