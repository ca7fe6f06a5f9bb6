"""An embedded kcore broker for other people's test suites: a real broker, in-process.

::

    from kcore.testing import EmbeddedCluster

    with EmbeddedCluster() as cluster:            # starts in well under a second
        cluster.create_topic("orders", partitions=3)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})

It is the same broker ``kcore server`` runs — real sockets on 127.0.0.1, real files in a
temporary directory (removed afterwards unless ``data_dir`` was given) — started on free ports.
The synchronous form runs Trio in a background thread; Trio code uses ``async with`` instead, and
the nodes then run in the caller's nursery. ``restart()`` stops the nodes cleanly and starts them
again on the same ports and data, as a broker restart would.

``EmbeddedCluster(brokers=3)`` runs three brokers: node 1 is broker and controller (the only
voter of the metadata quorum, so no election is needed), nodes 2 and 3 are broker-only nodes
registered with it, each with its own client listener and log directory, all in one cluster.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from kcore.protocol import messages as m
from kcore.protocol.errors import KafkaError
from kcore.server.config import BrokerConfig

STARTUP_TIMEOUT_S = 30.0


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now: bound together, so that two of
    them cannot be the same port (one port asked for at a time can come back twice, and a node
    with two listeners on one port refuses to start)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedCluster:
    """A kcore cluster of ``brokers`` nodes in this process; node 1 is also the controller."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        data_dir: str | Path | None = None,
        admin: bool = False,
        extra_listeners: tuple[str, ...] = (),
        node_config: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        """``admin=True`` gives every node an HTTP admin endpoint on a free loopback port
        (:attr:`admin_urls`), kept across :meth:`restart`. ``extra_listeners``: more
        ``NAME://host:port`` listeners of node 1 (an SSL one, say; ``config`` then maps their
        names in ``listener.security.protocol.map``). ``node_config``: node id -> settings of
        that node alone, over ``config`` (``broker.rack``, say)."""
        if brokers < 1:
            raise ValueError(f"an EmbeddedCluster needs at least one broker, not {brokers}")
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kcore-"))
        ports = free_ports(brokers * (2 if admin else 1) + 1)
        self.ports = ports[:brokers]  # client listener of node i + 1
        self.port = self.ports[0]
        self.controller_port = ports[brokers]
        self.admin_ports = ports[brokers + 1 :]
        self._overrides = dict(config or {})
        self._node_overrides = {n: dict(c) for n, c in (node_config or {}).items()}
        self._extra_listeners = tuple(extra_listeners)
        self.brokers: list[Any] = []  # the running nodes, node 1 first
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[int, trio.CancelScope] = {}  # node id -> the scope it runs in

    # -- configuration -----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def admin_urls(self) -> list[str]:
        """Each node's admin endpoint (``http://127.0.0.1:PORT``), node 1 first; empty
        unless the cluster was made with ``admin=True``."""
        return [f"http://127.0.0.1:{port}" for port in self.admin_ports]

    @property
    def admin_url(self) -> str:
        """Node 1's admin endpoint (``admin=True``)."""
        if not self.admin_ports:
            raise ValueError("this EmbeddedCluster has no admin endpoint: pass admin=True")
        return self.admin_urls[0]

    @property
    def broker(self) -> Any:
        """Node 1 (broker and controller), or ``None`` when stopped."""
        return self.brokers[0] if self.brokers else None

    def broker_config(self, node_id: int = 1) -> BrokerConfig:
        """The configuration of node ``node_id`` (1 to ``brokers``); the cluster's ``config``
        overrides every node's, and ``node_config`` this node's."""
        return BrokerConfig(self.node_properties(node_id))

    def node_properties(self, node_id: int = 1) -> dict[str, str]:
        """:meth:`broker_config`'s properties, unchecked: a subclass may change its listeners
        before they are validated together."""
        port = self.ports[node_id - 1]
        props = {
            "node.id": str(node_id),
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "group.initial.rebalance.delay.ms": "0",
            "broker.heartbeat.interval.ms": "100",
            "broker.session.timeout.ms": "9000",
        }
        if node_id == 1:
            props["process.roles"] = "broker,controller"
            props["listeners"] = ",".join(
                (
                    f"PLAINTEXT://127.0.0.1:{port}",
                    *self._extra_listeners,
                    f"CONTROLLER://127.0.0.1:{self.controller_port}",
                )
            )
            props["log.dirs"] = str(self.data_dir / "logs")
        else:
            props["process.roles"] = "broker"
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
            props["log.dirs"] = str(self.data_dir / f"logs-{node_id}")
        if self.admin_ports:
            props["admin.listeners"] = f"http://127.0.0.1:{self.admin_ports[node_id - 1]}"
        props.update(self._overrides)
        props.update(self._node_overrides.get(node_id, {}))
        return props

    def _node_configs(self) -> list[BrokerConfig]:
        """Every node's configuration, the nodes formatted for one cluster (the id of node 1's
        directories when they exist, else a new one). Raises InvalidConfigError first."""
        from kcore.security.tls_transport import TlsListeners
        from kcore.server.broker import ensure_formatted

        configs = [self.broker_config(i + 1) for i in range(len(self.ports))]
        for config in configs:
            TlsListeners(config)  # the TLS listeners' stores load (as `kcore server` checks)
        cluster_id = ensure_formatted(configs[0])
        for config in configs[1:]:
            ensure_formatted(config, cluster_id)
        return configs

    async def _start_nodes(self, nursery: trio.Nursery, configs: list[BrokerConfig]) -> None:
        self._nursery = nursery
        for config in configs:  # node 1 first: the others register with its controller
            self.brokers.append(await self._start_one(config))

    async def _start_one(self, config: BrokerConfig) -> Any:
        from kcore.server.node import start_node

        scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await start_node(config, task_status=task_status)

        node = await self._nursery.start(run)
        self._scopes[config.node_id] = scope
        return node

    # -- one node at a time (replication tests) ------------------------------------------------

    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Stop node ``node_id`` (not node 1, the controller). ``graceful``: as SIGTERM, with
        the controlled shutdown that moves its leaderships away first. Otherwise as a process
        that dies: its tasks are cancelled at once, no controlled shutdown, no more heartbeats
        (the controller fences it after ``broker.session.timeout.ms``); its files are closed
        as they are (nothing unflushed is lost, unlike a real crash)."""
        self._call(self.astop_node, node_id, graceful)

    async def astop_node(self, node_id: int, graceful: bool = True) -> None:
        if node_id == 1:
            raise ValueError("node 1 is the controller of an EmbeddedCluster: it cannot stop alone")
        node = next((n for n in self.brokers if n.node_id == node_id), None)
        if node is None:
            raise ValueError(f"node {node_id} is not running")
        self.brokers.remove(node)
        if graceful:
            node.request_stop()
        else:
            self._scopes[node_id].cancel()
        await node.stopped.wait()

    def start_node(self, node_id: int) -> None:
        """Start again a node :meth:`stop_node` stopped, on its ports and data."""
        self._call(self.astart_node, node_id)

    async def astart_node(self, node_id: int) -> None:
        if any(n.node_id == node_id for n in self.brokers):
            raise ValueError(f"node {node_id} is running")
        with trio.fail_after(STARTUP_TIMEOUT_S):
            node = await self._start_one(self.broker_config(node_id))
        self.brokers.append(node)
        self.brokers.sort(key=lambda n: n.node_id)

    def node(self, node_id: int) -> Any:
        """The running node ``node_id`` (KeyError when it is not running)."""
        for n in self.brokers:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    async def _stop_nodes(self) -> None:
        """Broker-only nodes first (their controlled shutdown needs the controller), then 1."""
        for node in reversed(self.brokers):
            node.request_stop()
            await node.stopped.wait()

    # -- the Trio form -----------------------------------------------------------------------

    async def __aenter__(self) -> EmbeddedCluster:
        configs = self._node_configs()
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        self._cancel = nursery.cancel_scope
        with trio.fail_after(STARTUP_TIMEOUT_S):
            await self._start_nodes(nursery, configs)
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stop_nodes()  # a graceful stop: each node returns when it is closed
        await self._nursery_cm.__aexit__(None, None, None)
        self.brokers = []
        self._cleanup()

    # -- the synchronous form ----------------------------------------------------------------

    def __enter__(self) -> EmbeddedCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._cleanup()

    def start(self) -> None:
        """Start every node; raises InvalidConfigError (before anything starts) for a refused
        configuration, RuntimeError when a node fails to start."""
        configs = self._node_configs()
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._run_thread, args=(configs,), name="kcore-embedded", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(STARTUP_TIMEOUT_S):
            raise TimeoutError("the embedded kcore broker did not start in time")
        if self._error is not None:
            raise RuntimeError("the embedded kcore broker failed to start") from self._error

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self.brokers:
            with contextlib.suppress(trio.RunFinishedError):  # it already stopped by itself
                trio.from_thread.run(self._stop_nodes, trio_token=self._token)
        self._thread.join(STARTUP_TIMEOUT_S)
        self._thread = None
        self.brokers = []

    def restart(self) -> None:
        """Stop cleanly and start again on the same ports and data."""
        self.stop()
        self.start()

    def _run_thread(self, configs: list[BrokerConfig]) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            try:
                async with trio.open_nursery() as nursery:
                    self._cancel = nursery.cancel_scope
                    await self._start_nodes(nursery, configs)
                    self._ready.set()
            finally:
                if self.brokers:
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as e:  # reported to the thread that waits in start()
            self._error = e
        finally:
            self._ready.set()

    def _cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------

    def _call(self, fn, *args):
        """Run ``await fn(*args)`` on the broker's Trio loop (sync form) and return its value."""
        if self._token is None:
            raise RuntimeError("the cluster is not running")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        """Create a topic and wait until it has leaders. Raises KafkaError on refusal.

        ``topic_id`` creates it with that id (CreateTopics ``MirrorInfo``, spec M-72: a mirror
        topic gets its source topic's id)."""
        self._call(self.acreate_topic, name, partitions, replication_factor, config, topic_id)

    async def acreate_topic(
        self, name, partitions=1, replication_factor=1, config=None, topic_id=None
    ) -> None:
        C = m.CreateTopicsRequest
        request = C(
            topics=[
                C.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    configs=[
                        C.CreatableTopicConfig(name=k, value=v) for k, v in (config or {}).items()
                    ],
                    mirror_info=None if topic_id is None else C.MirrorInfo(topic_id=topic_id),
                )
            ],
            timeout_ms=30000,
        )
        response = await self.broker.controller_call(lambda c, now: c.create_topics(request))
        result = response.topics[0]
        if result.error_code:
            raise KafkaError(result.error_code, result.error_message)
        with trio.fail_after(10):  # each partition is open on its leader
            while not all(
                any((name, p) in node.replica_manager.partitions for node in self.brokers)
                for p in range(partitions)
            ):
                await trio.sleep(0.01)

    def delete_topic(self, name: str) -> None:
        self._call(self.adelete_topic, name)

    async def adelete_topic(self, name: str) -> None:
        D = m.DeleteTopicsRequest
        request = D(topics=[D.DeleteTopicState(name=name)], timeout_ms=30000)
        response = await self.broker.controller_call(lambda c, now: c.delete_topics(request, 6))
        result = response.responses[0]
        if result.error_code:
            raise KafkaError(result.error_code, result.error_message)

    def leader_partition(self, tp: tuple[str, int]) -> Any:
        """The partition ``tp`` on the broker that leads it now (None when none does)."""
        node = self.leader_of(tp)
        return None if node is None else node.replica_manager.partitions[tp]

    def leader_of(self, tp: tuple[str, int]) -> Any:
        """The broker that leads ``tp`` now (None when none does)."""
        for node in self.brokers:
            partition = node.replica_manager.partitions.get(tp)
            if partition is not None and partition.is_leader:
                return node
        return None

    def topics(self) -> list[str]:
        return sorted(self.broker.metadata_image.topics.by_name)
