"""admin.listeners and the rules around it: parsed as Kafka parses listeners, and an endpoint
that would be served other than asked (no auth off loopback, TLS keys with nothing to use them)
refused at startup with the key named."""

from __future__ import annotations

import pytest

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
