"""Listener and quorum-voter settings: parsing ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``host:port`` lists with Kafka's rules and messages."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import NamedTuple

from kcore.log.config import InvalidConfigError, invalid_value

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Every listener serves all four, the controller and inter-broker ones too: kcore's own clients
# connect to those with the listener's protocol (kcore/security/internal_security.py).


class Listener(NamedTuple):
    """One parsed ``NAME://host:port``: ``name`` upper-cased as Kafka normalises it, ``host``
    ``None`` for an empty host (bind the default interface; IPv6 without brackets)."""

    name: str
    host: str | None
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = self.host or ""
        return f"{self.name}://{f'[{host}]' if ':' in host else host}:{self.port}"


class QuorumVoter(NamedTuple):
    """One ``controller.quorum.voters`` entry, ``id@host:port``."""

    id: int
    host: str
    port: int


# Kafka's uriParseExp: NAME://host:port, the host optionally in brackets (IPv6).
_LISTENER = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_HOST_PORT = re.compile(r"\[?([0-9a-zA-Z\-%._:]+?)\]?:([0-9]+)")


def listener_name(text: str) -> str:
    return text.partition("://")[0].strip().upper()


def parse_listeners(
    key: str, items: tuple[str, ...], protocols: Mapping[str, str], distinct_ports: bool
) -> tuple[Listener, ...]:
    listeners = []
    for item in items:
        match = _LISTENER.fullmatch(item.strip())
        if match is None:
            reason = f"Unable to parse {item} to a broker endpoint"
        else:
            name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
            if name not in protocols:
                reason = f"No security protocol defined for listener {name}"
            elif not 0 <= port <= 65535:
                reason = f"port {port} of listener {name} is out of range"
            else:
                listeners.append(Listener(name, host or None, port, protocols[name]))
                continue
        raise InvalidConfigError(
            key, f"Error creating broker listeners from '{','.join(items)}': {reason}"
        )
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise InvalidConfigError(
            key, f"Each listener must have a different name, listeners: {','.join(items)}"
        )
    if distinct_ports:
        check_distinct_ports(key, listeners, items)
    return tuple(listeners)


def _ip_version(host: str | None) -> int | None:
    try:
        return ipaddress.ip_address(host or "").version
    except ValueError:
        return None


def check_distinct_ports(key: str, listeners: list[Listener], items: tuple[str, ...]) -> None:
    # Two listeners may share a port only when one host is an IPv4 and the other an IPv6
    # address (port 0, "any free port", is exempt), as in Kafka's EndpointUtils.validate.
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port:
            by_port.setdefault(listener.port, []).append(listener)
    for port, group in by_port.items():
        if len(group) > 1 and sorted(_ip_version(x.host) or 0 for x in group) != [4, 6]:
            raise InvalidConfigError(
                key,
                "Each listener must have a different port unless exactly one listener has an "
                f"IPv4 address and the other IPv6 address, listeners: {','.join(items)}, "
                f"port: {port}",
            )


def parse_protocol_map(items: tuple[str, ...]) -> dict[str, str]:
    key = "listener.security.protocol.map"
    protocols: dict[str, str] = {}
    for item in items:
        name, sep, protocol = (part.strip() for part in item.partition(":"))
        if not sep or not name or protocol.upper() not in SECURITY_PROTOCOLS:
            raise invalid_value(
                key,
                ",".join(items),
                f"'{item}' is not LISTENER_NAME:SECURITY_PROTOCOL, where "
                f"the protocol is one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        if name.upper() in protocols:
            raise invalid_value(
                key, ",".join(items), f"listener name {name} appears more than once"
            )
        protocols[name.upper()] = protocol.upper()
    return protocols


def parse_host_port(key: str, text: str) -> tuple[str, int]:
    match = _HOST_PORT.fullmatch(text.strip())
    if match is None or int(match.group(2)) > 65535:
        raise invalid_value(key, text, "expected host:port (an IPv6 host in brackets)")
    return match.group(1), int(match.group(2))


def loopback(host: str | None) -> str:
    if host in (None, "", "0.0.0.0"):
        return "127.0.0.1"
    return "::1" if host == "::" else host
