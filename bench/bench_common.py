"""What the confluent-kafka benches against a kcore child process share: a fresh topic whose
partitions all have a leader, and the header every result starts with (when, on what machine,
run how), so a number in ``docs/performance.md`` says where it comes from."""

from __future__ import annotations

import os
import platform
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, partitions: int, prefix: str) -> str:
    """Create ``<prefix>-<8 hex digits>`` (replication 1) and return its name once the metadata
    names a leader for every partition; TimeoutError after 30 s."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30  # until the metadata names a leader for every partition
    while True:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        leaders = [p.leader for p in md.partitions.values()] if md is not None else []
        if len(leaders) == partitions and min(leaders) >= 0:
            return topic
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} has no leaders")
        time.sleep(0.05)


def print_header(title: str) -> None:
    """``# <title> — <local time>``, the machine and Python, and the command line."""
    print(f"# {title} — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(
        f"# {platform.node()}: {platform.platform()}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
