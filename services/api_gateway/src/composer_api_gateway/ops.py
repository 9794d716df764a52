"""Open routes for operators and tools: liveness, readiness, metrics, the spec, the docs."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

import composer_queue
import composer_repo as repo
from composer_api_gateway.definitions import json_response
from composer_api_gateway.models import Health, Identity, Readiness
from composer_api_gateway.state import AUTH, DOCS, METRICS, POOL, REDIS, SPEC

_CHECK_SECONDS = 2.0


async def healthz(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about the database (that is /readyz)."""
    return json_response(Health(status="ok"))


async def whoami(request: web.Request) -> web.Response:
    """The role of the caller's token (the web UI shows only the actions it allows)."""
    role = request.app[AUTH].role_of(request.headers.get("Authorization"))
    return json_response(Identity(role=role.label))


async def readyz(request: web.Request) -> web.Response:
    """Ready to serve: the database answers at the schema version this code needs, Redis answers."""
    checks: dict[str, str] = {}
    version: int | None = None
    try:
        async with asyncio.timeout(_CHECK_SECONDS):
            async with repo.transaction(request.app[POOL]) as conn:
                version = await repo.schema_version(conn)
        checks["database"] = "ok"
        checks["schema"] = (
            "ok"
            if version >= repo.SCHEMA_VERSION
            else f"version {version}, needs {repo.SCHEMA_VERSION}: run `composer migrate`"
        )
    except (repo.RepoError, TimeoutError, OSError) as exc:
        checks["database"] = f"unreachable: {exc or 'timed out'}"
    try:
        async with asyncio.timeout(_CHECK_SECONDS):
            await request.app[REDIS].ping()
        checks["redis"] = "ok"
    except (composer_queue.QueueError, TimeoutError) as exc:
        checks["redis"] = f"unreachable: {exc or 'timed out'}"
    ready = all(v == "ok" for v in checks.values())
    return json_response(
        Readiness(
            status="ready" if ready else "not ready",
            checks=checks,
            schema_version=version,
            expected_schema_version=repo.SCHEMA_VERSION,
        ),
        200 if ready else 503,
    )


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[METRICS].render(), content_type="text/plain", charset="utf-8"
    )


async def openapi(request: web.Request) -> web.Response:
    return web.Response(
        text=json.dumps(request.app[SPEC], ensure_ascii=False), content_type="application/json"
    )


async def docs(request: web.Request) -> web.Response:
    return web.Response(text=request.app[DOCS], content_type="text/html", charset="utf-8")
