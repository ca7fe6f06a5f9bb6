"""The per-connection SASL state machine, pure (kcore/security/authenticator.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.protocol.errors import ErrorCode
from kcore.security.authenticator import (
    ADMITS,
    Admission,
    SaslAuthenticator,
    SaslState,
)
from kcore.security.plain import plain_message
from kcore.security.sasl_config import SaslListenerConfig
from kcore.security.scram import MECHANISMS, ScramClient, credential_from_password

API_VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA, PRODUCE = 18, 17, 36, 3, 0
SHA512 = MECHANISMS["SCRAM-SHA-512"]
CRED = credential_from_password(SHA512, "carol-pw", 4096)


def _auth(reauth_ms: int = 0) -> SaslAuthenticator:
    config = SaslListenerConfig(
        listener="SASL_PLAINTEXT",
        mechanisms=("PLAIN", "SCRAM-SHA-512"),
        plain_users={"alice": "pw", "bob": "pw2"},
        reauth_ms={"PLAIN": reauth_ms, "SCRAM-SHA-512": reauth_ms},
    )
    return SaslAuthenticator(
        config, lambda kind, user: CRED if (kind, user) == (2, "carol") else None
    )


def _login(auth, user="alice", password="pw", now=0, version=1):
    assert auth.admit(HANDSHAKE, "SaslHandshake", now) is Admission.SASL
    assert auth.handshake("PLAIN", version).error_code == 0
    if version:
        assert auth.admit(AUTHENTICATE, "SaslAuthenticate", now) is Admission.SASL
    return auth.authenticate(plain_message(user, password), now)


def test_only_api_versions_then_the_handshake_before_authentication():
    auth = _auth()
    assert auth.admit(API_VERSIONS, "ApiVersions", 0) is Admission.SERVE
    assert auth.state is SaslState.HANDSHAKE
    assert auth.admit(API_VERSIONS, "ApiVersions", 0) is Admission.CLOSE  # once, as Kafka
    assert "unexpected ApiVersions request" in auth.close_reason


@pytest.mark.parametrize("api_key, name", [(METADATA, "Metadata"), (PRODUCE, "Produce")])
def test_a_request_before_authentication_closes_the_connection(api_key, name):
    auth = _auth()
    assert auth.admit(api_key, name, 0) is Admission.CLOSE
    assert auth.principal == "User:ANONYMOUS"
    auth = _auth()
    auth.admit(HANDSHAKE, "SaslHandshake", 0)
    auth.handshake("PLAIN", 1)
    assert auth.admit(api_key, name, 0) is Admission.CLOSE  # between handshake and token


def test_plain_login_sets_the_principal_and_serves_everything():
    auth = _auth()
    result = _login(auth)
    assert result.complete and result.error_code == 0 and result.session_lifetime_ms == 0
    assert auth.principal == "User:alice" and auth.authenticated
    assert auth.admit(METADATA, "Metadata", 10**9) is Admission.SERVE  # no session limit


def test_handshake_v0_moves_to_raw_tokens():
    auth = _auth()
    auth.admit(HANDSHAKE, "SaslHandshake", 0)
    auth.handshake("PLAIN", 0)
    assert auth.expects_raw_token
    assert auth.authenticate(plain_message("alice", "pw"), 0).complete
    assert not auth.expects_raw_token


def test_mechanism_not_enabled_is_answered_with_the_enabled_ones_and_fails():
    auth = _auth()
    auth.admit(HANDSHAKE, "SaslHandshake", 0)
    result = auth.handshake("GSSAPI", 1)
    assert result.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and result.failed
    assert result.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert auth.state is SaslState.FAILED
    assert auth.admit(METADATA, "Metadata", 0) is Admission.CLOSE


def test_wrong_password_fails_with_sasl_authentication_failed():
    auth = _auth()
    result = _login(auth, password="nope")
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and result.failed
    assert result.error_message == "Authentication failed: Invalid username or password"
    assert auth.state is SaslState.FAILED and auth.principal == "User:ANONYMOUS"


def test_scram_login_through_the_authenticator():
    auth = _auth()
    auth.admit(HANDSHAKE, "SaslHandshake", 0)
    auth.handshake("SCRAM-SHA-512", 1)
    client = ScramClient(SHA512, "carol", "carol-pw")
    first = auth.authenticate(client.first_message(), 0)
    assert not first.complete and first.error_code == 0
    final = auth.authenticate(client.evaluate(first.auth_bytes), 0)
    assert final.complete and auth.principal == "User:carol"
    client.evaluate(final.auth_bytes)
    assert client.complete


def test_session_expires_and_reauthentication_renews_it():
    auth = _auth(reauth_ms=1000)
    assert _login(auth, now=0).session_lifetime_ms == 1000
    assert auth.admit(METADATA, "Metadata", 999) is Admission.SERVE
    # Re-authenticating (KIP-368) before the deadline: same principal, a new session.
    assert _login(auth, now=900).complete
    assert auth.admit(METADATA, "Metadata", 1899) is Admission.SERVE
    assert auth.admit(METADATA, "Metadata", 1900) is Admission.CLOSE
    assert "expired" in auth.close_reason


def test_a_handshake_after_the_session_expired_is_too_late():
    auth = _auth(reauth_ms=1000)
    _login(auth, now=0)
    assert auth.admit(HANDSHAKE, "SaslHandshake", 1000) is Admission.CLOSE


def test_reauthentication_may_not_change_the_principal():
    auth = _auth(reauth_ms=1000)
    _login(auth)
    result = _login(auth, user="bob", password="pw2", now=500)
    assert result.failed and "Cannot change principals" in result.error_message
    assert auth.state is SaslState.FAILED


def test_every_state_of_the_table_has_an_entry():
    assert set(ADMITS) == set(SaslState)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([API_VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA]), max_size=8))
def test_no_request_sequence_without_valid_credentials_reaches_a_handler(keys):
    # Whatever a client sends, without a password nothing but ApiVersions is ever served.
    auth = _auth()
    for key in keys:
        admission = auth.admit(key, str(key), 0)
        if admission is Admission.CLOSE:
            break
        if admission is Admission.SERVE:
            assert key == API_VERSIONS
        elif key == HANDSHAKE:
            auth.handshake("PLAIN", 1)
        else:
            auth.authenticate(plain_message("alice", "wrong"), 0)
    assert not auth.authenticated and auth.principal == "User:ANONYMOUS"
