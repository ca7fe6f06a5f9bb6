"""SCRAM (RFC 5802/7677), PLAIN and JAAS parsing, pure: test vectors and properties."""

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.security.jaas import JaasConfigError, parse_jaas_config
from kcore.security.plain import PlainError, PlainServer, plain_message
from kcore.security.scram import (
    MECHANISMS,
    ScramClient,
    ScramError,
    ScramServer,
    credential_from_password,
    parse_client_first,
)

SHA256, SHA512 = MECHANISMS["SCRAM-SHA-256"], MECHANISMS["SCRAM-SHA-512"]

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC = [
    b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
]


def _rfc_server():
    cred = credential_from_password(SHA256, "pencil", 4096, RFC_SALT)
    return ScramServer(SHA256, {"user": cred}.get, nonce=RFC_SERVER_NONCE)


def test_scram_sha_256_server_and_client_reproduce_rfc_7677_exchange():
    server = _rfc_server()
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == RFC[0]
    assert server.evaluate(RFC[0]) == RFC[1]
    assert client.evaluate(RFC[1]) == RFC[2]
    assert server.evaluate(RFC[2]) == RFC[3]
    assert server.complete and server.username == "user"
    assert client.evaluate(RFC[3]) == b"" and client.complete


def test_scram_server_refuses_rfc_exchange_with_a_flipped_proof_bit():
    server = _rfc_server()
    server.evaluate(RFC[0])
    proof = bytearray(base64.b64decode(RFC[2].rpartition(b",p=")[2]))
    proof[0] ^= 1
    final = RFC[2].rpartition(b",p=")[0] + b",p=" + base64.b64encode(bytes(proof))
    with pytest.raises(ScramError, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        server.evaluate(final)
    assert not server.complete


def test_scram_client_refuses_a_forged_server_signature():
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first_message()
    client.evaluate(RFC[1])
    with pytest.raises(ScramError, match="bad server signature"):
        client.evaluate(b"v=" + base64.b64encode(b"\0" * 32))


_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=20)
_passwords = st.text(min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    mechanism=st.sampled_from([SHA256, SHA512]),
    user=_names,
    password=_passwords,
    attempt=_passwords,
    iterations=st.integers(4096, 4200),
)
def test_scram_exchange_succeeds_exactly_when_the_password_matches(
    mechanism, user, password, attempt, iterations
):
    cred = credential_from_password(mechanism, password, iterations)
    server = ScramServer(mechanism, {user: cred}.get)
    client = ScramClient(mechanism, user, attempt)
    server_first = server.evaluate(client.first_message())
    final = client.evaluate(server_first)
    if attempt == password:
        client.evaluate(server.evaluate(final))
        assert server.username == user and client.complete
    else:
        with pytest.raises(ScramError, match="invalid credentials"):
            server.evaluate(final)


@settings(max_examples=30, deadline=None)
@given(user=_names, other=_names)
def test_scram_unknown_user_gets_a_stable_fake_salt_and_fails_only_at_the_proof(user, other):
    cred = credential_from_password(SHA256, "pw", 4096)
    known = {other: cred} if other != user else {}
    server = ScramServer(SHA256, known.get, secret=b"k" * 32)
    client = ScramClient(SHA256, user, "pw")
    first = server.evaluate(client.first_message())
    again = ScramServer(SHA256, known.get, secret=b"k" * 32)
    second = again.evaluate(ScramClient(SHA256, user, "pw").first_message())
    # The same salt and iterations each time: nothing tells an unknown user from a known one.
    assert first.split(b",", 1)[1] == second.split(b",", 1)[1]
    with pytest.raises(ScramError, match="invalid credentials"):
        server.evaluate(client.evaluate(first))


@settings(max_examples=60, deadline=None)
@given(junk=st.binary(max_size=80))
def test_scram_server_turns_any_garbage_into_scram_error(junk):
    server = ScramServer(SHA256, lambda user: None)
    with pytest.raises(ScramError):
        server.evaluate(junk)
        server.evaluate(junk)  # a first message that parsed: the final cannot be this


def test_scram_names_with_comma_and_equals_travel_escaped():
    client = ScramClient(SHA256, "a,b=c", "pw", nonce="n1")
    assert client.first_message() == b"n,,n=a=2Cb=3Dc,r=n1"
    assert parse_client_first(client.first_message()).username == "a,b=c"


@pytest.mark.parametrize(
    "message, error",
    [
        (b"p=tls-unique,,n=u,r=x", "channel binding"),
        (b"n,a=other,n=u,r=x", "authorization id"),
        (b"n,,r=x,n=u", "expected n=<user>,r=<nonce>"),
        (b"n,,n=a=2Xb,r=x", "'=' not followed"),
        (b"n,,n=u,r=x,tokenauth=true", "delegation tokens"),
    ],
)
def test_scram_server_refuses_what_kafka_refuses(message, error):
    with pytest.raises(ScramError, match=error):
        ScramServer(SHA256, lambda user: None).evaluate(message)


def test_scram_extensions_other_than_tokenauth_are_ignored():
    cred = credential_from_password(SHA256, "pw", 4096)
    server = ScramServer(SHA256, {"u": cred}.get)
    assert server.evaluate(b"n,,n=u,r=abc,ext=1").startswith(b"r=abc")


# -- PLAIN -----------------------------------------------------------------------------------


def test_plain_accepts_the_right_password_only():
    assert PlainServer({"alice": "s3"}).evaluate(plain_message("alice", "s3")) == b""
    for message in (plain_message("alice", "s4"), plain_message("mallory", "s3")):
        with pytest.raises(PlainError, match="Invalid username or password"):
            PlainServer({"alice": "s3"}).evaluate(message)


@pytest.mark.parametrize(
    "message, error",
    [
        (b"alice\0s3", "expected 3 tokens, got 2"),
        (b"\0\0s3", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"bob\0alice\0s3", "authorization id that is different"),
        (b"\xff\0alice\0s3", "not UTF-8"),
    ],
)
def test_plain_refuses_malformed_messages_with_kafkas_words(message, error):
    with pytest.raises(PlainError, match=error):
        PlainServer({"alice": "s3"}).evaluate(message)


# -- JAAS ------------------------------------------------------------------------------------


def test_jaas_parses_kafkas_plain_login_module_entry():
    module = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="admin-secret" // the broker\'s own\n'
        '  user_admin="admin-secret" /* alice: */ user_alice="a \\"quoted\\" pw" user_b=bare;'
    )
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": 'a "quoted" pw',
        "user_b": "bare",
    }
    assert "admin-secret" not in repr(module)


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "contains 0 login modules"),
        ("a.B required; c.D required;", "contains 2 login modules"),
        ('a.B required user_x="y"', "must end with ';'"),
        ("a.B mandatory;", "invalid control flag"),
        ("a.B required user_x=;", "Value not specified for key 'user_x'"),
        ('a.B required user_x="1" user_x="2";', "given twice"),
        ('a.B required user_x="unterminated;', "unterminated quoted value"),
        ("a.B;", "has no control flag"),
    ],
)
def test_jaas_refuses_malformed_configs_without_echoing_values(text, error):
    with pytest.raises(JaasConfigError, match=error) as err:
        parse_jaas_config(text)
    assert "unterminated;" not in str(err.value) and '"2"' not in str(err.value)


def _signed_final(nonce: str) -> bytes:
    """RFC 7677's client-final with ``nonce`` as its r=, properly signed for it."""
    from kcore.security.scram import _b64, salted_password

    cred = credential_from_password(SHA256, "pencil", 4096, RFC_SALT)
    salted = salted_password(SHA256, "pencil", RFC_SALT, 4096)
    client_key = SHA256.hmac(salted, b"Client Key")
    without_proof = f"c=biws,r={nonce}"
    auth = f"{RFC[0][3:].decode()},{RFC[1].decode()},{without_proof}".encode()
    signature = SHA256.hmac(cred.stored_key, auth)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={_b64(proof)}".encode()


def test_scram_server_takes_a_final_nonce_that_ends_with_the_server_first_one_as_kafka_does():
    # librdkafka before 2.x (Debian's kcat) repeats its own nonce in front: Kafka accepts it.
    combined = RFC_CLIENT_NONCE + RFC_SERVER_NONCE
    server = _rfc_server()
    server.evaluate(RFC[0])
    assert server.evaluate(_signed_final(RFC_CLIENT_NONCE + combined)).startswith(b"v=")
    assert server.complete


@pytest.mark.parametrize(
    "nonce",
    [RFC_CLIENT_NONCE, RFC_CLIENT_NONCE + RFC_SERVER_NONCE[:-1], RFC_CLIENT_NONCE + "x" * 30],
)
def test_scram_server_refuses_a_final_nonce_that_does_not_end_with_its_own(nonce):
    server = _rfc_server()
    server.evaluate(RFC[0])
    with pytest.raises(ScramError, match="nonce mismatch"):
        server.evaluate(_signed_final(nonce))
    assert not server.complete
