"""The mirror fetcher (spec §4.3): a cluster mirror's partitions copied from the source cluster.

A :class:`MirrorFetcherManager` is one mirror's ``FetcherManager``
(``kcore.replica.fetcher``) whose leaders are the **source** cluster's partition leaders,
reached through :class:`~kcore.mirror.remote_endpoint.RemoteLeaderEndpoint` over the mirror's
own connection pool (D-25); the local side is a :class:`MirrorPartitionHandler` over this
broker's replica manager. Kafka's KIP-1279 names the pair MirrorFetcherManager /
MirrorFetcherThread.

What happens to a fetched response, per partition (the destination partition has the source
partition's topic name, index and topic id):

1. :func:`kcore.mirror.batches.prepare_mirrored_batches` frames it in one pass over the batch
   headers, rewrites the producer ids (D-17) into replacement headers, and stops at the first
   batch whose leader epoch is above the destination partition's (D-11);
2. the batches are appended as a follower appends them (``ReplicaManager.append_as_follower``
   with ``AppendOrigin.MIRROR``, which the read-only guard lets in): CRCs checked as received,
   offsets, timestamps and partition leader epochs kept, payloads written without a copy, no
   per-record work; producer state learns the rewritten ids and the destination's high
   watermark and LSO move as for any append (M-30);
3. on an epoch fence the partition stops fetching and the listener's ``on_epoch_fencing(tp,
   epoch)`` is told; the state machine bumps the destination's leader epoch
   (BumpLeaderEpochs, EPOCH_FENCING) and calls :meth:`MirrorFetcherManager.resume_partition`;
4. a diverging epoch reported by the source (Fetch v12+ ``LastFetchedEpoch``, M-27) truncates
   the destination to where that epoch ends; no OffsetsForLeaderEpoch is ever sent;
5. out of range (D-16): below the source's log start offset the destination log is emptied
   and restarted at the source's log start offset (offsets stay identical); above the source's
   high watermark with no divergence the partition leaves the fetcher and the listener's
   ``on_partition_failed(tp, reason)`` is told (the state machine moves it to FAILED);
6. NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (and the other stale-metadata errors) refresh
   the source metadata and move the partition to its new leader's fetcher;
7. a source that refuses the mirror (M-114, M-115: its login fails, SASL_AUTHENTICATION_FAILED;
   or its ACLs lack Describe or Read on the topic, TOPIC_AUTHORIZATION_FAILED) is no network
   fault to wait out: the listener's ``on_source_refused(partitions, code, reason)`` is told at
   once, with a reason from :mod:`kcore.mirror.source_access` (the ACL to add on the source).

Partitions are added and removed by whoever runs the state machine (M-32: added on entering
MIRRORING, removed on PAUSING and STOPPING); each starts at the destination's log end offset
with its latest epoch as ``LastFetchedEpoch``, so a restart resumes with no gap and no
duplicate and truncation on fetch settles any divergence (D-14).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import AuthenticationFailed
from kcore.log.producer_state import AppendOrigin
from kcore.mirror.batches import prepare_mirrored_batches
from kcore.mirror.remote_endpoint import (
    FETCH_KEY,
    READ_COMMITTED,
    RemoteLeaderEndpoint,
    mirror_client_id,
)
from kcore.mirror.source_access import (
    authentication_reason,
    authorization_reason,
    is_authorization_error,
)
from kcore.mirror.throttle import MirrorThrottle
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.fetch_state import (
    AppendRecords,
    FetcherConfig,
    PartitionError,
    PartitionResponse,
    TopicPartition,
    TruncateOnDivergence,
)
from kcore.replica.fetcher import (
    AppendResult,
    FetcherManager,
    InitialFetchState,
    LeaderEndpoint,
    OutOfRangeAction,
)
from kcore.replica.follower import (
    refetch_if_cut,
    restart_inside_first_batch,
    truncate_to_divergence,
)
from kcore.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

READ_COMMITTED_FETCH_VERSION = 4  # KIP-98: Fetch's isolation_level
ADDED_SHOWN = 20  # partitions named in one "added fetcher" log line (a start adds thousands)

__all__ = [
    "AddedPartitions",
    "MirrorFetchListener",
    "MirrorFetcherManager",
    "MirrorPartitionHandler",
    "SourceOffsets",
]


class MirrorFetchListener(Protocol):
    """What the mirror fetcher tells the mirror's state machine (another piece of #13)."""

    def on_epoch_fencing(self, tp: TopicPartition, epoch: int) -> None:
        """D-11: a batch of leader epoch ``epoch`` is above the destination partition's epoch;
        fetching is held until ``MirrorFetcherManager.resume_partition``."""

    def on_partition_failed(self, tp: TopicPartition, reason: str) -> None:
        """The partition left the fetcher (D-16 above the source's end): FAILED, ``reason``."""

    def on_source_refused(
        self, partitions: Iterable[TopicPartition], code: ErrorCode, reason: str
    ) -> None:
        """The source refused the mirror's login or an ACL for ``partitions``: FAILED, with
        ``reason`` (the partitions stay in the fetcher, which keeps backing off)."""


class _NoListener:
    def on_epoch_fencing(self, tp: TopicPartition, epoch: int) -> None:
        log.warning("mirror partition %s-%d fenced at epoch %d (no listener)", *tp, epoch)

    def on_partition_failed(self, tp: TopicPartition, reason: str) -> None:
        log.warning("mirror partition %s-%d failed (no listener): %s", *tp, reason)

    def on_source_refused(self, partitions, code: ErrorCode, reason: str) -> None:
        log.warning("mirror partitions %s refused (no listener): %s", sorted(partitions), reason)


class SourceRefusals:
    """Turns the source's refusals into ``on_source_refused`` calls with a reason that says
    what to fix (``username``: the mirror's SASL user, for the ACL to add)."""

    def __init__(
        self, mirror: str, bootstrap: str, username: str | None, listener: MirrorFetchListener
    ) -> None:
        self.mirror = mirror
        self.bootstrap = bootstrap
        self.username = username
        self.listener = listener

    def authentication_failed(self, partitions: Iterable[TopicPartition], error) -> None:
        reason = authentication_reason(self.mirror, self.bootstrap, str(error))
        self.listener.on_source_refused(
            list(partitions), ErrorCode.SASL_AUTHENTICATION_FAILED, reason
        )

    def authorization_failed(self, tp: TopicPartition, code: int, operation: str) -> None:
        reason = authorization_reason(
            code,
            username=self.username,
            bootstrap=self.bootstrap,
            operation=operation,
            resource="topic",
            name=tp[0],
        )
        self.listener.on_source_refused([tp], ErrorCode(code), reason)


@dataclass(slots=True)
class SourceOffsets:
    """The source partition as its last fetch answer saw it (Describe's lag, D-19, D-32)."""

    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    last_fetch_ms: int = -1
    bytes_mirrored: int = 0
    batches_mirrored: int = 0
    records_mirrored: int = 0


@dataclass(frozen=True, slots=True)
class AddedPartitions:
    """What :meth:`MirrorFetcherManager.add_partitions` did: the partitions now fetched, and
    those it could not add with why (the ones no longer wanted are in neither)."""

    added: list[TopicPartition]
    refused: dict[TopicPartition, KafkaError]


class MirrorPartitionHandler:
    """The destination side of a mirror's fetchers (``PartitionHandler``)."""

    def __init__(
        self,
        mirror: str,
        replica_manager: ReplicaManager,
        listener: MirrorFetchListener,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        refusals: SourceRefusals | None = None,
    ) -> None:
        self.mirror = mirror
        self.replicas = replica_manager
        self.listener = listener
        self.refusals = refusals or SourceRefusals(mirror, "the source", None, listener)
        self.now_ms = now_ms
        self.source: dict[TopicPartition, SourceOffsets] = {}
        self.fenced: dict[TopicPartition, int] = {}

    def on_fetched(self, tp: TopicPartition, response: PartitionResponse) -> None:
        offsets = self.source.setdefault(tp, SourceOffsets())
        offsets.high_watermark = response.high_watermark
        offsets.last_stable_offset = response.last_stable_offset
        offsets.log_start_offset = response.log_start_offset
        offsets.last_fetch_ms = self.now_ms()

    def append(self, output: AppendRecords) -> AppendResult:
        tp = output.tp
        partition = self.replicas.partition_or_error(*tp)
        now = self.now_ms()
        offsets = self.source.setdefault(tp, SourceOffsets())
        refetch = refetch_if_cut(partition, output, f"mirror {self.mirror}")
        if refetch is not None:
            # The offsets in between were never fetched (a source's own gaps, after compaction,
            # are kept because the fetch is then made from the log end offset).
            return refetch
        fetch_offset = partition.log_end_offset
        prepared = prepare_mirrored_batches(output.records, fetch_offset, partition.leader_epoch)
        if prepared.batches:
            restart_inside_first_batch(partition, prepared.batches[0].base_offset, now)
            self.replicas.append_as_follower(
                tp, prepared.batches, now_ms=now, origin=AppendOrigin.MIRROR,
                headers=prepared.headers,
            )  # fmt: skip
            offsets.bytes_mirrored += prepared.bytes
            offsets.batches_mirrored += len(prepared.batches)
            offsets.records_mirrored += prepared.records
        if prepared.fenced_epoch is not None:
            self.fenced[tp] = prepared.fenced_epoch
            self.listener.on_epoch_fencing(tp, prepared.fenced_epoch)
        return AppendResult(
            partition.log_end_offset,
            prepared.last_epoch if prepared.last_epoch is not None else partition.latest_epoch,
            hold=prepared.fenced_epoch is not None,
        )

    def truncate_on_divergence(self, output: TruncateOnDivergence) -> tuple[int, int | None]:
        """Truncate to the end of the source's ``epoch`` (or of the destination's own, if its
        history has that epoch end earlier): Kafka's follower rule with truncation on fetch."""
        partition = self.replicas.partition_or_error(*output.tp)
        result = truncate_to_divergence(partition, output, self.now_ms())
        log.info(
            "mirror %s: %s-%d diverged from the source at epoch %d: truncated to %d",
            self.mirror, *output.tp, output.epoch, partition.log_end_offset,
        )  # fmt: skip
        return result

    async def resolve_out_of_range(
        self, tp: TopicPartition, fetch_offset: int, endpoint: LeaderEndpoint, leader_epoch: int
    ) -> OutOfRangeAction:
        """Decision D-16."""
        source_start = await endpoint.earliest_offset(tp, leader_epoch)
        if fetch_offset < source_start:
            partition = self.replicas.partition_or_error(*tp)
            partition.truncate_fully_and_start_at(source_start, self.now_ms())
            log.info(
                "mirror %s: %s-%d restarted at the source's log start offset %d (was %d)",
                self.mirror, *tp, source_start, fetch_offset,
            )  # fmt: skip
            return OutOfRangeAction(restart_at=source_start)
        source_end = await endpoint.latest_offset(tp, leader_epoch)
        if fetch_offset > source_end:
            return OutOfRangeAction(
                fail=(
                    f"the destination log end offset {fetch_offset} of {tp[0]}-{tp[1]} is above "
                    f"the source's log end offset {source_end} with no diverging epoch: the "
                    "source lost data the destination has (decision D-16)"
                )
            )
        return OutOfRangeAction(truncate_to=fetch_offset)  # in range by now: fetch again

    def on_error(self, error: PartitionError) -> None:
        log.info(
            "mirror %s: %s-%d answered error %d (%s)", self.mirror, *error.tp,
            error.error_code, error.message or "",
        )  # fmt: skip
        if is_authorization_error(error.error_code):  # the source's ACLs lack Read (M-115)
            self.refusals.authorization_failed(error.tp, error.error_code, "Read")

    def on_failed(self, tp: TopicPartition, reason: str) -> None:
        log.warning("mirror %s: %s-%d failed: %s", self.mirror, *tp, reason)
        self.listener.on_partition_failed(tp, reason)


class _SourceLeaders:
    """``LeaderLocator`` over the mirror's client: the source metadata, refreshed on demand;
    a refused login or Describe is reported (and raised: the partition keeps looking)."""

    def __init__(self, client: KafkaClient, refusals: SourceRefusals) -> None:
        self.client = client
        self.refusals = refusals

    async def find_leader(self, tp: TopicPartition, *, refresh: bool) -> tuple[int, int]:
        try:
            leader = await self.client.find_leader(tp[0], tp[1], refresh=refresh)
        except AuthenticationFailed as e:
            self.refusals.authentication_failed([tp], e)
            raise
        except KafkaError as e:
            if is_authorization_error(e.code):
                self.refusals.authorization_failed(tp, e.code, "Describe")
            raise
        info = self.client.metadata.partition(tp[0], tp[1])
        return leader, info.leader_epoch


#: The mirror fetcher's fetch sizes: many batches per append (the #13 target), but responses
#: small enough that their buffers are reused (kcore/protocol/framing.py keeps spares up to
#: 32 MiB; a fresh 64 MiB buffer is fresh pages, which cost more to fault in than to fill) and
#: that the write-behind queue holds several (the next response arrives while one is written).
MIRROR_FETCHER_CONFIG = FetcherConfig(
    max_bytes=16 * 1024 * 1024,
    partition_max_bytes=8 * 1024 * 1024,
    min_bytes=1,
    max_wait_ms=500,
    isolation_level=READ_COMMITTED,
)


class MirrorFetcherManager:
    """One mirror's fetchers on this broker (see the module docstring).

    ``clients(fetcher_number)`` returns the mirror's KafkaClient for that fetcher number; by
    default one client per number, built from ``bootstrap_servers`` and ``client_options``
    with the M-31 client id, so with ``num_fetchers=1`` (the default) the mirror has exactly
    one connection pool (D-25). ``throttle`` is the broker's mirror replication throttle, shared
    by every mirror (None: none). Use ``async with`` or ``await nursery.start(manager.run)``.
    """

    def __init__(
        self,
        mirror: str,
        broker_id: int,
        replica_manager: ReplicaManager,
        bootstrap_servers: str,
        *,
        listener: MirrorFetchListener | None = None,
        config: FetcherConfig = MIRROR_FETCHER_CONFIG,
        num_fetchers: int = 1,
        client_options: Mapping[str, object] | None = None,
        throttle: MirrorThrottle | None = None,
    ) -> None:
        if config.isolation_level != READ_COMMITTED:
            raise ValueError("the mirror fetcher reads with READ_COMMITTED only (D-19)")
        self.mirror = mirror
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.bootstrap_servers = bootstrap_servers
        self._client_options = dict(client_options or {})
        self.throttle = throttle
        self._clients: dict[int, KafkaClient] = {}
        listener = listener or _NoListener()
        sasl = self._client_options.get("sasl")
        self.refusals = SourceRefusals(
            mirror, bootstrap_servers, getattr(sasl, "username", None), listener
        )
        self.handler = MirrorPartitionHandler(
            mirror, replica_manager, listener, refusals=self.refusals
        )
        self.manager = FetcherManager(
            f"mirror-{mirror}",
            self._endpoint,
            self.handler,
            _SourceLeaders(self.client(0), self.refusals),
            config=config,
            num_fetchers=num_fetchers,
            wall_clock_ms=self.handler.now_ms,
        )

    def client(self, fetcher_number: int) -> KafkaClient:
        client = self._clients.get(fetcher_number)
        if client is None:
            client = self._clients[fetcher_number] = KafkaClient(
                self.bootstrap_servers,
                client_id=mirror_client_id(self.broker_id, fetcher_number, self.mirror),
                **self._client_options,
            )
        return client

    def _endpoint(self, leader_id: int, fetcher_number: int) -> RemoteLeaderEndpoint:
        return RemoteLeaderEndpoint(
            self.client(fetcher_number),
            leader_id,
            throttle=self.throttle,
            on_authentication_failed=self.refusals.authentication_failed,
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.manager.run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        await self.manager.aclose()
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    # -- membership (the state machine calls these) -------------------------------------------

    async def add_partitions(
        self,
        tps: Iterable[TopicPartition],
        still_wanted: Callable[[TopicPartition], bool] = lambda tp: True,
    ) -> AddedPartitions:
        """Start mirroring ``tps`` (M-32: on entering MIRRORING, resume included): each from
        the destination's log end offset, its latest epoch as ``LastFetchedEpoch``. Looks up
        the source leaders first, in one Metadata request for all of them and one version
        check per leader (raises what the client raises if it cannot ask at all).

        ``still_wanted(tp)`` is asked once those lookups are done, just before the partitions
        join a fetcher: the caller may have asked for a removal meanwhile (a leadership ended,
        a stop began), and an add that landed after it would fetch for a partition nobody
        drives. A partition whose source leader is unknown, or refuses (D-19), is not added
        and is in ``refused`` with why; the others are added."""
        tps = list(dict.fromkeys(tps))
        client = self.client(0)
        await client.refresh_metadata(sorted({t for t, _ in tps}))
        refused: dict[TopicPartition, KafkaError] = {}
        leaders: dict[TopicPartition, int] = {}
        for tp in tps:
            try:
                leaders[tp] = client.metadata.leader_for(*tp)
            except KafkaError as e:
                refused[tp] = e
        for leader in sorted(set(leaders.values())):
            try:
                await self._check_fetch_version(client, leader)
            except KafkaError as e:
                for tp in [tp for tp, at in leaders.items() if at == leader]:
                    refused[tp] = e
                    del leaders[tp]
        states = {}
        for tp, leader in leaders.items():
            if not still_wanted(tp):
                continue
            try:
                partition = self.replica_manager.partition_or_error(*tp)
            except KafkaError as e:  # no longer here (deleted meanwhile): that one only
                refused[tp] = e
                continue
            states[tp] = InitialFetchState(
                topic_id=partition.topic_id,
                leader_id=leader,
                leader_epoch=client.metadata.partition(*tp).leader_epoch,
                fetch_offset=partition.log_end_offset,
                last_fetched_epoch=partition.latest_epoch,
            )
        self.manager.add_fetcher_for_partitions(states)
        if states:
            shown = list(states.items())[:ADDED_SHOWN]
            more = len(states) - len(shown)
            log.info(
                "mirror %s: added fetcher for %s%s", self.mirror,
                ", ".join(f"{t}-{p} at {s.fetch_offset} (source leader {s.leader_id})"
                          for (t, p), s in shown),
                f" and {more} more" if more else "",
            )  # fmt: skip
        return AddedPartitions(list(states), refused)

    async def _check_fetch_version(self, client: KafkaClient, leader: int) -> None:
        """D-19 needs READ_COMMITTED, which Fetch has from v4 (KIP-98): a source leader that
        cannot do it is refused, and the partition FAILS saying so. Below v12 (M-28) the fetcher
        leaves LastFetchedEpoch out and mirrors without divergence detection."""
        version = (await client.connection(leader)).version_for(FETCH_KEY)
        if version < READ_COMMITTED_FETCH_VERSION:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"source broker {leader} supports Fetch up to v{version}; a mirror needs v"
                f"{READ_COMMITTED_FETCH_VERSION}+ to read committed data only (D-19)",
            )

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Stop mirroring ``tps`` (M-32: on PAUSING and STOPPING); returns their fetch offsets."""
        tps = list(tps)
        for tp in tps:
            self.handler.fenced.pop(tp, None)
        removed = self.manager.remove_fetcher_for_partitions(tps)
        if removed:
            log.info(
                "mirror %s: removed fetcher for %s", self.mirror,
                ", ".join(f"{t}-{p} (was at {o})" for (t, p), o in removed.items()),
            )  # fmt: skip
        return removed

    def resume_partition(self, tp: TopicPartition) -> None:
        """Fetch again after EPOCH_FENCING: the destination's leader epoch was bumped."""
        self.handler.fenced.pop(tp, None)
        self.manager.resume_partition(tp)

    @property
    def partitions(self) -> set[TopicPartition]:
        return self.manager.partitions

    def source_offsets(self, tp: TopicPartition) -> SourceOffsets | None:
        """The source partition as the last fetch answer saw it. In a fetch session an answer
        carries only partitions with news, so ``last_fetch_ms`` is that of the last answered
        fetch that covered ``tp``, whether or not ``tp`` was in the answer."""
        offsets = self.handler.source.get(tp)
        answered = self.manager.last_answered(tp)
        if offsets is None or answered is None:
            return offsets
        if answered <= offsets.last_fetch_ms:
            return offsets
        return dataclasses.replace(offsets, last_fetch_ms=answered)

    def connection_state(self) -> str:
        """How this mirror reaches its source (D-32): ``unreachable`` while a partition's
        source leader cannot be found, or no connection is open and the last attempt to open
        one failed; ``connected`` while a connection is open; ``connecting`` before the
        first one."""
        manager = self.manager
        if any(manager.unreachable(tp) is not None for tp in manager.partitions):
            return "unreachable"
        clients = list(self._clients.values())
        if any(client.connected() for client in clients):
            return "connected"
        if any(client.failing() for client in clients):
            return "unreachable"
        return "connecting"

    async def __aenter__(self) -> MirrorFetcherManager:
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        await nursery.start(self.run)
        return self

    async def __aexit__(self, *exc) -> None:
        self._nursery_cm.cancel_scope.cancel()
        await self._nursery_cm.__aexit__(*exc)
