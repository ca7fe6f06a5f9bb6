"""TLS fixtures: certificates made by trustme, and a kcore with two TLS listeners.

The cluster (:func:`tls_cluster`) serves, beside its PLAINTEXT listener,

* ``SSL``: one-way TLS (``ssl.client.auth=none``), the key pair given inline
  (``listener.name.ssl.ssl.keystore.certificate.chain`` / ``.key``);
* ``MTLS``: mutual TLS (``required``), the key pair from a PEM file, the truststore a PEM file,
  principals mapped by ``RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/L`` (``User:alice@eng``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_ports

MAPPING_RULES = "RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/L,DEFAULT"


@dataclass
class Pki:
    ca: trustme.CA
    dir: Path
    ca_file: Path  # the CA that signed the broker and the clients
    server_file: Path  # the broker's key and chain, one PEM file
    server: trustme.LeafCert

    def client(self, name: str, unit: str = "eng", ca: trustme.CA | None = None) -> dict:
        """A client certificate (CN=name,OU=unit,O=kcore-tests), as files."""
        leaf = (ca or self.ca).issue_cert(
            f"{name}.clients.test",
            common_name=name,
            organization_unit_name=unit,
            organization_name="kcore-tests",
        )
        cert, key = self.dir / f"{name}-{unit}.crt", self.dir / f"{name}-{unit}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return {"cert": str(cert), "key": str(key), "ca": str(self.ca_file)}


def issue_server_cert(ca: trustme.CA, *hosts: str, cn: str = "broker") -> trustme.LeafCert:
    """The broker's certificate; issued again with the same arguments it has the same subject
    and SANs (trustme otherwise puts a random OU in each)."""
    return ca.issue_cert(
        *(hosts or ("127.0.0.1", "localhost")), common_name=cn, organization_unit_name="brokers"
    )


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA(organization_name="kcore-tests CA")
    server = issue_server_cert(ca)
    ca_file, server_file = directory / "ca.pem", directory / "server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server.private_key_and_cert_chain_pem.write_to_path(str(server_file))
    return Pki(ca, directory, ca_file, server_file, server)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_config(pki: Pki, **extra: str) -> dict[str, str]:
    chain = "".join(p.bytes().decode() for p in pki.server.cert_chain_pems)
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.keystore.certificate.chain": chain,
        "listener.name.ssl.ssl.keystore.key": pki.server.private_key_pem.bytes().decode(),
        "listener.name.mtls.ssl.keystore.location": str(pki.server_file),
        "listener.name.mtls.ssl.truststore.location": str(pki.ca_file),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": MAPPING_RULES,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        **extra,
    }


class TlsCluster(EmbeddedCluster):
    """An EmbeddedCluster with the SSL and MTLS listeners of node 1."""

    def __init__(self, pki: Pki, **extra: str) -> None:
        self.ssl_port, self.mtls_port = free_ports(2)
        super().__init__(
            config=tls_config(pki, **extra),
            extra_listeners=(
                f"SSL://127.0.0.1:{self.ssl_port}",
                f"MTLS://127.0.0.1:{self.mtls_port}",
            ),
        )

    @property
    def ssl_servers(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def mtls_servers(self) -> str:
        return f"127.0.0.1:{self.mtls_port}"


@pytest.fixture(scope="module")
def tls_cluster(pki):
    with TlsCluster(pki) as cluster:
        yield cluster
