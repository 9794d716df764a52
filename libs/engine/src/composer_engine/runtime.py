"""What every database-backed service holds while it serves, opened and closed in one place.

A pool (and a Redis client), the schema checked before anything runs (an
outdated database stops the service with the fix named), the admin port with
the matching readiness checks, and the stop event SIGTERM or SIGINT sets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import composer_queue
import composer_repo as repo
from composer_common import service
from composer_common.admin import Check, serve_admin
from composer_common.settings import CommonSettings


@dataclass(frozen=True, slots=True)
class Runtime:
    pool: repo.Pool
    #: None for a service that was opened without Redis.
    redis: composer_queue.RedisQueue | None
    #: Set by SIGTERM or SIGINT: the service's loop returns when it is.
    stop: asyncio.Event

    @property
    def queue(self) -> composer_queue.RedisQueue:
        """The Redis client; only for a service opened with Redis."""
        if self.redis is None:
            raise RuntimeError("this service was opened without Redis: serving(..., redis=True)")
        return self.redis


@asynccontextmanager
async def serving(
    settings: CommonSettings, *, pool_size: int, redis: bool = True
) -> AsyncIterator[Runtime]:
    """Open the service's resources for the block; raises SchemaOutdated before serving."""
    pool = await repo.create_pool(settings.database_url, min_size=1, max_size=pool_size)
    client = composer_queue.connect(settings.redis_url) if redis else None
    try:
        await repo.check_ready(pool)
        checks: dict[str, Check] = {"database": lambda: repo.check_ready(pool)}
        if client is not None:
            checks["redis"] = client.ping
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            yield Runtime(pool, client, stop)
    finally:
        if client is not None:
            await client.close()
        await pool.close()
