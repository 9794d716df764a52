"""``composer-lease-sweeper``: recover what is stuck, every few seconds, until SIGTERM."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service, streams
from composer_common.admin import serve_admin
from composer_engine import Engine
from composer_lease_sweeper.loop import Sweeper
from composer_lease_sweeper.settings import SweeperSettings

log = logging.getLogger("composer.sweeper")


async def serve(settings: SweeperSettings) -> None:
    # One connection holds the singleton lock through a sweep; the rest apply events.
    pool = await repo.create_pool(settings.database_url, max_size=4)
    redis = streams.connect(settings.redis_url)
    try:
        await repo.check_ready(pool)
        sweeper = Sweeper(
            Engine(pool, redis=redis, redis_prefix=settings.redis_prefix),
            redis,
            prefix=settings.redis_prefix,
            shards=settings.shards,
            interval_seconds=settings.sweeper_interval_seconds,
            lease_ttl=settings.lease_ttl_seconds,
            lost_after=settings.sweeper_lost_after_seconds,
            max_deliveries=settings.sweeper_max_deliveries,
            batch_size=settings.sweeper_batch_size,
        )
        checks = {"database": lambda: repo.check_ready(pool), "redis": lambda: streams.ping(redis)}
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            log.info(
                "sweeping every %.1fs (lease TTL %.0fs, lost after %.0fs, at most %d deliveries)",
                settings.sweeper_interval_seconds,
                settings.lease_ttl_seconds,
                settings.sweeper_lost_after_seconds,
                settings.sweeper_max_deliveries,
            )
            await sweeper.run(stop)
            log.info("stopped after %d sweep(s): %s", sweeper.sweeps, sweeper.totals)
    finally:
        await redis.aclose()
        await pool.close()


def main() -> int:
    settings = SweeperSettings()
    return service.run(
        "lease-sweeper", settings, lambda: serve(settings), startup_errors=(repo.SchemaOutdated,)
    )


if __name__ == "__main__":
    sys.exit(main())
