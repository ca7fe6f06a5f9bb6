"""A kcore cluster whose inter-broker and controller listeners are SASL_SSL (#18).

Each node serves

* ``CLIENT``: SASL_PLAINTEXT with PLAIN, the tests' clients (``admin``, a super user, and
  ``mallory``, who has no ACLs);
* ``INTERNAL``: the inter-broker listener, SASL_SSL with SCRAM-SHA-256 (the ``broker`` user's
  credential is bootstrapped into the metadata log, as ``kcore format --add-scram`` does);
* node 1 only, ``CONTROLLER``: SASL_SSL with PLAIN (its users in the listener's JAAS config,
  since the controllers must log in to each other before there is a metadata log).

The certificates are trustme's; the nodes check each other's (host name included) against the
test CA. The StandardAuthorizer is on, with ``super.users=User:broker;User:admin``.
"""

from __future__ import annotations

from pathlib import Path

from kcore.metadata.bootstrap import bootstrap_records
from kcore.metadata.scram_control import credential_record
from kcore.security.scram import MECHANISMS, credential_from_password
from kcore.server.bootstrap_file import write_bootstrap
from kcore.server.config import BrokerConfig
from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_ports

BROKER_PASSWORD = "broker-secret"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"


def _scram_login(password: str) -> str:
    return f'{SCRAM} username="broker" password="{password}";'


def internal_config(pki, broker_password: str = BROKER_PASSWORD) -> dict[str, str]:
    """The properties every node shares; ``broker_password`` is the node's own login."""
    return {
        "listener.security.protocol.map": (
            "CLIENT:SASL_PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL,PLAINTEXT:PLAINTEXT"
        ),
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": (
            f'{PLAIN} user_admin="admin-secret" user_mallory="mallory-secret";'
        ),
        "listener.name.internal.scram-sha-256.sasl.jaas.config": _scram_login(broker_password),
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{PLAIN} username="broker" password="{broker_password}" '
            f'user_broker="{BROKER_PASSWORD}" user_mallory="mallory-secret";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.truststore.type": "PEM",
        "ssl.keystore.location": str(pki.server_file),
        "ssl.truststore.location": str(pki.ca_file),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "kcore.replication.enable": "true",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
        "connection.failed.authentication.delay.ms": "10",
    }


class InternalSecureCluster(EmbeddedCluster):
    """EmbeddedCluster with the listeners of the module docstring; ``ports`` are the CLIENT
    listeners, ``internal_ports`` the INTERNAL ones. ``node_config`` overrides per node."""

    def __init__(self, pki, brokers: int = 3, *, node_config=None, **kwargs) -> None:
        super().__init__(brokers, config=internal_config(pki), **kwargs)
        self.internal_ports = free_ports(brokers)
        self._node_config = node_config or {}

    def broker_config(self, node_id: int = 1) -> BrokerConfig:
        props = self.node_properties(node_id)
        client = f"CLIENT://127.0.0.1:{self.ports[node_id - 1]}"
        internal = f"INTERNAL://127.0.0.1:{self.internal_ports[node_id - 1]}"
        listeners = [client, internal]
        if node_id == 1:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        props["listeners"] = ",".join(listeners)
        props.update(self._node_config.get(node_id, {}))
        return BrokerConfig(props)

    def _node_configs(self) -> list[BrokerConfig]:
        configs = super()._node_configs()
        # kcore format --add-scram: the brokers' SCRAM login exists before the first one.
        mechanism = MECHANISMS["SCRAM-SHA-256"]
        credential = credential_from_password(mechanism, BROKER_PASSWORD, 4096, None)
        record = credential_record("broker", mechanism.type, credential)
        metadata_dir = Path(configs[0].metadata_log_dir)
        if not (metadata_dir / "__cluster_metadata-0").exists():
            write_bootstrap(metadata_dir, bootstrap_records(extra=[record]))
        return configs

    def client_conf(self, user: str = "admin", **extra) -> dict:
        """confluent-kafka settings of a CLIENT-listener user."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            **extra,
        }
