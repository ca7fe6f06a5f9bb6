"""A mirror partition that fails, says why, and is recovered by the operator's Start (D-13,
D-16), between two real clusters through the public interfaces (``MirroredClusters``).

The failure is the one D-16 names: the destination is ahead of the source's log end with no
epoch to truncate by. It is made while the topic is paused: batches without a leader epoch are
appended to the destination as the mirror appends (as a destination that had mirrored a
source since replaced would hold them), then the topic is resumed.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kcore.client.mirrors import pause_mirror_topics, resume_mirror_topics
from kcore.protocol import messages as m
from kcore.testing import MirroredClusters, free_port

from .clusters import wait_until
from .test_mirror_fetcher import _inject

pytestmark = pytest.mark.timeout(180)


def _produce(cluster, topic: str, values) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


def _state(dr) -> str:
    return dr.describe()[("ledger", 0)].state


def test_mirroring_failed_partition_keeps_its_reason_and_start_recovers_it():
    # No automatic retry: the partition stays FAILED until the operator acts (D-13).
    with MirroredClusters(destination_config={"mirror.failed.max.retries": "0"}) as dr:
        dr.source.create_topic("ledger")
        dr.mirror_topics("ledger")
        dr.wait_in_sync()
        response = dr._admin(
            dr.destination, lambda c: pause_mirror_topics(c, dr.mirror, ["ledger"])
        )
        assert [t.error_code for t in response.topics] == [0]
        wait_until(lambda: _state(dr) == "PAUSED", 30, "PAUSED")

        _produce(dr.source, "ledger", [b"entry-%d" % i for i in range(3)])
        _inject(dr.destination, "ledger", 0, 8, epoch=-1)  # 8 > the source's 3
        response = dr._admin(
            dr.destination, lambda c: resume_mirror_topics(c, dr.mirror, ["ledger"])
        )
        assert [t.error_code for t in response.topics] == [0]
        wait_until(lambda: _state(dr) == "FAILED", 60, "FAILED")
        failed = dr.describe()[("ledger", 0)]
        assert "above the source's log end offset 3" in failed.failed_reason
        dest = dr.destination.broker.replica_manager.partitions[("ledger", 0)]
        assert dest.log_end_offset == 8  # nothing removed: the operator decides

        # The operator's Start: the partition truncates (no LME: the whole log, D-16) and
        # mirrors the source as it is.
        assert dr.mirror_topics("ledger") == ["ledger"]
        dr.wait_in_sync()
        assert dest.log_end_offset == 3
        assert dr.describe()[("ledger", 0)].failed_reason is None


def test_mirroring_unreachable_source_fails_with_the_reason_and_start_recovers_it():
    config = {"mirror.failed.max.retries": "0", "mirror.source.unavailable.timeout.ms": "1000"}
    with MirroredClusters(destination_config=config) as dr:
        dr.source.create_topic("ledger")
        dr.mirror_topics("ledger")
        _produce(dr.source, "ledger", [b"entry-%d" % i for i in range(5)])
        dr.wait_in_sync()

        dr.source.stop()  # the source's data centre goes dark
        wait_until(lambda: _state(dr) == "FAILED", 60, "FAILED")
        failed = dr.describe()[("ledger", 0)]
        assert failed.failed_reason.startswith("MIRROR_SOURCE_UNAVAILABLE: ")
        assert "unreachable" in failed.failed_reason
        # Still read-only: a FAILED partition is not failed over (D-13).
        producer = Producer({"bootstrap.servers": dr.destination.bootstrap_servers, "retries": 0})
        errors = []
        producer.produce("ledger", b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(30)
        assert [e.code() for e in errors] == [157]  # TOPIC_IS_MIRROR

        dr.source.start()  # back, on the same ports and data
        _produce(dr.source, "ledger", [b"late-%d" % i for i in range(3)])
        assert dr.mirror_topics("ledger") == ["ledger"]  # the operator's Start recovers it
        dr.wait_in_sync()
        dest = dr.destination.broker.replica_manager.partitions[("ledger", 0)]
        assert dest.log_end_offset == 8
        assert dr.describe()[("ledger", 0)].failed_reason is None


def _alter_mirror(dr, *ops) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of ``(key, operation, value)`` on the mirror (CLUSTER_MIRROR)."""
    A = m.IncrementalAlterConfigsRequest
    request = A(
        resources=[
            A.AlterConfigsResource(
                resource_type=64,
                resource_name=dr.mirror,
                configs=[A.AlterableConfig(name=k, config_operation=o, value=v) for k, o, v in ops],
            )
        ]
    )
    response = dr._admin(dr.destination, lambda c: c.request("any", request))
    return response.responses[0].error_code, response.responses[0].error_message


def test_mirroring_reconnects_with_altered_configs(tmp_path):
    # M-68: a config change reconnects the mirror with the new settings. Pointed at an address
    # where nothing listens, its partitions fail as unreachable; pointed back, the change itself
    # retries the FAILED partitions (no retries are left: mirror.failed.max.retries=0), no
    # Start needed.
    config = {"mirror.failed.max.retries": "0", "mirror.source.unavailable.timeout.ms": "1000"}
    with MirroredClusters(destination_config=config) as dr:
        dr.source.create_topic("ledger")
        dr.mirror_topics("ledger")
        _produce(dr.source, "ledger", [b"entry-%d" % i for i in range(5)])
        dr.wait_in_sync()
        SET, DELETE = 0, 1
        nowhere = f"127.0.0.1:{free_port()}"
        assert _alter_mirror(
            dr, ("bootstrap.servers", SET, nowhere), ("mirror.source.cluster.id", DELETE, None)
        ) == (0, None)
        wait_until(lambda: _state(dr) == "FAILED", 60, "FAILED")
        assert nowhere in dr.describe()[("ledger", 0)].failed_reason

        assert _alter_mirror(dr, ("bootstrap.servers", SET, dr.source.bootstrap_servers)) == (
            0,
            None,
        )
        _produce(dr.source, "ledger", [b"late"])
        dr.wait_in_sync()
        assert dr.destination.broker.replica_manager.partitions[("ledger", 0)].log_end_offset == 6
