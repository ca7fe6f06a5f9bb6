"""The MirrorMetadataManager's Trio shell: read both clusters, plan, apply, on a timer.

Theory of operation
-------------------
Every broker runs one :class:`MirrorMetadataSync`. For each existing mirror whose
ClusterMirrorCoordinator this broker is (it leads the ``__mirror_state`` partition the mirror's
name hashes to, D-08: :meth:`MirrorCoordinatorService.is_coordinator`), it runs a **round**
every ``mirror.metadata.refresh.interval.ms`` (a dynamic broker config, read before each wait,
M-12), and sooner when the mirror changes in the metadata (created, topics started, configs
altered: :meth:`MirrorMetadataSync.on_metadata_update`) or when asked
(:meth:`request_round`). When the coordinator moves, the new one starts at once: everything a
round needs is in the metadata image, in ``__mirror_state`` (the ACL provenance, D-22) or on
the source; only the status of the last round (:class:`SyncStatus`) is this broker's.

A round of mirror ``m``, bounded by :data:`ROUND_TIMEOUT_S` (a source that does not answer
fails the round, reported, and the next round tries again; data mirroring goes on meanwhile):

1. **read the source** over the mirror's own ``kcore.client`` connection (its configs:
   bootstrap servers, timeouts; D-25), in few batched requests: one Metadata of every topic,
   then, a few at a time (:data:`READ_CONCURRENCY`), DescribeConfigs of the mirrored and
   discovered topics (:data:`CONFIG_BATCH` per request), ListGroups (every broker), OffsetFetch
   v8+ of up to 100 groups per request, one DescribeAcls.
   A refused part (an authorizer, an old broker) is recorded and the rest goes on;
2. **read the destination**: topics, configs, ACLs from the metadata image; groups
   (ListGroups, DescribeGroups, OffsetFetch) and the high watermarks of the partitions whose
   offsets are to be committed (ListOffsets) over a client of this cluster;
3. **plan** (:func:`kcore.mirror.metadata_sync.plan_sync`) and **apply**, in the plan's order,
   through the controller (StartMirrorTopics, StopMirrorTopics, CreatePartitions,
   IncrementalAlterConfigs, CreateAcls, DeleteAcls: the same controller operations the
   handlers forward) and the destination's group coordinators (OffsetCommit, a few at a time);
   then the ACL provenance is persisted in ``__mirror_state`` (after the ACLs exist: a crash in
   between forgets an ACL rather than ever deleting one the mirror did not create).

Mirrors are synced one after the other, and every step yields, so the broker keeps serving; the
requests are batched so a source of thousands of topics and groups costs a few round trips.

A paused mirror (every topic ``<m>.paused``) is not synced (M-24); a source whose cluster id is
not the recorded one halts the sync (D-24) and the status says so.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable

import trio

from kcore.client.acls import AclBindingFilter, describe_acls
from kcore.client.admin import (
    LATEST_TIMESTAMP,
    ConfigResourceType,
    describe_configs,
    list_offsets,
)
from kcore.client.cluster import KafkaClient
from kcore.client.errors import AuthenticationFailed, ClientError
from kcore.client.groups import describe_groups, list_groups, offset_commit, offset_fetch_groups
from kcore.metadata import mirror_configs as mc
from kcore.metadata.image import StandardAcl
from kcore.metadata.mirrors import ClusterMirrorImage, MirrorMode, mirrors_image
from kcore.mirror.metadata_sync import (
    DestinationGroup,
    DestinationTopic,
    DestinationView,
    MirrorSyncSpec,
    SourceGroup,
    SourceTopic,
    SourceView,
    SyncPlan,
    SyncStatus,
    acl_sort_key,
    create_acls_request,
    delete_acls_request,
    discovered_topics,
    plan_sync,
    synced_topics,
)
from kcore.mirror.records import MIRROR_STATE
from kcore.mirror.source_access import (
    authentication_reason,
    authorization_reason,
    is_authorization_error,
)
from kcore.mirror.state import MirrorOperation, check_operation
from kcore.protocol.errors import ErrorCode, KafkaError

__all__ = ["MirrorMetadataSync", "REFRESH_INTERVAL_KEY"]

log = logging.getLogger(__name__)

REFRESH_INTERVAL_KEY = "mirror.metadata.refresh.interval.ms"
ROUND_TIMEOUT_S = 60.0  # for the reads of one round
APPLY_TIMEOUT_S = 120.0  # for its changes
COMMIT_ATTEMPTS = 3  # per group: a coordinator that keeps moving is tried by the next round
# Topics one round starts (100 per controller batch): a source of thousands of new topics is
# discovered over a few rounds, each following the last at once (its changes ask for it).
MAX_STARTS_PER_ROUND = 200
# Topics per DescribeConfigs. An answer is decoded in one step of the loop (~36 configs a
# topic): 500 topics took ~100 ms on a loaded VM, long enough to show in the destination's own
# fetch p99; 100 is ~20 ms, and 1,000 topics are still 10 requests.
CONFIG_BATCH = 100
READ_CONCURRENCY = 4  # the source reads of a round in flight at once
COMMIT_CONCURRENCY = 32  # OffsetCommits in flight (each one group: the protocol's limit)
# A metadata change wakes the sync at most this often (its own changes wake it once more).
MIN_GAP_S = 0.2
POLL_S = 1.0
_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs ConfigSource


class MirrorMetadataSync:
    """See the module docstring. ``broker`` is the :class:`~kcore.server.broker.BrokerServer`;
    ``own_client()`` makes a :class:`KafkaClient` of the broker's own cluster;
    ``find_coordinator(mirror)`` awaits the node id of the mirror's coordinator, creating
    ``__mirror_state`` when it is missing (FindCoordinator's path)."""

    def __init__(self, broker, *, own_client, find_coordinator) -> None:
        self.broker = broker
        self._make_own_client = own_client
        self._find_coordinator = find_coordinator
        self.status: dict[str, SyncStatus] = {}
        self._last_round: dict[str, float] = {}  # mirror -> trio time its last round began
        self._requested: dict[str, float] = {}  # mirror -> a round asked for by then
        self._wake = trio.Event()
        self._sources: dict[str, tuple[dict, KafkaClient]] = {}  # mirror -> (configs, client)
        self._own: KafkaClient | None = None
        self._round_lock = trio.Lock()

    # -- when ----------------------------------------------------------------------------------

    def interval_s(self) -> float:
        return self.broker.dynamic_value(REFRESH_INTERVAL_KEY) / 1000

    def request_round(self, mirrors: Iterable[str] | None = None) -> None:
        """Run a round of ``mirrors`` (all when None) soon: at once, or :data:`MIN_GAP_S` after
        the mirror's last round began (its own changes wake it once more, not in a loop)."""
        now = trio.current_time()
        names = list(self._last_round) if mirrors is None else list(mirrors)
        for name in names:
            at = max(now, self._last_round.get(name, -math.inf) + MIN_GAP_S)
            self._requested[name] = min(self._requested.get(name, math.inf), at)
        self._wake.set()

    def on_metadata_update(self, delta) -> None:
        """A mirror created, altered or whose topics changed gets a round soon (M-12: "on
        demand when a mirror is created or started")."""
        part = getattr(delta, "extension_deltas", {}).get("mirrors")
        if part is not None and part.changed_mirrors:
            # Outside Trio (a test replaying metadata) nothing runs: RuntimeError.
            with contextlib.suppress(RuntimeError):
                self.request_round(part.changed_mirrors)

    def _due_at(self, name: str) -> float:
        """When the mirror's next round is due: an interval after its last one began (the
        interval as configured now), or sooner when asked."""
        periodic = self._last_round.get(name, -math.inf) + self.interval_s()
        return min(periodic, self._requested.get(name, math.inf))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self.broker.ready.wait()
        try:
            while True:
                self._wake = trio.Event()
                owned = await self._owned()
                for name in owned:
                    if self._due_at(name) <= trio.current_time():
                        self._last_round[name] = trio.current_time()
                        self._requested.pop(name, None)
                        await self.sync_once(name)
                if self._wake.is_set():
                    continue
                upcoming = min((self._due_at(n) for n in owned), default=math.inf)
                # Look again at least every POLL_S: the coordinator of a mirror may move or
                # finish loading, and the interval may be altered, without a delta of the mirror.
                wait = min(upcoming - trio.current_time(), POLL_S)
                with trio.move_on_after(max(wait, 0.0)):
                    await self._wake.wait()
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def _owned(self) -> list[str]:
        """The existing mirrors this broker coordinates now. Creates ``__mirror_state`` when a
        mirror with include patterns exists and it does not, so that auto-discovery has a
        coordinator to run it (a mirror's first started topic creates it otherwise)."""
        broker = self.broker
        mirrors = mirrors_image(broker.metadata_image).mirrors
        names = list(mirrors)
        discovering = [n for n, x in mirrors.items() if x.include_patterns]
        if discovering and MIRROR_STATE not in broker.metadata_image.topics.by_name:
            try:
                await self._find_coordinator(discovering[0])
            except KafkaError as e:
                log.info("mirror metadata sync: waiting for the coordinator topic: %s", e)
        owned = [n for n in names if broker.mirror_coordinator.is_coordinator(n)]
        for gone in set(self._last_round) - set(owned):
            self._last_round.pop(gone, None)
            self._requested.pop(gone, None)
            self.status.pop(gone, None)
        for gone in set(self._sources) - set(names):
            await self._close_source(gone)
        return owned

    # -- one round -----------------------------------------------------------------------------

    async def sync_once(self, name: str) -> SyncStatus:
        """Run one round of mirror ``name`` now (on its coordinator); returns its status."""
        async with self._round_lock:
            status = self.status.setdefault(name, SyncStatus())
            status.last_attempt_ms = self.broker.clock.wall_ms()
            try:
                plan = await self._round(name)
            except AuthenticationFailed as e:  # M-114: say which credentials to fix
                mirror = mirrors_image(self.broker.metadata_image).mirror(name)
                bootstrap = "" if mirror is None else mirror.bootstrap_servers
                status.errors = [
                    f"sync round failed: SASL_AUTHENTICATION_FAILED: "
                    f"{authentication_reason(name, bootstrap, str(e))}"
                ]
                log.warning("mirror %s: metadata sync round failed: %s", name, status.errors[0])
                return status
            except (ClientError, KafkaError, OSError, trio.TooSlowError) as e:
                status.errors = [f"sync round failed: {_describe_error(e)}"]
                log.warning("mirror %s: metadata sync round failed: %s", name, status.errors[0])
                return status
            except Exception as e:  # a bug must not end the broker's sync loop
                log.exception("mirror %s: metadata sync round failed", name)
                status.errors = [f"sync round failed: {type(e).__name__}: {e}"]
                return status
            if plan is None:  # paused, or gone
                return status
            if plan.halted:
                status.errors = [plan.halted]
                log.error("mirror %s: %s", name, plan.halted)
                # D-24: data replication halts too; the partitions say why.
                code = ErrorCode.MIRROR_SOURCE_CLUSTER_ID_MISMATCH
                self.broker.mirror_manager.fail_mirror(name, code, plan.halted)
                return status
            status.last_sync_ms = self.broker.clock.wall_ms()
            status.notes = plan.notes
            status.errors = plan.errors
            changes = plan.changes()
            if changes:
                status.changes, status.last_change_ms = changes, status.last_sync_ms
                log.info("mirror %s: metadata sync changed %s", name, _summary(changes))
            return status

    async def _round(self, name: str) -> SyncPlan | None:
        image = self.broker.metadata_image
        mirror = mirrors_image(image).mirror(name)
        if mirror is None:
            return None
        modes = set(mirror.topics.values())
        if modes == {MirrorMode.PAUSED}:
            status = self.status[name]
            status.notes = ["paused: every topic of the mirror is paused, so the sync is (M-24)"]
            status.errors = []
            return None
        spec = MirrorSyncSpec(
            name=name,
            include=tuple(mirror.include_patterns),
            exclude=tuple(mirror.exclude_patterns),
            source_cluster_id=mirror.source_cluster_id,
            synced_acls=self.broker.mirror_coordinator.synced_acls(name),
        )
        destination = self._destination_topics(image)
        # The reads are bounded (a source that does not answer fails the round); so is the
        # applying, by the plan's size (MAX_STARTS_PER_ROUND) and APPLY_TIMEOUT_S.
        began = trio.current_time()
        with trio.fail_after(ROUND_TIMEOUT_S):
            client = await self._source(mirror)
            source = await self._read_source(client, spec, destination)
            read_source = trio.current_time()
            if not (spec.source_cluster_id and source.cluster_id != spec.source_cluster_id):
                destination = await self._read_destination_groups(spec, source, destination)
        read = trio.current_time()
        plan = plan_sync(spec, source, destination, max_start=MAX_STARTS_PER_ROUND)
        if plan.halted:
            return plan
        # Bounded too: what is not applied by then is planned again by the next round.
        with trio.move_on_after(APPLY_TIMEOUT_S) as applying:
            await self._apply(name, plan)
        if applying.cancelled_caught:
            plan.errors.append(
                f"the round's changes were not all applied within {APPLY_TIMEOUT_S:.0f} s; "
                "the next round goes on"
            )
        log.debug(
            "mirror %s: sync round read the source in %.3f s, the destination in %.3f s, "
            "planned and applied in %.3f s",
            name, read_source - began, read - read_source, trio.current_time() - read,
        )  # fmt: skip
        return plan

    # -- reading -------------------------------------------------------------------------------

    def _destination_topics(self, image) -> DestinationView:
        memberships = mirrors_image(image).topics
        configs = image.configs
        topics = {
            name: DestinationTopic(
                name,
                t.topic_id,
                t.num_partitions,
                dict(configs.topic(name)),
                memberships.get(name),
            )
            for name, t in image.topics.by_name.items()
        }
        return DestinationView(topics=topics, acls=frozenset(image.acls.acls.values()))

    async def _source(self, mirror: ClusterMirrorImage) -> KafkaClient:
        """The mirror's connection to its source, rebuilt when its configs change (M-68)."""
        configs = dict(mirror.configs)
        held = self._sources.get(mirror.name)
        if held is not None and held[0] == configs:
            return held[1]
        await self._close_source(mirror.name)
        client = KafkaClient(
            configs[mc.BOOTSTRAP_SERVERS],
            client_id=f"kcore-mirror-sync-{mirror.name}",
            **mc.client_settings(configs),
        )
        self._sources[mirror.name] = (configs, client)
        return client

    async def _read_source(self, client, spec, destination: DestinationView) -> SourceView:
        metadata = await client.refresh_metadata(None)
        topics = {
            n: SourceTopic(n, t.topic_id, len(t.partitions))
            for n, t in metadata.topics.items()
            if not t.is_internal
        }
        if spec.source_cluster_id and metadata.cluster_id != spec.source_cluster_id:
            return SourceView(metadata.cluster_id, topics)
        synced = synced_topics(spec, destination)
        wanted = [t for t in synced if t in topics]
        wanted += discovered_topics(spec, topics, destination)
        found: dict = {"groups": (None, None)}
        failures: list[BaseException] = []
        limiter = trio.CapacityLimiter(READ_CONCURRENCY)

        async def configs(names: list[str]) -> None:
            async with limiter:
                response = await describe_configs(
                    client, [(ConfigResourceType.TOPIC, t) for t in names]
                )
            for result in response.results:
                if result.error_code or result.resource_name not in topics:
                    continue  # the topic keeps configs=None: its configs are not synced
                base = topics[result.resource_name]
                dynamic = {
                    c.name: c.value
                    for c in result.configs
                    if c.config_source == _DYNAMIC_TOPIC_CONFIG and c.value is not None
                }
                topics[base.name] = SourceTopic(base.name, base.topic_id, base.partitions, dynamic)

        async def groups() -> None:
            found["groups"] = await _read_source_groups(client)

        async def acls() -> None:
            found["acls"] = await _read_acls(client)

        async def kept(read, *args) -> None:
            try:
                await read(*args)
            except Exception as e:  # noqa: BLE001 - raised after the others, as it was
                failures.append(e)

        # The reads overlap (a few requests in flight on the mirror's connection): the source
        # answers one while the destination decodes the last, instead of each waiting its turn.
        async with trio.open_nursery() as nursery:
            for i in range(0, len(wanted), CONFIG_BATCH):
                nursery.start_soon(kept, configs, wanted[i : i + CONFIG_BATCH])
            if synced:
                nursery.start_soon(kept, groups)
            nursery.start_soon(kept, acls)
        if failures:
            raise failures[0]
        (groups_found, groups_error), (acls_found, acls_error) = found["groups"], found["acls"]
        return SourceView(
            metadata.cluster_id, topics, groups_found, groups_error, acls_found, acls_error
        )

    async def _read_destination_groups(
        self, spec, source: SourceView, destination: DestinationView
    ) -> DestinationView:
        """The destination's groups named like a source group with offsets to sync, and the
        high watermarks of the partitions they commit."""
        if source.groups is None:
            return destination  # the source's are unknown: no offset sync this round
        synced = set(synced_topics(spec, destination))
        relevant = {
            g: s
            for g, s in source.groups.items()
            if s.error is None and any(tp[0] in synced for tp in s.offsets)
        }
        if not relevant:
            return _with(destination, groups={})
        try:
            own = await self._own_client()
            listed = await list_groups(own)
            present = {g.group_id: g for g in listed.groups if g.group_id in relevant}
            groups: dict[str, DestinationGroup] = {}
            if present:
                described = await describe_groups(own, sorted(present))
                offsets = await offset_fetch_groups(own, sorted(present))
                for d in described.groups:
                    listing = present[d.group_id]
                    groups[d.group_id] = DestinationGroup(
                        d.group_id,
                        group_type=(getattr(listing, "group_type", "") or "").lower(),
                        protocol_type=d.protocol_type or listing.protocol_type or "",
                        state=d.group_state,
                        members=len(d.members),
                        offsets=_committed(offsets.get(d.group_id)),
                    )
            partitions = {
                tp
                for s in relevant.values()
                for tp in s.offsets
                if tp[0] in synced and tp[1] < destination.topics[tp[0]].partitions
            }
            # This broker's own leaders answer from memory; the others by ListOffsets, after one
            # Metadata request for all their topics (not one per topic; OffsetCommit v10 names
            # topics by id, so the commits need it too).
            ends, remote = self._local_high_watermarks(partitions)
            await own.refresh_metadata(sorted({t for t, _ in partitions}))
            if remote:
                answers = await list_offsets(own, {tp: LATEST_TIMESTAMP for tp in sorted(remote)})
                ends.update({tp: a.offset for tp, a in answers.items() if not a.error_code})
        except (ClientError, KafkaError, OSError) as e:
            return _with(destination, groups=None, groups_error=_describe_error(e))
        return _with(destination, groups=groups, high_watermarks=ends)

    def _local_high_watermarks(self, partitions) -> tuple[dict, list]:
        """The high watermarks of ``partitions`` this broker leads, and the others."""
        local = self.broker.replica_manager.partitions
        ends, remote = {}, []
        for tp in partitions:
            p = local.get(tp)
            if p is not None and p.is_leader:
                ends[tp] = p.high_watermark
            else:
                remote.append(tp)
        return ends, remote

    async def _own_client(self) -> KafkaClient:
        if self._own is None:
            self._own = self._make_own_client()
        return self._own

    # -- applying ------------------------------------------------------------------------------

    async def _apply(self, name: str, plan: SyncPlan) -> None:
        broker = self.broker
        for request in plan.start_requests(name):
            response = await broker.controller_call(
                lambda c, now, r=request: c.start_mirror_topics(r)
            )
            _collect(plan, "StartMirrorTopics", response.error_code, response.error_message)
            for t in response.topics:
                _collect(plan, f"starting {t.name}", t.error_code, t.error_message)
            await trio.sleep(0)
        stop = plan.stop_request(name)
        if stop is not None:
            await self._stop(name, plan, stop)
        request = plan.create_partitions_request()
        if request is not None:
            response = await broker.controller_call(lambda c, now: c.create_partitions(request))
            for r in response.results:
                _collect(plan, f"partitions of {r.name}", r.error_code, r.error_message)
        request = plan.alter_configs_request()
        if request is not None:
            response = await broker.controller_call(
                lambda c, now: c.incremental_alter_configs(request)
            )
            for r in response.responses:
                _collect(plan, f"configs of {r.resource_name}", r.error_code, r.error_message)
        if plan.commit_offsets:
            await self._commit(plan)
        await self._apply_acls(name, plan)

    async def _stop(self, name: str, plan: SyncPlan, request) -> None:
        """As the StopMirrorTopics handler: partition states admitted (D-26), then the
        controller (whose Stop also reaches FAILED partitions as their recovery, D-13)."""
        broker = self.broker
        image = broker.metadata_image
        partitions = [
            (t, p)
            for t in plan.stop
            if (topic := image.topics.by_name.get(t)) is not None
            for p in topic.partitions
        ]
        states = await broker.mirror_state_reader.read_states(name, partitions)
        try:
            check_operation(MirrorOperation.STOP, name, states)
        except KafkaError as e:
            _collect(plan, "StopMirrorTopics", e.code, e.message)
            return
        response = await broker.controller_call(lambda c, now: c.stop_mirror_topics(request))
        _collect(plan, "StopMirrorTopics", response.error_code, response.error_message)
        for t in response.topics:
            _collect(plan, f"stopping {t.name}", t.error_code, t.error_message)

    async def _commit(self, plan: SyncPlan) -> None:
        own = await self._own_client()
        limiter = trio.CapacityLimiter(COMMIT_CONCURRENCY)

        async def commit(group: str, offsets) -> None:
            async with limiter:
                try:
                    response = await offset_commit(own, group, offsets, attempts=COMMIT_ATTEMPTS)
                except (ClientError, KafkaError, OSError) as e:
                    plan.notes.append(f"group {group}: OffsetCommit failed: {_describe_error(e)}")
                    plan.commit_offsets.pop(group, None)
                    return
                codes = {p.error_code for t in response.topics for p in t.partitions} - {0}
                if codes:
                    # UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS...: a member joined meanwhile.
                    names = ", ".join(sorted(ErrorCode(c).name for c in codes))
                    plan.notes.append(f"group {group}: OffsetCommit refused: {names}")
                    plan.commit_offsets.pop(group, None)

        async with trio.open_nursery() as nursery:
            for group, offsets in list(plan.commit_offsets.items()):
                nursery.start_soon(commit, group, offsets)

    async def _apply_acls(self, name: str, plan: SyncPlan) -> None:
        if plan.synced_acls is None:
            return
        broker = self.broker
        provenance = set(plan.synced_acls)
        # A creation that failed is not the mirror's; a deletion that failed still is (a later
        # round deletes it).
        steps = (
            ("create_acls", create_acls_request, "results", plan.create_acls, provenance.discard),
            (
                "delete_acls",
                delete_acls_request,
                "filter_results",
                plan.delete_acls,
                provenance.add,
            ),
        )
        for operation, build, field, acls, on_error in steps:
            if not acls:
                continue
            request = build(acls)
            response = await broker.controller_call(
                lambda c, now, o=operation, r=request: getattr(c, o)(r)
            )
            for acl, result in zip(
                sorted(acls, key=acl_sort_key), getattr(response, field), strict=True
            ):
                if result.error_code:
                    on_error(acl)
                    _collect(plan, operation, result.error_code, result.error_message)
        await broker.mirror_coordinator.write_synced_acls(name, provenance)

    # -- closing -------------------------------------------------------------------------------

    async def _close_source(self, name: str) -> None:
        held = self._sources.pop(name, None)
        if held is not None:
            await held[1].aclose()

    async def aclose(self) -> None:
        for name in list(self._sources):
            await self._close_source(name)
        if self._own is not None:
            await self._own.aclose()
            self._own = None


# -- helpers -------------------------------------------------------------------------------------


def _summary(changes, shown: int = 5) -> str:
    """``topic-started orders, pay; offsets-committed 1000 group(s)``: few names per kind."""
    by_kind: dict[str, list[str]] = {}
    for c in changes:
        by_kind.setdefault(c.kind, []).append(c.resource)
    parts = []
    for kind, names in by_kind.items():
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{kind} {', '.join(names[:shown])}{more}")
    return "; ".join(parts)


def _describe_error(e: BaseException) -> str:
    if isinstance(e, KafkaError):
        return f"{e.code.name}: {e.message}" if e.message else e.code.name
    if isinstance(e, trio.TooSlowError):
        return f"no answer within {ROUND_TIMEOUT_S:.0f} s"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _collect(plan: SyncPlan, what: str, code: int, message: str | None) -> None:
    if code:
        plan.errors.append(f"{what}: {ErrorCode(code).name}" + (f": {message}" if message else ""))


def _with(view: DestinationView, **changes) -> DestinationView:
    fields = {
        "topics": view.topics,
        "acls": view.acls,
        "groups": view.groups,
        "groups_error": view.groups_error,
        "high_watermarks": view.high_watermarks,
    }
    fields.update(changes)
    return DestinationView(**fields)


def _committed(group) -> dict[tuple[str, int], int]:
    if group is None or group.error_code:
        return {}
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in group.topics
        for p in t.partitions
        if p.committed_offset >= 0 and not p.error_code
    }


async def _read_source_groups(client) -> tuple[dict[str, SourceGroup] | None, str | None]:
    """The source's groups and their committed offsets; (None, why) when it refuses."""
    try:
        listed = await list_groups(client)
    except (ClientError, KafkaError) as e:
        return None, f"ListGroups refused: {_describe_error(e)}"
    if listed.error_code:
        return None, f"ListGroups refused: {ErrorCode(listed.error_code).name}"
    kinds = {
        g.group_id: ((getattr(g, "group_type", "") or "").lower(), g.protocol_type or "")
        for g in listed.groups
    }
    try:
        offsets = await offset_fetch_groups(client, sorted(kinds))
    except (ClientError, KafkaError) as e:
        return None, f"OffsetFetch refused: {_describe_error(e)}"
    groups = {}
    for group_id, (group_type, protocol) in kinds.items():
        answer = offsets.get(group_id)
        error = None
        if answer is None:
            error = "no OffsetFetch answer"
        elif answer.error_code:
            error = ErrorCode(answer.error_code).name
        groups[group_id] = SourceGroup(
            group_id,
            group_type=group_type or "classic",
            protocol_type=protocol,
            offsets=_committed(answer),
            error=error,
        )
    return groups, None


async def _read_acls(client) -> tuple[frozenset[StandardAcl] | None, str | None]:
    try:
        response, acls = await describe_acls(client, AclBindingFilter())  # every ACL
    except (ClientError, KafkaError) as e:
        return None, f"DescribeAcls refused: {_describe_error(e)}"
    if response.error_code == ErrorCode.SECURITY_DISABLED:
        return frozenset(), None  # no authorizer on the source: it has no ACLs to copy
    if response.error_code:
        why = ErrorCode(response.error_code).name
        if response.error_message:
            why += f": {response.error_message}"
        if is_authorization_error(response.error_code):  # M-115: the source ACL to add
            why += "; " + authorization_reason(
                response.error_code,
                username=None if client.sasl is None else client.sasl.username,
                bootstrap=",".join(f"{host}:{port}" for host, port in client.bootstrap),
                operation="Describe",
                resource="cluster",
                name="",
            )
        return None, f"DescribeAcls refused: {why}"
    return frozenset(acls), None
