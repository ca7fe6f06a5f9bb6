"""The mirror manager: the Trio shell that runs the mirror partitions this broker leads.

Theory of operation
-------------------
Every broker has one :class:`MirrorManager`. After each metadata update it compares the
partitions this broker leads with their topics' ``mirror.name`` config
(:meth:`MirrorManager.reconcile`): a led partition of a mirror topic gets a
:class:`PartitionDriver`, which owns that partition's pure
:class:`~kcore.mirror.machine.MirrorPartitionMachine` and runs it as the machine's docstring
describes — events in, ``poll``, outputs executed in order, sleep until the next event or the
poll's deadline. A partition this broker stops leading loses its driver (and its fetcher).

Each output is carried out by the piece of kcore that owns it:

====================================  =====================================================
output                                carried out by
====================================  =====================================================
SetWriteAccess                        the replica manager's read-only hold (D-18, M-05)
ReadState, PersistState,              the ClusterMirrorCoordinator, local or over the wire
PersistLastMirrorEpoch                (``MirrorStateAccess``, M-11)
FetchLastMirrorEpoch                  the source: DescribeClusterMirrors (its LME for this
                                      mirror name, M-37), ListOffsets EARLIEST, Metadata
TruncateTo, TruncateFullyAndStartAt   the partition, answered once the ISR has the cut (all
                                      replicas with mirror.support.unclean.leader.election,
                                      M-38; followers cut by the diverging epoch)
AddFetcher, RemoveFetcher             the mirror's ``MirrorFetcherManager`` (one per mirror,
                                      one connection pool per mirror: D-25)
RequestEpochBump                      the controller: BumpLeaderEpochs (D-10), batched
AppendAbortMarkers,                   the partition, appended as leader with the MIRROR
AppendMirrorPidReset                  origin at the bumped epoch (D-15), answered once the
                                      ISR has them (the high watermark passed them)
====================================  =====================================================

The coordinator's reads and writes, the LME lookups and the fetcher adds are batched across
the mirror's drivers (:mod:`kcore.mirror.partition_ops`): 10,000 partitions that start
together cost a few requests of each kind, not 10,000. The other operations with an ``op``
run in a task of the manager's nursery. Either way the answer is an event for the machine;
the machine times its ops out itself, so nothing here is cancelled when the machine moves on. The fetcher's signals (an epoch ahead of the partition's, D-11; a partition that
left the fetcher, D-16) come back through :class:`MirrorFetchListener` as events too.

Only a partition's leader has a driver, so only the leader fetches from the source; its
followers copy the mirrored batches from it as from any leader (the write guard lets
REPLICATION in), and a new leader's driver resumes through LOG_TRUNCATION (D-14).

A new driver holds its partition read-only at once, before the machine has read its state:
after a restart a ``<m>.stopped`` topic may be in the middle of STOPPING, and only the
machine may decide it is writable (M-05).
"""

from __future__ import annotations

import logging
from collections import deque

import trio

from kcore.client.errors import ClientError
from kcore.log.producer_state import AppendOrigin
from kcore.metadata import mirror_configs as mc
from kcore.metadata.mirrors import RECOVERY_ID_CONFIG, mirrors_image
from kcore.mirror import outputs as out
from kcore.mirror.events import (
    BecameLeader,
    LeaderEpochChanged,
    MirroredEpochAhead,
    MirrorNameChanged,
    OpCompleted,
    OpFailed,
    PersistedState,
    RecoveryRequested,
    SourceFailed,
    StoppedBeingLeader,
)
from kcore.mirror.machine import MachineConfig, MirrorPartitionMachine
from kcore.mirror.partition_ops import MirrorPartitionOps, op_error
from kcore.mirror.state import MirrorPartitionState, parse_mirror_name
from kcore.mirror.throttle import MirrorThrottle
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.control import build_end_txn_marker_batch, build_mirror_pid_reset_batch

log = logging.getLogger(__name__)

# How long one M-38 wait for the replicas lasts before the machine is told NOT_ENOUGH_REPLICAS
# (it waits again after a backoff): well inside the machine's op timeout, so a slow ISR is a
# retry, never a timeout that fails the partition.
REPLICA_WAIT_S = 5.0
# How often those waits look again at the leader's view (it moves with every follower fetch).
POLL_S = 0.05

TopicPartition = tuple[str, int]
S = MirrorPartitionState


def mirror_of(value: str | None) -> str | None:
    """The mirror a ``mirror.name`` value names, whatever its suffix (None for none)."""
    return parse_mirror_name(value)[0]


class MirrorManager:
    """See the module docstring. ``broker`` is the :class:`~kcore.server.broker.KafkaBroker`."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.drivers: dict[TopicPartition, PartitionDriver] = {}
        self.machine_config = MachineConfig(
            failed_retry_backoff_ms=broker.config.value("mirror.failed.retry.backoff.ms"),
            failed_max_retries=broker.config.value("mirror.failed.max.retries"),
        )
        self._nursery: trio.Nursery | None = None
        # mirror.replication.throttled.rate (M-116): one ceiling for every mirror on the broker,
        # read at each fetch, so a dynamic change takes effect at once.
        self.throttle = MirrorThrottle(
            lambda: broker.dynamic_value("mirror.replication.throttled.rate")
        )
        # The configs each running fetcher manager was opened with (M-68).
        self._connected_with: dict[str, dict[str, str]] = {}
        # The drivers' state reads and writes, LME lookups and fetcher adds, batched.
        self.ops = MirrorPartitionOps(self, broker.mirror_coordinator.access)

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            self.reconcile()
            try:
                await self._watch_sources()
            finally:
                self._nursery = None
                for driver in self.drivers.values():
                    driver.cancel()
                self.drivers.clear()

    def now_ms(self) -> int:
        return self.broker.clock.wall_ms()

    async def _watch_sources(self) -> None:
        """A partition whose source leader cannot be reached for
        ``mirror.source.unavailable.timeout.ms`` is failed, with why (the fetcher itself
        keeps looking for the leader; its state machine then runs D-13's retries)."""
        timeout_s = self.broker.config.value("mirror.source.unavailable.timeout.ms") / 1000
        while True:
            await trio.sleep(min(1.0, timeout_s / 4))
            now = trio.current_time()
            for tp, driver in list(self.drivers.items()):
                fetcher = self.broker.mirror_fetchers.get(driver.mirror)
                down = (
                    None
                    if fetcher is None or not driver.fetching
                    else fetcher.manager.unreachable(tp)
                )
                if down is not None and now - down[0] >= timeout_s:
                    driver.send(
                        SourceFailed(
                            ErrorCode.MIRROR_SOURCE_UNAVAILABLE,
                            f"the source leader of {tp[0]}-{tp[1]} was unreachable for "
                            f"{now - down[0]:.0f} s: {down[1]}",
                        )
                    )

    # -- what the metadata says -------------------------------------------------------------

    def reconcile(self) -> None:
        """Start, update and stop drivers after a metadata update (the broker calls it)."""
        if self._nursery is None:
            return
        replicas = self.broker.replica_manager
        mirrors = mirrors_image(self.broker.metadata_image)
        wanted: dict[TopicPartition, str | None] = {}
        for tp, partition in replicas.partitions.items():
            if not partition.is_leader:
                continue
            value = self.broker.topic_mirror_name(tp[0])
            # Only topics of an existing mirror are driven: the stopped topics of a deleted
            # mirror keep <m>.stopped as a record of their origin (D-29) and are plain topics.
            # A driven partition whose mirror.name goes away keeps its driver: it must stop.
            if tp in self.drivers or (value and mirrors.mirror(mirror_of(value)) is not None):
                wanted[tp] = value
        for tp in [tp for tp in self.drivers if tp not in wanted]:
            self.drivers.pop(tp).stop_leading()
        self._reconnect_changed_mirrors(mirrors)
        for tp, value in wanted.items():
            partition = replicas.partitions[tp]
            driver = self.drivers.get(tp)
            if driver is None:
                driver = self.drivers[tp] = PartitionDriver(self, tp, value, partition)
                self._nursery.start_soon(driver.run)
                continue
            if value != driver.mirror_name:
                driver.mirror_name = value
                driver.mirror = mirror_of(value) or driver.mirror
                driver.send(MirrorNameChanged(value))
            if partition.leader_epoch != driver.leader_epoch:
                driver.leader_epoch = partition.leader_epoch
                driver.send(LeaderEpochChanged(partition.leader_epoch))
        self._deliver_recoveries()

    # -- the mirror's connections and fetchers ----------------------------------------------

    def _reconnect_changed_mirrors(self, mirrors) -> None:
        """M-68: any change of a mirror's configs reconnects it to the source with the new
        settings: its fetcher manager (connections included) is closed and the partitions that
        were fetching are added to a new one. Its FAILED partitions get the operator's recovery
        (D-13, as a Start would give them): a changed config is the operator's fix (new
        credentials after a refused login, M-114), tried at once rather than after the retry
        backoff, or never once the retries are spent."""
        for name in list(self.broker.mirror_fetchers):
            image = mirrors.mirror(name)
            configs = None if image is None else dict(image.configs)
            if self._connected_with.get(name) in (None, configs):
                continue
            log.info("mirror %s: configs changed, reconnecting to the source", name)
            self.broker.stop_mirror_fetcher(name)
            self._connected_with.pop(name, None)
            for driver in self.drivers.values():
                if driver.mirror != name:
                    continue
                if driver.fetching:
                    driver.refetch_after_reconnect(mirror_exists=image is not None)
                elif image is not None and driver.machine.state is S.FAILED:
                    log.info(
                        "mirror %s partition %s-%d: retried with the new configs", name, *driver.tp
                    )
                    driver.send(RecoveryRequested())

    def mirror_configs(self, mirror: str) -> dict[str, str]:
        image = mirrors_image(self.broker.metadata_image).mirror(mirror)
        if image is None:
            raise KafkaError(ErrorCode.MIRROR_NOT_FOUND, f"No cluster mirror named '{mirror}'.")
        return dict(image.configs)

    async def fetcher(self, mirror: str):
        """The mirror's fetcher manager on this broker (started on first use)."""
        configs = self.mirror_configs(mirror)
        fetcher = await self.broker.start_mirror_fetcher(
            mirror,
            configs[mc.BOOTSTRAP_SERVERS],
            listener=self,
            client_options=mc.client_settings(configs),
            throttle=self.throttle,
        )
        self._connected_with.setdefault(mirror, configs)
        return fetcher

    # -- MirrorFetchListener ----------------------------------------------------------------

    def on_epoch_fencing(self, tp: TopicPartition, epoch: int) -> None:
        driver = self.drivers.get(tp)
        if driver is not None:
            driver.send(MirroredEpochAhead(epoch))

    def on_partition_failed(self, tp: TopicPartition, reason: str) -> None:
        driver = self.drivers.get(tp)
        if driver is not None:
            driver.send(SourceFailed(ErrorCode.OFFSET_OUT_OF_RANGE, reason))

    def on_source_refused(self, partitions, code: ErrorCode, reason: str) -> None:
        # M-114/M-115: a refused login or ACL fails the partitions now (D-13's retries then
        # try again; an altered mirror config reconnects at once, M-68).
        for tp in partitions:
            driver = self.drivers.get(tp)
            if driver is not None and driver.fetching:
                driver.send(SourceFailed(code, reason))

    # -- the operator's manual recovery ------------------------------------------------------

    def recovery_id(self, topic: str) -> int:
        """The topic's ``mirror.recovery.id``: the controller raises it on every accepted Start
        or Stop of the topic (D-13), since a FAILED partition's ``mirror.name`` may not change."""
        value = self.broker.metadata_image.configs.topic(topic).get(RECOVERY_ID_CONFIG)
        return int(value) if value else 0

    def _deliver_recoveries(self) -> None:
        """Each driver whose topic's recovery id moved since it last looked gets the
        operator's recovery (its machine ignores it unless FAILED). A driver started after the
        change does not: it reads the state as it is, after the recovery if one ran elsewhere."""
        for driver in self.drivers.values():
            current = self.recovery_id(driver.tp[0])
            if current != driver.recovery_id:
                driver.recovery_id = current
                log.info(
                    "mirror %s partition %s-%d: the operator's recovery", driver.mirror, *driver.tp
                )
                driver.send(RecoveryRequested())

    # -- the metadata sync's source cluster id check (D-24) ----------------------------------

    def fail_mirror(self, mirror: str, code: ErrorCode, reason: str) -> int:
        """The metadata sync found that ``mirror``'s source is not the cluster it recorded:
        every mirroring partition of it that this broker leads moves to FAILED with
        ``reason`` (its fetching ends). Returns how many were told."""
        told = 0
        for driver in self.drivers.values():
            if driver.mirror == mirror:
                driver.send(SourceFailed(code, reason))
                told += 1
        return told

    # -- Describe ---------------------------------------------------------------------------

    def machine_record(self, tp: TopicPartition) -> PersistedState | None:
        driver = self.drivers.get(tp)
        return None if driver is None else driver.machine.record


class PartitionDriver:
    """One led mirror partition: its machine, its event queue, and the execution of outputs."""

    def __init__(self, manager: MirrorManager, tp: TopicPartition, mirror_name, partition):
        self.manager = manager
        self.broker = manager.broker
        self.tp = tp
        self.mirror_name = mirror_name
        self.mirror = mirror_of(mirror_name) or ""
        self.leader_epoch = partition.leader_epoch
        self.recovery_id = manager.recovery_id(tp[0])
        self.machine = MirrorPartitionMachine(
            tp[0],
            tp[1],
            partition.log,
            manager.machine_config,
            mirror_name=mirror_name,
            now=manager.now_ms(),
        )
        self._events: deque = deque([BecameLeader(partition.leader_epoch)])
        self._wakeup = trio.Event()
        self._scope = trio.CancelScope()
        self._fetching = False
        # Bumped by every removal; an add in flight checks it (MirrorPartitionOps.add_fetcher).
        self.fetch_generation = 0
        # Read-only until the machine says otherwise (see the module docstring).
        if self.mirror:
            self.broker.replica_manager.hold_read_only(tp, self.mirror)

    def send(self, event) -> None:
        self._events.append(event)
        self._wakeup.set()

    @property
    def fetching(self) -> bool:
        """Whether this driver's partition is in the mirror's fetcher (its add completed)."""
        return self._fetching

    def refetch_after_reconnect(self, *, mirror_exists: bool) -> None:
        """The mirror's fetcher manager was closed to reconnect (M-68): the partition is in
        none now, and joins the new one at the log end offset if the mirror still exists."""
        self._fetching = False
        if mirror_exists:
            self.manager.ops.add_fetcher(self)

    @property
    def alive(self) -> bool:
        """False once the driver has ended (its leadership moved): its ops are dropped."""
        return not self._scope.cancel_called

    def fetch_added(self) -> None:
        """The mirror's fetcher took the partition (MirrorPartitionOps' AddFetcher)."""
        self._fetching = True

    def cancel(self) -> None:
        self._scope.cancel()

    def stop_leading(self) -> None:
        """This broker no longer leads the partition: tell the machine, stop fetching, end."""
        self.machine.handle(StoppedBeingLeader(), self.manager.now_ms())
        self._remove_fetcher()
        self.cancel()

    async def run(self) -> None:
        with self._scope:
            while True:
                self._wakeup = trio.Event()
                now = self.manager.now_ms()
                while self._events:
                    self.machine.handle(self._events.popleft(), now)
                poll = self.machine.poll(now)
                for output in poll.outputs:
                    self._execute(output)
                if self._events:
                    continue
                timeout = float("inf")
                if poll.deadline is not None:
                    timeout = max(poll.deadline - self.manager.now_ms(), 0) / 1000
                with trio.move_on_after(timeout):
                    await self._wakeup.wait()

    # -- outputs ----------------------------------------------------------------------------

    def _execute(self, output) -> None:
        if isinstance(output, out.SetWriteAccess):
            if output.access is out.WriteAccess.WRITABLE:
                self.broker.replica_manager.release_read_only(self.tp)
            elif self.mirror:
                self.broker.replica_manager.hold_read_only(self.tp, self.mirror)
        elif isinstance(output, out.Transitioned):
            log.info(
                "mirror %s partition %s-%d: %s -> %s (%s)",
                self.mirror, *self.tp, output.old.name, output.new.name, output.reason,
            )  # fmt: skip
        elif isinstance(output, out.AddFetcher):
            self.manager.ops.add_fetcher(self)
        elif isinstance(output, out.RemoveFetcher):
            self._remove_fetcher()
            self.send(OpCompleted(output.op))
        elif isinstance(output, out.ReadState):
            self.manager.ops.read_state(self, output.op)
        elif isinstance(output, out.PersistState):
            self.manager.ops.persist(self, output.op, output.record)
        elif isinstance(output, out.PersistLastMirrorEpoch):
            record = self.machine.record
            lme = PersistedState(
                S.STOPPING, record.previous_state, record.retry_attempt, output.last_mirror_epoch
            )
            self.manager.ops.persist(self, output.op, lme)
        elif isinstance(output, out.FetchLastMirrorEpoch):
            self.manager.ops.fetch_last_mirror_epoch(self, output.op)
        elif isinstance(output, out.TruncateTo):
            self._spawn(output.op, self._truncate, output.offset, False)
        elif isinstance(output, out.TruncateFullyAndStartAt):
            self._spawn(output.op, self._truncate, output.offset, True)
        elif isinstance(output, out.RequestEpochBump):
            self.manager.ops.bump_epoch(self, output.op, output.min_leader_epoch)
        elif isinstance(output, out.AppendAbortMarkers):
            self._spawn(output.op, self._append_abort_markers, output.leader_epoch)
        elif isinstance(output, out.AppendMirrorPidReset):
            self._spawn(output.op, self._append_pid_reset, output.leader_epoch)
        else:
            raise TypeError(f"not a mirror partition output: {output!r}")

    def _spawn(self, op: int | None, work, *args) -> None:
        """Run ``await work(*args)`` in the manager's nursery; a returned event (or
        OpCompleted when it returns None) or a failure (OpFailed) goes back to the machine."""

        async def task() -> None:
            try:
                answer = await work(*args)
            except Exception as e:  # noqa: BLE001 - the machine decides; the broker stays up
                if not isinstance(e, (KafkaError, ClientError, OSError, trio.TooSlowError)):
                    log.exception("mirror partition %s-%d: %s failed", *self.tp, work.__name__)
                code, message = op_error(e)
                if op is None:
                    self.send(SourceFailed(code, message))
                else:
                    self.send(OpFailed(op, code, message))
                return
            if answer is not None:
                self.send(answer)
            elif op is not None:
                self.send(OpCompleted(op))

        nursery = self.manager._nursery
        if nursery is not None:
            nursery.start_soon(task)

    def _remove_fetcher(self, *, wherever: bool = False) -> None:
        """Take the partition out of the mirror's fetcher. ``wherever``: whether or not this
        driver added it (before the log is cut, no fetch of anyone's may append to it)."""
        self.fetch_generation += 1  # an add still in flight is dropped (MirrorPartitionOps)
        if self._fetching or wherever:
            fetcher = self.broker.mirror_fetchers.get(self.mirror)
            if fetcher is not None:
                fetcher.remove_partitions([self.tp])
            self._fetching = False

    async def _truncate(self, offset: int, fully: bool) -> None:
        # LOG_TRUNCATION has no fetcher (MIRRORING adds one at the new log end): one still
        # there, from an earlier leadership's add that landed late, would append past the cut.
        self._remove_fetcher(wherever=True)
        partition = self.broker.replica_manager.partition_or_error(*self.tp)
        before = (partition.log_start_offset, partition.log_end_offset)
        now = self.manager.now_ms()
        if offset < partition.log_end_offset:
            log.info(
                "mirror %s: %s-%d truncated from %d to %d (%s)", self.mirror, *self.tp,
                partition.log_end_offset, offset, "fully" if fully else "to the offset",
            )  # fmt: skip
        if fully:
            partition.truncate_fully_and_start_at(offset, now)
        else:
            partition.truncate_to(offset)
        self.broker.replica_manager.notify(self.tp)  # followers waiting at the old end
        # A follower's fetch at the new log end, validated by the leader's epochs, shows it
        # has the cut, even from before it (it was behind, at the cut). Not after a full
        # truncation that removed something: its log may still hold what lies below the new
        # log start, so only a fetch after the cut counts.
        after = (partition.log_start_offset, partition.log_end_offset)
        await self._await_replicas_truncated(partition, now if fully and after != before else -1)

    async def _await_replicas_truncated(self, partition, fetched_after_ms: int) -> None:
        """M-38: return once the ISR (every replica with
        ``mirror.support.unclean.leader.election``) has the truncation; NOT_ENOUGH_REPLICAS
        after ``REPLICA_WAIT_S`` (the machine waits again later). Followers learn of the cut
        from their next fetch (the diverging epoch), so this polls the leader's view."""
        all_replicas = self.broker.config.value("mirror.support.unclean.leader.election")
        min_isr = self.broker.replica_manager.min_insync_replicas(self.tp[0])
        why = None
        with trio.move_on_after(REPLICA_WAIT_S):
            while True:
                why = partition.missing_truncation(
                    fetched_after_ms, all_replicas=all_replicas, min_isr=min_isr
                )
                if why is None:
                    return
                await trio.sleep(POLL_S)
        log.info(
            "mirror %s: %s waits for its replicas (M-38): %s", self.mirror, partition.name, why
        )
        raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"{partition.name}: {why}")

    async def _append_control(self, batch) -> None:
        """Append a control batch as leader, at the partition's (bumped) epoch, with the
        MIRROR origin the read-only guard lets in."""
        info = self.broker.replica_manager.append_records(
            *self.tp, batch, required_acks=1, now_ms=self.manager.now_ms(),
            origin=AppendOrigin.MIRROR,
        )  # fmt: skip
        await self._await_high_watermark(info.last_offset + 1)

    async def _await_high_watermark(self, offset: int) -> None:
        """Wait until the ISR has everything below ``offset``: STOPPED is persisted only after
        the markers, so a follower elected later (from the ISR) must have them, or its open
        transactions would never end. Like acks=all but without the min.insync.replicas
        refusal: failover must work with brokers down (D-12). The machine's op timeout bounds
        the wait (a follower that neither fetches nor leaves the ISR)."""
        partition = self.broker.replica_manager.partition_or_error(*self.tp)
        while partition.high_watermark < offset:
            partition.check_leader_epoch(-1, require_leader=True)
            await trio.sleep(POLL_S)

    async def _append_abort_markers(self, leader_epoch: int) -> None:
        """M-58: an ABORT marker, at the new epoch, for every open transaction."""
        partition = self.broker.replica_manager.partition_or_error(*self.tp)
        state = partition.producer_state
        for producer_id, _first in state.ongoing_transactions:
            entry = state.last_entry(producer_id)
            epoch = entry.producer_epoch if entry is not None else 0
            coordinator_epoch = max(entry.coordinator_epoch, 0) if entry is not None else 0
            marker = build_end_txn_marker_batch(
                producer_id, epoch, False, coordinator_epoch, partition_leader_epoch=leader_epoch
            )
            await self._append_control(marker)

    async def _append_pid_reset(self, leader_epoch: int) -> None:
        """M-59: MIRROR_PID_RESET, which expires every producer of the partition."""
        source = mirrors_image(self.broker.metadata_image).mirror(self.mirror)
        cluster_id = (source.source_cluster_id if source is not None else None) or ""
        batch = build_mirror_pid_reset_batch(cluster_id, partition_leader_epoch=leader_epoch)
        await self._append_control(batch)
