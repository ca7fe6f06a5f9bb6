"""A mirror whose source is a kcore cluster on SASL_SSL with SCRAM (issue #18, spec M-114, D-25).

The source (test_sasl_ssl's SaslSslCluster) serves SASL_SSL with a trustme certificate and
ends SASL sessions after ``connections.max.reauth.ms`` (so a rotated password reaches the connections already open);
the destination's mirror logs in with its own ``security.protocol`` / ``sasl.*`` / ``ssl.*``
configs. It mirrors; rotating the password on the source fails the partitions with a reason
that names the refused login; altering the mirror's ``sasl.jaas.config`` reconnects it and it
converges. Neither password appears in any Describe, tool output, HTTP answer, metric or log
line of the whole test (caplog at DEBUG over every thread of this process). A mirror also
reaches a source over mutual TLS with its key pair inline (``security.protocol=SSL``).
"""

from __future__ import annotations

import logging
import time
import uuid

import httpx
import pytest
import trio
from confluent_kafka import Producer

from kcore.client import KafkaClient
from kcore.client import mirrors as admin
from kcore.client.admin import describe_configs
from kcore.protocol import messages as m
from kcore.testing import EmbeddedCluster
from tests.security.test_sasl_ssl import SaslSslCluster
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(300)

WAIT_S = 120.0
PARTITIONS = 2
USER = "mirror-user"
SMALL = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


def scram_jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


def set_scram_password(cluster, user: str, password: str) -> None:
    """SCRAM-SHA-512 for ``user`` (over PLAINTEXT: no authorizer on this source), waiting until
    this broker's image has the new credential."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    key = ("SCRAM-SHA-512", user)
    credentials = cluster.broker.metadata_image.scram.credentials
    before = next((v for k, v in credentials.items() if tuple(map(str, k)) == key), None)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    wait_for(
        lambda: any(
            k[1] == user and v is not before
            for k, v in cluster.broker.metadata_image.scram.credentials.items()
        ),
        "the new SCRAM credential in the source's image",
    )


def produce(cluster, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(topic, value=f"record-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def wait_for(predicate, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def on(cluster, call):
    async def main():
        async with KafkaClient(cluster.bootstrap_servers) as client:
            return await call(client)

    return trio.run(main)


def describe(destination, mirror: str) -> dict:
    response = on(destination, lambda c: admin.describe_cluster_mirrors(c, [mirror]))
    (described,) = response.mirrors
    assert described.error_code == 0, described.error_message
    return {(t.topic_name, p.partition_index): p for t in described.topics for p in t.partitions}


def in_sync(source, destination, mirror: str, topic: str) -> bool:
    parts = describe(destination, mirror)
    for p in range(PARTITIONS):
        detail = parts.get((topic, p))
        src = source.leader_partition((topic, p))
        dst = destination.leader_partition((topic, p))
        if detail is None or detail.state != "MIRRORING" or src is None or dst is None:
            return False
        if dst.log_end_offset < src.last_stable_offset:
            return False
    return True


def mirror_configs(pki, source, password: str) -> dict[str, str]:
    """A mirror of ``source``'s SASL_SSL listener as USER with ``password`` (SCRAM-SHA-512),
    trusting the test CA inline."""
    return {
        "bootstrap.servers": source.sasl_ssl_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": scram_jaas(USER, password),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.cert_pem.bytes().decode(),
    }


def set_mirror_config(mirror: str, key: str, value: str) -> m.IncrementalAlterConfigsRequest:
    """IncrementalAlterConfigs SET of one key on the mirror's CLUSTER_MIRROR resource (64)."""
    A = m.IncrementalAlterConfigsRequest
    return A(
        resources=[
            A.AlterConfigsResource(
                resource_type=64,
                resource_name=mirror,
                configs=[A.AlterableConfig(name=key, config_operation=0, value=value)],
            )
        ]
    )


def test_mirror_from_a_sasl_ssl_source_fails_on_rotation_and_recovers_on_alter(pki, caplog):
    caplog.set_level(logging.DEBUG)
    old = f"old-{uuid.uuid4().hex}"
    new = f"new-{uuid.uuid4().hex}"
    mirror, topic = f"sec-{uuid.uuid4().hex[:6]}", f"orders-{uuid.uuid4().hex[:6]}"
    # No automatic retry: only the altered config brings the partitions back.
    destination_config = {**SMALL, "mirror.failed.max.retries": "0"}
    with (
        SaslSslCluster(pki, {"connections.max.reauth.ms": "2000"}) as source,
        EmbeddedCluster(config=destination_config, admin=True) as destination,
    ):
        set_scram_password(source, USER, old)
        source.create_topic(topic, PARTITIONS)
        produce(source, topic, 20)

        configs = mirror_configs(pki, source, old)
        created = on(destination, lambda c: admin.create_cluster_mirror(c, mirror, configs))
        assert created.error_code == 0, created.error_message
        started = on(destination, lambda c: admin.start_mirror_topics(c, mirror, [topic]))
        assert started.error_code == 0 and all(t.error_code == 0 for t in started.topics), started
        wait_for(lambda: in_sync(source, destination, mirror, topic), "the first sync")

        # The password changes on the source: once the open sessions end, every login fails.
        set_scram_password(source, USER, new)
        produce(source, topic, 20, start=20)

        def failed_for_credentials():
            parts = describe(destination, mirror)
            reasons = [d.failed_reason or "" for d in parts.values() if d.state == "FAILED"]
            return [r for r in reasons if "SASL_AUTHENTICATION_FAILED" in r]

        reasons = wait_for(failed_for_credentials, "FAILED with the refused login")
        wait_for(
            lambda: all(d.state == "FAILED" for d in describe(destination, mirror).values()),
            "every partition FAILED",
        )
        assert f"refused the credentials of mirror '{mirror}'" in reasons[0]
        assert USER in reasons[0]  # who was refused, never with what

        # The operator gives the mirror the new password: it reconnects, its FAILED partitions
        # are retried at once, and it converges.
        altered = kcore(
            "configs", "--bootstrap-server", destination.bootstrap_servers, "--alter",
            "--entity-type", "cluster-mirrors", "--entity-name", mirror,
            "--add-config", f"sasl.jaas.config=[{scram_jaas(USER, new)}]",  # "=" inside: bracketed
        )  # fmt: skip
        assert altered.returncode == 0, altered.stderr
        wait_for(lambda: in_sync(source, destination, mirror, topic), "the sync after alter")
        for p in range(PARTITIONS):
            assert destination.leader_partition((topic, p)).log_end_offset == 20

        # -- the passwords appear nowhere --------------------------------------------------
        shown: list[str] = []
        result = on(destination, lambda c: describe_configs(c, [(64, mirror)])).results[0]
        got = {c.name: (c.value, c.is_sensitive) for c in result.configs}
        assert got["sasl.jaas.config"] == (None, True)
        assert got["ssl.truststore.certificates"] == (None, True)
        assert got["security.protocol"] == ("SASL_SSL", False)
        shown += [repr(result), altered.stdout, altered.stderr]
        shown.append(repr(on(destination, lambda c: admin.describe_cluster_mirrors(c, [mirror]))))
        shown.append(repr(on(destination, lambda c: admin.list_cluster_mirrors(c))))
        for argv in (
            ("configs", "--describe", "--entity-type", "cluster-mirrors", "--entity-name", mirror),
            ("cluster-mirrors", "--describe", "--mirror", mirror),
            ("cluster-mirrors", "--describe", "--mirror", mirror, "--json"),
            ("cluster-mirrors", "--list"),
        ):
            done = kcore(argv[0], "--bootstrap-server", destination.bootstrap_servers, *argv[1:])
            assert done.returncode == 0, done.stderr
            shown += [done.stdout, done.stderr]
        with httpx.Client(base_url=destination.admin_url, timeout=60) as http:
            for path in ("/v1/mirrors", f"/v1/mirrors/{mirror}", "/metrics"):
                answer = http.get(path)
                assert answer.status_code == 200, (path, answer.text)
                shown.append(answer.text)
        shown += [r.getMessage() for r in caplog.records]
        shown += [r.exc_text or "" for r in caplog.records]
        for text in shown:
            assert old not in text and new not in text
        assert any("refused the credentials" in r.getMessage() for r in caplog.records)


def allow(cluster, principal: str, topic: str, operation) -> None:
    """An ALLOW ACL for ``operation`` on ``topic`` (over PLAINTEXT, whose ANONYMOUS is a super
    user of the source), once this broker's image has it."""
    from confluent_kafka.admin import (
        AclBinding,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )
    admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin_client.create_acls([binding]).values():
        future.result(timeout=30)
    wait_for(
        lambda: any(
            a.principal == principal and a.resource_name == topic and a.operation == operation.value
            for a in cluster.broker.metadata_image.acls.acls.values()
        ),
        f"the {operation} ACL in the source's image",
    )


def test_a_missing_source_acl_is_reported_with_the_acl_to_add(pki):
    from confluent_kafka.admin import AclOperation

    password = f"pw-{uuid.uuid4().hex}"
    mirror, topic = f"acl-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    authorizer = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }
    destination_config = {
        **SMALL,
        "mirror.failed.retry.backoff.ms": "300",
        "mirror.failed.max.retries": "1000",
    }
    with (
        SaslSslCluster(pki, authorizer) as source,
        EmbeddedCluster(config=destination_config) as destination,
    ):
        set_scram_password(source, USER, password)
        source.create_topic(topic, PARTITIONS)
        produce(source, topic, 10)
        configs = mirror_configs(pki, source, "wrong-" + password)
        # A wrong password is refused when the mirror is created: nothing is stored.
        refused = on(destination, lambda c: admin.create_cluster_mirror(c, mirror, configs))
        assert refused.error_code == 58, refused  # SASL_AUTHENTICATION_FAILED
        assert "refused the credentials" in refused.error_message
        assert password not in refused.error_message
        configs["sasl.jaas.config"] = scram_jaas(USER, password)
        created = on(destination, lambda c: admin.create_cluster_mirror(c, mirror, configs))
        assert created.error_code == 0, created.error_message

        # Describe lets the mirror see the topic; without DescribeConfigs Start is refused.
        principal = f"User:{USER}"
        allow(source, principal, topic, AclOperation.DESCRIBE)
        started = on(destination, lambda c: admin.start_mirror_topics(c, mirror, [topic]))
        assert started.error_code == 29, started  # TOPIC_AUTHORIZATION_FAILED
        assert (
            f"--add --allow-principal {principal} --operation DescribeConfigs --topic {topic}"
            in started.error_message
        )

        # Without Read the partitions fail, naming the ACL to add; with it they converge.
        allow(source, principal, topic, AclOperation.DESCRIBE_CONFIGS)
        started = on(destination, lambda c: admin.start_mirror_topics(c, mirror, [topic]))
        assert started.error_code == 0 and all(t.error_code == 0 for t in started.topics), started

        def failed_for_read():
            parts = describe(destination, mirror)
            return [
                d.failed_reason
                for d in parts.values()
                if d.state == "FAILED" and "TOPIC_AUTHORIZATION_FAILED" in (d.failed_reason or "")
            ]

        (reason, *_) = wait_for(failed_for_read, "FAILED for the missing Read ACL")
        assert (
            f"kcore acls --bootstrap-server {source.sasl_ssl_servers} --add --allow-principal "
            f"{principal} --operation Read --topic {topic}"
        ) in reason
        allow(source, principal, topic, AclOperation.READ)
        wait_for(lambda: in_sync(source, destination, mirror, topic), "the sync after the ACL")

        # The metadata sync says which cluster ACL its DescribeAcls lacks.
        def sync_errors():
            response = on(destination, lambda c: admin.describe_cluster_mirrors(c, [mirror]))
            return [e for e in response.mirrors[0].sync_errors if "DescribeAcls refused" in e]

        (error, *_) = wait_for(sync_errors, "the ACL sync's refusal")
        assert f"--add --allow-principal {principal} --operation Describe --cluster" in error, error


def test_a_mirror_over_mutual_tls_with_an_inline_key_pair(pki):
    from tests.security.conftest import TlsCluster

    leaf = pki.ca.issue_cert(
        "mirror.clients.test", common_name="mirror", organization_unit_name="dr"
    )
    chain = "".join(p.bytes().decode() for p in leaf.cert_chain_pems)
    key = leaf.private_key_pem.bytes().decode()
    mirror, topic = f"mtls-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    with TlsCluster(pki) as source, EmbeddedCluster(config=SMALL) as destination:
        source.create_topic(topic, PARTITIONS)
        produce(source, topic, 10)
        configs = {
            "bootstrap.servers": source.mtls_servers,
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pki.ca.cert_pem.bytes().decode(),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": chain,
            "ssl.keystore.key": key,
        }
        created = on(destination, lambda c: admin.create_cluster_mirror(c, mirror, configs))
        assert created.error_code == 0, created.error_message
        started = on(destination, lambda c: admin.start_mirror_topics(c, mirror, [topic]))
        assert started.error_code == 0 and all(t.error_code == 0 for t in started.topics), started
        wait_for(lambda: in_sync(source, destination, mirror, topic), "the sync over mTLS")

        result = on(destination, lambda c: describe_configs(c, [(64, mirror)])).results[0]
        got = {c.name: (c.value, c.is_sensitive) for c in result.configs}
        assert got["ssl.keystore.key"] == (None, True)
        assert got["ssl.keystore.certificate.chain"] == (None, True)
        assert "PRIVATE KEY" not in repr(result)
