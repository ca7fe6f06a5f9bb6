"""The Trio shell of the ClusterMirrorCoordinator: its log, its partitions, its clock.

Theory of operation
-------------------
The pure :class:`~kcore.mirror.coordinator.ClusterMirrorCoordinator` holds and validates the
state of every mirror partition; this shell gives it, through
:class:`~kcore.server.coordinator_shell.CoordinatorShell`:

* **a log.** ``append(partition, records)`` encodes the records
  (:mod:`kcore.mirror.records`) into one uncompressed batch appended to
  ``__mirror_state-<partition>`` with ``acks=all``, synchronously. A write is answered (and the
  local methods return) only once the partition's high watermark covers it: a transition is
  persisted before it takes effect (M-46) and survives a leader change. Past
  :data:`APPEND_TIMEOUT_S` the answer is COORDINATOR_NOT_AVAILABLE (retriable).
* **partitions.** After every metadata change the broker calls ``leadership_changed``: newly led
  ``__mirror_state`` partitions are replayed from their log start (the topic is never
  compacted, D-07) while their mirrors answer COORDINATOR_LOAD_IN_PROGRESS; lost ones are
  dropped at once (M-10). A failed load answers NOT_COORDINATOR and is retried.
* **snapshots** (D-07): when the core has written a snapshot of a partition's whole state, the
  records below it are deleted (DeleteRecords on ``__mirror_state``) once it is durable.
* **a clock.** The core has no timers yet; the shared timer loop runs for when it does.

Two ways in (M-11): the ReadMirrorStates / WriteMirrorStates handlers
(:mod:`kcore.server.handlers.mirror_states`) for a remote broker, and :meth:`read_states`,
:meth:`write_states`, :meth:`write_last_mirror_epochs`, :meth:`delete_mirror` for code on this
broker when it is the mirror's coordinator (:meth:`is_coordinator`); elsewhere
:mod:`kcore.client.mirror_states` finds the coordinator and asks it. :class:`MirrorStateAccess`
(``service.access``) picks the one or the other per call, so a caller on any broker simply asks
it; it is also the broker's :class:`~kcore.mirror.admission.MirrorStateReader`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import ClientError
from kcore.client.mirror_states import read_mirror_states, write_mirror_states
from kcore.mirror import records as rec
from kcore.mirror.coordinator import (
    ClusterMirrorCoordinator,
    MirrorCoordinatorConfig,
    PartitionMirrorState,
    StateUpdate,
    write_mirror_states_answer,
)
from kcore.mirror.state import MirrorPartitionState
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.coordinator_shell import CoordinatorShell

# As the transaction coordinator's appends: Kafka bounds them by request.timeout.ms (30 s).
APPEND_TIMEOUT_S = 30.0


class MirrorCoordinatorService(CoordinatorShell):
    """See the module docstring. ``writer`` and ``clock`` as in :class:`CoordinatorShell`."""

    topic = rec.MIRROR_STATE
    name = "cluster mirror coordinator"

    def __init__(self, broker, *, writer=None, clock=None) -> None:
        super().__init__(broker, writer=writer, clock=clock)
        config = MirrorCoordinatorConfig(
            state_topic_partitions=broker.config.value("mirror.state.topic.num.partitions"),
            snapshot_after_records=broker.config.value("mirror.state.snapshot.records"),
        )
        self.core = ClusterMirrorCoordinator(
            config, self._append, delete_before=self._delete_before
        )
        self.append_timeout_s = APPEND_TIMEOUT_S
        self.access = MirrorStateAccess(self)

    # -- local access (M-11) ------------------------------------------------------------------

    def is_coordinator(self, mirror_name: str) -> bool:
        """Whether this broker serves ``mirror_name``'s state now (loaded, not loading)."""
        return self.core.partition_for(mirror_name) in self.core.owned_partitions()

    async def read_states(
        self, mirror_name: str, topics: Mapping[str, Iterable[int]] | None = None
    ) -> dict[tuple[str, int], PartitionMirrorState]:
        """:meth:`ClusterMirrorCoordinator.read_states`; raises KafkaError (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, ...)."""
        return self.core.read_states(mirror_name, topics)

    async def write_states(
        self, mirror_name: str, updates: Iterable[StateUpdate], stopped_topics: Iterable[str] = ()
    ) -> None:
        """Persist transitions; returns once they are durable. Raises KafkaError."""
        updates, stopped = list(updates), list(stopped_topics)
        await self._durably(lambda now: self.core.write_states(mirror_name, updates, stopped))

    async def write_last_mirror_epochs(
        self, mirror_name: str, epochs: Mapping[tuple[str, int], int]
    ) -> None:
        """Persist last mirror epochs (D-09); returns once durable. Raises KafkaError."""
        await self._durably(lambda now: self.core.write_last_mirror_epochs(mirror_name, epochs))

    def synced_acls(self, mirror_name: str) -> frozenset:
        """:meth:`ClusterMirrorCoordinator.synced_acls` (the metadata sync's provenance, D-22);
        raises KafkaError (NOT_COORDINATOR ...)."""
        return self.core.synced_acls(mirror_name)

    async def write_synced_acls(self, mirror_name: str, acls) -> None:
        """Persist the ACLs the metadata sync created; returns once durable. Raises KafkaError."""
        acls = frozenset(acls)
        await self._durably(lambda now: self.core.write_synced_acls(mirror_name, acls))

    async def delete_mirror(self, mirror_name: str) -> None:
        """Tombstone the mirror's state (D-29); returns once durable. Raises KafkaError."""
        await self._durably(lambda now: self.core.delete_mirror(mirror_name))

    async def _durably(self, operation: Callable[[int], Any]) -> Any:
        result, ends = self._run_on_core(operation)
        if ends and not await self._wait_written(ends, self.append_timeout_s):
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"the {rec.MIRROR_STATE} write was not replicated in {self.append_timeout_s} s",
            )
        return result

    # -- the RPCs (remote access) -------------------------------------------------------------

    async def handle_read(self, request: m.ReadMirrorStatesRequest) -> m.ReadMirrorStatesResponse:
        return self.core.read_mirror_states(request)

    async def handle_write(
        self, request: m.WriteMirrorStatesRequest
    ) -> m.WriteMirrorStatesResponse:
        try:
            return await self._durably(lambda now: self.core.write_mirror_states(request))
        except KafkaError as e:  # written, but not replicated in time
            return write_mirror_states_answer(request, e)

    # -- the log ------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await super().run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await self.access.aclose()

    def _append(self, partition: int, records: list) -> int | None:
        return self._append_batch(partition, records, rec.encode)

    def _delete_before(self, partition: int, offset: int) -> None:
        """The core wrote a snapshot at ``offset``: delete what is below, once it is durable."""
        end = self._appended_end.get(partition)
        if self._nursery is not None and end is not None:
            self._nursery.start_soon(self._delete_when_durable, partition, offset, end)

    async def _delete_when_durable(self, partition: int, offset: int, end: int) -> None:
        """Never fails the shell: a deletion that does not happen leaves a longer replay."""
        try:
            if await self._wait_written({partition: end}, self.append_timeout_s):
                start = self.writer.delete_records_before(
                    self.topic, partition, offset, self.now_ms()
                )
                self._log.info("%s: %s-%d starts at %d", self.name, self.topic, partition, start)
        except KafkaError as e:  # leadership moved: the next snapshot deletes instead
            self._log.info("%s: not deleting below a snapshot: %s", self.name, e)
        except Exception:
            self._log.exception("%s: deleting below a snapshot failed", self.name)

    def _begin_loading(self, index: int, epoch: int) -> None:
        self.core.begin_loading(index)

    def _replay_batch(self, index: int, batch) -> int:
        """Replay one batch of ``__mirror_state-<index>``; returns the records replayed. The
        coordinator writes no control or transactional batches; any found are skipped."""
        if batch.is_control:
            return 0
        count = 0
        for record in batch.records():
            self.core.replay(index, rec.decode(record.key, record.value))
            count += 1
        return count


class MirrorStateAccess:
    """The state of any mirror from this broker (M-11): the local coordinator when this broker
    is the mirror's coordinator, otherwise ReadMirrorStates / WriteMirrorStates at the
    coordinator over this broker's inter-broker listener (the coordinator is looked up again,
    and the request retried, while it moves or loads). Implements
    :class:`~kcore.mirror.admission.MirrorStateReader`. Raises KafkaError."""

    def __init__(self, service: MirrorCoordinatorService) -> None:
        self.service = service
        self._client: KafkaClient | None = None

    async def read_states(
        self, mirror: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], MirrorPartitionState]:
        """The state of each partition asked (UNKNOWN where none is recorded)."""
        full = await self.read_full(mirror, partitions)
        return {tp: s.state for tp, s in full.items()}

    async def read_full(
        self, mirror: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], PartitionMirrorState]:
        """Everything recorded for the partitions asked (every recorded one when None)."""
        topics = None
        if partitions is not None:
            topics = {}
            for topic, index in partitions:
                topics.setdefault(topic, []).append(index)
        if self.service.is_coordinator(mirror):
            return await self.service.read_states(mirror, topics)
        if rec.MIRROR_STATE not in self.service.broker.metadata_image.topics.by_name:
            # No mirror has any state yet; a read does not create the topic (a write does).
            return {(t, p): PartitionMirrorState() for t, ps in (topics or {}).items() for p in ps}
        async with _reaching_the_coordinator():
            response = await read_mirror_states(await self._remote(), mirror, topics)
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message)
        return {
            (t.name, p.partition_index): PartitionMirrorState(
                MirrorPartitionState.from_code(p.state),
                MirrorPartitionState.from_code(p.previous_state),
                p.retry_attempt,
                p.reason,
                p.last_mirror_epoch,
            )
            for t in response.topics
            for p in t.partitions
        }

    async def write_states(
        self, mirror: str, updates: Iterable[StateUpdate], stopped_topics: Iterable[str] = ()
    ) -> None:
        """Persist transitions (all or none); returns once they are durable."""
        updates, stopped = list(updates), list(stopped_topics)
        if self.service.is_coordinator(mirror):
            await self.service.write_states(mirror, updates, stopped)
            return
        async with _reaching_the_coordinator():
            response = await write_mirror_states(await self._remote(), mirror, updates, stopped)
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message)

    async def _remote(self) -> KafkaClient:
        """A client bootstrapped on this broker's own inter-broker endpoint."""
        if self._client is None:
            broker = self.service.broker
            self._client = inter_broker_client(broker, f"kcore-mirror-states-{broker.node_id}")
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


@contextlib.asynccontextmanager
async def _reaching_the_coordinator():
    """A coordinator that cannot be reached is COORDINATOR_NOT_AVAILABLE (retriable), as the
    reader's callers expect a KafkaError, not the client's network error."""
    try:
        yield
    except ClientError as e:
        raise KafkaError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the mirror coordinator cannot be reached: {e}"
        ) from None


def inter_broker_client(broker, client_id: str, **options) -> KafkaClient:
    """A :class:`KafkaClient` of ``broker``'s own cluster, bootstrapped on this broker's
    inter-broker endpoint (what a broker uses to reach its cluster's coordinators). Raises
    KafkaError COORDINATOR_NOT_AVAILABLE while the broker is not registered with it."""
    registration = broker.metadata_image.cluster.brokers.get(broker.node_id)
    listener = broker.config.inter_broker_listener_name
    endpoint = None if registration is None else registration.listener(listener)
    if endpoint is None:
        raise KafkaError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, f"this broker has no {listener} endpoint"
        )
    security = broker.internal_security.inter_broker().connect_options()
    return KafkaClient(
        [f"{endpoint.host}:{endpoint.port}"], client_id=client_id, **security, **options
    )
