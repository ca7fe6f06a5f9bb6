"""What the request path counts for ``/metrics``: per API requests, errors and latency, and per
topic the bytes and records produced and fetched.

The request path is hot (a few microseconds per request), so recording is plain Python: list
slots indexed by API key, one ``bisect`` into the latency bounds, one dict lookup per topic; no
lock (every update happens on the broker's Trio thread, between checkpoints) and no
prometheus-client object. The admin endpoint's collectors (:mod:`kcore.admin.collectors`) turn
these numbers into metric families only when ``/metrics`` is scraped, buckets made cumulative
there. Pure: no I/O.

Errors are counted as Kafka's ``RequestChannel.updateErrorMetrics`` counts them: every
non-zero ``error_code`` anywhere in a response, the top level and each topic, partition or
resource, by API and error code. The walk follows only the fields of a response's schema that
can hold an error code (a plan per response struct, built once from the declarations), so a
response costs a lookup per place that can hold an error, not one per field (the client's
:func:`kcore.client.errors.iter_errors` visits every field and names each error's place: right
for a caller reporting one error, too slow for every response a broker sends).
Produce and Fetch, the data path, are not walked: their handlers count the partition errors
where they set them (:meth:`RequestMetrics.count_error`).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from kcore.protocol.api import APIS
from kcore.protocol.codegen import snake_case
from kcore.protocol.declarations import StructDecl

PRODUCE_KEY = 0
FETCH_KEY = 1

#: Upper bounds of the latency histogram buckets, in seconds (the last bucket is +Inf): from
#: 100 us, a produce to one partition, up to 30 s, a long poll or a slow acks=all.
LATENCY_BOUNDS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

_NUM_KEYS = max(APIS) + 1

# A plan says where in a struct error codes can be: (has error_code, ((attr, is_array, plan),)).
_Plan = tuple[bool, tuple[tuple[str, bool, Any], ...]]


def _plan(sd: StructDecl, memo: dict[int, _Plan | None]) -> _Plan | None:
    """The plan of ``sd``, or None when no error code can be anywhere inside it."""
    if id(sd) in memo:
        return memo[id(sd)]
    memo[id(sd)] = None  # a struct that contains itself adds nothing the first visit misses
    has_error = False
    children = []
    for f in sd.fields:
        if f.name == "ErrorCode" and not f.is_struct:
            has_error = True
        elif f.struct is not None:
            sub = _plan(f.struct, memo)
            if sub is not None:
                children.append((snake_case(f.name), f.is_array, sub))
    plan = (has_error, tuple(children)) if has_error or children else None
    memo[id(sd)] = plan
    return plan


def _response_plans() -> list[_Plan | None]:
    plans: list[_Plan | None] = [None] * _NUM_KEYS
    for key, api in APIS.items():
        plans[key] = _plan(api.response.decl.root, {})
    return plans


def _walk(obj: Any, plan: _Plan, found: list[int]) -> None:
    has_error, children = plan
    if has_error:
        code = obj.error_code
        if code:
            found.append(code)
    for attr, is_array, sub in children:
        value = getattr(obj, attr)
        if value is None:
            continue
        if is_array:
            for item in value:
                _walk(item, sub, found)
        else:
            _walk(value, sub, found)


class RequestMetrics:
    """Per API key: ``latency_buckets`` (requests per bucket, not cumulative; the last is
    +Inf) and ``latency_sum`` (seconds); ``errors[(api_key, error_code)]``. A request count is
    the sum of its buckets (:meth:`requests`), so a request costs two updates, not three."""

    __slots__ = ("latency_buckets", "latency_sum", "errors", "_plans")

    def __init__(self) -> None:
        self.latency_buckets = [[0] * (len(LATENCY_BOUNDS_S) + 1) for _ in range(_NUM_KEYS)]
        self.latency_sum = [0.0] * _NUM_KEYS
        self.errors: dict[tuple[int, int], int] = {}
        self._plans: list[_Plan | None] | None = None

    def record(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` answered in ``seconds`` (the hot path)."""
        self.latency_sum[api_key] += seconds
        self.latency_buckets[api_key][bisect_left(LATENCY_BOUNDS_S, seconds)] += 1

    def requests(self, api_key: int) -> int:
        return sum(self.latency_buckets[api_key])

    def count_error(self, api_key: int, code: int, count: int = 1) -> None:
        key = (api_key, int(code))
        self.errors[key] = self.errors.get(key, 0) + count

    def count_response_errors(self, api_key: int, response: Any) -> None:
        """Every non-zero error code of ``response`` (a response message of ``api_key``)."""
        plans = self._plans
        if plans is None:
            plans = self._plans = _response_plans()
        plan = plans[api_key]
        if plan is None:
            return
        found: list[int] = []
        _walk(response, plan, found)
        for code in found:
            self.count_error(api_key, code)


class TopicTraffic:
    """Per topic: bytes and records produced by clients (``bytes_in``, ``records_in``), bytes
    fetched by consumers (``bytes_out``) and by follower replicas (``replication_bytes_out``):
    Kafka's ``BytesInPerSec``, ``MessagesInPerSec``, ``BytesOutPerSec`` and
    ``ReplicationBytesOutPerSec`` as counters. ``topics[name]`` is a list of the four, in that
    order, so an update is one dict lookup."""

    __slots__ = ("topics",)

    BYTES_IN, RECORDS_IN, BYTES_OUT, REPLICATION_BYTES_OUT = range(4)

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}

    def _of(self, topic: str) -> list[int]:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0, 0]
        return counts

    def produced(self, topic: str, size: int, records: int) -> None:
        counts = self.topics.get(topic) or self._of(topic)
        counts[0] += size
        counts[1] += records

    def fetched(self, sizes: dict[str, int], *, follower: bool) -> None:
        slot = self.REPLICATION_BYTES_OUT if follower else self.BYTES_OUT
        for topic, size in sizes.items():
            self._of(topic)[slot] += size

    def forget_except(self, topics) -> None:
        """Drop the counters of deleted topics (``topics``: the names that still exist), so a
        broker that saw many short-lived topics does not report them forever."""
        for name in [t for t in self.topics if t not in topics]:
            del self.topics[name]
