"""The broker's SASL settings: Kafka's keys, per listener, checked at startup.

Keys (Kafka's names and defaults; registered in :data:`kcore.server.config.BROKER_CONFIGS` from
:data:`SASL_KEYS`):

* ``sasl.enabled.mechanisms`` (default ``GSSAPI``, as Kafka), overridden per listener by
  ``listener.name.<listener>.sasl.enabled.mechanisms`` (the listener name lower-cased, as
  Kafka's ``ListenerName.configPrefix``). kcore serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
  OAUTHBEARER with unsecured JWS tokens; a SASL listener enabling anything else (GSSAPI, the
  default) refuses to start.
* ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (mechanism lower-cased): for PLAIN
  a ``PlainLoginModule`` whose ``user_<name>="<password>"`` options are the users (required:
  kcore reads no JAAS file); for SCRAM an optional ``ScramLoginModule`` (the credentials are in
  the metadata log); for OAUTHBEARER an optional ``OAuthBearerLoginModule`` whose
  ``unsecuredValidator*`` options configure the unsecured validator
  (:class:`~kcore.security.oauthbearer.UnsecuredValidatorOptions`).
* OAUTHBEARER's secured validation (``sasl.oauthbearer.*`` keys such as
  ``sasl.oauthbearer.jwks.endpoint.url``, plain or listener-prefixed, or a validator callback
  handler other than Kafka's unsecured one) is refused: kcore validates unsecured tokens only.
* ``connections.max.reauth.ms`` (default 0: sessions never expire), also per listener and
  mechanism (``listener.name.<l>.<mechanism>.connections.max.reauth.ms``): KIP-368.
* ``connection.failed.authentication.delay.ms`` (default 100): how long a failed
  authentication's answer (and the close that follows) is held back.
* ``sasl.server.max.receive.size`` (default 524288): the largest frame read from a client that
  has not authenticated yet (``socket.request.max.bytes`` applies after), so a stranger cannot
  make the broker buffer 100 MiB per connection; a larger size prefix closes the connection.
* ``sasl.mechanism.inter.broker.protocol``, ``sasl.mechanism.controller.protocol`` (GSSAPI):
  the mechanism this node logs in with on a SASL inter-broker or controller listener, its
  login the listener's ``sasl.jaas.config`` ``username``/``password``
  (:mod:`kcore.security.internal_security`; GSSAPI and OAUTHBEARER are refused there).
* A server callback handler (``sasl.server.callback.handler.class``, plain or prefixed) is
  refused: kcore has none to load (except, for OAUTHBEARER, Kafka's default
  ``OAuthBearerUnsecuredValidatorCallbackHandler`` named explicitly).

:func:`sasl_listener_configs` checks all of it and returns one :class:`SaslListenerConfig` per
SASL listener; :class:`~kcore.server.config.BrokerConfig` keeps the result as
``config.sasl_listeners``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kcore.log.config import ConfigType, InvalidConfigError, Range
from kcore.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    JaasModule,
    parse_jaas_config,
)
from kcore.security.oauthbearer import (
    OAUTHBEARER_LOGIN_MODULE,
    OAUTHBEARER_MECHANISM,
    UnsecuredValidatorOptions,
)
from kcore.security.plain import plain_users
from kcore.security.scram import MECHANISMS as SCRAM_MECHANISMS

__all__ = [
    "SASL_KEYS",
    "SUPPORTED_MECHANISMS",
    "SaslListenerConfig",
    "is_sasl",
    "sasl_listener_configs",
]

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER_MECHANISM)
_LOGIN_MODULES = {PLAIN: PLAIN_LOGIN_MODULE, OAUTHBEARER_MECHANISM: OAUTHBEARER_LOGIN_MODULE}
# Kafka's default OAUTHBEARER validator, the one kcore implements: accepted if named.
UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)

# (name, type, Kafka's default, validator, doc): config.py wraps each in a ServerConfigKey.
SASL_KEYS: tuple[tuple[str, ConfigType, Any, Any, str], ...] = (
    ("sasl.enabled.mechanisms", ConfigType.LIST, ("GSSAPI",), None,
     "SASL mechanisms served on SASL listeners (kcore: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
     "OAUTHBEARER with unsecured tokens)."),
    ("connections.max.reauth.ms", ConfigType.LONG, 0, None,
     "Longest SASL session before re-authentication (KIP-368; 0: no limit)."),
    ("connection.failed.authentication.delay.ms", ConfigType.INT, 100, Range(0),
     "Delay of the answer to a failed authentication, and of the close after it."),
    ("sasl.server.max.receive.size", ConfigType.INT, 524288, Range(1),
     "Largest frame a SASL listener reads before the client authenticated."),
    ("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "GSSAPI", None,
     "SASL mechanism this node logs in with on a SASL inter-broker listener."),
    ("sasl.mechanism.controller.protocol", ConfigType.STRING, "GSSAPI", None,
     "SASL mechanism this node logs in with on a SASL controller listener."),
)  # fmt: skip


def is_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SaslListenerConfig:
    """What one SASL listener serves."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets
    reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism -> 0 or lifetime
    failed_delay_ms: int = 100
    max_receive_size: int = 524288  # frames before authentication (a stranger's memory)
    oauthbearer: UnsecuredValidatorOptions = UnsecuredValidatorOptions()


def _prefix(listener: str) -> str:
    return f"listener.name.{listener.lower()}."


def _long(key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidConfigError(
            key, f"Invalid value {text} for configuration {key}: Not a number of type LONG"
        ) from None


def _refuse(key: str, message: str) -> InvalidConfigError:
    return InvalidConfigError(key, message)


def _listener_config(listener: str, values: Mapping[str, Any], raw: Mapping[str, str]):
    prefix = _prefix(listener)
    key = prefix + "sasl.enabled.mechanisms"
    if key in raw:
        mechanisms = tuple(x.strip() for x in raw[key].split(",") if x.strip())
    else:
        key = "sasl.enabled.mechanisms"
        mechanisms = tuple(values["sasl_enabled_mechanisms"])
    if not mechanisms:
        raise _refuse(key, f"{key} must name at least one mechanism for listener {listener}")
    for mechanism in mechanisms:
        if mechanism not in SUPPORTED_MECHANISMS:
            raise _refuse(
                key,
                f"Listener {listener} enables SASL mechanism {mechanism} ({key}), which kcore "
                f"does not support: it serves {', '.join(SUPPORTED_MECHANISMS)}",
            )
    for handler_key in ("sasl.server.callback.handler.class",) + tuple(
        f"{prefix}{m.lower()}.sasl.server.callback.handler.class" for m in mechanisms
    ):
        handler = raw.get(handler_key, "").strip()
        if handler == UNSECURED_VALIDATOR and handler_key.endswith(".oauthbearer." + _HANDLER):
            continue
        if handler:
            raise _refuse(
                handler_key, f"{handler_key} is not supported: kcore loads no callback handlers"
            )
    if OAUTHBEARER_MECHANISM in mechanisms:
        _refuse_secured_oauthbearer(listener, raw)
    users: dict[str, str] = {}
    reauth: dict[str, int] = {}
    oauthbearer = UnsecuredValidatorOptions()
    for mechanism in mechanisms:
        jaas_key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        text = raw.get(jaas_key)
        expected = _LOGIN_MODULES.get(mechanism, SCRAM_LOGIN_MODULE)
        if text is None:
            if mechanism == PLAIN:
                raise _refuse(
                    jaas_key,
                    f"Listener {listener} enables PLAIN but {jaas_key} is not set: its "
                    f'{PLAIN_LOGIN_MODULE} options (user_<name>="<password>") are the users '
                    "(kcore reads no JAAS file)",
                )
        else:
            try:
                module = parse_jaas_config(text, jaas_key)
            except JaasConfigError as e:
                raise _refuse(jaas_key, str(e)) from None
            if module.class_name != expected:
                raise _refuse(
                    jaas_key,
                    f"{jaas_key} names login module {module.class_name}; {mechanism} needs "
                    f"{expected}",
                )
            if mechanism == PLAIN:
                users = plain_users(module)
            elif mechanism == OAUTHBEARER_MECHANISM:
                oauthbearer = _unsecured_validator(jaas_key, module)
        reauth_key = f"{prefix}{mechanism.lower()}.connections.max.reauth.ms"
        if reauth_key in raw:
            reauth[mechanism] = _long(reauth_key, raw[reauth_key])
        else:
            reauth[mechanism] = values["connections_max_reauth_ms"]
    return SaslListenerConfig(
        listener=listener,
        mechanisms=mechanisms,
        plain_users=MappingProxyType(users),
        reauth_ms=MappingProxyType(reauth),
        failed_delay_ms=values["connection_failed_authentication_delay_ms"],
        max_receive_size=values["sasl_server_max_receive_size"],
        oauthbearer=oauthbearer,
    )


_HANDLER = "sasl.server.callback.handler.class"


def _unsecured_validator(jaas_key: str, module: JaasModule) -> UnsecuredValidatorOptions:
    try:
        return UnsecuredValidatorOptions.from_options(module.options)
    except ValueError as e:
        raise _refuse(jaas_key, f"{jaas_key}: {e}") from None


def _refuse_secured_oauthbearer(listener: str, raw: Mapping[str, str]) -> None:
    """OAUTHBEARER with a real identity provider (JWKS, issuer, audience: Kafka's
    ``OAuthBearerValidatorCallbackHandler``) is not built: its keys refuse startup rather than
    leave tokens unchecked against them."""
    for key in sorted(raw):
        unprefixed = key
        for prefix in (f"{_prefix(listener)}oauthbearer.", _prefix(listener)):
            if key.startswith(prefix):
                unprefixed = key[len(prefix) :]
                break
        if unprefixed.startswith("sasl.oauthbearer."):
            raise _refuse(
                key,
                f"{key} is not supported: kcore validates only Kafka's unsecured OAUTHBEARER "
                "tokens (alg none, OAuthBearerUnsecuredValidatorCallbackHandler), not tokens "
                "from an identity provider",
            )


def sasl_listener_configs(
    values: Mapping[str, Any], raw: Mapping[str, str]
) -> Mapping[str, SaslListenerConfig]:
    """One :class:`SaslListenerConfig` per SASL listener of ``values["listeners"]``, by name.
    Raises :class:`InvalidConfigError` for what kcore cannot serve (see the module docstring)."""
    # The node's own logins on its inter-broker and controller listeners are checked by
    # kcore.security.internal_security, once these are known.
    out = {
        listener.name: _listener_config(listener.name, values, raw)
        for listener in values["listeners"]
        if is_sasl(listener.security_protocol)
    }
    return MappingProxyType(out)
