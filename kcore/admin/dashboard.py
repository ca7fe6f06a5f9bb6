"""The dashboard: ``/`` and its files under ``/ui/``, plain HTML, CSS and JavaScript shipped in
the package (``kcore/admin/ui/``), nothing built and nothing fetched from elsewhere.

The page holds no data: its script polls the ``/v1`` API every few seconds with the bearer
token it asks for on a 401 (kept in the tab's sessionStorage), so these routes are public
(:data:`kcore.admin.app.PUBLIC_PATHS`). The files are read once, when the app is made, so a
request never touches the disk (nothing blocks the loop); each is served with an ETag, and a
Content-Security-Policy that lets the page load only its own files and talk only to this
endpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from quart import Blueprint, Response, current_app, request
from quart_schema import hide
from werkzeug.exceptions import NotFound

dashboard = Blueprint("dashboard", __name__)

UI_PACKAGE = "kcore.admin"
UI_DIR = "ui"
INDEX = "index.html"
FILES_KEY = "kcore.dashboard_files"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (the ETag makes that a 304): an upgraded node's page is seen.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class UiFile:
    body: bytes
    content_type: str
    etag: str


def load_files() -> dict[str, UiFile]:
    """Every file of ``kcore/admin/ui`` by name."""
    files = {}
    for entry in resources.files(UI_PACKAGE).joinpath(UI_DIR).iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if not entry.is_file() or suffix not in CONTENT_TYPES:
            continue
        body = entry.read_bytes()
        etag = hashlib.sha256(body).hexdigest()[:20]
        files[entry.name] = UiFile(body, CONTENT_TYPES[suffix], etag)
    if INDEX not in files:
        raise RuntimeError(f"the dashboard's {INDEX} is missing from the kcore package")
    return files


@dashboard.record_once
def _load(state) -> None:
    state.app.extensions[FILES_KEY] = load_files()


def _serve(name: str) -> Response:
    found = current_app.extensions[FILES_KEY].get(name)
    if found is None:
        raise NotFound(f"the dashboard has no file {name}")
    headers = {**HEADERS, "ETag": f'"{found.etag}"'}
    if found.etag in request.headers.get("If-None-Match", ""):
        return Response(b"", 304, headers=headers)
    return Response(found.body, 200, content_type=found.content_type, headers=headers)


@dashboard.get("/")
@hide
async def index():
    return _serve(INDEX)


@dashboard.get("/ui/<name>")
@hide
async def ui_file(name: str):
    return _serve(name)
