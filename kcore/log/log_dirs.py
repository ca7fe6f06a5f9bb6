"""The small files of a log directory: ``meta.properties``, ``partition.metadata``, the
clean-shutdown marker.

``meta.properties`` (Java properties, Kafka's KRaft layout, version 1)::

    #kcore
    cluster.id=<22-character base64 uuid>
    directory.id=<22-character base64 uuid>
    node.id=<int>
    version=1

``partition.metadata`` (one per partition folder)::

    version: 0
    topic_id: <22-character base64 uuid>

``.kafka_cleanshutdown``: JSON ``{"version":0,"brokerEpoch":N}``, written last at a clean
shutdown and removed at startup; its absence at startup means every log is recovered.

All three are written atomically (temp file, fsync, rename, fsync of the directory), so a crash
leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from kcore.log.errors import LogError
from kcore.log.files import atomic_write_bytes
from kcore.properties import parse_properties

META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's text form of a UUID: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_base64(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{text!r} is not a base64 UUID") from e


def random_uuid() -> uuid.UUID:
    """A random UUID usable as a Kafka id: never the zero UUID nor one starting with '-'.

    Kafka avoids ids whose base64 text starts with '-' because command lines would read them
    as options.
    """
    while True:
        u = uuid.uuid4()
        if u.int != 0 and not uuid_to_base64(u).startswith("-"):
            return u


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: uuid.UUID
    version: int = 1

    @classmethod
    def read(cls, log_dir: Path) -> MetaProperties | None:
        """The directory's meta.properties, None when absent (an unformatted directory)."""
        path = Path(log_dir) / META_PROPERTIES
        if not path.exists():
            return None
        try:
            props = parse_properties(path.read_text(encoding="utf-8"))
            version = int(props.get("version", "0"))
            node = props.get("node.id") if version >= 1 else props.get("broker.id")
            directory = props.get("directory.id")
            return cls(
                cluster_id=props["cluster.id"],
                node_id=int(node) if node is not None else -1,
                directory_id=uuid_from_base64(directory) if directory else random_uuid(),
                version=version,
            )
        except (KeyError, ValueError) as e:
            raise LogError(f"{path}: invalid meta.properties: {e}") from None

    def write(self, log_dir: Path) -> None:
        text = (
            "#kcore\n"
            f"cluster.id={self.cluster_id}\n"
            f"directory.id={uuid_to_base64(self.directory_id)}\n"
            f"node.id={self.node_id}\n"
            f"version={self.version}\n"
        )
        atomic_write_bytes(Path(log_dir) / META_PROPERTIES, text.encode("utf-8"))


def write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Record the partition's topic id. Not fsynced: the id is durable in the metadata log, and
    a file a crash left empty or missing is rewritten when the partition is next applied."""
    text = f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n"
    atomic_write_bytes(
        Path(partition_dir) / PARTITION_METADATA, text.encode("utf-8"), durable=False
    )


def read_partition_metadata(partition_dir: Path) -> uuid.UUID | None:
    path = Path(partition_dir) / PARTITION_METADATA
    if not path.exists():
        return None
    fields = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise LogError(f"{path}: unsupported partition.metadata {fields}")
    try:
        return uuid_from_base64(fields["topic_id"])
    except ValueError as e:
        raise LogError(f"{path}: {e}") from None


def write_clean_shutdown(log_dir: Path, broker_epoch: int = -1) -> None:
    data = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    atomic_write_bytes(Path(log_dir) / CLEAN_SHUTDOWN_FILE, data.encode("ascii"))


def take_clean_shutdown(log_dir: Path) -> bool:
    """Whether the last shutdown of ``log_dir`` was clean; removes the marker either way."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE
    if not path.exists():
        return False
    path.unlink()
    return True


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``orders-3`` → ``("orders", 3)``; None for names that are not partition folders."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)
