"""Garbage, truncated and silent TLS handshakes: each costs only its own connection.

Hundreds of concurrent bad handshakes (10,000 in waves of 1,000 under ``make soak``) (random bytes, a ClientHello cut short, a Kafka request
in plaintext, nothing at all) hit the TLS listener while a confluent-kafka producer keeps
producing over TLS: every record is delivered, a new TLS client is served while the silent
connections still wait, and those are closed once ``kcore.ssl.handshake.timeout.ms`` passes.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
import uuid

import pytest
from confluent_kafka import Producer

from .conftest import TlsCluster
from .test_tls_clients import _api_versions_frame, _client_context, _tls_api_versions

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(pki):
    with TlsCluster(pki, **{"kcore.ssl.handshake.timeout.ms": "1500"}) as c:
        yield c


def _client_hello() -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def _bad_client(port: int, kind: str, hello: bytes, closed: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if kind == "random":
            writer.write(os.urandom(517))
        elif kind == "truncated":
            writer.write(hello[: len(hello) // 2])
        elif kind == "plaintext":
            writer.write(_api_versions_frame())
        # "silent": sends nothing and waits for the broker to give up
        await writer.drain()
        try:
            while await asyncio.wait_for(reader.read(65536), timeout=60):
                pass
        except ConnectionError:
            pass
        closed.append(kind)
    finally:
        writer.close()


@pytest.mark.parametrize(
    "total, wave",
    [(400, 400), pytest.param(10_000, 1_000, marks=pytest.mark.slow)],
    ids=["400", "10000"],
)
def test_bad_handshakes_stall_nobody_and_are_closed(cluster, pki, total, wave):
    topic = f"bad-tls-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1)
    producer = Producer(
        {
            "bootstrap.servers": cluster.ssl_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_file),
            "linger.ms": 1,
        }
    )
    stop = threading.Event()
    sent = []
    failed = []

    def produce():
        i = 0
        while not stop.is_set():
            producer.produce(
                topic,
                value=b"r%d" % i,
                on_delivery=lambda err, msg: failed.append(err) if err else None,
            )
            sent.append(i)
            producer.poll(0.005)
            i += 1
        producer.flush(60)

    worker = threading.Thread(target=produce)
    worker.start()
    hello = _client_hello()
    kinds = ["random", "truncated", "plaintext", "silent"]
    closed: list[str] = []

    async def attack():
        for start in range(0, total, wave):
            tasks = [
                asyncio.create_task(
                    _bad_client(cluster.ssl_port, kinds[i % len(kinds)], hello, closed)
                )
                for i in range(start, min(start + wave, total))
            ]
            # While the silent ones wait for their handshake, a real TLS client is served.
            await asyncio.sleep(0.2)
            response = await asyncio.to_thread(
                _tls_api_versions, cluster.ssl_port, _client_context(pki, None)
            )
            assert response.error_code == 0
            await asyncio.gather(*tasks)

    try:
        asyncio.run(attack())
    finally:
        stop.set()
        worker.join(120)
    assert sorted(closed) == sorted(kinds[i % len(kinds)] for i in range(total))
    assert not failed and len(sent) > 0
    # Every record produced during the attack is there.
    assert cluster.leader_partition((topic, 0)).log_end_offset == len(sent)
