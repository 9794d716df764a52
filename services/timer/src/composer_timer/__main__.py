"""``composer-timer``: fire due timers until SIGTERM."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service, streams
from composer_common.admin import serve_admin
from composer_engine import Engine
from composer_timer.loop import Timer
from composer_timer.settings import TimerSettings

log = logging.getLogger("composer.timer")


async def serve(settings: TimerSettings) -> None:
    pool = await repo.create_pool(settings.database_url, max_size=settings.timer_concurrency + 2)
    redis = streams.connect(settings.redis_url)
    try:
        await repo.check_ready(pool)
        timer = Timer(
            Engine(pool, redis=redis, redis_prefix=settings.redis_prefix),
            redis,
            prefix=settings.redis_prefix,
            batch_size=settings.timer_batch_size,
            concurrency=settings.timer_concurrency,
            poll_seconds=settings.timer_poll_seconds,
            busy_retry_seconds=settings.timer_busy_retry_seconds,
        )
        checks = {"database": lambda: repo.check_ready(pool), "redis": lambda: streams.ping(redis)}
        stop = service.stop_on_signals()
        async with serve_admin(settings.admin_port, checks, host=settings.admin_host):
            log.info(
                "firing due timers (batches of %d, %d at once)",
                settings.timer_batch_size,
                settings.timer_concurrency,
            )
            await timer.run(stop)
            log.info("stopped after firing %d timer(s)", timer.fired)
    finally:
        await redis.aclose()
        await pool.close()


def main() -> int:
    settings = TimerSettings()
    return service.run(
        "timer", settings, lambda: serve(settings), startup_errors=(repo.SchemaOutdated,)
    )


if __name__ == "__main__":
    sys.exit(main())
