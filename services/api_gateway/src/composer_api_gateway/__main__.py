"""``composer-api-gateway``: serve the REST API until SIGTERM, then drain."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

import composer_repo as repo
from composer_api_gateway.app import create_app
from composer_api_gateway.settings import GatewaySettings
from composer_api_gateway.state import GatewayConfig
from composer_common.logs import setup_logging

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
    app = create_app(config_from(settings))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=settings.drain_seconds)
    await runner.setup()  # runs the cleanup contexts' setup: pool, schema check, Redis
    try:
        site = web.TCPSite(runner, settings.api_host, settings.api_port)
        await site.start()
        log.info("serving the REST API on http://%s:%d", settings.api_host, settings.api_port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping: draining in-flight requests for up to %.0fs", settings.drain_seconds)
    finally:
        await runner.cleanup()


def main() -> int:
    settings = GatewaySettings()
    setup_logging("api-gateway", settings.log_level)
    try:
        asyncio.run(serve(settings))
    except repo.SchemaError as exc:
        log.error("%s", exc)
        return 2
    except repo.RepoError as exc:
        log.error("cannot use the database at COMPOSER_DATABASE_URL: %s", exc)
        return 2
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", settings.api_host, settings.api_port, exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
