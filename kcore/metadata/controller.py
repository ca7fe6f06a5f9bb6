"""The controller's state machine (Kafka's ``QuorumController``), pure: no I/O, time passed in.

Theory of operation
-------------------
The controller's state is the latest :class:`~kcore.metadata.image.MetadataImage`, *including*
records appended but not yet committed, plus soft state (broker heartbeat times). An operation
validates its request against that state and returns a
:class:`~kcore.metadata.context.ControllerResult`: records and a response. It never changes the
state itself. The driver (the only caller) must, for every result::

    result = controller.create_topics(request)
    if result.records:
        offsets = raft.propose([encode_record(r) for r in result.records], now)   # one batch
        controller.replay_batch(result.records, offsets.start)                    # at once
        # ... and send result.response when the high watermark passes offsets[-1]
    else:
        send(result.response)                                                     # nothing to wait for

Replaying its own records right after appending them (before the next operation) is what
makes the next operation see them: two AllocateProducerIds in a row get different blocks, a
second CreateTopics for the same name fails. The driver also:

* replays every committed record it did not append itself (records from a previous leader, or
  everything while this node is not the active controller): ``replay_batch(records, offset)``
  skips offsets it has already replayed, so it may simply replay everything committed;
* reports the high watermark with ``commit(last_committed_offset)``;
* calls ``renounce()`` when this node stops being the active controller: the state goes back to
  the last committed offset (uncommitted records may be truncated away) and soft state is
  dropped;
* calls ``activate(now)`` when it becomes active, and appends the records it returns (the
  bootstrap records if the log is empty);
* calls ``poll(now)`` at ``next_deadline_ms(now)`` (and may call it any time): it fences one
  broker whose session expired, with the records that move its leaderships, or runs the
  elections the controller does on its own (unclean ones after a config change, the
  preferred-leader balance);
* passes the Raft log end offset with ``set_log_end_offset`` before ``register_broker`` if Raft
  appended control records the controller never sees (a broker's epoch is the offset of its
  registration record).

Operations
----------
``create_topics``, ``delete_topics``, ``create_partitions``, ``alter_configs``,
``incremental_alter_configs``, ``register_broker``, ``broker_heartbeat``, ``unregister_broker``,
``alter_partition``, ``elect_leaders``, ``bump_leader_epochs``, ``allocate_producer_ids``,
``update_features``,
``create_acls``, ``delete_acls``, ``alter_user_scram_credentials``,
``alter_partition_reassignments``,
``list_partition_reassignments``, and cluster mirroring's ``create_cluster_mirror``,
``delete_cluster_mirror``, ``start_mirror_topics``, ``stop_mirror_topics``,
``pause_mirror_topics``, ``resume_mirror_topics`` (:mod:`kcore.metadata.mirror_control`; the
CLUSTER_MIRROR config resource is registered for (Incremental)AlterConfigs): each takes the
decoded request (and the API version where
the version changes its meaning) and returns the response message to send.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcore.metadata import (
    acls,
    cluster_control,
    config_control,
    elections,
    features,
    mirror_control,
    producer_ids,
    reassignment,
    replication,
    scram_control,
)
from kcore.metadata.bootstrap import bootstrap_records
from kcore.metadata.cluster_control import BrokerHeartbeatTracker
from kcore.metadata.config_control import ConfigValidator
from kcore.metadata.context import ControllerConfig, ControllerContext, ControllerResult
from kcore.metadata.delta import MetadataDelta
from kcore.metadata.image import ConfigResourceType, MetadataImage
from kcore.protocol import messages as m
from kcore.protocol.messages import Message

UNCLEAN_KEY = "unclean.leader.election.enable"

__all__ = ["ControllerConfig", "ControllerResult", "QuorumController"]


@dataclass
class _Pending:
    """A replayed batch that is not fully committed yet, and the image before it."""

    first_offset: int
    last_offset: int
    image_before: MetadataImage
    records: list[tuple[int, Message]]


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        image: MetadataImage | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``image``: the committed state to start from (a loaded snapshot), else empty.
        ``rng``: the source of topic ids, ACL ids and placement choices (seed it in tests)."""
        if image is None:
            image = MetadataImage.empty(config.cluster_id)
        self.ctx = ControllerContext(config, image, rng if rng is not None else random.Random())
        self.ctx.heartbeats = BrokerHeartbeatTracker(config.broker_session_timeout_ms)
        self._pending: list[_Pending] = []
        # Soft state of the periodic elections: when the next leader balance is due (set at
        # activation), and whether an unclean.leader.election.enable change awaits a check.
        self._next_balance_ms: int | None = None
        self._unclean_check_due = False
        self.register_config_validator(
            ConfigResourceType.CLUSTER_MIRROR, mirror_control.ClusterMirrorConfigValidator()
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def config(self) -> ControllerConfig:
        return self.ctx.config

    @property
    def image(self) -> MetadataImage:
        """The latest state, uncommitted records included."""
        return self.ctx.image

    @property
    def last_offset(self) -> int:
        return self.ctx.last_offset

    @property
    def committed_offset(self) -> int:
        return self.ctx.committed_offset

    def replay(self, record: Message, offset: int) -> None:
        self.replay_batch([record], offset)

    def replay_batch(self, records: Sequence[Message], first_offset: int) -> None:
        """Apply records numbered from ``first_offset``; offsets already replayed are skipped."""
        numbered = [
            (first_offset + i, r)
            for i, r in enumerate(records)
            if first_offset + i > self.ctx.last_offset
        ]
        if not numbered:
            return
        before = self.ctx.image
        delta = MetadataDelta(before)
        for offset, rec in numbered:
            delta.replay(rec, offset)
        self.ctx.image = delta.apply()
        self.ctx.last_offset = numbered[-1][0]
        if any(
            isinstance(r, m.ConfigRecord) and r.name == UNCLEAN_KEY for _, r in numbered
        ):  # enabled dynamically: leaderless partitions may get a leader now
            self._unclean_check_due = True
        if numbered[-1][0] > self.ctx.committed_offset:
            self._pending.append(_Pending(numbered[0][0], numbered[-1][0], before, numbered))

    def commit(self, offset: int) -> None:
        """Records up to ``offset`` (inclusive) are committed."""
        if offset <= self.ctx.committed_offset:
            return
        self.ctx.committed_offset = offset
        self._pending = [p for p in self._pending if p.last_offset > offset]

    def set_log_end_offset(self, offset: int) -> None:
        """The offset the next appended record will get (see the module docstring)."""
        self.ctx.next_write_offset = offset

    def renounce(self) -> None:
        """No longer the active controller: back to the committed state, soft state dropped."""
        if self._pending:
            first = self._pending[0]
            self.ctx.image = first.image_before
            self.ctx.last_offset = first.first_offset - 1
            committed = [(o, r) for o, r in first.records if o <= self.ctx.committed_offset]
            self._pending = []
            if committed:
                self.replay_batch([r for _, r in committed], committed[0][0])
        self.ctx.heartbeats = BrokerHeartbeatTracker(self.config.broker_session_timeout_ms)
        self.ctx.next_write_offset = None
        self._next_balance_ms = None

    def register_config_validator(self, resource_type: int, validator: ConfigValidator) -> None:
        """Accept (Incremental)AlterConfigs for ``resource_type`` (for example CLUSTER_MIRROR),
        checked by ``validator``; a ``list_keys`` attribute on it names its LIST keys."""
        self.ctx.config_validators[int(resource_type)] = validator

    # -- activation and time -----------------------------------------------------------------

    def activate(
        self, now_ms: int, *, bootstrap: Iterable[Message] | None = None
    ) -> ControllerResult[None]:
        """Become the active controller. Every unfenced broker gets a fresh session; an empty
        log gets ``bootstrap`` (default: :func:`~kcore.metadata.bootstrap.bootstrap_records`)."""
        self.ctx.heartbeats = BrokerHeartbeatTracker(self.config.broker_session_timeout_ms)
        for reg in self.image.cluster.brokers.values():
            self.ctx.heartbeats.touch(reg.id, now_ms)
        if self.config.auto_leader_rebalance_enable:
            self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
        self._unclean_check_due = True  # a previous controller may have left one undone
        if self.image.features.metadata_version == 0:
            records = list(bootstrap) if bootstrap is not None else bootstrap_records()
            return ControllerResult.of(records, None)
        return ControllerResult.of([], None)

    def poll(self, now_ms: int) -> ControllerResult[int | None]:
        """Periodic work, one kind per call: fence one broker whose session expired (the
        response is its id); else, after an ``unclean.leader.election.enable`` change, elect
        leaders for the leaderless partitions it allows; else, every
        ``leader.imbalance.check.interval.seconds`` with ``auto.leader.rebalance.enable``,
        move leaderships back to preferred replicas (:mod:`kcore.metadata.elections`)."""
        fenced = cluster_control.fence_stale_broker(self.ctx, now_ms)
        if fenced.response is not None:
            return fenced
        if self._unclean_check_due:
            self._unclean_check_due = False
            return ControllerResult.of(elections.elect_unclean_leaders(self.ctx), None)
        if self._next_balance_ms is not None and self._next_balance_ms <= now_ms:
            self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
            percentage = self.config.leader_imbalance_per_broker_percentage
            return ControllerResult.of(elections.balance_leaders(self.ctx, percentage), None)
        return fenced

    def next_deadline_ms(self, now_ms: int) -> int | None:
        """When ``poll`` next has work to do, or None if never without new input."""
        deadlines = [cluster_control.next_session_deadline(self.ctx, now_ms)]
        if self._unclean_check_due:
            deadlines.append(now_ms)
        deadlines.append(self._next_balance_ms)
        due = [d for d in deadlines if d is not None]
        return min(due) if due else None

    # -- operations --------------------------------------------------------------------------

    def create_topics(
        self, request: m.CreateTopicsRequest
    ) -> ControllerResult[m.CreateTopicsResponse]:
        return replication.create_topics(self.ctx, request)

    def delete_topics(
        self, request: m.DeleteTopicsRequest, api_version: int = 6
    ) -> ControllerResult[m.DeleteTopicsResponse]:
        return replication.delete_topics(self.ctx, request, api_version)

    def create_partitions(
        self, request: m.CreatePartitionsRequest
    ) -> ControllerResult[m.CreatePartitionsResponse]:
        return replication.create_partitions(self.ctx, request)

    def alter_partition_reassignments(
        self, request: m.AlterPartitionReassignmentsRequest, api_version: int = 1
    ) -> ControllerResult[m.AlterPartitionReassignmentsResponse]:
        return reassignment.alter_partition_reassignments(self.ctx, request, api_version)

    def list_partition_reassignments(
        self, request: m.ListPartitionReassignmentsRequest
    ) -> ControllerResult[m.ListPartitionReassignmentsResponse]:
        return reassignment.list_partition_reassignments(self.ctx, request)

    def alter_partition(
        self, request: m.AlterPartitionRequest, api_version: int = 3
    ) -> ControllerResult[m.AlterPartitionResponse]:
        return replication.alter_partition(self.ctx, request, api_version)

    def elect_leaders(
        self, request: m.ElectLeadersRequest, api_version: int = 2
    ) -> ControllerResult[m.ElectLeadersResponse]:
        return elections.elect_leaders(self.ctx, request, api_version)

    def bump_leader_epochs(
        self, request: m.BumpLeaderEpochsRequest
    ) -> ControllerResult[m.BumpLeaderEpochsResponse]:
        return replication.bump_leader_epochs(self.ctx, request)

    def alter_configs(
        self, request: m.AlterConfigsRequest
    ) -> ControllerResult[m.AlterConfigsResponse]:
        return config_control.alter_configs(self.ctx, request)

    def incremental_alter_configs(
        self, request: m.IncrementalAlterConfigsRequest
    ) -> ControllerResult[m.IncrementalAlterConfigsResponse]:
        return config_control.incremental_alter_configs(self.ctx, request)

    def register_broker(
        self, request: m.BrokerRegistrationRequest, now_ms: int
    ) -> ControllerResult[m.BrokerRegistrationResponse]:
        return cluster_control.register_broker(self.ctx, request, now_ms)

    def broker_heartbeat(
        self, request: m.BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult[m.BrokerHeartbeatResponse]:
        return cluster_control.broker_heartbeat(self.ctx, request, now_ms)

    def unregister_broker(
        self, request: m.UnregisterBrokerRequest
    ) -> ControllerResult[m.UnregisterBrokerResponse]:
        return cluster_control.unregister_broker(self.ctx, request)

    def allocate_producer_ids(
        self, request: m.AllocateProducerIdsRequest
    ) -> ControllerResult[m.AllocateProducerIdsResponse]:
        return producer_ids.allocate_producer_ids(self.ctx, request)

    def update_features(
        self, request: m.UpdateFeaturesRequest, api_version: int = 2
    ) -> ControllerResult[m.UpdateFeaturesResponse]:
        return features.update_features(self.ctx, request, api_version)

    def create_acls(self, request: m.CreateAclsRequest) -> ControllerResult[m.CreateAclsResponse]:
        return acls.create_acls(self.ctx, request)

    def delete_acls(self, request: m.DeleteAclsRequest) -> ControllerResult[m.DeleteAclsResponse]:
        return acls.delete_acls(self.ctx, request)

    def alter_user_scram_credentials(
        self, request: m.AlterUserScramCredentialsRequest
    ) -> ControllerResult[m.AlterUserScramCredentialsResponse]:
        return scram_control.alter_user_scram_credentials(self.ctx, request)

    # -- cluster mirroring (spec §6.1-6.7) ---------------------------------------------------

    def create_cluster_mirror(
        self, request: m.CreateClusterMirrorRequest
    ) -> ControllerResult[m.CreateClusterMirrorResponse]:
        return mirror_control.create_cluster_mirror(self.ctx, request)

    def delete_cluster_mirror(
        self, request: m.DeleteClusterMirrorRequest
    ) -> ControllerResult[m.DeleteClusterMirrorResponse]:
        return mirror_control.delete_cluster_mirror(self.ctx, request)

    def start_mirror_topics(
        self, request: m.StartMirrorTopicsRequest
    ) -> ControllerResult[m.StartMirrorTopicsResponse]:
        return mirror_control.start_mirror_topics(self.ctx, request)

    def stop_mirror_topics(
        self, request: m.StopMirrorTopicsRequest
    ) -> ControllerResult[m.StopMirrorTopicsResponse]:
        return mirror_control.stop_mirror_topics(self.ctx, request)

    def pause_mirror_topics(
        self, request: m.PauseMirrorTopicsRequest
    ) -> ControllerResult[m.PauseMirrorTopicsResponse]:
        return mirror_control.pause_mirror_topics(self.ctx, request)

    def resume_mirror_topics(
        self, request: m.ResumeMirrorTopicsRequest
    ) -> ControllerResult[m.ResumeMirrorTopicsResponse]:
        return mirror_control.resume_mirror_topics(self.ctx, request)
