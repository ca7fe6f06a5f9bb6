"""kcore nodes with a SASL_PLAINTEXT client listener, for the SASL tests.

Each node has a ``SASL_PLAINTEXT`` listener (the one the tests' clients use, with PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512) besides EmbeddedCluster's ``PLAINTEXT`` (the inter-broker
listener, which kcore does not secure yet) and, on node 1, ``CONTROLLER``. PLAIN's users are :data:`PLAIN_USERS`; SCRAM users are
created through AlterUserScramCredentials by the tests that need them.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcore.server.config import BrokerConfig
from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_ports

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def plain_jaas(users: Mapping[str, str]) -> str:
    options = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="admin-secret" {options};'
    )


class SaslCluster(EmbeddedCluster):
    """An EmbeddedCluster whose nodes each add a SASL_PLAINTEXT listener (``sasl_ports``) to
    their PLAINTEXT one (``ports``, the inter-broker listener); ``bootstrap_servers`` names the
    SASL listeners, ``plaintext_servers`` the others."""

    def __init__(self, brokers: int = 1, config: Mapping[str, str] | None = None, **kwargs):
        props = {
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
            "connection.failed.authentication.delay.ms": "50",
            **(config or {}),
        }
        super().__init__(brokers, config=props, **kwargs)
        self.sasl_ports = free_ports(brokers)
        self.sasl_port = self.sasl_ports[0]

    def broker_config(self, node_id: int = 1) -> BrokerConfig:
        props = dict(super().broker_config(node_id).raw)
        props["listeners"] = (
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_ports[node_id - 1]}," + props["listeners"]
        )
        props["listener.security.protocol.map"] = (
            "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        )
        props["inter.broker.listener.name"] = "PLAINTEXT"
        return BrokerConfig(props)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.sasl_ports)

    @property
    def plaintext_servers(self) -> str:
        return super().bootstrap_servers

    @property
    def plaintext_port(self) -> int:
        return self.ports[0]


class RawSasl:
    """A blocking socket speaking Kafka frames, for the SASL exchanges clients never get wrong:
    ``call(api_key, version, body)`` sends one request and returns the decoded response;
    ``closed()`` says whether the broker closed the connection."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._correlation = 0

    def send(self, api_key: int, version: int, body) -> int:
        from kcore.protocol import encode_request

        self._correlation += 1
        self.sock.sendall(encode_request(api_key, version, self._correlation, "raw", body))
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def frame(self) -> bytes | None:
        size = self._read(4)
        if size is None:
            return None
        return self._read(int.from_bytes(size, "big"))

    def call(self, api_key: int, version: int, body):
        from kcore.protocol import decode_response

        correlation = self.send(api_key, version, body)
        frame = self.frame()
        assert frame is not None, "the broker closed the connection"
        got, response = decode_response(api_key, version, frame)
        assert got == correlation
        return response

    def closed(self) -> bool:
        """True once the broker has closed the connection (EOF), waiting up to the timeout."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawSasl:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scram_login(raw: RawSasl, mechanism: str, user: str, password: str, version: int = 2):
    """SaslHandshake v1 + the SCRAM exchange over SaslAuthenticate; the last response."""
    from kcore.protocol import messages as m
    from kcore.security.scram import MECHANISMS, ScramClient

    handshake = raw.call(17, 1, m.SaslHandshakeRequest(mechanism=mechanism))
    assert handshake.error_code == 0, handshake
    client = ScramClient(MECHANISMS[mechanism], user, password)
    first = raw.call(36, version, m.SaslAuthenticateRequest(auth_bytes=client.first_message()))
    if first.error_code:
        return first
    final = client.evaluate(bytes(first.auth_bytes))
    return raw.call(36, version, m.SaslAuthenticateRequest(auth_bytes=final))


def plain_login(raw: RawSasl, user: str, password: str, version: int = 2):
    from kcore.protocol import messages as m
    from kcore.security.plain import plain_message

    handshake = raw.call(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
    assert handshake.error_code == 0, handshake
    return raw.call(
        36, version, m.SaslAuthenticateRequest(auth_bytes=plain_message(user, password))
    )


def transactional_round_trip(conf: Mapping[str, object], count: int = 20) -> None:
    """With confluent-kafka settings ``conf`` (a secured listener's): ``count`` records produced
    in one committed transaction, read back in order by a read_committed group member, whose
    commit is then stored -- produce, transactions and groups through the listener."""
    import time
    import uuid

    from confluent_kafka import Consumer, Producer

    suffix = uuid.uuid4().hex[:8]
    topic = f"txn-{suffix}"
    producer = Producer({**conf, "transactional.id": f"tx-{suffix}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.commit_transaction(30)
    consumer = Consumer(
        {
            **conf,
            "group.id": f"g-{suffix}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got, deadline = [], time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
        assert got == [(b"k%d" % i, b"v%d" % i) for i in range(count)]
        consumer.commit(asynchronous=False)  # the group joined, its offsets stored
        assignment = consumer.assignment()
        assert assignment and consumer.committed(assignment, 30)[0].offset == count
    finally:
        consumer.close()
