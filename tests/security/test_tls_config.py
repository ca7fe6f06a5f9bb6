"""TLS listener settings: Kafka's ssl.* keys resolved per listener, and what kcore refuses."""

from __future__ import annotations

import ssl

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from kcore.log.config import InvalidConfigError
from kcore.security.tls_config import build_server_context, is_tls_dynamic_key, resolve
from kcore.server.config import BROKER_CONFIGS, BrokerConfig

from .conftest import tls_config


def _settings(pki, listener="MTLS", **extra):
    return resolve(listener, [tls_config(pki, **extra)])


def test_listener_prefix_wins_over_the_plain_key_and_any_case_names_the_listener(pki):
    layer = {
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "LISTENER.NAME.Other.ssl.client.auth": "none",
    }
    assert resolve("MTLS", [layer]).client_auth == "required"
    assert resolve("OTHER", [layer]).client_auth == "none"
    assert resolve("THIRD", [layer]).client_auth == "requested"
    # A later layer (this broker's dynamic configs) wins over an earlier one.
    dynamic = {"listener.name.third.ssl.client.auth": "none"}
    assert resolve("THIRD", [layer, dynamic]).client_auth == "none"


def test_context_serves_the_configured_versions_and_client_auth(pki):
    context = build_server_context(_settings(pki))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    one_way = build_server_context(_settings(pki, "SSL", **{"ssl.protocol": "TLSv1.2"}))
    assert one_way.verify_mode == ssl.CERT_NONE
    assert one_way.maximum_version == ssl.TLSVersion.TLSv1_2


def test_context_takes_iana_cipher_suite_names_for_tls12(pki):
    settings = _settings(
        pki,
        **{
            "ssl.enabled.protocols": "TLSv1.2",
            "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        },
    )
    context = build_server_context(settings)
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]


def test_context_loads_an_encrypted_key_with_ssl_key_password(pki, tmp_path):
    key = serialization.load_pem_private_key(pki.server.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    path = tmp_path / "encrypted.pem"
    path.write_bytes(encrypted + b"".join(p.bytes() for p in pki.server.cert_chain_pems))
    extra = {"listener.name.mtls.ssl.keystore.location": str(path)}
    build_server_context(_settings(pki, **extra, **{"ssl.key.password": "s3cret"}))
    with pytest.raises(InvalidConfigError, match="cannot load"):
        build_server_context(_settings(pki, **extra, **{"ssl.key.password": "wrong"}))


@pytest.mark.parametrize(
    "extra, key, says",
    [
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "JKS stores are not supported"),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type", "PKCS12 stores"),
        ({"ssl.keystore.password": "x"}, "ssl.keystore.password", "cannot be specified with PEM"),
        ({"ssl.truststore.password": "x"}, "ssl.truststore.password", "trust store password"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols", "SSLv3"),
        ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.3"}, "ssl.enabled.protocols", "consecutive"),
        ({"ssl.protocol": "SSL"}, "ssl.protocol", "SSL is not one of"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "ssl.cipher.suites", "TLS 1.3 suites"),
        (
            {
                "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "ssl.enabled.protocols": "TLSv1.3",
            },
            "ssl.cipher.suites",
            "no listed suite is usable",
        ),
        ({"ssl.cipher.suites": "NOPE"}, "ssl.cipher.suites", "no usable suite"),
        ({"ssl.provider": "SunJSSE"}, "ssl.provider", "Java-only"),
        ({"ssl.keymanager.algorithm": "PKIX"}, "ssl.keymanager.algorithm", "Java-only"),
        (
            {"listener.name.mtls.ssl.keystore.location": "/nope.pem"},
            "ssl.keystore.location",
            "/nope",
        ),
        ({"listener.name.mtls.ssl.truststore.location": "/nope.pem"}, "ssl.truststore", "cannot"),
    ],
)
def test_context_refuses_what_kcore_cannot_honour(pki, extra, key, says):
    with pytest.raises(InvalidConfigError) as err:
        build_server_context(_settings(pki, **extra))
    assert says in err.value.message
    if key is not None:
        assert key in err.value.key and "listener MTLS" in err.value.message


def test_context_refuses_a_bad_principal_mapping_rule(pki):
    settings = _settings(pki, "SSL", **{"ssl.principal.mapping.rules": "RULE:x"})
    with pytest.raises(InvalidConfigError, match="Invalid rule"):
        build_server_context(settings)


def test_cipher_suites_of_one_version_leave_the_other_out_as_in_java(pki):
    only12 = build_server_context(
        _settings(pki, **{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    )
    assert only12.maximum_version == ssl.TLSVersion.TLSv1_2
    suites13 = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256"
    only13 = build_server_context(_settings(pki, **{"ssl.cipher.suites": suites13}))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3


def test_context_needs_a_key_pair(pki):
    settings = resolve("OTHER", [{"ssl.keystore.type": "PEM"}])
    with pytest.raises(InvalidConfigError, match="needs a key and certificate"):
        build_server_context(settings)


def test_broker_config_knows_the_ssl_keys_and_hides_the_secrets(pki):
    config = BrokerConfig({**tls_config(pki), "ssl.key.password": "s3cret"})
    assert config.value("ssl.key.password") == "s3cret"
    assert not any(k.startswith("ssl.") for k in config.unknown)
    for name in ("ssl.key.password", "ssl.keystore.key", "ssl.truststore.certificates"):
        assert BROKER_CONFIGS[name].type.name == "PASSWORD"
    with pytest.raises(InvalidConfigError, match="ssl.client.auth"):
        BrokerConfig({"ssl.client.auth": "sometimes"})


def test_dynamic_keys_are_the_listener_prefixed_ssl_keys():
    assert is_tls_dynamic_key("listener.name.mtls.ssl.keystore.location")
    assert is_tls_dynamic_key("listener.name.external.ssl.keystore.key")
    assert not is_tls_dynamic_key("ssl.keystore.location")
    assert not is_tls_dynamic_key("listener.name.mtls.sasl.enabled.mechanisms")
    assert not is_tls_dynamic_key("listener.name.mtls.ssl.unknown")


def test_a_client_certificate_of_the_system_store_is_trusted_without_a_truststore(pki):
    # Kafka: no truststore means the JVM's CAs; kcore: the system's.
    layer = {k: v for k, v in tls_config(pki).items() if "truststore.location" not in k}
    context = build_server_context(resolve("MTLS", [layer]))
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_trustme_makes_certificates_for_the_tests():  # the fixtures' premise
    assert trustme.CA().cert_pem.bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_embedded_cluster_with_a_store_it_cannot_read_raises_before_starting(pki):
    from .conftest import TlsCluster

    cluster = TlsCluster(pki, **{"listener.name.mtls.ssl.truststore.location": "/nope.pem"})
    try:
        with pytest.raises(InvalidConfigError, match="listener MTLS: ssl.truststore.location"):
            cluster.start()
        assert not cluster.brokers
    finally:
        cluster._cleanup()
