"""Brokers: registration, heartbeats, fencing and controlled shutdown (Kafka's
``ClusterControlManager`` and ``BrokerHeartbeatManager``).

Broker states, as the controller sees them (the image's ``fenced`` / ``in_controlled_shutdown``
flags), and the heartbeat that moves each one:

=====================  ========================================  ==========================
state                  heartbeat                                 next state
=====================  ========================================  ==========================
FENCED                 wantShutDown, or was shut down            SHUTDOWN_NOW
FENCED                 not wantFence, metadata offset >= epoch   UNFENCED
FENCED                 otherwise                                 FENCED
UNFENCED               wantFence and wantShutDown                SHUTDOWN_NOW
UNFENCED               wantFence                                 FENCED
UNFENCED               wantShutDown, leads partitions            CONTROLLED_SHUTDOWN
UNFENCED               wantShutDown, leads nothing               SHUTDOWN_NOW
UNFENCED               otherwise                                 UNFENCED
CONTROLLED_SHUTDOWN    still leads partitions                    CONTROLLED_SHUTDOWN
CONTROLLED_SHUTDOWN    leads nothing, others caught up           SHUTDOWN_NOW
=====================  ========================================  ==========================

A broker's epoch is the offset of its ``RegisterBrokerRecord``; it starts fenced and is
unfenced once its heartbeats report a metadata offset at least that high (it has seen its own
registration). Entering FENCED or SHUTDOWN_NOW writes ``BrokerRegistrationChangeRecord
(Fenced=1)`` after moving its leaderships and removing it from ISRs; entering
CONTROLLED_SHUTDOWN writes ``InControlledShutdown=1`` and moves leaderships likewise.

Sessions: a broker that has not heartbeated for ``broker.session.timeout.ms`` (9000 by default)
is fenced by :func:`fence_stale_broker`, which the controller's ``poll(now)`` calls; one broker
per call, as Kafka does, so each fencing sees the last one's leadership moves. Heartbeat times
are soft state: a controller that becomes active gives every unfenced broker a fresh session.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.features import registration_feature_error
from kcore.metadata.replication import leader_and_isr_updates
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.protocol.messages import Message

__all__ = [
    "BrokerControlState",
    "BrokerHeartbeatTracker",
    "broker_heartbeat",
    "fence_stale_broker",
    "register_broker",
    "unregister_broker",
]


class BrokerControlState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass
class _Session:
    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1


@dataclass
class BrokerHeartbeatTracker:
    """Soft state: when each broker last heartbeated and how far its metadata has got."""

    session_timeout_ms: int
    sessions: dict[int, _Session] = field(default_factory=dict)

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int | None = None) -> None:
        s = self.sessions.get(broker_id)
        if s is None:
            s = self.sessions[broker_id] = _Session(now_ms)
        s.last_contact_ms = now_ms
        if metadata_offset is not None:
            s.metadata_offset = metadata_offset

    def forget(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def expired(self, broker_id: int, now_ms: int) -> bool:
        s = self.sessions.get(broker_id)
        return s is not None and now_ms > s.last_contact_ms + self.session_timeout_ms

    def deadline(self, broker_id: int) -> int | None:
        s = self.sessions.get(broker_id)
        return None if s is None else s.last_contact_ms + self.session_timeout_ms + 1


def _state(ctx: ControllerContext, broker_id: int) -> BrokerControlState:
    reg = ctx.image.cluster.brokers[broker_id]
    if reg.fenced:
        return BrokerControlState.FENCED
    if reg.in_controlled_shutdown:
        return BrokerControlState.CONTROLLED_SHUTDOWN
    return BrokerControlState.UNFENCED


def _leads_partitions(ctx: ControllerContext, broker_id: int) -> bool:
    return any(
        reg.leader == broker_id
        for topic in ctx.image.topics.by_id.values()
        for reg in topic.partitions.values()
    )


def _fence_records(ctx: ControllerContext, broker_id: int) -> list[Message]:
    reg = ctx.image.cluster.brokers[broker_id]
    records = leader_and_isr_updates(ctx, broker_to_remove=broker_id)
    records.append(
        m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch, fenced=1)
    )
    return records


# -- registration ------------------------------------------------------------------------------


def register_broker(
    ctx: ControllerContext, request: m.BrokerRegistrationRequest, now_ms: int
) -> ControllerResult[m.BrokerRegistrationResponse]:
    """BrokerRegistration: a ``RegisterBrokerRecord`` whose offset becomes the broker epoch.

    Errors (in the response's ErrorCode): INCONSISTENT_CLUSTER_ID; DUPLICATE_BROKER_REGISTRATION
    while another incarnation of the id still has a live session; UNSUPPORTED_VERSION when the
    broker does not support a finalized feature level; INVALID_REGISTRATION for duplicate or
    reserved log directory ids.
    """
    response = m.BrokerRegistrationResponse()
    try:
        record = _registration_record(ctx, request, now_ms)
    except KafkaError as e:
        response.error_code = int(e.code)
        return ControllerResult.of([], response)
    records: list[Message] = []
    existing = ctx.image.cluster.brokers.get(request.broker_id)
    if existing is not None and not existing.fenced:
        # The new registration starts fenced: the old one's leaderships and ISR places go
        # first, so that no partition is led by a fenced broker.
        records = leader_and_isr_updates(ctx, broker_to_remove=request.broker_id)
    record.broker_epoch = ctx.next_offset + len(records)
    records.append(record)
    ctx.heartbeats.touch(request.broker_id, now_ms)
    response.broker_epoch = record.broker_epoch
    return ControllerResult.of(records, response)


def _registration_record(
    ctx: ControllerContext, request: m.BrokerRegistrationRequest, now_ms: int
) -> m.RegisterBrokerRecord:
    if request.cluster_id != ctx.config.cluster_id:
        raise KafkaError(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"Expected cluster ID {ctx.config.cluster_id}, but got cluster ID {request.cluster_id}",
        )
    broker_id = request.broker_id
    existing = ctx.image.cluster.brokers.get(broker_id)
    if (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and not existing.fenced
        and not ctx.heartbeats.expired(broker_id, now_ms)
        and broker_id in ctx.heartbeats.sessions
    ):
        raise KafkaError(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            "Another broker is registered with that broker id.",
        )
    dirs = list(request.log_dirs)
    if len(set(dirs)) != len(dirs):
        raise KafkaError(ErrorCode.INVALID_REGISTRATION, "Duplicate directory ID in request")
    if any(d.int < 100 for d in dirs):  # DirectoryId.reserved: the first 100 ids
        raise KafkaError(ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request")
    features = {
        f.name: (f.min_supported_version, f.max_supported_version) for f in request.features
    }
    error = registration_feature_error(ctx.image.features.finalized, features)
    if error is not None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, error)
    return m.RegisterBrokerRecord(
        broker_id=broker_id,
        is_migrating_zk_broker=request.is_migrating_zk_broker,
        incarnation_id=request.incarnation_id,
        broker_epoch=ctx.next_offset,
        end_points=[
            m.RegisterBrokerRecord.BrokerEndpoint(
                name=ep.name, host=ep.host, port=ep.port, security_protocol=ep.security_protocol
            )
            for ep in request.listeners
        ],
        features=[
            m.RegisterBrokerRecord.BrokerFeature(
                name=name, min_supported_version=lo, max_supported_version=hi
            )
            for name, (lo, hi) in features.items()
        ],
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=dirs,
    )


def unregister_broker(
    ctx: ControllerContext, request: m.UnregisterBrokerRequest
) -> ControllerResult[m.UnregisterBrokerResponse]:
    response = m.UnregisterBrokerResponse(error_message=None)
    reg = ctx.image.cluster.brokers.get(request.broker_id)
    if reg is None:
        response.error_code = int(ErrorCode.BROKER_ID_NOT_REGISTERED)
        response.error_message = f"Broker ID {request.broker_id} is not currently registered"
        return ControllerResult.of([], response)
    records = leader_and_isr_updates(ctx, broker_to_remove=request.broker_id)
    records.append(m.UnregisterBrokerRecord(broker_id=reg.id, broker_epoch=reg.epoch))
    ctx.heartbeats.forget(request.broker_id)
    return ControllerResult.of(records, response)


# -- heartbeats --------------------------------------------------------------------------------


def broker_heartbeat(
    ctx: ControllerContext, request: m.BrokerHeartbeatRequest, now_ms: int
) -> ControllerResult[m.BrokerHeartbeatResponse]:
    response = m.BrokerHeartbeatResponse()
    try:
        ctx.check_broker_epoch(request.broker_id, request.broker_epoch)
    except KafkaError as e:
        response.error_code = int(e.code)
        return ControllerResult.of([], response)
    broker_id = request.broker_id
    current = _state(ctx, broker_id)
    nxt = _next_state(ctx, broker_id, current, request)
    records: list[Message] = []
    reg = ctx.image.cluster.brokers[broker_id]
    if nxt is not current:
        if nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
            if not reg.fenced:
                records = _fence_records(ctx, broker_id)
        elif nxt is BrokerControlState.UNFENCED:
            records = [
                m.BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=reg.epoch, fenced=-1
                )
            ]
            records += leader_and_isr_updates(ctx, broker_to_add=broker_id)
        elif nxt is BrokerControlState.CONTROLLED_SHUTDOWN:
            records = [
                m.BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=reg.epoch, in_controlled_shutdown=1
                )
            ]
            records += leader_and_isr_updates(ctx, broker_to_remove=broker_id)
            session = ctx.heartbeats.sessions.setdefault(broker_id, _Session(now_ms))
            session.controlled_shutdown_offset = ctx.next_offset + len(records) - 1
    ctx.heartbeats.touch(broker_id, now_ms, request.current_metadata_offset)
    # As current Kafka (ClusterControlManager): caught up once the broker's image holds its own
    # registration record, whose offset is the broker epoch. Comparing with the committed
    # offset, as older Kafka did, could keep a broker "behind" while metadata keeps moving.
    response.is_caught_up = request.current_metadata_offset >= reg.epoch
    response.is_fenced = nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)
    response.should_shut_down = nxt is BrokerControlState.SHUTDOWN_NOW
    return ControllerResult.of(records, response)


def _next_state(
    ctx: ControllerContext,
    broker_id: int,
    current: BrokerControlState,
    request: m.BrokerHeartbeatRequest,
) -> BrokerControlState:
    S = BrokerControlState
    if current is S.FENCED:
        if request.want_shut_down or ctx.image.cluster.brokers[broker_id].in_controlled_shutdown:
            # A broker fenced after a controlled shutdown must register again to come back.
            return S.SHUTDOWN_NOW
        if not request.want_fence:
            epoch = ctx.image.cluster.brokers[broker_id].epoch
            if request.current_metadata_offset >= epoch:
                return S.UNFENCED
        return S.FENCED
    if current is S.UNFENCED:
        if request.want_fence:
            return S.SHUTDOWN_NOW if request.want_shut_down else S.FENCED
        if request.want_shut_down:
            return S.CONTROLLED_SHUTDOWN if _leads_partitions(ctx, broker_id) else S.SHUTDOWN_NOW
        return S.UNFENCED
    # CONTROLLED_SHUTDOWN: done once it leads nothing and every active broker has seen that.
    if _leads_partitions(ctx, broker_id):
        return S.CONTROLLED_SHUTDOWN
    session = ctx.heartbeats.sessions.get(broker_id)
    shutdown_offset = session.controlled_shutdown_offset if session else -1
    if shutdown_offset <= _lowest_active_offset(ctx):
        return S.SHUTDOWN_NOW
    return S.CONTROLLED_SHUTDOWN


def _lowest_active_offset(ctx: ControllerContext) -> int:
    offsets = [
        ctx.heartbeats.sessions[b.id].metadata_offset
        for b in ctx.image.cluster.active_brokers()
        if b.id in ctx.heartbeats.sessions
    ]
    return min(offsets) if offsets else 2**63 - 1


# -- sessions ----------------------------------------------------------------------------------


def fence_stale_broker(ctx: ControllerContext, now_ms: int) -> ControllerResult[int | None]:
    """Fence one unfenced broker whose session expired; the response is its id (or None)."""
    for reg in ctx.image.cluster.brokers.values():
        if reg.fenced:
            continue
        if reg.id not in ctx.heartbeats.sessions:
            ctx.heartbeats.touch(reg.id, now_ms)  # a new controller gives a full session
            continue
        if ctx.heartbeats.expired(reg.id, now_ms):
            records = _fence_records(ctx, reg.id)
            ctx.heartbeats.forget(reg.id)
            return ControllerResult.of(records, reg.id)
    return ControllerResult.of([], None)


def next_session_deadline(ctx: ControllerContext, now_ms: int) -> int | None:
    """When :func:`fence_stale_broker` next has work (``now_ms`` if it has some now)."""
    deadlines = []
    for reg in ctx.image.cluster.brokers.values():
        if reg.fenced:
            continue
        d = ctx.heartbeats.deadline(reg.id)
        deadlines.append(now_ms if d is None else d)
    return max(now_ms, min(deadlines)) if deadlines else None
