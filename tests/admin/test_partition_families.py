"""Per-partition families rendered a chunk at a time: over any sequence of collections the text
is byte for byte what prometheus-client's ``generate_latest`` writes for the whole family, and
only the chunks whose rows changed since the last render are formatted again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from kcore.admin.partition_families import BLOCK, PartitionFamily, render

TOPICS = ["orders", 'we"ird\\topic', "payments"]
STATES = ["MIRRORING", "PAUSED", "FAILED"]


class _Whole:
    def __init__(self, families) -> None:
        self.families = families

    def collect(self):
        return self.families


def _expected(kind, name, text, labels, chunks) -> bytes:
    family = kind(name, text, labels=labels)
    for (labels, _), rows in chunks.items():
        for row in rows:
            family.add_metric([*labels, str(row[0]), *row[1:-1]], row[-1])
    return generate_latest(_Whole([family]))


# A collection: per topic, partitions with a value and a state (a topic may be absent).
collections = st.lists(
    st.dictionaries(
        st.sampled_from(TOPICS),
        st.dictionaries(
            st.integers(0, 3 * BLOCK),  # three chunks of a topic
            st.tuples(st.sampled_from(STATES), st.integers(0, 3) | st.floats(0, 2)),
            max_size=8,
        ),
        max_size=3,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(collections)
def test_chunked_text_is_generate_latests_and_only_changes_are_formatted(sequence):
    gauge = PartitionFamily(
        GaugeMetricFamily, "kcore_test_state", "A state.", ["topic"], ("state",)
    )
    counter = PartitionFamily(CounterMetricFamily, "kcore_test_bytes", "Bytes.", ["topic"])
    previous: dict = {}
    for collection in sequence:
        g, c = gauge.rows(), counter.rows()
        for topic, partitions in collection.items():
            for index, (state, value) in sorted(partitions.items()):
                g.add((topic,), (index, state, 1))
                c.add((topic,), (index, value))
        before = counter.formatted_chunks
        body = render([g, c])
        assert body == _expected(
            GaugeMetricFamily, "kcore_test_state", "A state.", ["topic", "partition", "state"],
            g.chunks,
        ) + _expected(
            CounterMetricFamily, "kcore_test_bytes", "Bytes.", ["topic", "partition"], c.chunks
        )  # fmt: skip
        changed = sum(1 for key, rows in c.chunks.items() if previous.get(key) != rows)
        assert counter.formatted_chunks - before == changed
        previous = {key: list(rows) for key, rows in c.chunks.items()}


def test_plain_families_and_chunked_ones_render_in_collection_order():
    family = PartitionFamily(GaugeMetricFamily, "kcore_test_size", "Size.", ["topic"])
    rows = family.rows()
    rows.add(("orders",), (0, 10))
    rows.add(("orders",), (1, 20))
    before = GaugeMetricFamily("kcore_test_before", "Before.")
    before.add_metric([], 1)
    after = GaugeMetricFamily("kcore_test_after", "After.")
    after.add_metric([], 2)
    text = render([before, rows, after]).decode()
    names = [f.name for f in text_string_to_metric_families(text)]
    assert names == ["kcore_test_before", "kcore_test_size", "kcore_test_after"]
    (size,) = [f for f in text_string_to_metric_families(text) if f.name == "kcore_test_size"]
    assert [(s.labels, s.value) for s in size.samples] == [
        ({"topic": "orders", "partition": "0"}, 10),
        ({"topic": "orders", "partition": "1"}, 20),
    ]
