"""Checkpoint files: small text files replaced atomically (offsets per partition, leader epochs).

Layout (text, ``\\n`` line ends)::

    0                 <- line 1: the format version, always 0
    2                 <- line 2: the number of entries that follow
    my-topic 0 1234   <- one entry per line, fields separated by a space
    my-topic 1 99

Kafka uses this shape for ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` and ``cleaner-offset-checkpoint`` in each log directory
(``<topic> <partition> <offset>``), and for each partition's ``leader-epoch-checkpoint``
(``<leaderEpoch> <startOffset>``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from kcore.log.errors import CorruptCheckpointError
from kcore.log.files import atomic_write_bytes

CHECKPOINT_VERSION = 0

RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Java's Integer/Long.parseInt accept an optional sign and ASCII digits only; Python's int()
# would also take spaces and underscores, which a Kafka broker would reject.
_INTEGER = re.compile(r"[+-]?[0-9]+")

E = TypeVar("E")

TopicPartition = tuple[str, int]
"""A partition as ``(topic, partition)``."""


def _parse_int(text: str, low: int, high: int) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{value} is out of range")
    return value


class CheckpointFile(Generic[E]):
    """A checkpoint file of entries of type ``E`` (see the module docstring for the layout).

    ``format_entry`` turns an entry into its line (without the newline); ``parse_entry`` turns
    the whitespace-separated fields of a line back into an entry, raising ``ValueError`` when
    they are malformed.

    After a crash: ``write`` replaces the file atomically (``<file>.tmp``, fsync, rename, fsync
    of the directory), so the file always holds either the old or the new checkpoint; a stale
    ``.tmp`` is overwritten by the next write. A missing file reads as no entries.

    Who may call it: the owner of the checkpointed state (the log manager for the directory
    checkpoints, the leader-epoch cache for its own), one writer at a time.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format_entry: Callable[[E], str],
        parse_entry: Callable[[list[str]], E],
        version: int = CHECKPOINT_VERSION,
    ) -> None:
        self._path = Path(path)
        self._format_entry = format_entry
        self._parse_entry = parse_entry
        self._version = version

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self._path

    def encode(self, entries: Iterable[E]) -> bytes:
        """The file's bytes for ``entries``."""
        lines = [self._format_entry(entry) for entry in entries]
        text = f"{self._version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
        return text.encode("utf-8")

    def write(self, entries: Iterable[E]) -> None:
        """Replace the file with ``entries``, atomically and durably."""
        atomic_write_bytes(self._path, self.encode(entries))

    def read(self) -> list[E]:
        """Read the entries; a missing or empty file has none.

        Raises:
            CorruptCheckpointError: unknown version, malformed line, or an entry count that does
                not match the entries; the message names the file and the line number.
        """
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return []
        return self.decode(data)

    def decode(self, data: bytes) -> list[E]:
        """Parse the file's bytes (see ``read``)."""
        if not data:
            return []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"{self._path}: not UTF-8 text ({exc})") from None
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        # Java's readLine also accepts \r\n line ends.
        lines = [line.removesuffix("\r") for line in lines]

        def fail(lineno: int, why: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"{self._path}, line {lineno}: {why}")

        if len(lines) < 2:
            raise fail(len(lines) + 1, "truncated file: expected the version and entry count")
        try:
            version = _parse_int(lines[0].strip(), INT32_MIN, INT32_MAX)
        except ValueError:
            raise fail(1, f"malformed version {lines[0]!r}") from None
        if version != self._version:
            raise fail(1, f"unrecognised version {version} (expected {self._version})")
        try:
            expected = _parse_int(lines[1].strip(), 0, INT32_MAX)
        except ValueError:
            raise fail(2, f"malformed entry count {lines[1]!r}") from None
        entries: list[E] = []
        for lineno, line in enumerate(lines[2:], start=3):
            try:
                entries.append(self._parse_entry(line.split()))
            except ValueError as exc:
                raise fail(lineno, f"malformed entry {line!r} ({exc})") from None
        if len(entries) != expected:
            raise fail(len(lines), f"expected {expected} entries but found {len(entries)}")
        return entries


# -- offsets per partition ------------------------------------------------------------------


def _format_offset_entry(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    if not topic or any(c.isspace() for c in topic):
        # Kafka topic names are [a-zA-Z0-9._-]+, so a space would only come from a bug.
        raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
    return f"{topic} {partition} {offset}"


def _parse_offset_entry(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields, found {len(fields)}")
    topic, partition, offset = fields
    return (topic, _parse_int(partition, 0, INT32_MAX)), _parse_int(offset, INT64_MIN, INT64_MAX)


class OffsetCheckpointFile:
    """A per-directory checkpoint of one offset per partition: ``<topic> <partition> <offset>``.

    One class for ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
    ``replication-offset-checkpoint`` (high watermarks) and ``cleaner-offset-checkpoint``.
    Entries are written in the mapping's order. Crash behaviour and callers: as
    ``CheckpointFile``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, _format_offset_entry, _parse_offset_entry
        )

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replace the checkpoint with ``offsets`` (``{(topic, partition): offset}``)."""
        self._file.write(offsets.items())

    def read(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): offset}``; a later duplicate line wins. Raises
        ``CorruptCheckpointError`` on a malformed file."""
        return dict(self._file.read())


# -- leader epochs --------------------------------------------------------------------------


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def _format_epoch_entry(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _parse_epoch_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields, found {len(fields)}")
    return EpochEntry(
        _parse_int(fields[0], INT32_MIN, INT32_MAX), _parse_int(fields[1], INT64_MIN, INT64_MAX)
    )


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: ``<leaderEpoch> <startOffset>`` per line.

    Crash behaviour: as ``CheckpointFile``. Who may call it: the partition's
    ``LeaderEpochFileCache`` only.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, _format_epoch_entry, _parse_epoch_entry
        )

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self._file.path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        """Replace the checkpoint with ``entries`` (in epoch order)."""
        self._file.write(entries)

    def read(self) -> list[EpochEntry]:
        """The entries in file order. Raises ``CorruptCheckpointError`` on a malformed file."""
        return self._file.read()
