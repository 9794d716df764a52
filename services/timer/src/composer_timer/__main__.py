"""``composer-timer``: fire due timers until SIGTERM."""

from __future__ import annotations

import logging
import sys

import composer_repo as repo
from composer_common import service
from composer_engine import Engine
from composer_engine.runtime import serving
from composer_timer.loop import Timer
from composer_timer.settings import TimerSettings

log = logging.getLogger("composer.timer")


async def serve(settings: TimerSettings) -> None:
    async with serving(settings, pool_size=settings.timer_concurrency + 2) as rt:
        timer = Timer(
            Engine(rt.pool, redis=rt.redis, redis_prefix=settings.redis_prefix),
            rt.queue,
            prefix=settings.redis_prefix,
            batch_size=settings.timer_batch_size,
            concurrency=settings.timer_concurrency,
            poll_seconds=settings.timer_poll_seconds,
            busy_retry_seconds=settings.timer_busy_retry_seconds,
        )
        log.info(
            "firing due timers (batches of %d, %d at once)",
            settings.timer_batch_size,
            settings.timer_concurrency,
        )
        await timer.run(rt.stop)
        log.info("stopped after firing %d timer(s)", timer.fired)


def main() -> int:
    settings = TimerSettings()
    return service.run(
        "timer", settings, lambda: serve(settings), startup_errors=(repo.SchemaOutdated,)
    )


if __name__ == "__main__":
    sys.exit(main())
