"""The metadata quorum in a process: the pure Raft core driven by Trio, real sockets and a clock.

Theory of operation
-------------------
:class:`RaftDriver` owns one :class:`~kcore.raft.core.RaftCore` and everything the core does not
do itself: the clock (milliseconds from ``trio.current_time()``, so tests may use
``trio.testing.MockClock``), the files in ``<metadata.log.dir>/__cluster_metadata-0`` (the
:class:`~kcore.raft.disk_log.DiskRaftLog`, the ``.checkpoint`` snapshots of
:class:`~kcore.raft.snapshot_files.FileSnapshotStore`, the ``quorum-state`` file), and the
network (:class:`~kcore.raft.transport.PeerTransport` for requests to the other voters; the
process's controller listener hands incoming Raft requests to :meth:`RaftDriver.handle`).

One task runs the loop::

    while running:
        poll = core.poll(now)                 # fire timers, drain outputs
        execute poll.outputs, in order        # see below
        sleep until poll.deadline or a wake-up

and every other entry point (a request from the network, a response, a proposal, a snapshot)
calls the core at once and wakes the loop, which polls again. Executing outputs never awaits,
so nothing interleaves with it:

* ``PersistQuorumState``: ``quorum-state`` is written and fsynced *before* the next output is
  looked at (the rule that makes a vote binding);
* ``SendRequest``: queued for the peer's connection task (answers come back as
  ``handle_response`` / ``handle_request_failure``);
* ``SendResponse``: handed to the :meth:`handle` call waiting for it (the token is its key);
* ``HighWatermarkAdvanced``: the newly committed data entries are read from the log and given
  to the commit listeners, in order, as ``[(offset, bytes), ...]`` (control records are not
  passed on); then the :meth:`wait_for_commit` calls they satisfy return;
* ``SnapshotLoaded`` (a snapshot fetched from the leader replaced the log): the snapshot
  listeners get a :class:`~kcore.raft.snapshot_files.SnapshotReader`;
* ``LeaderChanged``: the leader-change listeners get ``(leader_id, epoch)``. When this node
  becomes the leader, they are told only once every entry committed before its epoch has
  reached the commit listeners (Kafka's ``handleLeaderChange`` waits the same way), so a
  controller never acts on a stale state;
* ``LogTruncated``: :meth:`wait_for_commit` calls for removed entries raise ``NotLeaderError``;
* ``ShutdownComplete``: the loop ends and :meth:`run` returns.

Appends and the quorum-state file are written synchronously, as in Kafka's single Raft thread.
The metadata log's fsyncs are not: on a broker under produce load one takes 50-140 ms (the
filesystem commits its journal with the page cache full of partition data), and this loop shares
the event loop with every client connection. So on the hot path — a proposal at the leader, i.e.
every controller write — the log runs with ``defer_flush`` (:mod:`kcore.raft.disk_log`): the
core's ``flush()`` only marks the log, and the loop, after its next ``poll`` and *before
executing its outputs*, fsyncs in a worker thread. Elsewhere the core flushes synchronously
inside its call, as before: a follower's fetched entries (it applies them in the same step,
which a broker answering a forwarded CreateTopics relies on), elections and snapshots. While
that flush is in flight the core is not called, except to append a proposal (which only adds
outputs for the next poll, so proposals made meanwhile share the next fsync): :meth:`handle` and
:meth:`begin_shutdown` wait for it, and responses from the peers are queued and given to the
core right after it. Hence the order of the synchronous design holds: the outputs of a poll only
ever concern entries appended before the flush that precedes them, so every entry is durable
before this node acknowledges it to a peer, counts it toward the high watermark anyone sees, or
hands it to a commit listener; and :meth:`propose` returns once its entries are durable.

A :class:`~kcore.raft.errors.RaftInvariantError` from the core ends :meth:`run` with that
error, whichever task met it: continuing could lose committed metadata.

This module and :mod:`kcore.raft.transport` are the Trio shell of the pure core (the only
modules of ``kcore/raft`` importing ``trio``).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message
from kcore.raft import rpc
from kcore.raft.config import RaftConfig
from kcore.raft.core import RaftCore
from kcore.raft.disk_log import METADATA_LOG_DIR_NAME, DiskRaftLog
from kcore.raft.errors import NotLeaderError, RaftInvariantError
from kcore.raft.log import OffsetAndEpoch
from kcore.raft.outputs import (
    HighWatermarkAdvanced,
    LeaderAndEpoch,
    LeaderChanged,
    LogTruncated,
    PersistQuorumState,
    SendRequest,
    SendResponse,
    ShutdownComplete,
    SnapshotLoaded,
)
from kcore.raft.quorum_state import FILE_NAME as QUORUM_STATE_FILE
from kcore.raft.quorum_state import QuorumStateFile
from kcore.raft.snapshot_files import FileSnapshotStore, SnapshotReader, encode_snapshot
from kcore.raft.transport import PeerTransport

__all__ = ["RAFT_APIS", "RaftDriver", "register_raft_handlers"]

log = logging.getLogger(__name__)

# kcore.server.registry.CONTROLLER (not imported: the server layer is outside this one).
CONTROLLER_LISTENER = "controller"
# The Raft APIs a controller listener serves, with the versions Kafka 4.x controllers
# advertise (Vote v2 carries KIP-996's PreVote; Fetch v0-3 are gone since Kafka 4.0).
RAFT_APIS: tuple[tuple[int, int, int], ...] = (
    (1, 4, 17),  # Fetch (of __cluster_metadata only, on this listener)
    (52, 0, 2),  # Vote
    (53, 0, 1),  # BeginQuorumEpoch
    (54, 0, 1),  # EndQuorumEpoch
    (55, 0, 2),  # DescribeQuorum
    (59, 0, 1),  # FetchSnapshot
)
# Committed entries are read from the log and handed to listeners this many bytes at a time.
COMMIT_READ_BYTES = 1 << 20
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0

CommitListener = Callable[[list[tuple[int, bytes]]], None]
SnapshotListener = Callable[[SnapshotReader], None]
LeaderListener = Callable[[int | None, int], None]
Handle = Callable[[int, int, Message], Awaitable[Message]]


class _ResponseWaiter:
    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: Message | None = None
        self.error: BaseException | None = None


class _CommitWaiter:
    __slots__ = ("offset", "event", "error")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.event = trio.Event()
        self.error: BaseException | None = None


def _source_of(request: Message) -> int:
    """The node a Raft request comes from, as its body names it (-1 for DescribeQuorum)."""
    if isinstance(request, m.FetchRequest):
        return rpc.fetch_replica_id(request)
    if isinstance(request, m.FetchSnapshotRequest):
        return request.replica_id
    part = rpc.partition_of(request)
    if isinstance(request, m.VoteRequest) and part is not None:
        return part.candidate_id
    if (
        isinstance(request, m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest)
        and part is not None
    ):
        return part.leader_id
    return -1


def register_raft_handlers(
    registry: Any, handle: Handle, *, listeners: Iterable[str] = (CONTROLLER_LISTENER,)
) -> None:
    """Register the Raft APIs (:data:`RAFT_APIS`) on ``registry`` (a
    ``kcore.server.registry.HandlerRegistry``), each answered by ``await handle(api_key,
    version, body)``, on the given listener types (the controller listener by default)."""
    listeners = tuple(listeners)

    async def handler(ctx, body):
        return await handle(ctx.api_key, ctx.version, body)

    for api_key, lo, hi in RAFT_APIS:
        registry.register(api_key, lo, hi, listeners=listeners)(handler)


def _to_wall_clock(response: m.DescribeQuorumResponse, offset_ms: int) -> None:
    """DescribeQuorum's LastFetchTimestamp and LastCaughtUpTimestamp are epoch milliseconds in
    Kafka; the core keeps them on this driver's clock (``_now``): shift them by ``offset_ms``
    (-1, unknown, stays -1)."""
    for topic in response.topics:
        for part in topic.partitions:
            for replica in (*part.current_voters, *part.observers):
                if replica.last_fetch_timestamp >= 0:
                    replica.last_fetch_timestamp += offset_ms
                if replica.last_caught_up_timestamp >= 0:
                    replica.last_caught_up_timestamp += offset_ms


class RaftDriver:
    """A node of the metadata quorum (voter or observer). See the module docstring.

    Args:
        node_id: this node's ``node.id``.
        config: the quorum's configuration (``RaftConfig.from_properties``).
        metadata_log_dir: ``metadata.log.dir``; the files go in its ``__cluster_metadata-0``.
        cluster_id: checked against the peers' requests (``None``: not checked).
        segment_bytes: ``metadata.log.segment.bytes`` (default 1 GiB; small values for tests).
        rng: randomness for the core's timers (seed it to replay).
        commit_delay_ms: testing only (``kcore.testing.metadata.replay.delay.ms``): committed
            entries reach the commit listeners no earlier than this long after :meth:`run`
            starts, as on a node with a long metadata log to replay.
    """

    def __init__(
        self,
        node_id: int,
        config: RaftConfig,
        metadata_log_dir: str | Path,
        *,
        cluster_id: str | None = None,
        segment_bytes: int | None = None,
        rng: random.Random | None = None,
        commit_delay_ms: int = 0,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.cluster_id = cluster_id
        self.directory = Path(metadata_log_dir) / METADATA_LOG_DIR_NAME
        self._segment_bytes = segment_bytes
        self._rng = rng or random.Random()
        self._commit_listeners: list[CommitListener] = []
        self._snapshot_listeners: list[SnapshotListener] = []
        self._leader_listeners: list[LeaderListener] = []
        self.core: RaftCore | None = None
        self.log: DiskRaftLog | None = None
        self.snapshots: FileSnapshotStore | None = None
        self._qfile = QuorumStateFile(self.directory / QUORUM_STATE_FILE)
        self._transport: PeerTransport | None = None
        # How to connect to the other voters' controller listeners (TLS, SASL), set by the
        # node before run(): BrokerConnection.connect's ssl_context= and sasl=.
        self.connect_options: dict[str, Any] = {}
        self._running = False
        self._stopped = trio.Event()
        self._wake = trio.Event()
        self._fatal: BaseException | None = None
        self._tokens = itertools.count(1)
        self._responses: dict[int, _ResponseWaiter] = {}
        self._commit_waiters: list[_CommitWaiter] = []
        self._applied = 0  # committed entries below this were given to the commit listeners
        self._pending_leader: tuple[LeaderAndEpoch, int] | None = None
        self._told_leader: LeaderAndEpoch | None = None
        # The deferred fsync of the log (see the module docstring).
        self._flushing = False
        self._flush_done = trio.Event()  # replaced after each flush; set when it ends
        self._flushes_begun = 0
        self._flushes_done = 0
        self._queued_calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._commit_delay_s = commit_delay_ms / 1000
        self._commits_held_until: float | None = None  # trio time; set by run() when delayed

    @classmethod
    def from_properties(
        cls, node_id: int, props: Mapping[str, str], *, cluster_id: str | None = None
    ) -> RaftDriver:
        """Build from server properties: ``controller.quorum.*``, ``metadata.log.dir`` (else
        the first of ``log.dirs`` / ``log.dir``, as Kafka does), ``metadata.log.segment.bytes``.
        """
        directory = props.get("metadata.log.dir") or next(
            d.strip()
            for d in str(props.get("log.dirs") or props.get("log.dir", "/tmp/kafka-logs")).split(
                ","
            )
            if d.strip()
        )
        segment = props.get("metadata.log.segment.bytes")
        return cls(
            node_id,
            RaftConfig.from_properties(props),
            directory,
            cluster_id=cluster_id,
            segment_bytes=int(segment) if segment else None,
            commit_delay_ms=int(props.get("kcore.testing.metadata.replay.delay.ms") or 0),
        )

    # -- listeners (register before run) ----------------------------------------------------

    def on_commit(self, callback: CommitListener) -> None:
        """``callback([(offset, bytes), ...])`` for every run of newly committed data entries,
        in offset order, exactly once each per process lifetime (after a restart, from the
        latest snapshot on). Control records (LeaderChangeMessage) are left out."""
        self._commit_listeners.append(callback)

    def on_snapshot_loaded(self, callback: SnapshotListener) -> None:
        """``callback(reader)`` when the state must be rebuilt from a snapshot: at start if one
        exists, and whenever one fetched from the leader replaces the log. Commits continue
        from ``reader.snapshot_id.offset``."""
        self._snapshot_listeners.append(callback)

    def on_leader_change(self, callback: LeaderListener) -> None:
        """``callback(leader_id or None, epoch)`` when the known leader or the epoch changes
        (for this node as leader: once the entries committed before its epoch were applied)."""
        self._leader_listeners.append(callback)

    # -- state -------------------------------------------------------------------------------

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        if self.core is None:
            return LeaderAndEpoch(None, 0)
        return self.core.leader_and_epoch

    @property
    def high_watermark(self) -> int:
        """Entries below this offset are committed (0 before :meth:`run`)."""
        return 0 if self.core is None else self.core.high_watermark

    @property
    def applied_offset(self) -> int:
        """Committed entries below this offset have been given to the commit listeners."""
        return self._applied

    @property
    def is_leader(self) -> bool:
        return self.core is not None and self.core.leader_id == self.node_id

    @property
    def running(self) -> bool:
        return self._running

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the log and state, start the connections, and run the loop.

        Ready (``task_status.started()``) once the log, the snapshots and the quorum state are
        loaded and the latest snapshot was given to the snapshot listeners. Returns after a
        graceful :meth:`begin_shutdown`; cancel it to stop at once (as a crash would, except
        that files are closed).

        Raises (inside an ``ExceptionGroup`` once started, as from any Trio nursery):
            QuorumStateError: ``quorum-state`` is corrupt (before it is ready).
            RaftInvariantError: the core met a contradiction of Raft's invariants.
            CorruptSnapshotError: a snapshot does not parse.
        """
        if self.core is not None:
            raise RuntimeError("RaftDriver.run may only be called once")
        if self._commit_delay_s:
            self._commits_held_until = trio.current_time() + self._commit_delay_s
        try:
            self._open()
            async with trio.open_nursery() as nursery:
                self._transport = PeerTransport(
                    self.node_id,
                    self.config.voters,
                    on_response=self._on_response,
                    on_failure=self._on_failure,
                    request_timeout_s=self.config.request_timeout_ms / 1000,
                    connect_timeout_s=self.config.request_timeout_ms / 1000,
                    connect_options=self.connect_options,
                )
                await nursery.start(self._transport.run)
                self._running = True
                task_status.started()
                await self._loop()
                nursery.cancel_scope.cancel()
        finally:
            self._close()

    def _open(self) -> None:
        self.snapshots = FileSnapshotStore(self.directory)
        latest = self.snapshots.latest_id()
        self.log = DiskRaftLog.open(
            self.directory, latest_snapshot=latest, segment_bytes=self._segment_bytes
        )
        stored = self._qfile.read()
        self.core = RaftCore(
            self.node_id,
            self.config,
            self.log,
            self.snapshots,
            stored_state=stored,
            rng=self._rng,
            now=self._now(),
            cluster_id=self.cluster_id,
        )
        log.info(
            "raft: node %d opened %s: log [%d, %d), snapshot %s, %s",
            self.node_id,
            self.directory,
            self.log.start_offset,
            self.log.end_offset,
            latest,
            stored,
        )
        if latest is not None:
            self._load_snapshot(latest)

    def _close(self) -> None:
        self._running = False
        self._flush_done.set()  # nobody waits for a flush that will not come
        error = KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the metadata quorum is stopped")
        for waiter in self._responses.values():
            waiter.error = error
            waiter.event.set()
        self._responses.clear()
        self._fail_commit_waiters(lambda w: True, "the metadata quorum is stopped")
        try:
            if self.snapshots is not None:
                self.snapshots.close()
            if self.log is not None:
                self.log.close()
        finally:
            self._stopped.set()

    async def begin_shutdown(self, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        """Leave the quorum gracefully and wait (at most ``timeout`` s) for :meth:`run` to end.

        A leader resigns: it sends EndQuorumEpoch naming its successors and waits until one of
        them leads (or the timeout passes); others stop at once. A no-op when not running.
        """
        if not self._running:
            return
        await self._core_idle()
        if not self._running:
            return
        self._call(self.core.begin_shutdown, self._now(), int(timeout * 1000))
        with trio.move_on_after(timeout + 0.5):
            await self._stopped.wait()

    # -- the loop ----------------------------------------------------------------------------

    def _now(self) -> int:
        return round(trio.current_time() * 1000)

    def _wakeup(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        core = self.core
        while True:
            self._wake = trio.Event()
            if self._fatal is not None:
                raise self._fatal
            poll = core.poll(self._now())
            await self._make_durable()
            if self._execute(poll.outputs):
                log.info("raft: node %d left the quorum", self.node_id)
                return
            self._run_queued_calls()
            if self._fatal is not None:
                raise self._fatal
            deadline = poll.deadline / 1000
            held = self._commits_held_until
            if held is not None:
                if trio.current_time() >= held:
                    self._commits_held_until = None
                    self._deliver_commits(core.high_watermark)
                    continue
                deadline = min(deadline, held)
            with trio.move_on_at(deadline):
                await self._wake.wait()

    async def _make_durable(self) -> None:
        """fsync what the core appended (or truncated) so far, in a worker thread. Until it is
        done the core is not called (see the module docstring)."""
        job = self.log.begin_flush()
        if job is None:
            return
        self._flushing = True
        self._flushes_begun += 1
        try:
            # Not abandoned on cancellation: a shutdown waits for the fsync to finish.
            await trio.to_thread.run_sync(job.run)
            self.log.finish_flush(job)
            self._flushes_done = self._flushes_begun
        finally:
            self._flushing = False
            done, self._flush_done = self._flush_done, trio.Event()
            done.set()

    async def _core_idle(self) -> None:
        """Wait until no flush is in flight (the core may then be called)."""
        while self._flushing:
            await self._flush_done.wait()

    async def _durable(self) -> None:
        """Wait until everything appended so far is durable (a flush begun from now on covers
        it; the loop begins one as soon as it runs)."""
        target = self._flushes_begun + 1
        while self._flushes_done < target and (self.log.flush_pending or self._flushing):
            if not self._running:
                return
            self._wakeup()
            await self._flush_done.wait()

    def _run_queued_calls(self) -> None:
        """Give the core what the peers answered while a flush was in flight, in order."""
        while self._queued_calls and not self._flushing:
            fn, args = self._queued_calls.pop(0)
            try:
                fn(*args)
            except RaftInvariantError:
                return  # _call recorded it: the loop raises it

    def _execute(self, outputs) -> bool:
        """Carry out a poll's outputs in order; True once shutdown is complete."""
        done = False
        for out in outputs:
            if isinstance(out, PersistQuorumState):
                self._qfile.write(out.state, out.voters)
            elif isinstance(out, SendRequest):
                self._transport.send(out.destination, out.request_id, out.message)
            elif isinstance(out, SendResponse):
                waiter = self._responses.pop(out.token, None)
                if waiter is not None:
                    waiter.response = out.message
                    waiter.event.set()
            elif isinstance(out, HighWatermarkAdvanced):
                self._deliver_commits(out.high_watermark)
            elif isinstance(out, SnapshotLoaded):
                self._load_snapshot(out.snapshot_id)
            elif isinstance(out, LeaderChanged):
                self._leader_changed(out.leader)
            elif isinstance(out, LogTruncated):
                self._fail_commit_waiters(
                    lambda w, end=out.end_offset: w.offset >= end,
                    "the entry was truncated: another leader's log won",
                )
            elif isinstance(out, ShutdownComplete):
                done = True
        return done

    def _call(self, fn, *args):
        """Call the core from a task other than the loop, then wake the loop."""
        try:
            return fn(*args)
        except RaftInvariantError as e:
            self._fatal = e
            raise
        finally:
            self._wakeup()

    def _on_response(self, source: int, request_id: int, response: Message) -> None:
        if self._running:
            self._call_or_queue(self._handle_response, source, request_id, response)

    def _on_failure(self, destination: int, request_id: int) -> None:
        if self._running:
            self._call_or_queue(self._handle_failure, destination, request_id)

    def _handle_response(self, source: int, request_id: int, response: Message) -> None:
        # A follower appends what it fetched here and flushes synchronously, as before: it then
        # hands the newly committed entries to its listeners in the same step, and a broker
        # answering a forwarded CreateTopics relies on having applied them by then.
        self._call(self.core.handle_response, source, request_id, response, self._now())

    def _handle_failure(self, destination: int, request_id: int) -> None:
        self._call(self.core.handle_request_failure, destination, request_id, self._now())

    def _call_deferring_flush(self, fn, *args):
        """Call the core with the log's fsync left to :meth:`_make_durable` (the hot path:
        proposals at the leader, one per controller write). Elsewhere (a follower's fetched
        entries, elections, snapshots) the core flushes synchronously, as before: a follower
        applies what it fetched in the same step, and leadership and its announcement change
        together."""
        log_ = self.log
        log_.defer_flush = True
        try:
            return self._call(fn, *args)
        finally:
            log_.defer_flush = False

    def _call_or_queue(self, fn, *args) -> None:
        """Call now, or once the flush in flight is done (the transport's callbacks are
        synchronous: they cannot wait for it)."""
        if self._flushing or self._queued_calls:
            self._queued_calls.append((fn, args))
        else:
            fn(*args)

    # -- state machine events ----------------------------------------------------------------

    def _deliver_commits(self, high_watermark: int) -> None:
        if self._commits_held_until is not None:
            return  # testing: delivered by the loop once the delay is over
        log_ = self.log
        while self._applied < high_watermark:
            if self._applied < log_.start_offset:
                # Only a snapshot can move the log start past what was applied; reload it.
                latest = self.snapshots.latest_id()
                if latest is None or latest.offset < log_.start_offset:
                    raise RaftInvariantError(
                        f"entries [{self._applied}, {log_.start_offset}) were never applied "
                        "and no snapshot holds them"
                    )
                self._load_snapshot(latest)
                continue
            entries = log_.read(self._applied, COMMIT_READ_BYTES)
            if not entries:
                break
            batch = [
                (e.offset, e.value)
                for e in entries
                if e.offset < high_watermark and e.control_type is None
            ]
            self._applied = min(entries[-1].offset + 1, high_watermark)
            if batch:
                self._notify(self._commit_listeners, batch)
        self._resolve_commit_waiters()
        self._maybe_tell_leadership()

    def _load_snapshot(self, sid: OffsetAndEpoch) -> None:
        reader = self.snapshots.reader(sid)
        self._applied = sid.offset  # the state is now the snapshot's
        self._notify(self._snapshot_listeners, reader)
        self._resolve_commit_waiters()

    def _leader_changed(self, leader: LeaderAndEpoch) -> None:
        if leader.leader_id == self.node_id:
            # Told once everything committed before this epoch was applied: that is, once
            # the LeaderChangeMessage this node just appended is committed.
            self._pending_leader = (leader, self.log.end_offset)
            self._maybe_tell_leadership()
            return
        self._pending_leader = None
        self._tell_leader(leader)

    def _maybe_tell_leadership(self) -> None:
        pending = self._pending_leader
        if pending is None or self._applied < pending[1]:
            return
        self._pending_leader = None
        if self.core.leader_and_epoch == pending[0]:
            self._tell_leader(pending[0])

    def _tell_leader(self, leader: LeaderAndEpoch) -> None:
        if leader == self._told_leader:
            return
        self._told_leader = leader
        for callback in list(self._leader_listeners):
            try:
                callback(leader.leader_id, leader.epoch)
            except Exception:
                log.exception("raft: a leader-change listener failed")

    def _notify(self, listeners, argument) -> None:
        for callback in list(listeners):
            try:
                callback(argument)
            except Exception:
                # The log moved on regardless; the listener's owner must notice and recover.
                log.exception("raft: a listener failed on %r", argument)

    def _resolve_commit_waiters(self) -> None:
        keep = []
        for waiter in self._commit_waiters:
            if waiter.offset < self._applied:
                waiter.event.set()
            else:
                keep.append(waiter)
        self._commit_waiters = keep

    def _fail_commit_waiters(self, which, why: str) -> None:
        keep = []
        for waiter in self._commit_waiters:
            if which(waiter):
                waiter.error = NotLeaderError(why, self.leader_and_epoch)
                waiter.event.set()
            else:
                keep.append(waiter)
        self._commit_waiters = keep

    # -- the API for the rest of kcore -------------------------------------------------------

    async def propose(self, values: Sequence[bytes]) -> range:
        """Append ``values`` (framed metadata records) as one batch; returns their offsets.

        They are durable locally when this returns; :meth:`wait_for_commit` on the last offset
        waits for the quorum.

        Raises:
            NotLeaderError: this node does not lead (``error.leader`` says who does).
        """
        await trio.lowlevel.checkpoint()
        if not self._running:
            raise NotLeaderError("the metadata quorum is not running", self.leader_and_epoch)
        # Not held back by a flush in flight (group commit: the next flush covers this batch
        # and any other appended meanwhile). Safe, unlike other core calls then: appending at
        # the leader changes nothing in the outputs waiting for that flush, it only adds new
        # ones, which wait for the next.
        offsets = self._call_deferring_flush(self.core.propose, values, self._now())
        await self._durable()
        return offsets

    async def wait_for_commit(self, offset: int, timeout: float | None = None) -> None:
        """Wait until the entry at ``offset`` is committed and given to the commit listeners.

        Raises:
            trio.TooSlowError: ``timeout`` seconds passed first.
            NotLeaderError: the entry was truncated (a new leader's log replaced it), or the
                driver stopped.
        """
        if offset < self._applied:
            await trio.lowlevel.checkpoint()
            return
        if not self._running:
            raise NotLeaderError("the metadata quorum is not running", self.leader_and_epoch)
        waiter = _CommitWaiter(offset)
        self._commit_waiters.append(waiter)
        try:
            with trio.fail_after(float("inf") if timeout is None else timeout):
                await waiter.event.wait()
        finally:
            if waiter in self._commit_waiters:
                self._commit_waiters.remove(waiter)
        if waiter.error is not None:
            raise waiter.error

    def create_snapshot(
        self, end_offset: int, records: Iterable[bytes], *, last_contained_log_timestamp=-1
    ) -> OffsetAndEpoch:
        """Store a snapshot of the state after applying every entry below ``end_offset``.

        ``records`` (e.g. ``encode_record`` of each of ``image_records(image)``) are framed in
        Kafka's snapshot format. The log is then cut at the snapshot and older snapshots are
        deleted; followers behind the new log start will fetch this snapshot.

        Raises:
            ValueError: ``end_offset`` is not committed, or not past the log start.
        """
        if self.core is None:
            raise RuntimeError("the metadata quorum is not running")
        start, hw = self.log.start_offset, self.core.high_watermark
        if not start < end_offset <= hw:
            raise ValueError(f"snapshot end {end_offset} must be in ({start}, {hw}]")
        epoch = self.log.read(end_offset - 1, 1)[0].epoch
        data = encode_snapshot(
            OffsetAndEpoch(end_offset, epoch),
            records,
            last_contained_log_timestamp=last_contained_log_timestamp,
        )
        return self._call(self.core.create_snapshot, end_offset, data, self._now())

    async def handle(self, api_key: int, version: int, body: Message) -> Message:
        """Answer a Raft request from the network (Vote, BeginQuorumEpoch, EndQuorumEpoch,
        Fetch of ``__cluster_metadata``, FetchSnapshot, DescribeQuorum). A Fetch with nothing
        to return waits at the leader up to its ``MaxWaitMs``.

        Raises:
            KafkaError: BROKER_NOT_AVAILABLE when the quorum is not running (the network layer
                answers with that code), INVALID_REQUEST for a body that is no Raft request.
        """
        await self._core_idle()
        if not self._running:
            await trio.lowlevel.checkpoint()
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the metadata quorum is not running")
        token = next(self._tokens)
        waiter = self._responses[token] = _ResponseWaiter()
        try:
            self._call(self.core.handle_request, _source_of(body), token, body, self._now())
        except TypeError as e:
            self._responses.pop(token, None)
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
        try:
            await waiter.event.wait()
        finally:
            self._responses.pop(token, None)
        if waiter.error is not None:
            raise waiter.error
        if isinstance(waiter.response, m.DescribeQuorumResponse):
            _to_wall_clock(waiter.response, round(time.time() * 1000) - self._now())
        return waiter.response

    def register_handlers(
        self, registry: Any, *, listeners: Iterable[str] = (CONTROLLER_LISTENER,)
    ) -> None:
        """Serve the Raft APIs on ``registry``'s controller listeners (see
        :func:`register_raft_handlers`)."""
        register_raft_handlers(registry, self.handle, listeners=listeners)

    def __repr__(self) -> str:
        return f"RaftDriver({self.core!r})" if self.core else f"RaftDriver(node={self.node_id})"
