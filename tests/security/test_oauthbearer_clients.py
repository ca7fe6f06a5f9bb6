"""OAUTHBEARER with unsecured JWS tokens on a running node: confluent-kafka
(``enable.sasl.oauthbearer.unsecure.jwt``) produces, consumes and commits a transaction over
SASL_PLAINTEXT and SASL_SSL; its token's principal is the authorizer's ``User:<sub>`` (ACL
allow and deny); kafka-python and aiokafka with a token provider; an expired token, a bad one
and a session past its token's ``exp`` on the wire. The mechanism itself:
test_oauthbearer.py."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kcore.protocol import messages as m
from tests.security.sasl_cluster import RawSasl, SaslCluster, transactional_round_trip
from tests.security.test_oauthbearer import token as jws
from tests.security.test_sasl_acls import AUTHORIZER, _allow, _create_topic
from tests.security.test_sasl_ssl import SaslSslCluster

pytestmark = pytest.mark.timeout(240)

MECHANISMS = {"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}
INVALID = '{"status":"invalid_token"}'


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _token(sub: str, lifetime_s: float = 3600) -> str:
    """An unsecured JWS for ``sub`` issued now on the real clock (what the node checks)."""
    now = int(time.time())  # whole seconds: an iat a fraction ahead of the node's ms is refused
    return jws({"sub": sub, "iat": now, "exp": now + lifetime_s})


@pytest.fixture(scope="module")
def cluster():
    with SaslCluster(config={**AUTHORIZER, **MECHANISMS}) as c:
        yield c


def oauth_conf(servers: str, principal: str, protocol: str = "SASL_PLAINTEXT") -> dict:
    return {
        "bootstrap.servers": servers,
        "security.protocol": protocol,
        "sasl.mechanisms": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={principal}",
    }


def _produce(conf: dict, topic: str):
    from confluent_kafka import Producer

    producer = Producer({**conf, "message.timeout.ms": 20000})
    result = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: result.append(err))
    producer.flush(30)
    return result[0]


def _oauth_login(raw: RawSasl, token: str, version: int = 2):
    handshake = raw.call(17, 1, m.SaslHandshakeRequest(mechanism="OAUTHBEARER"))
    assert handshake.error_code == 0, handshake
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    return raw.call(36, version, m.SaslAuthenticateRequest(auth_bytes=message))


def test_confluent_oauthbearer_produces_consumes_and_commits_a_transaction(cluster):
    # User:admin is a super user: the round trip needs no ACLs.
    transactional_round_trip(oauth_conf(cluster.bootstrap_servers, "admin"), 20)


def test_confluent_oauthbearer_principal_is_the_authorizers_user(cluster):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourceType

    topic = _name("oauth")
    assert _create_topic(cluster, "admin", topic) == 0
    _allow(cluster, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert _produce(oauth_conf(cluster.bootstrap_servers, "alice"), topic) is None
    refused = _produce(oauth_conf(cluster.bootstrap_servers, "bob"), topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_oauthbearer_on_the_wire_lifetime_expiry_and_failure(cluster):
    with RawSasl(cluster.sasl_port) as raw:
        response = _oauth_login(raw, _token("admin", 3600))
        assert response.error_code == 0 and response.auth_bytes == b""
        # The session lasts until the token's exp (KIP-368), less what has passed since.
        assert 3_500_000 < response.session_lifetime_ms <= 3_600_000
        assert raw.call(3, 12, m.MetadataRequest(topics=None)).brokers
    with RawSasl(cluster.sasl_port) as raw:
        response = _oauth_login(raw, _token("admin", -60))  # expired a minute ago
        assert (response.error_code, response.auth_bytes) == (0, INVALID.encode())
        failed = raw.call(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\x01"))
        assert (failed.error_code, failed.error_message) == (58, INVALID)  # SASL_AUTH_FAILED
        assert raw.closed()
    with RawSasl(cluster.sasl_port) as raw:
        response = _oauth_login(raw, "not a token")  # fails at once: a malformed message
        assert response.error_code == 58 and raw.closed()
    with RawSasl(cluster.sasl_port) as raw:
        response = _oauth_login(raw, _token("admin", 1.5))
        assert response.error_code == 0 and response.session_lifetime_ms <= 1500
        time.sleep(2.0)
        raw.send(3, 12, m.MetadataRequest(topics=None))
        assert raw.frame() is None  # past the token's exp, not re-authenticated: closed


class _Tokens:
    """kafka-python's and aiokafka's token provider: a fresh unsecured token for ``sub``."""

    def __init__(self, sub: str, lifetime_s: float = 3600) -> None:
        self.sub, self.lifetime_s = sub, lifetime_s

    def token(self) -> str:
        return _token(self.sub, self.lifetime_s)

    def extensions(self) -> dict:
        return {}


def test_kafka_python_and_aiokafka_with_a_token_provider(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AioProvider
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(_Tokens, AbstractTokenProvider):
        pass

    class AioTokens(AioProvider):
        async def token(self):
            return _token("admin")

    common = dict(
        bootstrap_servers=cluster.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
    )
    topic = _name("kp")
    producer = KafkaProducer(**common, sasl_oauth_token_provider=Provider("admin"))
    for i in range(5):
        producer.send(topic, b"v%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **common,
        sasl_oauth_token_provider=Provider("admin"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
    )
    assert [r.value for r in consumer][:5] == [b"v%d" % i for i in range(5)]
    consumer.close()

    async def aio():
        kwargs = dict(common, sasl_oauth_token_provider=AioTokens())
        p = AIOKafkaProducer(**kwargs)
        await p.start()
        try:
            await p.send_and_wait(topic, b"aio")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, **kwargs, auto_offset_reset="earliest")
        await c.start()
        try:
            values = []
            while b"aio" not in values:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                values += [r.value for records in batch.values() for r in records]
            return values
        finally:
            await c.stop()

    assert asyncio.run(aio())[:6] == [b"v%d" % i for i in range(5)] + [b"aio"]


def test_kafka_python_with_an_expired_token_is_refused(cluster):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PythonKafkaError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Expired(_Tokens, AbstractTokenProvider):
        pass

    with pytest.raises(PythonKafkaError):
        producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Expired("alice", -60),
            max_block_ms=5000,
        )
        producer.send(_name("never"), b"x").get(10)


def test_confluent_oauthbearer_over_sasl_ssl(pki):
    config = {
        **MECHANISMS,
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorAllowableClockSkewMs="1000";'
        ),
    }
    with SaslSslCluster(pki, config=config) as c:
        conf = {
            **oauth_conf(c.sasl_ssl_servers, "alice", "SASL_SSL"),
            "ssl.ca.location": str(pki.ca_file),
        }
        transactional_round_trip(conf, 10)
