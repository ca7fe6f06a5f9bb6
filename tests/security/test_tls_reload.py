"""Certificate reload without restart, as Kafka: a dynamic broker config update of the keystore.

``IncrementalAlterConfigs`` of ``BROKER 1`` with ``listener.name.<l>.ssl.keystore.*``: new
connections get the new certificate, open ones keep going; the same path for a replaced file
reloads it; a keystore that does not load, or whose certificate changes its subject or SANs
without ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``, is refused with INVALID_CONFIG and
the old one is kept; the inline key is never described.
"""

from __future__ import annotations

import socket
import ssl
import time

import pytest
import trio
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType as AdminResourceType

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .conftest import TlsCluster, issue_server_cert
from .test_tls_clients import _api_versions_frame, _client_context

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(pki):
    with TlsCluster(pki) as c:
        yield c


def _alter(cluster, **configs: str):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(AdminResourceType.BROKER, "1", incremental_configs=entries)
    future = admin.incremental_alter_configs([resource])[resource]
    future.result(30)


def _describe(cluster, name: str):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(AdminResourceType.BROKER, "1")
    return admin.describe_configs([resource])[resource].result(30).get(name)


class _Open:
    """A TLS connection kept open across the reload."""

    def __init__(self, port: int, context) -> None:
        self.raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.tls = context.wrap_socket(self.raw, server_hostname="127.0.0.1")

    def peer(self) -> tuple[str, str]:
        """The broker certificate's (CN, serial number)."""
        cert = self.tls.getpeercert()
        return dict(x[0] for x in cert["subject"])["commonName"], cert["serialNumber"]

    def api_versions_ok(self) -> bool:
        self.tls.sendall(_api_versions_frame())
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = self.tls.recv(65536)
            assert chunk, "the connection was closed"
            data += chunk
        return int.from_bytes(data[8:10], "big", signed=True) == 0  # ApiVersions error code

    def close(self) -> None:
        self.tls.close()


def _serial(leaf) -> str:
    """A certificate's serial number as ``getpeercert`` writes it (the same decoder)."""
    with leaf.cert_chain_pems[0].tempfile() as path:
        return ssl._ssl._test_decode_cert(path)["serialNumber"]


def _wait_for(port: int, context, expected: tuple[str, str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        connection = _Open(port, context)
        try:
            if connection.peer() == expected:
                return
        finally:
            connection.close()
        assert time.monotonic() < deadline, f"the listener never served {expected}"
        time.sleep(0.2)


def test_keystore_location_update_reaches_new_connections_only(cluster, pki, tmp_path):
    trusted = _client_context(pki, pki.client("alice"))
    before = _Open(cluster.mtls_port, trusted)
    assert before.peer() == ("broker", _serial(pki.server))
    renewed = issue_server_cert(pki.ca)  # same subject and SANs, a new key and serial
    path = tmp_path / "renewed.pem"
    renewed.private_key_and_cert_chain_pem.write_to_path(str(path))
    _alter(cluster, **{"listener.name.mtls.ssl.keystore.location": str(path)})
    _wait_for(cluster.mtls_port, trusted, ("broker", _serial(renewed)))
    # The connection opened before keeps its session and is served.
    assert before.peer() == ("broker", _serial(pki.server)) and before.api_versions_ok()
    before.close()
    entry = _describe(cluster, "listener.name.mtls.ssl.keystore.location")
    assert entry.value == str(path)

    # Kafka's reload of a file replaced under the same path: the same value set again.
    again = issue_server_cert(pki.ca)
    again.private_key_and_cert_chain_pem.write_to_path(str(path))
    _alter(cluster, **{"listener.name.mtls.ssl.keystore.location": str(path)})
    _wait_for(cluster.mtls_port, trusted, ("broker", _serial(again)))


def test_inline_keystore_update_is_applied_and_never_described(cluster, pki):
    renewed = issue_server_cert(pki.ca)
    chain = "".join(p.bytes().decode() for p in renewed.cert_chain_pems)
    _alter(
        cluster,
        **{
            "listener.name.ssl.ssl.keystore.certificate.chain": chain,
            "listener.name.ssl.ssl.keystore.key": renewed.private_key_pem.bytes().decode(),
        },
    )
    _wait_for(cluster.ssl_port, _client_context(pki, None), ("broker", _serial(renewed)))
    entry = _describe(cluster, "listener.name.ssl.ssl.keystore.key")
    assert entry.value is None and entry.is_sensitive


@pytest.mark.parametrize(
    "hosts, cn, allow, says",
    [
        ((), "broker-2", "ssl.allow.dn.changes", "Keystore DistinguishedName does not match"),
        (("127.0.0.1",), "broker", "ssl.allow.san.changes", "Keystore SubjectAltNames do not"),
    ],
)
def test_a_keystore_changing_the_identity_needs_kafkas_allow_key(
    cluster, pki, tmp_path, hosts, cn, allow, says
):
    other = issue_server_cert(pki.ca, *hosts, cn=cn)
    path = tmp_path / "other.pem"
    other.private_key_and_cert_chain_pem.write_to_path(str(path))
    key = "listener.name.mtls.ssl.keystore.location"
    with pytest.raises(Exception) as err:
        _alter(cluster, **{key: str(path)})
    assert err.value.args[0].name() == "INVALID_CONFIG" and says in err.value.args[0].str()
    _alter(cluster, **{key: str(path), f"listener.name.mtls.{allow}": "true"})
    _wait_for(cluster.mtls_port, _client_context(pki, pki.client("alice")), (cn, _serial(other)))


def test_a_keystore_that_does_not_load_is_refused_and_the_old_one_kept(cluster, pki, tmp_path):
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(Exception) as err:
        _alter(cluster, **{"listener.name.mtls.ssl.keystore.location": str(broken)})
    kafka_error = err.value.args[0]
    assert kafka_error.name() == "INVALID_CONFIG"
    assert "cannot load" in kafka_error.str() and "MTLS" in kafka_error.str()
    assert _describe(cluster, "listener.name.mtls.ssl.keystore.location") is None
    connection = _Open(cluster.mtls_port, _client_context(pki, pki.client("alice")))
    assert connection.peer() == ("broker", _serial(pki.server)) and connection.api_versions_ok()
    connection.close()


def test_tls_keystore_keys_are_refused_at_the_cluster_default_level(cluster, pki):
    # Legacy AlterConfigs through kcore's client: librdkafka refuses the empty broker name.
    A = m.AlterConfigsRequest
    name = "listener.name.mtls.ssl.keystore.location"
    request = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=4,
                resource_name="",
                configs=[A.AlterableConfig(name=name, value=str(pki.server_file))],
            )
        ]
    )

    async def main():
        async with KafkaClient([cluster.bootstrap_servers]) as client:
            return await client.request("any", request, version=2)

    (answer,) = trio.run(main).responses
    assert answer.error_code == ErrorCode.INVALID_CONFIG
    assert answer.error_message == (
        f"Cannot update these configs at default cluster level, broker id must be specified: {name}"
    )
