"""Timer lag and recovery time, through the real services.

Timer lag (fire - due: the run-finished hint's arrival, sent after the commit of
TimerFired, minus the wait's wake_at; ``*_decided_lag_*`` the firing
transaction's clock instead, which reads a staged wait's due time):

- ``spread``: 1,000 runs of one 1-second WAIT, started as fast as the engine
  takes them (16 at a time), so 1,000 waits are pending at once and come due
  over the seconds the starts took;
- ``burst``: 1,000 waits all due at the same instant (``until``), the worst
  case: the p99 is the time to fire 1,000 waits;
- ``light``: 100 one-second waits started at 100 per second: the lag of the
  mechanism itself (sleep until due, one transaction) when nothing queues.

Schedule fire lag (docs/architecture.md §6.8): 1,000 schedules due at the same
instant; lag = each run's start minus its fire time (``schedule_lag_*``).

The timer runs as in production, a process of its own with its default
settings (8 waits at once), beside the in-process stack of the end-to-end
tests that starts the runs. Both times are the database's.

Recovery: an SDK worker process takes a task and is killed with SIGKILL; the
lease-sweeper fails the attempt once its lease expires, and a second worker
runs the next attempt (retry with no backoff). Measured from the kill to the
failure of the attempt (``detect``) and to the run's success (``recover``),
for a lease TTL and a sweep interval set here; expect about the TTL (less the
time since the last renewal) plus up to one sweep interval.

Uses COMPOSER_TEST_DATABASE_URL / COMPOSER_TEST_REDIS_URL (default the local servers).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import composer_queue as cq
import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_sdk import TaskContext
from tests.integration.databases import new_database_name
from tests.integration.e2e.conftest import TOKEN, Stack, open_stack

ADMIN_URL = os.environ.get(
    "COMPOSER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("COMPOSER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WAITS = 1000
SCHEDULES = 1000
LEASE_TTL = 2.0
SWEEP_INTERVAL = 0.5
TRIALS = 3
HANGING_WORKER = Path(__file__).resolve().parents[1] / "integration" / "e2e" / "hanging_worker.py"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _start_all(
    stack: Stack, workflow_id: str, n: int, *, pace: float | None = None
) -> list[str]:
    """Start ``n`` runs, 16 at a time; with ``pace``, one every ``pace`` seconds."""
    if pace is not None:
        run_ids = []
        for _ in range(n):
            run_ids.append((await stack.engine.start(workflow_id)).run_id)
            await asyncio.sleep(pace)
        return run_ids
    slots = asyncio.Semaphore(16)

    async def one() -> str:
        async with slots:
            return (await stack.engine.start(workflow_id)).run_id

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def _timer_lag(
    stack: Stack, spec: dict[str, Any], label: str, *, n: int = WAITS, pace: float | None = None
) -> dict[str, float]:
    """Start WAITS runs of one WAIT node; lag = the arrival of the run-finished hint
    (after the fire's commit: what a waiter sees) minus the wait's due time (started_at
    plus the duration, or the ``until``: the database's clock, this machine's); the
    decided lag, the fire transaction's clock (finished_at) minus the due time."""
    workflow_id = f"bench-wait-{label}"
    await stack.deploy({"id": workflow_id, "nodes": [{"id": "nap", "type": "WAIT", "spec": spec}]})
    announced: dict[str, float] = {}

    def on_hint(_channel: str, message: str) -> None:
        now = time.time()
        for run_id in cq.finished_runs(message):
            announced.setdefault(run_id, now)

    async with cq.Subscriber(
        stack.redis, [cq.channel(stack.prefix, cq.RUN_FINISHED)], on_hint
    ) as hints:
        await asyncio.wait_for(hints.subscribed.wait(), 30)
        t0 = time.perf_counter()
        run_ids = await _start_all(stack, workflow_id, n, pace=pace)
        started_in = time.perf_counter() - t0
        lags: list[float] = []
        decided: list[float] = []
        for run_id in run_ids:
            await stack.wait_run(run_id, timeout=120)
            task = (await stack.tasks_of(run_id))["nap"]
            assert task.state is TaskState.COMPLETED and task.started_at and task.finished_at
            if "until" in spec:
                due = dt.datetime.fromisoformat(spec["until"])
            else:
                due = task.started_at + dt.timedelta(seconds=spec["duration_seconds"])
            decided.append((task.finished_at - due).total_seconds() * 1000)
            if run_id in announced:
                lags.append((announced[run_id] - due.timestamp()) * 1000)
    return {
        f"{label}_starts_s": started_in,
        f"{label}_lags_seen": float(len(lags)),
        f"{label}_lag_p50_ms": statistics.median(lags),
        f"{label}_lag_p99_ms": percentile(lags, 0.99),
        f"{label}_lag_max_ms": max(lags),
        f"{label}_decided_lag_p50_ms": statistics.median(decided),
        f"{label}_decided_lag_p99_ms": percentile(decided, 0.99),
    }


async def _schedule_lag(stack: Stack, n: int = SCHEDULES) -> dict[str, float]:
    """``n`` schedules of ``every_seconds: 20``, all due at the same instant (made
    paused, then let go together for a fire time at least 3 s ahead): lag = each run's start (its
    row's created_at, the start transaction's time) minus its fire time, both the
    database's clock. The timer process fires them with its default settings."""
    from composer_core.schedules import ScheduleSpec

    await stack.deploy(
        {
            "id": "bench-scheduled",
            "nodes": [{"id": "go", "type": "TASK", "queue": "unserved", "spec": {}}],
        }
    )
    for i in range(n):  # made paused, then all let go at once for the same fire time
        spec = ScheduleSpec(id=f"bench-{i}", every_seconds=20, paused=True)
        await stack.engine.schedules.create("bench-scheduled", spec)
    async with repo.connection(stack.pool) as conn:
        fire = await conn.fetchval(
            "SELECT to_timestamp(ceil((extract(epoch FROM now()) + 3) / 20) * 20)"
        )
        await conn.execute(
            "UPDATE schedules SET paused = false, next_fire_at = $1, due_at = $1", fire
        )
        deadline = time.monotonic() + 90
        while True:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM created_at - scheduled_for) AS lag FROM workflow_runs "
                "WHERE workflow_id = 'bench-scheduled' AND scheduled_for = $1",
                fire,
            )
            if len(rows) >= n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        await conn.execute("DELETE FROM schedules")
    lags = [float(r["lag"]) * 1000 for r in rows]
    assert len(lags) == n, f"{len(lags)} of {n} schedules fired at {fire}"
    return {
        "schedules": float(n),
        "schedule_lag_p50_ms": statistics.median(lags),
        "schedule_lag_p99_ms": percentile(lags, 0.99),
        "schedule_lag_max_ms": max(lags),
    }


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass  # a full pipe would block the process's logging, and the process


async def _timer_process(
    url: str, prefix: str
) -> tuple[asyncio.subprocess.Process, asyncio.Task[None]]:
    """The timer as it runs in production: a process of its own (default settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")} | {
        "COMPOSER_DATABASE_URL": url,
        "COMPOSER_REDIS_URL": REDIS_URL,
        "COMPOSER_REDIS_PREFIX": prefix,
        "COMPOSER_LOG_FORMAT": "human",
        **{
            k: v
            for k, v in os.environ.items()
            if k.startswith(("COMPOSER_TIMER_", "COMPOSER_SCHEDULE_"))
        },
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "composer_timer", env=env, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while b"firing due timers" not in await proc.stderr.readline():
            pass
    return proc, asyncio.create_task(_drain(proc.stderr))


async def _recovery(stack: Stack) -> dict[str, float]:
    await stack.deploy(
        {
            "id": "bench-killed",
            "nodes": [
                {
                    "id": "work",
                    "type": "TASK",
                    "queue": "fragile",
                    "spec": {},
                    "retry": {"max_attempts": 3, "initial_seconds": 0},
                }
            ],
        }
    )

    async def survive(ctx: TaskContext, input: Any) -> dict[str, Any]:
        return {"attempt": ctx.attempt}

    detect: list[float] = []
    recover: list[float] = []
    for _ in range(TRIALS):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HANGING_WORKER),
            stack.redis_url,
            stack.prefix,
            stack.grpc_target,
            TOKEN,
            "fragile",
            str(LEASE_TTL),
            stdout=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")},
        )
        assert proc.stdout is not None
        run_id = (await stack.engine.start("bench-killed")).run_id
        await asyncio.wait_for(proc.stdout.readline(), 60)
        await asyncio.sleep(LEASE_TTL / 3 + 0.1)  # right after a renewal: the worst case
        proc.send_signal(signal.SIGKILL)
        killed = time.perf_counter()
        await proc.wait()
        survivor = stack.worker({"fragile": survive}, lease_ttl=LEASE_TTL)
        detected = None
        while True:
            task = (await stack.tasks_of(run_id))["work"]
            if detected is None and task.attempt >= 1:
                detected = time.perf_counter() - killed
            if task.state is TaskState.COMPLETED:
                break
            await asyncio.sleep(0.01)
        assert (await stack.wait_run(run_id)).status is RunStatus.SUCCEEDED
        recover.append(time.perf_counter() - killed)
        detect.append(detected if detected is not None else recover[-1])
        survivor.stop()
    return {
        "recovery_lease_ttl_s": LEASE_TTL,
        "recovery_sweep_interval_s": SWEEP_INTERVAL,
        "recovery_detect_mean_s": statistics.mean(detect),
        "recovery_detect_max_s": max(detect),
        "recovery_total_mean_s": statistics.mean(recover),
        "recovery_total_max_s": max(recover),
    }


async def main() -> dict[str, float]:
    name = new_database_name("composer_bench_timers")
    await repo.create_database(ADMIN_URL, name)
    url = repo.database_url(ADMIN_URL, name)
    conn = await repo.connect(url)
    try:
        await repo.migrate(conn)
        figures: dict[str, float] = {"waits": float(WAITS)}
        async with open_stack(url, REDIS_URL, poll_seconds=1.0) as stack:
            timer, drain = await _timer_process(url, stack.prefix)
            try:
                figures |= await _timer_lag(
                    stack, {"duration_seconds": 1}, "light", n=100, pace=0.01
                )
                figures |= await _timer_lag(stack, {"duration_seconds": 1}, "spread")
                # due once every run has surely started (at half the rate just measured)
                lead = max(5.0, 2 * figures["spread_starts_s"] + 2)
                due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lead)
                figures |= await _timer_lag(stack, {"until": due.isoformat()}, "burst")
                figures |= await _schedule_lag(stack)
            finally:
                timer.send_signal(signal.SIGTERM)
                await asyncio.wait_for(timer.wait(), 30)
                await drain
        sweeper = {"interval_seconds": SWEEP_INTERVAL, "lease_ttl": LEASE_TTL, "lost_after": 30.0}
        async with open_stack(url, REDIS_URL, sweeper=sweeper) as stack:
            figures |= await _recovery(stack)
    finally:
        await conn.close()
        await repo.drop_database(ADMIN_URL, name)
    return figures
