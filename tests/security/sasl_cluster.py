"""A kcore node with a SASL_PLAINTEXT client listener, for the SASL tests.

The node has three listeners: ``SASL_PLAINTEXT`` (the one the tests' clients use, with PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512), ``PLAINTEXT`` (the inter-broker listener, which kcore does
not secure yet) and ``CONTROLLER``. PLAIN's users are :data:`PLAIN_USERS`; SCRAM users are
created through AlterUserScramCredentials by the tests that need them.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_port

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def plain_jaas(users: Mapping[str, str]) -> str:
    options = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="admin-secret" {options};'
    )


class SaslCluster(EmbeddedCluster):
    """An EmbeddedCluster whose ``bootstrap_servers`` is its SASL_PLAINTEXT listener;
    ``plaintext_servers`` is the inter-broker PLAINTEXT one."""

    def __init__(self, config: Mapping[str, str] | None = None, **kwargs) -> None:
        self.sasl_port = free_port()
        self.plaintext_port = free_port()
        controller_port = free_port()
        props = {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"PLAINTEXT://127.0.0.1:{self.plaintext_port},"
            f"CONTROLLER://127.0.0.1:{controller_port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
            "connection.failed.authentication.delay.ms": "50",
        }
        props.update(config or {})
        super().__init__(config=props, **kwargs)
        self.controller_port = controller_port

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def plaintext_servers(self) -> str:
        return f"127.0.0.1:{self.plaintext_port}"
