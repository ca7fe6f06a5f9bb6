"""The principal of a client certificate, mapped by ssl.principal.mapping.rules, reaches the
authorizer: an ACL for ``User:alice@eng`` lets alice write; bob (``User:bob@eng``) has none and
is refused with TOPIC_AUTHORIZATION_FAILED. ``User:ANONYMOUS`` is the super user that sets the
ACLs up (over PLAINTEXT); the MTLS listener here only *requests* certificates
(``ssl.client.auth=requested``), so a client without one is ``User:ANONYMOUS`` too."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from .conftest import TlsCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(pki):
    config = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "listener.name.mtls.ssl.client.auth": "requested",
    }
    with TlsCluster(pki, **config) as c:
        yield c


def _produce_as(cluster, pki, name: str | None, topic: str) -> list:
    config = {
        "bootstrap.servers": cluster.mtls_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_file),
        "message.timeout.ms": 10000,
    }
    if name is not None:
        client = pki.client(name)
        config |= {"ssl.certificate.location": client["cert"], "ssl.key.location": client["key"]}
    producer = Producer(config)
    results = []
    for i in range(5):
        producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    return results


def test_mapped_certificate_principal_is_authorized_by_its_acls(cluster, pki):
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice@eng",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(30)
    assert _produce_as(cluster, pki, "alice", topic) == [None] * 5
    refused = _produce_as(cluster, pki, "bob", topic)
    assert refused and all(
        err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for err in refused
    ), refused
    # No certificate: User:ANONYMOUS, the super user.
    assert _produce_as(cluster, pki, None, topic) == [None] * 5
    assert cluster.leader_partition((topic, 0)).log_end_offset == 10
