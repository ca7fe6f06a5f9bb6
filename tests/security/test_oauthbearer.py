"""SASL/OAUTHBEARER with unsecured JWS tokens, pure (kcore/security/oauthbearer.py): Kafka's
OAuthBearerUnsecuredValidatorCallbackHandler rules by example and by property, and the
authenticator's session lifetime from the token's expiry."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.protocol.errors import ErrorCode
from kcore.security.authenticator import Admission, SaslAuthenticator
from kcore.security.oauthbearer import (
    OAuthBearerError,
    OAuthBearerServer,
    UnsecuredValidatorOptions,
    client_first_message,
)
from kcore.security.sasl_config import SaslListenerConfig

NOW_MS = 1_700_000_000_000
INVALID = b'{"status":"invalid_token"}'


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def token(claims: dict | None = None, header: dict | None = None, signature: str = "") -> str:
    """An unsecured JWS: ``sub`` alice, issued now, valid for an hour unless ``claims`` say."""
    body = {"sub": "alice", "iat": NOW_MS / 1000, "exp": NOW_MS / 1000 + 3600, **(claims or {})}
    body = {k: v for k, v in body.items() if v is not None}
    return f"{_b64(header or {'alg': 'none'})}.{_b64(body)}.{signature}"


DEFAULTS = UnsecuredValidatorOptions()


def _exchange(message: bytes, options=DEFAULTS, now=NOW_MS):
    server = OAuthBearerServer(options)
    return server, server.evaluate(message, now)


def test_oauthbearer_valid_token_gives_its_sub_and_expiry():
    server, answer = _exchange(client_first_message(token()))
    assert answer == b"" and server.complete
    assert server.username == "alice" and server.credential_expiry_ms == NOW_MS + 3_600_000


def test_oauthbearer_principal_claim_name_option():
    options = UnsecuredValidatorOptions.from_options(
        {"unsecuredValidatorPrincipalClaimName": "client_id"}
    )
    server, _ = _exchange(client_first_message(token({"client_id": "svc"})), options)
    assert server.username == "svc"


@pytest.mark.parametrize(
    "bad",
    [
        token({"exp": NOW_MS / 1000}),  # expires now
        token({"exp": NOW_MS / 1000 - 1}),  # expired
        token({"exp": None}),  # no expiry
        token({"exp": "soon"}),
        token({"sub": None}),
        token({"sub": "  "}),
        token({"sub": 7}),
        token({"iat": NOW_MS / 1000 + 60}),  # issued in the future
        token({"iat": NOW_MS / 1000 + 10, "exp": NOW_MS / 1000 + 5}),
        token(header={"alg": "HS256"}),
        token(signature="c2ln"),
        "only.two",
        "a..b",
        "abc.def.",  # not JSON
        f"{_b64({'alg': 'none'})}.{_b64([1])}.",  # claims not an object
    ],
)
def test_oauthbearer_invalid_token_answers_json_then_fails_on_the_clients_ctrl_a(bad):
    server, answer = _exchange(client_first_message(bad))
    assert answer == INVALID and not server.complete
    with pytest.raises(OAuthBearerError) as failure:
        server.evaluate(b"\x01", NOW_MS)
    assert str(failure.value) == INVALID.decode()


def test_oauthbearer_clock_skew_admits_a_just_expired_token():
    options = UnsecuredValidatorOptions(allowable_clock_skew_ms=5000)
    server, answer = _exchange(
        client_first_message(token({"exp": NOW_MS / 1000 - 2, "iat": None})), options
    )
    assert answer == b"" and server.complete


def test_oauthbearer_required_scope_missing_is_insufficient_scope():
    options = UnsecuredValidatorOptions.from_options(
        {"unsecuredValidatorRequiredScope": "produce consume"}
    )
    server, answer = _exchange(client_first_message(token({"scope": ["produce"]})), options)
    assert answer == b'{"status":"insufficient_scope", "scope":"[produce, consume]"}'
    server, answer = _exchange(
        client_first_message(token({"scope": ["produce", "consume", "x"]})), options
    )
    assert answer == b"" and server.complete


def test_oauthbearer_scope_claim_name_option_and_string_scope():
    options = UnsecuredValidatorOptions.from_options(
        {"unsecuredValidatorScopeClaimName": "scp", "unsecuredValidatorRequiredScope": "write"}
    )
    server, answer = _exchange(client_first_message(token({"scp": "write"})), options)
    assert server.complete


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,\x01\x01",  # no auth
        b"n,,\x01auth=Basic abc\x01\x01",
        b"n,,\x01auth=Bearer\x01\x01",
        b"y,,\x01auth=Bearer a.b.\x01\x01",
        b"n,,auth=Bearer a.b.\x01\x01",
        b"\x01",  # a ctrl-A before any error
        b"\xff\xfe",
    ],
)
def test_oauthbearer_malformed_first_message_fails_at_once(message):
    with pytest.raises(OAuthBearerError):
        _exchange(message)


def test_oauthbearer_extensions_accepted_and_authzid_must_be_the_principal():
    server, _ = _exchange(client_first_message(token(), traceId="123"))
    assert server.complete
    assert _exchange(client_first_message(token(), authzid="alice"))[0].complete
    with pytest.raises(OAuthBearerError, match="authorization id"):
        _exchange(client_first_message(token(), authzid="bob"))


def test_oauthbearer_options_refuse_a_negative_clock_skew():
    with pytest.raises(ValueError):
        UnsecuredValidatorOptions.from_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})
    with pytest.raises(ValueError):
        UnsecuredValidatorOptions.from_options({"unsecuredValidatorAllowableClockSkewMs": "x"})


@given(
    sub=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(
        str.strip
    ),
    lifetime_s=st.integers(-10_000, 10_000),
    skew_ms=st.integers(0, 20_000),
)
def test_oauthbearer_property_accepted_exactly_while_now_minus_skew_is_before_exp(
    sub, lifetime_s, skew_ms
):
    exp = NOW_MS / 1000 + lifetime_s
    options = UnsecuredValidatorOptions(allowable_clock_skew_ms=skew_ms)
    message = client_first_message(token({"sub": sub, "exp": exp, "iat": None}))
    server, answer = _exchange(message, options)
    assert server.complete == (NOW_MS - skew_ms < exp * 1000)
    if server.complete:
        assert server.username == sub and server.credential_expiry_ms == round(exp * 1000)
    else:
        assert answer == INVALID


@given(st.binary(max_size=200))
def test_oauthbearer_property_garbage_never_authenticates(message):
    server = OAuthBearerServer(UnsecuredValidatorOptions())
    try:
        answer = server.evaluate(message, NOW_MS)
    except OAuthBearerError:
        return
    assert not server.complete and answer.startswith(b'{"status":')


# -- the authenticator: session lifetime from the token's expiry (KIP-368) --------------------


def _authenticator(reauth_ms: int = 0) -> SaslAuthenticator:
    config = SaslListenerConfig(
        listener="SASL_PLAINTEXT",
        mechanisms=("OAUTHBEARER",),
        reauth_ms={"OAUTHBEARER": reauth_ms},
    )
    return SaslAuthenticator(config, lambda kind, user: None)


def _login(auth, message: bytes, now=NOW_MS):
    assert auth.admit(17, "SaslHandshake", now) is Admission.SASL
    assert auth.handshake("OAUTHBEARER", 1).error_code == 0
    assert auth.admit(36, "SaslAuthenticate", now) is Admission.SASL
    return auth.authenticate(message, now)


def test_oauthbearer_session_lasts_until_the_token_expires():
    auth = _authenticator()
    result = _login(auth, client_first_message(token({"exp": NOW_MS / 1000 + 60})))
    assert result.complete and auth.principal == "User:alice"
    assert result.session_lifetime_ms == 60_000
    assert auth.admit(3, "Metadata", NOW_MS + 59_999) is Admission.SERVE
    assert auth.admit(3, "Metadata", NOW_MS + 60_000) is Admission.CLOSE


def test_oauthbearer_session_lifetime_is_the_earlier_of_token_and_max_reauth():
    auth = _authenticator(reauth_ms=10_000)
    result = _login(auth, client_first_message(token({"exp": NOW_MS / 1000 + 60})))
    assert result.session_lifetime_ms == 10_000


def test_oauthbearer_failure_through_the_authenticator_is_sasl_authentication_failed():
    auth = _authenticator()
    first = _login(auth, client_first_message(token({"exp": NOW_MS / 1000 - 60})))
    assert (first.error_code, first.auth_bytes, first.failed) == (0, INVALID, False)
    assert auth.admit(36, "SaslAuthenticate", NOW_MS) is Admission.SASL
    second = auth.authenticate(b"\x01", NOW_MS)
    assert second.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and second.failed
    assert second.error_message == INVALID.decode()
