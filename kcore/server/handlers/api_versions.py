"""ApiVersions: what this listener speaks, derived from the handler registry.

Every client asks it first on every connection, and the answer depends only on the listener
type, the request version and the registry: it is encoded once per (listener type, version,
registry generation) and sent as bytes (~45 us of building and encoding saved per request on
the 2-core dev VM). A server that reports finalized features (``ctx.server.features``, v3+)
makes the answer depend on its metadata too; that answer is built for each request.
"""

from __future__ import annotations

import re

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.registry import BROKER, CONTROLLER, EncodedResponse, HandlerRegistry

# KIP-511: client software names and versions must look like this, or the request is invalid.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def register(registry: HandlerRegistry) -> None:
    encoded: dict[tuple[str, int, int], EncodedResponse] = {}

    def build(listener_type: str) -> m.ApiVersionsResponse:
        return m.ApiVersionsResponse(
            api_keys=[
                m.ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in registry.advertised(listener_type)
            ]
        )

    @registry.register(18, 0, 4, listeners=(BROKER, CONTROLLER))
    async def api_versions(ctx, body: m.ApiVersionsRequest):
        version = ctx.version
        if version >= 3 and not (
            _SOFTWARE.fullmatch(body.client_software_name or "")
            and _SOFTWARE.fullmatch(body.client_software_version or "")
        ):
            return m.ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
        features = getattr(ctx.server, "features", None)
        if features is not None and version >= 3:
            response = build(ctx.listener_type)
            features(response)
            return response
        key = (ctx.listener_type, version, registry.generation)
        answer = encoded.get(key)
        if answer is None:
            if len(encoded) > 64:  # stale generations
                encoded.clear()
            answer = encoded[key] = EncodedResponse(18, version, build(ctx.listener_type))
        return answer
