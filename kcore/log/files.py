"""File names of a partition directory, and the atomic-replace helper used by small files.

Kafka names every per-segment file after the segment's base offset printed as 20 zero-padded
decimal digits (enough for any non-negative int64), so that a plain ``sorted(os.listdir())``
lists segments in offset order: ``00000000000000000000.log``, ``...0000123.index`` and so on.
A suffix (``.deleted``, ``.cleaned``, ``.swap``) marks a file in the middle of an operation.

Who may call it: anything in ``kcore/log``; the helpers are pure except the two ``fsync``/atomic
writers, which touch only the paths they are given.
"""

from __future__ import annotations

import os
from pathlib import Path

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"

# 20 digits hold the largest int64 (9223372036854775807 has 19), so names sort as offsets do.
_OFFSET_DIGITS = 20

StrPath = str | os.PathLike[str]


def filename_prefix(offset: int) -> str:
    """Return ``offset`` as the 20-digit zero-padded prefix of a segment file name.

    Raises ``ValueError`` for a negative offset, which no segment can have.
    """
    if offset < 0:
        raise ValueError(f"a file name offset cannot be negative: {offset}")
    return f"{offset:0{_OFFSET_DIGITS}d}"


def _segment_file(directory: StrPath, offset: int, suffix: str, extra: str) -> Path:
    return Path(directory) / f"{filename_prefix(offset)}{suffix}{extra}"


def log_file(directory: StrPath, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.log`` (plus ``suffix`` such as ``.deleted``)."""
    return _segment_file(directory, offset, LOG_FILE_SUFFIX, suffix)


def index_file(directory: StrPath, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.index``: the offset index of the segment at ``offset``."""
    return _segment_file(directory, offset, INDEX_FILE_SUFFIX, suffix)


def time_index_file(directory: StrPath, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.timeindex``: the time index of the segment at ``offset``."""
    return _segment_file(directory, offset, TIME_INDEX_FILE_SUFFIX, suffix)


def txn_index_file(directory: StrPath, offset: int, suffix: str = "") -> Path:
    """``<dir>/<20-digit offset>.txnindex``: the aborted-transaction index of a segment."""
    return _segment_file(directory, offset, TXN_INDEX_FILE_SUFFIX, suffix)


def snapshot_file(directory: StrPath, offset: int) -> Path:
    """``<dir>/<20-digit offset>.snapshot``: producer state as of ``offset`` (exclusive)."""
    return _segment_file(directory, offset, PRODUCER_SNAPSHOT_FILE_SUFFIX, "")


def offset_from_file_name(name: StrPath) -> int:
    """Parse the offset back from a segment file name (a path is accepted; only its name counts).

    ``00000000000000000123.log.deleted`` -> 123. Raises ``ValueError`` when the part before the
    first dot is not made of decimal digits, so a stray file (``leader-epoch-checkpoint``) is
    never mistaken for a segment.
    """
    base = Path(name).name
    prefix = base.split(".", 1)[0]
    if not prefix or not (prefix.isascii() and prefix.isdigit()):
        raise ValueError(f"not a segment file name (no offset prefix): {base!r}")
    return int(prefix)


def fsync_dir(directory: StrPath) -> None:
    """fsync a directory so that a rename or a create inside it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: StrPath, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory (the
    rename is only durable once the directory entry is). A crash before the rename leaves a
    stale ``.tmp`` behind, which the next write simply overwrites. ``durable=False`` skips both
    fsyncs, for files that can be rebuilt from elsewhere: after a crash they may be missing or
    empty, never half-written by this process.
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    if durable:
        fsync_dir(target.parent)
