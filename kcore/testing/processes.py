"""kcore clusters of real ``kcore server`` processes, for fault tests and benchmarks.

:class:`EmbeddedCluster` runs a node in a thread of the test process, which is what a test
suite wants most of the time. Some things need a real process instead: ``kill -9`` in the
middle of a write (nothing of the process survives, not even its page-cache-only state), a
benchmark that counts each broker's CPU apart from the client's, a cluster of several nodes.

* :class:`ServerProcess` — one node: formatted on first start, started as
  ``python -m kcore.cli server --override …``, killed with any signal, restarted on the same
  ports and data; its output goes to ``<data dir>.out``.
* :class:`ProcessCluster` — ``nodes`` combined broker+controller nodes forming one quorum
  (every node a voter), with one cluster id; ``bootstrap_servers`` names every node.

Readiness is the operator's view: a node is ready once its client listener accepts a
connection, which kcore does only after the broker has caught up with the metadata log
(``BrokerServer.startup``'s gate). Ports are chosen up front on loopback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from kcore.log.log_dirs import random_uuid, uuid_to_base64
from kcore.testing.embedded import free_ports

__all__ = ["ProcessCluster", "ServerProcess", "run_then_kill", "wait_for_port"]

READY_TIMEOUT_S = 60.0


def wait_for_port(port: int, timeout: float = READY_TIMEOUT_S, host: str = "127.0.0.1") -> None:
    """Return once something accepts TCP connections on ``host:port``; ``TimeoutError`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


class ServerProcess:
    """One ``kcore server`` child process (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        node_id: int = 1,
        port: int | None = None,
        controller_port: int | None = None,
        voters: str | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """``voters`` is ``controller.quorum.voters`` (default: this node alone); ``config``
        adds or overrides broker properties."""
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        spare = iter(free_ports(2))  # bound together: never the same port twice
        self.port = port or next(spare)
        self.controller_port = controller_port or next(spare)
        self.props = {
            "node.id": str(node_id),
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data_dir),
            "group.initial.rebalance.delay.ms": "0",
            "broker.heartbeat.interval.ms": "100",
            **dict(config or {}),
        }
        self.output_path = self.data_dir.with_name(self.data_dir.name + ".out")
        self.proc: subprocess.Popen | None = None
        self._output = None

    @property
    def bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def format(self, cluster_id: str) -> None:
        """Format the log directory for ``cluster_id`` (a no-op when already formatted)."""
        from kcore.server.broker import ensure_formatted
        from kcore.server.config import BrokerConfig

        ensure_formatted(BrokerConfig(self.props), cluster_id)

    def start(self, *, wait: bool = True) -> None:
        """Start the process; with ``wait``, return once its client listener accepts."""
        if self.is_running():
            raise RuntimeError(f"node {self.node_id} is already running")
        args = [sys.executable, "-m", "kcore.cli", "server"]
        for key, value in self.props.items():
            args += ["--override", f"{key}={value}"]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._output = open(self.output_path, "ab")  # noqa: SIM115 - closed when it exits
        self.proc = subprocess.Popen(
            args, stdout=self._output, stderr=subprocess.STDOUT, env=os.environ.copy()
        )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"node {self.node_id} exited with {self.proc.returncode}:\n{self.output()[-4000:]}"
                )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"node {self.node_id} was not ready after {timeout:.0f} s")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (``kill -9`` by default) and wait for the process to exit."""
        if self.is_running():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.proc.wait(60)
        self._close_output()

    def stop(self, timeout: float = 60.0) -> int | None:
        """A graceful stop (SIGTERM, as an operator's service manager does); the exit code."""
        if not self.is_running():
            self._close_output()
            return None if self.proc is None else self.proc.returncode
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            self._close_output()
        return code

    def restart(self) -> None:
        self.stop()
        self.start()

    def cpu_seconds(self) -> float:
        """User + system CPU the running process has used so far (Linux ``/proc``)."""
        if self.proc is None:
            return 0.0
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def output(self) -> str:
        """What the process printed (its log), for a failing test's message."""
        if not self.output_path.exists():
            return ""
        return self.output_path.read_text(errors="replace")

    def _close_output(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None


class ProcessCluster:
    """``nodes`` combined broker+controller processes forming one cluster (see above)."""

    def __init__(
        self,
        base_dir: Path | str,
        nodes: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        cluster_id: str | None = None,
    ) -> None:
        base_dir = Path(base_dir)
        free = iter(free_ports(2 * nodes))
        ports = {i: (next(free), next(free)) for i in range(1, nodes + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{ports[i][1]}" for i in ports)
        self.cluster_id = cluster_id or uuid_to_base64(random_uuid())
        self.nodes = [
            ServerProcess(
                base_dir / f"node{i}",
                node_id=i,
                port=ports[i][0],
                controller_port=ports[i][1],
                voters=voters,
                config=config,
            )
            for i in ports
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap_server for n in self.nodes)

    def node(self, node_id: int) -> ServerProcess:
        return self.nodes[node_id - 1]

    def start(self) -> None:
        """Format (first time) and start every node; return once every one is ready."""
        for n in self.nodes:
            n.format(self.cluster_id)
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_ready()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()

    def __enter__(self) -> ProcessCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.kill() if exc[0] is not None else self.stop()


def run_then_kill(nodes, main) -> None:
    """``trio.run(main)`` over running ``nodes``; on failure print each node's last output (the
    story of what went wrong is in the processes), and ``kill -9`` every node at the end."""
    import trio

    try:
        trio.run(main)
    except BaseException:
        for node in nodes:
            print(f"--- node {node.node_id} ---\n{node.output()[-4000:]}")
        raise
    finally:
        for node in nodes:
            node.kill()
