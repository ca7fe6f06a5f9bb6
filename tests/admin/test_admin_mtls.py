"""Client certificates on an https:// admin listener (``admin.ssl.client.auth``): the
certificate's subject, mapped by ``ssl.principal.mapping.rules`` as a Kafka SSL listener maps
it, is the principal the broker's authorizer judges; bearer tokens keep working beside it; a
certificate no rule maps, or none where one is required, is refused. Certificates by trustme,
requests by httpx over real sockets."""

from __future__ import annotations

import ssl

import httpx
import pytest
import trustme

from kcore.testing import EmbeddedCluster
from kcore.testing.embedded import free_port
from tests.security.conftest import make_pki

pytestmark = pytest.mark.timeout(180)

# CN=<name>,OU=<unit>,... -> <name>@<unit> for the units eng and ops; any other unit is refused.
RULES = "RULE:^CN=([^,]*),OU=(eng|ops),.*$/$1@$2/L"
ROOT_TOKEN = "r00t-t0ken"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("admin-pki"))


def _cluster(pki, client_auth: str, **extra: str) -> tuple[EmbeddedCluster, str]:
    port = free_port()
    config = {
        "admin.listeners": f"https://127.0.0.1:{port}",
        "admin.ssl.certfile": str(pki.server_file),
        "admin.ssl.keyfile": str(pki.server_file),
        "admin.ssl.client.auth": client_auth,
        "admin.ssl.truststore.location": str(pki.ca_file),
        "ssl.principal.mapping.rules": RULES,
        "authorizer.class.name": "kcore.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:root@ops",
        **extra,
    }
    return EmbeddedCluster(config=config), f"https://127.0.0.1:{port}"


def _http(pki, url: str, cert: dict | None = None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        context.load_cert_chain(cert["cert"], cert["key"])
    return httpx.Client(base_url=url, verify=context, timeout=60)


def _create(http: httpx.Client, name: str, **headers: str) -> httpx.Response:
    return http.post("/v1/topics", json={"name": name, "partitions": 1}, headers=headers or None)


@pytest.fixture(scope="module")
def requested(pki, tmp_path_factory):
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(f"User:root@ops {ROOT_TOKEN}\n")
    cluster, url = _cluster(pki, "requested", **{"admin.auth.token.file": str(tokens)})
    with cluster:
        yield url


def test_the_certificates_mapped_subject_is_the_principal_the_acls_judge(pki, requested):
    with _http(pki, requested, pki.client("root", "ops")) as root:
        answer = _create(root, "made-by-root")
        assert answer.status_code == 201, answer.text  # User:root@ops is a super user
    with _http(pki, requested, pki.client("alice", "eng")) as alice:
        answer = _create(alice, "made-by-alice")
        assert answer.status_code == 403, answer.text  # User:alice@eng has no ACL
        assert answer.json()["error"] == "TOPIC_AUTHORIZATION_FAILED"
        assert alice.get("/v1/topics/made-by-root").status_code == 403
        # A bearer token is the caller's principal whatever certificate came with it.
        answer = _create(alice, "made-with-a-token", Authorization=f"Bearer {ROOT_TOKEN}")
        assert answer.status_code == 201, answer.text
        wrong = _create(alice, "wrong-token", Authorization="Bearer nope")
        assert wrong.status_code == 401


def test_without_a_certificate_tokens_still_work_and_nothing_else_does(pki, requested):
    with _http(pki, requested) as anonymous:
        assert anonymous.get("/health/live").status_code == 200
        refused = anonymous.get("/v1/topics")
        assert refused.status_code == 401
        assert "client certificate" in refused.json()["message"]
        answer = anonymous.get("/v1/topics", headers={"Authorization": f"Bearer {ROOT_TOKEN}"})
        assert answer.status_code == 200, answer.text


def test_a_certificate_no_rule_maps_is_refused(pki, requested):
    with _http(pki, requested, pki.client("mallory", "sales")) as mallory:
        answer = mallory.get("/v1/topics")
        assert answer.status_code == 401
        assert answer.json()["error"] == "UNAUTHENTICATED"
        assert "client certificate refused" in answer.json()["message"]
        assert mallory.get("/health/ready").status_code in (200, 503)  # probes stay open


def test_required_client_auth_serves_certificates_only_and_needs_no_token_file(pki):
    cluster, url = _cluster(pki, "required")
    with cluster:
        with _http(pki, url, pki.client("root", "ops")) as root:
            answer = _create(root, "made-over-mtls")
            assert answer.status_code == 201, answer.text
        with _http(pki, url, pki.client("bob", "eng")) as bob:
            assert _create(bob, "made-by-bob").status_code == 403
        with _http(pki, url) as anonymous, pytest.raises(httpx.TransportError):
            anonymous.get("/health/live")  # the handshake wants a certificate
        stranger = pki.client("eve", "ops", ca=trustme.CA())
        with _http(pki, url, stranger) as eve, pytest.raises(httpx.TransportError):
            eve.get("/v1/topics")  # signed by a CA the truststore does not hold
