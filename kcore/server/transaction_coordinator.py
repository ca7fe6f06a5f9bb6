"""The Trio shell of the transaction coordinator: its log, its partitions, its clock, its markers.

Theory of operation
-------------------
The pure :class:`~kcore.coordinator.transaction.TransactionCoordinator` decides everything about
transactions (its package docstring is the contract this shell keeps); the shell gives it:

* **a log.** ``append(partition, entries)`` encodes the entries into one uncompressed batch and
  appends it to ``__transaction_state-<partition>`` through the replica manager with
  ``acks=all`` (the topic's ``min.insync.replicas`` applies), synchronously, so the core sees
  a refused write at once. A response that depended on a write leaves only once the partition's
  high watermark covers it; after :data:`APPEND_TIMEOUT_S` the client gets
  COORDINATOR_NOT_AVAILABLE (what Kafka's coordinator makes of REQUEST_TIMED_OUT) and retries.
  Markers of a decision are sent only once its PREPARE_X record is durable the same way.
* **producer ids.** :class:`ProducerIdSupply` holds a block of ids from the controller
  (AllocateProducerIds) and fetches the next one in the background when 90 % of the current
  block is used, as Kafka's ``RPCProducerIdManager``; ``next_producer_id()`` never blocks and
  raises COORDINATOR_LOAD_IN_PROGRESS (retriable) when no id is at hand.
* **partitions.** After every metadata change the broker calls :meth:`leadership_changed`; newly
  led ``__transaction_state`` partitions are loaded in the background with their leader epoch
  as the coordinator epoch (their ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), lost ones
  are unloaded at once. Loading replays the log from its start to its end; a transaction found
  in PREPARE_COMMIT / PREPARE_ABORT gets its markers sent again and completes.
* **a clock.** One task calls ``tick`` at the core's next deadline (timed-out transactions,
  expired ids, retries) and, after every wake-up, drains the due marker work; every request
  wakes it.
* **markers.** Each drained :class:`~kcore.coordinator.transaction.MarkerRequest` is split by
  the partitions' current leaders (the metadata image): this broker's share is written locally
  (:func:`write_txn_markers`, the code the WriteTxnMarkers handler runs), another broker's is
  sent to it as WriteTxnMarkers on its inter-broker listener. Outcomes go back through
  ``markers_written``: a partition whose topic is gone counts as written (Kafka skips it), one
  without a leader, a lost connection or a timeout is a retriable error, retried after
  ``retry_backoff_ms``.

The mechanics shared by both coordinators' shells (appending, waiting for the high
watermark, the leadership diff and loading, the timer loop) live in
:mod:`kcore.server.coordinator_shell`; this module keeps what is particular to this coordinator.

The core is synchronous and every call to it happens between two checkpoints of this one Trio
thread, so no lock is needed: an ``append`` never awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError
from kcore.coordinator.transaction import (
    TRANSACTION_STATE,
    MarkerRequest,
    TransactionConfig,
    TransactionCoordinator,
    decode,
    encode,
    errors_from_marker_result,
)
from kcore.log.producer_state import AppendOrigin
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.record.control import build_end_txn_marker_batch
from kcore.server.coordinator_shell import CoordinatorShell
from kcore.server.internal_topics import CONSUMER_OFFSETS, GROUP
from kcore.server.peer_clients import PeerClients

log = logging.getLogger(__name__)

# Kafka bounds coordinator appends and inter-broker marker requests by request.timeout.ms
# (30 s by default); kcore has no such broker key, so the default is used.
APPEND_TIMEOUT_S = 30.0
MARKER_REQUEST_TIMEOUT_S = 30.0
# Kafka's RPCProducerIdManager prefetches the next block once 90 % of the current one is used.
PREFETCH_AT_FRACTION = 0.9
PRODUCER_ID_RETRY_S = 0.1

_WTM = m.WriteTxnMarkersResponse


def transaction_config(config) -> TransactionConfig:
    """The core's settings from the broker's (Kafka's key names)."""
    return TransactionConfig(
        transaction_max_timeout_ms=config.value("transaction.max.timeout.ms"),
        transactional_id_expiration_ms=config.value("transactional.id.expiration.ms"),
        abort_timed_out_transactions_interval_ms=config.value(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        remove_expired_transactional_ids_interval_ms=config.value(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        state_log_partitions=config.value("transaction.state.log.num.partitions"),
    )


# -- producer ids ------------------------------------------------------------------------------


class ProducerIdSupply:
    """Producer ids from controller-allocated blocks (AllocateProducerIds, recorded in the
    metadata log as a ProducerIdsRecord, so no id is handed out twice, even across restarts).

    :meth:`next_producer_id` is synchronous: it takes the next id of the current block, moves
    to the prefetched block when the current one is used up, and otherwise raises
    COORDINATOR_LOAD_IN_PROGRESS and asks :meth:`run` (a background task) for a block.
    """

    def __init__(self, broker) -> None:
        self.broker = broker
        self._next = 0
        self._end = 0
        self._block_len = 0
        self._prefetched: tuple[int, int] | None = None  # (start, length)
        self._want = trio.Event()
        self._changed = trio.Event()
        self._want.set()  # fetch the first block as soon as the broker is registered

    @property
    def available(self) -> bool:
        return self._next < self._end or self._prefetched is not None

    def next_producer_id(self) -> int:
        """The next unused id; raises ``KafkaError(COORDINATOR_LOAD_IN_PROGRESS)`` if none."""
        if self._next >= self._end:
            if self._prefetched is None:
                self._want.set()
                raise KafkaError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "waiting for a block of producer ids"
                )
            start, length = self._prefetched
            self._prefetched = None
            self._next, self._end, self._block_len = start, start + length, length
        pid = self._next
        self._next += 1
        used = self._block_len - (self._end - self._next)
        if self._prefetched is None and used >= self._block_len * PREFETCH_AT_FRACTION:
            self._want.set()
        return pid

    async def wait_available(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until an id is at hand; True if one is."""
        with trio.move_on_after(timeout_s):
            while not self.available:
                self._want.set()
                await self._changed.wait()
        return self.available

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._want.wait()
            self._want = trio.Event()
            if self._prefetched is not None:
                continue
            while self._prefetched is None:
                try:
                    start, length = await self._allocate()
                except (KafkaError, ClientError) as e:
                    log.debug("allocating producer ids failed, retrying: %s", e)
                    await trio.sleep(PRODUCER_ID_RETRY_S)
                    continue
                if self._next >= self._end:  # nothing current: use it at once
                    self._next, self._end, self._block_len = start, start + length, length
                else:
                    self._prefetched = (start, length)
                break
            self._changed.set()
            self._changed = trio.Event()

    async def _allocate(self) -> tuple[int, int]:
        while self.broker.broker_epoch < 0:  # the controller wants a registered broker
            await trio.sleep(PRODUCER_ID_RETRY_S)
        request = m.AllocateProducerIdsRequest(
            broker_id=self.broker.node_id, broker_epoch=self.broker.broker_epoch
        )
        response = await self.broker.controller_call(
            lambda c, now: c.allocate_producer_ids(request)
        )
        if response.error_code:
            raise KafkaError(response.error_code, "could not allocate producer ids")
        return response.producer_id_start, response.producer_id_len


# -- WriteTxnMarkers, locally ---------------------------------------------------------------------


async def write_txn_markers(
    broker, markers: Iterable[m.WriteTxnMarkersRequest.WritableTxnMarker], timeout_s: float
) -> list[m.WriteTxnMarkersResponse.WritableTxnMarkerResult]:
    """Append each marker's COMMIT/ABORT control batch to each of its partitions this broker
    leads (``origin=COORDINATOR``, ``acks=all``) and wait until the high watermarks cover them.

    Per partition: NONE, or the append's error (UNKNOWN_TOPIC_OR_PARTITION when not hosted
    here, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH for a marker of
    an older producer epoch, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch),
    or REQUEST_TIMED_OUT when replication did not catch up within ``timeout_s``. A written
    marker on a ``__consumer_offsets`` partition completes the transaction's offset commits in
    the group coordinator.
    """
    replicas = broker.replica_manager
    results: list[_WTM.WritableTxnMarkerResult] = []
    waits: list[tuple[str, int, int, Any]] = []
    for marker in markers:
        topic_results = []
        for topic in marker.topics:
            partition_results = []
            for index in topic.partition_indexes:
                entry = _WTM.WritableTxnMarkerPartitionResult(partition_index=index)
                now = broker.clock.wall_ms()
                try:
                    partition = replicas.partition_or_error(topic.name, index)
                    batch = build_end_txn_marker_batch(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        marker.coordinator_epoch,
                        partition_leader_epoch=partition.state.leader_epoch,
                        timestamp=now,
                    )
                    info = replicas.append_records(
                        topic.name,
                        index,
                        batch,
                        required_acks=-1,
                        now_ms=now,
                        origin=AppendOrigin.COORDINATOR,
                    )
                    waits.append((topic.name, index, info.last_offset + 1, entry))
                    if topic.name == CONSUMER_OFFSETS:
                        # The marker is in the log now: the group state follows the log (a
                        # reload would replay it), whether or not the wait below times out.
                        _complete_offsets(broker, index, marker)
                except KafkaError as e:
                    entry.error_code = int(e.code)
                partition_results.append(entry)
            topic_results.append(
                _WTM.WritableTxnMarkerTopicResult(name=topic.name, partitions=partition_results)
            )
        results.append(
            _WTM.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topic_results)
        )
    writer = broker.partition_writer
    short = await writer.wait_for_high_watermarks(
        [(t, p, end) for t, p, end, _ in waits], timeout_s
    )
    for topic, index, _end, entry in waits:
        if (topic, index) in short or writer.log_bounds(topic, index) is None:
            entry.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
    return results


def _complete_offsets(broker, index: int, marker) -> None:
    """Tell the group coordinator the transaction's offset commits on ``index`` are decided."""
    try:
        broker.group_coordinator.core.complete_transaction(
            index,
            marker.producer_id,
            marker.producer_epoch,
            marker.transaction_result,
            broker.clock.wall_ms(),
        )
    except Exception:
        log.exception("group coordinator: completing the transaction of %d", marker.producer_id)
    broker.group_coordinator.kick()


# -- the service ------------------------------------------------------------------------------


class TransactionCoordinatorService(CoordinatorShell):
    """See the module docstring. ``broker`` gives the replica manager, config, metadata image
    and purgatory."""

    topic = TRANSACTION_STATE
    name = "transaction coordinator"

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.producer_ids = ProducerIdSupply(broker)
        self.core = TransactionCoordinator(
            transaction_config(broker.config),
            append=self._append,
            next_producer_id=self.producer_ids.next_producer_id,
            group_partition=lambda group: broker.internal_topics.partition_for(GROUP, group),
        )
        self._peers = PeerClients(
            broker,
            f"kcore-txn-coordinator-{broker.node_id}",
            request_timeout=MARKER_REQUEST_TIMEOUT_S,
        )
        self._nursery: trio.Nursery | None = None

    # -- what the handlers use ----------------------------------------------------------------

    async def call(self, operation: Callable[[int], Any]) -> Any:
        """Run ``operation(now_ms)`` on the core and answer once what it wrote is durable; if
        that takes longer than :data:`APPEND_TIMEOUT_S`, the response says
        COORDINATOR_NOT_AVAILABLE (the client retries)."""
        response, ends = self._run_on_core(operation)
        if ends and not await self._wait_written(ends, APPEND_TIMEOUT_S):
            _mark_failed(response, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return response

    async def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1, the one entry point both partition leaders (Produce) and the group
        coordinator (TxnOffsetCommit) use: are ``partitions`` in the ongoing transaction of
        ``transactional_id`` at this producer id and epoch?

        Asks the transactional id's coordinator: the core's ``verify_partitions`` when that is
        this broker (no network, no checkpoint), AddPartitionsToTxn v4+ ``verify_only`` on its
        inter-broker listener otherwise. Returns every partition's answer, as Kafka's
        ``AddPartitionsToTxnManager`` hands them to its callers: NONE; TRANSACTION_ABORTABLE
        (not in the transaction; the caller maps it for older request versions);
        INVALID_PRODUCER_EPOCH for a fenced producer (PRODUCER_FENCED, which producers do not
        expect here); INVALID_PRODUCER_ID_MAPPING; COORDINATOR_NOT_AVAILABLE when the
        ``__transaction_state`` partition has no leader or the leader no endpoint;
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / CONCURRENT_TRANSACTIONS from the
        coordinator; NETWORK_EXCEPTION when the request failed on the way; INVALID_TXN_STATE
        for a whole-request CLUSTER_AUTHORIZATION_FAILED (Kafka hides it from clients).
        """
        tps = list(partitions)
        tid = transactional_id
        info = self.broker.metadata_image.topics.by_name.get(TRANSACTION_STATE)
        registration = None if info is None else info.partitions.get(self.core.partition_for(tid))
        if registration is None or registration.leader < 0:
            return dict.fromkeys(tps, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            if registration.leader == self.broker.node_id:
                codes = self.core.verify_partitions(tid, producer_id, producer_epoch, tps)
            else:
                codes = await self._verify_remote(
                    registration.leader, tid, producer_id, producer_epoch, tps
                )
        except KafkaError as e:
            # BROKER_NOT_AVAILABLE: the leader has no endpoint we can reach, which Kafka's
            # getTransactionCoordinator reports as COORDINATOR_NOT_AVAILABLE.
            code = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if e.code == ErrorCode.BROKER_NOT_AVAILABLE
                else e.code
            )
            codes = dict.fromkeys(tps, code)
        except (ClientError, trio.TooSlowError, OSError):
            codes = dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        return {
            tp: ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code
            for tp, code in codes.items()
        }

    async def verify_txn_offset_commit(
        self, request: m.TxnOffsetCommitRequest, version: int
    ) -> ErrorCode:
        """KIP-890's check before a TxnOffsetCommit is written (installed as the group
        coordinator's ``verify_txn_offset_commit``): is the group's ``__consumer_offsets``
        partition in the producer's ongoing transaction (:meth:`verify_partitions`)?

        NONE when it is; INVALID_TXN_STATE (v4+: TRANSACTION_ABORTABLE) when the partition is
        not in the transaction; INVALID_PRODUCER_EPOCH for a fenced producer,
        INVALID_PRODUCER_ID_MAPPING for an unknown id; COORDINATOR_NOT_AVAILABLE (retriable)
        when the transaction coordinator cannot answer now. Off (always NONE) with
        ``transaction.partition.verification.enable=false``.
        """
        if not self.broker.dynamic_value("transaction.partition.verification.enable"):
            return ErrorCode.NONE
        tp = (CONSUMER_OFFSETS, self.broker.internal_topics.partition_for(GROUP, request.group_id))
        codes = await self.verify_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp]
        )
        return _txn_offset_commit_error(codes[tp], version)

    async def _verify_remote(
        self, node: int, tid: str, producer_id: int, producer_epoch: int, tps
    ) -> dict[tuple[str, int], ErrorCode]:
        A = m.AddPartitionsToTxnRequest
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        body = A(
            transactions=[
                A.AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=True,
                    topics=[
                        A.AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                        for topic, indexes in by_topic.items()
                    ],
                )
            ]
        )
        client = await self._client(node)
        response = await client.request("any", body)
        if response.error_code:
            code = _known(response.error_code)
            if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                code = ErrorCode.INVALID_TXN_STATE  # Kafka: clients must not see it
            return dict.fromkeys(tps, code)
        # A partition the answer does not mention was not verified.
        codes = dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR)
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    tp = (topic.name, p.partition_index)
                    if tp in codes:
                        codes[tp] = _known(p.partition_error_code)
        return codes

    # -- the log ------------------------------------------------------------------------------

    def _append(self, partition: int, entries: list) -> None:
        """The core's ``append``: one batch, synchronously; KafkaError when refused."""
        self._append_batch(partition, entries, encode)

    # -- partitions ---------------------------------------------------------------------------

    def _begin_loading(self, index: int, epoch: int) -> None:
        self.core.begin_loading(index, epoch)  # the leader epoch is the coordinator epoch

    def _replay_batch(self, index: int, batch) -> int:
        """Replay one batch of ``__transaction_state-<index>``; returns the records replayed.
        The topic holds no transactions of its own, so a control batch carries nothing."""
        if batch.is_control:
            return 0
        count = 0
        for record in batch.records():
            self.core.replay(index, decode(record.key, record.value))
            count += 1
        return count

    # -- the clock and the markers ------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._loader)
                await nursery.start(self.producer_ids.run)
                task_status.started()
                hold_ms = self.broker.config.value("kcore.testing.transaction.marker.hold.ms")
                if hold_ms:
                    # Testing only: the window between an acknowledged EndTxn and its markers
                    # that a crash test needs. No marker, timeout or expiry runs meanwhile.
                    await trio.sleep(hold_ms / 1000)
                await self._run_timer()
        finally:
            self._nursery = None
            await self._peers.aclose()

    def _after_tick(self, now: int) -> bool:
        self._send_due_markers(now)
        return True  # draining the markers may move the core's next deadline

    def _send_due_markers(self, now: int) -> None:
        """Send the marker work that is due (after every wake-up of the timer)."""
        markers = self.core.drain_markers(now)
        if markers and self._nursery is not None:
            self._nursery.start_soon(self._send_markers, markers)

    async def _send_markers(self, markers: list[MarkerRequest]) -> None:
        """Write the markers and report every partition's outcome to the core."""
        # Decisions are final only once their PREPARE_X record is durable: wait for it first.
        waits = []
        for marker in markers:
            partition = self.core.partition_for(marker.transactional_id)
            end = self._appended_end.get(partition)
            if end is not None:
                waits.append((TRANSACTION_STATE, partition, end))
        errors: dict[str, dict[tuple[str, int], int]] = {mk.transactional_id: {} for mk in markers}
        if waits and await self.writer.wait_for_high_watermarks(waits, APPEND_TIMEOUT_S):
            for marker in markers:
                errors[marker.transactional_id] = dict.fromkeys(
                    marker.partitions, int(ErrorCode.REQUEST_TIMED_OUT)
                )
            self._report(markers, errors)
            return
        # Split by the partitions' leaders: node -> [(marker, its partitions there)].
        image = self.broker.metadata_image
        by_node: dict[int, list[tuple[MarkerRequest, list[tuple[str, int]]]]] = {}
        for marker in markers:
            shares: dict[int, list[tuple[str, int]]] = {}
            for topic, index in marker.partitions:
                info = image.topics.by_name.get(topic)
                registration = None if info is None else info.partitions.get(index)
                if registration is None:
                    continue  # the topic (or partition) is gone: Kafka skips it, so written
                if registration.leader < 0:
                    errors[marker.transactional_id][(topic, index)] = int(
                        ErrorCode.LEADER_NOT_AVAILABLE
                    )
                    continue
                shares.setdefault(registration.leader, []).append((topic, index))
            for node, partitions in shares.items():
                by_node.setdefault(node, []).append((marker, partitions))
        async with trio.open_nursery() as nursery:
            for node, work in by_node.items():
                nursery.start_soon(self._send_to_node, node, work, errors)
        self._report(markers, errors)

    def _report(self, markers: list[MarkerRequest], errors) -> None:
        now = self.now_ms()
        for marker in markers:
            try:
                self.core.markers_written(marker, now, errors[marker.transactional_id])
            except Exception:
                log.exception("transaction coordinator: reporting markers failed")
        self.kick()

    async def _send_to_node(
        self,
        node: int,
        work: list[tuple[MarkerRequest, list[tuple[str, int]]]],
        errors: dict[str, dict[tuple[str, int], int]],
    ) -> None:
        entries = [marker.to_writable_marker(partitions) for marker, partitions in work]
        try:
            if node == self.broker.node_id:
                results = await write_txn_markers(self.broker, entries, APPEND_TIMEOUT_S)
            else:
                results = await self._send_remote(node, entries)
        except (KafkaError, ClientError, trio.TooSlowError, OSError) as e:
            code = e.code if isinstance(e, KafkaError) else ErrorCode.NETWORK_EXCEPTION
            log.info("transaction coordinator: markers to node %d failed: %s", node, e)
            for marker, partitions in work:
                for tp in partitions:
                    errors[marker.transactional_id][tp] = int(code)
            return
        by_pid: dict[int, dict[tuple[str, int], int]] = {}
        for result in results:
            by_pid.setdefault(result.producer_id, {}).update(errors_from_marker_result(result))
        for marker, partitions in work:
            answered = by_pid.get(marker.producer_id, {})
            for tp in partitions:
                # A partition the answer does not mention was not written: retry it.
                code = answered.get(tp, int(ErrorCode.UNKNOWN_SERVER_ERROR))
                if code:
                    errors[marker.transactional_id][tp] = int(code)

    async def _send_remote(
        self, node: int, entries: list[m.WriteTxnMarkersRequest.WritableTxnMarker]
    ) -> list[m.WriteTxnMarkersResponse.WritableTxnMarkerResult]:
        client = await self._client(node)
        response = await client.request("any", m.WriteTxnMarkersRequest(markers=entries))
        return response.markers

    async def _client(self, node: int) -> KafkaClient:
        """A client for broker ``node`` on its inter-broker listener (its ``"any"`` target is
        that broker)."""
        return await self._peers.get(node)


# Verification answers a TxnOffsetCommit client can act on: the transaction coordinator's own
# trouble is retriable for it (NOT_COORDINATOR would send it to look for another *group*
# coordinator).
_TXN_OFFSET_COMMIT_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}
# First TxnOffsetCommit version that understands TRANSACTION_ABORTABLE: v4 ("Version 4 adds
# support for new error code TRANSACTION_ABORTABLE (KIP-890)", TxnOffsetCommitRequest.json;
# Kafka's AddPartitionsToTxnManager.txnOffsetCommitRequestVersionToTransactionSupportedOperation
# maps v4 to genericErrorSupported, v0-3 to defaultError).
_TXN_OFFSET_COMMIT_ABORTABLE_SINCE = 4


def _txn_offset_commit_error(code: ErrorCode, version: int) -> ErrorCode:
    if code in (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_TXN_STATE):
        if version >= _TXN_OFFSET_COMMIT_ABORTABLE_SINCE:
            return ErrorCode.TRANSACTION_ABORTABLE
        return ErrorCode.INVALID_TXN_STATE
    return _TXN_OFFSET_COMMIT_ERRORS.get(code, code)


def _known(code: int) -> ErrorCode:
    """An answer's error code; one this broker does not know counts as UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _mark_failed(response: Any, code: ErrorCode) -> None:
    """Put ``code`` where the response of a coordinator API carries its errors."""
    if isinstance(response, m.AddPartitionsToTxnResponse):
        for topic in response.results_by_topic_v3_and_below or []:
            for p in topic.results_by_partition:
                p.partition_error_code = int(code)
        for txn in response.results_by_transaction or []:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    p.partition_error_code = int(code)
        return
    if hasattr(response, "error_code"):
        response.error_code = int(code)
        if hasattr(response, "producer_id"):
            response.producer_id = -1
            response.producer_epoch = -1
