"""Broker and controller configuration: ``server.properties`` plus ``--override`` layers.

What this is
------------
One table, :data:`BROKER_CONFIGS`, with one :class:`ServerConfigKey` per node-level key kcore
reads, under Apache Kafka's names and with Kafka's types, defaults and validators; and
:class:`BrokerConfig`, the immutable, typed result of parsing a ``server.properties`` file and
the command line's ``--override key=value`` arguments against that table. Topic-level ``log.*``
synonyms (``log.retention.hours``, ``log.segment.bytes``, ...) are not restated here: they belong
to :mod:`kcore.log.config`, which resolves them from :attr:`BrokerConfig.raw`::

    config = BrokerConfig.load("config/server.properties", overrides=["node.id=2"])
    log_config = LogConfig.from_layers(topic_overrides, config.raw)

Where the facts come from
-------------------------
Apache Kafka 4.x: key names, types and defaults from ``ServerConfigs``, ``KRaftConfigs``,
``QuorumConfig``, ``SocketServerConfigs``, ``ReplicationConfigs``, ``ServerLogConfigs``,
``GroupCoordinatorConfig`` and ``TransactionLogConfig`` as the 4.0 "Broker Configs" page lists
them; the cross-key rules and their messages from ``KafkaConfig.validateValues`` (4.x: broker
role, controller role, combined mode); listener parsing from ``SocketServerConfigs`` /
``EndpointUtils``; file syntax from ``java.util.Properties.load``. As in Kafka 3.9+ (KIP-853),
``advertised.listeners`` may name a controller listener: it is then the controller's advertised
endpoint, and a broker never publishes it (pre-3.9 Kafka refused such a value).

Where kcore differs from Kafka (each says why)
----------------------------------------------
Kafka has no defaults for the identity of a KRaft node; kcore's single-node quick start
(``make run``) must start with an empty file, so:

* ``process.roles`` defaults to ``broker,controller`` and ``node.id`` to ``1`` (Kafka: required).
* ``listeners`` defaults to ``PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093`` (only
  the first for ``process.roles=broker``, only the second for ``controller``; the controller
  listener takes the first name of ``controller.listener.names``). Kafka's is
  ``PLAINTEXT://:9092`` on every interface; kcore binds loopback until told otherwise.
* ``controller.listener.names`` defaults to ``CONTROLLER`` (Kafka: required).
* ``controller.quorum.voters``, when neither it nor ``controller.quorum.bootstrap.servers`` is
  set on a node with the controller role, defaults to this node alone:
  ``<node.id>@<host>:<port>`` of its controller listener (127.0.0.1 for a wildcard host).
* ``log.dir`` defaults to ``./data`` (Kafka: ``/tmp/kafka-logs``): the quick start keeps its
  data next to the checkout, and ``/tmp`` is emptied at reboot. ``log.dirs`` wins when set.
* Internal topics: ``offsets.topic.replication.factor``,
  ``transaction.state.log.replication.factor`` and (kcore-only, D-08)
  ``mirror.state.topic.replication.factor`` keep Kafka's default 3; unless
  ``kcore.replication.enable`` is set, kcore creates the topics with ``min(configured, 1)``
  replicas, logging once that it did, and caps ``transaction.state.log.min.isr`` at that
  factor. See :meth:`BrokerConfig.internal_topic_replication_factor`.
* Security protocols: every listener, the controller and inter-broker ones included, serves
  PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL (``ssl.*`` keys: kcore/security/tls_config.py,
  SASL: kcore/security/sasl_config.py). The node's own logins on its inter-broker and
  controller listeners (``sasl.mechanism.inter.broker.protocol``,
  ``sasl.mechanism.controller.protocol``, the listener's ``sasl.jaas.config``) are checked here
  (kcore/security/internal_security.py): Kafka's default GSSAPI is refused.
* ``controller.listener.names`` items are upper-cased like listener names (Kafka compares them
  case-sensitively, so a lower-case entry is an error there).
* ``--override key=value`` splits at the first ``=`` (Kafka refuses a value holding ``=``).
* ``num.io.threads``, ``num.network.threads``, ``background.threads`` and
  ``num.recovery.threads.per.data.dir`` are accepted and checked but unused: kcore is one Trio
  process.
* kcore-only keys: ``admin.*`` (the HTTP admin endpoint, :mod:`kcore.admin.config`) and the cluster-mirroring broker keys (spec §10.1, decisions D-08, D-13).
  There is no ``cluster.id`` key: the cluster id lives in ``meta.properties``.

Unknown keys are kept in :attr:`BrokerConfig.raw` and logged as Kafka logs them ("was supplied
but isn't a known config"); they never fail startup. A bad value, or keys that contradict each
other, raise :class:`~kcore.log.config.InvalidConfigError` naming the key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kcore.admin.config import parse_admin_listeners, validate_admin
from kcore.log.config import (
    INT_MAX,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigType,
    HostCounts,
    InvalidConfigError,
    ListOf,
    LogConfig,
    OneOf,
    Range,
    invalid_value,
    java_str,
    parse_text,
)
from kcore.metadata.authorizer import AuthorizerClassName, SuperUsers
from kcore.metadata.context import REPLICATION_FACTOR_LIMIT
from kcore.properties import (  # re-exported: the server reads its files with them
    MalformedPropertiesError,
    load_properties,
    parse_override,
    parse_properties,
)
from kcore.raft.config import parse_quorum_voters
from kcore.replica.replica_selector import ReplicaSelectorClass
from kcore.security.internal_security import check_internal_logins
from kcore.security.sasl_config import SASL_KEYS, sasl_listener_configs
from kcore.security.tls_config import TLS_CONFIG_KEYS
from kcore.server.listeners import (  # re-exported: part of the configuration's vocabulary
    SECURITY_PROTOCOLS,
    Listener,
    QuorumVoter,
    listener_name,
    loopback,
    parse_host_port,
    parse_listeners,
    parse_protocol_map,
)

log = logging.getLogger(__name__)

__all__ = [
    "BROKER_CONFIGS",
    "BrokerConfig",
    "Listener",
    "MalformedPropertiesError",
    "QuorumVoter",
    "ServerConfigKey",
    "load_properties",
    "parse_override",
    "parse_properties",
]

BROKER, CONTROLLER = "broker", "controller"


# -- the table ----------------------------------------------------------------------------------

_DERIVED = object()  # kcore computes the default from other keys (see the module docstring)
_SAME = object()  # kcore uses Kafka's default


@dataclass(frozen=True)
class ServerConfigKey:
    """One node config key. ``default`` is Kafka's (``None``: none); ``kcore_default`` is what
    kcore uses when it differs; ``attr`` names the :class:`BrokerConfig` attribute."""

    name: str
    type: ConfigType
    default: Any
    validator: Range | OneOf | ListOf | None
    doc: str
    kcore_default: Any = _SAME
    unused: bool = False  # accepted and checked, not acted on
    kcore_only: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def effective_default(self) -> Any:
        return self.default if self.kcore_default is _SAME else self.kcore_default


_k = ServerConfigKey
_B, _S, _I, _L = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG
_SH, _D, _LI = ConfigType.SHORT, ConfigType.DOUBLE, ConfigType.LIST
_R0, _R1 = Range(0), Range(1)
_D_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE

_KEYS = [
    # -- node identity and the KRaft quorum
    _k("process.roles", _LI, None, ListOf((BROKER, CONTROLLER)),
       "The roles of this node: broker, controller, or both.", kcore_default=(BROKER, CONTROLLER)),
    _k("node.id", _I, None, _R0, "The id of this node (broker and controller).", kcore_default=1),
    _k("broker.id", _I, -1, None, "Legacy name of node.id; when set it must equal node.id."),
    _k("controller.listener.names", _LI, (), None,
       "Names of the controller's listeners; brokers use the first.", kcore_default=("CONTROLLER",)),
    _k("controller.quorum.voters", _LI, (), None, "Static voters: id@host:port,...",
       kcore_default=_DERIVED),
    _k("controller.quorum.bootstrap.servers", _LI, (), None,
       "Controllers to bootstrap from (host:port,...) instead of static voters."),
    _k("controller.quorum.election.timeout.ms", _I, 1000, None, "Election timeout."),
    _k("controller.quorum.election.backoff.max.ms", _I, 1000, None, "Longest election backoff."),
    _k("controller.quorum.fetch.timeout.ms", _I, 2000, None, "Follower fetch timeout."),
    _k("controller.quorum.request.timeout.ms", _I, 2000, None, "Quorum request timeout."),
    _k("controller.quorum.retry.backoff.ms", _I, 20, None, "Pause after a failed quorum request."),
    _k("controller.quorum.append.linger.ms", _I, 25, None, "Leader's wait to batch writes."),
    _k("broker.session.timeout.ms", _I, 9000, None, "A broker's lease without heartbeats."),
    _k("broker.heartbeat.interval.ms", _I, 2000, None, "Time between broker heartbeats."),
    _k("initial.broker.registration.timeout.ms", _I, 60000, None,
       "How long a starting broker waits to register."),
    _k("broker.rack", _S, None, None, "Rack of this broker."),
    _k("metadata.log.dir", _S, None, None, "Where the metadata log lives; default: first log dir."),
    _k("metadata.log.max.record.bytes.between.snapshots", _L, 20971520, _R1,
       "Metadata log bytes after which a snapshot is taken."),
    _k("metadata.log.max.snapshot.interval.ms", _L, 3600000, _R0,
       "Longest time between metadata snapshots (0: by size only)."),
    _k("metadata.log.segment.bytes", _I, 1073741824, Range(12), "Metadata log segment size."),
    _k("metadata.log.segment.ms", _L, 604800000, None, "Metadata log segment roll time."),
    _k("metadata.max.retention.bytes", _L, 104857600, None, "Metadata log + snapshots kept."),
    _k("metadata.max.retention.ms", _L, 604800000, None, "Metadata log retention time."),
    _k("metadata.max.idle.interval.ms", _I, 500, _R0, "No-op record interval of the controller."),
    _k("kcore.testing.metadata.replay.delay.ms", _L, 0, _R0,
       "Testing only: committed metadata reaches this node's listeners (broker image, "
       "controller) this long after the metadata quorum starts, as on a node with a long "
       "metadata log to replay.", kcore_only=True),
    _k("unstable.api.versions.enable", _B, False, None, "Serve unreleased API versions."),
    _k("unstable.feature.versions.enable", _B, False, None, "Allow unreleased feature levels."),
    # -- listeners and the socket server
    _k("listeners", _LI, ("PLAINTEXT://:9092",), None, "NAME://host:port to listen on.",
       kcore_default=_DERIVED),
    _k("advertised.listeners", _LI, None, None, "Addresses published to clients and brokers."),
    _k("listener.security.protocol.map", _LI,
       ("SASL_SSL:SASL_SSL", "PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT"),
       None, "Listener name to security protocol."),
    _k("inter.broker.listener.name", _S, None, None, "Listener brokers use between themselves."),
    _k("security.inter.broker.protocol", _S, "PLAINTEXT", OneOf(SECURITY_PROTOCOLS),
       "Inter-broker protocol when inter.broker.listener.name is unset."),
    _k("socket.request.max.bytes", _I, 104857600, _R1, "Largest request frame."),
    _k("socket.send.buffer.bytes", _I, 102400, None, "SO_SNDBUF (-1: OS default)."),
    _k("socket.receive.buffer.bytes", _I, 102400, None, "SO_RCVBUF (-1: OS default)."),
    _k("socket.listen.backlog.size", _I, 50, _R1, "Pending connections per listener."),
    _k("connections.max.idle.ms", _L, 600000, None, "Idle connections are closed after this."),
    _k("queued.max.requests", _I, 500, _R1, "Requests queued before reading stops."),
    _k("queued.max.request.bytes", _L, -1, None, "Queued request bytes before reading stops."),
    _k("max.connections", _I, INT_MAX, _R0, "Connections allowed on this broker."),
    _k("max.connections.per.ip", _I, INT_MAX, _R0, "Connections allowed from one address."),
    _k("max.connections.per.ip.overrides", _S, "", HostCounts(), "host:count,... exceptions."),
    _k("max.connection.creation.rate", _I, INT_MAX, _R0, "New connections per second."),
    _k("num.network.threads", _I, 3, _R1, "Kafka's network threads.", unused=True),
    _k("num.io.threads", _I, 8, _R1, "Kafka's request handler threads.", unused=True),
    _k("background.threads", _I, 10, _R1, "Kafka's background threads.", unused=True),
    # -- the HTTP admin endpoint (kcore/admin)
    _k("admin.listeners", _LI, (), None,
       "HTTP admin endpoint: http://HOST:PORT or https://HOST:PORT,...; empty: off.",
       kcore_only=True),
    _k("admin.auth.token.file", _S, None, None,
       "File of bearer tokens for the admin endpoint (unset: loopback only).", kcore_only=True),
    _k("admin.ssl.certfile", _S, None, None, "PEM certificate chain of https:// admin listeners.",
       kcore_only=True),
    _k("admin.ssl.keyfile", _S, None, None, "PEM private key of https:// admin listeners.",
       kcore_only=True),
    _k("admin.ssl.client.auth", _S, "none", OneOf(("required", "requested", "none")),
       "Client certificates on https:// admin listeners (Kafka's ssl.client.auth): the "
       "subject, mapped by ssl.principal.mapping.rules, is the caller's principal.",
       kcore_only=True),
    _k("admin.ssl.truststore.location", _S, None, None,
       "PEM CA certificates that admin client certificates must chain to.", kcore_only=True),
    _k("admin.max.request.bytes", _I, 1048576, _R1, "Largest admin request body accepted.",
       kcore_only=True),
    # -- authorization (Kafka's StandardAuthorizer: kcore/metadata/authorizer.py)
    _k("authorizer.class.name", _S, "", AuthorizerClassName(),
       "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer (alias "
       "kcore.StandardAuthorizer); empty: none, every request is allowed."),
    _k("super.users", _S, "", SuperUsers(),
       "Principals allowed every operation, separated by ';' (User:admin;User:broker)."),
    _k("allow.everyone.if.no.acl.found", _B, False, None,
       "Allow every principal on a resource that no ACL matches (default: super users only)."),
    # -- logs
    _k("log.dir", _S, "/tmp/kafka-logs", None, "Log directory when log.dirs is unset.",
       kcore_default="./data"),
    _k("log.dirs", _LI, None, None, "Log directories."),
    _k("num.recovery.threads.per.data.dir", _I, 2, _R1, "Kafka's recovery threads.", unused=True),
    _k("log.retention.check.interval.ms", _L, 300000, _R1, "Retention check period."),
    _k("log.flush.offset.checkpoint.interval.ms", _I, 60000, _R0, "Recovery point checkpoints."),
    _k("log.flush.start.offset.checkpoint.interval.ms", _I, 60000, _R0,
       "Log start offset checkpoints."),
    _k("log.flush.scheduler.interval.ms", _L, LONG_MAX, None, "Flusher check period."),
    _k("log.cleaner.enable", _B, True, None, "Run the log cleaner."),
    _k("log.cleaner.threads", _I, 1, _R0, "Cleaner threads."),
    _k("log.cleaner.backoff.ms", _L, 15000, _R0, "Cleaner sleep when idle."),
    _k("log.cleaner.dedupe.buffer.size", _L, 134217728, None, "Cleaner dedupe memory."),
    _k("log.cleaner.io.buffer.size", _I, 524288, _R0, "Cleaner I/O buffers."),
    _k("log.cleaner.io.buffer.load.factor", _D, 0.9, None, "Dedupe buffer load factor."),
    _k("log.cleaner.io.max.bytes.per.second", _D, _D_MAX, None, "Cleaner I/O throttle."),
    # -- topics, requests and replication
    _k("num.partitions", _I, 1, _R1, "Partitions of an auto-created topic."),
    _k("default.replication.factor", _I, 1, None, "Replication factor of new topics."),
    _k("min.insync.replicas", _I, 1, _R1, "In-sync replicas needed for acks=all."),
    _k("message.max.bytes", _I, 1048588, _R0, "Largest record batch."),
    _k("auto.create.topics.enable", _B, True, None, "Create topics on first use."),
    _k("delete.topic.enable", _B, True, None, "Allow DeleteTopics."),
    _k("auto.leader.rebalance.enable", _B, True, None, "Move leaders back to preferred replicas."),
    _k("leader.imbalance.check.interval.seconds", _L, 300, _R1, "Leader balance check period."),
    _k("leader.imbalance.per.broker.percentage", _I, 10, None,
       "Leader imbalance a broker may have before its preferred leaderships move back."),
    _k("fetch.max.bytes", _I, 57671680, Range(1024), "Most bytes in one fetch response."),
    _k("max.incremental.fetch.session.cache.slots", _I, 1000, _R0,
       "Incremental fetch sessions kept (KIP-227)."),
    _k("max.request.partition.size.limit", _I, 2000, _R1, "Most partitions in one request."),
    _k("fetch.purgatory.purge.interval.requests", _I, 1000, None, "Fetch purgatory purge."),
    _k("producer.purgatory.purge.interval.requests", _I, 1000, None, "Produce purgatory purge."),
    _k("delete.records.purgatory.purge.interval.requests", _I, 1, None, "DeleteRecords purge."),
    _k("num.replica.fetchers", _I, 1, None, "Fetchers per source broker."),
    _k("replica.fetch.max.bytes", _I, 1048576, _R0, "Follower fetch bytes per partition."),
    _k("replica.fetch.min.bytes", _I, 1, None, "Follower fetch min bytes."),
    _k("replica.fetch.wait.max.ms", _I, 500, None, "Follower fetch max wait."),
    _k("replica.fetch.backoff.ms", _I, 1000, _R0, "Follower pause after an error."),
    _k("replica.fetch.response.max.bytes", _I, 10485760, _R0, "Follower fetch response bytes."),
    _k("replica.lag.time.max.ms", _L, 30000, None, "A follower this far behind leaves the ISR."),
    _k("replica.selector.class", _S, None, ReplicaSelectorClass(),
       "Fetch from followers (KIP-392): org.apache.kafka.common.replica.RackAwareReplicaSelector "
       "(or LeaderSelector); unset: consumers fetch from the leader only."),
    _k("replica.socket.timeout.ms", _I, 30000, None, "Follower socket timeout."),
    _k("replica.socket.receive.buffer.bytes", _I, 65536, None, "Follower SO_RCVBUF."),
    _k("replica.high.watermark.checkpoint.interval.ms", _L, 5000, None, "HW checkpoints."),
    # -- group coordinator
    _k("offsets.topic.num.partitions", _I, 50, _R1, "Partitions of __consumer_offsets."),
    _k("offsets.topic.replication.factor", _SH, 3, _R1, "Replicas of __consumer_offsets."),
    _k("offsets.topic.segment.bytes", _I, 104857600, _R1, "Segment size of __consumer_offsets."),
    _k("offsets.retention.minutes", _I, 10080, _R1, "Committed offsets kept after a group empties."),
    _k("offsets.retention.check.interval.ms", _L, 600000, _R1, "Offset expiry check period."),
    _k("offsets.commit.timeout.ms", _I, 5000, _R1, "Coordinator write timeout."),
    _k("offsets.load.buffer.size", _I, 5242880, _R1, "Read size when loading groups."),
    _k("offset.metadata.max.bytes", _I, 4096, None, "Largest offset commit metadata."),
    _k("group.initial.rebalance.delay.ms", _I, 3000, None, "Wait for members of a new group."),
    _k("group.min.session.timeout.ms", _I, 6000, None, "Shortest classic session timeout."),
    _k("group.max.session.timeout.ms", _I, 1800000, None, "Longest classic session timeout."),
    _k("group.max.size", _I, INT_MAX, _R1, "Members of a classic group."),
    _k("group.coordinator.rebalance.protocols", _LI, ("classic", "consumer"),
       ListOf(("classic", "consumer", "share", "streams")), "Enabled rebalance protocols."),
    _k("group.consumer.session.timeout.ms", _I, 45000, _R1, "Consumer group session timeout."),
    _k("group.consumer.heartbeat.interval.ms", _I, 5000, _R1, "Consumer group heartbeat."),
    _k("group.consumer.min.session.timeout.ms", _I, 45000, _R1, "Shortest consumer session."),
    _k("group.consumer.max.session.timeout.ms", _I, 60000, _R1, "Longest consumer session."),
    _k("group.consumer.min.heartbeat.interval.ms", _I, 5000, _R1, "Shortest heartbeat."),
    _k("group.consumer.max.heartbeat.interval.ms", _I, 15000, _R1, "Longest heartbeat."),
    _k("group.consumer.max.size", _I, INT_MAX, _R1, "Members of a consumer group."),
    _k("group.consumer.assignors", _LI, ("uniform", "range"), None, "Server-side assignors."),
    # -- transactions and producer ids
    _k("transaction.state.log.num.partitions", _I, 50, _R1, "Partitions of __transaction_state."),
    _k("transaction.state.log.replication.factor", _SH, 3, _R1, "Replicas of __transaction_state."),
    _k("transaction.state.log.min.isr", _I, 2, _R1, "min.insync.replicas of __transaction_state."),
    _k("transaction.state.log.segment.bytes", _I, 104857600, _R1, "Its segment size."),
    _k("transactional.id.expiration.ms", _I, 604800000, _R1, "Idle transactional ids expire."),
    _k("transaction.max.timeout.ms", _I, 900000, _R1, "Longest transaction timeout."),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000, _R1,
       "Timed-out transaction abort period."),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000, _R1,
       "Expired transactional id removal period."),
    _k("transaction.partition.verification.enable", _B, True, None,
       "Verify a partition joined the transaction before a transactional write."),
    _k("kcore.testing.transaction.marker.hold.ms", _L, 0, _R0,
       "Testing only: the transaction coordinator's timer (markers, timeouts) starts this late.",
       kcore_only=True),
    _k("kcore.testing.mirror.stopping.hold.ms", _L, 0, _R0,
       "Testing only: STOPPING waits this long before its epoch bump.", kcore_only=True),
    _k("kcore.testing.fetch.max.version", _I, -1, None,  # a pre-KIP-595 source (M-28)
       "Testing only: the highest Fetch version ApiVersions advertises (-1: all).", kcore_only=True),
    _k("kcore.replication.enable", _B, False, None,
       "Experimental (#17, in progress): accept replication factors above 1.", kcore_only=True),
    _k("producer.id.expiration.ms", _I, 86400000, _R1, "Idle producer ids expire."),
    _k("producer.id.expiration.check.interval.ms", _I, 600000, _R1, "Producer id expiry period."),
    # -- cluster mirroring (spec §10.1, decisions D-08 and D-13; kcore-only until upstream)
    _k("mirror.state.topic.num.partitions", _I, 50, _R1,
       "Partitions of __mirror_state = coordinator partitions (D-08).", kcore_only=True),
    _k("mirror.state.topic.replication.factor", _SH, 3, _R1,
       "Replicas of __mirror_state (D-08; capped at 1 until #17).", kcore_only=True),
    _k("mirror.state.topic.segment.bytes", _I, 104857600, _R1,
       "Segment size of __mirror_state.", kcore_only=True),
    _k("mirror.state.snapshot.records", _I, 10000, _R0,
       "Snapshot a __mirror_state partition past this many records (D-07).", kcore_only=True),
    _k("mirror.metadata.refresh.interval.ms", _L, 30000, _R1,
       "Period of the mirror metadata, config, offset and ACL sync (M-12).", kcore_only=True),
    _k("mirror.replication.throttled.rate", _L, LONG_MAX, _R0,
       "Mirror replication bandwidth ceiling, bytes/s (like the replication throttles).",
       kcore_only=True),
    _k("mirror.support.unclean.leader.election", _B, False, None,
       "true: LOG_TRUNCATION waits for all replicas, not only the ISR (M-38); "
       "needs kcore.replication.enable.", kcore_only=True),
    _k("mirror.failed.retry.backoff.ms", _L, 5000, _R0,
       "First retry delay of a FAILED partition, doubling to 5 minutes (D-13).", kcore_only=True),
    _k("mirror.source.unavailable.timeout.ms", _L, 60000, _R1,
       "A partition whose source leader is unreachable this long goes FAILED.", kcore_only=True),
    _k("mirror.failed.max.retries", _I, 5, _R0,
       "Automatic retries before a partition stays FAILED (D-13).", kcore_only=True),
    *(_k(*spec) for spec in SASL_KEYS),  # kcore/security/sasl_config.py
    # -- TLS listeners (kcore/security/tls_config.py owns them and their rules)
    *(_k(name, type_, default, validator, doc, kcore_only=bool(rest))
      for name, type_, default, validator, doc, *rest in TLS_CONFIG_KEYS),
]  # fmt: skip

BROKER_CONFIGS: Mapping[str, ServerConfigKey] = MappingProxyType({k.name: k for k in _KEYS})
"""Every node config key kcore knows, by name (topic ``log.*`` synonyms live in LogConfig)."""

_TOPIC_SYNONYMS = frozenset(s.name for key in TOPIC_CONFIGS.values() for s in key.synonyms)
_KNOWN_PREFIXES = ("listener.name.",)  # per-listener overrides Kafka accepts for any key


def _parse_key(key: ServerConfigKey, text: str) -> Any:
    if key.type is ConfigType.SHORT:  # ConfigDef.Type.SHORT: an int16
        value = parse_text(key.name, text, ConfigType.INT)
        if not -32768 <= value <= 32767:
            raise invalid_value(key.name, text, "Not a number of type SHORT")
    elif key.type is ConfigType.PASSWORD:  # a string DescribeConfigs never shows
        value = parse_text(key.name, text, ConfigType.STRING)
    else:
        value = parse_text(key.name, text, key.type)
    if key.validator is not None and value is not None:
        key.validator.ensure_valid(key.name, value)
    return value


# -- the configuration --------------------------------------------------------------------------


class BrokerConfig:
    """A node's configuration, typed and checked; immutable.

    Every :data:`BROKER_CONFIGS` key is an attribute, dots becoming underscores
    (``config.num_partitions``, ``config.socket_request_max_bytes``), holding ``bool``, ``int``,
    ``float``, ``str``, ``None`` or, for a list, a tuple of strings. Keys with structure hold
    parsed values instead:

    * ``process_roles``: ``frozenset`` of ``"broker"`` / ``"controller"``;
    * ``listeners``: ``tuple[Listener, ...]``; ``advertised_listeners``: the listeners this node
      publishes as a broker (``advertised.listeners``, else ``listeners``, minus the controller
      listeners); ``advertised_controller_listeners``: the controller's (Kafka 3.9+);
    * ``listener_security_protocol_map``: name -> protocol, with Kafka's KRaft rule applied
      (controller listeners map to PLAINTEXT when the map is unset and no SSL/SASL is in use);
    * ``controller_listener_names``, ``inter_broker_listener_name`` (effective);
    * ``controller_quorum_voters``: ``tuple[QuorumVoter, ...]``;
      ``controller_quorum_bootstrap_servers``: ``tuple[(host, port), ...]``;
    * ``log_dirs``: the effective directories (``log.dirs``, else ``log.dir``);
      ``metadata_log_dir``: ``metadata.log.dir``, else the first of them;
    * ``admin_listeners``: ``tuple[AdminListener, ...]`` of ``admin.listeners`` (empty: off).

    ``raw`` holds the supplied strings (file, then overrides; unknown keys included) for
    :meth:`LogConfig.from_layers`; ``explicit`` names the keys that were supplied; ``unknown``
    the supplied keys kcore does not know; ``effective`` every known key's value as text
    (kcore's derived defaults included), unknown keys as given.
    """

    __slots__ = ("_values", "raw", "explicit", "unknown", "effective")

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        """Build from one key -> string map (see :meth:`from_layers` for several). Raises
        :class:`InvalidConfigError`; its ``errors`` maps every bad key to its message."""
        raw = dict(props or {})
        values: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for key in BROKER_CONFIGS.values():
            try:
                if key.name in raw:
                    values[key.attr] = _parse_key(key, raw[key.name])
                else:
                    values[key.attr] = key.effective_default
            except InvalidConfigError as err:
                errors[key.name] = err.message
        try:  # the topic-level log.* synonyms, checked by the table that owns them
            LogConfig.from_layers({}, raw)
        except InvalidConfigError as err:
            errors.update(err.errors)
        if errors:
            key_name = next(iter(errors)) if len(errors) == 1 else None
            raise InvalidConfigError(key_name, "; ".join(errors.values()), errors)
        unknown = tuple(
            k
            for k in raw
            if k not in BROKER_CONFIGS
            and k not in _TOPIC_SYNONYMS
            and not k.startswith(_KNOWN_PREFIXES)
        )
        _derive(values, raw)
        _validate(values, raw)
        # Only for a configuration that stands: a refused one gets its one error line alone.
        for name in unknown:
            log.warning("The configuration '%s' was supplied but isn't a known config.", name)
        setter = object.__setattr__
        setter(self, "_values", values)
        setter(self, "raw", MappingProxyType(raw))
        setter(self, "explicit", frozenset(k for k in raw if k in BROKER_CONFIGS))
        setter(self, "unknown", unknown)
        setter(self, "effective", MappingProxyType(_effective_text(values, raw)))

    @classmethod
    def from_layers(cls, *layers: Mapping[str, str]) -> BrokerConfig:
        """Merge key -> string maps, later layers winning (file, then overrides), and build."""
        merged: dict[str, str] = {}
        for layer in layers:
            merged.update(layer)
        return cls(merged)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, overrides: Iterable[str] = ()
    ) -> BrokerConfig:
        """``server.properties`` at ``path`` (none: kcore's defaults), then each
        ``--override key=value`` in order."""
        file_props = load_properties(path) if path is not None else {}
        return cls.from_layers(file_props, dict(parse_override(arg) for arg in overrides))

    def __getattr__(self, name: str) -> Any:
        if name != "_values":  # not built yet (unpickling): no recursion
            try:
                return self._values[name]
            except KeyError:
                pass
        raise AttributeError(f"BrokerConfig has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("BrokerConfig is immutable")

    def __reduce__(self):
        return type(self), (dict(self.raw),)

    def __repr__(self) -> str:
        return f"BrokerConfig({dict(self.raw)!r})"

    def value(self, key: str) -> Any:
        """The typed value of a table key by its Kafka name (``value("num.partitions")``)."""
        try:
            return self._values[BROKER_CONFIGS[key].attr]
        except KeyError:
            raise InvalidConfigError(key, f"Unknown broker config name: {key}") from None

    def log_config(self) -> LogConfig:
        """The topic defaults this broker's ``log.*`` settings give (no topic overrides)."""
        return LogConfig.from_layers({}, self.raw)

    @property
    def is_broker(self) -> bool:
        return BROKER in self.process_roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER in self.process_roles

    def internal_topic_replication_factor(self, key: str) -> int:
        """The replication factor to create an internal topic with: ``key``
        (``offsets.topic.replication.factor``, ``transaction.state.log.replication.factor`` or
        ``mirror.state.topic.replication.factor``). With ``kcore.replication.enable`` it is
        Kafka's rule: the configured value, creation refused (COORDINATOR_NOT_AVAILABLE) until
        that many brokers are alive. Without it, capped at
        :data:`~kcore.metadata.context.REPLICATION_FACTOR_LIMIT` (one replica); the caller logs
        when the cap lowers the configured value."""
        if self.value("kcore.replication.enable"):
            return self.value(key)
        return min(self.value(key), REPLICATION_FACTOR_LIMIT)

    def transaction_state_log_min_isr_for(self, replication_factor: int) -> int:
        """``transaction.state.log.min.isr`` for a ``__transaction_state`` of this factor: as
        set when explicit and the factor is the configured one; else capped at the factor (the
        default 2, or any value above a factor kcore's limit lowered, would refuse every write
        at RF 1)."""
        min_isr = self.transaction_state_log_min_isr
        configured = self.value("transaction.state.log.replication.factor")
        if "transaction.state.log.min.isr" in self.explicit and replication_factor == configured:
            return min_isr
        return min(min_isr, replication_factor)


def _derive(values: dict[str, Any], raw: Mapping[str, str]) -> None:
    """Turn the structured keys into parsed objects and fill kcore's derived defaults."""
    if not values["process_roles"]:
        raise invalid_value(
            "process.roles",
            raw.get("process.roles", ""),
            "a KRaft node needs the broker role, the controller role, or both",
        )
    roles = frozenset(values["process_roles"])
    values["process_roles"] = roles
    controller_names = tuple(n.upper() for n in values["controller_listener_names"])
    values["controller_listener_names"] = controller_names

    listener_items = values["listeners"]
    if listener_items is _DERIVED:
        items = []
        if BROKER in roles:
            items.append("PLAINTEXT://127.0.0.1:9092")
        if CONTROLLER in roles and controller_names:
            items.append(f"{controller_names[0]}://127.0.0.1:9093")
        listener_items = tuple(items)
    values["_listeners_text"] = listener_items

    # KafkaConfig.effectiveListenerSecurityProtocolMap: with the map unset and no SSL or SASL
    # listener in sight, controller listeners default to PLAINTEXT.
    protocols = parse_protocol_map(values["listener_security_protocol_map"])
    secured = set(SECURITY_PROTOCOLS) - {"PLAINTEXT"}
    names_in_use = set(controller_names) | {listener_name(x) for x in listener_items}
    if "listener.security.protocol.map" not in raw and not names_in_use & secured:
        protocols.update({n: "PLAINTEXT" for n in controller_names if n not in protocols})
    values["listener_security_protocol_map"] = MappingProxyType(protocols)

    listeners = parse_listeners("listeners", listener_items, protocols, True)
    values["listeners"] = listeners
    advertised_items = values["advertised_listeners"]
    advertised = (
        listeners
        if advertised_items is None
        else parse_listeners("advertised.listeners", advertised_items, protocols, False)
    )
    values["advertised_listeners"] = tuple(x for x in advertised if x.name not in controller_names)
    controller_advertised = []
    for name in controller_names:  # advertised first, else the listener (Kafka 3.9+)
        found = [x for x in advertised if x.name == name] if advertised_items is not None else []
        found = found or [x for x in listeners if x.name == name]
        if found:
            x = found[0]
            controller_advertised.append(x._replace(host=None) if x.host == "0.0.0.0" else x)
    values["advertised_controller_listeners"] = tuple(controller_advertised)

    ibl = values["inter_broker_listener_name"]
    if ibl is not None and "security.inter.broker.protocol" in raw:
        raise InvalidConfigError(
            "inter.broker.listener.name",
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should "
            "be set.",
        )
    values["_inter_broker_listener_name_explicit"] = ibl is not None
    values["inter_broker_listener_name"] = (
        ibl.upper() if ibl is not None else values["security_inter_broker_protocol"]
    )

    voters_text = values["controller_quorum_voters"]
    bootstrap = tuple(
        parse_host_port("controller.quorum.bootstrap.servers", x)
        for x in values["controller_quorum_bootstrap_servers"]
    )
    values["controller_quorum_bootstrap_servers"] = bootstrap
    if voters_text is _DERIVED:
        voters_text = ()
        if CONTROLLER in roles and not bootstrap:
            own = [x for x in listeners if x.name in controller_names]
            if own:
                host = loopback(own[0].host)
                host = f"[{host}]" if ":" in host else host
                voters_text = (f"{values['node_id']}@{host}:{own[0].port}",)
    voters: tuple[QuorumVoter, ...] = ()
    if voters_text:
        try:
            parsed = parse_quorum_voters(",".join(voters_text))
        except ValueError as err:
            raise invalid_value(
                "controller.quorum.voters", ",".join(voters_text), str(err)
            ) from None
        voters = tuple(QuorumVoter(i, a.host, a.port) for i, a in parsed.items())
    values["controller_quorum_voters"] = voters

    log_dirs = values["log_dirs"]
    values["log_dirs"] = tuple(log_dirs) if log_dirs is not None else (values["log_dir"],)
    if values["metadata_log_dir"] is None and values["log_dirs"]:
        values["metadata_log_dir"] = values["log_dirs"][0]
    values["admin_listeners"] = parse_admin_listeners(values["admin_listeners"])


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise InvalidConfigError(key, message)


def _validate(v: dict[str, Any], raw: Mapping[str, str]) -> None:
    """Kafka's cross-key rules (KafkaConfig.validateValues, 4.x), first failure raised."""
    roles, node_id = v["process_roles"], v["node_id"]
    controller_names = v["controller_listener_names"]
    listener_names = [x.name for x in v["listeners"]]
    controller_listeners = [x for x in v["listeners"] if x.name in controller_names]
    voter_ids = {voter.id for voter in v["controller_quorum_voters"]}
    voters_text = "{" + ", ".join(map(str, sorted(voter_ids))) + "}"

    if v["broker_id"] != -1 and v["broker_id"] != node_id:
        raise InvalidConfigError(
            "node.id", "You must set `node.id` to the same value as `broker.id`."
        )
    _require(
        bool(v["log_dirs"]),
        "log.dirs",
        "At least one log directory must be defined via log.dirs or log.dir.",
    )
    _require(
        v["log_cleaner_dedupe_buffer_size"] / max(1, v["log_cleaner_threads"]) > 1024 * 1024,
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.",
    )
    _require(
        v["replica_fetch_wait_max_ms"] <= v["replica_socket_timeout_ms"],
        "replica.socket.timeout.ms",
        "replica.socket.timeout.ms should always be at least "
        "replica.fetch.wait.max.ms to prevent unnecessary socket timeouts",
    )
    _require(
        v["replica_fetch_wait_max_ms"] <= v["replica_lag_time_max_ms"],
        "replica.fetch.wait.max.ms",
        "replica.fetch.wait.max.ms should always be less than "
        "or equal to replica.lag.time.max.ms to prevent frequent changes in ISR",
    )
    if v["broker_heartbeat_interval_ms"] * 2 > v["broker_session_timeout_ms"]:
        log.error(
            "broker.heartbeat.interval.ms (%d ms) must be less than or equal to half of "
            "the broker.session.timeout.ms (%d ms).",
            v["broker_heartbeat_interval_ms"],
            v["broker_session_timeout_ms"],
        )

    if not voter_ids and not v["controller_quorum_bootstrap_servers"]:
        raise InvalidConfigError(
            "controller.quorum.voters",
            "If using process.roles, either controller.quorum.bootstrap.servers must contain the "
            "set of bootstrap controllers or controller.quorum.voters must contain a parseable "
            "set of controllers.",
        )
    if CONTROLLER not in roles:  # broker only
        _require(
            node_id not in voter_ids,
            "node.id",
            "If process.roles contains just the 'broker' role, the node id "
            f"{node_id} must not be included in the set of voters "
            f"controller.quorum.voters={voters_text}",
        )
        _require(
            bool(controller_names),
            "controller.listener.names",
            "controller.listener.names must contain at least one value when running KRaft "
            "with just the broker role",
        )
        _require(
            not controller_listeners,
            "controller.listener.names",
            "controller.listener.names must not contain a value appearing in the "
            "'listeners' configuration when running KRaft with just the broker role",
        )
        for name in controller_names:
            _require(
                name in v["listener_security_protocol_map"],
                "listener.security.protocol.map",
                f"Controller listener with name {name} defined in controller.listener.names "
                "not found in listener.security.protocol.map  (an explicit security mapping "
                "for each controller listener is required if listener.security.protocol.map "
                "is non-empty, or if there are security protocols other than PLAINTEXT in "
                "use)",
            )
    else:
        if BROKER not in roles:  # controller only
            _require(
                len(controller_listeners) == len(listener_names),
                "listeners",
                "The listeners config must only contain KRaft controller listeners from "
                "controller.listener.names when process.roles=controller",
            )
            _require(
                not (
                    v["_inter_broker_listener_name_explicit"]
                    and v["inter_broker_listener_name"] in controller_names
                ),
                "controller.listener.names",
                "controller.listener.names must not contain an "
                "explicitly set inter.broker.listener.name configuration value when "
                "process.roles=controller",
            )
        _require(
            not voter_ids or node_id in voter_ids,
            "node.id",
            "If process.roles contains the 'controller' role, the node id "
            f"{node_id} must be included in the set of voters "
            f"controller.quorum.voters={voters_text}",
        )
        _require(
            bool(v["advertised_controller_listeners"]),
            "controller.listener.names",
            "controller.listener.names must contain at least one value appearing in the "
            "'listeners' configuration when running the KRaft controller role",
        )
        _require(
            all(n in listener_names for n in controller_names),
            "controller.listener.names",
            "controller.listener.names must only contain values appearing in the "
            "'listeners' configuration when running the KRaft controller role",
        )

    advertised_names = [x.name for x in v["advertised_listeners"]]
    if BROKER in roles:
        _require(
            bool(advertised_names),
            "advertised.listeners",
            "There must be at least one broker advertised listener. Perhaps all listeners "
            "appear in controller.listener.names?",
        )
        _require(
            v["inter_broker_listener_name"] in advertised_names,
            "inter.broker.listener.name",
            "inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured "
            f"listeners are {','.join(advertised_names)}",
        )
        _require(
            set(advertised_names) <= set(listener_names),
            "advertised.listeners",
            "advertised.listeners listener names must be equal to or a subset of the ones "
            f"defined in listeners. Found {','.join(advertised_names)}. The valid options "
            f"based on the current configuration are {','.join(listener_names)}",
        )
    for listener in v["advertised_listeners"] + v["advertised_controller_listeners"]:
        _require(
            listener.host != "0.0.0.0",
            "advertised.listeners",
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a "
            "routable IP address.",
        )
    _require(
        v["queued_max_request_bytes"] <= 0
        or v["queued_max_request_bytes"] >= v["socket_request_max_bytes"],
        "queued.max.request.bytes",
        "queued.max.request.bytes must be larger or equal to socket.request.max.bytes",
    )
    _require(
        v["max_connections_per_ip"] != 0 or bool(v["max_connections_per_ip_overrides"]),
        "max.connections.per.ip",
        "max.connections.per.ip can be set to zero only if "
        "max.connections.per.ip.overrides property is set.",
    )
    _refuse_connection_creation_rate(v, raw)
    for listener in v["listeners"]:  # ListenerConnectionQuota's limit: an INT above 0
        key = f"listener.name.{listener.name.lower()}.max.connections"
        if key in raw:
            Range(1).ensure_valid(key, parse_text(key, raw[key], ConfigType.INT))
    # M-38's "all replicas" means something only when partitions have replicas.
    key = "mirror.support.unclean.leader.election"
    _require(not v[BROKER_CONFIGS[key].attr] or v[BROKER_CONFIGS["kcore.replication.enable"].attr],
             key, f"{key}=true needs kcore.replication.enable=true: without it every partition "
             "has one replica, its leader, and there is no other replica to wait for.")  # fmt: skip
    validate_admin(v, raw)
    v["sasl_listeners"] = sasl_listener_configs(v, raw)  # SaslListenerConfig by listener name
    # After Kafka's rules, so a contradictory file gets Kafka's message first: the logins of
    # this node on its cluster's inter-broker and controller listeners.
    check_internal_logins(v, raw, BROKER in roles)


def _refuse_connection_creation_rate(values: Mapping[str, Any], raw: Mapping[str, str]) -> None:
    """kcore does not throttle accepts by rate (Kafka's connection-rate sensors): a limit set is
    refused rather than ignored. Kafka's default, no limit, passes."""
    keys = ["max.connection.creation.rate"] + [
        f"listener.name.{x.name.lower()}.max.connection.creation.rate" for x in values["listeners"]
    ]
    for key in keys:
        if key in raw and parse_text(key, raw[key], ConfigType.INT) != INT_MAX:
            raise InvalidConfigError(
                key,
                f"{key} is not supported: kcore does not throttle new connections by rate "
                "(max.connections and max.connections.per.ip limit their number)",
            )


def _effective_text(values: Mapping[str, Any], raw: Mapping[str, str]) -> dict[str, str]:
    text = dict(raw)
    for key in BROKER_CONFIGS.values():
        if key.name in raw:
            continue
        value = values[key.attr]
        if key.name == "listeners":
            value = values["_listeners_text"]
        elif key.name == "controller.quorum.voters":
            value = tuple(
                f"{x.id}@{f'[{x.host}]' if ':' in x.host else x.host}:{x.port}" for x in value
            )
        elif key.name in ("process.roles", "listener.security.protocol.map"):
            value = key.effective_default
        elif key.name == "controller.quorum.bootstrap.servers":
            value = ()
        elif key.name == "advertised.listeners" or key.name == "log.dirs":
            continue  # no value unless set
        if value is None:
            continue
        text[key.name] = ",".join(value) if isinstance(value, tuple) else java_str(value)
    return text
