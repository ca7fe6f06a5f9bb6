"""A mirror's source security configs, without sockets (spec M-114, M-115): which keys are
accepted and which refused, which are secret, what every source connection is opened with, and
the refusal reasons (never a secret in them)."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.log.config import InvalidConfigError
from kcore.metadata import mirror_configs as mc
from kcore.mirror.source_access import (
    SOURCE_PERMISSIONS,
    authorization_reason,
)
from kcore.protocol.errors import ErrorCode
from kcore.security.tls_config import TLS_CONFIG_KEYS

PASSWORD = "s3cret-pw"
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="mirror" password="{PASSWORD}";'
)


def _sasl_ssl(pki) -> dict[str, str]:
    return {
        "bootstrap.servers": "source:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": JAAS,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.cert_pem.bytes().decode(),
    }


def test_a_sasl_ssl_mirror_config_is_accepted_and_opens_tls_with_the_login(pki):
    configs = _sasl_ssl(pki)
    mc.validate_mirror_configs(configs, creating=True)
    options = mc.client_settings({**configs, "request.timeout.ms": "5000"})
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname  # https identification by default
    assert (options["sasl"].mechanism, options["sasl"].username) == ("SCRAM-SHA-256", "mirror")
    assert options["request_timeout"] == 5.0
    assert mc.sasl_username(configs) == "mirror"
    assert PASSWORD not in repr(options["sasl"])


def test_plaintext_configs_open_no_tls_and_no_login():
    options = mc.client_settings({"bootstrap.servers": "a:1"})
    assert "ssl_context" not in options and "sasl" not in options
    assert mc.sasl_username({"bootstrap.servers": "a:1"}) is None


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"sasl.mechanism": "GSSAPI"}, "GSSAPI"),
        ({"sasl.jaas.config": "not jaas"}, "JAAS"),
        ({"ssl.truststore.type": "JKS"}, "PEM"),
        ({"ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----\nxx\n"}, "truststore"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "ssl.truststore.type": "PEM"},
            "set security.protocol=SASL_SSL to use TLS",
        ),
        ({"ssl.engine.factory.class": "x.Y"}, "ssl.engine.factory.class"),
    ],
)
def test_security_settings_kcore_cannot_honour_are_refused_without_the_secret(pki, changes, words):
    configs = {**_sasl_ssl(pki), **changes}
    with pytest.raises(InvalidConfigError) as refused:
        mc.validate_mirror_configs(configs, creating=True)
    assert words in refused.value.message
    assert PASSWORD not in refused.value.message


def test_altering_one_security_key_checks_them_together(pki):
    configs = {**_sasl_ssl(pki), "sasl.mechanism": "OAUTHBEARER"}
    with pytest.raises(InvalidConfigError, match="OAUTHBEARER"):
        mc.validate_mirror_configs(configs, touched={"sasl.mechanism"})
    mc.validate_mirror_configs(_sasl_ssl(pki), touched={"sasl.jaas.config"})


def test_every_password_type_client_key_is_sensitive():
    secret = {k for k, kind, *_ in TLS_CONFIG_KEYS if kind.name == "PASSWORD"} | {
        "sasl.jaas.config"
    }
    assert {"ssl.truststore.certificates", "ssl.keystore.key", "ssl.key.password"} <= secret
    for key in secret:
        assert mc.is_sensitive(key), key
    for key in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "ssl.truststore.type"):
        assert not mc.is_sensitive(key), key


BROKEN = [
    {"sasl.mechanism": "GSSAPI"},
    {"sasl.mechanism": "PLAIN"},  # a ScramLoginModule entry for PLAIN
    {"security.protocol": "SSL"},  # sasl.* without SASL
    {"ssl.truststore.type": "JKS"},
]


@given(
    password=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=12),
    broken=st.sampled_from(BROKEN),
    unterminated=st.booleans(),
)
def test_no_refusal_of_a_mirror_config_carries_its_password(pki, password, broken, unterminated):
    jaas = JAAS.replace(PASSWORD, password)
    if unterminated:
        jaas = jaas[: jaas.index(password) + len(password)]  # the quote never closes
    configs = {**_sasl_ssl(pki), "sasl.jaas.config": jaas, **broken}
    with pytest.raises(InvalidConfigError) as refused:
        mc.validate_mirror_configs(configs, creating=True)
    assert password not in refused.value.message


def test_a_missing_acl_reason_is_the_command_that_adds_it():
    reason = authorization_reason(
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        username="mirror",
        bootstrap="source:9093",
        operation="Read",
        resource="topic",
        name="orders",
    )
    assert reason.endswith(
        "kcore acls --bootstrap-server source:9093 --add --allow-principal User:mirror "
        "--operation Read --topic orders"
    )
    cluster = authorization_reason(
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        username=None,
        bootstrap="s:1",
        operation="Describe",
        resource="cluster",
        name="",
    )
    assert "refused Describe on cluster (CLUSTER_AUTHORIZATION_FAILED)" in cluster
    assert cluster.endswith("--operation Describe --cluster")
    assert {(p.operation, p.resource) for p in SOURCE_PERMISSIONS} >= {
        ("Describe", "topic"),
        ("Read", "topic"),
        ("DescribeConfigs", "topic"),
        ("Describe", "group"),
        ("Describe", "cluster"),
    }


def test_a_truststore_file_gone_since_it_was_accepted_is_invalid_config(pki, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(pki.ca.cert_pem.bytes())
    configs = {**_sasl_ssl(pki), "ssl.truststore.location": str(ca)}
    del configs["ssl.truststore.certificates"]
    mc.validate_mirror_configs(configs, creating=True)
    assert isinstance(mc.client_settings(configs)["ssl_context"], ssl.SSLContext)
    ca.unlink()
    with pytest.raises(InvalidConfigError) as refused:
        mc.client_settings(configs)
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    assert "do not load" in refused.value.message and PASSWORD not in refused.value.message


def test_a_tls_setting_without_tls_is_refused_naming_that_setting(pki):
    # The refusal names the stray key, not security.protocol, so an operator's IncrementalAlter
    # result points at the setting that does nothing.
    configs = {**_sasl_ssl(pki), "security.protocol": "SASL_PLAINTEXT"}
    with pytest.raises(InvalidConfigError) as refused:
        mc.validate_mirror_configs(configs, creating=True)
    assert refused.value.key in {k for k in configs if k.startswith("ssl.")}
