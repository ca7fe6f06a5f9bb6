"""A small Trio Kafka client on :mod:`kcore.protocol`: used by the mirror, the Raft driver, the
operator tools and the tests.

* :mod:`kcore.client.connection` — :class:`ConnectionCore` (sans-IO correlation and framing) and
  :class:`BrokerConnection` (one pipelined connection, version negotiation, timeouts).
* :mod:`kcore.client.cluster` — :class:`KafkaClient` (bootstrap, metadata, connection pool,
  retry helper).
* :mod:`kcore.client.admin` — thin helpers: create/delete topics, describe configs, list
  offsets, raw fetch and produce, ApiVersions.
* :mod:`kcore.client.groups` — consumer-group helpers that go to the group's coordinator:
  FindCoordinator, list/describe/delete groups, fetch/commit/delete offsets.
* :mod:`kcore.client.transactions` — list/describe transactions (each id at its coordinator),
  describe producers (at the partition leader), abort a hanging transaction (WriteTxnMarkers).
* :mod:`kcore.client.mirror_states` — ReadMirrorStates / WriteMirrorStates at a cluster
  mirror's coordinator (FindCoordinator key type 3), retried while it moves or loads.
* :mod:`kcore.client.errors` — the client's exceptions and response error-code helpers.
"""

from kcore.client.cluster import (
    BrokerInfo,
    ClusterMetadata,
    KafkaClient,
    PartitionInfo,
    TopicInfo,
    parse_bootstrap_servers,
)
from kcore.client.connection import BrokerConnection, ConnectionCore, InFlight
from kcore.client.errors import (
    ClientError,
    ConnectionFailed,
    ConnectionLost,
    ConnectTimeout,
    NetworkError,
    ProtocolError,
    RequestTimeout,
    UnsupportedVersionError,
    first_error,
    raise_for_error,
)

__all__ = [
    "BrokerConnection",
    "BrokerInfo",
    "ClientError",
    "ClusterMetadata",
    "ConnectTimeout",
    "ConnectionCore",
    "ConnectionFailed",
    "ConnectionLost",
    "InFlight",
    "KafkaClient",
    "NetworkError",
    "PartitionInfo",
    "ProtocolError",
    "RequestTimeout",
    "TopicInfo",
    "UnsupportedVersionError",
    "first_error",
    "parse_bootstrap_servers",
    "raise_for_error",
]
