"""Firing due timers: WAIT nodes whose time came, WAIT_FOR_EVENT nodes that timed out.

One pass reads up to a batch of due waits, oldest first (the small partial
index on wake_at), and applies TimerFired to them through the engine in groups
of ``group_size``, each group one transaction (``Engine.fire_timers``, the
coordinator's group commit: the runs locked in one statement, SKIP LOCKED), a
couple of groups at a time. A thousand waits due together are ten commits, not a
thousand: each statement of a group's transaction carries a hundred waits, so
PostgreSQL's cost a fire is half what groups of 25 cost (W4, docs/architecture.md
§3.1).

Several replicas are safe, and none waits for another:

- no wait fires twice: TimerFired is applied under the run's lock, and the
  state machine ignores it once the wait is no longer WAITING (the fenced
  resolve_wait matches no row otherwise);
- no replica queues behind a run lock: the timer takes the run locks with
  SKIP LOCKED, so a run another replica (or a worker's report) is working
  on is passed over and looked at again a moment later, while the rest of
  the batch goes on.

One wait that cannot be fired (its run's stored definition is broken, or a
bug) never stops the others (a group that fails as a whole is fired again one
wait at a time): it is logged as an ALERT naming the run and node, and parked
(its wake_at moved ``park_seconds`` on) so it does not come back in every batch;
the loop goes on.

Between passes it sleeps exactly until the nearest wake_at, and a TIMER hint
(sent after commit whenever a wait with a wake_at is created) cuts the sleep
short, so a wait created while it sleeps towards a later one still fires on
time. The poll interval only bounds the sleep when a hint is lost.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.metrics import Histogram

import composer_queue as cq
from composer_common.logs import alert
from composer_common.telemetry import meter
from composer_engine import Engine, Parked, Unavailable, utcnow
from composer_engine.records import DueWait
from composer_timer.passes import run_passes

log = logging.getLogger("composer.timer")


@dataclass(frozen=True, slots=True)
class Pass:
    """What one pass did, and when the next wait is due."""

    due: int
    fired: int
    #: Due waits whose run another transaction held: looked at again shortly.
    busy: int
    next_wake_at: dt.datetime | None


@dataclass
class Timer:
    engine: Engine
    redis: cq.Queue
    prefix: str = "composer"
    batch_size: int = 200
    #: Groups of due waits fired at once, each group in one transaction.
    concurrency: int = 2
    #: Due waits fired in one transaction (a group commit, as the coordinator's).
    group_size: int = 100
    poll_seconds: float = 5.0
    busy_retry_seconds: float = 0.05
    #: How far a wait that cannot be fired is moved on before it is tried again.
    park_seconds: float = 300.0
    clock: Callable[[], dt.datetime] = utcnow
    #: Waits this replica fired (TimerFired applied), found already resolved, parked.
    fired: int = 0
    stale: int = 0
    parked: int = 0
    #: Seconds between each recent wait's wake_at and its firing's commit (metrics, bench).
    lags: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=100_000)
    )

    async def run(self, stop: asyncio.Event) -> None:
        """Fire due waits until ``stop`` is set."""
        await run_passes(stop, self.redis, self.prefix, "timers", self._pass)

    async def _pass(self) -> float:
        result = await self.fire_due()
        if result.due >= self.batch_size and result.busy == 0:
            return 0.0  # more is due
        return self._sleep_for(result)

    def _sleep_for(self, result: Pass) -> float:
        if result.busy:
            return self.busy_retry_seconds
        if result.next_wake_at is None:
            return self.poll_seconds
        until = (result.next_wake_at - self.clock()).total_seconds()
        if until <= 0 and result.due == 0:
            # Due by the index but not found due: a clock edge; do not spin on it.
            return self.busy_retry_seconds
        return min(self.poll_seconds, max(0.0, until))

    async def fire_due(self) -> Pass:
        """One pass: fire what is due now (by the engine's clock, which set wake_at)."""
        due = await self.engine.upkeep.due_waits(limit=self.batch_size, now=self.clock())
        slots = asyncio.Semaphore(self.concurrency)
        chunks = [due[i : i + self.group_size] for i in range(0, len(due), self.group_size)]

        async def fire(chunk: list[DueWait]) -> list[bool | None]:
            async with slots:
                return await self._fire_group(chunk)

        groups = await asyncio.gather(*(fire(c) for c in chunks), return_exceptions=True)
        failure = next((g for g in groups if isinstance(g, BaseException)), None)
        if failure is not None:
            raise failure
        outcomes = [o for g in groups if not isinstance(g, BaseException) for o in g]
        next_wake = await self.engine.upkeep.next_wake_at()
        fired = sum(1 for o in outcomes if o is True)
        if fired:
            log.debug("fired %d of %d due wait(s)", fired, len(due))
        return Pass(len(due), fired, sum(1 for o in outcomes if o is None), next_wake)

    async def _fire_group(self, waits: list[DueWait]) -> list[bool | None]:
        """Fire ``waits`` in one transaction (the engine's group commit); for each, True:
        fired; False: already resolved (stale) or parked; None: its run is busy."""
        try:
            outcomes = await self.engine.fire_timers(
                [(w.run_id, w.task_id, w.node_id) for w in waits]
            )
        except Unavailable:
            raise
        except Exception:  # a bug in the batch itself: each alone, as before
            log.exception("a group of %d due wait(s) failed: firing each alone", len(waits))
            return [await self._fire(w) for w in waits]
        done: list[bool | None] = []
        for wait, outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, Exception):
                if isinstance(outcome, Unavailable) and not isinstance(outcome, Parked):
                    raise outcome
                await self._park(wait, outcome)  # its key is not here, or it is broken
                done.append(False)
                continue
            done.append(self._count(wait, outcome))
        return done

    async def _fire(self, wait: DueWait) -> bool | None:
        """True: fired; False: already resolved (stale); None: the run is busy."""
        try:
            fired = await self.engine.fire_timer(
                wait.run_id, wait.task_id, wait.node_id, skip_locked=True
            )
        except Parked as exc:  # its key is not here: this wait alone waits for it
            await self._park(wait, exc)
            return False
        except Unavailable:
            raise
        except Exception as exc:  # EngineError (a broken definition), or a bug
            await self._park(wait, exc)
            return False
        return self._count(wait, fired)

    def _count(self, wait: DueWait, fired: bool | None) -> bool | None:
        if fired is True:
            self.fired += 1
            lag = (self.clock() - wait.wake_at).total_seconds()
            self.lags.append(lag)
            _lag_histogram().record(max(lag, 0.0))
        elif fired is False:
            self.stale += 1
        return fired

    async def _park(self, wait: DueWait, problem: Exception) -> None:
        """Log the wait that cannot be fired and move it out of the way for a while."""
        until = self.clock() + dt.timedelta(seconds=self.park_seconds)
        parked = await self.engine.upkeep.park_wait(wait.run_id, wait.task_id, until=until)
        if parked:
            self.parked += 1
        alert(
            log,
            "cannot fire the timer of node %s in run %s (%s: %s); %s: cancel the run or fix "
            "what the error names",
            wait.node_id,
            wait.run_id,
            type(problem).__name__,
            problem,
            f"parked until {until:%Y-%m-%d %H:%M:%S}Z" if parked else "it is no longer waiting",
        )


@functools.cache
def _lag_histogram() -> Histogram:
    return meter().create_histogram(
        "composer_timer_lag_seconds",
        unit="s",
        description="A wait's wake_at to its firing's commit",
    )
