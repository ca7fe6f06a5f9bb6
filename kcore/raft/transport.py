"""The Raft driver's outbound network: one pipelined connection per other voter.

Theory of operation
-------------------
The Raft core says "send this request to voter N" (:class:`~kcore.raft.outputs.SendRequest`);
:meth:`PeerTransport.send` queues it for N's task and returns at once, so the driver never
waits for the network while it executes a poll. Each peer has one task that owns a
:class:`~kcore.client.connection.BrokerConnection` to the peer's ``controller.quorum.voters``
address (negotiated with ApiVersions on connect) and starts one child task per request, so
requests are pipelined on the connection. Every request ends in exactly one report back to
the driver: ``on_response(peer, request_id, response)`` or ``on_failure(peer, request_id)``
(the peer cannot be reached, the connection broke, the request timed out, or no version both
sides speak can carry it). The core's own timeout usually forgets a request first; a late
report is then ignored by the core.

Versions: the highest both the codec and the peer support (``BrokerConnection.version_for``).
A pre-vote (KIP-996) exists only in Vote v2: encoding one at v0/v1 would silently turn it into a
binding vote request, so a pre-vote to a peer without Vote v2 is reported as a failure instead
(:func:`kcore.raft.rpc.vote_request_needs_v2`); Kafka's voters likewise stay on pre-vote only
with peers that speak it.

Reconnection: a failed connect makes the peer rest with binary exponential backoff (50 ms
doubling to 1 s, with +-20 % jitter); requests for a resting peer fail at once, and the core
retries them after its own ``controller.quorum.retry.backoff.ms``. A connection that breaks is
re-opened by the next request.

This module and :mod:`kcore.raft.driver` are the Trio shell of the pure Raft core: the only
modules of ``kcore/raft`` that import ``trio`` or the client.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import trio

from kcore.client.connection import BrokerConnection, api_of
from kcore.client.errors import AuthenticationFailed, ClientError, UnsupportedVersionError
from kcore.protocol import messages as m
from kcore.protocol.messages import Message
from kcore.raft import rpc
from kcore.raft.config import VoterAddress

__all__ = ["PeerTransport"]

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 1.0
VOTE_KEY = 52


class _Peer:
    """One other voter: its connection, its queue of requests, its reconnect backoff."""

    def __init__(self, transport: PeerTransport, node_id: int, address: VoterAddress) -> None:
        self.transport = transport
        self.node_id = node_id
        self.address = address
        self.send_channel, self.receive_channel = trio.open_memory_channel(float("inf"))
        self.conn: BrokerConnection | None = None
        self.failures = 0
        self.resting_until = 0.0
        self.warned_no_pre_vote = False

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                async for request_id, message in self.receive_channel:
                    conn = await self._connection()
                    version = None if conn is None else self._version(conn, message)
                    if version is None:
                        self.transport.on_failure(self.node_id, request_id)
                        continue
                    nursery.start_soon(self._roundtrip, conn, request_id, message, version)
        finally:
            conn, self.conn = self.conn, None
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()

    async def _connection(self) -> BrokerConnection | None:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        self.conn = None
        if trio.current_time() < self.resting_until:
            return None
        t = self.transport
        try:
            conn = await BrokerConnection.connect(
                self.address.host,
                self.address.port,
                client_id=t.client_id,
                connect_timeout=t.connect_timeout_s,
                request_timeout=t.request_timeout_s,
                **t.connect_options,
            )
        except (ClientError, OSError) as e:
            self.failures += 1
            pause = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** min(self.failures - 1, 10))
            self.resting_until = trio.current_time() + pause * random.uniform(0.8, 1.2)
            if isinstance(e, AuthenticationFailed) and self.failures == 1:
                # Retrying cannot help until the login changes: said once per failing streak,
                # loudly, as Kafka's NetworkClient logs a failed authentication.
                log.error(
                    "raft: authentication to voter %d at %s failed, this node cannot join the "
                    "quorum with its controller listener login: %s",
                    self.node_id,
                    self.address,
                    e,
                )
            else:
                log.debug("raft: cannot reach voter %d at %s: %s", self.node_id, self.address, e)
            return None
        if self.failures:
            log.info("raft: connected to voter %d at %s", self.node_id, self.address)
        self.failures = 0
        self.conn = conn
        return conn

    def _version(self, conn: BrokerConnection, message: Message) -> int | None:
        try:
            version = conn.version_for(api_of(message).key)
        except UnsupportedVersionError as e:
            log.warning("raft: cannot send to voter %d: %s", self.node_id, e)
            return None
        if (
            isinstance(message, m.VoteRequest)
            and version < 2
            and rpc.vote_request_needs_v2(message)
        ):
            if not self.warned_no_pre_vote:
                self.warned_no_pre_vote = True
                log.warning(
                    "raft: voter %d speaks Vote up to v%d, without pre-vote (v2): "
                    "pre-votes to it count as not granted",
                    self.node_id,
                    version,
                )
            return None
        return version

    async def _roundtrip(
        self, conn: BrokerConnection, request_id: int, message: Message, version: int
    ) -> None:
        try:
            response = await conn.request(message, version)
        except (ClientError, ValueError, TypeError) as e:
            # ClientError: the connection broke or timed out (it reconnects on the next
            # request); ValueError/TypeError: the codec could not encode the body.
            log.debug("raft: %s to voter %d failed: %s", type(message).__name__, self.node_id, e)
            self.transport.on_failure(self.node_id, request_id)
            return
        self.transport.on_response(self.node_id, request_id, response)


class PeerTransport:
    """Connections from this node to every other voter (see the module docstring).

    Args:
        node_id: this node (no connection to itself).
        voters: ``controller.quorum.voters`` as parsed (id -> address).
        on_response: ``(peer id, request id, response body)``, called from a transport task.
        on_failure: ``(peer id, request id)`` when no answer will come.
        request_timeout_s / connect_timeout_s: bounds of one request / one connection attempt.
    """

    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, VoterAddress],
        *,
        on_response: Callable[[int, int, Message], None],
        on_failure: Callable[[int, int], None],
        request_timeout_s: float,
        connect_timeout_s: float,
        client_id: str | None = None,
        connect_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.node_id = node_id
        # TLS and SASL of the controller listener, as the node connects to it (the server
        # layer's rule, kcore/security/internal_security.py): ssl_context=, sasl=.
        self.connect_options = dict(connect_options or {})
        self.on_response = on_response
        self.on_failure = on_failure
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.client_id = client_id or f"raft-{node_id}"
        self._peers = {
            vid: _Peer(self, vid, address) for vid, address in voters.items() if vid != node_id
        }

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run every peer's task until cancelled; their connections close on the way out."""
        async with trio.open_nursery() as nursery:
            for peer in self._peers.values():
                nursery.start_soon(peer.run)
            task_status.started()

    def send(self, destination: int, request_id: int, message: Message) -> None:
        """Queue ``message`` for ``destination`` (never blocks); the answer is reported later."""
        peer = self._peers.get(destination)
        if peer is None:
            self.on_failure(destination, request_id)
            return
        peer.send_channel.send_nowait((request_id, message))

    def connected(self, destination: int) -> bool:
        """Whether a connection to ``destination`` is open now (for tests and metrics)."""
        peer = self._peers.get(destination)
        return peer is not None and peer.conn is not None and not peer.conn.closed
