"""``kcore acls`` (``kafka-acls.sh``) as a process against a kcore running Kafka's
StandardAuthorizer: Kafka's output lines compared whole, and an ACL added or removed changing
whether a confluent-kafka producer may write.

The cluster allows everything that no ACL covers (``allow.everyone.if.no.acl.found=true``) and
has no super user, so the tool itself (``User:ANONYMOUS``, kcore speaks PLAINTEXT only) may
manage ACLs as long as no ACL names the cluster resource, and a DENY for ``User:ANONYMOUS`` on a
topic refuses its produce.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer

from kcore.commands.acls import HELP, USAGE
from kcore.testing import EmbeddedCluster

from .tool import kcore, one_line, usage_error, wrapper

pytestmark = pytest.mark.timeout(180)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def cluster():
    config = {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedCluster(config=config) as c:
        yield c


def acls(cluster, *argv: str, stdin: str | None = None):
    return kcore("acls", "--bootstrap-server", cluster.bootstrap_servers, *argv, stdin=stdin)


def _topic(cluster) -> str:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1)
    return name


def _produce_error(cluster, topic: str):
    """The error of producing one record to ``topic`` (None: it was written)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 10000})  # fmt: skip
    errors = []
    producer.produce(topic, b"v", on_delivery=lambda err, _: errors.append(err))
    producer.flush(30)
    return errors[0] if errors else None


def _pattern(kind: str, name: str, pattern: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"


def _acl(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (
        f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"
    )


def _block(title: str, *entries: str) -> str:
    """Kafka's block: the title line, `` \\t`` before the first ACL and ``\\t`` before the
    others, a space after the last, then an empty line."""
    return f"{title}: \n \t" + "\n\t".join(entries) + " \n\n"


def test_acls_help_is_kafkas_layout_and_the_wrapper_prints_it():
    done = wrapper("kafka-acls.sh", "--help")
    assert (done.returncode, done.stdout) == (0, HELP)
    lines = [line.rstrip() for line in HELP.splitlines()]  # joptsimple pads every line
    assert lines[0] == USAGE
    assert "--add                                    Indicates you are trying to add ACLs." in lines
    # joptsimple breaks after a hyphen too, and measures the column on the wrapped lines (39).
    at = lines.index(
        "--cluster-mirror <String: cluster-       Cluster mirror to which ACLs should be"
    )
    assert (
        lines[at + 1]
        == "  mirror>                                  added or removed. A value of '*'"
    )


def test_acls_deny_write_refuses_a_produce_until_removed(cluster):
    topic = _topic(cluster)
    assert _produce_error(cluster, topic) is None
    added = acls(cluster, "--add", "--deny-principal", "User:ANONYMOUS", "--operation", "Write",
                 "--topic", topic)  # fmt: skip
    assert (added.returncode, added.stderr) == (0, "")
    assert added.stdout == _block(
        f"Adding ACLs for resource `{_pattern('TOPIC', topic)}`",
        _acl("User:ANONYMOUS", "WRITE", "DENY"),
    )
    error = _produce_error(cluster, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    listed = acls(cluster, "--list", "--topic", topic)
    assert listed.stdout == _block(
        f"Current ACLs for resource `{_pattern('TOPIC', topic)}`",
        _acl("User:ANONYMOUS", "WRITE", "DENY"),
    )
    removed = acls(cluster, "--remove", "--force", "--topic", topic)
    assert (removed.returncode, removed.stdout, removed.stderr) == (0, "", "")
    assert _produce_error(cluster, topic) is None
    assert acls(cluster, "--list", "--topic", topic).stdout == ""


def test_acls_remove_asks_first_and_keeps_the_acls_unless_answered_y(cluster):
    topic = _topic(cluster)
    acls(
        cluster, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic
    )
    kept = acls(cluster, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                "--topic", topic, stdin="n\n")  # fmt: skip
    assert kept.stdout == (
        f"Are you sure you want to remove ACLs: \n \t{_acl('User:alice', 'READ')} \n"
        f" from resource filter `ResourcePatternFilter(resourceType=TOPIC, name={topic}, "
        "patternType=LITERAL)`? (y/n)\n"
    )
    assert _acl("User:alice", "READ") in acls(cluster, "--list", "--topic", topic).stdout
    gone = acls(cluster, "--remove", "--topic", topic, stdin="y\n")
    assert gone.stdout.startswith("Are you sure you want to delete all ACLs for resource filter")
    assert acls(cluster, "--list", "--topic", topic).stdout == ""


def test_acls_cluster_mirror_resource_as_the_spec_shows_it(cluster):
    mirror = f"mirror-{uuid.uuid4().hex[:6]}"
    added = acls(cluster, "--add", "--cluster-mirror", mirror,
                 "--operation", "Create", "--operation", "Alter", "--operation", "Describe",
                 "--operation", "Delete", "--operation", "AlterConfigs",
                 "--operation", "DescribeConfigs", "--allow-principal", "User:mirror-admin")  # fmt: skip
    entries = [
        _acl("User:mirror-admin", op)
        for op in ("CREATE", "ALTER", "DESCRIBE", "DELETE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS")
    ]
    assert added.stdout == _block(
        f"Adding ACLs for resource `{_pattern('CLUSTER_MIRROR', mirror)}`", *entries
    )
    listed = acls(cluster, "--list", "--cluster-mirror", mirror).stdout.splitlines()
    # The ACLs of a resource in the order the broker lists them (a set, in Kafka's tool).
    assert listed[0] == f"Current ACLs for resource `{_pattern('CLUSTER_MIRROR', mirror)}`: "
    assert sorted(line.strip() for line in listed[1:-1]) == sorted(entries)
    assert listed[-1] == ""
    by_principal = acls(cluster, "--list", "--cluster-mirror", mirror, "--principal", "User:x")
    assert by_principal.stdout == "ACLs for principal `User:x`\n"
    acls(cluster, "--remove", "--force", "--cluster-mirror", mirror)


def test_acls_producer_and_consumer_conveniences_make_kafkas_role_acls(cluster):
    topic = _topic(cluster)
    group = f"g-{topic}"
    added = acls(cluster, "--add", "--allow-principal", "User:app", "--producer", "--consumer",
                 "--topic", topic, "--group", group, "--transactional-id", "tx-1")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout == (
        _block(f"Adding ACLs for resource `{_pattern('TOPIC', topic)}`",
               *(_acl("User:app", op) for op in ("READ", "DESCRIBE", "WRITE", "CREATE")))
        + _block(f"Adding ACLs for resource `{_pattern('TRANSACTIONAL_ID', 'tx-1')}`",
                 _acl("User:app", "WRITE"), _acl("User:app", "DESCRIBE"))
        + _block(f"Adding ACLs for resource `{_pattern('GROUP', group)}`", _acl("User:app", "READ"))
    )  # fmt: skip
    prefixed = acls(cluster, "--add", "--allow-principal", "User:app", "--operation", "Read",
                    "--topic", topic[:6], "--resource-pattern-type", "prefixed")  # fmt: skip
    assert _pattern("TOPIC", topic[:6], "PREFIXED") in prefixed.stdout
    matching = acls(cluster, "--list", "--topic", topic, "--resource-pattern-type", "match")
    assert f"`{_pattern('TOPIC', topic)}`" in matching.stdout
    assert f"`{_pattern('TOPIC', topic[:6], 'PREFIXED')}`" in matching.stdout
    for args in (["--topic", topic], ["--group", group], ["--transactional-id", "tx-1"],
                 ["--topic", topic[:6], "--resource-pattern-type", "prefixed"]):  # fmt: skip
        acls(cluster, "--remove", "--force", *args)
    assert (
        acls(cluster, "--list", "--topic", topic, "--resource-pattern-type", "match").stdout == ""
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "principalType:principalName"),
        (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Unknown operation Fly"),
        (["--add", "--allow-principal", "User:a", "--operation", "IdempotentWrite", "--topic", "t"],
         "ResourceType Topic only supports operations"),
        (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
         "'--resource-pattern-type' value of 'MATCH' is not valid when adding acls"),
        (["--list", "--resource-pattern-type", "sideways"], "Unknown resource-pattern-type: sideways"),
        (["--add", "--list", "--topic", "t"], "exactly one action"),
        (["--list", "--allow-principal", "User:a"], 'Option "[list]" can\'t be used with option "[allow-principal]"'),
        (["--add", "--producer", "--allow-principal", "User:a"], "With --producer you must specify a --topic"),
        (["--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"], "With --consumer you must specify"),
        (["--add", "--idempotent", "--topic", "t", "--allow-principal", "User:a"], "--idempotent option is only available"),
        (["--remove", "--principal", "User:a", "--topic", "t"], "--principal option is only available if --list"),
        (["--list", "--nope"], "unrecognized arguments: --nope"),
    ],
)  # fmt: skip
def test_acls_usage_errors_exit_2_with_one_line(capsys, argv, message):
    status, out, err = usage_error(capsys, "acls", "--bootstrap-server", "127.0.0.1:1", *argv)
    assert (status, out) == (2, "")
    assert err.startswith("kcore acls: ") and message in err and err.count("\n") == 1


def test_acls_without_an_authorizer_or_a_broker_fail_with_one_line():
    with EmbeddedCluster() as plain:
        done = kcore("acls", "--bootstrap-server", plain.bootstrap_servers, "--list")
        assert "SECURITY_DISABLED" in one_line(done)
    down = kcore("acls", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert down.returncode == 1 and "127.0.0.1:1" in one_line(down)
