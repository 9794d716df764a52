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

Waits due together are staged ahead of their time (docs/architecture.md §3.1,
"Waits due together"): a thousand waits due at one moment take a few hundred
milliseconds of CPU to fire, so fired from their time on, the last would fire that
late. A pass also reads the waits due within twice ``lead_seconds``, cuts them into
buckets (waits due within ``bucket_seconds`` of each other, at most
``stage_group_size``), gives each bucket ``stage_cost_seconds`` a wait, scheduled
back from its time and after the buckets due before it (one process decides them
all), and stages those whose start has come. A staged bucket's transaction runs
beside the passes (which pass its waits over): it locks the runs, decides on a
clock that reads the bucket's last wake_at, writes, and commits once the
database's clock has passed it. Nothing of it is seen before; a run of a staged
bucket is held for the lead (a signal or a cancel for it waits that long).

Between passes it sleeps until the nearest wake_at less the lead, and a TIMER
hint (sent after commit whenever a wait with a wake_at is created) cuts the
sleep short, so a wait created while it sleeps towards a later one still fires
on time. The poll interval only bounds the sleep when a hint is lost.
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
    #: When the next pass is to stage what this one read, or may not have read, ahead
    #: of its time (None: nothing was read ahead).
    next_stage_at: dt.datetime | None = None


@dataclass
class Timer:
    engine: Engine
    redis: cq.Queue
    prefix: str = "composer"
    batch_size: int = 1000
    #: Groups of due waits fired at once, each group in one transaction.
    concurrency: int = 2
    #: Due waits fired in one transaction (a group commit, as the coordinator's).
    group_size: int = 100
    poll_seconds: float = 5.0
    busy_retry_seconds: float = 0.05
    #: How far a wait that cannot be fired is moved on before it is tried again.
    park_seconds: float = 300.0
    #: How long before their time waits may be staged (0: never; each fires once due).
    #: Each pass reads the waits due within twice this: at 1 s, a steady flow of
    #: 1,000 waits a second fired 60 ms later at p99 than at 0.25 s (bench_timers).
    lead_seconds: float = 0.25
    #: The time a staged wait is given to be decided in, its bucket scheduled back
    #: from its time (a few times what one takes on a loaded two-core machine).
    stage_cost_seconds: float = 0.001
    #: Added to every bucket's lead: its lock round trip and commit.
    stage_margin_seconds: float = 0.02
    #: Waits due within this of the first of a bucket are staged with it, and commit
    #: at its last one's time: the most a staged wait commits after its own.
    bucket_seconds: float = 0.01
    #: Staged transactions at once, each holding a connection until its time.
    stage_slots: int = 8
    #: A pass also stages the buckets whose start comes within this: fewer passes
    #: (each reads the waits ahead), each bucket held at most this much longer.
    stage_window_seconds: float = 0.05
    #: A staged bucket's waits at most (one transaction).
    stage_group_size: int = 250
    clock: Callable[[], dt.datetime] = utcnow
    #: Waits this replica fired (TimerFired applied), found already resolved, parked;
    #: of those fired, how many were staged ahead of their time.
    fired: int = 0
    staged: int = 0
    stale: int = 0
    parked: int = 0
    #: Seconds between each recent wait's wake_at and its firing's commit (metrics, bench).
    lags: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=100_000)
    )
    #: Waits whose staged group failed as a whole: fired only once due, when a
    #: failing group is fired a wait at a time (never early) and a broken one parked.
    _unstaged: set[str] = field(default_factory=set, init=False, repr=False)
    #: The staged transactions in flight, and their waits (passed over by the passes).
    _staging: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    _in_flight: set[str] = field(default_factory=set, init=False, repr=False)

    async def run(self, stop: asyncio.Event) -> None:
        """Fire due waits until ``stop`` is set."""
        try:
            await run_passes(stop, self.redis, self.prefix, "timers", self._pass)
        finally:
            await self.settled()

    async def settled(self) -> None:
        """Wait until the staged transactions in flight have committed (or failed)."""
        while self._staging:
            await asyncio.gather(*self._staging, return_exceptions=True)

    async def _pass(self) -> float:
        return self._sleep_for(await self.fire_due())

    def _sleep_for(self, result: Pass) -> float:
        if result.busy:
            return self.busy_retry_seconds
        if result.next_stage_at is not None:  # waits ahead: the rest is later still
            until = (result.next_stage_at - self.clock()).total_seconds()
            return min(self.poll_seconds, max(0.0, until))
        if result.due >= self.batch_size:
            return 0.0  # more is due, or within the lead
        if result.next_wake_at is None:
            return self.poll_seconds
        wake = result.next_wake_at - dt.timedelta(seconds=self.lead_seconds)
        until = (wake - self.clock()).total_seconds()
        if until <= 0 and result.due == 0:
            # Due by the index but not found due: a clock edge, or a staged bucket that
            # has not committed yet; do not spin on it.
            return self.busy_retry_seconds
        return min(self.poll_seconds, max(0.0, until))

    async def fire_due(self) -> Pass:
        """One pass: fire what is due now (by the engine's clock, which set wake_at), and
        stage the buckets due within the lead whose time to start has come."""
        now = self.clock()
        lead = dt.timedelta(seconds=self.lead_seconds)
        # twice the lead: a bucket is started up to a lead ahead of its time, and so
        # must every bucket before it be, which this read must see to count
        horizon = now + 2 * lead
        read = [
            w
            for w in await self.engine.upkeep.due_waits(
                limit=self.batch_size + len(self._in_flight), now=horizon
            )
            if w.task_id not in self._in_flight
        ][: self.batch_size]
        due = [w for w in read if w.wake_at <= now]
        ahead = [w for w in read if w.wake_at > now]
        free = self.stage_slots - len(self._staging)
        staged, next_stage_at = self._buckets_to_stage(
            [w for w in ahead if w.task_id not in self._unstaged],
            before=len(due),
            now=now,
            slots=free,
        )
        nexts = [w.wake_at for w in ahead if w.task_id in self._unstaged]  # once due
        if next_stage_at is not None:
            nexts.append(next_stage_at)
        if ahead and len(staged) < free:  # (no slot left: it looks again soon anyway)
            # a wait not read is due after the horizon, or after the last read
            nexts.append((horizon if len(read) < self.batch_size else read[-1].wake_at) - lead)
        next_stage_at = min(nexts, default=None)
        if staged:
            log.debug(
                "staging %d wait(s) due %s to %s in %d transaction(s)",
                sum(len(b) for b in staged),
                staged[0][0].wake_at.isoformat(),
                staged[-1][-1].wake_at.isoformat(),
                len(staged),
            )
        slots = asyncio.Semaphore(self.concurrency)
        chunks = [due[i : i + self.group_size] for i in range(0, len(due), self.group_size)]

        async def fire(chunk: list[DueWait]) -> list[bool | None]:
            async with slots:
                return await self._fire_group(chunk)

        for bucket in staged:
            self._stage(bucket)
        groups = await asyncio.gather(*(fire(c) for c in chunks), return_exceptions=True)
        failure = next((g for g in groups if isinstance(g, BaseException)), None)
        if failure is not None:
            raise failure
        outcomes = [o for g in groups if not isinstance(g, BaseException) for o in g]
        next_wake = await self.engine.upkeep.next_wake_at()
        fired = sum(1 for o in outcomes if o is True)
        if fired:
            log.debug("fired %d of %d wait(s) read", fired, len(read))
        busy = sum(1 for o in outcomes if o is None)
        return Pass(len(read), fired, busy, next_wake, next_stage_at)

    def _stage(self, bucket: list[DueWait]) -> None:
        """Fire ``bucket`` in a transaction of its own that commits at its last wait's
        time, beside the passes (which pass its waits over until it ends)."""
        ids = [w.task_id for w in bucket]
        self._in_flight.update(ids)

        async def stage() -> None:
            busy = False
            try:
                outcomes = await self._fire_group(bucket, at=bucket[-1].wake_at)
                busy = any(o is None for o in outcomes)
            except Exception as exc:  # the database: its waits come back in a later pass
                busy = True
                log.warning(
                    "a staged group of %d wait(s) failed (%s): they are looked at again",
                    len(ids),
                    exc,
                )
            finally:
                self._in_flight.difference_update(ids)
            if busy:
                # a run was held elsewhere (a report, or another replica's staged
                # bucket): wake the passes, which sleep towards later, in a moment,
                # as a due wait's busy run is looked at again; at once, two replicas
                # would wake each other round and round until the holder commits
                await asyncio.sleep(self.busy_retry_seconds)
                await cq.send_hint(self.redis, self.prefix, cq.TIMER)

        task = asyncio.create_task(stage(), name=f"timer-stage-{bucket[-1].wake_at:%H%M%S%f}")
        self._staging.add(task)
        task.add_done_callback(self._staging.discard)

    def _buckets_to_stage(
        self, ahead: list[DueWait], *, before: int, now: dt.datetime, slots: int
    ) -> tuple[list[list[DueWait]], dt.datetime | None]:
        """The buckets of ``ahead`` (not yet due, by wake_at) to stage now, and when the
        first left is to be (None: none is left). Each bucket is given
        ``stage_cost_seconds`` a wait to be decided in, scheduled backwards from the
        last: it must be done by its time and before the bucket after it starts (one
        process decides them all); ``before`` (the due waits fired now) comes first;
        never more than ``lead_seconds`` ahead. At most ``slots`` of them."""
        buckets = _buckets(ahead, self.bucket_seconds, self.stage_group_size)
        # latest starts, scheduled backwards: each bucket is decided by its time and
        # before the next one's start (one process decides them, one after another)
        starts: list[dt.datetime] = []
        finish: dt.datetime | None = None
        for bucket in reversed(buckets):
            due = bucket[-1].wake_at if finish is None else min(bucket[-1].wake_at, finish)
            finish = due - dt.timedelta(seconds=len(bucket) * self.stage_cost_seconds)
            starts.append(finish)
        starts.reverse()
        # the due waits fired now come first; the margin covers a bucket's round trips
        ahead_of = dt.timedelta(
            seconds=before * self.stage_cost_seconds + self.stage_margin_seconds
        )
        lead = dt.timedelta(seconds=self.lead_seconds)
        window = now + dt.timedelta(seconds=self.stage_window_seconds)
        staged: list[list[DueWait]] = []
        for bucket, start in zip(buckets, starts, strict=True):
            start = max(start - ahead_of, bucket[-1].wake_at - lead)
            if start > window:  # within the window: staged with these, fewer passes
                return staged, start
            if len(staged) >= slots:  # the next pass stages it, once a slot is free
                return staged, now + dt.timedelta(seconds=self.busy_retry_seconds)
            staged.append(bucket)
        return staged, None

    async def _fire_group(
        self, waits: list[DueWait], *, at: dt.datetime | None = None
    ) -> list[bool | None]:
        """Fire ``waits`` in one transaction (the engine's group commit), staged to
        commit at ``at`` if given; for each, True: fired; False: already resolved
        (stale) or parked; None: its run is busy."""
        try:
            outcomes = await self.engine.fire_timers(
                [(w.run_id, w.task_id, w.node_id) for w in waits], at=at
            )
        except Unavailable:
            raise
        except Exception:  # a bug in the batch itself: each alone, as before
            if at is not None:  # never early: each alone once due (None: looked at again)
                log.exception(
                    "a staged group of %d wait(s) failed: firing each alone once due", len(waits)
                )
                if len(self._unstaged) > 100_000:
                    self._unstaged.clear()
                self._unstaged.update(w.task_id for w in waits)
                return [None] * len(waits)
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
        if at is not None:
            self.staged += sum(1 for d in done if d is True)
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


def _buckets(waits: list[DueWait], width: float, most: int) -> list[list[DueWait]]:
    """``waits`` (by wake_at) cut where one is due over ``width`` seconds after its
    bucket's first, or the bucket holds ``most``."""
    buckets: list[list[DueWait]] = []
    for wait in waits:
        if (
            buckets
            and len(buckets[-1]) < most
            and (wait.wake_at - buckets[-1][0].wake_at).total_seconds() <= width
        ):
            buckets[-1].append(wait)
        else:
            buckets.append([wait])
    return buckets


@functools.cache
def _lag_histogram() -> Histogram:
    return meter().create_histogram(
        "composer_timer_lag_seconds",
        unit="s",
        description="A wait's wake_at to its firing's commit",
    )
