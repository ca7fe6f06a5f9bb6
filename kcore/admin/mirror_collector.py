"""The cluster mirrors' figures for ``/metrics`` (D-32), read when scraped.

Per mirror partition this node leads (the one whose mirror fetcher copies it; the other nodes
report nothing for it, as DescribeClusterMirrors leaves their numbers at -1): its state and
retry count, from its state machine's last durable record — what the coordinator holds, which
Describe reads — and its offsets, lag and last fetch age from ``broker.mirror_stats``, the very
:class:`~kcore.server.handlers.cluster_mirrors.LocalMirrorStats` Describe reports, so lag here
is Describe's lag. Bytes and records mirrored are the mirror fetcher's counters (reset when
the fetcher is rebuilt: a leader change, a reconnect after a config change). A figure Describe
reports as -1 (unknown) is left out rather than exported as -1, so ``max()`` and alerts on lag
see only real values.

Per mirror: the connection state of its fetcher on this node, the partitions by state, their
total lag, and on the mirror's coordinator the metadata sync's last success age and errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kcore.admin.partition_families import PartitionFamily, Rows
from kcore.metadata.mirrors import mirrors_image

CHUNK_LABELS = ["mirror", "topic"]  # then "partition": a chunk is a mirror's topic
CONNECTION_STATES = ("idle", "connecting", "connected", "unreachable")


class MirrorCollector:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._families = _PartitionFamilies()

    def collect(self) -> Iterator[Metric | Rows]:
        broker = self.broker
        mirrors = mirrors_image(broker.metadata_image).mirrors
        if not mirrors and not broker.mirror_manager.drivers:
            return
        families, lags, states = self._partitions()
        yield from families
        yield from self._mirrors(mirrors, lags, states)

    def _partitions(self):
        """The per-partition families, and per mirror the total lag and the state counts."""
        broker = self.broker
        stats_of = broker.mirror_stats.partition_stats
        fetchers = broker.mirror_fetchers
        f = self._families
        state, lag_rows, hw, lso, leo = (
            f.state.rows(), f.lag.rows(), f.hw.rows(), f.lso.rows(), f.leo.rows()
        )  # fmt: skip
        fetch_age, retries = f.fetch_age.rows(), f.retries.rows()
        mirrored_bytes, mirrored_records = f.bytes.rows(), f.records.rows()
        lags: dict[str, int] = {}
        states_by_mirror: dict[str, dict[str, int]] = {}
        for (topic, index), driver in list(broker.mirror_manager.drivers.items()):
            mirror = driver.mirror
            chunk = (mirror, topic)
            record = driver.machine.record
            state_name = record.state.name
            state.add(chunk, (index, state_name, 1))
            retries.add(chunk, (index, record.retry_attempt))
            states = states_by_mirror.setdefault(mirror, {})
            states[state_name] = states.get(state_name, 0) + 1
            stats = stats_of(mirror, topic, index)
            if stats.destination_offset >= 0:
                leo.add(chunk, (index, stats.destination_offset))
            if stats.source_offset >= 0:
                hw.add(chunk, (index, stats.source_offset))
            if stats.source_lso >= 0:
                lso.add(chunk, (index, stats.source_lso))
            if stats.last_fetch_age_ms >= 0:
                fetch_age.add(chunk, (index, stats.last_fetch_age_ms / 1000))
            lag = stats.lag
            if lag >= 0:
                lag_rows.add(chunk, (index, lag))
                lags[mirror] = lags.get(mirror, 0) + lag
            fetcher = fetchers.get(mirror)
            source = None if fetcher is None else fetcher.source_offsets((topic, index))
            if source is not None:
                mirrored_bytes.add(chunk, (index, source.bytes_mirrored))
                mirrored_records.add(chunk, (index, source.records_mirrored))
        collected = (
            state, lag_rows, hw, lso, leo, fetch_age, retries, mirrored_bytes, mirrored_records
        )  # fmt: skip
        return collected, lags, states_by_mirror

    def _mirrors(self, mirrors, lags, states_by_mirror) -> Iterator[Metric]:
        broker = self.broker
        connection = GaugeMetricFamily(
            "kcore_mirror_connection_state",
            "1 for the state of the mirror's connection to its source from this node: idle "
            "(it leads no partition that fetches), connecting, connected, unreachable.",
            labels=["mirror", "state"],
        )
        partitions = GaugeMetricFamily(
            "kcore_mirror_partitions",
            "The mirror's partitions this node leads, by state.",
            labels=["mirror", "state"],
        )
        lag = GaugeMetricFamily(
            "kcore_mirror_lag_records",
            "The sum of the lag of the mirror's partitions this node leads.",
            labels=["mirror"],
        )
        sync_age = GaugeMetricFamily(
            "kcore_mirror_last_sync_age_seconds",
            "Time since the mirror's last successful metadata sync round (on its coordinator).",
            labels=["mirror"],
        )
        sync_errors = GaugeMetricFamily(
            "kcore_mirror_sync_errors",
            "Errors of the mirror's last metadata sync round (on its coordinator).",
            labels=["mirror"],
        )
        now_ms = broker.clock.wall_ms()
        names = dict.fromkeys([*mirrors, *states_by_mirror])
        for name in names:
            fetcher = broker.mirror_fetchers.get(name)
            state = "idle" if fetcher is None else fetcher.connection_state()
            connection.add_metric([name, state], 1)
            for partition_state, count in states_by_mirror.get(name, {}).items():
                partitions.add_metric([name, partition_state], count)
            lag.add_metric([name], lags.get(name, 0))
            status = broker.mirror_sync.status.get(name)
            if status is not None:
                if status.last_sync_ms >= 0:
                    sync_age.add_metric([name], max(now_ms - status.last_sync_ms, 0) / 1000)
                sync_errors.add_metric([name], len(status.errors))
        yield from (connection, partitions, lag, sync_age, sync_errors)


class _PartitionFamilies:
    """The per-partition families, kept across scrapes (each keeps its formatted chunks)."""

    def __init__(self) -> None:
        def gauge(name: str, text: str, more: tuple[str, ...] = ()) -> PartitionFamily:
            return PartitionFamily(GaugeMetricFamily, name, text, CHUNK_LABELS, more)

        def counter(name: str, text: str) -> PartitionFamily:
            return PartitionFamily(CounterMetricFamily, name, text, CHUNK_LABELS)

        self.state = gauge(
            "kcore_mirror_partition_state",
            "1 for the mirror partition's state (its last durable one).",
            ("state",),
        )
        self.lag = gauge(
            "kcore_mirror_partition_lag_records",
            "Source high watermark minus destination log end offset (DescribeClusterMirrors' lag).",
        )
        self.hw = gauge(
            "kcore_mirror_partition_source_high_watermark",
            "The source partition's high watermark in the last fetch answer.",
        )
        self.lso = gauge(
            "kcore_mirror_partition_source_last_stable_offset",
            "The source partition's last stable offset in the last fetch answer.",
        )
        self.leo = gauge(
            "kcore_mirror_partition_destination_log_end_offset",
            "The destination partition's log end offset.",
        )
        self.fetch_age = gauge(
            "kcore_mirror_partition_last_fetch_age_seconds",
            "Time since the last successful fetch from the source.",
        )
        self.retries = gauge(
            "kcore_mirror_partition_retries",
            "Automatic retries of a FAILED partition since it last made progress (D-13).",
        )
        self.bytes = counter(
            "kcore_mirror_partition_bytes",
            "Bytes of record batches mirrored into the partition by this node's fetcher.",
        )
        self.records = counter(
            "kcore_mirror_partition_records",
            "Records mirrored into the partition by this node's fetcher (control records "
            "included).",
        )
