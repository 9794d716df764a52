"""``composer-api-gateway``: serve the REST API until SIGTERM, then drain.

Besides the API port (which has its own /healthz, /readyz and /metrics, as
DESIGN.md §6 lists them), the gateway serves the admin port every service
has when COMPOSER_ADMIN_PORT is set, so a supervisor checks all services alike.
"""

from __future__ import annotations

import logging
import sys

from aiohttp import web

import composer_repo as repo
from composer_api_gateway.app import create_app
from composer_api_gateway.settings import GatewaySettings
from composer_api_gateway.state import POOL, REDIS, GatewayConfig
from composer_common import service
from composer_common.admin import serve_admin

log = logging.getLogger("composer.api")


def config_from(settings: GatewaySettings) -> GatewayConfig:
    return GatewayConfig(
        database_url=settings.database_url,
        redis_url=settings.redis_url,
        redis_prefix=settings.redis_prefix,
        tokens=settings.api_tokens,
        max_body_bytes=settings.api_max_body_bytes,
        max_wait_seconds=settings.api_max_wait_seconds,
        result_poll_seconds=settings.api_result_poll_seconds,
        pool_size=settings.pool_size,
    )


async def serve(settings: GatewaySettings) -> None:
    try:
        app = create_app(config_from(settings))
    except ValueError as exc:  # a malformed COMPOSER_API_TOKENS
        raise service.StartupError(str(exc)) from exc
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=settings.drain_seconds)
    await runner.setup()  # the cleanup contexts' setup: pool (schema checked), Redis, waiters
    try:
        pool, redis = app[POOL], app[REDIS]
        checks = {"database": lambda: repo.check_ready(pool), "redis": redis.ping}
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            site = web.TCPSite(runner, settings.api_host, settings.api_port)
            try:
                await site.start()
            except OSError as exc:
                raise service.StartupError(
                    f"cannot listen on {settings.api_host}:{settings.api_port} ({exc.strerror}); "
                    "set COMPOSER_API_PORT to a free port"
                ) from exc
            log.info("serving the REST API on http://%s:%d", settings.api_host, settings.api_port)
            await stop.wait()
            log.info(
                "stopping: draining in-flight requests for up to %.0fs", settings.drain_seconds
            )
    finally:
        await runner.cleanup()


def main() -> int:
    settings = GatewaySettings()
    return service.run(
        "api-gateway", settings, lambda: serve(settings), startup_errors=(repo.SchemaError,)
    )


if __name__ == "__main__":
    sys.exit(main())
