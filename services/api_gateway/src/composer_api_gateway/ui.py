"""The web UI: static files built from services/api_gateway/ui (``make ui``), served under /ui.

The UI is a client of the REST API like any other: the page itself is open,
and its scripts send the token the user pastes as a bearer header. Only
files inside the packaged folder are served, with a policy that lets the
page load nothing from anywhere else (the machine may be offline, and a
token in session storage should not meet third-party script).
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from composer_api_gateway.problems import ApiProblem

UI_DIR = Path(__file__).parent / "ui"
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", _to_index)
    app.router.add_get("/ui/{name:.*}", _file)


async def _to_index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def _file(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"] or "index.html"
    root = UI_DIR.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file() or path.name.startswith("."):
        raise ApiProblem(404, "not-found", f"the web UI has no file {name!r}; open /ui/")
    return web.FileResponse(path, headers=_HEADERS)
