"""The handler registry: which APIs this process serves, at which versions, on which listeners.

Every request handler is registered once, with the version range the broker **advertises** for
its API; ``ApiVersions`` is answered from this table, so what the broker says it speaks and what
it can dispatch are the same fact. The advertised range is clipped to what the codec declares
(``kcore.protocol.APIS``), so a handler can never advertise a version that cannot be decoded.

Handlers are coroutines ``async def handler(ctx: RequestContext, body) -> response | None``
(``None``: no response, e.g. Produce with acks=0). They live in ``kcore/server/handlers/``, one
module per API family, and register with :func:`HandlerRegistry.register`. A handler whose
answer is the same for many requests may return an :class:`EncodedResponse` it encoded once
(ApiVersions per listener type and version, Metadata per image and request shape): the network
layer then only writes the request's correlation id into it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kcore.protocol import APIS, encode_response
from kcore.protocol.primitives import INT32

BROKER = "broker"
CONTROLLER = "controller"

Handler = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    name: str
    handler: Handler
    min_version: int
    max_version: int
    listeners: frozenset[str]


class EncodedResponse:
    """A response body encoded once, to be sent to any number of requests of the same API and
    version: the frame is kept with correlation id 0, and :meth:`parts` gives the parts of the
    frame for one correlation id without copying it (the id is the first field of every
    response header, right after the 4-byte size). Immutable."""

    __slots__ = ("api_key", "version", "frame", "_size", "_after_id")

    def __init__(self, api_key: int, version: int, body: Any) -> None:
        self.api_key = api_key
        self.version = version
        self.frame = b"".join(bytes(p) for p in encode_response(api_key, version, 0, body))
        self._size = self.frame[:4]
        self._after_id = memoryview(self.frame)[8:]

    def parts(self, correlation_id: int) -> list[Any]:
        return [self._size, INT32.pack(correlation_id), self._after_id]


class HandlerRegistry:
    """(API key, listener type) → handler, with advertised versions per listener type.

    One API key may have a different handler on each listener type: Fetch (key 1) serves
    partitions on BROKER listeners and the Raft metadata partition on CONTROLLER listeners.
    """

    def __init__(self) -> None:
        self._specs: dict[tuple[int, str], HandlerSpec] = {}
        # Bumped by every change: what is derived from the table (the encoded ApiVersions
        # answers) is keyed on it.
        self.generation = 0

    def register(
        self,
        api_key: int,
        min_version: int | None = None,
        max_version: int | None = None,
        *,
        listeners: Iterable[str] = (BROKER,),
    ) -> Callable[[Handler], Handler]:
        """Decorator: serve ``api_key`` at ``[min_version, max_version]`` (default: every
        version the codec declares) on the given listener types."""
        api = APIS[api_key]
        lo = api.min_version if min_version is None else min_version
        hi = api.max_version if max_version is None else max_version
        if lo < api.min_version or hi > api.max_version or lo > hi:
            raise ValueError(
                f"{api.name}: advertised versions {lo}-{hi} outside the codec's {api.versions}"
            )

        def decorate(fn: Handler) -> Handler:
            spec = HandlerSpec(api_key, api.name, fn, lo, hi, frozenset(listeners))
            taken = sorted(kind for kind in spec.listeners if (api_key, kind) in self._specs)
            if taken:
                raise ValueError(f"{api.name} registered twice (on {', '.join(taken)} listeners)")
            for kind in spec.listeners:
                self._specs[(api_key, kind)] = spec
            self.generation += 1
            return fn

        return decorate

    def get(self, api_key: int, listener_type: str) -> HandlerSpec | None:
        return self._specs.get((api_key, listener_type))

    def supports(self, api_key: int, version: int, listener_type: str) -> bool:
        spec = self.get(api_key, listener_type)
        return spec is not None and spec.min_version <= version <= spec.max_version

    def advertised(self, listener_type: str) -> list[tuple[int, int, int]]:
        """``(api_key, min, max)`` for ApiVersions on a listener of ``listener_type``."""
        return [
            (s.api_key, s.min_version, s.max_version)
            for (_, kind), s in sorted(self._specs.items())
            if kind == listener_type
        ]

    def merge(self, other: HandlerRegistry) -> None:
        for key, spec in other._specs.items():
            if key in self._specs:
                raise ValueError(f"{spec.name} registered twice")
            self._specs[key] = spec
            self.generation += 1
