"""SCRAM credential administration (KIP-554): what ``kafka-configs.sh --entity-type users``
and ``Admin.alterUserScramCredentials`` send.

The password never leaves the client: :func:`upsertion` salts it (32 random bytes) and sends
the salted password, as Kafka's admin client does; the controller keeps only the keys derived
from it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from kcore.client.cluster import KafkaClient
from kcore.protocol import messages as m
from kcore.security.scram import ScramMechanism, salted_password

__all__ = [
    "alter_user_scram_credentials",
    "deletion",
    "describe_user_scram_credentials",
    "upsertion",
]

_A = m.AlterUserScramCredentialsRequest


def upsertion(user: str, mechanism: ScramMechanism, password: str, iterations: int) -> Any:
    salt = secrets.token_bytes(32)
    return _A.ScramCredentialUpsertion(
        name=user,
        mechanism=mechanism.type,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(mechanism, password, salt, iterations),
    )


def deletion(user: str, mechanism: ScramMechanism) -> Any:
    return _A.ScramCredentialDeletion(name=user, mechanism=mechanism.type)


async def alter_user_scram_credentials(
    client: KafkaClient, *, upsertions: Iterable[Any] = (), deletions: Iterable[Any] = ()
) -> Any:
    """AlterUserScramCredentials (any broker forwards it to the controller); each user's
    error is in ``response.results``."""
    body = _A(deletions=list(deletions), upsertions=list(upsertions))
    return await client.request("any", body)


async def describe_user_scram_credentials(
    client: KafkaClient, users: Iterable[str] | None = None
) -> Any:
    """DescribeUserScramCredentials of ``users`` (None: every user with a credential)."""
    D = m.DescribeUserScramCredentialsRequest
    names = None if users is None else [D.UserName(name=u) for u in users]
    return await client.request("any", D(users=names))
