"""DescribeUserScramCredentials and AlterUserScramCredentials (Kafka's KIP-554 APIs).

AlterUserScramCredentials needs ALTER on the cluster and is forwarded to the controller
(:mod:`kcore.metadata.scram_control` validates and writes the records); it is answered once
they are committed, so a SASL/SCRAM login on this node right after succeeds once its image has
them (on the controller's node at once). DescribeUserScramCredentials needs DESCRIBE on the
cluster and reads this broker's metadata image. Refused: CLUSTER_AUTHORIZATION_FAILED, in the
top-level error of Describe and in every user's result of Alter. Passwords never travel here:
the client sends a salted password, and Describe returns mechanisms and iteration counts only.
"""

from __future__ import annotations

from kcore.metadata.acls import AclOperation
from kcore.metadata.scram_control import describe_user_scram_credentials
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server import authz
from kcore.server.handlers.controller_apis import error_response
from kcore.server.registry import HandlerRegistry

_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def register(registry: HandlerRegistry) -> None:
    @registry.register(50, 0, 0)
    async def describe_user_scram_credentials_handler(
        ctx, body: m.DescribeUserScramCredentialsRequest
    ) -> m.DescribeUserScramCredentialsResponse:
        if not authz.allowed_on_cluster(ctx, AclOperation.DESCRIBE):
            return m.DescribeUserScramCredentialsResponse(
                error_code=int(_DENIED), error_message=_DENIED.message
            )
        return describe_user_scram_credentials(ctx.server.metadata_image, body)

    @registry.register(51, 0, 0)
    async def alter_user_scram_credentials(
        ctx, body: m.AlterUserScramCredentialsRequest
    ) -> m.AlterUserScramCredentialsResponse:
        if not authz.allowed_on_cluster(ctx, AclOperation.ALTER):
            return error_response(51, body, int(_DENIED), _DENIED.message)
        try:
            return await ctx.server.controller_call(
                lambda c, now: c.alter_user_scram_credentials(body)
            )
        except KafkaError as e:
            return error_response(51, body, e.code, e.message)
