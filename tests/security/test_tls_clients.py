"""Real clients over TLS and mutual TLS: confluent-kafka, kafka-python, aiokafka.

Against :class:`~tests.security.conftest.TlsCluster` (listeners SSL: one-way TLS; MTLS: client
certificates required). Each client produces, consumes in a group; confluent-kafka also runs a
transaction. Refused: a client certificate from another CA, no certificate on MTLS, a
PLAINTEXT client on a TLS port; the broker keeps serving the others.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid

import pytest
import trustme
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kcore.protocol import decode_response, encode_request
from kcore.protocol import messages as m

pytestmark = pytest.mark.timeout(180)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _confluent(cluster, pki, mutual: bool, **extra) -> dict:
    config = {
        "bootstrap.servers": cluster.mtls_servers if mutual else cluster.ssl_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_file),
        **extra,
    }
    if mutual:
        client = pki.client("alice")
        config["ssl.certificate.location"] = client["cert"]
        config["ssl.key.location"] = client["key"]
    return config


def _consume(config: dict, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    consumer = Consumer({**config, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("mutual", [False, True], ids=["ssl", "mtls"])
def test_confluent_produces_and_consumes_in_a_group_over_tls(tls_cluster, pki, mutual):
    topic = _name("confluent")
    tls_cluster.create_topic(topic, 2)
    producer = Producer(_confluent(tls_cluster, pki, mutual))
    values = [f"v{i}".encode() * 50 for i in range(200)]
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(60) == 0
    group = _confluent(tls_cluster, pki, mutual, **{"group.id": _name("g")})
    assert sorted(_consume(group, topic, len(values))) == sorted(values)


def test_confluent_admin_and_transaction_over_mtls(tls_cluster, pki):
    admin = AdminClient(_confluent(tls_cluster, pki, True))
    assert admin.list_topics(timeout=30).brokers  # Metadata answered with the MTLS endpoint
    topic = _name("txn")
    tls_cluster.create_topic(topic, 1)
    producer = Producer(_confluent(tls_cluster, pki, True, **{"transactional.id": _name("t")}))
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"committed-%d" % i)
    producer.commit_transaction(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.abort_transaction(60)
    group = _confluent(
        tls_cluster,
        pki,
        True,
        **{"group.id": _name("g"), "isolation.level": "read_committed"},
    )
    got = _consume(group, topic, 10)
    assert got == [b"committed-%d" % i for i in range(10)]


@pytest.mark.parametrize("mutual", [False, True], ids=["ssl", "mtls"])
def test_kafka_python_produces_and_consumes_in_a_group_over_tls(tls_cluster, pki, mutual):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _name("kafka-python")
    tls_cluster.create_topic(topic, 1)
    client = pki.client("alice")
    ssl_config = {
        "bootstrap_servers": tls_cluster.mtls_servers if mutual else tls_cluster.ssl_servers,
        "security_protocol": "SSL",
        "ssl_cafile": client["ca"],
        "ssl_check_hostname": True,
    }
    if mutual:
        ssl_config |= {"ssl_certfile": client["cert"], "ssl_keyfile": client["key"]}
    producer = KafkaProducer(**ssl_config)
    for i in range(50):
        producer.send(topic, b"kp-%d" % i)
    producer.flush(60)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=_name("g"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=30000,
        **ssl_config,
    )
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 50:
            break
    consumer.commit()
    consumer.close()
    assert got == [b"kp-%d" % i for i in range(50)]


@pytest.mark.parametrize("mutual", [False, True], ids=["ssl", "mtls"])
def test_aiokafka_produces_and_consumes_in_a_group_over_tls(tls_cluster, pki, mutual):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _name("aiokafka")
    tls_cluster.create_topic(topic, 1)
    client = pki.client("alice")

    async def main():
        context = create_ssl_context(
            cafile=client["ca"],
            certfile=client["cert"] if mutual else None,
            keyfile=client["key"] if mutual else None,
        )
        common = {
            "bootstrap_servers": tls_cluster.mtls_servers if mutual else tls_cluster.ssl_servers,
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic, b"aio-%d" % i)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, group_id=_name("g"), auto_offset_reset="earliest", **common
        )
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(60):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) == 50:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(main()) == [b"aio-%d" % i for i in range(50)]


def _api_versions_frame() -> bytes:
    body = m.ApiVersionsRequest(client_software_name="tls-test", client_software_version="1")
    return encode_request(18, 3, 7, "tls-test", body)


def _tls_api_versions(port: int, context: ssl.SSLContext) -> m.ApiVersionsResponse:
    """ApiVersions over a TLS connection made with ``context``; raises what the broker's
    refusal raises (ssl.SSLError, ConnectionError, EOFError)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(_api_versions_frame())
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = tls.recv(65536)
            if not chunk:
                raise EOFError("the broker closed the connection")
            data += chunk
        return decode_response(18, 3, data[4:])[1]


def _client_context(pki, client: dict | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if client is not None:
        context.load_cert_chain(client["cert"], client["key"])
    return context


def test_mtls_serves_a_certificate_of_the_trusted_ca(tls_cluster, pki):
    response = _tls_api_versions(tls_cluster.mtls_port, _client_context(pki, pki.client("bob")))
    assert response.error_code == 0 and response.api_keys


@pytest.mark.parametrize("which", ["another CA", "no certificate"])
def test_mtls_refuses_a_client_without_a_trusted_certificate(tls_cluster, pki, which):
    client = pki.client("mallory", ca=trustme.CA()) if which == "another CA" else None
    with pytest.raises((ssl.SSLError, ConnectionError, EOFError)):
        _tls_api_versions(tls_cluster.mtls_port, _client_context(pki, client))
    # The broker is unaffected: a trusted client is served at once.
    trusted = _client_context(pki, pki.client("alice"))
    assert _tls_api_versions(tls_cluster.mtls_port, trusted).error_code == 0


def test_confluent_with_a_certificate_from_another_ca_gets_no_metadata(tls_cluster, pki):
    stranger = pki.client("mallory", unit="ops", ca=trustme.CA())
    config = _confluent(tls_cluster, pki, True)
    config |= {"ssl.certificate.location": stranger["cert"], "ssl.key.location": stranger["key"]}
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=5)


@pytest.mark.parametrize("listener", ["ssl_port", "mtls_port"])
def test_plaintext_client_on_a_tls_port_is_refused_and_the_broker_unaffected(
    tls_cluster, pki, listener
):
    port = getattr(tls_cluster, listener)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(_api_versions_frame())
        answer = b""
        try:
            while chunk := raw.recv(65536):
                answer += chunk
        except ConnectionError:
            pass
    # No Kafka response: at most a TLS alert record (content type 21), then the close.
    assert answer == b"" or answer[0] == 21
    assert _tls_api_versions(tls_cluster.ssl_port, _client_context(pki, None)).error_code == 0
    config = {"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": 3000}
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=5)


def test_large_requests_and_responses_cross_tls_whole(tls_cluster, pki):
    # Produce requests of several MiB (read into the frame's buffer record by record) and
    # fetch responses of file slices (gathered, then encrypted in pieces) keep every byte.
    topic = _name("large")
    tls_cluster.create_topic(topic, 1)
    producer = Producer(
        _confluent(tls_cluster, pki, False, **{"linger.ms": 50, "batch.size": 4_000_000})
    )
    values = [bytes([i]) * 700_000 + uuid.uuid4().bytes for i in range(12)]
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(60) == 0
    group = _confluent(tls_cluster, pki, False, **{"group.id": _name("g")})
    assert _consume(group, topic, len(values)) == values
