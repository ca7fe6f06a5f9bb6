"""CLUSTER_MIRROR ACLs against real SASL principals (spec §12.1, M-111…M-113, issue #18).

The destination runs StandardAuthorizer with ``super.users`` = admin and the PLAINTEXT
listener's ANONYMOUS (the inter-broker principal, M-113); ``alice`` logs in with PLAIN over
SASL_PLAINTEXT with kcore's own client. For each mirror RPC alice is refused without the
operation of §12.1's table on ``CLUSTER_MIRROR:<mirror>``; the ACL is then added with
``kcore acls --cluster-mirror`` (as admin, from a ``--command-config``) and the same call is
served. The internal RPCs need CLUSTER_ACTION on the cluster, which no mirror ACL grants.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import trio

from kcore.client import KafkaClient
from kcore.client import mirrors as admin
from kcore.client.admin import describe_configs
from kcore.metadata.acls import AclOperation
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode as E
from kcore.security.client_security import client_security
from kcore.testing import EmbeddedCluster
from tests.security.sasl_cluster import PLAIN_USERS, SaslCluster
from tests.security.test_mirror_source_credentials import set_mirror_config
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(240)

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
}
DENIED = E.CLUSTER_AUTHORIZATION_FAILED


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _props(user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{PLAIN_USERS[user]}";',
    }


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    config = tmp_path_factory.mktemp("acl") / "admin.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in _props("admin").items()))
    with EmbeddedCluster() as source, SaslCluster(config=AUTHORIZER) as destination:
        source.create_topic("orders", 1)
        yield source, destination, str(config)


def as_user(destination, user: str, call):
    security = client_security(_props(user))

    async def main():
        async with KafkaClient(destination.bootstrap_servers, sasl=security.sasl) as client:
            return await call(client)

    return trio.run(main)


def grant(clusters, mirror: str, operation: str, principal: str = "User:alice") -> None:
    """``kcore acls --add --cluster-mirror`` as admin, then wait for the broker's image."""
    _, destination, admin_config = clusters
    done = kcore(
        "acls", "--bootstrap-server", destination.bootstrap_servers,
        "--command-config", admin_config, "--add", "--cluster-mirror", mirror,
        "--operation", operation, "--allow-principal", principal,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resourceType=CLUSTER_MIRROR" in done.stdout
    deadline = time.monotonic() + 30
    while not any(
        a.resource_name == mirror and a.principal == principal
        for a in destination.broker.metadata_image.acls.acls.values()
    ):
        assert time.monotonic() < deadline, "the ACL never reached the broker's image"
        time.sleep(0.05)


def make_mirror(clusters) -> str:
    source, destination, _ = clusters
    mirror = _name("m")
    configs = {"bootstrap.servers": source.bootstrap_servers}
    created = as_user(
        destination, "admin", lambda c: admin.create_cluster_mirror(c, mirror, configs)
    )
    assert created.error_code == 0, created.error_message
    return mirror


def _alter_configs(mirror: str):
    body = set_mirror_config(mirror, "request.timeout.ms", "9000")

    async def call(client):
        return (await client.request("any", body)).responses[0].error_code

    return call


def _describe_configs(mirror: str):
    async def call(client):
        return (await describe_configs(client, [(64, mirror)])).results[0].error_code

    return call


def _described(mirror: str):
    async def call(client):
        return (await admin.describe_cluster_mirrors(client, [mirror])).mirrors[0].error_code

    return call


def _top(fn):
    async def call(client):
        return (await fn(client)).error_code

    return call


# RPC -> (ACL operation of §12.1, the call as error code for mirror ``n``)
MATRIX = {
    "StartMirrorTopics": (
        "Alter",
        lambda n: _top(lambda c: admin.start_mirror_topics(c, n, [], include_patterns=["x.*"])),
    ),
    "StopMirrorTopics": (
        "Alter",
        lambda n: _top(lambda c: admin.stop_mirror_topics(c, n, [], patterns=["x.*"])),
    ),
    "PauseMirrorTopics": ("Alter", lambda n: _top(lambda c: admin.pause_mirror_topics(c, n, []))),
    "ResumeMirrorTopics": ("Alter", lambda n: _top(lambda c: admin.resume_mirror_topics(c, n, []))),
    "DeleteClusterMirror": ("Delete", lambda n: _top(lambda c: admin.delete_cluster_mirror(c, n))),
    "DescribeClusterMirrors": ("Describe", _described),
    "IncrementalAlterConfigs": ("AlterConfigs", _alter_configs),
    "DescribeConfigs": ("DescribeConfigs", _describe_configs),
}


@pytest.mark.parametrize("rpc", sorted(MATRIX))
def test_each_mirror_rpc_is_refused_without_its_cluster_mirror_acl_and_served_with_it(
    clusters, rpc
):
    _, destination, _ = clusters
    operation, make_call = MATRIX[rpc]
    mirror = make_mirror(clusters)
    assert as_user(destination, "alice", make_call(mirror)) == DENIED
    # Another operation, or the same one on another mirror, does not grant it (Kafka's ALTER,
    # DELETE, READ and WRITE imply DESCRIBE; CREATE does not).
    other = "Describe" if operation != "Describe" else "Create"
    grant(clusters, mirror, other)
    grant(clusters, _name("elsewhere"), operation)
    assert as_user(destination, "alice", make_call(mirror)) == DENIED
    grant(clusters, mirror, operation)
    assert as_user(destination, "alice", make_call(mirror)) == E.NONE


def test_create_needs_create_on_the_mirror_name_and_a_wildcard_grants_it(clusters):
    source, destination, _ = clusters
    mirror, wild = _name("c"), _name("w")
    configs = {"bootstrap.servers": source.bootstrap_servers}

    def create(name):
        return as_user(destination, "bob", lambda c: admin.create_cluster_mirror(c, name, configs))

    refused = create(mirror)
    assert refused.error_code == DENIED and mirror in refused.error_message
    grant(clusters, mirror, "Create", "User:bob")
    assert create(mirror).error_code == 0
    assert create(wild).error_code == DENIED
    grant(clusters, "*", "Create", "User:bob")
    assert create(wild).error_code == 0


def test_list_shows_only_the_mirrors_the_principal_may_describe(clusters):
    _, destination, _ = clusters
    seen, hidden = make_mirror(clusters), make_mirror(clusters)

    def listed(user):
        response = as_user(destination, user, admin.list_cluster_mirrors)
        assert response.error_code == 0
        return {x.mirror_name for x in response.mirrors}

    before = listed("alice")
    assert seen not in before and hidden not in before
    grant(clusters, seen, "Describe")
    after = listed("alice")
    assert seen in after and hidden not in after
    assert {seen, hidden} <= listed("admin")  # a super user sees every mirror


def test_authorized_operations_are_the_principal_s_cluster_mirror_acls(clusters):
    _, destination, _ = clusters
    mirror = make_mirror(clusters)
    grant(clusters, mirror, "Describe")
    grant(clusters, mirror, "Alter")

    async def call(client):
        response = await admin.describe_cluster_mirrors(
            client, [mirror], include_authorized_operations=True
        )
        return response.mirrors[0]

    described = as_user(destination, "alice", call)
    assert described.error_code == 0
    ops = {op for op in range(32) if described.authorized_operations & (1 << op)}
    assert ops == {int(AclOperation.DESCRIBE), int(AclOperation.ALTER)}


@pytest.mark.parametrize(
    "body",
    [m.ReadMirrorStatesRequest(), m.WriteMirrorStatesRequest()],
    ids=["ReadMirrorStates", "WriteMirrorStates"],
)
def test_internal_mirror_rpcs_need_cluster_action_not_a_mirror_acl(clusters, body):
    _, destination, _ = clusters
    grant(clusters, "*", "Alter", "User:bob")
    grant(clusters, "*", "Describe", "User:bob")

    async def call(client):
        return (await client.request("any", body)).error_code

    assert as_user(destination, "bob", call) == DENIED


def test_describe_acls_lists_a_mirror_s_acls_for_a_sasl_admin(clusters):
    _, destination, admin_config = clusters
    mirror = _name("l")
    grant(clusters, mirror, "Alter")
    grant(clusters, mirror, "DescribeConfigs")
    listed = kcore(
        "acls", "--bootstrap-server", destination.bootstrap_servers,
        "--command-config", admin_config, "--list", "--cluster-mirror", mirror,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == (
        "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER_MIRROR, "
        f"name={mirror}, patternType=LITERAL)`: "
    )
    entries = {line.strip() for line in lines[1:] if line.strip()}
    assert entries == {
        "(principal=User:alice, host=*, operation=ALTER, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)",
    }
    # A mirror ACL is no licence to read ACLs: alice's DescribeAcls needs DESCRIBE on the cluster.
    alice = Path(admin_config).with_name("alice.properties")
    alice.write_text("".join(f"{k}={v}\n" for k, v in _props("alice").items()))
    refused = kcore(
        "acls", "--bootstrap-server", destination.bootstrap_servers,
        "--command-config", str(alice), "--list", "--cluster-mirror", mirror,
    )  # fmt: skip
    assert refused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
