"""The aiohttp application: routes, auth and the error middleware, on a pool and a Redis
client the caller opened (``composer_service.serving`` in ``__main__``, which also
checked the schema).

The long-poll waiters have a cleanup context (started before the app
serves, closed after).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from opentelemetry.trace import SpanKind

import composer_queue
from composer_api_gateway import examples, ui
from composer_api_gateway.auth import Authenticator, parse_tokens
from composer_api_gateway.hosts import HostAllowList, host_middleware
from composer_api_gateway.instruments import instruments
from composer_api_gateway.openapi import build_spec, render_docs
from composer_api_gateway.problems import ApiProblem, from_engine
from composer_api_gateway.routes import ROUTES, Handler, Route
from composer_api_gateway.state import (
    AUTH,
    CALLER,
    CONFIG,
    DOCS,
    ENGINE,
    REDIS,
    SPEC,
    WAITERS,
    WORKFLOWS,
    GatewayConfig,
)
from composer_api_gateway.waiters import RunWaiters
from composer_common.telemetry import extract, recording, tracer
from composer_engine import Engine, EngineError

log = logging.getLogger("composer.api")


def create_app(
    config: GatewayConfig, *, engine: Engine, redis: composer_queue.RedisQueue
) -> web.Application:
    """Build the app on ``engine`` (``composer_service.serving`` builds it) and the
    queue client ``redis`` (both stay the caller's to close); raises ValueError for
    a malformed COMPOSER_API_TOKENS.

    The Host check runs inside the problems middleware (a refused host is a
    problem+json answer, counted like any other) and before every route."""
    authenticator = Authenticator(parse_tokens(config.tokens))
    app = web.Application(
        client_max_size=config.max_body_bytes,
        middlewares=[
            tracing_middleware,
            problems_middleware,
            host_middleware(HostAllowList(config.allowed_hosts)),
        ],
    )
    app[CONFIG] = config
    app[AUTH] = authenticator
    app[REDIS] = redis
    app[ENGINE] = engine
    app[WORKFLOWS] = engine.workflows
    app[SPEC] = build_spec(ROUTES)
    app[DOCS] = render_docs(app[SPEC])
    for route in ROUTES:
        app.router.add_route(
            route.method, route.pattern or route.path, guarded(route, authenticator), name=None
        )
    ui.add_routes(app)  # static files, not part of the API (nor of its OpenAPI document)
    if config.examples:
        examples.add_routes(app)  # what examples/ call, so they run offline
    app.cleanup_ctx.append(_waiters)
    if not authenticator.configured:
        log.warning("COMPOSER_API_TOKENS is empty: every /v1 request will be refused (401)")
    return app


def guarded(route: Route, auth: Authenticator) -> Handler:
    """The route's handler behind its role check (open routes pass straight through)."""
    if route.role is None:
        return route.handler
    needed = route.role
    action = f"{route.method} {route.path}"

    async def handler(request: web.Request) -> web.StreamResponse:
        caller = auth.caller_of(request.headers.get("Authorization"))
        auth.require(caller.role, needed, action)
        request[CALLER] = caller
        return await route.handler(request)

    handler.__name__ = route.handler.__name__
    return handler


@web.middleware
async def tracing_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A server span per request, continuing the caller's trace (W3C traceparent) when it sent one.

    The engine's spans and the dispatches they write join it, so one trace runs
    from the request through the outbox and the stream into the worker's handler.
    """
    if "traceparent" not in request.headers and not recording():
        # no provider and no trace to carry on: the span would be no-op (a start's
        # dispatches then carry no traceparent either way)
        return await handler(request)
    info = request.match_info.route.resource
    route = info.canonical if info is not None else "unmatched"
    with tracer().start_as_current_span(
        f"{request.method} {route}",
        context=extract(dict(request.headers)),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method, "http.route": route},
    ) as span:
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        return response


@web.middleware
async def problems_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as problem+json; every answer counted by route and status."""
    started = time.perf_counter()
    info = request.match_info.route.resource
    route = info.canonical if info is not None else "unmatched"
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except ApiProblem as exc:
        status = exc.status
        return exc.response(request.path)
    except EngineError as exc:
        problem = from_engine(exc)
        status = problem.status
        if status >= 500:
            log.warning("%s %s: %s", request.method, request.path, exc)
        return problem.response(request.path)
    except web.HTTPException as exc:  # aiohttp's own: 404, 405, 413 …
        status = exc.status
        if exc.status < 400:
            raise
        kind = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}.get(
            exc.status, "invalid-request"
        )
        detail = exc.text or exc.reason
        if exc.status == 404:
            detail = f"no route {request.method} {request.path}; see /docs"
        elif exc.status == 405:
            detail = f"{request.method} is not allowed on {request.path}; see /docs"
        elif exc.status == 413:
            detail = (
                f"the request body is larger than this API accepts "
                f"({request.app[CONFIG].max_body_bytes} bytes)"
            )
        return ApiProblem(exc.status, kind, detail).response(request.path)
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        status = 500
        return ApiProblem(500, "internal", "internal error (logged on the api-gateway)").response(
            request.path
        )
    finally:
        instruments().observe(request.method, route, status, time.perf_counter() - started)


async def _waiters(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    waiters = RunWaiters(app[REDIS], config.redis_prefix, poll_seconds=config.result_poll_seconds)
    await waiters.start()
    app[WAITERS] = waiters
    instruments().waiters.add(waiters)
    try:
        yield
    finally:
        instruments().waiters.discard(waiters)
        await waiters.close()
