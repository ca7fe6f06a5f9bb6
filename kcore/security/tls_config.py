"""TLS listener settings: Kafka's ``ssl.*`` broker keys, per-listener overrides, SSLContexts.

What a TLS listener (security protocol ``SSL``; ``SASL_SSL`` shares it) is served with comes from
Kafka's keys, looked up as Kafka's ``KafkaConfig.valuesWithPrefixOverride`` does: the listener's
``listener.name.<listener>.ssl.<key>`` first (the listener name in any case; Kafka writes it in
lower case), else ``ssl.<key>``, else the default. Layers, later winning: ``server.properties``
and ``--override``, then this broker's dynamic configs (AlterConfigs on ``BROKER <id>``, Kafka's
``DynamicBrokerConfig``; the keystore and truststore keys only with the listener prefix).

Stores are PEM only, Kafka's ``ssl.keystore.type=PEM`` (KIP-651): either inline
(``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``, ``ssl.truststore.certificates``) or a
file (``ssl.keystore.location``: one PEM file holding the private key and the certificate chain;
``ssl.truststore.location``: PEM certificates). An encrypted private key takes
``ssl.key.password``. JKS and PKCS12 stores are refused with an error that says to convert them:
Python's ``ssl`` reads neither. As in Kafka, ``ssl.keystore.password`` and
``ssl.truststore.password`` are refused with PEM stores (only the key has a password), and a
listener without a truststore trusts the system's CAs (Kafka: the JVM's).

:func:`build_server_context` turns one listener's :class:`TlsSettings` into an
``ssl.SSLContext``; it does file I/O (reading the stores) but nothing else.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcore.log.config import ConfigType, InvalidConfigError, OneOf, Range
from kcore.security.principal_mapping import SslPrincipalMapper, rfc2253_name

__all__ = [
    "TLS_CONFIG_KEYS",
    "TLS_PROTOCOLS",
    "CLIENT_SSL_KEYS",
    "TlsSettings",
    "build_client_context",
    "client_context_of",
    "build_server_context",
    "keystore_identity",
    "listener_prefix",
    "resolve",
]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
PEM = "PEM"
_S, _LI, _P, _L = ConfigType.STRING, ConfigType.LIST, ConfigType.PASSWORD, ConfigType.LONG
_B = ConfigType.BOOLEAN

# (name, type, Kafka's default, validator, doc[, kcore-only]): registered into BROKER_CONFIGS
# by kcore/server/config.py. PASSWORD keys are never shown by DescribeConfigs.
TLS_CONFIG_KEYS = (
    ("ssl.keystore.type", _S, "JKS", None, "Keystore format; kcore reads PEM only."),
    ("ssl.keystore.location", _S, None, None, "A PEM file with the private key and the chain."),
    ("ssl.keystore.password", _P, None, None, "JKS/PKCS12 store password (refused with PEM)."),
    ("ssl.key.password", _P, None, None, "Password of an encrypted private key."),
    ("ssl.keystore.certificate.chain", _P, None, None, "The certificate chain, inline PEM."),
    ("ssl.keystore.key", _P, None, None, "The private key, inline PEM (PKCS#8)."),
    ("ssl.truststore.type", _S, "JKS", None, "Truststore format; kcore reads PEM only."),
    ("ssl.truststore.location", _S, None, None, "A PEM file of trusted CA certificates."),
    ("ssl.truststore.password", _P, None, None, "JKS/PKCS12 store password (refused with PEM)."),
    ("ssl.truststore.certificates", _P, None, None, "Trusted CA certificates, inline PEM."),
    ("ssl.client.auth", _S, "none", OneOf(("required", "requested", "none")),
     "Client certificates: required, requested (verified when sent) or none."),
    ("ssl.principal.mapping.rules", _S, "DEFAULT", None,
     "RULE:pattern/replacement/[LU],...,DEFAULT: certificate subject to principal name."),
    ("ssl.enabled.protocols", _LI, ("TLSv1.2", "TLSv1.3"), None, "TLS versions served."),
    ("ssl.protocol", _S, "TLSv1.3", None, "The highest TLS version of the context."),
    ("ssl.cipher.suites", _LI, (), None, "TLS 1.2 cipher suites (IANA or OpenSSL names)."),
    ("ssl.endpoint.identification.algorithm", _S, "https", None,
     "A client key (server hostname check); no effect on a listener, as in Kafka."),
    ("ssl.keymanager.algorithm", _S, "SunX509", None, "Java's; only the default is accepted."),
    ("ssl.trustmanager.algorithm", _S, "PKIX", None, "Java's; only the default is accepted."),
    ("ssl.provider", _S, None, None, "Java's security provider; refused when set."),
    ("ssl.secure.random.implementation", _S, None, None, "Java's; refused when set."),
    ("ssl.engine.factory.class", _S, None, None, "A Java class; refused when set."),
    ("ssl.allow.dn.changes", _B, False, None,
     "A reloaded keystore may change the certificate's subject."),
    ("ssl.allow.san.changes", _B, False, None,
     "A reloaded keystore may change the certificate's subject alternative names."),
    ("kcore.ssl.handshake.timeout.ms", _L, 10000, Range(1),
     "A TLS handshake not done in this time closes the connection.", True),
)  # fmt: skip

_DEFAULTS = {spec[0]: spec[2] for spec in TLS_CONFIG_KEYS}
_TYPES = {spec[0]: spec[1] for spec in TLS_CONFIG_KEYS}
# Java-only knobs: the default (or unset) is what kcore does; any other value it cannot honour.
_JAVA_ONLY = ("ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.provider",
              "ssl.secure.random.implementation", "ssl.engine.factory.class")  # fmt: skip

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_ORDER = list(_VERSIONS)
# ssl.protocol names the SSLContext algorithm; Java's "TLS" and "TLSv1.3" allow every version up
# to 1.3, "TLSv1.2" up to 1.2 and so on.
_PROTOCOL_CAP = {"TLS": "TLSv1.3", **{v: v for v in _VERSIONS}}
# The IANA names Kafka (Java) uses for TLS 1.2 suites -> OpenSSL's.
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
}
# TLS 1.3 suites: Python's ssl cannot restrict them (no SSL_CTX_set_ciphersuites), so a list that
# names some must name every one OpenSSL enables, or kcore would serve suites it was told not to.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                           "TLS_CHACHA20_POLY1305_SHA256"})  # fmt: skip


def listener_prefix(listener: str) -> str:
    """Kafka's ``ListenerName.configPrefix()``: ``listener.name.<lower-case name>.``."""
    return f"listener.name.{listener.lower()}."


@dataclass(frozen=True)
class TlsSettings:
    """One TLS listener's effective ``ssl.*`` values (text, as configured), by key name."""

    listener: str
    values: Mapping[str, str | None]

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def list(self, key: str) -> tuple[str, ...]:
        text = self.values.get(key)
        if text is None:
            return ()
        return tuple(x.strip() for x in text.split(",") if x.strip())

    def flag(self, key: str) -> bool:
        return (self.get(key) or "").strip().lower() == "true"

    @property
    def client_auth(self) -> str:
        return (self.get("ssl.client.auth") or "none").strip()

    @property
    def handshake_timeout_s(self) -> float:
        return int(self.get("kcore.ssl.handshake.timeout.ms") or 10000) / 1000

    def principal_mapper(self) -> SslPrincipalMapper:
        key = "ssl.principal.mapping.rules"
        try:
            return SslPrincipalMapper(self.get(key))
        except ValueError as e:
            raise InvalidConfigError(self._key(key), str(e)) from None

    def _key(self, key: str) -> str:
        return f"{listener_prefix(self.listener)}{key} / {key}"


def _default_text(key: str) -> str | None:
    value = _DEFAULTS[key]
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def resolve(listener: str, layers: Sequence[Mapping[str, str]]) -> TlsSettings:
    """The listener's settings from config layers (key -> text; later layers win), each layer
    read with the listener prefix first."""
    prefix = listener_prefix(listener)
    values: dict[str, str | None] = {key: _default_text(key) for key in _DEFAULTS}
    for layer in layers:
        lowered = {k.lower(): v for k, v in layer.items() if k.lower().startswith(prefix)}
        for key in _DEFAULTS:
            if prefix + key in lowered:
                values[key] = lowered[prefix + key]
            elif key in layer:
                values[key] = layer[key]
    return TlsSettings(listener, values)


def _refuse(settings: TlsSettings, key: str, why: str) -> InvalidConfigError:
    where = f"listener {settings.listener}: " if settings.listener else ""
    return InvalidConfigError(key, f"{where}{key}: {why}")


def _versions(settings: TlsSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    enabled = settings.list("ssl.enabled.protocols")
    unknown = [v for v in enabled if v not in _VERSIONS]
    if unknown or not enabled:
        raise _refuse(
            settings,
            "ssl.enabled.protocols",
            f"{','.join(unknown) or 'empty'}: kcore serves {', '.join(_VERSIONS)}",
        )
    protocol = (settings.get("ssl.protocol") or "TLSv1.3").strip()
    if protocol not in _PROTOCOL_CAP:
        raise _refuse(
            settings, "ssl.protocol", f"{protocol} is not one of TLS, {', '.join(_VERSIONS)}"
        )
    cap = _ORDER.index(_PROTOCOL_CAP[protocol])
    indexes = sorted(_ORDER.index(v) for v in enabled if _ORDER.index(v) <= cap)
    if not indexes:
        raise _refuse(
            settings, "ssl.enabled.protocols", f"no version allowed by ssl.protocol={protocol}"
        )
    if indexes != list(range(indexes[0], indexes[-1] + 1)):
        # OpenSSL takes a range; serving the versions in a gap would go beyond what was asked.
        raise _refuse(settings, "ssl.enabled.protocols", "the versions must be consecutive")
    return _VERSIONS[_ORDER[indexes[0]]], _VERSIONS[_ORDER[indexes[-1]]]


def _ciphers(settings: TlsSettings, context: ssl.SSLContext) -> None:
    """``ssl.cipher.suites`` as Java applies it: a version none of whose suites is listed
    cannot be negotiated, so TLS 1.3 is left out when the list names only TLS 1.2 suites, and
    TLS 1.2 and below when it names only TLS 1.3 ones."""
    suites = settings.list("ssl.cipher.suites")
    if not suites:
        return
    tls13 = {s for s in suites if s in _TLS13_SUITES}
    enabled13 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"}
    if tls13 and tls13 != enabled13:
        raise _refuse(
            settings,
            "ssl.cipher.suites",
            "TLS 1.3 suites cannot be chosen one by one here: list all of "
            f"{', '.join(sorted(enabled13))}, or none (TLS 1.3 is then not served)",
        )
    legacy = [_IANA_TO_OPENSSL.get(s, s) for s in suites if s not in _TLS13_SUITES]
    if not tls13:
        context.maximum_version = min(context.maximum_version, ssl.TLSVersion.TLSv1_2)
    if not legacy:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    else:
        try:
            context.set_ciphers(":".join(legacy))
        except ssl.SSLError:
            raise _refuse(
                settings, "ssl.cipher.suites", f"no usable suite in {','.join(legacy)}"
            ) from None
    if context.minimum_version > context.maximum_version:
        raise _refuse(
            settings, "ssl.cipher.suites", "no listed suite is usable with ssl.enabled.protocols"
        )


def _check_store_types(settings: TlsSettings) -> None:
    for store in ("keystore", "truststore"):
        key = f"ssl.{store}.type"
        kind = (settings.get(key) or "JKS").strip().upper()
        has_store = any(
            settings.get(k)
            for k in (f"ssl.{store}.location", "ssl.keystore.key", "ssl.truststore.certificates")
            if k.startswith(f"ssl.{store}.")
        )
        if has_store and kind != PEM:
            raise _refuse(
                settings,
                key,
                f"{kind} stores are not supported; set {key}=PEM and give PEM files or inline "
                "PEM (convert a JKS or PKCS12 store with keytool -importkeystore and openssl)",
            )
        if has_store and settings.get(f"ssl.{store}.password"):
            what = "key store" if store == "keystore" else "trust store"
            raise _refuse(
                settings,
                f"ssl.{store}.password",
                f"SSL {what} password cannot be specified with PEM format, only key password "
                "may be specified",
            )


def _load_key_pair(settings: TlsSettings, context: ssl.SSLContext, required: bool = True) -> None:
    password = settings.get("ssl.key.password") or None
    location = settings.get("ssl.keystore.location")
    chain, key = settings.get("ssl.keystore.certificate.chain"), settings.get("ssl.keystore.key")
    if location and (chain or key):
        raise _refuse(
            settings, "ssl.keystore.location", "give either a location or inline PEM, not both"
        )
    if location:
        try:
            context.load_cert_chain(location, password=password)
        except (OSError, ssl.SSLError) as e:
            raise _refuse(
                settings, "ssl.keystore.location", f"cannot load {location}: {e}"
            ) from None
        return
    if not (chain or key) and not required:
        return
    if not (chain and key):
        raise _refuse(
            settings,
            "ssl.keystore.location",
            ("a TLS listener needs a key and certificate: " if required else "give ")
            + "ssl.keystore.location, or ssl.keystore.certificate.chain with ssl.keystore.key",
        )
    # ssl reads key pairs from files only: a private file, removed at once.
    fd, path = tempfile.mkstemp(prefix="kcore-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    except (OSError, ssl.SSLError) as e:
        raise _refuse(
            settings, "ssl.keystore.key", f"cannot load the inline key pair: {e}"
        ) from None
    finally:
        os.unlink(path)


def _load_trust(
    settings: TlsSettings, context: ssl.SSLContext, purpose: ssl.Purpose = ssl.Purpose.CLIENT_AUTH
) -> None:
    location = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        if inline:
            context.load_verify_locations(cadata=inline)
        if not (location or inline):
            context.load_default_certs(purpose)
    except (OSError, ssl.SSLError) as e:
        key = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise _refuse(settings, key, f"cannot load the trusted certificates: {e}") from None


def _check_common(settings: TlsSettings) -> None:
    for key in _JAVA_ONLY:
        value = settings.get(key)
        if value is not None and value != _default_text(key):
            raise _refuse(settings, key, f"{value}: a Java-only setting kcore cannot honour")
    _check_store_types(settings)


_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\s.*?-----END CERTIFICATE-----", re.DOTALL
)


def keystore_identity(settings: TlsSettings) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(subject in RFC 2253 form, sorted subject alternative names) of the keystore's leaf
    certificate, or None when there is none to read. Python's ``ssl`` has no public decoder
    of a certificate it did not receive: ``_ssl._test_decode_cert`` (the one ``getpeercert``
    uses, on a file) reads it."""
    location = settings.get("ssl.keystore.location")
    try:
        if location:
            with open(location) as f:
                text = f.read()
        else:
            text = settings.get("ssl.keystore.certificate.chain") or ""
    except OSError:
        return None
    match = _PEM_CERTIFICATE.search(text)
    if match is None:
        return None
    fd, path = tempfile.mkstemp(prefix="kcore-cert-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(match.group(0) + "\n")
        decoded = ssl._ssl._test_decode_cert(path)
    except (OSError, ssl.SSLError):
        return None
    finally:
        os.unlink(path)
    sans = tuple(sorted(tuple(x) for x in decoded.get("subjectAltName", ())))
    return rfc2253_name(decoded.get("subject", ())), sans


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """An SSLContext serving ``settings``.

    Raises:
        InvalidConfigError: a value kcore cannot honour, or a store that does not load.
    """
    _check_common(settings)
    client_auth = settings.client_auth
    OneOf(("required", "requested", "none")).ensure_valid("ssl.client.auth", client_auth)
    settings.principal_mapper()  # a bad rule fails at startup, not at the first client
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # No renegotiation (TLS 1.2; 1.3 has none): a response write never waits for a read, and
    # a client cannot make the broker redo handshakes (Kafka's JSSE refuses client-initiated
    # ones too).
    context.options |= ssl.OP_NO_RENEGOTIATION
    low, high = _versions(settings)
    context.minimum_version, context.maximum_version = low, high
    _ciphers(settings, context)
    _load_key_pair(settings, context)
    context.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
        "none": ssl.CERT_NONE,
    }[client_auth]
    if client_auth != "none":
        _load_trust(settings, context)
    return context


# The ssl.* keys of a Kafka client (producer, consumer, admin) that kcore's client reads.
CLIENT_SSL_KEYS = frozenset(k for k in _DEFAULTS if k.startswith("ssl.")) - {
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
}


def build_client_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The SSLContext of a client with Kafka's client ``ssl.*`` settings (``security.protocol
    =SSL``): the broker's certificate verified against the truststore (else the system's CAs)
    and, with ``ssl.endpoint.identification.algorithm=https`` (the default), its host name; a
    client certificate from the keystore when one is given.

    Raises:
        InvalidConfigError: a value kcore cannot honour, or a store that does not load.
    """
    unknown = sorted(k for k in props if k.startswith("ssl.") and k not in CLIENT_SSL_KEYS)
    if unknown:
        raise InvalidConfigError(unknown[0], f"{unknown[0]} is not a client setting")
    return client_context_of(resolve("", [props]))


def client_context_of(settings: TlsSettings) -> ssl.SSLContext:
    """The client SSLContext of resolved settings: a client's own (:func:`build_client_context`)
    or a listener's, for the node's connections to that listener of its own cluster (Kafka's
    inter-broker and controller clients use the listener's truststore, and its keystore as the
    client certificate)."""
    _check_common(settings)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version, context.maximum_version = _versions(settings)
    _ciphers(settings, context)
    algorithm = (settings.get("ssl.endpoint.identification.algorithm") or "").strip()
    if algorithm not in ("https", ""):
        raise _refuse(
            settings, "ssl.endpoint.identification.algorithm", f"{algorithm}: https or empty"
        )
    context.check_hostname = algorithm == "https"
    _load_trust(settings, context, ssl.Purpose.SERVER_AUTH)
    _load_key_pair(settings, context, required=False)
    return context


def is_tls_dynamic_key(key: str) -> bool:
    """Whether a BROKER-resource dynamic config key is a listener-prefixed ``ssl.*`` key kcore
    applies at run time (``listener.name.<l>.ssl.keystore.location`` and friends)."""
    if not key.lower().startswith("listener.name."):
        return False
    rest = key[len("listener.name.") :]
    _, dot, name = rest.partition(".")
    return bool(dot) and name in _DEFAULTS and name.startswith("ssl.")


def tls_dynamic_key_type(key: str) -> ConfigType:
    return _TYPES[key[len("listener.name.") :].partition(".")[2]]
