"""SCRAM credentials in the metadata log: AlterUserScramCredentials and
DescribeUserScramCredentials (Kafka's ``ScramControlManager`` and the broker's describe), pure.

The controller turns each upsertion's salted password into the stored key and server key
(:func:`kcore.security.scram.credential_from_salted`) and writes a
``UserScramCredentialRecord``; only those keys, the salt and the iteration count are kept. A
deletion writes ``RemoveUserScramCredentialRecord``. Kafka's checks and messages, per user (one
failure fails every change of that user in the request, and nothing of it is written):

* a user's mechanism named twice in one request (deletions and upsertions together):
  DUPLICATE_RESOURCE;
* an empty user name: UNACCEPTABLE_CREDENTIAL;
* a mechanism byte other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM;
* fewer than 4096 or more than 16384 iterations: UNACCEPTABLE_CREDENTIAL;
* deleting a credential the user does not have: RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from kcore.metadata.context import ControllerContext, ControllerResult
from kcore.metadata.image import MetadataImage
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.security.scram import credential_from_salted, mechanism_by_type

__all__ = ["alter_user_scram_credentials", "credential_record", "describe_user_scram_credentials"]

_DUPLICATE = "A user credential cannot be altered twice in the same request"


def credential_record(user: str, mechanism: int, cred) -> m.UserScramCredentialRecord:
    """The record of ``user``'s credential for the mechanism type (a ScramCredential)."""
    return m.UserScramCredentialRecord(
        name=user,
        mechanism=mechanism,
        salt=cred.salt,
        stored_key=cred.stored_key,
        server_key=cred.server_key,
        iterations=cred.iterations,
    )


def _change_error(image: MetadataImage, change, deleting: bool) -> tuple[ErrorCode, str] | None:
    if not change.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = mechanism_by_type(change.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism."
    if deleting:
        if (change.mechanism, change.name) not in image.scram.credentials:
            return (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        return None
    if change.iterations < mechanism.min_iterations:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if change.iterations > mechanism.max_iterations:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not change.salt or not change.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt and salted password must be given"
    return None


def alter_user_scram_credentials(
    ctx: ControllerContext, request: m.AlterUserScramCredentialsRequest
) -> ControllerResult[m.AlterUserScramCredentialsResponse]:
    R = m.AlterUserScramCredentialsResponse
    changes: dict[str, list[tuple[bool, object]]] = {}  # user -> (deleting, change), in order
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: set[tuple[str, int]] = set()
    for deleting, items in ((True, request.deletions), (False, request.upsertions)):
        for change in items:
            # One user may change several mechanisms at once (kafka-configs.sh's
            # 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'), each at most once.
            if (change.name, change.mechanism) in seen:
                errors.setdefault(change.name, (ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE))
            seen.add((change.name, change.mechanism))
            changes.setdefault(change.name, []).append((deleting, change))
    records: list = []
    results = []
    for user, user_changes in changes.items():
        error = errors.get(user)
        if error is None:
            for deleting, change in user_changes:
                error = _change_error(ctx.image, change, deleting)
                if error is not None:
                    break
        if error is not None:
            results.append(
                R.AlterUserScramCredentialsResult(
                    user=user, error_code=int(error[0]), error_message=error[1]
                )
            )
            continue
        for deleting, change in user_changes:
            if deleting:
                records.append(
                    m.RemoveUserScramCredentialRecord(name=user, mechanism=change.mechanism)
                )
                continue
            mechanism = mechanism_by_type(change.mechanism)
            cred = credential_from_salted(
                mechanism, bytes(change.salted_password), bytes(change.salt), change.iterations
            )
            records.append(credential_record(user, change.mechanism, cred))
        results.append(R.AlterUserScramCredentialsResult(user=user, error_message=None))
    return ControllerResult.of(records, R(results=results))


def describe_user_scram_credentials(
    image: MetadataImage, request: m.DescribeUserScramCredentialsRequest
) -> m.DescribeUserScramCredentialsResponse:
    """Every user's mechanisms and iterations (``Users`` null or empty: every user with a
    credential). A user asked for twice: DUPLICATE_RESOURCE; unknown: RESOURCE_NOT_FOUND."""
    R = m.DescribeUserScramCredentialsResponse
    by_user: dict[str, list] = {}
    for (mechanism, user), cred in sorted(image.scram.credentials.items()):
        by_user.setdefault(user, []).append(
            R.CredentialInfo(mechanism=mechanism, iterations=cred.iterations)
        )
    names = [u.name for u in request.users] if request.users else sorted(by_user)
    results = []
    for name in dict.fromkeys(names):
        result = R.DescribeUserScramCredentialsResult(user=name, error_message=None)
        if names.count(name) > 1:
            result.error_code = int(ErrorCode.DUPLICATE_RESOURCE)
            result.error_message = (
                "Cannot describe SCRAM credentials for the same user twice in a single request"
            )
        elif name not in by_user:
            result.error_code = int(ErrorCode.RESOURCE_NOT_FOUND)
            result.error_message = "Attempt to describe a user credential that does not exist"
        else:
            result.credential_infos = by_user[name]
        results.append(result)
    return R(error_message=None, results=results)
