"""SCRAM credentials live in the metadata log: they survive a restart, and a restart from a
metadata snapshot; a deletion does too. Plus the API's refusals, with Kafka's errors."""

import time

import pytest

from kcore.protocol import messages as m
from kcore.security.scram import MECHANISMS, salted_password
from tests.security.sasl_cluster import RawSasl, SaslCluster, plain_login, scram_login
from tests.security.test_sasl_clients import add_scram_user

pytestmark = pytest.mark.timeout(240)

Upsertion = m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Deletion = m.AlterUserScramCredentialsRequest.ScramCredentialDeletion


def _logs_in(cluster, mechanism: str, user: str, password: str) -> bool:
    with RawSasl(cluster.sasl_port) as raw:
        return scram_login(raw, mechanism, user, password).error_code == 0


def _alter(cluster, request):
    with RawSasl(cluster.sasl_port) as raw:
        assert plain_login(raw, "admin", "admin-secret").error_code == 0
        return raw.call(51, 0, request)


def _upsert(name, mechanism=1, iterations=4096, password="pw"):
    salt = b"0123456789abcdef"
    scram = MECHANISMS["SCRAM-SHA-256" if mechanism == 1 else "SCRAM-SHA-512"]
    salted = salted_password(scram, password, salt, max(iterations, 1))
    return Upsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted
    )


def test_scram_credentials_survive_restarts_and_a_snapshot(tmp_path):
    config = {
        "metadata.log.max.record.bytes.between.snapshots": "2000",
        "broker.session.timeout.ms": "1500",
    }
    cluster = SaslCluster(config=config, data_dir=tmp_path)
    with cluster:
        add_scram_user(cluster, "carol", "carol-secret")
        add_scram_user(cluster, "erin", "erin-secret")
        cluster.restart()  # from the metadata log
        assert _logs_in(cluster, "SCRAM-SHA-256", "carol", "carol-secret")
        assert _logs_in(cluster, "SCRAM-SHA-512", "erin", "erin-secret")
        assert not _logs_in(cluster, "SCRAM-SHA-256", "carol", "erin-secret")

        deletion = m.AlterUserScramCredentialsRequest(
            deletions=[Deletion(name="erin", mechanism=2)]
        )
        assert _alter(cluster, deletion).results[0].error_code == 0
        for i in range(40):  # metadata enough for a snapshot, and a log cut after it
            cluster.create_topic(f"fill-{i:02d}")
        assert cluster.broker.snapshotter.snapshots_taken >= 1
        assert cluster.broker.quorum.log.start_offset > 0
        cluster.restart()  # from the snapshot (with the credentials in it) and the log after
        assert _logs_in(cluster, "SCRAM-SHA-512", "carol", "carol-secret")
        assert _logs_in(cluster, "SCRAM-SHA-256", "erin", "erin-secret")
        assert not _logs_in(cluster, "SCRAM-SHA-512", "erin", "erin-secret")  # deleted stays so


@pytest.fixture(scope="module")
def cluster():
    with SaslCluster() as c:
        yield c


@pytest.mark.parametrize(
    "request_, errors",
    [
        (m.AlterUserScramCredentialsRequest(upsertions=[_upsert("u1", iterations=4095)]),
         {"u1": (93, "Too few iterations")}),
        (m.AlterUserScramCredentialsRequest(upsertions=[_upsert("u2", iterations=16385)]),
         {"u2": (93, "Too many iterations")}),
        (m.AlterUserScramCredentialsRequest(upsertions=[_upsert("u3", mechanism=3)]),
         {"u3": (33, "Unknown SCRAM mechanism.")}),
        (m.AlterUserScramCredentialsRequest(upsertions=[_upsert("")]),
         {"": (93, "Username must not be empty")}),
        (m.AlterUserScramCredentialsRequest(deletions=[Deletion(name="nobody", mechanism=1)]),
         {"nobody": (91, "Attempt to delete a user credential that does not exist")}),
        (m.AlterUserScramCredentialsRequest(
            deletions=[Deletion(name="u4", mechanism=1)], upsertions=[_upsert("u4")]),
         {"u4": (92, "A user credential cannot be altered twice in the same request")}),
        (m.AlterUserScramCredentialsRequest(  # one bad change keeps the user's good one out
            upsertions=[_upsert("u5"), _upsert("u5", mechanism=2, iterations=1)]),
         {"u5": (93, "Too few iterations")}),
    ],
)  # fmt: skip
def test_alter_user_scram_credentials_refusals(cluster, request_, errors):
    response = _alter(cluster, request_)
    got = {r.user: (r.error_code, r.error_message) for r in response.results}
    assert got == errors
    time.sleep(0.1)
    assert not [k for k in cluster.broker.metadata_image.scram.credentials if k[1] in errors]


def test_describe_user_scram_credentials_lists_mechanisms_and_iterations_only(cluster):
    request = m.AlterUserScramCredentialsRequest(
        upsertions=[_upsert("frank", 1, 4096), _upsert("frank", 2, 8192)]
    )
    assert _alter(cluster, request).results[0].error_code == 0
    with RawSasl(cluster.sasl_port) as raw:
        assert plain_login(raw, "admin", "admin-secret").error_code == 0
        Name = m.DescribeUserScramCredentialsRequest.UserName
        response = raw.call(
            50,
            0,
            m.DescribeUserScramCredentialsRequest(
                users=[Name(name="frank"), Name(name="ghost"), Name(name="dup"), Name(name="dup")]
            ),
        )
    results = {r.user: r for r in response.results}
    assert [(c.mechanism, c.iterations) for c in results["frank"].credential_infos] == [
        (1, 4096),
        (2, 8192),
    ]
    assert results["ghost"].error_code == 91  # RESOURCE_NOT_FOUND
    assert results["dup"].error_code == 92  # DUPLICATE_RESOURCE
