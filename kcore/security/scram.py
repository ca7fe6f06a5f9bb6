"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, sans-IO.

What this is
------------
* :data:`MECHANISMS`: Kafka's ``ScramMechanism`` table (name, the type byte of
  ``UserScramCredentialRecord`` / AlterUserScramCredentials, hash, iteration bounds).
* :func:`salted_password` and :func:`credential_from_salted`: Kafka's ``ScramFormatter`` —
  what AlterUserScramCredentials and ``kcore format --add-scram`` turn a password into. Only the
  stored key and server key are kept; the password and the salted password never are.
* :class:`ScramServer`: the broker's side of one exchange (client-first, server-first,
  client-final, server-final), fed the client's messages, returning the answers.
* :class:`ScramClient`: the client's side, for kcore's own clients (console tools, admin, and
  later the mirror's source connection).

Both sides are plain objects over bytes: no sockets, no clock, the nonce injectable (the tests
replay RFC 7677's exchange). Proofs and signatures are compared with ``hmac.compare_digest``.

Kafka's rules kept: usernames travel as RFC 5802 ``saslname`` (``=2C`` for ``,``, ``=3D`` for
``=``); an authorization id other than the username is refused; channel binding is not
supported (``p=``; Kafka neither); extensions after the nonce are accepted and ignored, except
``tokenauth=true`` (delegation tokens), which kcore does not serve and refuses.

An unknown user is not told apart from a wrong password: the server answers the first message
with a salt and iteration count derived from the name (:class:`ScramServer`'s ``secret``), and
fails at the proof, as RFC 5802 section 5.1 suggests, so user names cannot be probed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "credential_from_password",
    "credential_from_salted",
    "mechanism_by_name",
    "mechanism_by_type",
    "salted_password",
]


class ScramError(ValueError):
    """The exchange failed: a malformed message or wrong credentials (the message says which,
    without any secret in it)."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # SCRAM-SHA-256
    type: int  # the mechanism byte of the records and the admin APIs
    hash_name: str  # hashlib's name
    min_iterations: int
    max_iterations: int

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


# Kafka's ScramMechanism: the type bytes 1 and 2, at least 4096 iterations, at most 16384
# (ScramControlManager refuses more: a client can be made to spend that much per connect).
MECHANISMS = {
    m.name: m
    for m in (
        ScramMechanism("SCRAM-SHA-256", 1, "sha256", 4096, 16384),
        ScramMechanism("SCRAM-SHA-512", 2, "sha512", 4096, 16384),
    )
}
_BY_TYPE = {m.type: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a password (``UserScramCredentialRecord``; the metadata
    image's ``scram`` part holds these)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def mechanism_by_name(name: str) -> ScramMechanism | None:
    return MECHANISMS.get(name)


def mechanism_by_type(type_: int) -> ScramMechanism | None:
    return _BY_TYPE.get(type_)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int):
    """RFC 5802's ``Hi(Normalize(password), salt, i)`` (PBKDF2 with the mechanism's HMAC).
    Kafka does not SASLprep passwords; neither does kcore, so the same bytes give the same
    keys as Kafka's tools."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


# -- message syntax -------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode(), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"Invalid SCRAM {what}: not base64") from None


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unsaslname(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("Invalid SCRAM username: a '=' not followed by 2C or 3D")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """``a=value,b=value`` in order (values may hold '=')."""
    out = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        # Kafka's extensions (tokenauth=true) have longer names than RFC 5802's one letter.
        if not sep or not name.isascii() or not name.isalpha():
            raise ScramError(f"Invalid SCRAM {what}: {part!r} is not an attribute")
        out.append((name, value))
    return out


def _decode(message: bytes, what: str) -> str:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"Invalid SCRAM {what}: not UTF-8") from None
    if not text:
        raise ScramError(f"Invalid SCRAM {what}: empty")
    return text


def _nonce() -> str:
    # Printable ASCII without ',' (RFC 5802's "printable"); URL-safe base64 qualifies.
    return secrets.token_urlsafe(24)


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "y,," (or with a=authzid)
    username: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage
    extensions: dict[str, str]


def parse_client_first(message: bytes) -> ClientFirst:
    text = _decode(message, "client-first message")
    flag, sep1, rest = text.partition(",")
    authzid, sep2, bare = rest.partition(",")
    if not (sep1 and sep2) or flag not in ("n", "y"):
        if flag.startswith("p="):
            raise ScramError("SCRAM channel binding (p=) is not supported")
        raise ScramError("Invalid SCRAM client-first message: bad GS2 header")
    if authzid and not authzid.startswith("a="):
        raise ScramError("Invalid SCRAM client-first message: bad authorization id")
    attrs = _attributes(bare, "client-first message")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
        raise ScramError("Invalid SCRAM client-first message: expected n=<user>,r=<nonce>")
    username = _unsaslname(attrs[0][1])
    if not username:
        raise ScramError("Invalid SCRAM client-first message: empty username")
    if authzid and _unsaslname(authzid[2:]) != username:
        raise ScramError("Authentication failed: the authorization id must be the username")
    return ClientFirst(
        gs2_header=f"{flag},{authzid},",
        username=username,
        nonce=attrs[1][1],
        bare=bare,
        extensions=dict(attrs[2:]),
    )


# -- the server -----------------------------------------------------------------------------

CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange on the broker's side.

    ``lookup(username)`` gives the user's credential for this mechanism, or None. ``secret``
    (per broker, random by default) derives the fake salt of unknown users. Call
    :meth:`evaluate` with each client message; it returns the answer, or raises
    :class:`ScramError` (the exchange is then over). :attr:`complete` and :attr:`username` say
    who authenticated once the last answer was returned.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        nonce: str | None = None,
        secret: bytes | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = nonce or _nonce()
        self._secret = secret if secret is not None else _PROCESS_SECRET
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self.complete = False
        self.username: str | None = None

    def evaluate(self, message: bytes) -> bytes:
        if self.complete:
            raise ScramError("SCRAM exchange already complete")
        if self._first is None:
            return self._on_client_first(message)
        return self._on_client_final(message)

    def _on_client_first(self, message: bytes) -> bytes:
        first = parse_client_first(message)
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise ScramError("Authentication failed: delegation tokens are not supported")
        credential = self._lookup(first.username)
        self._known = credential is not None
        if credential is None:  # answer as for a real user; fail at the proof
            credential = self._fake_credential(first.username)
        self._first, self._credential = first, credential
        self._server_first = (
            f"r={first.nonce}{self._server_nonce},s={_b64(credential.salt)},"
            f"i={credential.iterations}"
        )
        return self._server_first.encode()

    def _fake_credential(self, username: str) -> ScramCredential:
        salt = self.mechanism.hmac(self._secret, username.encode())
        return ScramCredential(salt, b"", b"", self.mechanism.min_iterations)

    def _on_client_final(self, message: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        text = _decode(message, "client-final message")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramError("Invalid SCRAM client-final message: no proof")
        attrs = dict(_attributes(without_proof, "client-final message"))
        if attrs.get("c") is None or attrs.get("r") is None:
            raise ScramError("Invalid SCRAM client-final message: expected c=,r=,p=")
        if _unb64(attrs["c"], "channel binding") != first.gs2_header.encode():
            raise ScramError("Invalid SCRAM client-final message: channel binding mismatch")
        # Kafka's ScramSaslServer checks that the nonce *ends with* the server-first one, not
        # that it equals it, and clients rely on that: librdkafka before 2.x (Debian's kcat)
        # sends its own nonce again in front of the combined one. The proof covers the nonce
        # as sent (it is part of the AuthMessage), so nothing can be slipped in unsigned.
        if not attrs["r"].endswith(first.nonce + self._server_nonce):
            raise ScramError("Invalid SCRAM client-final message: nonce mismatch")
        proof = _unb64(proof_text, "proof")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        ok = self._known and len(proof) == len(signature)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        # Compared even for an unknown user, so both failures take the same time.
        ok = hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key) and ok
        if not ok:
            raise ScramError(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism.name}"
            )
        self.complete = True
        self.username = first.username
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()


_PROCESS_SECRET = secrets.token_bytes(32)


# -- the client -----------------------------------------------------------------------------


class ScramClient:
    """One SCRAM exchange on the client's side: :meth:`first_message`, then
    :meth:`evaluate` with each server message (the server-first gives the client-final; the
    server-final is checked and gives ``b""``). Raises :class:`ScramError`."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = nonce or _nonce()
        self._bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._sent_first = False
        self.complete = False

    def first_message(self) -> bytes:
        self._sent_first = True
        return f"n,,{self._bare}".encode()

    def evaluate(self, message: bytes) -> bytes:
        if not self._sent_first or self.complete:
            raise ScramError("SCRAM client: unexpected server message")
        if self._server_signature is None:
            return self._on_server_first(message)
        return self._on_server_final(message)

    def _on_server_first(self, message: bytes) -> bytes:
        text = _decode(message, "server-first message")
        attrs = dict(_attributes(text, "server-first message"))
        nonce, salt, iterations = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if "e" in attrs:
            raise ScramError(f"SCRAM server error: {attrs['e']}")
        if nonce is None or salt is None or iterations is None or not iterations.isdigit():
            raise ScramError("Invalid SCRAM server-first message: expected r=,s=,i=")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise ScramError("Invalid SCRAM server-first message: nonce mismatch")
        count = int(iterations)
        if count < self.mechanism.min_iterations:
            raise ScramError(f"Requested iterations {count} is less than the minimum allowed")
        salted = salted_password(self.mechanism, self._password, _unb64(salt, "salt"), count)
        client_key = self.mechanism.hmac(salted, b"Client Key")
        stored_key = self.mechanism.hash(client_key)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = self.mechanism.hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def _on_server_final(self, message: bytes) -> bytes:
        text = _decode(message, "server-final message")
        attrs = dict(_attributes(text, "server-final message"))
        if "e" in attrs:
            raise ScramError(f"SCRAM server error: {attrs['e']}")
        verifier = attrs.get("v")
        assert self._server_signature is not None
        if verifier is None or not hmac.compare_digest(
            _unb64(verifier, "server signature"), self._server_signature
        ):
            raise ScramError("Invalid SCRAM server-final message: bad server signature")
        self.complete = True
        return b""
