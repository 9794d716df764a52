"""``composer-coordinator``: serve the worker protocol until SIGTERM, then drain."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service, streams
from composer_common.admin import serve_admin
from composer_coordinator.server import start_server
from composer_coordinator.settings import CoordinatorSettings
from composer_engine import Engine

log = logging.getLogger("composer.coordinator")


async def serve(settings: CoordinatorSettings) -> None:
    if not settings.worker_token:
        raise service.StartupError(
            "no worker token configured: set COMPOSER_WORKER_TOKEN (workers present it)"
        )
    pool = await repo.create_pool(settings.database_url, max_size=settings.pool_size)
    redis = streams.connect(settings.redis_url)
    try:
        await repo.check_ready(pool)
        checks = {"database": lambda: repo.check_ready(pool), "redis": lambda: streams.ping(redis)}
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            engine = Engine(pool, redis=redis, redis_prefix=settings.redis_prefix)
            server, port = await start_server(
                engine, address=settings.grpc_addr, token=settings.worker_token
            )
            log.info("serving the worker protocol on %s (port %d)", settings.grpc_addr, port)
            await stop.wait()
            log.info("stopping: draining in-flight calls for up to %.0fs", settings.drain_seconds)
            await server.stop(settings.drain_seconds)
    finally:
        await redis.aclose()
        await pool.close()


def main() -> int:
    settings = CoordinatorSettings()
    return service.run(
        "coordinator", settings, lambda: serve(settings), startup_errors=(repo.SchemaOutdated,)
    )


if __name__ == "__main__":
    sys.exit(main())
