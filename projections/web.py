"""The projections' HTTP server: every route in one place, the JSON API, /metrics and the dashboard's files (I/O shell).

Everything a client can GET is mounted by `application`, so wrapping it (authentication, TLS)
is one change here. The dashboard is static HTML, CSS and plain JavaScript drawing SVG,
served from projections/dashboard/ with no third-party script and no CDN: it works offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from projections.api import route
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


def application(process: Served) -> web.Application:
    """The aiohttp application: dashboard at /, /metrics, the JSON API everywhere else."""
    registry = registry_for(lambda: process.view, process.liveness)

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
        return web.Response(
            body=(DASHBOARD / name).read_bytes(),
            content_type=kind,
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    app = web.Application()
    app.router.add_get("/", static)
    app.router.add_get("/dashboard/{name}", static)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/{path:.*}", answer)
    return app
