"""The admin endpoint's application: Quart-Trio routes with quart-schema's validation and
OpenAPI document, the bearer-token check, and one JSON shape for every error.

Why Quart-Trio: it is Quart (Flask's API, async) on Trio, by Hypercorn's author, so the app runs
on the broker's own Trio loop with no bridge, and routing, request parsing, body limits and
content negotiation are a kept library's, not ours. quart-schema validates bodies against
pydantic models (unknown fields and wrong types are a 400 naming the field) and writes the
OpenAPI document from the same models, so the document cannot drift from what is enforced.

Every error is JSON ``{"error": NAME, "message": TEXT}`` (plus ``error_code``, the Kafka code,
when a Kafka API said no), whatever raised it: a Kafka error, a validation error, a 404 from the
router, a body over ``admin.max.request.bytes``, or a bug (500, logged, never a traceback to the
client).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import trio
from quart import g, request
from quart_schema import QuartSchema, RequestSchemaValidationError
from quart_schema.openapi import HttpSecurityScheme, Info
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from kcore.admin.api.resources import resources
from kcore.admin.auth import TokenFile
from kcore.admin.client_certs import CertificateRefused, ClientCertificates
from kcore.admin.cluster_view import PEER_TIMEOUT_S, PEERS_KEY
from kcore.admin.dashboard import dashboard
from kcore.admin.health import health
from kcore.admin.kafka import AdminError
from kcore.admin.metrics import metrics
from kcore.admin.mirrors import mirrors
from kcore.server.peer_clients import PeerClients

log = logging.getLogger(__name__)

OPENAPI_PATH = "/v1/openapi.json"
# Served without a token: the probes, and the dashboard's page and files -- they hold no data;
# the page asks for the token and sends it with every API call it makes.
PUBLIC_PATHS = ("/health/", "/ui/")
PUBLIC_EXACT = ("/",)
BODY_DRAIN_TIMEOUT_S = 10.0


@dataclass
class AdminState:
    """What the app keeps of the node (``app.extensions["kcore"]``)."""

    broker: Any
    tokens: TokenFile | None


def _error(status: int, error: str, message: str):
    return {"error": error, "message": message}, status


class AdminRequest(TrioRequest):
    async def get_json(self, force: bool = False, silent: bool = False, cache: bool = True):
        try:
            return await super().get_json(force=force, silent=silent, cache=cache)
        except RecursionError:  # [[[[...]]]]: the parser's stack, not a ValueError
            raise AdminError(400, "INVALID_JSON", "the request body nests too deeply") from None
        except UnicodeDecodeError as e:  # decoded before Quart's parser sees it
            raise AdminError(400, "INVALID_JSON", f"the request body is not UTF-8: {e}") from None

    def on_json_loading_failed(self, error: Exception) -> Any:
        # Quart's own says only "Bad Request" (the parser's reason is for debug mode): the
        # caller is told where its JSON breaks.
        raise AdminError(400, "INVALID_JSON", f"the request body is not valid JSON: {error}")


def create_app(
    broker: Any,
    *,
    tokens: TokenFile | None,
    max_request_bytes: int,
    certificates: ClientCertificates | None = None,
) -> QuartTrio:
    """The app of ``broker``'s endpoint: callers authenticated by ``tokens`` (None: no
    token file) and, on https:// listeners with admin.ssl.client.auth, by ``certificates``."""
    app = QuartTrio("kcore.admin")
    app.request_class = AdminRequest
    # "/v1/topics//configs" (an empty name) is a 404 in JSON, not an HTML redirect elsewhere.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = max_request_bytes
    app.config["JSON_SORT_KEYS"] = False
    app.extensions["kcore"] = AdminState(broker, tokens)
    # Requests to the other brokers (a mirror described for the whole cluster), as this node;
    # closed by AdminServer when the endpoint stops.
    app.extensions[PEERS_KEY] = PeerClients(
        broker,
        f"kcore-admin-{broker.node_id}",
        connect_timeout=PEER_TIMEOUT_S,
        request_timeout=PEER_TIMEOUT_S,
    )
    QuartSchema(
        app,
        openapi_path=OPENAPI_PATH,
        redoc_ui_path=None,  # the UIs load their scripts from a CDN: nothing is fetched
        scalar_ui_path=None,
        swagger_ui_path=None,
        info=Info(title="kcore admin API", version="1"),
        security_schemes={"bearer": HttpSecurityScheme(scheme="bearer")},
        security=[{"bearer": []}] if tokens is not None else None,
    )
    app.register_blueprint(health)
    for blueprint in _api_blueprints():
        app.register_blueprint(blueprint)

    @app.before_request
    async def authenticate():
        # The caller: a bearer token's principal when the request carries one (a wrong token
        # is refused, whatever certificate came with it), else its client certificate's.
        path = request.path
        public = path in PUBLIC_EXACT or path.startswith(PUBLIC_PATHS)
        header = request.headers.get("Authorization")
        principal = None
        if tokens is not None and header:
            principal = tokens.principal(header)
        elif certificates is not None:
            try:
                principal = certificates.principal()
            except CertificateRefused as e:
                if not public:
                    return _error(401, "UNAUTHENTICATED", f"client certificate refused: {e}")
        if principal is not None:
            g.principal = principal
            return None
        if tokens is None or public:
            return None
        body, status = _error(
            401,
            "UNAUTHENTICATED",
            "a valid Authorization: Bearer token"
            + (" or client certificate" if certificates is not None else "")
            + " is needed",
        )
        return body, status, {"WWW-Authenticate": 'Bearer realm="kcore"'}

    @app.after_request
    async def finish_reading_the_body(response):
        # Hypercorn starts the next request of a keep-alive connection only once this one's
        # body is all in: a response sent before (a 401, a route that reads no body) would
        # leave the connection stuck. The rest is read and dropped, bounded by
        # admin.max.request.bytes and Hypercorn's read timeout; past the limit, or should the
        # body not come, the connection is closed after the response.
        try:
            with trio.move_on_after(BODY_DRAIN_TIMEOUT_S) as scope:
                async for _ in request.body:
                    pass
            if scope.cancelled_caught:
                response.headers["Connection"] = "close"
        except RequestEntityTooLarge:
            response.headers["Connection"] = "close"
        return response

    @app.errorhandler(AdminError)
    async def admin_error(e: AdminError):
        return e.body(), e.status

    @app.errorhandler(RequestSchemaValidationError)
    async def invalid_body(e: RequestSchemaValidationError):
        return _error(400, "INVALID_REQUEST", _validation_message(e.validation_error))

    @app.errorhandler(HTTPException)
    async def http_error(e: HTTPException):
        name = (e.name or "error").upper().replace(" ", "_")
        return _error(e.code or 500, name, e.description or name)

    @app.errorhandler(Exception)
    async def unexpected(e: Exception):
        log.exception("admin request %s %s failed", request.method, request.path)
        return _error(500, "UNKNOWN_SERVER_ERROR", "the request failed; the broker log says why")

    return app


def _validation_message(error: Any) -> str:
    """pydantic's errors as one line: ``topics.0.name: Field required; ...``."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        parts = []
        for item in errors():
            where = ".".join(str(x) for x in item.get("loc", ())) or "body"
            parts.append(f"{where}: {item.get('msg', 'invalid')}")
        return "; ".join(parts)
    return str(error) or "the request body does not match its schema"


def _api_blueprints() -> list[Any]:
    """The /v1 API, /metrics and the dashboard, each a blueprint of its own module."""
    return [dashboard, metrics, mirrors, resources]
