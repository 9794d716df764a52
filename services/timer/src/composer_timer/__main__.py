"""``composer-timer``: fire due timers until SIGTERM."""

from __future__ import annotations

import logging
import sys

from composer_engine import Engine
from composer_engine.sealing import sealer_from
from composer_service import StartupError, run, serving
from composer_timer.loop import Timer
from composer_timer.settings import TimerSettings

log = logging.getLogger("composer.timer")


async def serve(settings: TimerSettings) -> None:
    try:
        sealer = sealer_from(settings.encryption_keys)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    async with serving(settings.runtime("timer", pool_size=settings.timer_concurrency + 2)) as rt:
        engine = Engine(
            rt.pool,
            redis=rt.queue,
            redis_prefix=settings.redis_prefix,
            shards=settings.shards,
            max_node_input_bytes=settings.max_node_input_bytes,
            sealer=sealer,
        )
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
        try:
            await timer.run(rt.stop)
        finally:
            await engine.aclose()
        log.info("stopped after firing %d timer(s)", timer.fired)


def main() -> int:
    settings = TimerSettings()
    return run("timer", lambda: serve(settings))


if __name__ == "__main__":
    sys.exit(main())
