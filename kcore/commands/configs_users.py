"""``kcore configs --entity-type users``: SCRAM credentials, as ``kafka-configs.sh`` handles
them (Kafka's ``ConfigCommand.alterUserScramCredentialConfigs`` and
``describeClientQuotaAndUserScramCredentialConfigs``)::

    kcore configs --bootstrap-server :9092 --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    Completed updating config for user alice.
    kcore configs --bootstrap-server :9092 --describe --entity-type users --entity-name alice
    SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096
    kcore configs --bootstrap-server :9092 --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-512

A credential's value is ``[iterations=<n>,]password=<password>`` (4096 iterations by default,
Kafka's); the password is salted here and only the salted password is sent. ``--describe``
without a name lists every user with a credential. User quotas (``producer_byte_rate`` ...) are
refused: kcore does not serve them.
"""

from __future__ import annotations

import argparse
import re

from kcore.client.cluster import KafkaClient
from kcore.client.scram import (
    alter_user_scram_credentials,
    deletion,
    describe_user_scram_credentials,
    upsertion,
)
from kcore.commands._common import Refused, error_text
from kcore.protocol.errors import error_info
from kcore.security.scram import MECHANISMS, mechanism_by_type

__all__ = ["run"]

DEFAULT_ITERATIONS = 4096  # Kafka's ConfigCommand.DefaultScramIterations
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)
_QUOTAS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
           "controller_mutation_rate")  # fmt: skip


def _mechanism(key: str):
    if key in _QUOTAS:
        raise Refused(f"kcore does not serve user quotas ({key}); only SCRAM credentials")
    mechanism = MECHANISMS.get(key)
    if mechanism is None:
        raise Refused(f"Invalid config(s): {key}")
    return mechanism


def _upsertion(user: str, key: str, value: str):
    mechanism = _mechanism(key)
    match = _CREDENTIAL.fullmatch(value)
    if match is None:
        # The value holds the password: name the mechanism only.
        raise Refused(f"Invalid credential property {key}: expected [iterations=<n>,]password=<p>")
    text, password = match.groups()
    iterations = int(text) if text not in (None, "", "-1") else DEFAULT_ITERATIONS
    if iterations < mechanism.min_iterations:
        raise Refused(
            f"Iterations {iterations} is less than the minimum {mechanism.min_iterations} "
            f"required for {mechanism.name}"
        )
    return upsertion(user, mechanism, password, iterations)


async def run(client: KafkaClient, args: argparse.Namespace, to_add, to_delete) -> int:
    if args.alter:
        return await _alter(client, args.name, to_add, to_delete)
    return await _describe(client, args.name)


async def _alter(client: KafkaClient, user: str, to_add: dict[str, str], to_delete) -> int:
    upserts = [_upsertion(user, k, v) for k, v in to_add.items()]
    deletes = [deletion(user, _mechanism(k)) for k in to_delete]
    response = await alter_user_scram_credentials(client, upsertions=upserts, deletions=deletes)
    for result in response.results:
        if result.error_code:
            raise Refused(
                "Error while executing config command: "
                + error_text(result.error_code, result.error_message)
            )
    print(f"Completed updating config for user {user}.")
    return 0


async def _describe(client: KafkaClient, user: str | None) -> int:
    response = await describe_user_scram_credentials(client, None if user is None else [user])
    if response.error_code:
        raise Refused(
            "Error while executing config command: "
            + error_text(response.error_code, response.error_message)
        )
    for result in response.results:
        if result.error_code:
            # Kafka prints the exception's simple name: ResourceNotFoundException for 91.
            name = "".join(w.capitalize() for w in error_info(result.error_code)[0].split("_"))
            print(
                f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                f"{name}Exception: {result.error_message}"
            )
            continue
        infos = ", ".join(
            f"{mechanism_by_type(c.mechanism).name}=iterations={c.iterations}"
            for c in result.credential_infos
            if mechanism_by_type(c.mechanism) is not None
        )
        print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
    return 0
