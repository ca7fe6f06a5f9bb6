"""The controller APIs on CONTROLLER listeners: what brokers forward to the active controller.

Each API of :data:`kcore.server.controller_channel.CONTROLLER_APIS` (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs, BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds, ...) is served on the controller listener type by one handler: it rebuilds
the controller operation from the request (:func:`~kcore.server.controller_channel.operation_for`)
and submits it to this node's :class:`~kcore.server.controller_service.ControllerService`; the
response is sent once the records are committed. A node that is not the active controller answers
NOT_CONTROLLER — in the top-level error field, or in every result for the APIs that have none —
and the sender retries with the new leader.
"""

from __future__ import annotations

from typing import Any

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, KafkaError
from kcore.server.controller_channel import CONTROLLER_APIS, ControllerApi, operation_for
from kcore.server.registry import CONTROLLER, HandlerRegistry


def error_response(api_key: int, request: Any, code: int, message: str | None) -> Any:
    """A response failing every item of ``request`` with ``code``, for the APIs without a
    top-level error field; None for the others (the network layer fills their error field)."""
    code = int(code)
    if api_key == 19:
        R = m.CreateTopicsResponse
        return R(
            topics=[
                R.CreatableTopicResult(name=t.name, error_code=code, error_message=message)
                for t in request.topics
            ]
        )
    if api_key == 20:
        R = m.DeleteTopicsResponse
        results = [
            R.DeletableTopicResult(
                name=t.name, topic_id=t.topic_id, error_code=code, error_message=message
            )
            for t in request.topics or ()
        ]
        results += [
            R.DeletableTopicResult(name=name, error_code=code, error_message=message)
            for name in request.topic_names or ()
        ]
        return R(responses=results)
    if api_key == 37:
        R = m.CreatePartitionsResponse
        return R(
            results=[
                R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
                for t in request.topics
            ]
        )
    if api_key in (33, 44):
        R = m.AlterConfigsResponse if api_key == 33 else m.IncrementalAlterConfigsResponse
        return R(
            responses=[
                R.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in request.resources
            ]
        )
    return None


def _handler(api: ControllerApi):
    async def handle(ctx, body):
        service = ctx.server.controller_service
        try:
            if service is None:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node runs no controller")
            return await service.submit(operation_for(api, body, ctx.version))
        except KafkaError as e:
            response = error_response(api.api_key, body, e.code, e.message)
            if response is None:
                raise
            return response

    handle.__name__ = f"controller_{api.method}"
    return handle


def register(registry: HandlerRegistry) -> None:
    """Serve the controller APIs on CONTROLLER listeners."""
    for api in CONTROLLER_APIS.values():
        registry.register(api.api_key, listeners=(CONTROLLER,))(_handler(api))
