"""admin.listeners and the rules around it: parsed as Kafka parses listeners, and an endpoint
that would be served other than asked (no auth off loopback, TLS keys with nothing to use them)
refused at startup with the key named."""

from __future__ import annotations

import pytest
import trustme

from kcore.admin.config import AdminListener
from kcore.log.config import InvalidConfigError
from kcore.server.config import BrokerConfig


def test_admin_listeners_parse_http_https_and_ipv6(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("t0ken\n")
    config = BrokerConfig(
        {
            "admin.listeners": "http://127.0.0.1:9644, HTTPS://[::1]:9645,http://0.0.0.0:0",
            "admin.auth.token.file": str(tokens),
            "admin.ssl.certfile": "cert.pem",
            "admin.ssl.keyfile": "key.pem",
        }
    )
    assert config.admin_listeners == (
        AdminListener("http", "127.0.0.1", 9644),
        AdminListener("https", "::1", 9645),
        AdminListener("http", "0.0.0.0", 0),
    )
    assert [x.bind for x in config.admin_listeners] == [
        "127.0.0.1:9644",
        "[::1]:9645",
        "0.0.0.0:0",
    ]
    assert str(config.admin_listeners[1]) == "https://[::1]:9645"


def test_admin_endpoint_is_off_by_default():
    assert BrokerConfig({}).admin_listeners == ()


@pytest.mark.parametrize(
    "text", ["127.0.0.1:9644", "tcp://127.0.0.1:9644", "http://127.0.0.1", "http://h:70000"]
)
def test_malformed_admin_listener_is_refused(text):
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"admin.listeners": text})
    assert err.value.key == "admin.listeners"
    assert "http://HOST:PORT" in err.value.message


def test_two_admin_listeners_on_one_port_are_refused():
    with pytest.raises(InvalidConfigError, match="its own port"):
        BrokerConfig({"admin.listeners": "http://127.0.0.1:9644,http://localhost:9644"})


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "10.1.2.3", "admin.example.com"])
def test_unauthenticated_admin_listener_must_be_loopback(host):
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"admin.listeners": f"http://{host}:9644"})
    assert err.value.key == "admin.listeners"
    assert "admin.auth.token.file is not set" in err.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "[::1]", "localhost"])
def test_unauthenticated_loopback_admin_listener_is_allowed(host):
    assert BrokerConfig({"admin.listeners": f"http://{host}:9644"}).admin_listeners[0].port == 9644


def test_https_admin_listener_needs_its_certificate_and_key():
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig({"admin.listeners": "https://127.0.0.1:9644"})
    assert err.value.key == "admin.ssl.certfile"
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(
            {"admin.listeners": "https://127.0.0.1:9644", "admin.ssl.certfile": "cert.pem"}
        )
    assert err.value.key == "admin.ssl.keyfile"


def test_admin_tls_keys_without_an_https_listener_are_refused():
    with pytest.raises(InvalidConfigError, match="no https:// listener"):
        BrokerConfig({"admin.listeners": "http://127.0.0.1:9644", "admin.ssl.certfile": "c.pem"})


def _mtls(tmp_path, **extra: str) -> dict[str, str]:
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    return {
        "admin.listeners": "https://0.0.0.0:9644",
        "admin.ssl.certfile": "cert.pem",
        "admin.ssl.keyfile": "key.pem",
        "admin.ssl.client.auth": "required",
        "admin.ssl.truststore.location": str(ca),
        **extra,
    }


def test_required_client_certificates_authenticate_an_exposed_https_listener(tmp_path):
    config = BrokerConfig(_mtls(tmp_path))
    assert config.admin_ssl_client_auth == "required"
    # requested lets a client in without a certificate: the loopback rule holds again.
    with pytest.raises(InvalidConfigError, match="not a loopback address") as err:
        BrokerConfig(_mtls(tmp_path, **{"admin.ssl.client.auth": "requested"}))
    assert err.value.key == "admin.listeners"
    # and so does an http:// listener beside it.
    with pytest.raises(InvalidConfigError, match="http://0.0.0.0:9645"):
        BrokerConfig(
            _mtls(tmp_path, **{"admin.listeners": "https://0.0.0.0:9644,http://0.0.0.0:9645"})
        )


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"admin.ssl.client.auth": "none"}, "admin.ssl.truststore.location", "client.auth is none"),
        ({"admin.ssl.truststore.location": ""}, "admin.ssl.truststore.location", "needs"),
        ({"admin.ssl.truststore.location": "/nonexistent.pem"}, "admin.ssl.truststore.location",
         "cannot load"),
        ({"admin.listeners": "http://127.0.0.1:9644", "admin.ssl.certfile": "",
          "admin.ssl.keyfile": ""}, "admin.ssl.client.auth", "no https:// listener"),
        ({"admin.ssl.client.auth": "sometimes"}, "admin.ssl.client.auth", "sometimes"),
        ({"ssl.principal.mapping.rules": "RULE:^CN=(.*$/$1/"}, "ssl.principal.mapping.rules",
         ""),
    ],
)  # fmt: skip
def test_client_certificate_settings_kcore_cannot_honour_are_refused(
    tmp_path, change, key, message
):
    loopback = {"admin.listeners": "https://127.0.0.1:9644"}
    values = {k: v for k, v in {**_mtls(tmp_path), **loopback, **change}.items() if v != ""}
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(values)
    assert err.value.key == key
    assert message in err.value.message
