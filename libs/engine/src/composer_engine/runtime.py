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
from typing import Any

import composer_repo as repo
from composer_common import service, streams
from composer_common.admin import Check, serve_admin
from composer_common.settings import CommonSettings


@dataclass(frozen=True, slots=True)
class Runtime:
    pool: repo.Pool
    #: None for a service that was opened without Redis.
    redis: Any
    #: Set by SIGTERM or SIGINT: the service's loop returns when it is.
    stop: asyncio.Event


@asynccontextmanager
async def serving(
    settings: CommonSettings, *, pool_size: int, redis: bool = True
) -> AsyncIterator[Runtime]:
    """Open the service's resources for the block; raises SchemaOutdated before serving."""
    pool = await repo.create_pool(settings.database_url, min_size=1, max_size=pool_size)
    client = streams.connect(settings.redis_url) if redis else None
    try:
        await repo.check_ready(pool)
        checks: dict[str, Check] = {"database": lambda: repo.check_ready(pool)}
        if client is not None:
            checks["redis"] = lambda: streams.ping(client)
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            yield Runtime(pool, client, stop)
    finally:
        if client is not None:
            await client.aclose()
        await pool.close()
