"""confluent-kafka, kafka-python and aiokafka over SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512: produce, consume, join groups, run a transaction; and what must be refused."""

import asyncio
import logging
import time
import uuid

import pytest

from kcore.protocol import messages as m
from tests.producing import producing_throughout
from tests.security.sasl_cluster import (
    RawSasl,
    SaslCluster,
    plain_login,
    scram_login,
    transactional_round_trip,
)

pytestmark = pytest.mark.timeout(240)

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM": ("carol", "carol-secret")}


def _user(mechanism: str) -> tuple[str, str]:
    return USERS["PLAIN" if mechanism == "PLAIN" else "SCRAM"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def confluent_conf(cluster, mechanism: str, user=None, password=None) -> dict:
    default_user, default_password = _user(mechanism)
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user or default_user,
        "sasl.password": password or default_password,
    }


def python_client_kwargs(cluster, mechanism: str, user=None, password=None) -> dict:
    """kafka-python's and aiokafka's SASL arguments (the same names in both)."""
    default_user, default_password = _user(mechanism)
    return dict(
        bootstrap_servers=cluster.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user or default_user,
        sasl_plain_password=password or default_password,
    )


def add_scram_user(cluster, user: str, password: str, iterations: int = 8192) -> None:
    """Both SCRAM mechanisms for ``user``, through AlterUserScramCredentials as admin (PLAIN)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(confluent_conf(cluster, "PLAIN", "admin", "admin-secret"))
    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations), password.encode())
        for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while len([k for k in cluster.broker.metadata_image.scram.credentials if k[1] == user]) < 2:
        assert time.monotonic() < deadline, "the credentials never reached the broker's image"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster():
    with SaslCluster() as c:
        add_scram_user(c, *USERS["SCRAM"])
        yield c


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_produces_consumes_in_a_group_and_commits_a_transaction(cluster, mechanism):
    transactional_round_trip(confluent_conf(cluster, mechanism))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes_in_a_group(cluster, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    topic, group = _name("kp"), _name("g")
    kw = python_client_kwargs(cluster, mechanism)
    producer = KafkaProducer(acks="all", **kw)
    try:
        for i in range(10):
            producer.send(topic, value=b"v%d" % i).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=15000, **kw
    )
    try:
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == 10:
                break
        consumer.commit()
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(10)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes_in_a_group(cluster, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, group = _name("aio"), _name("g")
    kw = python_client_kwargs(cluster, mechanism)

    async def main():
        producer = AIOKafkaProducer(**kw)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, b"v%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", **kw)
        await consumer.start()
        try:
            got = []
            while len(got) < 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 60)
                got += [r.value for records in batch.values() for r in records]
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [b"v%d" % i for i in range(10)]


# -- refusals ----------------------------------------------------------------------------------


def _still_serves(cluster) -> None:
    with RawSasl(cluster.sasl_port) as raw:
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers


@pytest.mark.parametrize(
    "mechanism, user, password",
    [
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "mallory", "alice-secret"),
        ("SCRAM-SHA-256", "carol", "wrong"),
        ("SCRAM-SHA-512", "mallory", "carol-secret"),
    ],
)
def test_wrong_password_or_unknown_user_gets_sasl_authentication_failed_then_close(
    cluster, mechanism, user, password
):
    with RawSasl(cluster.sasl_port) as raw:
        if mechanism == "PLAIN":
            response = plain_login(raw, user, password)
            assert response.error_message == "Authentication failed: Invalid username or password"
        else:
            response = scram_login(raw, mechanism, user, password)
            assert response.error_message == (
                "Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {mechanism}"
            )
        assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert raw.closed()
    _still_serves(cluster)


def test_failed_authentication_is_logged_with_the_address_never_the_password(cluster, caplog):
    with caplog.at_level(logging.INFO, logger="kcore.server.sasl_shell"):
        with RawSasl(cluster.sasl_port) as raw:
            started = time.monotonic()
            response = scram_login(raw, "SCRAM-SHA-512", "carol", "Pa55-not-this-one")
            answered = time.monotonic() - started
            assert response.error_code == 58
        with RawSasl(cluster.sasl_port) as raw:
            assert plain_login(raw, "alice", "Pa55-nor-this").error_code == 58
    # Held back by connection.failed.authentication.delay.ms (50 ms here), never sooner.
    assert answered >= 0.05
    lines = [r.getMessage() for r in caplog.records if r.name == "kcore.server.sasl_shell"]
    assert len(lines) == 2
    assert all(line.startswith("Failed authentication with /127.0.0.1 ") for line in lines)
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in lines[0]
    assert "Invalid username or password" in lines[1]
    assert "Pa55" not in caplog.text


def test_confluent_client_sees_the_authentication_error(cluster):
    from confluent_kafka import KafkaError, Producer

    errors = []
    producer = Producer(
        {**confluent_conf(cluster, "SCRAM-SHA-256", "carol", "nope"), "error_cb": errors.append}
    )
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in errors[0].str()


def test_mechanism_not_enabled_is_refused_with_the_enabled_ones(cluster):
    with RawSasl(cluster.sasl_port) as raw:
        response = raw.call(17, 1, m.SaslHandshakeRequest(mechanism="GSSAPI"))
        assert response.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert raw.closed()
    _still_serves(cluster)


@pytest.mark.parametrize("after_api_versions", [False, True])
def test_request_before_authentication_closes_the_connection(cluster, after_api_versions):
    with RawSasl(cluster.sasl_port) as raw:
        if after_api_versions:
            assert (
                raw.call(
                    18,
                    3,
                    m.ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                ).error_code
                == 0
            )
        raw.send(3, 12, m.MetadataRequest(topics=None))
        assert raw.frame() is None  # closed without an answer, as Kafka closes it
    _still_serves(cluster)


def test_a_large_frame_before_authentication_closes_the_connection(cluster):
    # sasl.server.max.receive.size (512 KiB): a stranger cannot make the broker buffer more.
    with RawSasl(cluster.sasl_port) as raw:
        raw.send_raw((600 * 1024).to_bytes(4, "big") + b"\0" * 1024)
        assert raw.frame() is None
    with RawSasl(cluster.sasl_port) as raw:  # once authenticated, socket.request.max.bytes
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        Topic = m.MetadataRequest.MetadataRequestTopic
        names = [f"absent-{i:024d}" for i in range(20000)]  # a request of about 650 KiB
        big = m.MetadataRequest(
            topics=[Topic(name=n) for n in names], allow_auto_topic_creation=False
        )
        assert len(raw.call(3, 12, big).topics) == len(names)
    _still_serves(cluster)


def test_handshake_v0_then_raw_tokens_authenticates(cluster):
    from kcore.security.plain import plain_message

    with RawSasl(cluster.sasl_port) as raw:
        assert raw.call(17, 0, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = plain_message("alice", "alice-secret")
        raw.send_raw(len(token).to_bytes(4, "big") + token)
        assert raw.frame() == b""  # PLAIN's empty answer, size-prefixed
        assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers


def test_truncated_and_garbage_sasl_exchanges_leave_other_clients_served(cluster):
    from confluent_kafka import Producer

    topic = _name("busy")
    producer = Producer(confluent_conf(cluster, "SCRAM-SHA-512"))
    with producing_throughout(producer, topic) as outcome:
        handshake = m.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")
        for i in range(150):
            with RawSasl(cluster.sasl_port) as raw:
                kind = i % 5
                if kind == 0:  # half a handshake frame, then gone
                    from kcore.protocol import encode_request

                    frame = encode_request(17, 1, 1, "raw", handshake)
                    raw.send_raw(frame[: len(frame) // 2])
                elif kind == 1:  # SCRAM's first message, never the second
                    raw.call(17, 1, handshake)
                    raw.send(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"n,,n=carol,r=abc"))
                elif kind == 2:  # garbage where a SCRAM message belongs
                    raw.call(17, 1, handshake)
                    raw.call(36, 2, m.SaslAuthenticateRequest(auth_bytes=bytes(range(256))))
                elif kind == 3:  # a size prefix promising more than ever comes
                    raw.send_raw(b"\x00\x00\x10\x00" + b"\x00" * 10)
                else:  # raw-token mode, then a truncated token
                    raw.call(17, 0, m.SaslHandshakeRequest(mechanism="PLAIN"))
                    raw.send_raw(b"\x00\x00\x00\x20\x00alice")
    assert not outcome.failures and len(outcome.delivered) > 0
    _still_serves(cluster)


def test_connection_past_its_session_lifetime_is_closed_and_reauthentication_renews_it(caplog):
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    with SaslCluster(config={"connections.max.reauth.ms": "1500"}) as cluster:
        add_scram_user(cluster, *USERS["SCRAM"])
        with RawSasl(cluster.sasl_port) as raw:
            response = scram_login(raw, "SCRAM-SHA-256", "carol", "carol-secret")
            assert response.error_code == 0 and response.session_lifetime_ms == 1500
            assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers
            time.sleep(2.0)
            raw.send(3, 12, m.MetadataRequest(topics=None))
            assert raw.frame() is None  # expired, not re-authenticated: closed
        with RawSasl(cluster.sasl_port) as raw:  # re-authenticating (KIP-368) renews it
            assert scram_login(raw, "SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
            time.sleep(1.0)
            assert scram_login(raw, "SCRAM-SHA-256", "carol", "carol-secret").error_code == 0
            time.sleep(1.0)
            assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers
        # librdkafka re-authenticates before the lifetime ends; kafka-python cannot, is closed
        # and reconnects: both keep producing across several lifetimes.
        topic = _name("reauth")
        producer = Producer(confluent_conf(cluster, "SCRAM-SHA-512"))
        kp = KafkaProducer(**python_client_kwargs(cluster, "PLAIN"))
        try:
            errors = []
            with caplog.at_level(logging.DEBUG, logger="kcore.server.sasl_shell"):
                for i in range(8):
                    producer.produce(
                        topic, b"%d" % i, on_delivery=lambda e, _: e and errors.append(e)
                    )
                    assert producer.flush(30) == 0
                    kp.send(topic, b"kp%d" % i).get(timeout=30)
                    time.sleep(0.5)
            assert not errors
        finally:
            kp.close()
        # librdkafka's connection re-authenticated in place (KIP-368): one connection id
        # authenticated as carol more than once.
        carol = [
            r.getMessage().split()[1]
            for r in caplog.records
            if r.name == "kcore.server.sasl_shell"
            and "authenticated as User:carol" in r.getMessage()
        ]
        assert any(carol.count(conn) > 1 for conn in carol), carol


def test_sasl_requests_where_no_exchange_is_due_get_illegal_sasl_state(cluster):
    # Kafka's KafkaApis answers these: on a PLAINTEXT listener, and after authentication.
    with RawSasl(cluster.plaintext_port) as raw:
        assert raw.call(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 34
        assert raw.call(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"x")).error_code == 34
        assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers  # still open
    with RawSasl(cluster.sasl_port) as raw:
        assert plain_login(raw, "alice", "alice-secret").error_code == 0
        again = raw.call(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"x"))
        assert again.error_code == 34
        assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers


def test_two_brokers_each_authenticate_their_clients():
    from confluent_kafka import Consumer, Producer

    with SaslCluster(brokers=2) as cluster:
        topic = _name("two")
        cluster.create_topic(topic, partitions=4)
        leaders = {cluster.leader_of((topic, p)).node_id for p in range(4)}
        assert leaders == {1, 2}  # the broker-only node serves SASL clients too
        conf = confluent_conf(cluster, "PLAIN")
        producer = Producer(conf)
        for p in range(4):
            producer.produce(topic, value=b"p%d" % p, partition=p)
        assert producer.flush(30) == 0
        consumer = Consumer({**conf, "group.id": _name("g"), "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            got, deadline = set(), time.monotonic() + 60
            while len(got) < 4 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.add(msg.value())
        finally:
            consumer.close()
        assert got == {b"p0", b"p1", b"p2", b"p3"}
