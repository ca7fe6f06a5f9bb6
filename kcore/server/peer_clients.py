"""Clients from one broker to the other brokers of its cluster, each on the peer's
inter-broker endpoint as the metadata registers it.

One :class:`KafkaClient` per peer, bootstrapped on that peer's address alone and never asked
for metadata, so its ``"any"`` target is that broker: what a broker uses to send a request to
a given node (transaction markers to a partition's leader, the admin endpoint's
DescribeClusterMirrors to the leaders of a mirror's partitions). A peer that re-registers on
another address gets a new client. Requests go out as this node: the inter-broker listener's
protocol with the node's login (:mod:`kcore.security.internal_security`).
"""

from __future__ import annotations

from typing import Any

import trio

from kcore.client.cluster import KafkaClient
from kcore.protocol.errors import ErrorCode, KafkaError


class PeerClients:
    def __init__(self, broker: Any, client_id: str, **options: Any) -> None:
        self.broker = broker
        self.client_id = client_id
        self.options = options
        self._clients: dict[int, tuple[tuple[str, int], KafkaClient]] = {}

    async def get(self, node: int) -> KafkaClient:
        """The client of broker ``node``; raises KafkaError BROKER_NOT_AVAILABLE when the
        metadata registers no inter-broker endpoint for it."""
        registration = self.broker.metadata_image.cluster.brokers.get(node)
        listener = self.broker.config.inter_broker_listener_name
        endpoint = None if registration is None else registration.listener(listener)
        if endpoint is None:
            raise KafkaError(
                ErrorCode.BROKER_NOT_AVAILABLE, f"node {node} has no {listener} endpoint"
            )
        address = (endpoint.host, endpoint.port)
        known = self._clients.get(node)
        if known is not None and known[0] == address:
            return known[1]
        if known is not None:
            await known[1].aclose()
        client = KafkaClient(
            [f"{endpoint.host}:{endpoint.port}"],
            client_id=self.client_id,
            **self.broker.internal_security.inter_broker().connect_options(),
            **self.options,
        )
        self._clients[node] = (address, client)
        return client

    async def aclose(self) -> None:
        """Close every client (shielded: called on the way out of a cancelled task)."""
        with trio.CancelScope(shield=True):
            for _, client in self._clients.values():
                await client.aclose()
            self._clients.clear()
