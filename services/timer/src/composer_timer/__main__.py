"""``composer-timer``: fire due timers until SIGTERM."""

from __future__ import annotations

import logging
import sys

from composer_service import run, serving
from composer_timer.loop import Timer
from composer_timer.settings import TimerSettings

log = logging.getLogger("composer.timer")


async def serve(settings: TimerSettings) -> None:
    async with serving(
        settings.runtime(
            "timer", pool_size=settings.timer_concurrency + 2, engine=settings.engine_config()
        )
    ) as rt:
        engine = rt.engine
        timer = Timer(
            engine,
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
        await timer.run(rt.stop)  # the runtime closes the engine, then the pool
        log.info("stopped after firing %d timer(s)", timer.fired)


def main() -> int:
    settings = TimerSettings()
    return run("timer", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
