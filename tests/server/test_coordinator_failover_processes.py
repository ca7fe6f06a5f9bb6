"""Coordinators failing over when their process is killed (SIGKILL), on three combined
broker+controller processes with ``kcore.replication.enable`` (#17 part 2).

A confluent-kafka transactional producer has a transaction open and a consumer group has
committed offsets, both on the same coordinator node, when that node is killed: the producer
commits (or, if the client asks for it, aborts) on the new coordinator and goes on; the group
member consumes the rest and commits there; a new member resumes from the committed offsets;
a read_committed consumer sees every committed record once and nothing else.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic

from kcore.client.cluster import KafkaClient
from kcore.client.groups import find_coordinator
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.testing.processes import ProcessCluster
from tests.server.replicated import REPLICATED_CONFIG, unique, wait_until
from tests.server.test_coordinator_failover import (
    _commit,
    _committed,
    _consumer,
    _poll,
    run_transaction,
    transactional_producer,
)

pytestmark = pytest.mark.timeout(420)

CONFIG = {**REPLICATED_CONFIG, "replica.lag.time.max.ms": "3000"}
GROUP, TRANSACTION = 0, 1


def coordinator_node(bootstrap: str, key: str, key_type: int) -> int | None:
    """The node id of ``key``'s coordinator, or None while there is none."""

    async def ask():
        async with KafkaClient(bootstrap) as client:
            try:
                return (await find_coordinator(client, key, key_type)).node_id
            except KafkaError as e:
                if e.code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
                    return None
                raise

    return trio.run(ask)


def test_group_and_transaction_survive_a_sigkill_of_their_coordinator(tmp_path):
    topic = unique("coord")
    with ProcessCluster(tmp_path, 3, config=CONFIG) as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)

        def in_sync():
            meta = admin.list_topics(topic, timeout=5).topics[topic].partitions
            return len(meta) == 3 and all(len(p.isrs) == 3 for p in meta.values())

        wait_until(in_sync, "three in sync")
        tid = unique("tid")
        victim = wait_until(
            lambda: coordinator_node(bootstrap, tid, TRANSACTION), "a txn coordinator"
        )
        group = next(
            g
            for g in (f"group-{uuid.uuid4().hex[:8]}" for _ in range(1000))
            if wait_until(lambda g=g: coordinator_node(bootstrap, g, GROUP), "a coordinator")
            == victim
        )

        producer = transactional_producer(bootstrap, tid)
        committed: list[bytes] = []
        run_transaction(producer, topic, "before", committed, count=60)
        consumer = _consumer(cluster, group, **{"isolation.level": "read_committed"})
        consumer.subscribe([topic])
        first = _poll(consumer, 40)
        assert len(first) == 40
        _commit(consumer)

        # SIGKILL of the open transaction's coordinator (and the group's).
        kill = cluster.node(victim).kill
        run_transaction(producer, topic, "during", committed, count=60, before_commit=kill)
        run_transaction(producer, topic, "after", committed, count=60)
        wait_until(
            lambda: coordinator_node(bootstrap, group, GROUP) not in (None, victim),
            "a new group coordinator",
        )
        rest = _poll(consumer, len(committed) - len(first), timeout=120)
        assert sorted(first + rest) == sorted(committed)  # each committed record once
        _commit(consumer)
        consumer.close()
        resumed = _consumer(cluster, group, **{"isolation.level": "read_committed"})
        assert sum(_committed(resumed, topic).values()) >= len(committed)
        resumed.subscribe([topic])
        leftover = _poll(resumed, 1, timeout=5)
        resumed.close()
        assert leftover == []  # nothing committed is read again

        cluster.node(victim).start()  # back as a follower of its old coordinator partitions
        wait_until(in_sync, "the killed node back in sync")
        time.sleep(0.5)
