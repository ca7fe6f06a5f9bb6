"""CreateAcls / DescribeAcls / DeleteAcls against a running kcore (confluent-kafka AdminClient).

The authorized cluster runs the StandardAuthorizer with ``super.users=User:ANONYMOUS`` (the
PLAINTEXT principal), so the test client may manage ACLs; without an authorizer the three APIs
answer SECURITY_DISABLED as Kafka does.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kcore.client.connection import BrokerConnection
from kcore.log.config import InvalidConfigError
from kcore.metadata.acls import AclOperation as Op
from kcore.metadata.acls import ResourceType as Res
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.config import BrokerConfig
from kcore.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(120)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster():
    config = {"authorizer.class.name": AUTHORIZER, "super.users": f"User:admin;{ANONYMOUS}"}
    with EmbeddedCluster(config=config) as c:
        yield c


def _admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _binding(name, principal="User:alice", op=AclOperation.READ, **kw) -> AclBinding:
    return AclBinding(
        kw.get("restype", ResourceType.TOPIC),
        name,
        kw.get("pattern", ResourcePatternType.LITERAL),
        principal,
        kw.get("host", "*"),
        op,
        kw.get("perm", AclPermissionType.ALLOW),
    )


def _filter(name=None, principal=None, **kw) -> AclBindingFilter:
    return AclBindingFilter(
        kw.get("restype", ResourceType.ANY),
        name,
        kw.get("pattern", ResourcePatternType.ANY),
        principal,
        kw.get("host"),
        kw.get("op", AclOperation.ANY),
        kw.get("perm", AclPermissionType.ANY),
    )


def _create(admin, bindings) -> None:
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)


def _describe(admin, flt) -> set[AclBinding]:
    return set(admin.describe_acls(flt, request_timeout=TIMEOUT).result(TIMEOUT))


def _delete(admin, filters) -> list[set[AclBinding]]:
    futures = admin.delete_acls(filters, request_timeout=TIMEOUT)
    return [set(futures[f].result(TIMEOUT)) for f in filters]


def _error_code(excinfo) -> int:
    return excinfo.value.args[0].code()


def _raw_describe(cluster, version=3, **fields) -> m.DescribeAclsResponse:
    """DescribeAcls on the wire: librdkafka drops its top-level error (an empty listing)."""

    async def main():
        async with await BrokerConnection.connect("127.0.0.1", cluster.port) as conn:
            request = m.DescribeAclsRequest(
                **{
                    "resource_type_filter": 1,
                    "resource_name_filter": None,
                    "pattern_type_filter": 1,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                    **fields,
                }
            )
            return await conn.request(request, version, timeout=TIMEOUT)

    return trio.run(main)


# -- the authorized cluster ----------------------------------------------------------------------


def test_acls_create_describe_delete_round_trip(cluster):
    admin = _admin(cluster)
    topic = _name("orders")
    read = _binding(topic, op=AclOperation.READ)
    write = _binding(topic, "User:bob", op=AclOperation.WRITE, perm=AclPermissionType.DENY)
    _create(admin, [read, write])

    assert _describe(admin, _filter(topic)) == {read, write}
    assert _describe(admin, _filter(topic, "User:bob")) == {write}
    assert _describe(admin, _filter(topic, op=AclOperation.READ)) == {read}

    deleted = _delete(admin, [_filter(topic, "User:alice")])
    assert deleted == [{read}]
    assert _describe(admin, _filter(topic)) == {write}
    assert _delete(admin, [_filter(topic)]) == [{write}]
    assert _describe(admin, _filter(topic)) == set()


def test_acls_create_is_idempotent(cluster):
    admin = _admin(cluster)
    binding = _binding(_name("idem"))
    _create(admin, [binding])
    _create(admin, [binding])
    assert _describe(admin, _filter(binding.name)) == {binding}


def test_acls_prefixed_and_wildcard_bindings_and_match_filter(cluster):
    admin = _admin(cluster)
    base = _name("pfx")
    prefixed = _binding(base, pattern=ResourcePatternType.PREFIXED, restype=ResourceType.GROUP)
    literal = _binding(f"{base}-payments", restype=ResourceType.GROUP)
    wildcard = _binding("*", "User:carol", restype=ResourceType.GROUP)
    _create(admin, [prefixed, literal, wildcard])

    # MATCH: every binding that applies to the named resource (literal, wildcard, prefixes)
    match = _filter(f"{base}-payments", pattern=ResourcePatternType.MATCH)
    assert _describe(admin, match) == {prefixed, literal, wildcard}
    exact = _filter(base, pattern=ResourcePatternType.PREFIXED)
    assert _describe(admin, exact) == {prefixed}
    groups = _describe(admin, _filter(restype=ResourceType.GROUP))
    assert {prefixed, literal, wildcard} <= groups
    _delete(admin, [_filter(base), _filter(f"{base}-payments"), _filter("*", "User:carol")])


def test_acls_delete_reports_each_filter_matches_and_removes_once(cluster):
    admin = _admin(cluster)
    topic = _name("del")
    a = _binding(topic, op=AclOperation.READ)
    b = _binding(topic, op=AclOperation.WRITE)
    _create(admin, [a, b])
    by_topic, by_op = _filter(topic), _filter(topic, op=AclOperation.WRITE)
    assert _delete(admin, [by_topic, by_op]) == [{a, b}, {b}]
    assert _describe(admin, _filter(topic)) == set()


def test_acls_cluster_resource_must_be_named_kafka_cluster(cluster):
    admin = _admin(cluster)
    good = _binding("kafka-cluster", restype=ResourceType.BROKER, op=AclOperation.ALTER)
    bad = _binding("my-cluster", restype=ResourceType.BROKER, op=AclOperation.ALTER)
    futures = admin.create_acls([good, bad], request_timeout=TIMEOUT)
    futures[good].result(TIMEOUT)
    with pytest.raises(KafkaException) as excinfo:
        futures[bad].result(TIMEOUT)
    assert _error_code(excinfo) == KafkaError.INVALID_REQUEST
    assert _describe(admin, _filter("kafka-cluster", restype=ResourceType.BROKER)) == {good}
    _delete(admin, [_filter("kafka-cluster", restype=ResourceType.BROKER)])


def test_acls_invalid_principal_is_refused_by_the_controller(cluster):
    async def main():
        async with await BrokerConnection.connect("127.0.0.1", cluster.port) as conn:
            C = m.CreateAclsRequest
            request = C(
                creations=[
                    C.AclCreation(
                        resource_type=int(Res.TOPIC),
                        resource_name="t",
                        resource_pattern_type=3,
                        principal="alice",  # no type
                        host="*",
                        operation=int(Op.READ),
                        permission_type=3,
                    ),
                    C.AclCreation(
                        resource_type=int(Res.TOPIC),
                        resource_name="",
                        resource_pattern_type=3,
                        principal="User:alice",
                        host="*",
                        operation=int(Op.READ),
                        permission_type=3,
                    ),
                ]
            )
            return await conn.request(request, 3, timeout=TIMEOUT)

    response = trio.run(main)
    assert [r.error_code for r in response.results] == [int(ErrorCode.INVALID_REQUEST)] * 2
    assert "principal" in response.results[0].error_message
    assert response.results[1].error_message == "Invalid empty resource name"


def test_acls_are_enforced_by_the_broker_authorizer_at_once(cluster):
    admin = _admin(cluster)
    topic = _name("live")
    authorizer = cluster.broker.authorizer
    assert not authorizer.authorize("User:dave", "127.0.0.1", Op.READ, Res.TOPIC, topic)
    _create(admin, [_binding(topic, "User:dave", op=AclOperation.READ)])
    # CreateAcls answers after commit: this broker's image (and so its authorizer) has the ACL
    assert authorizer.authorize("User:dave", "127.0.0.1", Op.READ, Res.TOPIC, topic)
    assert authorizer.authorize("User:dave", "127.0.0.1", Op.DESCRIBE, Res.TOPIC, topic)
    assert not authorizer.authorize("User:dave", "127.0.0.1", Op.WRITE, Res.TOPIC, topic)
    assert authorizer.authorize("User:admin", "127.0.0.1", Op.WRITE, Res.TOPIC, topic)
    _delete(admin, [_filter(topic)])
    assert not authorizer.authorize("User:dave", "127.0.0.1", Op.READ, Res.TOPIC, topic)


def test_acls_describe_groups_bindings_by_resource_on_the_wire(cluster):
    admin = _admin(cluster)
    topic = _name("grouped")
    _create(admin, [_binding(topic), _binding(topic, "User:bob", AclOperation.WRITE)])
    response = _raw_describe(cluster, resource_name_filter=topic)
    assert response.error_code == 0
    [resource] = response.resources
    assert (resource.resource_type, resource.resource_name, resource.pattern_type) == (
        int(Res.TOPIC),
        topic,
        3,
    )
    assert sorted((a.principal, a.operation) for a in resource.acls) == [
        ("User:alice", int(Op.READ)),
        ("User:bob", int(Op.WRITE)),
    ]
    unknown = _raw_describe(cluster, pattern_type_filter=0)
    assert unknown.error_code == int(ErrorCode.INVALID_REQUEST)
    _delete(admin, [_filter(topic)])


# -- persistence -------------------------------------------------------------------------------


def test_acls_survive_a_restart():
    config = {"authorizer.class.name": "kcore.StandardAuthorizer", "super.users": ANONYMOUS}
    with EmbeddedCluster(config=config) as cluster:
        admin = _admin(cluster)
        keep = _binding("kept", pattern=ResourcePatternType.PREFIXED, op=AclOperation.WRITE)
        gone = _binding("gone")
        _create(admin, [keep, gone])
        _delete(admin, [_filter("gone")])
        cluster.restart()
        admin = _admin(cluster)
        assert _describe(admin, _filter()) == {keep}
        assert cluster.broker.authorizer.authorize(
            "User:alice", "127.0.0.1", Op.WRITE, Res.TOPIC, "kept-1"
        )


# -- no authorizer, not authorized ------------------------------------------------------------


def test_acls_without_authorizer_answer_security_disabled():
    with EmbeddedCluster() as cluster:
        assert cluster.broker.authorizer is None
        admin = _admin(cluster)
        # librdkafka reads DescribeAcls' top-level error and drops it: an empty listing
        assert _describe(admin, _filter()) == set()
        for version in (1, 2, 3):
            response = _raw_describe(cluster, version)
            assert response.error_code == int(ErrorCode.SECURITY_DISABLED)
            assert response.error_message == "No Authorizer is configured."
        binding = _binding("t")
        with pytest.raises(KafkaException) as excinfo:
            admin.create_acls([binding], request_timeout=TIMEOUT)[binding].result(TIMEOUT)
        assert _error_code(excinfo) == KafkaError.SECURITY_DISABLED
        flt = _filter("t")
        with pytest.raises(KafkaException) as excinfo:
            admin.delete_acls([flt], request_timeout=TIMEOUT)[flt].result(TIMEOUT)
        assert _error_code(excinfo) == KafkaError.SECURITY_DISABLED


def test_acls_apis_need_cluster_describe_and_alter():
    # No super user; allow.everyone lets the first CreateAcls through (the cluster has no ACL
    # yet). It grants DESCRIBE and denies ALTER on the cluster: from then on DescribeAcls works
    # and CreateAcls / DeleteAcls are refused.
    config = {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedCluster(config=config) as cluster:
        admin = _admin(cluster)
        describe = _binding(
            "kafka-cluster", ANONYMOUS, AclOperation.DESCRIBE, restype=ResourceType.BROKER
        )
        no_alter = _binding(
            "kafka-cluster",
            ANONYMOUS,
            AclOperation.ALTER,
            restype=ResourceType.BROKER,
            perm=AclPermissionType.DENY,
        )
        _create(admin, [describe, no_alter])
        assert _describe(admin, _filter()) == {describe, no_alter}
        assert _raw_describe(cluster).error_code == 0
        binding = _binding("t")
        with pytest.raises(KafkaException) as excinfo:
            admin.create_acls([binding], request_timeout=TIMEOUT)[binding].result(TIMEOUT)
        assert _error_code(excinfo) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        flt = _filter()
        with pytest.raises(KafkaException) as excinfo:
            admin.delete_acls([flt], request_timeout=TIMEOUT)[flt].result(TIMEOUT)
        assert _error_code(excinfo) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_acls_describe_refused_without_cluster_describe():
    config = {"authorizer.class.name": AUTHORIZER}  # no super user, no ACL: nothing allowed
    with EmbeddedCluster(config=config) as cluster:
        response = _raw_describe(cluster)
        assert response.error_code == int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        assert response.resources == []


# -- configuration ----------------------------------------------------------------------------


def test_acls_unknown_authorizer_class_is_refused_at_startup():
    with pytest.raises(InvalidConfigError, match="authorizer.class.name"):
        BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(InvalidConfigError, match="super.users"):
        BrokerConfig({"authorizer.class.name": AUTHORIZER, "super.users": "admin"})
