"""``composer-api-gateway``: serve the REST API until SIGTERM, then drain.

The API port serves the API, its documents and a liveness /healthz; readiness
and metrics are on the admin port (COMPOSER_ADMIN_PORT) like every service's.
"""

from __future__ import annotations

import logging
import sys

from aiohttp import web

from composer_api_gateway.app import create_app
from composer_api_gateway.settings import GatewaySettings
from composer_api_gateway.state import GatewayConfig
from composer_service import StartupError, run, serving

log = logging.getLogger("composer.api")


def config_from(settings: GatewaySettings) -> GatewayConfig:
    return GatewayConfig(
        redis_prefix=settings.redis_prefix,
        shards=settings.shards,
        tokens=settings.api_tokens,
        max_body_bytes=settings.api_max_body_bytes,
        max_run_input_bytes=settings.max_run_input_bytes,
        max_signal_bytes=settings.max_signal_bytes,
        max_wait_seconds=settings.api_max_wait_seconds,
        result_poll_seconds=settings.api_result_poll_seconds,
    )


async def serve(settings: GatewaySettings) -> None:
    async with serving(settings.runtime("api-gateway", pool_size=settings.pool_size)) as rt:
        try:
            app = create_app(config_from(settings), pool=rt.pool, redis=rt.queue)
        except ValueError as exc:  # a malformed COMPOSER_API_TOKENS
            raise StartupError(str(exc)) from exc
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=settings.drain_seconds)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.api_host, settings.api_port)
            try:
                await site.start()
            except OSError as exc:
                raise StartupError(
                    f"cannot listen on {settings.api_host}:{settings.api_port} ({exc.strerror}); "
                    "set COMPOSER_API_PORT to a free port"
                ) from exc
            log.info("serving the REST API on http://%s:%d", settings.api_host, settings.api_port)
            await rt.stop.wait()
            log.info(
                "stopping: draining in-flight requests for up to %.0fs", settings.drain_seconds
            )
        finally:
            await runner.cleanup()


def main() -> int:
    settings = GatewaySettings()
    return run("api-gateway", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
