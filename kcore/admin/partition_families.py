"""Per-partition metric families, rendered by prometheus-client a chunk at a time and each
chunk's text kept while its figures do not change.

A broker of 10,000 partitions has 10,000 ``kcore_log_size_bytes`` samples and ten per mirror
partition, and prometheus-client's text exposition costs several microseconds a sample (its
labels are checked and escaped one by one): most of a scrape. Most of those figures do not
change between two scrapes -- an idle partition keeps its size, a mirror partition that is
caught up keeps its offsets -- so re-formatting them is the waste. Here a family is split into
chunks (up to :data:`BLOCK` partitions of a topic, or of a mirror's topic, so that a few busy
partitions do not re-format a whole topic of idle ones); a collection hands each chunk's *rows*
(``(partition, *more label values, value)`` tuples: cheap to build on the event loop, no
prometheus-client ``Sample`` objects); and at render time a chunk whose rows equal the last
render's reuses that render's text, while a changed chunk is formatted again by
prometheus-client's ``generate_latest``, its family header cut off. The text is exactly what
``generate_latest`` would write for the whole family: nothing is stale, only not formatted
twice. A chunk absent from a collection is forgotten.

Rendering runs in the worker thread :mod:`kcore.admin.metrics` formats in, one render at a time
(scrapes share a render), so the cache is never touched by two threads at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from prometheus_client import generate_latest
from prometheus_client.core import Metric

Row = tuple  # (partition index, *more label values, value)
# Partitions per chunk: partitions 0-63 of a topic are one chunk, 64-127 the next, ...
BLOCK_BITS = 6
BLOCK = 1 << BLOCK_BITS
Chunk = tuple[tuple[str, ...], int]  # (the chunk's label values, block number)


class PartitionFamily:
    """One family: ``kind`` (``GaugeMetricFamily``, ``CounterMetricFamily``), its name and
    text, the chunk labels (``["topic"]``), then ``partition`` and ``more`` labels."""

    def __init__(
        self,
        kind: type,
        name: str,
        documentation: str,
        chunk_labels: list[str],
        more_labels: tuple[str, ...] = (),
    ) -> None:
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labels = [*chunk_labels, "partition", *more_labels]
        self._cache: dict[Chunk, tuple[list[Row], bytes]] = {}
        self.header = self._format(())
        self.formatted_chunks = 0  # chunks formatted, not reused (for tests and benches)

    def rows(self) -> Rows:
        """An empty collection of this family, for a collector to fill."""
        return Rows(self, {})

    def render(self, chunks: dict[Chunk, list[Row]]) -> bytes:
        """The family's exposition text: its header, then each chunk's samples."""
        parts = [self.header]
        cache: dict[Chunk, tuple[list[Row], bytes]] = {}
        for key, rows in chunks.items():
            known = self._cache.get(key)
            if known is not None and known[0] == rows:
                text = known[1]
            else:
                text = self._format(key[0], rows)[len(self.header) :]
                self.formatted_chunks += 1
            cache[key] = (rows, text)
            parts.append(text)
        self._cache = cache
        return b"".join(parts)

    def _format(self, labels: tuple[str, ...], rows: list[Row] = ()) -> bytes:
        family = self.kind(self.name, self.documentation, labels=self.labels)
        for row in rows:
            family.add_metric([*labels, str(row[0]), *row[1:-1]], row[-1])
        return generate_latest(_Families([family]))


class Rows(NamedTuple):
    """What one collection read for a :class:`PartitionFamily`: its rows by chunk."""

    family: PartitionFamily
    chunks: dict[Chunk, list[Row]]

    def add(self, labels: tuple[str, ...], row: Row) -> None:
        """``row`` of the partition ``row[0]`` of the topic ``labels`` name."""
        chunk = (labels, row[0] >> BLOCK_BITS)
        found = self.chunks.get(chunk)
        if found is None:
            self.chunks[chunk] = [row]
        else:
            found.append(row)

    def render(self) -> bytes:
        return self.family.render(self.chunks)


class _Families:
    """Metric families already built, as the collector ``generate_latest`` takes."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(collected: list[Any]) -> bytes:
    """The exposition of one collection: prometheus-client metric families and
    :class:`Rows`, in the order collected (the plain families formatted together)."""
    parts, plain = [], []
    for item in collected:
        if isinstance(item, Rows):
            if plain:
                parts.append(generate_latest(_Families(plain)))
                plain = []
            parts.append(item.render())
        else:
            plain.append(item)
    if plain:
        parts.append(generate_latest(_Families(plain)))
    return b"".join(parts)
