"""Connection limits, sans-IO: Kafka's ``ConnectionQuotas`` (``SocketServer.scala``) as counts
and rules, without sockets or waiting. The Trio shell is :class:`kcore.server.network.KafkaServer`.

Theory of operation
-------------------
One :class:`ConnectionQuotas` counts the connections of one group of listeners: the broker
listeners share one, the controller listeners another (Kafka's broker and controller each run
their own ``SocketServer`` with its own ``ConnectionQuotas``, under the same settings). The
shell asks it after each accept, in Kafka's order (``Acceptor.accept`` → ``inc``):

1. **A slot** (:meth:`ConnectionQuotas.slot_available`): the listener below its
   ``listener.name.<l>.max.connections``, and the group below ``max.connections`` — except
   the *protected* listener (the inter-broker one, when the group has more than one listener),
   which only its own limit bounds. Without a slot the listener's acceptor **waits** with the
   accepted connection until one is released or a limit raised (Kafka blocks its ``Acceptor``
   thread in ``waitForConnectionSlot``); further clients wait in the kernel's listen backlog.
2. **The per-IP limit** (:meth:`ConnectionQuotas.admit`): an address already holding
   ``limit_for(address)`` connections — its ``max.connections.per.ip.overrides`` entry, else
   ``max.connections.per.ip`` — gets no more: the shell closes the new one at once (Kafka logs
   "Rejected connection from ..., address already has the configured maximum of N
   connections." and closes it; the client sees a disconnect and retries).
3. **Excess** (:meth:`ConnectionQuotas.excess`): the protected listener may take the group past
   ``max.connections``, and an operator may lower the limit below the count; then as many
   connections of the other listeners are closed as the group is over, least recently used
   first (Kafka's ``Processor.closeExcessConnections``, one per poll until under the limit).

:meth:`ConnectionQuotas.release` gives the slot back when a counted connection closes. Limits
change at run time through :meth:`ConnectionQuotas.update` (dynamic broker configs); they bind
new connections (and excess), never those already admitted by the per-IP rule, as in Kafka.

Addresses are compared as IP addresses (an IPv4-mapped IPv6 peer counts as its IPv4 address);
the overrides' host names are resolved by the shell (:func:`resolve_overrides`), once per
configuration, as Kafka's ``InetAddress.getByName`` does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kcore.log.config import INT_MAX, ConfigType, parse_host_counts, parse_text

__all__ = [
    "ConnectionLimitsConfig",
    "ConnectionQuotas",
    "limits_from_layers",
    "resolve_overrides",
]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def ip_of(address: str) -> IpAddress:
    """``address`` as an IP address; an IPv4-mapped IPv6 one as the IPv4 address it maps."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True)
class ConnectionLimitsConfig:
    """The limits in force: ``max.connections``, ``max.connections.per.ip``, the resolved
    ``max.connections.per.ip.overrides`` and ``listener.name.<l>.max.connections``."""

    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[IpAddress, int] = field(default_factory=dict)
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)


def resolve_overrides(
    counts: Mapping[str, int], resolve: Callable[[str], str]
) -> dict[IpAddress, int]:
    """``max.connections.per.ip.overrides``' hosts as IP addresses: an IP literal as itself, a
    host name through ``resolve`` (the shell's DNS look-up; raises OSError if unknown)."""
    out: dict[IpAddress, int] = {}
    for host, count in counts.items():
        try:
            ip = ip_of(host)
        except ValueError:
            ip = ip_of(resolve(host))
        out[ip] = count
    return out


def limits_from_layers(
    layers: Iterable[Mapping[str, str]],
    listeners: Iterable[str],
    resolve: Callable[[str], str],
) -> ConnectionLimitsConfig:
    """The limits from config layers, the first holding a key winning (this broker's dynamic
    configs, the cluster default, ``server.properties``).

    Raises:
        InvalidConfigError: a value that does not parse.
        OSError: an override's host name that does not resolve.
    """
    layers = list(layers)

    def text(key: str) -> str | None:
        for layer in layers:
            if key in layer:
                return layer[key]
        return None

    def integer(key: str) -> int | None:
        value = text(key)
        return None if value is None else parse_text(key, value, ConfigType.INT)

    per_listener = {}
    for name in listeners:
        value = integer(f"listener.name.{name.lower()}.max.connections")
        if value is not None:
            per_listener[name] = value
    overrides_key = "max.connections.per.ip.overrides"
    overrides = parse_host_counts(overrides_key, text(overrides_key) or "")
    max_connections = integer("max.connections")
    per_ip = integer("max.connections.per.ip")
    return ConnectionLimitsConfig(
        max_connections=INT_MAX if max_connections is None else max_connections,
        max_connections_per_ip=INT_MAX if per_ip is None else per_ip,
        per_ip_overrides=MappingProxyType(resolve_overrides(overrides, resolve)),
        listener_max_connections=MappingProxyType(per_listener),
    )


class ConnectionQuotas:
    """The connection counts of one group of listeners and the rules over them (see the
    module docstring). ``protected_listener``: the inter-broker listener's name, or None."""

    def __init__(
        self,
        listeners: Iterable[str],
        protected_listener: str | None = None,
        config: ConnectionLimitsConfig | None = None,
    ) -> None:
        self.config = config or ConnectionLimitsConfig()
        self._listener_counts = dict.fromkeys(listeners, 0)
        self._protected = protected_listener
        self._counts: dict[IpAddress, int] = {}
        self.total = 0

    def update(self, config: ConnectionLimitsConfig) -> None:
        """New limits (a dynamic config change); the shell then retries its waiting acceptors
        and closes :meth:`excess` connections."""
        self.config = config

    def is_protected(self, listener: str) -> bool:
        """Kafka's ``protectedListener``: the inter-broker listener, if it is not alone."""
        return listener == self._protected and len(self._listener_counts) > 1

    def limit_for(self, address: str) -> int:
        return self.config.per_ip_overrides.get(ip_of(address), self.config.max_connections_per_ip)

    def slot_available(self, listener: str) -> bool:
        """May ``listener``'s acceptor take a connection now? (Else it waits.)"""
        limit = self.config.listener_max_connections.get(listener, INT_MAX)
        if self._listener_counts.get(listener, 0) >= limit:
            return False
        return self.is_protected(listener) or self.total < self.config.max_connections

    def admit(self, listener: str, address: str) -> bool:
        """Count a connection from ``address`` on ``listener``, or refuse it (False: the address
        is at its limit; nothing is counted and the shell closes the connection)."""
        ip = ip_of(address)
        count = self._counts.get(ip, 0)
        if count >= self.limit_for(address):
            return False
        self._counts[ip] = count + 1
        self._listener_counts[listener] = self._listener_counts.get(listener, 0) + 1
        self.total += 1
        return True

    def release(self, listener: str, address: str) -> None:
        """A counted connection closed."""
        ip = ip_of(address)
        count = self._counts.get(ip, 0)
        if count <= 0:
            raise ValueError(f"no connection counted from {address}")
        if count == 1:
            del self._counts[ip]
        else:
            self._counts[ip] = count - 1
        self._listener_counts[listener] -= 1
        self.total -= 1

    def excess(self) -> int:
        """How many connections of unprotected listeners to close: the group's count above
        ``max.connections`` (Kafka's ``maxConnectionsExceeded``), 0 if no listener is
        unprotected."""
        if all(self.is_protected(name) for name in self._listener_counts):
            return 0
        return max(0, self.total - self.config.max_connections)

    def count(self, address: str) -> int:
        return self._counts.get(ip_of(address), 0)

    def listener_count(self, listener: str) -> int:
        return self._listener_counts.get(listener, 0)
