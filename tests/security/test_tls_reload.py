"""Certificate reload without restart, as Kafka: a dynamic broker config update of the keystore.

``IncrementalAlterConfigs`` of ``BROKER 1`` with ``listener.name.<l>.ssl.keystore.*``: new
connections get the new certificate, open ones keep going; the same path for a replaced file
reloads it; a keystore that does not load is refused with INVALID_CONFIG and the old one is
kept; the inline key is never described.
"""

from __future__ import annotations

import socket
import time

import pytest
import trio
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType as AdminResourceType

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode

from .conftest import TlsCluster
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

    def peer_cn(self) -> str:
        return dict(x[0] for x in self.tls.getpeercert()["subject"])["commonName"]

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


def _wait_for_cn(port: int, context, cn: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        connection = _Open(port, context)
        try:
            if connection.peer_cn() == cn:
                return
        finally:
            connection.close()
        assert time.monotonic() < deadline, f"the listener never served {cn}"
        time.sleep(0.2)


def test_keystore_location_update_reaches_new_connections_only(cluster, pki, tmp_path):
    trusted = _client_context(pki, pki.client("alice"))
    before = _Open(cluster.mtls_port, trusted)
    assert before.peer_cn() == "broker"
    renewed = pki.ca.issue_cert("127.0.0.1", common_name="broker-renewed")
    path = tmp_path / "renewed.pem"
    renewed.private_key_and_cert_chain_pem.write_to_path(str(path))
    _alter(cluster, **{"listener.name.mtls.ssl.keystore.location": str(path)})
    _wait_for_cn(cluster.mtls_port, trusted, "broker-renewed")
    # The connection opened before keeps its session and is served.
    assert before.peer_cn() == "broker" and before.api_versions_ok()
    before.close()
    entry = _describe(cluster, "listener.name.mtls.ssl.keystore.location")
    assert entry.value == str(path)

    # Kafka's reload of a file replaced under the same path: the same value set again.
    again = pki.ca.issue_cert("127.0.0.1", common_name="broker-again")
    again.private_key_and_cert_chain_pem.write_to_path(str(path))
    _alter(cluster, **{"listener.name.mtls.ssl.keystore.location": str(path)})
    _wait_for_cn(cluster.mtls_port, trusted, "broker-again")


def test_inline_keystore_update_is_applied_and_never_described(cluster, pki):
    renewed = pki.ca.issue_cert("127.0.0.1", common_name="broker-inline")
    chain = "".join(p.bytes().decode() for p in renewed.cert_chain_pems)
    _alter(
        cluster,
        **{
            "listener.name.ssl.ssl.keystore.certificate.chain": chain,
            "listener.name.ssl.ssl.keystore.key": renewed.private_key_pem.bytes().decode(),
        },
    )
    _wait_for_cn(cluster.ssl_port, _client_context(pki, None), "broker-inline")
    entry = _describe(cluster, "listener.name.ssl.ssl.keystore.key")
    assert entry.value is None and entry.is_sensitive


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
    assert connection.peer_cn() == "broker" and connection.api_versions_ok()
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
