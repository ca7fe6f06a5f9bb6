"""ACLs against real SASL principals (StandardAuthorizer, super.users,
allow.everyone.if.no.acl.found): a sample of the matrix, each allowed with its ACL and refused
without it, with PLAIN and SCRAM users."""

import time
import uuid

import pytest

from kcore.protocol import messages as m
from tests.acls import allow_literal
from tests.security.sasl_cluster import RawSasl, SaslCluster, plain_login, scram_login
from tests.security.test_sasl_clients import add_scram_user, confluent_conf

pytestmark = pytest.mark.timeout(240)

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "offsets.topic.num.partitions": "2",
}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster():
    with SaslCluster(config=AUTHORIZER) as c:
        add_scram_user(c, "carol", "carol-secret")
        yield c


def _admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluent_conf(cluster, "PLAIN", "admin", "admin-secret"))


def _allow(cluster, principal: str, resource_type, name: str, operation) -> None:
    admin = _admin(cluster)  # kept alive until the futures are done
    allow_literal(admin, resource_type, name, principal, operation)
    # The ACL is committed; this broker's image has it an instant later.
    deadline = time.monotonic() + 30
    while not any(
        a.principal == principal and a.resource_name == name
        for a in cluster.broker.metadata_image.acls.acls.values()
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _login(raw: RawSasl, who: str):
    if who == "carol":
        return scram_login(raw, "SCRAM-SHA-256", "carol", "carol-secret")
    return plain_login(raw, who, f"{who}-secret")


def _create_topic(cluster, who: str, topic: str) -> int:
    with RawSasl(cluster.sasl_port) as raw:
        assert _login(raw, who).error_code == 0
        request = m.CreateTopicsRequest(
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=topic, num_partitions=1, replication_factor=1
                )
            ],
            timeout_ms=30000,
        )
        return raw.call(19, 7, request).topics[0].error_code


def _produce(cluster, who: str, topic: str):
    from confluent_kafka import Producer

    user_mechanism = "SCRAM-SHA-512" if who == "carol" else "PLAIN"
    password = f"{who}-secret"
    producer = Producer(
        {**confluent_conf(cluster, user_mechanism, who, password), "message.timeout.ms": 20000}
    )
    result = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: result.append(err))
    producer.flush(30)
    return result[0]


def test_create_topics_needs_create_on_the_cluster(cluster):
    from confluent_kafka.admin import AclOperation, ResourceType

    assert _create_topic(cluster, "bob", _name("t")) == 29  # TOPIC_AUTHORIZATION_FAILED
    _allow(cluster, "User:carol", ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    assert _create_topic(cluster, "carol", _name("t")) == 0
    assert _create_topic(cluster, "bob", _name("t")) == 29  # carol's ACL is not bob's
    assert _create_topic(cluster, "admin", _name("t")) == 0  # a super user needs none


def test_produce_needs_write_on_the_topic(cluster):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourceType

    topic = _name("w")
    assert _create_topic(cluster, "admin", topic) == 0
    _allow(cluster, "User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert _produce(cluster, "alice", topic) is None
    refused = _produce(cluster, "bob", topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consume_in_a_group_needs_read_on_topic_and_group(cluster):
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import AclOperation, ResourceType

    topic, group = _name("r"), _name("g")
    assert _create_topic(cluster, "admin", topic) == 0
    assert _produce(cluster, "admin", topic) is None
    _allow(cluster, "User:carol", ResourceType.TOPIC, topic, AclOperation.READ)
    _allow(cluster, "User:carol", ResourceType.GROUP, group, AclOperation.READ)

    def consume(who: str, mechanism: str):
        consumer = Consumer(
            {
                **confluent_conf(cluster, mechanism, who, f"{who}-secret"),
                "group.id": group,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None:
                    return msg.error() or msg.value()
            return None
        finally:
            consumer.close()

    assert consume("carol", "SCRAM-SHA-256") == b"x"
    refused = consume("bob", "PLAIN")
    assert isinstance(refused, KafkaError)
    assert refused.code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )


def test_scram_credential_apis_need_describe_and_alter_on_the_cluster(cluster):
    from kcore.security.scram import MECHANISMS, salted_password

    salt = b"s" * 16
    upsert = m.AlterUserScramCredentialsRequest(
        upsertions=[
            m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name="dave",
                mechanism=1,
                iterations=4096,
                salt=salt,
                salted_password=salted_password(MECHANISMS["SCRAM-SHA-256"], "d", salt, 4096),
            )
        ]
    )
    with RawSasl(cluster.sasl_port) as raw:
        assert _login(raw, "bob").error_code == 0
        describe = raw.call(50, 0, m.DescribeUserScramCredentialsRequest(users=None))
        assert describe.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
        assert raw.call(51, 0, upsert).results[0].error_code == 31
    with RawSasl(cluster.sasl_port) as raw:
        assert _login(raw, "admin").error_code == 0
        assert raw.call(51, 0, upsert).results[0].error_code == 0
        describe = raw.call(50, 0, m.DescribeUserScramCredentialsRequest(users=None))
        assert describe.error_code == 0
        assert {r.user for r in describe.results} >= {"carol", "dave"}


def test_allow_everyone_if_no_acl_found_opens_only_resources_without_acls():
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourceType

    config = {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with SaslCluster(config=config) as cluster:
        open_topic, guarded = _name("open"), _name("guarded")
        assert _create_topic(cluster, "bob", open_topic) == 0  # no ACL on the cluster at all
        assert _produce(cluster, "bob", open_topic) is None
        assert _create_topic(cluster, "admin", guarded) == 0
        _allow(cluster, "User:alice", ResourceType.TOPIC, guarded, AclOperation.WRITE)
        assert _produce(cluster, "alice", guarded) is None
        refused = _produce(cluster, "bob", guarded)
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
