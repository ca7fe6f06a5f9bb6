"""Controller operations from a node whose active controller is elsewhere: forwarding.

Theory of operation
-------------------
Handlers and the broker lifecycle ask for controller work with
``broker.controller_call(lambda c, now: c.create_topics(request))``: an operation on the
:class:`~kcore.metadata.controller.QuorumController`. When the active controller runs in this
process, the operation is submitted to the local
:class:`~kcore.server.controller_service.ControllerService`. Otherwise (a broker-only node, or a
controller that is not the Raft leader) it must travel as a Kafka request:

1. :func:`describe_operation` runs the operation against a *recorder* standing in for the
   controller, which notes the method called and its arguments (``create_topics(request)``);
   :data:`CONTROLLER_APIS` maps the method to its API and says whether the controller method
   also takes ``now_ms`` (BrokerRegistration, BrokerHeartbeat) or the request's API version
   (DeleteTopics, AlterPartition, UpdateFeatures). The same table drives the controller side
   (:mod:`kcore.server.handlers.controller_apis`), which rebuilds the operation from the request.
2. :class:`ControllerChannel` finds the active controller through the metadata quorum (every
   node runs Raft, a broker-only node as an observer: ``quorum.leader_and_epoch`` names the
   leader), connects to its address in ``controller.quorum.voters`` (its CONTROLLER listener)
   with :class:`~kcore.client.connection.BrokerConnection`, and sends the request.
3. It retries — while the leader is unknown, when the connection fails, and when the answer
   says NOT_CONTROLLER (leadership moved, or the new leader is not active yet) — until the
   call's deadline, then raises ``KafkaError(REQUEST_TIMED_OUT)``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import trio

from kcore.client.connection import BrokerConnection
from kcore.client.errors import AuthenticationFailed, ClientError
from kcore.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
RETRY_BACKOFF_S = 0.05


class ControllerApi(NamedTuple):
    """One controller operation reachable over the network."""

    api_key: int
    method: str  # the QuorumController method
    takes_now: bool = False  # method(request, now_ms)
    takes_version: bool = False  # method(request, api_version)


CONTROLLER_APIS: dict[str, ControllerApi] = {
    api.method: api
    for api in (
        ControllerApi(19, "create_topics"),
        ControllerApi(20, "delete_topics", takes_version=True),
        ControllerApi(30, "create_acls"),
        ControllerApi(31, "delete_acls"),
        ControllerApi(33, "alter_configs"),
        ControllerApi(37, "create_partitions"),
        ControllerApi(43, "elect_leaders", takes_version=True),
        ControllerApi(44, "incremental_alter_configs"),
        ControllerApi(45, "alter_partition_reassignments", takes_version=True),
        ControllerApi(46, "list_partition_reassignments"),
        ControllerApi(51, "alter_user_scram_credentials"),
        ControllerApi(56, "alter_partition", takes_version=True),
        ControllerApi(57, "update_features", takes_version=True),
        ControllerApi(62, "register_broker", takes_now=True),
        ControllerApi(63, "broker_heartbeat", takes_now=True),
        ControllerApi(64, "unregister_broker"),
        ControllerApi(67, "allocate_producer_ids"),
        # cluster mirroring (spec §6, M-71: forwarded to the controller)
        ControllerApi(94, "create_cluster_mirror"),
        ControllerApi(95, "start_mirror_topics"),
        ControllerApi(96, "stop_mirror_topics"),
        ControllerApi(97, "pause_mirror_topics"),
        ControllerApi(98, "resume_mirror_topics"),
        ControllerApi(99, "delete_cluster_mirror"),
        # the mirror manager of a broker-only node bumps the epochs of the partitions it leads
        ControllerApi(102, "bump_leader_epochs"),
    )
}
CONTROLLER_APIS_BY_KEY: dict[int, ControllerApi] = {a.api_key: a for a in CONTROLLER_APIS.values()}


class ForwardedCall(NamedTuple):
    api: ControllerApi
    request: Any
    api_version: int | None  # for APIs whose controller method takes it, else None


class _Recorder:
    """Stands in for the QuorumController: records the one method an operation calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


def describe_operation(operation: Callable[[Any, int], Any]) -> ForwardedCall:
    """Which API request an operation ``lambda c, now: c.<method>(request, ...)`` stands for.

    Raises:
        KafkaError: INVALID_REQUEST for an operation that is not one controller-API call.
    """
    recorder = _Recorder()
    operation(recorder, 0)
    if len(recorder.calls) != 1 or recorder.calls[0][0] not in CONTROLLER_APIS:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"controller operation {recorder.calls!r} cannot be forwarded",
        )
    method, args = recorder.calls[0]
    api = CONTROLLER_APIS[method]
    version = args[1] if api.takes_version and len(args) > 1 else None
    return ForwardedCall(api, args[0], version)


def operation_for(api: ControllerApi, request: Any, api_version: int) -> Callable[[Any, int], Any]:
    """The controller operation a request received over the network stands for."""

    def operation(controller: Any, now: int) -> Any:
        method = getattr(controller, api.method)
        if api.takes_now:
            return method(request, now)
        if api.takes_version:
            return method(request, api_version)
        return method(request)

    return operation


def error_codes(response: Any) -> set[int]:
    """Every ``error_code`` in a response: top level and one level of nested results."""
    codes: set[int] = set()
    code = getattr(response, "error_code", None)
    if code is not None:
        codes.add(int(code))
    for field in getattr(response, "_fields", ()):
        value = getattr(response, field, None)
        if isinstance(value, list):
            for item in value:
                code = getattr(item, "error_code", None)
                if code is not None:
                    codes.add(int(code))
    return codes


class ControllerChannel:
    """Sends controller operations to the active controller (see the module docstring).

    Args:
        node_id: this node's id (a call finding itself the leader submits locally).
        quorum: the metadata quorum driver (``leader_and_epoch``).
        voters: ``controller.quorum.voters`` (``QuorumVoter(id, host, port)``).
        local: ``local(operation)`` submits to this process's controller service, or None.
    """

    def __init__(
        self,
        node_id: int,
        quorum: Any,
        voters: Any,
        *,
        local: Callable[[Callable[[Any, int], Any]], Any] | None = None,
        timeout_s: float = FORWARD_TIMEOUT_S,
        connect_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.node_id = node_id
        # TLS and SASL of the controller listener (kcore.security.internal_security).
        self.connect_options = dict(connect_options or {})
        self.quorum = quorum
        self.addresses = {v.id: (v.host, v.port) for v in voters}
        self.local = local
        self.timeout_s = timeout_s
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_lock = trio.Lock()
        self._refused: set[int] = set()  # controllers that refused this node's login

    async def call(
        self, operation: Callable[[Any, int], Any], *, timeout_s: float | None = None
    ) -> Any:
        """Run ``operation`` on the active controller; its response once committed."""
        forwarded = describe_operation(operation)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        last_error = "no active controller known"
        with trio.move_on_after(timeout):
            while True:
                leader = self.quorum.leader_and_epoch.leader_id
                if leader is None:
                    last_error = "no active controller known"
                elif leader == self.node_id and self.local is not None:
                    try:
                        return await self.local(operation)
                    except KafkaError as e:
                        if e.code != ErrorCode.NOT_CONTROLLER:
                            raise
                        last_error = str(e)
                elif leader not in self.addresses:
                    last_error = f"the leader {leader} is not in controller.quorum.voters"
                else:
                    try:
                        response = await self._send(leader, forwarded)
                    except ClientError as e:
                        last_error = f"controller {leader}: {e}"
                        await self._drop(leader)
                    else:
                        if int(ErrorCode.NOT_CONTROLLER) not in error_codes(response):
                            return response
                        last_error = f"controller {leader} answered NOT_CONTROLLER"
                log.debug("%s: retrying (%s)", forwarded.api.method, last_error)
                await trio.sleep(RETRY_BACKOFF_S)
        raise KafkaError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"{forwarded.api.method} not answered by a controller in {timeout} s: {last_error}",
        )

    async def send_to_leader(self, request: Any, api_version: int) -> Any:
        """Send ``request`` as it is to the quorum leader's controller listener and return
        its answer (DescribeQuorum, which only the leader answers). No retries.

        Raises:
            KafkaError: NOT_CONTROLLER when no leader is known (or it has no address here),
                REQUEST_TIMED_OUT when it cannot be reached.
        """
        leader = self.quorum.leader_and_epoch.leader_id
        if leader is None or leader not in self.addresses:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no quorum leader known")
        try:
            conn = await self._connection(leader)
            return await conn.request(request, api_version, timeout=REQUEST_TIMEOUT_S)
        except ClientError as e:
            await self._drop(leader)
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"controller {leader}: {e}") from None

    async def _send(self, leader: int, forwarded: ForwardedCall) -> Any:
        conn = await self._connection(leader)
        return await conn.request(
            forwarded.request, forwarded.api_version, timeout=REQUEST_TIMEOUT_S
        )

    async def _connection(self, node: int) -> BrokerConnection:
        async with self._connect_lock:
            conn = self._connections.get(node)
            if conn is not None and not conn.closed:
                return conn
            host, port = self.addresses[node]
            try:
                conn = await BrokerConnection.connect(
                    host,
                    port,
                    client_id=f"kcore-node-{self.node_id}-controller-channel",
                    connect_timeout=CONNECT_TIMEOUT_S,
                    request_timeout=REQUEST_TIMEOUT_S,
                    **self.connect_options,
                )
            except AuthenticationFailed as e:
                if node not in self._refused:  # once until it succeeds: retries cannot help
                    self._refused.add(node)
                    log.error(
                        "authentication to controller %d failed, this node cannot register "
                        "or heartbeat with its controller listener login: %s",
                        node,
                        e,
                    )
                raise
            self._refused.discard(node)
            self._connections[node] = conn
            return conn

    async def _drop(self, node: int) -> None:
        conn = self._connections.pop(node, None)
        if conn is not None:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await conn.aclose()

    async def aclose(self) -> None:
        for node in list(self._connections):
            await self._drop(node)
