"""``bootstrap.checkpoint``: the records a new cluster starts with, written by ``kcore format``
(Kafka's ``kafka-storage.sh format`` writes the same file in the metadata log directory).

kcore writes it only when ``format`` is given records beyond the defaults (``--add-scram``);
without it the controller starts an empty log with
:func:`~kcore.metadata.bootstrap.bootstrap_records`. The file is a metadata snapshot in Kafka's
format (header, the records, footer), readable by ``kcore dump-log``. It is read once, when the
active controller finds the metadata log empty; afterwards the log is the truth and the file is
ignored, as in Kafka.
"""

from __future__ import annotations

import os
from pathlib import Path

from kcore.metadata.records import decode_record, encode_record
from kcore.protocol.messages import Message
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.snapshot_files import SnapshotReader, encode_snapshot

__all__ = ["BOOTSTRAP_FILE", "read_bootstrap", "write_bootstrap"]

BOOTSTRAP_FILE = "bootstrap.checkpoint"
_ID = OffsetAndEpoch(0, 0)


def write_bootstrap(directory: str | os.PathLike[str], records: list[Message]) -> Path:
    """Write ``records`` to ``directory/bootstrap.checkpoint`` (atomically, fsynced)."""
    path = Path(directory) / BOOTSTRAP_FILE
    tmp = path.with_suffix(".checkpoint.tmp")
    data = encode_snapshot(_ID, [encode_record(r) for r in records])
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_bootstrap(directory: str | os.PathLike[str]) -> list[Message] | None:
    """The records of ``directory/bootstrap.checkpoint``, or None when there is none."""
    path = Path(directory) / BOOTSTRAP_FILE
    if not path.exists():
        return None
    reader = SnapshotReader(_ID, path.read_bytes())
    return [decode_record(data)[0] for data in reader.records()]
