"""REST endpoints as thin calls into the Kafka APIs.

An endpoint builds the Kafka request it stands for and dispatches it through the broker's own
handler registry, as if it had come in on a client listener, with the HTTP caller's principal:
so the admin API gets exactly the authorizer checks, validation and error codes the Kafka API
has, and there is one implementation of each operation, not two that drift apart. A Kafka error
becomes an :class:`AdminError` carrying the Kafka error name and message, answered with the HTTP
status :func:`http_status` picks for it.
"""

from __future__ import annotations

import itertools
from typing import Any

from kcore.protocol.api import APIS_BY_NAME, RequestHeader, decode_response
from kcore.protocol.errors import ErrorCode, KafkaError, error_info
from kcore.server.network import RequestContext
from kcore.server.registry import BROKER, EncodedResponse

ADMIN_CLIENT_ID = "kcore-admin-http"
ADMIN_LISTENER_NAME = "ADMIN_HTTP"  # on a node without a client listener
_correlation_ids = itertools.count(1)

# Kafka errors that say "it is not there" or "it is already there", by name: the HTTP status
# a REST client expects for them. Everything else is classified by its shape (http_status).
_NOT_FOUND = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.RESOURCE_NOT_FOUND,
        ErrorCode.MIRROR_NOT_FOUND,
    }
)
_CONFLICT = frozenset(
    {
        ErrorCode.TOPIC_ALREADY_EXISTS,
        ErrorCode.MIRROR_ALREADY_EXISTS,
        ErrorCode.INVALID_MIRROR_STATE,
        ErrorCode.MIRROR_NOT_EMPTY,
        ErrorCode.TOPIC_IS_MIRROR,
        ErrorCode.NON_EMPTY_GROUP,
    }
)


def client_listener_name(broker: Any) -> str:
    """The listener an admin request is answered as coming in on: the node's first client
    listener. Handlers list brokers by their endpoint on the request's listener (Metadata,
    DescribeCluster), so the admin API shows the addresses Kafka clients use."""
    controllers = set(broker.config.controller_listener_names)
    for listener in broker.config.listeners:
        if listener.name not in controllers:
            return listener.name
    return ADMIN_LISTENER_NAME


# Retriable errors with a status of their own: waiting was the problem, or asking too often.
_TIMED_OUT = frozenset({ErrorCode.REQUEST_TIMED_OUT})
_TOO_MANY = frozenset({ErrorCode.THROTTLING_QUOTA_EXCEEDED})


def http_status(code: int) -> int:
    """The HTTP status for a Kafka error code (never called with 0)."""
    name, retriable, _ = error_info(code)
    if code in _TIMED_OUT:
        return 504  # the controller did not answer in time: the change may still happen
    if code in _TOO_MANY:
        return 429
    if code in _NOT_FOUND:
        return 404
    if code in _CONFLICT:
        return 409
    if name.endswith("_AUTHORIZATION_FAILED"):
        return 403
    if name.startswith("SASL_AUTHENTICATION") or name == "ILLEGAL_SASL_STATE":
        return 401
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        return 500
    if retriable:
        return 503  # not leader, not controller, coordinator loading: try again
    return 400


class AdminError(Exception):
    """An admin request that failed: its HTTP status and the JSON body that says why."""

    def __init__(self, status: int, error: str, message: str, error_code: int | None = None):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.error_code = error_code

    @classmethod
    def from_kafka(cls, code: int, message: str | None = None) -> AdminError:
        name, _, default = error_info(code)
        return cls(http_status(code), name, message or default, int(code))

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.error, "message": self.message}
        if self.error_code is not None:
            body["error_code"] = self.error_code
        return body


def raise_for(code: int, message: str | None = None) -> None:
    """Raise the :class:`AdminError` of a response's error code, if it is one."""
    if code:
        raise AdminError.from_kafka(code, message)


async def call(broker: Any, principal: str, client_host: str, body: Any) -> Any:
    """Send ``body`` (a Kafka request message) to this broker's own handler, at the highest
    version it serves, as ``principal``; the response message. A handler's ``KafkaError``
    becomes an :class:`AdminError`."""
    api = APIS_BY_NAME[type(body).__name__.removesuffix("Request")]
    spec = broker.registry.get(api.key, BROKER)
    if spec is None:
        raise AdminError(501, "UNSUPPORTED_VERSION", f"{api.name} is not served by this node")
    version = spec.max_version
    correlation_id = next(_correlation_ids)
    header = RequestHeader(
        request_api_key=api.key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=ADMIN_CLIENT_ID,
    )
    ctx = RequestContext(
        header=header,
        api_key=api.key,
        version=version,
        correlation_id=correlation_id,
        client_id=ADMIN_CLIENT_ID,
        listener_name=client_listener_name(broker),
        listener_type=BROKER,
        client_host=client_host,
        connection_id=0,
        server=broker,
        principal=principal,
    )
    try:
        response = await spec.handler(ctx, body)
    except KafkaError as e:
        raise AdminError.from_kafka(e.code, e.message) from None
    if isinstance(response, EncodedResponse):  # a cached answer (Metadata, ApiVersions)
        _, response = decode_response(api.key, version, memoryview(response.frame)[4:])
    return response
