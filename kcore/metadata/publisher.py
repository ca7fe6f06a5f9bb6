"""The metadata loader: committed records in, new images out, publishers told.

Theory of operation
-------------------
The broker (and the controller, for its own metadata cache) owns one :class:`MetadataLoader`.
Its driver hands it every batch of *committed* entries of ``__cluster_metadata``, in order:
``loader.handle_commit([(offset, record_or_bytes), ...])``, or a whole snapshot with
``loader.load_snapshot(...)``. For each batch the loader builds one
:class:`~kcore.metadata.delta.MetadataDelta`, applies it, keeps the new image, and calls every
installed :class:`MetadataPublisher` with ``(delta, new_image)``; the replica manager, the
coordinators and the mirror manager are such publishers.

Metadata transactions (KIP-868): records between a ``BeginTransactionRecord`` and its
``EndTransactionRecord`` are published together when the end arrives (possibly batches later);
an ``AbortTransactionRecord`` drops them.

A publisher installed late is first caught up: it receives a delta that builds the current image
from an empty one (every topic shows as created), then each later batch as usual.

Publishers run in order; if one raises, the others are still called and the loader then raises
an ``ExceptionGroup`` with every failure (the image has moved on regardless). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kcore.metadata.delta import MetadataDelta
from kcore.metadata.image import MetadataImage
from kcore.metadata.records import api_key_of, decode_record
from kcore.metadata.snapshot import image_records
from kcore.protocol.messages import Message

__all__ = ["MetadataLoader", "MetadataPublisher"]

_BEGIN_TXN, _END_TXN, _ABORT_TXN = 23, 24, 25


class MetadataPublisher(Protocol):
    """Something that reacts to metadata changes. ``name`` is for error messages."""

    name: str

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None: ...


Entry = tuple[int, Message | bytes | bytearray | memoryview]


class MetadataLoader:
    def __init__(self, image: MetadataImage | None = None, *, cluster_id: str | None = None):
        self.image = image if image is not None else MetadataImage.empty(cluster_id)
        self.publishers: list[MetadataPublisher] = []
        self._txn: list[tuple[int, Message]] | None = None  # inside a metadata transaction

    def install_publisher(self, publisher: MetadataPublisher) -> None:
        """Add ``publisher`` and catch it up with the current image."""
        self.publishers.append(publisher)
        if self.image.is_empty:
            return
        delta = MetadataDelta(MetadataImage.empty(self.image.cluster_id))
        for rec in image_records(self.image):
            delta.replay(rec)
        delta.offset = self.image.offset
        _publish([publisher], delta, self.image)

    def remove_publisher(self, publisher: MetadataPublisher) -> None:
        self.publishers.remove(publisher)

    def handle_commit(self, entries: Iterable[Entry]) -> MetadataImage:
        """Apply one batch of committed entries and notify the publishers.

        Entries are ``(offset, record)`` with the record either decoded or still framed.
        Returns the new image (the same object when nothing was applied).
        """
        delta = MetadataDelta(self.image)
        applied = False
        for offset, raw in entries:
            rec = _decoded(raw)
            key = api_key_of(rec)
            if key == _BEGIN_TXN:
                self._txn = []
            elif key == _END_TXN:
                for o, r in self._txn or ():
                    delta.replay(r, o)
                delta.replay(rec, offset)
                self._txn = None
                applied = True
            elif key == _ABORT_TXN:
                self._txn = None
                delta.replay(rec, offset)
                applied = True
            elif self._txn is not None:
                self._txn.append((offset, rec))
            else:
                delta.replay(rec, offset)
                applied = True
        if not applied:
            return self.image
        return self._publish(delta)

    def load_snapshot(self, entries: Iterable[Message | bytes], last_offset: int) -> MetadataImage:
        """Replace the image with a snapshot's content (ending at ``last_offset``)."""
        delta = MetadataDelta(self.image, snapshot=True)
        for raw in entries:
            delta.replay(_decoded(raw))
        delta.offset = last_offset
        self._txn = None
        return self._publish(delta)

    def _publish(self, delta: MetadataDelta) -> MetadataImage:
        self.image = delta.apply()
        _publish(self.publishers, delta, self.image)
        return self.image


def _decoded(raw: Message | bytes | bytearray | memoryview) -> Message:
    if isinstance(raw, bytes | bytearray | memoryview):
        return decode_record(raw)[0]
    return raw


def _publish(publishers: list[MetadataPublisher], delta: MetadataDelta, image: MetadataImage):
    errors = []
    for p in list(publishers):
        try:
            p.on_metadata_update(delta, image)
        except Exception as e:  # noqa: BLE001 - every publisher runs; failures are re-raised
            e.add_note(f"in metadata publisher {getattr(p, 'name', p)!r}")
            errors.append(e)
    if errors:
        raise ExceptionGroup("metadata publisher(s) failed", errors)
