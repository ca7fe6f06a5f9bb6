"""The render that concurrent scrapes share: one collection for a burst of scrapers, a fresh
one for the next scrape, and a failed render retried by those that waited for it."""

from __future__ import annotations

import trio
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from kcore.admin.metrics import MetricsRenderer


class Counting:
    """A collector that counts its collections (and fails the first ``fail`` of them)."""

    def __init__(self, fail: int = 0) -> None:
        self.collections = 0
        self.fail = fail

    def collect(self):
        self.collections += 1
        if self.collections <= self.fail:
            raise RuntimeError("collection failed")
        family = CounterMetricFamily("kcore_test_collections", "Collections.")
        family.add_metric([], self.collections)
        yield family


def _value(body: bytes) -> float:
    (family,) = text_string_to_metric_families(body.decode())
    return family.samples[0].value


def _burst(renderer: MetricsRenderer, scrapers: int) -> list:
    outcomes: list = []

    async def scrape():
        try:
            outcomes.append(_value(await renderer.render()))
        except RuntimeError:
            outcomes.append("failed")

    async def main():
        async with trio.open_nursery() as nursery:
            for _ in range(scrapers):
                nursery.start_soon(scrape)

    trio.run(main)
    return outcomes


def test_concurrent_scrapes_share_one_collection():
    collector = Counting()
    renderer = MetricsRenderer([collector])
    assert _burst(renderer, 50) == [1.0] * 50
    assert collector.collections == 1
    # The next scrape, after the burst, reads the state again.
    assert _burst(renderer, 1) == [2.0]


def test_scrapes_that_waited_on_a_failed_render_render_again():
    collector = Counting(fail=1)
    outcomes = _burst(MetricsRenderer([collector]), 5)
    # The scrape that rendered gets the failure; those that waited share a second render.
    assert sorted(outcomes, key=str) == [2.0, 2.0, 2.0, 2.0, "failed"]
    assert collector.collections == 2
