"""``GET /metrics``: the node's figures in Prometheus text format (0.0.4, which every Prometheus
reads).

The figures are read at scrape time by the collectors of :mod:`kcore.admin.collectors` and
:mod:`kcore.admin.mirror_collector`, registered in one ``CollectorRegistry`` per node, and
written by prometheus-client's ``generate_latest``. A scrape is done in two steps so that it
never holds the broker's Trio loop for long:

1. the collectors run on the loop, in one go with no checkpoint, so they read a consistent
   state (no partition appears or goes mid-read) — one pass over the node's partitions;
2. the metric families they built, plain objects that nothing else touches, are formatted in a
   worker thread (``trio.to_thread``): the formatting is most of a scrape's cost (~8 us a
   sample), and in a thread the loop keeps getting the interpreter between its time slices.
   The per-partition families are collected as rows and formatted a topic at a time, a
   topic's text reused while its figures are unchanged (:mod:`kcore.admin.partition_families`:
   exact, never stale), so a scrape formats only what changed since the last one.

Scrapes that arrive while one is being rendered wait for it and get the same text (one
collection and formatting however many scrapers there are); its figures were read when that
render began, at most one render earlier.
"""

from __future__ import annotations

from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry
from quart import Blueprint, current_app

from kcore.admin.collectors import (
    CoordinatorCollector,
    PartitionCollector,
    RequestCollector,
    TopicCollector,
)
from kcore.admin.context import broker
from kcore.admin.mirror_collector import MirrorCollector
from kcore.admin.partition_families import render

metrics = Blueprint("metrics", __name__)

COLLECTORS = (
    RequestCollector,
    TopicCollector,
    PartitionCollector,
    CoordinatorCollector,
    MirrorCollector,
)


class _Render:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.body: bytes | None = None


class MetricsRenderer:
    """One node's registry of ``collectors``, and the render that scrapes share."""

    def __init__(self, collectors: list[Any]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self.registry.register(collector)
        self._current: _Render | None = None

    async def render(self) -> bytes:
        while True:
            current = self._current
            if current is None:
                return await self._render()
            await current.done.wait()
            if current.body is not None:
                return current.body
            # That render failed or was cancelled: this scrape renders (or joins) another.

    async def _render(self) -> bytes:
        current = self._current = _Render()
        try:
            collected = list(self.registry.collect())
            current.body = await trio.to_thread.run_sync(render, collected)
            return current.body
        finally:
            self._current = None
            current.done.set()


def renderer() -> MetricsRenderer:
    extensions = current_app.extensions
    found = extensions.get("kcore.metrics")
    if found is None:
        node = broker()
        found = extensions["kcore.metrics"] = MetricsRenderer([c(node) for c in COLLECTORS])
    return found


@metrics.get("/metrics")
async def scrape():
    body = await renderer().render()
    return body, 200, {"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
