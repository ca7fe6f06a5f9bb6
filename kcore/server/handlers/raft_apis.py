"""The Raft APIs on CONTROLLER listeners, authorized as Kafka's ``ControllerApis`` does.

With an authorizer, Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch (of the metadata partition,
from a voter or an observer broker) and FetchSnapshot need CLUSTER_ACTION on the cluster, and
DescribeQuorum needs DESCRIBE on it; a refused request is answered CLUSTER_AUTHORIZATION_FAILED
in its top-level error and never reaches the Raft core, so it changes nothing (no vote granted,
no epoch moved, no fetch offset recorded). The nodes' own principals are super users
(``super.users``) or hold CLUSTER_ACTION, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kcore.metadata.acls import AclOperation
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.raft.driver import RAFT_APIS
from kcore.server import authz
from kcore.server.registry import CONTROLLER

DESCRIBE_QUORUM_KEY = 55
# What each Raft API needs on the cluster; the ones not listed need CLUSTER_ACTION.
OPERATION = {DESCRIBE_QUORUM_KEY: AclOperation.DESCRIBE}


def register(registry: Any, quorum: Any) -> None:
    """Serve :data:`~kcore.raft.driver.RAFT_APIS` on ``registry``'s controller listeners, each
    answered by ``quorum.handle(api_key, version, body)`` once authorized."""

    async def handler(ctx, body):
        operation = OPERATION.get(ctx.api_key, AclOperation.CLUSTER_ACTION)
        if not authz.allowed_on_cluster(ctx, operation):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            raise KafkaError(code, code.message)
        return await quorum.handle(ctx.api_key, ctx.version, body)

    for api_key, lo, hi in RAFT_APIS:
        registry.register(api_key, lo, hi, listeners=(CONTROLLER,))(handler)
