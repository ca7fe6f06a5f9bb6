"""Build and run one kcore node from its configuration: the broker and its metadata quorum."""

from __future__ import annotations

import trio

from kcore.raft.driver import RaftDriver
from kcore.server.broker import KafkaBroker
from kcore.server.config import BrokerConfig
from kcore.server.handlers import raft_apis


def build_node(config: BrokerConfig) -> KafkaBroker:
    """A :class:`KafkaBroker` with its Raft driver, the Raft APIs on its controller listeners
    (authorized: :mod:`kcore.server.handlers.raft_apis`)."""

    def quorum_factory(broker: KafkaBroker) -> RaftDriver:
        driver = RaftDriver.from_properties(config.node_id, config.effective)
        # The voters reach each other on the controller listener as this node.
        driver.connect_options = broker.internal_security.controller().connect_options()
        return driver

    broker = KafkaBroker(config, quorum_factory=quorum_factory)
    raft_apis.register(broker.registry, broker.quorum)
    return broker


async def start_node(config: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a node until cancelled; ``task_status.started(broker)`` once it is ready."""
    broker = build_node(config)
    await broker.run(task_status=task_status)
