"""A restarting broker serves clients only once it has caught up with the metadata log.

Kafka's ``BrokerServer.startup`` enables request processing on the client listeners
(``socketServer.enableRequestProcessing``) only after the controller acknowledged the broker as
caught up, the first metadata image was published and the broker was unfenced; until then a
client cannot be told that an existing topic does not exist. These tests restart a node with
existing topics and probe its client listener from the moment it could first be reached.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import trio

from kcore.client.connection import BrokerConnection
from kcore.client.errors import ConnectionLost, NetworkError
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

TOPICS = [f"catch-up-{i}" for i in range(3)]


def _metadata_request() -> m.MetadataRequest:
    return m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(name=t) for t in TOPICS],
        allow_auto_topic_creation=False,
    )


async def _probe(port: int, ready: threading.Event, deadline_s: float) -> list[tuple[str, int]]:
    """Connect as early as possible and ask Metadata for the topics, over and over on fresh
    connections, until the node reports ready and one more answer came; returns every
    ``(topic, error_code)`` answered."""
    answers: list[tuple[str, int]] = []
    with trio.fail_after(deadline_s):
        while True:
            was_ready = ready.is_set()
            try:
                conn = await BrokerConnection.connect(
                    "127.0.0.1", port, connect_timeout=1.0, request_timeout=5.0
                )
            except NetworkError:  # not listening yet (or not accepting): try again at once
                await trio.sleep(0.001)
                continue
            async with conn:
                try:
                    response = await conn.request(_metadata_request())
                except ConnectionLost:
                    continue
            answers.extend((t.name, t.error_code) for t in response.topics)
            if was_ready:
                return answers


def _restart_and_probe(cluster: EmbeddedCluster) -> list[tuple[str, int]]:
    cluster.stop()
    ready = threading.Event()

    def start() -> None:
        try:
            cluster.start()
        finally:
            ready.set()

    starter = threading.Thread(target=start, name="restart")
    starter.start()
    try:
        return trio.run(_probe, cluster.port, ready, 30.0)
    finally:
        starter.join(30)


@pytest.mark.parametrize(
    "replay_delay_ms",
    [
        pytest.param("0", id="natural"),
        # Widens the window: every committed metadata batch reaches the broker's image this
        # much later after a (re)start, as on a node with a long metadata log to replay.
        pytest.param("300", id="slow-replay"),
    ],
)
def test_restarted_broker_never_answers_unknown_topic_for_an_existing_topic(
    tmp_path, replay_delay_ms
):
    config = {"kcore.testing.metadata.replay.delay.ms": replay_delay_ms}
    with EmbeddedCluster(config=config, data_dir=tmp_path) as cluster:
        for topic in TOPICS:
            cluster.create_topic(topic, partitions=2)
        for _ in range(2):
            answers = _restart_and_probe(cluster)
            assert answers, "no Metadata answer at all"
            unknown = [t for t, code in answers if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            assert not unknown, (
                f"answered UNKNOWN_TOPIC_OR_PARTITION {len(unknown)} times for {sorted(set(unknown))}"
            )
            assert all(code == 0 for _, code in answers), answers
            assert set(TOPICS) <= set(cluster.topics())


def test_controller_listener_serves_while_the_client_listener_waits_for_catch_up(tmp_path):
    """While the node replays its metadata the controller listener is open (the quorum needs
    it) and the client listener is not: Kafka opens a listener with a fixed port only when it
    enables request processing."""
    config = {"kcore.testing.metadata.replay.delay.ms": "300"}
    with EmbeddedCluster(config=config, data_dir=tmp_path) as cluster:
        cluster.create_topic(TOPICS[0])
        cluster.stop()
        starter = threading.Thread(target=cluster.start, name="restart")
        starter.start()
        try:
            controller_only = False
            deadline = time.monotonic() + 30
            while not controller_only and starter.is_alive() and time.monotonic() < deadline:
                controller_only = _is_open(cluster.controller_port) and not _is_open(cluster.port)
                time.sleep(0.002)
        finally:
            starter.join(30)
        assert controller_only, "never saw the controller listener open without the client one"
        assert _is_open(cluster.port)


def _is_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
