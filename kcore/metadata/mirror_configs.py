"""A cluster mirror's configuration: which keys exist, which values are valid, which are secret.

A mirror's configs are ``ConfigRecord`` entries on the CLUSTER_MIRROR (64) config resource named
after the mirror (spec M-02, M-97), set by CreateClusterMirror and changed by
IncrementalAlterConfigs. Every key is checked here, by the controller, before it is stored; a
key kcore would not act on is refused, never stored and ignored:

=================================  ==============================================================
``bootstrap.servers``              required; ``host:port[,host:port...]`` of the source cluster
``mirror.topics.include``          comma-separated Python regexes, matched with ``re.fullmatch``
``mirror.topics.exclude``          (decision D-20); source topics matching an include pattern and
                                   no exclude pattern are mirrored
``mirror.source.cluster.id``       the source's cluster id, recorded on first contact (D-24); it
                                   may only change together with ``bootstrap.servers``
``mirror.topic.replication.factor``  replication factor of created mirror topics (D-28); unset:
                                   the destination's ``default.replication.factor``
``security.protocol``              the source connection's security (spec M-114, D-25):
``sasl.mechanism``                 ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``;
``sasl.jaas.config``               PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with an inline JAAS
``ssl.*`` (:data:`SECURITY_KEYS`)  entry; the client ``ssl.*`` keys of PEM stores, read by
                                   :mod:`kcore.security.client_security` as every kcore client's
client tuning (:data:`CLIENT_KEYS`)  the connection settings the mirror's ``kcore.client``
                                   honours: timeouts and backoffs, in milliseconds
=================================  ==============================================================

The security keys are checked together (:func:`~kcore.security.client_security.client_security`
must accept them: a combination kcore's client cannot honour is refused, never weakened) and
the stores they name are loaded, so a bad certificate is refused when it is set, not when the
mirror first connects. Inline PEM (``ssl.truststore.certificates``, ``ssl.keystore.key``) is
the form to prefer: a ``*.location`` path is read by whichever broker connects.

Secrets (Kafka's PASSWORD-type keys: ``sasl.jaas.config``, ``ssl.keystore.key``, the inline
stores, ``*.password``; :func:`is_sensitive`) are never returned by DescribeConfigs (null value,
``is_sensitive``), nor by any other answer, tool, metric or log line.

Pure: no sockets (the TLS stores are read from files or inline values to check them).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from kcore.log.config import ConfigType, InvalidConfigError
from kcore.security.client_security import (
    CLIENT_SECURITY_KEYS,
    CLIENT_SECURITY_PROTOCOLS,
    ClientSecurityError,
    client_security,
)
from kcore.security.tls_config import TLS_CONFIG_KEYS

__all__ = [
    "BOOTSTRAP_SERVERS",
    "CLIENT_KEYS",
    "EXCLUDE",
    "INCLUDE",
    "LIST_KEYS",
    "MIRROR_KEYS",
    "REPLICATION_FACTOR",
    "SECURITY_KEYS",
    "SECURITY_PROTOCOL",
    "SOURCE_CLUSTER_ID",
    "client_settings",
    "sasl_username",
    "security_settings",
    "first_match",
    "is_internal_topic",
    "is_sensitive",
    "join_patterns",
    "split_patterns",
    "validate_mirror_configs",
    "validate_pattern",
]

BOOTSTRAP_SERVERS = "bootstrap.servers"
INCLUDE = "mirror.topics.include"
EXCLUDE = "mirror.topics.exclude"
SOURCE_CLUSTER_ID = "mirror.source.cluster.id"
REPLICATION_FACTOR = "mirror.topic.replication.factor"
SECURITY_PROTOCOL = "security.protocol"

#: The keys of spec §10.3 and decisions D-24, D-28, with their defaults (None: no default).
MIRROR_KEYS: dict[str, str | None] = {
    BOOTSTRAP_SERVERS: None,
    INCLUDE: "",
    EXCLUDE: "",
    SOURCE_CLUSTER_ID: None,
    REPLICATION_FACTOR: None,
    SECURITY_PROTOCOL: "PLAINTEXT",
}

#: Client settings the mirror's connections honour: key -> (``KafkaClient`` argument, minimum).
#: Values are milliseconds; :func:`client_settings` converts them to the client's seconds.
CLIENT_KEYS: dict[str, tuple[str, int]] = {
    "request.timeout.ms": ("request_timeout", 1),
    "socket.connection.setup.timeout.ms": ("connect_timeout", 1),
    "reconnect.backoff.ms": ("reconnect_backoff", 0),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max", 0),
    "retry.backoff.ms": ("retry_backoff", 0),
    "retry.backoff.max.ms": ("retry_backoff_max", 0),
}

#: Keys whose value is a comma-separated list (IncrementalAlterConfigs APPEND / SUBTRACT).
LIST_KEYS = frozenset({INCLUDE, EXCLUDE, BOOTSTRAP_SERVERS})

#: The standard client security keys a mirror's source connection honours (M-114).
SECURITY_KEYS = CLIENT_SECURITY_KEYS

_SENSITIVE_WORDS = ("password", "secret", "jaas.config")
_SENSITIVE_KEYS = frozenset(
    {"sasl.jaas.config"} | {k for k, kind, *_ in TLS_CONFIG_KEYS if kind is ConfigType.PASSWORD}
)


def is_sensitive(key: str) -> bool:
    """Whether ``key`` holds a secret (Kafka's PASSWORD-type client configs: ``*.password``,
    ``sasl.jaas.config``, ``ssl.keystore.key``, OAuth client secrets): its value is never
    shown."""
    lowered = key.lower()
    return lowered in _SENSITIVE_KEYS or any(word in lowered for word in _SENSITIVE_WORDS)


def is_internal_topic(topic: str) -> bool:
    """Internal topics (``__consumer_offsets``, ``__mirror_state`` ...) are never mirrored
    (D-20)."""
    return topic.startswith("__")


# -- patterns ----------------------------------------------------------------------------------


def split_patterns(value: str | None) -> list[str]:
    """The entries of a stored pattern list (comma-separated, blanks dropped)."""
    if not value:
        return []
    return [p for p in (x.strip() for x in value.split(",")) if p]


def join_patterns(patterns: list[str]) -> str:
    return ",".join(patterns)


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def validate_pattern(key: str, pattern: str) -> None:
    """Raise :class:`InvalidConfigError` unless ``pattern`` can be stored in ``key``: a Python
    regular expression, not empty, without a comma (the list separator)."""
    if not pattern or pattern != pattern.strip():
        raise InvalidConfigError(
            key, f"Invalid pattern {pattern!r} for {key}: empty or with surrounding blanks"
        )
    if "," in pattern:
        raise InvalidConfigError(
            key, f"Invalid pattern {pattern!r} for {key}: a pattern cannot contain ','"
        )
    try:
        _compiled(pattern)
    except re.error as e:
        raise InvalidConfigError(
            key, f"Invalid pattern {pattern!r} for {key}: not a regular expression ({e})"
        ) from None


def first_match(topic: str, patterns: list[str]) -> str | None:
    """The first of ``patterns`` (valid regexes) matching the whole of ``topic``, or None."""
    for p in patterns:
        if _compiled(p).fullmatch(topic):
            return p
    return None


# -- values ------------------------------------------------------------------------------------


def _check_bootstrap(text: str) -> None:
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise InvalidConfigError(BOOTSTRAP_SERVERS, f"{BOOTSTRAP_SERVERS} must not be empty")
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(
                BOOTSTRAP_SERVERS,
                f"Invalid value {text!r} for {BOOTSTRAP_SERVERS}: {entry!r} is not host:port",
            )


def _check_int(key: str, text: str, low: int, high: int = 2**31 - 1) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidConfigError(
            key, f"Invalid value {text!r} for configuration {key}: Not a number of type INT"
        ) from None
    if not low <= value <= high:
        raise InvalidConfigError(
            key, f"Invalid value {text} for configuration {key}: must be between {low} and {high}"
        )
    return value


def _check_value(key: str, text: str) -> None:
    if key == BOOTSTRAP_SERVERS:
        _check_bootstrap(text)
    elif key in (INCLUDE, EXCLUDE):
        for p in split_patterns(text):
            validate_pattern(key, p)
    elif key == SOURCE_CLUSTER_ID:
        if not text.strip():
            raise InvalidConfigError(key, f"{key} must not be empty")
    elif key == REPLICATION_FACTOR:
        _check_int(key, text, 1, 32767)
    elif key == SECURITY_PROTOCOL:
        if text.strip().upper() not in CLIENT_SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                key, f"{key}={text} is not supported: {', '.join(CLIENT_SECURITY_PROTOCOLS)}"
            )
    elif key in CLIENT_KEYS:
        _check_int(key, text, CLIENT_KEYS[key][1])
    elif key in SECURITY_KEYS:
        pass  # checked together with the other security keys
    elif key.startswith(("ssl.", "sasl.")) or key == "security.providers":
        raise InvalidConfigError(
            key,
            f"Mirror configuration {key} is not supported by kcore's client; the security "
            "keys are " + ", ".join(sorted(SECURITY_KEYS)),
        )
    else:
        raise InvalidConfigError(
            key,
            f"Unknown cluster mirror configuration {key}: the keys are "
            + ", ".join(sorted([*MIRROR_KEYS, *CLIENT_KEYS, *SECURITY_KEYS])),
        )


def _check_security(configs: Mapping[str, str]) -> None:
    try:
        client_security(security_settings(configs))
    except ClientSecurityError as e:
        key = e.key or next((k for k in sorted(SECURITY_KEYS) if k in str(e)), SECURITY_PROTOCOL)
        raise InvalidConfigError(key, f"Invalid source security settings: {e}") from None


def validate_mirror_configs(
    configs: Mapping[str, str], touched: set[str] | None = None, *, creating: bool = False
) -> None:
    """Check a mirror's whole configuration after a change (``touched``: the keys the request
    set or deleted; None: all of them, as at creation).

    Raises :class:`InvalidConfigError` (INVALID_CONFIG) naming the first bad key: an unknown
    key, security settings kcore's client cannot honour (or stores that do not load), a bad
    value or pattern, a missing
    ``bootstrap.servers``, or ``mirror.source.cluster.id`` changed without
    ``bootstrap.servers`` (D-24: the recorded id is the guard against a re-pointed mirror).
    """
    keys = set(configs) if touched is None else set(touched)
    for key in sorted(keys):
        if key in configs:
            _check_value(key, configs[key])
        elif key not in MIRROR_KEYS and key not in CLIENT_KEYS and key not in SECURITY_KEYS:
            _check_value(key, "")  # an unknown key is refused even for DELETE
    if keys & SECURITY_KEYS:
        _check_security(configs)
    if BOOTSTRAP_SERVERS not in configs:
        raise InvalidConfigError(
            BOOTSTRAP_SERVERS, f"{BOOTSTRAP_SERVERS} is required for a cluster mirror"
        )
    if not creating and SOURCE_CLUSTER_ID in keys and BOOTSTRAP_SERVERS not in keys:
        raise InvalidConfigError(
            SOURCE_CLUSTER_ID,
            f"{SOURCE_CLUSTER_ID} is recorded from the source cluster; it can only be changed "
            f"or removed together with {BOOTSTRAP_SERVERS}",
        )


def security_settings(configs: Mapping[str, str]) -> dict[str, str]:
    """The mirror's source security keys (M-114), as a client config."""
    return {k: v for k, v in configs.items() if k in SECURITY_KEYS}


def sasl_username(configs: Mapping[str, str]) -> str | None:
    """The user the mirror logs in to the source as (None: no SASL, or settings that do not
    parse): the principal ``User:<name>`` the source's ACLs must name (spec M-115)."""
    try:
        sasl = client_security(security_settings(configs)).sasl
    except ClientSecurityError:
        return None
    return None if sasl is None else sasl.username


def client_settings(configs: Mapping[str, str]) -> dict[str, object]:
    """The ``KafkaClient`` keyword arguments a mirror's configs ask for: the timeouts
    (seconds) and the source's TLS context and SASL login (``ssl_context``, ``sasl``): what
    every connection of the mirror to its source is opened with, so no accepted key is
    ignored.

    Raises:
        InvalidConfigError: security settings that no longer load (a store file removed or
            changed since they were accepted): INVALID_CONFIG, for the partition's reason.
    """
    out: dict[str, object] = {}
    for key, (argument, _low) in CLIENT_KEYS.items():
        if key in configs:
            out[argument] = int(configs[key]) / 1000
    try:
        security = client_security(security_settings(configs))
    except ClientSecurityError as e:
        raise InvalidConfigError(
            SECURITY_PROTOCOL, f"The mirror's source security settings do not load: {e}"
        ) from None
    if security.ssl_context is not None:
        out["ssl_context"] = security.ssl_context
    if security.sasl is not None:
        out["sasl"] = security.sasl
    return out
