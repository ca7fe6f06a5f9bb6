"""kcore's own tools over SASL: ``kcore configs --entity-type users`` (kafka-configs.sh's SCRAM
lines), ``kcore format --add-scram`` (kafka-storage.sh's bootstrap credentials), and kcore's
client authenticating with PLAIN and SCRAM from the standard client keys."""

import pytest
import trio

from kcore.client.cluster import KafkaClient
from kcore.client.errors import AuthenticationFailed
from kcore.commands.format import parse_add_scram
from kcore.security.sasl_client import SaslClientError, sasl_client_settings
from tests.security.sasl_cluster import RawSasl, SaslCluster, scram_login
from tests.security.test_sasl_clients import python_client_kwargs
from tests.tools.tool import kcore

pytestmark = pytest.mark.timeout(240)

PLAIN_ADMIN = (
    "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret";\n'
)


def _scram_jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


@pytest.fixture(scope="module")
def cluster():
    with SaslCluster() as c:
        yield c


@pytest.fixture
def admin_config(tmp_path):
    path = tmp_path / "admin.properties"
    path.write_text(PLAIN_ADMIN)
    return str(path)


def configs(cluster, admin_config, *argv):
    return kcore(
        "configs", "--bootstrap-server", cluster.bootstrap_servers,
        "--command-config", admin_config, *argv,
    )  # fmt: skip


def test_configs_users_add_describe_delete_scram_credentials(cluster, admin_config):
    added = configs(
        cluster, admin_config, "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=alice-scram],SCRAM-SHA-512=[password=alice-scram]",
    )  # fmt: skip
    assert (added.returncode, added.stdout, added.stderr) == (
        0,
        "Completed updating config for user alice.\n",
        "",
    )
    described = configs(
        cluster, admin_config, "--describe", "--entity-type", "users", "--entity-name", "alice"
    )
    assert described.stdout == (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )
    with RawSasl(cluster.sasl_port) as raw:  # the credential works
        assert scram_login(raw, "SCRAM-SHA-256", "alice", "alice-scram").error_code == 0
    deleted = configs(
        cluster, admin_config, "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--delete-config", "SCRAM-SHA-512",
    )  # fmt: skip
    assert deleted.stdout == "Completed updating config for user alice.\n"
    listed = configs(cluster, admin_config, "--describe", "--entity-type", "users")
    assert listed.stdout == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192\n"
    )
    missing = configs(
        cluster, admin_config, "--describe", "--entity-type", "users", "--entity-name", "nobody"
    )
    assert missing.stdout == (
        "Error retrieving SCRAM credential configs for user-principal 'nobody': "
        "ResourceNotFoundException: Attempt to describe a user credential that does not exist\n"
    )


@pytest.mark.parametrize(
    "add, error",
    [
        ("SCRAM-SHA-256=[iterations=100,password=p]",
         "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256"),
        ("producer_byte_rate=1024", "kcore does not serve user quotas (producer_byte_rate)"),
        ("SCRAM-SHA-1=[password=p]", "Invalid config(s): SCRAM-SHA-1"),
    ],
)  # fmt: skip
def test_configs_users_refusals(cluster, admin_config, add, error):
    result = configs(
        cluster, admin_config, "--alter", "--entity-type", "users", "--entity-name", "bob",
        "--add-config", add,
    )  # fmt: skip
    assert result.returncode == 1 and error in result.stderr
    assert "=p" not in result.stderr


def test_topics_over_sasl_with_command_config(cluster, admin_config):
    B = ("--bootstrap-server", cluster.bootstrap_servers, "--command-config", admin_config)
    created = kcore("topics", *B, "--create", "--topic", "sasl-t", "--partitions", "2")
    assert created.returncode == 0 and created.stdout == "Created topic sasl-t.\n"
    listed = kcore("topics", *B, "--list")
    assert "sasl-t" in listed.stdout.split()
    anonymous = kcore("topics", "--bootstrap-server", cluster.bootstrap_servers, "--list")
    assert anonymous.returncode == 1  # no SASL: the broker closes the connection


def test_configs_over_sasl_with_a_wrong_password_fails_with_one_line(cluster, tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text(PLAIN_ADMIN.replace("admin-secret", "nope"))
    result = configs(cluster, str(path), "--describe", "--entity-type", "users")
    assert result.returncode == 1
    assert "SASL/PLAIN authentication as admin failed: Authentication failed: Invalid" in (
        result.stderr
    )
    assert "nope" not in result.stderr


def test_kcore_client_authenticates_with_scram_and_refuses_bad_settings(cluster, admin_config):
    configs(
        cluster, admin_config, "--alter", "--entity-type", "users", "--entity-name", "carl",
        "--add-config", "SCRAM-SHA-512=[password=carl-pw]",
    )  # fmt: skip

    async def metadata(password: str):
        settings = sasl_client_settings(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": _scram_jaas("carl", password),
            }
        )
        async with KafkaClient(cluster.bootstrap_servers, sasl=settings) as client:
            return await client.refresh_metadata([])

    assert trio.run(metadata, "carl-pw").brokers
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        trio.run(metadata, "wrong")
    for props, error in [
        ({"security.protocol": "SASL_SSL"}, "not supported by kcore's client"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI is not supported"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
         "sasl.jaas.config must be set"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
          "sasl.jaas.config": _scram_jaas("a", "b")}, "needs org.apache.kafka.common.security"),
        ({"sasl.mechanism": "PLAIN"}, "given with security.protocol=PLAINTEXT"),
    ]:  # fmt: skip
        with pytest.raises(SaslClientError, match=error):
            sasl_client_settings(props)


def test_console_producer_speaks_sasl_from_its_properties(cluster):
    from kafka import KafkaConsumer, TopicPartition

    jaas = _scram_jaas("admin", "admin-secret").replace(
        "scram.ScramLoginModule", "plain.PlainLoginModule"
    )
    produced = kcore(
        "console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "con",
        "--producer-property", "security.protocol=SASL_PLAINTEXT",
        "--producer-property", "sasl.mechanism=PLAIN",
        "--producer-property", f"sasl.jaas.config={jaas}",
        stdin="one\ntwo\n",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumer = KafkaConsumer(**python_client_kwargs(cluster, "PLAIN"), consumer_timeout_ms=10000)
    try:
        consumer.assign([TopicPartition("con", 0)])
        consumer.seek_to_beginning()
        assert [m.value for m in consumer][:2] == [b"one", b"two"]
    finally:
        consumer.close()


def test_format_add_scram_bootstraps_credentials_a_new_cluster_starts_with(tmp_path):
    cluster = SaslCluster(data_dir=tmp_path)
    overrides = []
    for key, value in cluster.broker_config(1).raw.items():
        overrides += ["--override", f"{key}={value}"]
    formatted = kcore(
        "format", *overrides,
        "--add-scram", "SCRAM-SHA-256=[name=root,password=root-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=root,iterations=8192,password=root-secret]",
    )  # fmt: skip
    assert formatted.returncode == 0, formatted.stderr
    with cluster:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            with RawSasl(cluster.sasl_port) as raw:
                assert scram_login(raw, mechanism, "root", "root-secret").error_code == 0
        creds = cluster.broker.metadata_image.scram.credentials
        assert creds[(2, "root")].iterations == 8192
    again = kcore("format", *overrides, "--add-scram", "SCRAM-SHA-256=[name=x,password=y]")
    assert again.returncode == 1 and "is already formatted" in again.stderr


@pytest.mark.parametrize(
    "text, error",
    [
        ("SCRAM-SHA-1=[name=a,password=b]", "MECHANISM one of SCRAM-SHA-256, SCRAM-SHA-512"),
        ("SCRAM-SHA-256=[password=b]", "name= is required"),
        ("SCRAM-SHA-256=[name=a]", "give password= or saltedpassword="),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=10]", "between 4096 and 16384"),
        ('SCRAM-SHA-256=[name=a,saltedpassword="AAAA"]', "needs salt="),
        ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "unknown field(s) colour"),
    ],
)
def test_format_add_scram_refuses_malformed_values(text, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_add_scram(text)


def test_format_add_scram_takes_kafkas_salted_form():
    from kcore.security.scram import MECHANISMS, credential_from_password

    record = parse_add_scram(
        'SCRAM-SHA-512=[name=alice,iterations=8192,salt="MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E=",'
        'saltedpassword="mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE="]'
    )
    assert (record.name, record.mechanism, record.iterations) == ("alice", 2, 8192)
    plain = parse_add_scram("SCRAM-SHA-256=[name=bob,password=pw]")
    expected = credential_from_password(MECHANISMS["SCRAM-SHA-256"], "pw", 4096, plain.salt)
    assert plain.stored_key == expected.stored_key and plain.server_key == expected.server_key
