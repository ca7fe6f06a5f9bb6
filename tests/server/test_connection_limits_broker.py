"""Connection limits on a running broker: a confluent-kafka producer keeps producing while
another address hits max.connections.per.ip, and ``kcore configs --alter`` changes the limit
for new connections. The rules one at a time: test_connection_quotas.py; the socket layer:
test_connection_limits.py."""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import Producer

from kcore.testing import EmbeddedCluster
from tests.producing import producing_throughout
from tests.server.test_connection_limits import answered, connect, served_once_freed
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(120)

# 127.0.0.1 (the producer, the broker's own clients) is exempt by its override.
CONFIG = {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.1:1000"}


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(config=CONFIG) as c:
        yield c


def _configs(cluster, *argv: str):
    return kcore("configs", "--bootstrap-server", cluster.bootstrap_servers, *argv)


def test_connection_limits_broker_producer_unaffected_while_another_address_is_refused(cluster):
    topic = f"limits-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    with producing_throughout(producer, topic) as outcome:

        async def main():
            port = cluster.port
            kept = [await connect(port, "127.0.0.2"), await connect(port, "127.0.0.2")]
            assert [await answered(s) for s in kept] == [True, True]
            for _ in range(5):
                assert not await answered(await connect(port, "127.0.0.2"))
            third = await connect(port, "127.0.0.3")
            assert await answered(third)
            await kept[0].aclose()
            again = await served_once_freed(port, "127.0.0.2")
            assert await answered(again, 2)

        trio.run(main)
    assert outcome.delivered and not outcome.failures


def test_connection_limits_broker_dynamic_max_connections_per_ip_binds_new_connections(cluster):
    async def main():
        port = cluster.port
        kept = await connect(port, "127.0.0.4")
        assert await answered(kept)
        done = _configs(cluster, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                        "--add-config", "max.connections.per.ip=1")  # fmt: skip
        assert (done.returncode, done.stdout) == (0, "Completed updating config for broker 1.\n")
        try:
            # The broker applies the config once its metadata has it: retried until then.
            with trio.fail_after(30):
                while await answered(await connect(port, "127.0.0.4")):
                    await trio.sleep(0.05)
            assert await answered(kept, 2)  # admitted before: not closed
            done = _configs(cluster, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                            "--delete-config", "max.connections.per.ip")  # fmt: skip
            assert done.returncode == 0, done.stderr
            second = await served_once_freed(port, "127.0.0.4")  # back to 2
            assert await answered(second)
        finally:
            _configs(cluster, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                     "--delete-config", "max.connections.per.ip")  # fmt: skip

    trio.run(main)


@pytest.mark.parametrize(
    "config",
    ["max.connection.creation.rate=10", "max.connections.per.ip.overrides=nocount"],
)
def test_connection_limits_broker_refuses_what_it_cannot_honour(cluster, config):
    done = _configs(cluster, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                    "--add-config", config)  # fmt: skip
    assert done.returncode != 0
    assert config.split("=")[0] in done.stdout + done.stderr


def test_connection_limits_broker_startup_refuses_a_connection_creation_rate(tmp_path):
    refused = pytest.raises(Exception, match="max.connection.creation.rate is not supported")
    with refused, EmbeddedCluster(config={"max.connection.creation.rate": "5"}, data_dir=tmp_path):
        pass
