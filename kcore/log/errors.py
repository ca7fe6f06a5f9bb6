"""Typed failures of the storage engine.

Every storage failure raised by ``kcore/log`` derives from :class:`LogError`, so a caller (the
log loader, the replica manager) can tell a storage problem from a programming error with one
``except``; a bad argument (a negative position, a negative epoch) is a plain ``ValueError``.
The ``Corrupt*`` errors mean "this file cannot be trusted": the caller rebuilds the index,
falls back to an older snapshot, or fails the log directory, exactly as Kafka does with its
``CorruptIndexException`` / ``CorruptSnapshotException``. They also derive from ``ValueError``,
as Python's own decoding errors do (``json.JSONDecodeError``): the bytes on disk are a bad value.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of every error raised by ``kcore/log``."""


class CorruptIndexError(LogError, ValueError):
    """An offset, time or transaction index failed its sanity check; rebuild it from the log."""


class CorruptSnapshotError(LogError, ValueError):
    """A producer state snapshot has a bad CRC, version or length; use an older one or rebuild."""


class CorruptCheckpointError(LogError, ValueError):
    """A checkpoint file is malformed; the message names the file and the offending line."""


class InvalidOffsetError(LogError):
    """An append would break an index's ordering (offsets or timestamps must increase)."""


class IndexOffsetOverflowError(LogError):
    """An offset does not fit the index's int32 offset relative to the segment's base offset.

    The caller must roll a new segment: a segment spans at most 2**31 - 1 offsets.
    """


class IndexFullError(LogError):
    """An append to an index that already holds ``max_entries`` entries; roll the segment."""


class TruncationError(LogError):
    """A truncation the log cannot do: to an offset below its log start offset (the caller
    truncates fully and restarts the log at the new offset instead, as decision D-16 does)."""
