"""``/v1/mirrors``: cluster mirrors and their topics over HTTP, each endpoint one of the
KIP-1279 Kafka APIs (docs/mirroring.md) sent to this node's own handler as the caller.

=========================================  ==================================================
``GET /v1/mirrors``                        ListClusterMirrors
``POST /v1/mirrors``                       CreateClusterMirror (201, Location)
``GET /v1/mirrors/{mirror}``               DescribeClusterMirrors (+ List for the source)
``DELETE /v1/mirrors/{mirror}``            DeleteClusterMirror (204)
``POST /v1/mirrors/{mirror}/start``        StartMirrorTopics
``POST /v1/mirrors/{mirror}/stop``         StopMirrorTopics (``wait_for_sync_ms``: D-31 first)
``POST /v1/mirrors/{mirror}/pause|resume`` Pause/ResumeMirrorTopics
``GET /v1/mirrors/{mirror}/operations/..`` the topic operations run here (kept in memory)
=========================================  ==================================================

The topic operations run as operations (:mod:`kcore.admin.operations`): 200 and the result
when done within :data:`INLINE_WAIT_S`, else 202 and a Location to poll; a stop that waits for
sync, and any request sent with ``Prefer: respond-async`` (RFC 7240), answers 202 at once.

Patterns (``include``) are Python regular expressions matched against whole topic names
(D-20), as ``kcore cluster-mirrors --topics`` takes them; ``topics`` are names. Pause and
resume carry no patterns on the wire: the patterns are matched here against the mirror's
topics (as the CLI does, :func:`kcore.mirror.report.matching_topics`).

Describe answers for the whole cluster from any node: a partition's numbers (source high
watermark and LSO, destination log end offset, lag, fetch age) are known by the broker that
leads it, so this node asks the others and merges, as ``kcore cluster-mirrors --describe``
does (:mod:`kcore.admin.cluster_view`); a partition whose leader did not answer keeps -1 and
a ``note`` saying why. State, LME, retries and the FAILED reason are the mirror coordinator's,
the same on every node.
"""

from __future__ import annotations

import re
from typing import Any

import trio
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from quart import Blueprint, current_app, request
from quart_schema import document_response, validate_request, validate_response

from kcore.admin import kafka as _kafka
from kcore.admin.cluster_view import PEERS_KEY, Notes, describe_cluster_wide
from kcore.admin.context import broker, kafka, principal
from kcore.admin.kafka import AdminError, raise_for
from kcore.admin.operations import Operation, OperationLog
from kcore.client.mirrors import wait_for_sync
from kcore.mirror import report
from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode, error_info

mirrors = Blueprint("mirrors", __name__)

# How long a topic operation's request waits for it before answering 202: one Kafka request
# (a start looks its topics up on the source) is usually done well within it.
INLINE_WAIT_S = 10.0
SYNC_POLL_S = 0.2
OPERATIONS_KEY = "kcore.mirror_operations"


@mirrors.record_once
def _keep_operations(state) -> None:
    node = state.app.extensions["kcore"].broker
    state.app.extensions[OPERATIONS_KEY] = OperationLog(node.clock.wall_ms)


def _operations() -> OperationLog:
    return current_app.extensions[OPERATIONS_KEY]


# -- request bodies ---------------------------------------------------------------------------


def _checked_patterns(patterns: list[str]) -> list[str]:
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"{p!r} is not a valid regular expression: {e}") from None
    return patterns


class CreateMirror(BaseModel):
    """A mirror named ``name`` from the source cluster at ``bootstrap_servers``; ``configs``
    are the mirror's other configs (docs/mirroring.md, "Mirror configs")."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    configs: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_bootstrap(self):
        if "bootstrap.servers" in self.configs:
            raise ValueError("give bootstrap_servers, not configs['bootstrap.servers']")
        return self


class TopicSelection(BaseModel):
    """``topics`` by name and the topics ``include`` patterns match (at least one entry)."""

    model_config = ConfigDict(extra="forbid")
    topics: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=list)

    _include = field_validator("include")(_checked_patterns)

    @model_validator(mode="after")
    def _something(self):
        if not self.topics and not self.include:
            raise ValueError("name topics or give include patterns")
        return self


class StartTopics(TopicSelection):
    """``include`` patterns are added to ``mirror.topics.include``, ``exclude`` patterns to
    ``mirror.topics.exclude`` (D-20, D-27)."""

    exclude: list[str] = Field(default_factory=list)

    _exclude = field_validator("exclude")(_checked_patterns)


class StopTopics(TopicSelection):
    """``include`` patterns move from the include to the exclude list (M-53).
    ``wait_for_sync_ms``: first wait until the lag of every partition to stop is 0, for at
    most that long, then stop either way (D-31)."""

    wait_for_sync_ms: int | None = Field(default=None, ge=0)


# -- responses ---------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    error: str
    message: str
    error_code: int | None = None


def _errors(*statuses: int):
    """Document the error answers a route gives (401 and 403 always: tokens and ACLs)."""

    def apply(route):
        for status in (401, 403, *statuses):
            route = document_response(ErrorBody, status)(route)
        return route

    return apply


class MirrorSummary(BaseModel):
    mirror: str
    source_bootstrap_servers: str
    source_cluster_id: str | None
    topic_count: int


class MirrorList(BaseModel):
    mirrors: list[MirrorSummary]


class PartitionStatus(BaseModel):
    """Numbers are -1 where not known (another broker leads the partition, or no fetch yet)."""

    partition: int
    state: str
    source_high_watermark: int
    source_last_stable_offset: int
    destination_log_end_offset: int
    lag: int
    last_mirror_epoch: int
    last_fetch_age_ms: int
    retry_count: int
    failed_reason: str | None
    note: str | None = None  # why the numbers are unknown: the leader did not answer


class TopicStatus(BaseModel):
    topic: str
    partitions: list[PartitionStatus]


class SyncChange(BaseModel):
    kind: str
    resource: str
    detail: str


class MetadataSync(BaseModel):
    last_sync_time_ms: int
    last_sync_age_ms: int
    last_change_time_ms: int
    changes: list[SyncChange]
    errors: list[str]
    notes: list[str]


class MirrorDescription(MirrorSummary):
    topics: list[TopicStatus]
    metadata_sync: MetadataSync


class TopicResult(BaseModel):
    topic: str
    error: str | None
    error_code: int
    message: str | None


class OperationStatus(BaseModel):
    """``status``: running, done (answered; refused topics carry their error) or failed (the
    whole request was refused: ``error``)."""

    id: str
    mirror: str
    action: str
    status: str
    phase: str | None
    started_ms: int
    finished_ms: int | None
    topics: list[TopicResult]
    warning: str | None
    error: ErrorBody | None


class OperationList(BaseModel):
    operations: list[OperationStatus]


# -- mirrors ---------------------------------------------------------------------------------


def _summary(x: Any) -> dict[str, Any]:
    return {
        "mirror": x.mirror_name,
        "source_bootstrap_servers": x.source_bootstrap,
        "source_cluster_id": x.source_cluster_id or None,
        "topic_count": x.topic_count,
    }


async def _listed() -> list[Any]:
    response = await kafka(m.ListClusterMirrorsRequest())
    raise_for(response.error_code, response.error_message)
    return sorted(response.mirrors, key=lambda x: x.mirror_name)


@mirrors.get("/v1/mirrors")
@_errors()
@validate_response(MirrorList)
async def list_mirrors():
    return {"mirrors": [_summary(x) for x in await _listed()]}


@mirrors.post("/v1/mirrors")
@_errors(400, 409, 503)
@validate_request(CreateMirror)
@validate_response(MirrorSummary, 201)
async def create_mirror(data: CreateMirror):
    C = m.CreateClusterMirrorRequest
    configs = {"bootstrap.servers": data.bootstrap_servers, **data.configs}
    response = await kafka(
        C(
            mirror_name=data.name,
            config=[C.ClusterMirrorConfig(name=k, value=v) for k, v in configs.items()],
        )
    )
    raise_for(response.error_code, response.error_message)
    listed = {x.mirror_name: x for x in await _listed()}
    summary = (
        _summary(listed[data.name])
        if data.name in listed  # this node's image may not hold it yet
        else {
            "mirror": data.name,
            "source_bootstrap_servers": data.bootstrap_servers,
            "source_cluster_id": None,
            "topic_count": 0,
        }
    )
    return summary, 201, {"Location": f"/v1/mirrors/{data.name}"}


def _one(response: Any, mirror: str) -> Any:
    """``mirror``'s ``DescribedMirror`` of a DescribeClusterMirrors answer; errors raised."""
    raise_for(response.error_code, response.error_message)
    for x in response.mirrors:
        if x.mirror_name == mirror:
            raise_for(x.error_code, x.error_message)
            return x
    raise AdminError.from_kafka(ErrorCode.MIRROR_NOT_FOUND, f"No cluster mirror named '{mirror}'.")


@mirrors.get("/v1/mirrors/<mirror>")
@_errors(404)
@validate_response(MirrorDescription)
async def describe_mirror(mirror: str):
    response, notes = await _Caller().describe_cluster_wide(mirror)
    listed = {x.mirror_name: x for x in await _listed()}
    if mirror not in listed:
        raise AdminError.from_kafka(ErrorCode.MIRROR_NOT_FOUND)
    return {**_summary(listed[mirror]), **report.mirror_document(_one(response, mirror), notes)}


@mirrors.delete("/v1/mirrors/<mirror>")
@_errors(404, 409)
async def delete_mirror(mirror: str):
    response = await kafka(m.DeleteClusterMirrorRequest(mirror_name=mirror))
    raise_for(response.error_code, response.error_message)
    return "", 204


# -- topic operations ------------------------------------------------------------------------


class _Caller:
    """The request's node, principal and address, for work that outlives the request."""

    def __init__(self) -> None:
        self.broker, self.principal = broker(), principal()
        self.host = request.remote_addr or ""
        self.peers = current_app.extensions[PEERS_KEY]

    async def kafka(self, body: Any) -> Any:
        return await _kafka.call(self.broker, self.principal, self.host, body)

    async def describe_response(self, mirror: str) -> Any:
        """DescribeClusterMirrors of ``mirror``: the whole answer, its errors raised."""
        response = await self.kafka(m.DescribeClusterMirrorsRequest(mirror_names=[mirror]))
        _one(response, mirror)
        return response

    async def describe(self, mirror: str) -> Any:
        return _one(await self.describe_response(mirror), mirror)

    async def describe_cluster_wide(self, mirror: str) -> tuple[Any, Notes]:
        """The answer merged over every broker, and its partitions' notes (cluster_view)."""
        return await describe_cluster_wide(self, mirror)


def _topic_results(response: Any) -> dict[str, Any]:
    """A Start/Stop/Pause/Resume answer as the operation's result; its top-level error raised
    (INVALID_MIRROR_STATE names every partition in the wrong state, D-26)."""
    raise_for(response.error_code, response.error_message)
    return {
        "topics": [
            {
                "topic": t.name,
                "error": error_info(t.error_code)[0] if t.error_code else None,
                "error_code": t.error_code,
                "message": t.error_message if t.error_code else None,
            }
            for t in response.topics
        ]
    }


def _topic_data(cls, names: list[str]) -> list[Any]:
    return [cls.TopicData(topic_name=n) for n in dict.fromkeys(names)]


async def _matching(caller: _Caller, mirror: str, data: TopicSelection) -> list[str]:
    """The named topics and the mirror's topics an include pattern matches, names first."""
    if not data.include:
        return list(data.topics)
    matched = report.matching_topics(await caller.describe(mirror), data.include)
    return list(dict.fromkeys([*data.topics, *matched]))


async def _run(op: Operation, log: OperationLog, work) -> None:
    try:
        log.finish(op, await work(op))
    except AdminError as e:
        log.fail(op, e)
    except Exception:  # a bug: the operation says so, the log has the traceback
        current_app.logger.exception("mirror operation %s failed", op.id)
        log.fail(op, AdminError(500, "UNKNOWN_SERVER_ERROR", "the broker log says why"))


async def _operate(mirror: str, action: str, work, *, at_once: bool = False):
    """Run ``work(op)`` as an operation of the app's nursery; its result (200) or 202."""
    log = _operations()
    op = log.begin(mirror, action)
    current_app.nursery.start_soon(_run, op, log, work)
    if not at_once and "respond-async" not in request.headers.get("Prefer", ""):
        with trio.move_on_after(INLINE_WAIT_S):
            await op.finished.wait()
    if op.error is not None:
        raise op.error
    status = 200 if op.finished.is_set() else 202
    return op.document(), status, {"Location": op.location}


def _topic_route(action: str, model: type[TopicSelection]):
    """Register ``route`` as ``POST /v1/mirrors/{mirror}/{action}``: its body validated
    against ``model``, its answers (200 done, 202 running) documented as an operation."""

    def register(route):
        route = validate_response(OperationStatus, 202)(validate_response(OperationStatus)(route))
        route = _errors(400, 404, 409, 503)(validate_request(model)(route))
        return mirrors.post(f"/v1/mirrors/<mirror>/{action}")(route)

    return register


@_topic_route("start", StartTopics)
async def start_topics(mirror: str, data: StartTopics):
    caller = _Caller()
    S = m.StartMirrorTopicsRequest
    body = S(
        mirror_name=mirror,
        topics=_topic_data(S, data.topics),
        include_patterns=data.include,
        exclude_patterns=data.exclude,
    )

    async def work(op: Operation):
        return _topic_results(await caller.kafka(body))

    return await _operate(mirror, "start", work)


@_topic_route("stop", StopTopics)
async def stop_topics(mirror: str, data: StopTopics):
    caller = _Caller()
    S = m.StopMirrorTopicsRequest
    body = S(mirror_name=mirror, topics=_topic_data(S, data.topics), patterns=data.include)
    timeout_ms = data.wait_for_sync_ms

    async def work(op: Operation):
        warning = None
        if timeout_ms:
            op.phase = "waiting for sync"

            async def describe() -> Any:  # every broker's: each knows the lag it leads
                return (await caller.describe_cluster_wide(mirror))[0]

            behind = await wait_for_sync(
                describe,
                mirror,
                await _matching(caller, mirror, data),
                timeout_ms / 1000,
                poll_s=SYNC_POLL_S,
            )
            if behind:
                warning = f"not in sync after {timeout_ms} ms: {', '.join(behind)}"
        op.phase = "stopping"
        result = _topic_results(await caller.kafka(body))
        return {**result, "warning": warning}

    return await _operate(mirror, "stop", work, at_once=bool(timeout_ms))


def _pause_or_resume(action: str, cls):
    async def route(mirror: str, data: TopicSelection):
        caller = _Caller()

        async def work(op: Operation):
            topics = await _matching(caller, mirror, data)
            if not topics:
                raise AdminError(
                    404,
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    f"no topic of mirror {mirror} matches {', '.join(data.include)}",
                    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                )
            body = cls(mirror_name=mirror, topics=_topic_data(cls, topics))
            return _topic_results(await caller.kafka(body))

        return await _operate(mirror, action, work)

    route.__name__ = f"{action}_topics"
    return _topic_route(action, TopicSelection)(route)


pause_topics = _pause_or_resume("pause", m.PauseMirrorTopicsRequest)
resume_topics = _pause_or_resume("resume", m.ResumeMirrorTopicsRequest)


@mirrors.get("/v1/mirrors/<mirror>/operations")
@validate_response(OperationList)
async def list_operations(mirror: str):
    return {"operations": [op.document() for op in _operations().of_mirror(mirror)]}


@mirrors.get("/v1/mirrors/<mirror>/operations/<op_id>")
@_errors(404)
@validate_response(OperationStatus)
async def get_operation(mirror: str, op_id: str):
    op = _operations().get(mirror, op_id)
    if op is None:
        raise AdminError(
            404, "NOT_FOUND", f"no operation {op_id} of mirror {mirror} on this node (kept: the "
            "latest ones, in memory, until the node restarts)"
        )  # fmt: skip
    return op.document()
