"""Build and run one kcore node from its configuration: the broker and its metadata quorum."""

from __future__ import annotations

import trio

from kcore.raft.driver import RaftDriver
from kcore.server.broker import KafkaBroker
from kcore.server.config import BrokerConfig


def build_node(config: BrokerConfig) -> KafkaBroker:
    """A :class:`KafkaBroker` with its Raft driver, the Raft APIs on its controller listeners."""

    def quorum_factory(broker: KafkaBroker) -> RaftDriver:
        return RaftDriver.from_properties(config.node_id, config.effective)

    broker = KafkaBroker(config, quorum_factory=quorum_factory)
    broker.quorum.register_handlers(broker.registry)
    return broker


async def start_node(config: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a node until cancelled; ``task_status.started(broker)`` once it is ready."""
    broker = build_node(config)
    await broker.run(task_status=task_status)
