"""``composer-timer``: fire due timers until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from composer_service import run, serving
from composer_timer.loop import Timer
from composer_timer.schedules import ScheduleFirer
from composer_timer.settings import TimerSettings

log = logging.getLogger("composer.timer")


async def serve(settings: TimerSettings) -> None:
    async with serving(
        settings.runtime(
            "timer", pool_size=settings.timer_concurrency + 4, engine=settings.engine_config()
        )
    ) as rt:
        engine = rt.engine
        timer = Timer(
            engine,
            rt.queue,
            prefix=settings.redis_prefix,
            batch_size=settings.timer_batch_size,
            concurrency=settings.schedule_batch_size,
            poll_seconds=settings.timer_poll_seconds,
            busy_retry_seconds=settings.timer_busy_retry_seconds,
        )
        log.info(
            "firing due timers (batches of %d, %d at once)",
            settings.timer_batch_size,
            settings.timer_concurrency,
        )
        firer = ScheduleFirer(
            engine,
            rt.queue,
            prefix=settings.redis_prefix,
            batch_size=settings.schedule_batch_size,
            concurrency=settings.schedule_batch_size,
            poll_seconds=settings.schedule_poll_seconds,
        )
        # the runtime closes the engine, then the pool
        await asyncio.gather(timer.run(rt.stop), firer.run(rt.stop))
        log.info(
            "stopped after firing %d timer(s) and starting %d scheduled run(s)",
            timer.fired,
            firer.started,
        )


def main() -> int:
    settings = TimerSettings()
    return run("timer", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
