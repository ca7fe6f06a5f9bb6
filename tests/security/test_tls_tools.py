"""kcore's own tools over TLS: ``security.protocol=SSL`` and Kafka's client ``ssl.*`` keys in
``--producer.config`` / ``--consumer.config`` / ``--command-config``, as processes against the
MTLS listener (a client certificate required), and kcore's client refusing a broker whose
certificate it does not trust."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio

from kcore.client import KafkaClient
from kcore.client.errors import ConnectionFailed
from kcore.security.tls_config import build_client_context

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _tool(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kcore.cli", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=ENV,
    )


def _client_properties(pki, tmp_path: Path, name: str = "alice") -> Path:
    client = pki.client(name)
    keystore = tmp_path / f"{name}-keystore.pem"
    keystore.write_text(Path(client["key"]).read_text() + Path(client["cert"]).read_text())
    path = tmp_path / f"{name}.properties"
    path.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={client['ca']}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore}\n"
    )
    return path


def test_console_tools_and_an_admin_tool_over_mtls(tls_cluster, pki, tmp_path):
    topic = f"tools-{uuid.uuid4().hex[:8]}"
    tls_cluster.create_topic(topic, 1)
    config = str(_client_properties(pki, tmp_path))
    servers = tls_cluster.mtls_servers
    lines = b"".join(b"line %d\n" % i for i in range(20))
    produced = _tool(
        "console-producer", "--bootstrap-server", servers, "--topic", topic,
        "--producer.config", config, stdin=lines,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumed = _tool(
        "console-consumer", "--bootstrap-server", servers, "--topic", topic, "--group", group,
        "--from-beginning", "--max-messages", "20", "--consumer.config", config,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines
    described = _tool(
        "configs", "--bootstrap-server", servers, "--describe", "--entity-type", "topics",
        "--entity-name", topic, "--command-config", config,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert f"Dynamic configs for topic {topic} are:" in described.stdout.decode()
    listed = _tool(
        "topics", "--bootstrap-server", servers, "--list", "--command-config", config
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.decode().split()


def test_tools_refuse_tls_settings_they_cannot_honour_in_one_line(tls_cluster, pki, tmp_path):
    config = tmp_path / "bad.properties"
    config.write_text("security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=x\n")
    result = _tool(
        "configs", "--bootstrap-server", tls_cluster.mtls_servers, "--describe",
        "--entity-type", "brokers", "--entity-name", "1", "--command-config", str(config),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "kcore configs: --command-config: ssl.truststore.type: JKS stores are not "
        "supported; set ssl.truststore.type=PEM and give PEM files or inline PEM (convert a "
        "JKS or PKCS12 store with keytool -importkeystore and openssl)"
    ]


def test_kcore_client_checks_the_brokers_certificate(tls_cluster, pki, tmp_path):
    import trustme

    stranger = trustme.CA()
    other = tmp_path / "other-ca.pem"
    stranger.cert_pem.write_to_path(str(other))

    async def metadata(context):
        async with KafkaClient(
            tls_cluster.ssl_servers, ssl_context=context, connect_timeout=30
        ) as client:
            return await client.refresh_metadata([])

    trusted = build_client_context(
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)}
    )
    assert trio.run(metadata, trusted).brokers
    untrusted = build_client_context(
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(other)}
    )
    with pytest.raises(ConnectionFailed, match="TLS handshake with 127.0.0.1:.* failed"):
        trio.run(metadata, untrusted)


def test_server_with_a_keystore_it_cannot_read_stops_in_one_line(tmp_path):
    from kcore.testing.embedded import free_ports

    ports = free_ports(3)
    result = _tool(
        "server",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{ports[0]},SSL://127.0.0.1:{ports[1]},"
        f"CONTROLLER://127.0.0.1:{ports[2]}",
        "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "--override", "ssl.keystore.location=/etc/kafka/broker.jks",
        "--override", f"log.dirs={tmp_path / 'data'}",
    )  # fmt: skip
    assert result.returncode == 2
    errors = [line for line in result.stderr.decode().splitlines() if not line.startswith("[")]
    assert errors == [
        "kcore server: invalid configuration: INVALID_CONFIG (40): listener SSL: "
        "ssl.keystore.type: JKS stores are not supported; set ssl.keystore.type=PEM and give "
        "PEM files or inline PEM (convert a JKS or PKCS12 store with keytool -importkeystore "
        "and openssl)"
    ]
    assert not (tmp_path / "data").exists()
