"""ApiVersions: what this listener speaks, derived from the handler registry."""

from __future__ import annotations

import re

from kcore.protocol import messages as m
from kcore.protocol.errors import ErrorCode
from kcore.server.registry import BROKER, CONTROLLER, HandlerRegistry

# KIP-511: client software names and versions must look like this, or the request is invalid.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def register(registry: HandlerRegistry) -> None:
    @registry.register(18, 0, 4, listeners=(BROKER, CONTROLLER))
    async def api_versions(ctx, body: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
        response = m.ApiVersionsResponse(
            api_keys=[
                m.ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in registry.advertised(ctx.listener_type)
            ]
        )
        if ctx.version >= 3 and not (
            _SOFTWARE.fullmatch(body.client_software_name or "")
            and _SOFTWARE.fullmatch(body.client_software_version or "")
        ):
            response.error_code = ErrorCode.INVALID_REQUEST
            response.api_keys = []
            return response
        features = getattr(ctx.server, "features", None)
        if features is not None and ctx.version >= 3:
            features(response)
        return response
