"""Firing due schedules (docs/architecture.md §6.8): the timer's second loop.

Each pass claims the schedules whose due time came (``Engine.schedules.fire_due``)
and starts one run per fire time under a key made of the schedule and the time,
so any number of replicas, a restart or a crash mid-pass never start a fire
twice; a replica that dies with a claim lets it run out (5 s) and the next
pass repeats its starts, which find their runs. Between passes it sleeps until
the soonest due time, at most ``poll_seconds``; a TIMER hint (a schedule created,
resumed, triggered or backfilled) cuts the sleep short.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.metrics import Histogram

import composer_queue as cq
from composer_common.telemetry import meter
from composer_engine import Engine, utcnow
from composer_timer.passes import run_passes

log = logging.getLogger("composer.timer")


def _token() -> str:
    """This replica's name on its claims: host, process, and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class ScheduleFirer:
    engine: Engine
    redis: cq.Queue
    prefix: str = "composer"
    batch_size: int = 100
    #: Schedules fired at once: their starts, reads and write-backs are gathered into
    #: a few transactions (a group commit), so this is cheap.
    concurrency: int = 100
    poll_seconds: float = 1.0
    clock: Callable[[], dt.datetime] = utcnow
    token: str = field(default_factory=_token)
    #: Fires this replica started, skipped, and found missed.
    started: int = 0
    skipped: int = 0
    missed: int = 0
    #: Seconds from each recent fire's due time to its start's commit (metrics, bench).
    lags: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=100_000)
    )

    async def run(self, stop: asyncio.Event) -> None:
        """Fire due schedules until ``stop`` is set."""
        await run_passes(stop, self.redis, self.prefix, "schedules", self._pass)

    async def _pass(self) -> float:
        if await self.fire_due():
            return 0.0  # a full batch: more may be due
        next_due = await self.engine.schedules.next_due()
        if next_due is None:
            return self.poll_seconds
        return min(self.poll_seconds, max(0.0, (next_due - self.clock()).total_seconds()))

    async def fire_due(self) -> bool:
        """One pass; True when it claimed a full batch (look again at once)."""
        done = await self.engine.schedules.fire_due(
            token=self.token, now=self.clock(), limit=self.batch_size, concurrency=self.concurrency
        )
        self.started += done.started
        self.skipped += done.skipped
        self.missed += done.missed
        for lag in done.lags:
            self.lags.append(lag)
            _lag_histogram().record(max(lag, 0.0))
        if done.started or done.missed:
            log.info(
                "schedules: %d run(s) started, %d fire(s) skipped, %d missed",
                done.started,
                done.skipped,
                done.missed,
            )
        return done.schedules >= self.batch_size


@functools.cache
def _lag_histogram() -> Histogram:
    return meter().create_histogram(
        "composer_schedule_fire_lag_seconds",
        unit="s",
        description="A schedule fire's due time (its time plus jitter) to its run's start",
    )
