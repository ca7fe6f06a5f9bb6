"""The kcore process: storage, metadata quorum, controller and broker, wired together.

Theory of operation
-------------------
:meth:`KafkaBroker.run` starts, in one nursery and in this order:

1. the **log manager** (recovering logs after an unclean shutdown);
2. the **metadata quorum** (Raft on ``__cluster_metadata-0``) whose committed batches feed the
   **metadata loader**; this object is a publisher of the loader: every new image is turned into
   replica-manager changes (partitions created, led, followed, deleted) and config reloads;
3. on controller nodes, the **controller service**, active while this node leads the quorum;
   then the **group coordinator** shell (:mod:`kcore.server.group_coordinator`), which loads the
   groups of the ``__consumer_offsets`` partitions this broker leads after every metadata change,
   and the **transaction coordinator** shell (:mod:`kcore.server.transaction_coordinator`), the
   same for ``__transaction_state``, which also holds this broker's producer ids and writes the
   COMMIT/ABORT markers; and the **cluster mirror coordinator** shell
   (:mod:`kcore.server.mirror_coordinator`), the same for ``__mirror_state``;
4. the **listeners** (:class:`~kcore.server.network.KafkaServer`), broker listeners serving the
   client APIs and controller listeners the Raft and controller APIs;
5. the **broker lifecycle**: registration with the controller, then heartbeats every
   ``broker.heartbeat.interval.ms``; the broker is ready once the controller unfences it;
6. the **maintenance** task (log flush, retention, checkpoints) and the **log cleaner** task
   (Kafka's cleaner thread: each round read and written in a worker thread).

Shutdown (:meth:`KafkaBroker.request_stop`: SIGTERM/SIGINT in ``kcore server``) stops accepting,
lets in-flight requests finish under a deadline, resigns Raft leadership, and closes every log
cleanly (producer snapshots, trimmed indexes, checkpoints, the clean-shutdown marker) so the next
start scans nothing. A plain cancellation skips the draining but still closes the logs.

Handlers reach the services through this object (``ctx.server``): ``replica_manager``,
``metadata_image``, ``purgatory``, ``fetch_manager``, ``group_coordinator``,
``transaction_coordinator``, ``mirror_coordinator``, ``internal_topics``, ``authorizer``
(None: no authorizer), ``replica_selector`` (None: consumers read from leaders only),
``partition_writer``, ``clock``, :meth:`controller_call`, ...
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from kcore.admin.server import AdminServer
from kcore.log.config import InvalidConfigError, LogConfig
from kcore.log.log_dirs import MetaProperties, random_uuid, uuid_to_base64
from kcore.log.log_manager import LogManager
from kcore.metadata.authorizer import build_authorizer, parse_super_users
from kcore.metadata.context import ControllerConfig
from kcore.metadata.controller import QuorumController
from kcore.metadata.features import SUPPORTED_FEATURES
from kcore.metadata.image import ConfigResourceType, MetadataImage
from kcore.metadata.publisher import MetadataLoader
from kcore.mirror.manager import MirrorManager
from kcore.mirror.metadata_sync_shell import MirrorMetadataSync
from kcore.mirror.read_only import MirrorWriteGuard
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.replica.replica_manager import ReplicaManager
from kcore.replica.replica_selector import build_replica_selector
from kcore.security.internal_security import InternalSecurity
from kcore.security.tls_transport import TlsListeners
from kcore.server.bootstrap_file import read_bootstrap
from kcore.server.clock import SYSTEM_CLOCK, Clock
from kcore.server.config import BrokerConfig
from kcore.server.connection_quotas import ConnectionLimitsConfig, limits_from_layers
from kcore.server.controller_channel import ControllerChannel
from kcore.server.controller_service import ControllerService
from kcore.server.coordinator_shell import ReplicaPartitionWriter, wait_for_high_watermarks
from kcore.server.fetch_session import FetchManager, FetchSessionCache
from kcore.server.gc_policy import CHECK_INTERVAL_S as GC_CHECK_INTERVAL_S
from kcore.server.gc_policy import GcFreezePolicy, freeze_long_lived
from kcore.server.group_coordinator import GroupCoordinatorService
from kcore.server.handlers import all_handlers, controller_apis
from kcore.server.handlers.api_versions import UNKNOWN_FINALIZED_FEATURES_EPOCH, FinalizedFeatures
from kcore.server.handlers.cluster_mirrors import LocalMirrorStats
from kcore.server.internal_topics import CLUSTER_MIRROR, InternalTopics
from kcore.server.metadata_snapshots import MetadataSnapshotter
from kcore.server.mirror_coordinator import MirrorCoordinatorService, inter_broker_client
from kcore.server.network import ConnectionLimits, KafkaServer, ListenerSpec, resolve_host
from kcore.server.purgatory import Purgatory
from kcore.server.registry import BROKER, CONTROLLER
from kcore.server.replication import IsrChanges, ReplicaFetchers
from kcore.server.request_metrics import TopicTraffic
from kcore.server.transaction_coordinator import TransactionCoordinatorService

log = logging.getLogger(__name__)

# The maintenance task wakes at the shortest period it serves (see _maintenance_interval_s),
# within these bounds: at least 1 s apart as it always was, and at most 10 s, so that with
# Kafka's defaults (retention check 5 min, checkpoints 60 s, file.delete.delay.ms 60 s, no
# time-based flush) an idle node wakes for it 0.1 times a second instead of once, and a segment
# waiting for deletion goes at most 10 s late.
MAINTENANCE_MIN_INTERVAL_S = 1.0
MAINTENANCE_MAX_INTERVAL_S = 10.0
SHUTDOWN_DRAIN_S = 5.0
METADATA_TOPIC = "__cluster_metadata"


def ensure_formatted(config: BrokerConfig, cluster_id: str | None = None) -> str:
    """Write ``meta.properties`` where missing (``kcore format``); returns the cluster id.

    Every directory must end up in the same cluster; a directory already formatted for another
    cluster or node is refused.
    """
    dirs = [Path(d) for d in (*config.log_dirs, config.metadata_log_dir)]
    existing = [MetaProperties.read(d) for d in dirs if d.exists()]
    known = {mp.cluster_id for mp in existing if mp is not None}
    if len(known) > 1:
        raise ValueError(f"log directories belong to different clusters: {sorted(known)}")
    cluster = cluster_id or (known.pop() if known else uuid_to_base64(random_uuid()))
    for d in dict.fromkeys(dirs):
        d.mkdir(parents=True, exist_ok=True)
        mp = MetaProperties.read(d)
        if mp is None:
            MetaProperties(cluster, config.node_id, random_uuid()).write(d)
        elif mp.cluster_id != cluster or mp.node_id != config.node_id:
            raise ValueError(
                f"{d} is formatted for cluster {mp.cluster_id} node {mp.node_id}, not cluster "
                f"{cluster} node {config.node_id}"
            )
    return cluster


class KafkaBroker:
    """One kcore node (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        quorum_factory: Callable[..., Any],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``quorum_factory(broker)`` builds the metadata quorum driver (kcore.raft.driver);
        ``clock`` is the wall clock of the shells (timestamps, the cores' ``now``)."""
        self.config = config
        self.clock = clock
        self.node_id = config.node_id
        self.cluster_id: str | None = None
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.purgatory = Purgatory()
        # Bytes and records produced and fetched per topic, counted by the handlers (/metrics).
        self.topic_traffic = TopicTraffic()
        self.fetch_manager = FetchManager(
            FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        )
        self.loader = MetadataLoader()
        self.log_manager = LogManager(
            list(config.log_dirs),
            self._topic_config,
            retention_check_interval_ms=config.log_retention_check_interval_ms,
            checkpoint_interval_ms=config.log_flush_offset_checkpoint_interval_ms,
            # As Kafka, log.cleaner.threads=0 starts no cleaner thread: nothing is compacted.
            cleaner_backoff_ms=(
                config.log_cleaner_backoff_ms
                if config.log_cleaner_enable and config.log_cleaner_threads > 0
                else None
            ),
        )
        # Cluster mirroring: topics whose mirror.name is active are read-only (D-18).
        self.mirror_write_guard = MirrorWriteGuard(lambda topic: self._topic_config(topic).mirror)
        # Follower replication (kcore/server/replication.py): the ISR changes leaders propose.
        self.isr_changes = IsrChanges(self)
        self.replica_manager = ReplicaManager(
            self.node_id,
            self.log_manager,
            notify=self.purgatory.notify,
            min_insync_replicas=lambda topic: self._topic_config(topic).min_insync_replicas,
            write_guard=self.mirror_write_guard,
            alter_isr=self.isr_changes.submit,
        )
        # The replica fetchers: the partitions this broker follows, copied from their leaders.
        self.replica_fetchers = ReplicaFetchers(self)
        self.replica_manager.add_listener(self.replica_fetchers.listener)
        # The coordinators' view of their internal topics' partitions.
        self.partition_writer = ReplicaPartitionWriter(self.replica_manager, self.purgatory)
        # authorizer.class.name: Kafka's StandardAuthorizer over this node's metadata image
        # (ACLs in force as soon as the image has them), or None: every request is allowed.
        self.authorizer = build_authorizer(
            config.authorizer_class_name,
            lambda: self.metadata_image.acls,
            super_users=parse_super_users(config.super_users),
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        )
        # replica.selector.class: which replica a consumer is sent to (KIP-392), None: the leader.
        self.replica_selector = build_replica_selector(config.replica_selector_class)
        # SSL listeners: their contexts (stores loaded now: a bad one stops the node here).
        self.tls_listeners = TlsListeners(config)
        # How this node connects to its cluster's inter-broker and controller listeners (the
        # one rule every internal client follows; stores loaded now, as the listeners' are).
        self.internal_security = InternalSecurity(config)
        self.registry = all_handlers(config)
        if config.is_controller:
            controller_apis.register(self.registry)  # forwarded controller requests
        if config.is_broker:
            controller_apis.register_forwarded(self.registry)  # controller APIs clients send
        self.server = KafkaServer(
            self.registry,
            self,
            ConnectionLimits(
                max_frame_bytes=config.socket_request_max_bytes,
                idle_timeout_s=config.connections_max_idle_ms / 1000,
                quotas=self._connection_limits(None),
                inter_broker_listener=config.inter_broker_listener_name
                if config.is_broker
                else None,
            ),
        )
        self.internal_topics = InternalTopics(self)
        self.group_coordinator = GroupCoordinatorService(self)
        self.transaction_coordinator = TransactionCoordinatorService(self)
        # Cluster mirroring (KIP-1279): the per-partition mirror states in __mirror_state; the
        # mirror RPCs (kcore/server/handlers/cluster_mirrors.py) read partition states through
        # it (a MirrorStateReader, local or at the coordinator) and per-partition numbers from
        # the mirror fetcher (once wired: a MirrorStatsProvider).
        self.mirror_coordinator = MirrorCoordinatorService(self)
        self.mirror_state_reader = self.mirror_coordinator.access
        self.mirror_stats = LocalMirrorStats(self.replica_manager, lambda: self.mirror_fetchers)
        # The mirror partitions this broker leads, each run by its state machine.
        self.mirror_manager = MirrorManager(self)
        # The metadata sync of the mirrors this broker coordinates (spec §4.2).
        self.mirror_sync = MirrorMetadataSync(
            self,
            own_client=lambda: inter_broker_client(self, f"kcore-mirror-sync-{self.node_id}"),
            find_coordinator=lambda name: self.internal_topics.coordinator(CLUSTER_MIRROR, name),
        )
        # TxnOffsetCommit only for a group whose offsets partition joined the transaction
        # (transaction.partition.verification.enable, Kafka's default: on).
        self.group_coordinator.verify_txn_offset_commit = (
            self.transaction_coordinator.verify_txn_offset_commit
        )
        # They load and unload their partitions after each change of this node's partitions.
        self.replica_manager.add_listener(lambda _: self.group_coordinator.leadership_changed())
        self.replica_manager.add_listener(
            lambda _: self.transaction_coordinator.leadership_changed()
        )
        self.replica_manager.add_listener(lambda _: self.mirror_coordinator.leadership_changed())
        self.quorum = quorum_factory(self)
        self.controller_service: ControllerService | None = None
        self._only_voter = [v.id for v in config.controller_quorum_voters] == [self.node_id]
        self.controller_channel = ControllerChannel(
            self.node_id,
            self.quorum,
            config.controller_quorum_voters,
            local=self._submit_local if config.is_controller else None,
            connect_options=self.internal_security.controller().connect_options(),
        )
        self.snapshotter = MetadataSnapshotter(
            self.quorum,
            lambda: self.metadata_image,
            config.metadata_log_max_record_bytes_between_snapshots,
        )
        self.ready = trio.Event()
        self.gc_policy = GcFreezePolicy()
        self._maintenance_wake = trio.Event()  # set when topics or configs change
        self._stop_requested = trio.Event()
        self.stopped = trio.Event()
        self._shut_down_acked = trio.Event()
        self.bound: dict[str, tuple[str, int]] = {}
        # The HTTP admin endpoint (admin.listeners), built here so a bad token file fails the
        # start before anything is opened; admin_urls are its bound URLs once it serves.
        self.admin_server = AdminServer(self) if config.admin_listeners else None
        self.admin_urls: list[str] = []
        self._topic_configs: dict[str, LogConfig] = {}
        # The offset of the image in which the finalized features last changed (see features()).
        self._features_changed_at = UNKNOWN_FINALIZED_FEATURES_EPOCH
        self._nursery: trio.Nursery | None = None  # the node's services, while it runs
        self.mirror_fetchers: dict[str, Any] = {}  # mirror name -> MirrorFetcherManager
        self._mirror_scopes: dict[str, trio.CancelScope] = {}

    # -- what handlers use -------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """A graceful shutdown has begun (:meth:`request_stop`)."""
        return self._stop_requested.is_set()

    @property
    def metadata_image(self) -> MetadataImage:
        return self.loader.image

    @property
    def auto_create_topics(self) -> bool:
        return self.config.auto_create_topics_enable

    def features(self, listener_type: str) -> FinalizedFeatures:
        """The finalized features ApiVersions v3+ reports on ``listener_type``, and their epoch.

        As Kafka's two ApiVersion managers: a broker listener reports the image's offset
        (``KRaftMetadataCache.features``), so the epoch moves with every metadata change; a
        controller listener the offset of the image in which the features last changed (the
        controller's ``FeaturesPublisher``), so it moves only with the features.
        """
        image = self.metadata_image
        epoch = self._features_changed_at if listener_type == CONTROLLER else image.offset
        return FinalizedFeatures(image.features.finalized, epoch)

    def controller_id_for_clients(self) -> int:
        """KRaft brokers name a broker as "controller" to clients: admin requests sent there
        are forwarded to the real controller (Kafka does the same)."""
        return self.node_id

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None:
        topic = self.metadata_image.topics.by_id.get(topic_id)
        return None if topic is None else topic.name

    def topic_mirror_name(self, topic: str) -> str | None:
        """The topic's ``mirror.name`` config (spec M-04), None for a topic of no mirror."""
        return self._topic_config(topic).mirror

    def _forget_topic_configs(self, topics: set[str] | None) -> None:
        """Drop the cached configs of ``topics`` (all when None). Only those: the mirror
        manager asks every led partition's ``mirror.name`` after each metadata update, and
        resolving 1,000 topics' configs again each time was a quarter of a second."""
        if topics is None:
            self._topic_configs.clear()
        else:
            for topic in topics:
                self._topic_configs.pop(topic, None)

    def _topic_config(self, topic: str) -> LogConfig:
        cached = self._topic_configs.get(topic)
        if cached is None:
            configs = self.metadata_image.configs
            overrides = dict(configs.topic(topic))
            # Kafka's order: topic override, this broker's dynamic config, the cluster-wide
            # dynamic default, server.properties (AlterConfigs on BROKER takes effect here).
            cached = LogConfig.from_layers(
                overrides,
                self.config.raw,
                dynamic_broker_config=configs.broker(self.node_id),
                dynamic_default_broker_config=configs.cluster_defaults(),
            )
            self._topic_configs[topic] = cached
        return cached

    def _connection_limits(self, image: MetadataImage | None) -> ConnectionLimitsConfig:
        """The connection limits of ``image``'s dynamic configs over ``server.properties``."""
        layers = [self.config.raw]
        if image is not None:
            layers[:0] = [image.configs.broker(self.node_id), image.configs.cluster_defaults()]
        names = [listener.name for listener in self.config.listeners]
        try:
            return limits_from_layers(layers, names, resolve_host)
        except OSError as e:  # at startup: refuse to start; later the caller keeps the old ones
            key = "max.connections.per.ip.overrides"
            raise InvalidConfigError(key, f"{key} names a host that does not resolve: {e}") from e

    def dynamic_value(self, key: str) -> Any:
        """A broker config honoured at run time: this broker's dynamic value, else the
        cluster-wide dynamic default, else ``server.properties`` (Kafka's precedence)."""
        configs = self.metadata_image.configs
        for layer in (configs.broker(self.node_id), configs.cluster_defaults()):
            text = layer.get(key)
            if text is not None:
                return BrokerConfig({key: text}).value(key)
        return self.config.value(key)

    async def controller_call(self, operation: Callable[[QuorumController, int], Any]) -> Any:
        """Run a controller operation and return its response once committed.

        The active controller in this process (or the only voter being this node) runs it
        here; otherwise it is forwarded to the active controller over the network
        (:mod:`kcore.server.controller_channel`), retrying while leadership moves.
        """
        service = self.controller_service
        if service is not None and (service.is_active or self._only_voter):
            return await self._submit_local(operation)
        return await self.controller_channel.call(operation)

    async def _submit_local(self, operation: Callable[[QuorumController, int], Any]) -> Any:
        if self.controller_service is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller in this process")
        # submit() returns once the records are committed, and the quorum calls every commit
        # listener (this broker's metadata loader among them) before that: the image has them.
        return await self.controller_service.submit(operation)

    async def auto_create_topic(self, name: str) -> None:
        request = m.CreateTopicsRequest(
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=-1, replication_factor=-1
                )
            ],
            timeout_ms=30000,
        )
        response = await self.controller_call(lambda c, now: c.create_topics(request))
        result = response.topics[0]
        if result.error_code:
            raise KafkaError(result.error_code, result.error_message)

    async def wait_for_high_watermarks(self, waits, timeout_s: float) -> None:
        """acks=all: wait until each partition's HW passes the appended offsets, as Kafka's
        ``DelayedProduce``. ``waits`` holds ``(topic, index, end offset, leader epoch of the
        append, response entry)``. An entry whose partition is no longer led here at that
        epoch says NOT_LEADER_OR_FOLLOWER (its write may be truncated away); one whose HW did
        not get there in time, REQUEST_TIMED_OUT; one that got there with fewer in-sync
        replicas than ``min.insync.replicas``, NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
        partitions = self.replica_manager.partitions
        epochs = {(topic, index): epoch for topic, index, _, epoch, _ in waits}

        def led(topic: str, index: int):
            partition = partitions.get((topic, index))
            if partition is None or not partition.is_leader:
                return None
            return partition if partition.leader_epoch == epochs[(topic, index)] else None

        def high_watermark(topic: str, index: int) -> int | None:
            partition = led(topic, index)
            return None if partition is None else partition.high_watermark

        short = await wait_for_high_watermarks(
            self.purgatory,
            high_watermark,
            [(topic, index, required) for topic, index, required, _, _ in waits],
            timeout_s,
        )
        for topic, index, _required, _epoch, entry in waits:
            partition = led(topic, index)
            if partition is None:
                entry.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                entry.error_message = (
                    f"leadership of {topic}-{index} changed before the write was replicated"
                )
            elif (topic, index) in short:
                entry.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
            else:
                isr = len(partition.maximal_isr)
                min_isr = self._topic_config(topic).min_insync_replicas
                if isr < min_isr:
                    entry.error_code = int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                    entry.error_message = (
                        f"{topic}-{index} has {isr} in-sync replicas, fewer than "
                        f"min.insync.replicas ({min_isr}), after the append"
                    )

    # -- cluster mirroring: this broker's mirror fetchers ------------------------------------

    async def start_mirror_fetcher(self, mirror: str, bootstrap_servers: str, **options):
        """Start (or return the running) :class:`~kcore.mirror.fetcher.MirrorFetcherManager`
        of ``mirror`` in this node's nursery; ``options`` are its keyword arguments
        (``listener``, ``config``, ``num_fetchers``, ``client_options``). Whoever runs the
        mirror's state machine adds and removes its partitions."""
        from kcore.mirror.fetcher import MirrorFetcherManager

        running = self.mirror_fetchers.get(mirror)
        if running is not None:
            return running
        if self._nursery is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "the node is not running")
        manager = MirrorFetcherManager(
            mirror, self.node_id, self.replica_manager, bootstrap_servers, **options
        )
        scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await manager.run(task_status=task_status)

        await self._nursery.start(run)
        self.mirror_fetchers[mirror] = manager
        self._mirror_scopes[mirror] = scope
        return manager

    def stop_mirror_fetcher(self, mirror: str) -> None:
        """Stop ``mirror``'s fetchers and close its connections (nothing if none runs)."""
        self.mirror_fetchers.pop(mirror, None)
        scope = self._mirror_scopes.pop(mirror, None)
        if scope is not None:
            scope.cancel()

    # -- metadata publisher ------------------------------------------------------------------

    def on_metadata_update(self, delta, image: MetadataImage) -> None:
        now = self.clock.wall_ms()
        if getattr(delta, "features", None) is not None:
            self._features_changed_at = image.offset
        changed = (getattr(delta, "configs_delta", None), getattr(delta, "topics_delta", None))
        if changed != (None, None):
            self._maintenance_wake.set()  # a new log or config may need an earlier tick
        configs_delta = getattr(delta, "configs_delta", None)
        if configs_delta is not None:
            resources = getattr(configs_delta, "changed", None)
            # A broker default may have changed, or a snapshot replaced everything (its delta
            # does not list the resources it dropped): every topic's configs then.
            topics = None
            if (
                resources is not None
                and not getattr(delta, "snapshot", False)
                and all(kind == ConfigResourceType.TOPIC for kind, _ in resources)
            ):
                topics = {name for _, name in resources}
            self._forget_topic_configs(topics)
            # Certificate reload: dynamic listener.name.<l>.ssl.* configs of this broker.
            self.tls_listeners.on_dynamic_configs(image.configs.broker(self.node_id))
            try:  # max.connections and friends: bind new connections (and excess ones) now
                self.server.update_connection_limits(self._connection_limits(image))
            except KafkaError as e:  # an override's host that no longer resolves, say
                log.warning("connection limits not updated: %s", e.message)
            self.log_manager.update_configs(topics)
        topics_delta = getattr(delta, "topics_delta", None)
        if topics_delta is not None:
            self._forget_topic_configs(_topic_names(topics_delta))
            # Partitions created, led, followed, deleted; then its listeners (coordinators).
            self.replica_manager.apply_delta(topics_delta, now)
        if changed != (None, None):
            # Led mirror partitions and their mirror.name: the mirror manager's drivers.
            self.mirror_manager.reconcile()
        self.mirror_sync.on_metadata_update(delta)

    # -- lifecycle ---------------------------------------------------------------------------

    def _listener_specs(self) -> list[ListenerSpec]:
        controller_names = set(self.config.controller_listener_names)
        specs = []
        for listener in self.config.listeners:
            kind = CONTROLLER if listener.name in controller_names else BROKER
            host = listener.host or "0.0.0.0"
            # Client listeners wait for the first metadata catch-up (see run()).
            sasl = self.config.sasl_listeners.get(listener.name)
            tls = self.tls_listeners.get(listener.name)
            early = kind == CONTROLLER
            specs.append(
                ListenerSpec(listener.name, host, listener.port, kind, early, sasl=sasl, tls=tls)
            )
        return specs

    def request_stop(self) -> None:
        """Begin a graceful shutdown (SIGTERM, ``EmbeddedCluster.stop``); :meth:`run` returns
        when it is done."""
        self._stop_requested.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        self.cluster_id = ensure_formatted(config)
        self.quorum.cluster_id = self.cluster_id
        self.loader = MetadataLoader(cluster_id=self.cluster_id)
        self.loader.install_publisher(self)
        self.log_manager.startup(self.clock.wall_ms())
        self.quorum.on_commit(self._on_metadata_commit)
        self.quorum.on_snapshot_loaded(self._on_metadata_snapshot)
        self.snapshotter.install()  # after the loader: it snapshots the loader's image
        if config.is_controller:
            controller = QuorumController(
                ControllerConfig.from_properties(config.effective, cluster_id=self.cluster_id)
            )
            self.controller_service = ControllerService(
                self.node_id,
                controller,
                self.quorum,
                image=lambda: self.metadata_image,
                bootstrap=read_bootstrap(config.metadata_log_dir),  # kcore format --add-scram
            )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                # Before the metadata is replayed: its partitions may be followed at once.
                await nursery.start(self.replica_fetchers.run)
                await nursery.start(self.isr_changes.run)
                await nursery.start(self.quorum.run)
                if self.controller_service is not None:
                    await nursery.start(self.controller_service.run)
                await nursery.start(self.group_coordinator.run)
                await nursery.start(self.transaction_coordinator.run)
                await nursery.start(self.mirror_coordinator.run)
                await nursery.start(self.mirror_manager.run)
                await nursery.start(self.mirror_sync.run)
                self.bound = await nursery.start(self.server.serve, self._listener_specs())
                if self.admin_server is not None:  # before catch-up: /health/ready says so
                    self.admin_urls = await nursery.start(self.admin_server.run)
                if config.is_broker:
                    await nursery.start(self._broker_lifecycle)
                # Only now may clients be served: the image has caught up with the metadata log
                # (a client is never told that an existing topic does not exist), and the
                # replica manager has opened the partitions it names. Kafka's BrokerServer
                # likewise waits for the controller to call it caught up, for the first
                # published image and for unfencing before enableRequestProcessing.
                await self.server.enable_request_processing()
                nursery.start_soon(self._maintenance)
                nursery.start_soon(self._gc_freezer)
                if self.log_manager.cleaner_backoff_ms is not None:
                    nursery.start_soon(self._log_cleaner)
                nursery.start_soon(self.snapshotter.run)
                log.info(
                    "kcore node %d of cluster %s is ready (%s), data in %s",
                    self.node_id,
                    self.cluster_id,
                    ", ".join(f"{n}://{h}:{p}" for n, (h, p) in self.bound.items()),
                    ", ".join(map(str, config.log_dirs)),
                )
                self.ready.set()
                task_status.started(self)
                await self._stop_requested.wait()
                await self._drain()
                self.log_manager.abort_cleaning()  # a long round would hold up the cancel
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self.mirror_fetchers.clear()
            self._mirror_scopes.clear()
            with trio.CancelScope(shield=True):
                self.log_manager.shutdown(self.broker_epoch)
                await self.controller_channel.aclose()
                log.info("kcore node %d stopped cleanly", self.node_id)
                self.stopped.set()

    async def _drain(self) -> None:
        """Graceful steps while every service still runs: stop accepting connections and let
        in-flight requests finish, then leave the metadata quorum (a leader resigns)."""
        log.info("kcore node %d shutting down", self.node_id)
        with trio.move_on_after(SHUTDOWN_DRAIN_S):
            await self.server.drain()
        if self.config.is_broker and self.broker_epoch >= 0:
            # Controlled shutdown: heartbeats now ask to shut down; the controller moves this
            # broker's leaderships away and fences it, so a restart may register at once.
            with trio.move_on_after(SHUTDOWN_DRAIN_S):
                await self._shut_down_acked.wait()
        try:
            with trio.move_on_after(SHUTDOWN_DRAIN_S):
                await self.quorum.begin_shutdown(SHUTDOWN_DRAIN_S)
        except Exception:
            log.exception("leaving the metadata quorum failed")

    def _on_metadata_commit(self, entries) -> None:
        self.loader.handle_commit(entries)

    def _on_metadata_snapshot(self, reader) -> None:
        """A snapshot replaced the metadata log (fetched from the leader): reload from it."""
        self.loader.load_snapshot(reader.records(), reader.snapshot_id.offset - 1)

    def _maintenance_interval_s(self) -> float:
        """How long the maintenance task may sleep: the log manager's maintenance period,
        within the bounds above."""
        period_s = self.log_manager.maintenance_period_ms() / 1000
        return min(max(period_s, MAINTENANCE_MIN_INTERVAL_S), MAINTENANCE_MAX_INTERVAL_S)

    async def _maintenance(self) -> None:
        last_run = trio.current_time()
        while True:
            # A metadata change only recomputes the deadline (a new topic may have a short
            # flush.ms); the deadline counts from the last run, so a stream of changes cannot
            # postpone the work.
            self._maintenance_wake = trio.Event()
            with trio.move_on_at(last_run + self._maintenance_interval_s()):
                await self._maintenance_wake.wait()
                continue
            last_run = trio.current_time()
            checkpoints = self.log_manager.maintain(self.clock.wall_ms())
            if checkpoints is not None:
                # 6 fsyncs per log dir: 2 ms idle, tens of ms under write load; off the event
                # loop. One write at a time (this loop waits for it; the log manager's lock
                # orders it against shutdown's own checkpoint). Not abandoned on cancel, so
                # shutdown never races a half-finished write of the same file.
                await trio.to_thread.run_sync(checkpoints.write)

    async def _gc_freezer(self) -> None:
        """Freeze the long-lived objects once serving and after each large change of the
        partition count (``kcore/server/gc_policy.py``: full collections over 10,000 mirror
        partitions' objects stalled the loop 0.3-0.8 s each, docs/performance.md)."""
        while True:
            partitions = len(self.replica_manager.partitions)
            if self.gc_policy.due(partitions, trio.current_time()):
                freeze_long_lived(partitions)
                self.gc_policy.frozen(partitions)
            await trio.sleep(GC_CHECK_INTERVAL_S)

    async def _log_cleaner(self) -> None:
        """Kafka's cleaner thread: rounds of the log cleaner, each read, filtered and written
        in a worker thread so that requests go on meanwhile (a round of 150 MB stalled the
        event loop 6 s), its first and last steps (the choice, the swap) here on the loop."""
        while True:
            wait_ms = self.log_manager.cleaner_wait_ms(self.clock.wall_ms()) or 0
            if wait_ms:
                await trio.sleep(wait_ms / 1000)
            prepared = self.log_manager.begin_cleaning(self.clock.wall_ms())
            if prepared is None:
                continue
            try:
                # Not abandoned on cancel: the round holds descriptors and files to clean up.
                await trio.to_thread.run_sync(prepared.run)
            finally:
                self.log_manager.finish_cleaning(prepared, self.clock.wall_ms())

    async def _broker_lifecycle(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register with the controller, then heartbeat; ready (``task_status.started()``) once
        unfenced and caught up.

        Caught up: this node's metadata image includes the broker's own ``RegisterBrokerRecord``
        (its offset is the broker epoch the controller answered), so every record committed
        before the registration — every topic that existed when this broker came back — is in
        the image, and the replica manager, a publisher called synchronously with each new
        image, has applied it. This is Kafka's ``isCaughtUp`` (the heartbeat's metadata offset
        at or past the registration record's offset, ``ClusterControlManager``) and the
        controller's own condition for unfencing; checked here as well so that the client
        listeners never open early, whatever the controller answers.
        """
        started = False
        while self.broker_epoch < 0:
            try:
                response = await self.controller_call(
                    lambda c, now: c.register_broker(self._registration_request(), now)
                )
                if response.error_code == 0:
                    self.broker_epoch = response.broker_epoch
                else:
                    log.warning("broker registration failed: %s", response.error_code)
            except KafkaError as e:
                log.debug("broker registration not possible yet: %s", e)
            if self.broker_epoch < 0:
                await trio.sleep(0.05)
        interval = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            fenced = True
            try:
                request = m.BrokerHeartbeatRequest(
                    broker_id=self.node_id,
                    broker_epoch=self.broker_epoch,
                    current_metadata_offset=self.metadata_image.offset,
                    want_shut_down=self._stop_requested.is_set(),
                )
                response = await self.controller_call(
                    lambda c, now, r=request: c.broker_heartbeat(r, now)
                )
                fenced = response.is_fenced
                if response.should_shut_down:
                    self._shut_down_acked.set()
            except KafkaError as e:
                log.debug("heartbeat failed: %s", e)
            caught_up = self.metadata_image.offset >= self.broker_epoch
            if not fenced and caught_up and not started:
                started = True
                log.info(
                    "broker %d caught up with the metadata log (offset %d, registered at %d)",
                    self.node_id,
                    self.metadata_image.offset,
                    self.broker_epoch,
                )
                task_status.started()
            shutting_down = self._stop_requested.is_set()
            with trio.move_on_after(0.05 if fenced or shutting_down else interval):
                if shutting_down:
                    await trio.sleep_forever()
                # A stop asks to shut down at once, not a heartbeat interval later (2 s by
                # default), as Kafka's BeginControlledShutdownEvent sends a heartbeat now.
                await self._stop_requested.wait()

    def _registration_request(self) -> m.BrokerRegistrationRequest:
        Req = m.BrokerRegistrationRequest
        listeners = [
            Req.Listener(
                name=li.name, host=li.host or "127.0.0.1", port=li.port, security_protocol=0
            )
            for li in self.config.advertised_listeners
        ]
        features = [
            Req.Feature(name=name, min_supported_version=lo, max_supported_version=hi)
            for name, (lo, hi) in SUPPORTED_FEATURES.items()
        ]
        return Req(
            broker_id=self.node_id,
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=listeners,
            features=features,
            rack=self.config.broker_rack,
        )


def _topic_names(topics_delta) -> set[str] | None:
    """The names of the topics a TopicsDelta creates, changes or removes (None: unknown)."""
    changed = getattr(topics_delta, "changed", None)
    deleted = getattr(topics_delta, "deleted", None)
    if changed is None or deleted is None:
        return None
    return {td.name for td in changed.values()} | {t.name for t in deleted.values()}
