"""``composer-coordinator``: serve the worker protocol until SIGTERM, then drain."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import composer_repo as repo
from composer_common import streams
from composer_common.logs import setup_logging
from composer_coordinator.server import start_server
from composer_coordinator.settings import CoordinatorSettings
from composer_engine import Engine

log = logging.getLogger("composer.coordinator")


async def serve(settings: CoordinatorSettings) -> None:
    pool = await repo.create_pool(settings.database_url, max_size=settings.pool_size)
    redis = streams.connect(settings.redis_url)
    try:
        async with repo.transaction(pool) as conn:
            await repo.require_schema(conn)
        engine = Engine(pool, redis=redis, redis_prefix=settings.redis_prefix)
        server, port = await start_server(
            engine, address=settings.grpc_addr, token=settings.worker_token
        )
        log.info("serving the worker protocol on %s (port %d)", settings.grpc_addr, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping: draining in-flight calls for up to %.0fs", settings.drain_seconds)
        await server.stop(settings.drain_seconds)
    finally:
        await redis.aclose()
        await pool.close()


def main() -> int:
    settings = CoordinatorSettings()
    setup_logging("coordinator", settings.log_level)
    try:
        asyncio.run(serve(settings))
    except repo.SchemaOutdated as exc:
        log.error("%s", exc)
        return 2
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
