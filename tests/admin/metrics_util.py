"""Scrape ``/metrics`` and read it with prometheus-client's own parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """The samples of one scrape: ``scrape["kcore_requests_total", {"api": "Produce"}]``."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[tuple[str, frozenset], float] = {}
        for family in self.families.values():
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def __getitem__(self, key: tuple[str, dict[str, str]]) -> float:
        name, labels = key
        return self.samples[(name, frozenset(labels.items()))]

    def get(self, name: str, labels: dict[str, str] | None = None, default=0.0) -> float:
        return self.samples.get((name, frozenset((labels or {}).items())), default)

    def matching(self, name: str, **labels: str) -> dict[frozenset, float]:
        """The samples of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return {
            key[1]: value
            for key, value in self.samples.items()
            if key[0] == name and want <= key[1]
        }

    def total(self, name: str, **labels: str) -> float:
        return sum(self.matching(name, **labels).values())


def scrape(url: str, token: str | None = None) -> Scrape:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{url}/metrics", headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(answer.text)
