"""The loop both of the timer's jobs run: a pass, then a sleep the pass chose, cut short
by a TIMER hint; an outage or a bug backs off and tries again, never ending the
service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import composer_queue as cq
from composer_common.logs import alert
from composer_engine import Unavailable
from composer_service import sleep_or_stop

log = logging.getLogger("composer.timer")


async def run_passes(
    stop: asyncio.Event,
    redis: cq.Queue,
    prefix: str,
    what: str,
    one_pass: Callable[[], Awaitable[float]],
) -> None:
    """Run ``one_pass`` until ``stop`` is set; it answers how long to sleep before the
    next (0: go again at once). ``what`` names the job in the logs."""
    backoff = cq.Backoff(0.1, 5.0)
    async with cq.Waker(redis, prefix, cq.TIMER) as waker:
        while not stop.is_set():
            try:
                wait = await one_pass()
                backoff.reset()
            except (Unavailable, OSError) as exc:
                delay = backoff.next()
                log.warning("%s paused: %s; retrying in %.1fs", what, exc, delay)
                await sleep_or_stop(stop, delay)
                continue
            except Exception as exc:  # a bug outside any one item: keep the service up
                delay = backoff.next()
                alert(log, "a pass of %s failed (%r); retrying in %.1fs", what, exc, delay)
                await sleep_or_stop(stop, delay)
                continue
            if wait > 0:
                await waker.wait_or_stop(stop, wait)
