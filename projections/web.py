"""The projections' HTTP server: every route in one place, the JSON API, /metrics and the dashboard's files (I/O shell).

Everything a client can GET is mounted by `application`, so wrapping it (authentication, TLS)
is one change here. The dashboard is static HTML, CSS and plain JavaScript drawing SVG,
served from projections/dashboard/ with no third-party script and no CDN: it works offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from projections.api import route
from projections.http_security import authorized
from projections.metrics import exposition, registry_for
from projections.recent import Rejections
from projections.view import View

DASHBOARD = Path(__file__).resolve().parent / "dashboard"
# The only files served from DASHBOARD (no path from a request ever reaches the file system).
STATIC = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}


class Served(Protocol):
    """What the routes read of the running process (projections.app.Process)."""

    rejections: Rejections

    @property
    def view(self) -> View: ...

    def read_since_start(self) -> dict[str, int]: ...

    def liveness(self) -> dict[str, Any]: ...

    async def refresh_lag(self) -> None: ...


def application(process: Served, token: str | None = None) -> web.Application:
    """The aiohttp application: dashboard at /, /metrics, the JSON API everywhere else.

    With a ``token``, every route but /health needs it (projections/http_security.py): as
    ``Authorization: Bearer <token>`` or, for the dashboard in a browser, ``?token=<token>``.
    """
    registry = registry_for(lambda: process.view, process.liveness)

    @web.middleware
    async def require_token(request: web.Request, handler: Any) -> web.StreamResponse:
        if not authorized(
            request.path,
            request.headers.get("Authorization"),
            token,
            request.query.get("token"),
        ):
            return web.Response(
                body=orjson.dumps(
                    {"error": "a bearer token is required (Authorization: Bearer ... or ?token=)"}
                ),
                content_type="application/json",
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="quotaflow"'},
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def answer(request: web.Request) -> web.Response:
        view = process.view
        if request.path.strip("/") == "health":
            await process.refresh_lag()
            view.process["liveness"] = process.liveness()
        view.process["read_since_start"] = process.read_since_start()
        status, body = route(view, request.path, dict(request.query), process.rejections)
        return web.Response(
            body=orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
            content_type="application/json",
            status=status,
        )

    async def metrics(_: web.Request) -> web.Response:
        await process.refresh_lag()
        response = web.Response(body=exposition(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def static(request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        kind = STATIC.get(name)
        if kind is None:
            raise web.HTTPNotFound(text=f"no dashboard file {name!r}")
        body = (DASHBOARD / name).read_bytes()
        given = request.query.get("token")
        if name == "index.html" and given:  # the page's own files need the token too
            suffix = ("?token=" + quote(given, safe="")).encode()
            for asset in (b"/dashboard/style.css", b"/dashboard/app.js"):
                body = body.replace(asset + b'"', asset + suffix + b'"')
        return web.Response(
            body=body,
            content_type=kind,
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    app = web.Application(middlewares=[require_token])
    app.router.add_get("/", static)
    app.router.add_get("/dashboard/{name}", static)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/{path:.*}", answer)
    return app
