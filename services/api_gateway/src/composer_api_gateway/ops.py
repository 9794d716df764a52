"""Open routes for operators and tools: liveness, the spec, the docs.

Readiness and metrics are on the admin port, as for every service
(``composer_service.serving``): its /readyz checks the gateway's pool and Redis
client, its /metrics carries the gateway's request metrics with the engine's.
"""

from __future__ import annotations

import json

from aiohttp import web

from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import Health, Identity
from composer_api_gateway.state import CALLER, DOCS, SPEC


async def healthz(request: web.Request) -> web.Response:
    """Alive: the API listener answers (what a load balancer in front of it asks). Says
    nothing about the database: that is the admin port's /readyz."""
    return json_response(Health(status="ok"))


async def whoami(request: web.Request) -> web.Response:
    """The name and role of the caller's token (the web UI shows only the actions the
    role allows)."""
    caller = request[CALLER]
    return json_response(Identity(name=caller.name, role=caller.role.label))


async def openapi(request: web.Request) -> web.Response:
    return web.Response(
        text=json.dumps(request.app[SPEC], ensure_ascii=False), content_type="application/json"
    )


async def docs(request: web.Request) -> web.Response:
    return web.Response(text=request.app[DOCS], content_type="text/html", charset="utf-8")
