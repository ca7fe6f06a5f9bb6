"""``GET /v1/cluster`` and ``GET /v1/brokers``: DescribeCluster (the brokers, fenced ones
too), ApiVersions (the finalized features) and DescribeQuorum (the active controller: the
metadata quorum's leader).

DescribeCluster's ``controller_id`` is what a KRaft broker tells clients (itself: it forwards
controller requests), so the active controller comes from DescribeQuorum, which needs DESCRIBE
on the cluster: a caller without it is shown ``active_controller_id: null`` and no voters rather
than refused the whole page.
"""

from __future__ import annotations

from quart import Blueprint
from quart_schema import validate_response

import kcore
from kcore.admin.api.common import Reply, errors
from kcore.admin.context import kafka
from kcore.admin.kafka import ADMIN_CLIENT_ID, AdminError, raise_for
from kcore.protocol import messages as m

cluster = Blueprint("cluster", __name__)

METADATA_TOPIC = "__cluster_metadata"


class ClusterInfo(Reply):
    cluster_id: str
    controller_id: int  # as DescribeCluster tells clients
    active_controller_id: int | None  # the metadata quorum's leader; null: not authorized
    finalized_features: dict[str, int]
    finalized_features_epoch: int
    version: str  # kcore's
    broker_count: int
    fenced_broker_count: int


class BrokerInfo(Reply):
    id: int
    host: str
    port: int
    rack: str | None
    fenced: bool
    is_controller: bool  # the active controller (metadata quorum leader)
    is_voter: bool | None  # a voter of the metadata quorum; null: not authorized


class BrokerList(Reply):
    brokers: list[BrokerInfo]


async def _describe_cluster() -> m.DescribeClusterResponse:
    response = await kafka(m.DescribeClusterRequest(include_fenced_brokers=True))
    raise_for(response.error_code, response.error_message)
    return response


async def _quorum() -> tuple[int | None, set[int] | None]:
    """(leader id, voter ids) of the metadata quorum, or (None, None) when refused."""
    Q = m.DescribeQuorumRequest
    request = Q(topics=[Q.TopicData(topic_name=METADATA_TOPIC, partitions=[Q.PartitionData()])])
    try:
        response = await kafka(request)
        raise_for(response.error_code, response.error_message)
        partition = response.topics[0].partitions[0]
        raise_for(partition.error_code, partition.error_message)
    except AdminError as e:
        if e.status == 403:
            return None, None
        raise
    leader = partition.leader_id if partition.leader_id >= 0 else None
    return leader, {v.replica_id for v in partition.current_voters}


@cluster.get("/v1/cluster")
@validate_response(ClusterInfo)
@errors(401, 403, 503)
async def get_cluster():
    """The cluster: its id, controllers, finalized features, kcore's version, broker count."""
    described = await _describe_cluster()
    versions = await kafka(
        m.ApiVersionsRequest(
            client_software_name=ADMIN_CLIENT_ID, client_software_version=kcore.__version__
        )
    )
    raise_for(versions.error_code)
    leader, _ = await _quorum()
    fenced = sum(1 for b in described.brokers if b.is_fenced)
    return ClusterInfo(
        cluster_id=described.cluster_id,
        controller_id=described.controller_id,
        active_controller_id=leader,
        finalized_features={f.name: f.max_version_level for f in versions.finalized_features},
        finalized_features_epoch=versions.finalized_features_epoch,
        version=kcore.__version__,
        broker_count=len(described.brokers),
        fenced_broker_count=fenced,
    )


@cluster.get("/v1/brokers")
@validate_response(BrokerList)
@errors(401, 403, 503)
async def get_brokers():
    """Every registered broker (fenced ones too) with its client address and roles."""
    described = await _describe_cluster()
    leader, voters = await _quorum()
    return BrokerList(
        brokers=[
            BrokerInfo(
                id=b.broker_id,
                host=b.host,
                port=b.port,
                rack=b.rack,
                fenced=b.is_fenced,
                is_controller=b.broker_id == leader,
                is_voter=None if voters is None else b.broker_id in voters,
            )
            for b in described.brokers
        ]
    )
