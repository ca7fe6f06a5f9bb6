"""What a node uses to connect to a listener of its own cluster: the one rule every internal
client follows (peer clients, follower fetchers, the controller channel with its broker
registration and heartbeats, the Raft voters' connections).

Kafka's rule (``ChannelBuilders.clientChannelBuilder`` with the listener's name): the node
connects with the listener's security protocol, and

* its **TLS** settings are that listener's ``ssl.*`` keys (``listener.name.<l>.ssl.*`` first,
  then ``ssl.*``, :func:`kcore.security.tls_config.resolve`): the truststore checks the peer,
  the keystore (when there is one) is the node's client certificate for mutual TLS, and
  ``ssl.endpoint.identification.algorithm`` (``https`` by default) checks the peer's host name;
* its **SASL mechanism** is ``sasl.mechanism.inter.broker.protocol`` on the inter-broker listener
  and ``sasl.mechanism.controller.protocol`` on a controller listener (Kafka's default
  ``GSSAPI``, and OAUTHBEARER, are refused: kcore's nodes log in with PLAIN or SCRAM);
* its **login** is the ``username`` and ``password`` options of
  ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (Kafka's PlainLoginModule and
  ScramLoginModule read the same options; the PLAIN module's ``user_<name>`` options are the
  listener's users, a different matter). kcore reads no JAAS file, so the key is required.

A node that serves the listener must also enable the mechanism there (Kafka: "must be included
in sasl.enabled.mechanisms"). :func:`check_internal_logins` runs at configuration time
(pure: a bad setting stops ``kcore server`` before anything is written);
:class:`InternalSecurity` builds the TLS contexts once, when the node starts (file I/O).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcore.log.config import InvalidConfigError
from kcore.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    parse_jaas_config,
)
from kcore.security.sasl_client import SaslClientSettings
from kcore.security.sasl_config import PLAIN, SCRAM_MECHANISMS, is_sasl
from kcore.security.tls_config import TLS_PROTOCOLS, client_context_of, resolve

# What a node can log in with: a username and password from the JAAS config. OAUTHBEARER
# needs a token source kcore's nodes do not have (listeners may still serve it to clients).
NODE_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)

__all__ = [
    "CONTROLLER_MECHANISM_KEY",
    "INTER_BROKER_MECHANISM_KEY",
    "InternalClientSecurity",
    "InternalSecurity",
    "check_internal_logins",
    "internal_login",
]

INTER_BROKER_MECHANISM_KEY = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_MECHANISM_KEY = "sasl.mechanism.controller.protocol"


@dataclass(frozen=True)
class InternalClientSecurity:
    """How this node connects to one listener of its cluster."""

    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None
    sasl: SaslClientSettings | None

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of ``BrokerConnection.connect`` and ``KafkaClient``."""
        return {"ssl_context": self.ssl_context, "sasl": self.sasl}


def internal_login(
    raw: Mapping[str, str],
    listener: str,
    protocol: str,
    mechanism_key: str,
    mechanism: str,
    enabled: tuple[str, ...] | None,
) -> SaslClientSettings | None:
    """This node's SASL login on ``listener`` (None unless ``protocol`` is a SASL one).

    ``mechanism`` is the value of ``mechanism_key``; ``enabled`` the mechanisms the listener
    serves on this node (None: this node does not serve it, as a broker-only node and the
    controller listener). Raises :class:`InvalidConfigError` naming the key to fix."""
    if not is_sasl(protocol):
        return None
    role = "inter-broker" if mechanism_key == INTER_BROKER_MECHANISM_KEY else "controller"
    mechanism = mechanism.strip()
    if mechanism not in NODE_MECHANISMS:
        default = " (Kafka's default)" if mechanism == "GSSAPI" else ""
        raise InvalidConfigError(
            mechanism_key,
            f"{mechanism_key}={mechanism}{default} is not supported by kcore: the {role} "
            f"listener {listener} is {protocol}, and kcore's nodes authenticate to each other "
            f"with {', '.join(NODE_MECHANISMS)}",
        )
    if enabled is not None and mechanism not in enabled:
        raise InvalidConfigError(
            mechanism_key,
            f"{mechanism_key} must be included in sasl.enabled.mechanisms when SASL is used "
            f"for {role} communication: listener {listener} enables {', '.join(enabled)}",
        )
    jaas_key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = raw.get(jaas_key)
    if not text:
        raise InvalidConfigError(
            jaas_key,
            f"{jaas_key} must be set: its username and password are this node's {role} login "
            f"({mechanism} on listener {listener}; kcore reads no JAAS file)",
        )
    try:
        module = parse_jaas_config(text, jaas_key)
    except JaasConfigError as e:
        raise InvalidConfigError(jaas_key, str(e)) from None
    expected = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    if module.class_name != expected:
        raise InvalidConfigError(
            jaas_key,
            f"{jaas_key} names login module {module.class_name}; {mechanism} needs {expected}",
        )
    missing = [k for k in ("username", "password") if not module.options.get(k)]
    if missing:
        raise InvalidConfigError(
            jaas_key,
            f"{jaas_key} has no {' and no '.join(missing)}: the {role} login of this node on "
            f"listener {listener}",
        )
    return SaslClientSettings(mechanism, module.options["username"], module.options["password"])


def _targets(values: Mapping[str, Any], is_broker: bool) -> list[tuple[str, str]]:
    """(listener, mechanism key) of every listener this node connects to as a client: the
    inter-broker listener (brokers), the first controller listener (every node: a broker's
    controller channel, a voter's Raft connections)."""
    out = []
    if is_broker and values["inter_broker_listener_name"]:
        out.append((values["inter_broker_listener_name"], INTER_BROKER_MECHANISM_KEY))
    if values["controller_listener_names"]:
        out.append((values["controller_listener_names"][0], CONTROLLER_MECHANISM_KEY))
    return out


def _logins(
    values: Mapping[str, Any], raw: Mapping[str, str], is_broker: bool
) -> dict[str, tuple[str, SaslClientSettings | None]]:
    protocols = values["listener_security_protocol_map"]
    served = {x.name for x in values["listeners"]}
    sasl_listeners = values.get("sasl_listeners") or {}
    out: dict[str, tuple[str, SaslClientSettings | None]] = {}
    for listener, key in _targets(values, is_broker):
        protocol = protocols.get(listener, "PLAINTEXT")
        enabled = None
        if listener in served and listener in sasl_listeners:
            enabled = tuple(sasl_listeners[listener].mechanisms)
        mechanism = values[key.replace(".", "_")]
        out[listener] = (protocol, internal_login(raw, listener, protocol, key, mechanism, enabled))
    return out


def check_internal_logins(values: Mapping[str, Any], raw: Mapping[str, str], is_broker: bool):
    """Raise :class:`InvalidConfigError` for an internal listener this node could not log in to
    (see the module docstring); ``values`` are BrokerConfig's parsed values."""
    _logins(values, raw, is_broker)


class InternalSecurity:
    """The node's :class:`InternalClientSecurity` per listener it connects to, built once.

    ``config`` is a :class:`~kcore.server.config.BrokerConfig`. Raises InvalidConfigError when a
    TLS listener's stores do not load (as the listeners' own contexts do)."""

    def __init__(self, config: Any) -> None:
        self.inter_broker_listener = config.inter_broker_listener_name
        names = tuple(config.controller_listener_names)
        self.controller_listener = names[0] if names else None
        values = {
            "listener_security_protocol_map": config.listener_security_protocol_map,
            "listeners": config.listeners,
            "sasl_listeners": config.sasl_listeners,
            "inter_broker_listener_name": config.inter_broker_listener_name,
            "controller_listener_names": names,
            "sasl_mechanism_inter_broker_protocol": config.sasl_mechanism_inter_broker_protocol,
            "sasl_mechanism_controller_protocol": config.sasl_mechanism_controller_protocol,
        }
        self._by_listener: dict[str, InternalClientSecurity] = {}
        for listener, (protocol, sasl) in _logins(values, config.raw, config.is_broker).items():
            context = None
            if protocol in TLS_PROTOCOLS:
                context = client_context_of(resolve(listener, [dict(config.raw)]))
            self._by_listener[listener] = InternalClientSecurity(listener, protocol, context, sasl)

    def for_listener(self, listener: str | None) -> InternalClientSecurity:
        """How to connect to ``listener``; PLAINTEXT for one this node never connects to."""
        known = self._by_listener.get(listener or "")
        return known or InternalClientSecurity(listener or "", "PLAINTEXT", None, None)

    def inter_broker(self) -> InternalClientSecurity:
        return self.for_listener(self.inter_broker_listener)

    def controller(self) -> InternalClientSecurity:
        return self.for_listener(self.controller_listener)
