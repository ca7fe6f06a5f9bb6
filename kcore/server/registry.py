"""The handler registry: which APIs this process serves, at which versions, on which listeners.

Every request handler is registered once, with the version range the broker **advertises** for
its API; ``ApiVersions`` is answered from this table, so what the broker says it speaks and what
it can dispatch are the same fact. The advertised range is clipped to what the codec declares
(``kcore.protocol.APIS``), so a handler can never advertise a version that cannot be decoded.

Handlers are coroutines ``async def handler(ctx: RequestContext, body) -> response | None``
(``None``: no response, e.g. Produce with acks=0). They live in ``kcore/server/handlers/``, one
module per API family, and register with :func:`HandlerRegistry.register`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kcore.protocol import APIS

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


class HandlerRegistry:
    """API key → handler, with advertised versions per listener type."""

    def __init__(self) -> None:
        self._specs: dict[int, HandlerSpec] = {}

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
            if api_key in self._specs:
                raise ValueError(f"{api.name} registered twice")
            self._specs[api_key] = HandlerSpec(api_key, api.name, fn, lo, hi, frozenset(listeners))
            return fn

        return decorate

    def get(self, api_key: int, listener_type: str) -> HandlerSpec | None:
        spec = self._specs.get(api_key)
        if spec is None or listener_type not in spec.listeners:
            return None
        return spec

    def supports(self, api_key: int, version: int, listener_type: str) -> bool:
        spec = self.get(api_key, listener_type)
        return spec is not None and spec.min_version <= version <= spec.max_version

    def advertised(self, listener_type: str) -> list[tuple[int, int, int]]:
        """``(api_key, min, max)`` for ApiVersions on a listener of ``listener_type``."""
        return [
            (s.api_key, s.min_version, s.max_version)
            for s in sorted(self._specs.values(), key=lambda s: s.api_key)
            if listener_type in s.listeners
        ]

    def merge(self, other: HandlerRegistry) -> None:
        for key, spec in other._specs.items():
            if key in self._specs:
                raise ValueError(f"{spec.name} registered twice")
            self._specs[key] = spec
