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
            # the waits' groups, the staged ones held until their time, and the
            # schedules' batches (4 starts, 2 write-backs, 1 status read) beside them
            "timer",
            pool_size=settings.timer_concurrency + settings.timer_stage_slots + 8,
            engine=settings.engine_config(prepare_templates=True),
        )
    ) as rt:
        engine = rt.engine
        timer = Timer(
            engine,
            rt.queue,
            prefix=settings.redis_prefix,
            batch_size=settings.timer_batch_size,
            concurrency=settings.timer_concurrency,
            group_size=settings.timer_group_size,
            poll_seconds=settings.timer_poll_seconds,
            busy_retry_seconds=settings.timer_busy_retry_seconds,
            lead_seconds=settings.timer_lead_seconds,
            stage_cost_seconds=settings.timer_stage_cost_seconds,
            bucket_seconds=settings.timer_bucket_seconds,
            stage_slots=settings.timer_stage_slots,
        )
        log.info(
            "firing due timers (batches of %d, %d groups of %d at once; staged up to %.2fs ahead)",
            settings.timer_batch_size,
            settings.timer_concurrency,
            settings.timer_group_size,
            settings.timer_lead_seconds,
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
