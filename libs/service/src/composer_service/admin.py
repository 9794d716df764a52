"""Every service's admin port: /healthz (alive), /readyz (its dependencies answer), /metrics.

Readiness checks are named coroutines (the database with its schema version,
Redis, and any a service adds); ``serving()`` serves them for every service.
/readyz answers 503 listing the ones that failed, so an orchestrator stops
sending traffic without killing a process that is merely waiting.

Every route answers only for the API's Host allow-list (COMPOSER_ALLOWED_HOSTS,
composer_service.hosts), 421 otherwise, so a page that DNS-rebinds its name to
127.0.0.1 cannot read /metrics (issue 25). A Host that is an IP address is
answered too: that is what a kubelet's probe and a Prometheus scraping pods send,
and no rebinding page can send one (its Host is its own name).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from composer_service.errors import listen_error
from composer_service.hosts import LOOPBACK_HOSTS, HostAllowList, is_address

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[object]]


def admin_app(
    checks: Mapping[str, Check],
    *,
    check_timeout: float = 3.0,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
) -> web.Application:
    allowed = HostAllowList(allowed_hosts)

    @web.middleware
    async def known_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if allowed.allows(host) or is_address(host):
            return await handler(request)
        return web.json_response(
            {"error": allowed.refusal(host, "admin port", "the service")}, status=421
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        results: dict[str, str] = {}
        for name, check in checks.items():
            try:
                await asyncio.wait_for(check(), check_timeout)
                results[name] = "ok"
            except Exception as exc:  # a failed check is the answer, not an error
                results[name] = f"failed: {exc}"
        ready = all(v == "ok" for v in results.values())
        return web.json_response({"ready": ready, "checks": results}, status=200 if ready else 503)

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(middlewares=[known_host])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


@contextlib.asynccontextmanager
async def serve_admin(
    port: int | None,
    checks: Mapping[str, Check],
    *,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
) -> AsyncIterator[int | None]:
    """Serve the admin routes on ``port`` for the block (None: no admin port), for the Host
    names ``allowed_hosts`` and IP addresses; yields the port bound. PortInUse (naming
    COMPOSER_ADMIN_PORT) when another process holds it."""
    if port is None:
        yield None
        return
    runner = web.AppRunner(admin_app(checks, allowed_hosts=allowed_hosts), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise listen_error(exc, host, port, "COMPOSER_ADMIN_PORT") from exc
    bound = int(runner.addresses[0][1])  # the port 0 became
    log.info("admin port %d: /healthz /readyz /metrics", bound)
    try:
        yield bound
    finally:
        await runner.cleanup()
