"""SASL_SSL: SASL authentication inside TLS, the two halves built separately (the TLS channel
in kcore/security/tls_transport.py, the SASL authenticator in kcore/security/authenticator.py)
meeting on one listener. confluent-kafka, kafka-python and aiokafka produce and consume in
groups (confluent also runs a transaction) with PLAIN and both SCRAMs; a wrong password and a
plaintext client are refused; kcore's own tools connect with TLS and SASL from one
--command-config."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_port
from tests.security.sasl_cluster import (
    MECHANISMS,
    PLAIN_USERS,
    plain_jaas,
    transactional_round_trip,
)
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(240)

SCRAM_USER = ("carol", "carol-secret")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class SaslSslCluster(EmbeddedCluster):
    """Node 1 with a SASL_SSL listener beside EmbeddedCluster's PLAINTEXT and CONTROLLER
    (``config``: more broker properties)."""

    def __init__(self, pki, config=None) -> None:
        self.sasl_ssl_port = free_port()
        chain = "".join(p.bytes().decode() for p in pki.server.cert_chain_pems)
        super().__init__(
            config={
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
                "CONTROLLER:PLAINTEXT",
                "ssl.keystore.type": "PEM",
                "listener.name.sasl_ssl.ssl.keystore.certificate.chain": chain,
                "listener.name.sasl_ssl.ssl.keystore.key": pki.server.private_key_pem.bytes().decode(),
                "sasl.enabled.mechanisms": ",".join(MECHANISMS),
                "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
                "connection.failed.authentication.delay.ms": "50",
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.num.partitions": "3",
                **(config or {}),
            },
            extra_listeners=(f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}",),
        )

    @property
    def sasl_ssl_servers(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"


def confluent_conf(cluster, pki, mechanism: str, user: str, password: str) -> dict:
    return {
        "bootstrap.servers": cluster.sasl_ssl_servers,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca_file),
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _login(mechanism: str) -> tuple[str, str]:
    return ("alice", PLAIN_USERS["alice"]) if mechanism == "PLAIN" else SCRAM_USER


@pytest.fixture(scope="module")
def cluster(pki):
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    with SaslSslCluster(pki) as c:
        # The SCRAM user is made over SASL_SSL itself, as admin with PLAIN.
        admin = AdminClient(confluent_conf(c, pki, "PLAIN", "admin", PLAIN_USERS["admin"]))
        upserts = [
            UserScramCredentialUpsertion(
                SCRAM_USER[0], ScramCredentialInfo(mech, 8192), SCRAM_USER[1].encode()
            )
            for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while len(c.broker.metadata_image.scram.credentials) < 2:
            assert time.monotonic() < deadline, "the SCRAM credentials never reached the image"
            time.sleep(0.05)
        yield c


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_over_sasl_ssl_produces_consumes_and_commits_a_transaction(
    cluster, pki, mechanism
):
    transactional_round_trip(confluent_conf(cluster, pki, mechanism, *_login(mechanism)), 30)


def test_kafka_python_and_aiokafka_over_sasl_ssl_with_scram(cluster, pki):
    import ssl

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer

    context = ssl.create_default_context(cafile=str(pki.ca_file))
    auth = dict(
        bootstrap_servers=cluster.sasl_ssl_servers,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=SCRAM_USER[0],
        sasl_plain_password=SCRAM_USER[1],
    )
    topic = _name("kp")
    producer = KafkaProducer(**auth, ssl_context=context, acks="all")
    for i in range(10):
        producer.send(topic, key=b"k%d" % i, value=b"kp%d" % i).get(timeout=30)
    producer.close()

    async def aio() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(**auth, ssl_context=context)
        await producer.start()
        try:
            for i in range(10, 20):
                await producer.send_and_wait(topic, key=b"k%d" % i, value=b"kp%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, **auth, ssl_context=context, group_id=_name("ag"), auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            got = []
            while len(got) < 20:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [(r.key, r.value) for records in batch.values() for r in records]
            return got
        finally:
            await consumer.stop()

    expected = [(b"k%d" % i, b"kp%d" % i) for i in range(20)]
    assert asyncio.run(asyncio.wait_for(aio(), 90)) == expected
    consumer = KafkaConsumer(
        topic,
        **auth,
        ssl_context=context,
        group_id=_name("kg"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    try:
        got = []
        for record in consumer:
            got.append((record.key, record.value))
            if len(got) == 20:
                break
        assert got == expected
    finally:
        consumer.close()


def test_sasl_ssl_refuses_a_wrong_password_and_a_plaintext_client(cluster, pki):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors = []
    conf = confluent_conf(cluster, pki, "SCRAM-SHA-512", SCRAM_USER[0], "nope")
    wrong = AdminClient({**conf, "error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017 - no metadata without authentication
        wrong.list_topics(timeout=10)
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        wrong.poll(0.2)
    auth_error = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "Authentication failed" in auth_error.str(), auth_error.str()
    plain = AdminClient(
        {
            "bootstrap.servers": cluster.sasl_ssl_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": PLAIN_USERS["alice"],
            "socket.timeout.ms": 5000,
        }
    )
    with pytest.raises(Exception):  # noqa: B017 - librdkafka's error for a TLS peer varies
        plain.list_topics(timeout=8)
    # The broker is unaffected: a correct client is served right after.
    good = AdminClient(confluent_conf(cluster, pki, "SCRAM-SHA-256", *SCRAM_USER))
    assert good.list_topics(timeout=30).brokers


def test_kcore_tools_connect_with_tls_and_sasl_from_one_command_config(cluster, pki, tmp_path):
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca_file}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{SCRAM_USER[0]}" password="{SCRAM_USER[1]}";\n'
    )
    B = ("--bootstrap-server", cluster.sasl_ssl_servers, "--command-config", str(config))
    topic = _name("tool")
    created = kcore("topics", *B, "--create", "--topic", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == f"Created topic {topic}."
    listed = kcore("topics", *B, "--list")
    assert listed.returncode == 0 and topic in listed.stdout.split()
    # The same file with the wrong password: refused, in one line.
    config.write_text(config.read_text().replace(SCRAM_USER[1], "wrong"))
    refused = kcore("topics", *B, "--list")
    assert refused.returncode != 0
    assert "authentication" in refused.stderr.lower()


def test_kcat_lists_and_consumes_over_sasl_ssl(cluster, pki):
    import shutil
    import subprocess

    from confluent_kafka import Producer

    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: make test installs it (make debs)"
    topic = _name("kcat")
    conf = confluent_conf(cluster, pki, "SCRAM-SHA-512", *SCRAM_USER)
    producer = Producer(conf)
    for i in range(5):
        producer.produce(topic, key=b"k%d" % i, value=b"kcat-%d" % i)
    assert producer.flush(30) == 0
    security = [
        "-X", "security.protocol=SASL_SSL",
        "-X", f"ssl.ca.location={pki.ca_file}",
        "-X", "sasl.mechanisms=SCRAM-SHA-512",
        "-X", f"sasl.username={SCRAM_USER[0]}",
        "-X", f"sasl.password={SCRAM_USER[1]}",
    ]  # fmt: skip
    listed = subprocess.run(
        [kcat, "-b", cluster.sasl_ssl_servers, *security, "-L", "-t", topic],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert f'topic "{topic}" with 1 partitions' in listed.stdout
    consumed = subprocess.run(
        [kcat, "-b", cluster.sasl_ssl_servers, *security, "-C", "-t", topic, "-e", "-f", "%k=%s\n"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"k{i}=kcat-{i}" for i in range(5)]
    # Wrong password: kcat gets no metadata and says why.
    wrong = [a.replace(SCRAM_USER[1], "nope") for a in security]
    refused = subprocess.run(
        [kcat, "-b", cluster.sasl_ssl_servers, *wrong, "-L", "-m", "5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stderr
