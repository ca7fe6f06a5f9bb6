"""KIP-368 with a real broker: kcore's own client keeps its connections across several SASL
session lifetimes by logging in again on them (``connections.max.reauth.ms=1500``).

A kcore consumer group member (KafkaClient over SASL_SSL with SCRAM) reads what confluent-kafka
produces for about four lifetimes; every connection it opened re-authenticated, none was
reopened, and every record arrived. The deterministic half (when, and in-flight requests kept)
is tests/client/test_connection_reauth.py.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka import Producer

from kcore.client import KafkaClient
from kcore.client.client_configs import consumer_config
from kcore.client.connection import BrokerConnection
from kcore.client.consumer import open_consumer
from kcore.security.sasl_client import SaslClientSettings
from kcore.security.tls_config import build_client_context
from tests.security.test_mirror_source_credentials import set_scram_password
from tests.security.test_sasl_ssl import SaslSslCluster, confluent_conf

pytestmark = pytest.mark.timeout(180)

LIFETIME_MS = 1500
USER, PASSWORD = "reauth-user", "reauth-secret"


def test_a_kcore_consumer_reauthenticates_across_session_lifetimes(pki, monkeypatch):
    opened: list[BrokerConnection] = []
    connect = BrokerConnection.connect.__func__

    async def counting(cls, host, port, **kwargs):
        conn = await connect(cls, host, port, **kwargs)
        if kwargs.get("sasl") is not None:
            opened.append(conn)
        return conn

    monkeypatch.setattr(BrokerConnection, "connect", classmethod(counting))
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    with SaslSslCluster(pki, {"connections.max.reauth.ms": str(LIFETIME_MS)}) as cluster:
        set_scram_password(cluster, USER, PASSWORD)
        cluster.create_topic(topic, 1)
        producer = Producer(confluent_conf(cluster, pki, "SCRAM-SHA-512", USER, PASSWORD))
        context = build_client_context(
            {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)}
        )
        config = consumer_config(
            {
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "fetch.max.wait.ms": "100",
            }
        )
        got: list[bytes] = []

        async def consume():
            async with (
                KafkaClient(
                    [cluster.sasl_ssl_servers],
                    ssl_context=context,
                    sasl=SaslClientSettings("SCRAM-SHA-512", USER, PASSWORD),
                ) as client,
                open_consumer(client, config) as consumer,
            ):
                consumer.subscribe([topic])
                end = time.monotonic() + 4 * LIFETIME_MS / 1000
                sent = 0
                while time.monotonic() < end or len(got) < sent:
                    if time.monotonic() < end:
                        producer.produce(topic, value=b"r%d" % sent)
                        producer.flush(10)
                        sent += 1
                    for record in await consumer.poll(0.2):
                        got.append(record.value)
                    assert time.monotonic() < end + 30, "records stopped arriving"
                return sent

        sent = trio.run(consume)
    assert got == [b"r%d" % i for i in range(sent)]
    assert opened, "the consumer opened no SASL connection"
    # The group coordinator's and the partition leader's connections (one node: often the
    # same one) lived through the whole run, logging in again each lifetime.
    assert all(not c.error or "closed by the client" in str(c.error) for c in opened), [
        str(c.error) for c in opened
    ]
    assert max(c.reauthentications for c in opened) >= 2
