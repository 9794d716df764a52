"""Schedules through the real timer process (docs/architecture.md §6.8): an
``every_seconds: 2`` schedule keeps firing while the timer is killed (SIGKILL) and
started again twice — every fire time from the first to the last has exactly one
run, none doubled, none missing (the outages are inside the catch-up window)."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import sys

import composer_repo as repo
from composer_core.schedules import ScheduleSpec
from composer_engine import Engine, Workflows, validate_definition
from tests.integration.e2e.test_services import service_env, wait_for_line
from tests.integration.waits import until

WORKFLOW = {  # no worker serves its queue: each run stays RUNNING (allow_all starts them all)
    "id": "poll-partner",
    "nodes": [{"id": "poll", "type": "TASK", "queue": "partner-polls", "spec": {}}],
}
EVERY = 2


async def fire_times(pool: repo.Pool) -> list[dt.datetime]:
    async with repo.connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT scheduled_for FROM workflow_runs WHERE schedule_id = 'every2' "
            "ORDER BY scheduled_for"
        )
    return [r[0] for r in rows]


async def start_timer(env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "composer_timer", env=env, stderr=asyncio.subprocess.PIPE
    )
    await wait_for_line(proc, "firing due timers")
    return proc


async def test_a_killed_and_restarted_timer_neither_doubles_nor_loses_a_fire(
    pool: repo.Pool, database_url: str, redis_url: str
) -> None:
    async with repo.connection(pool) as conn:
        await conn.execute("DELETE FROM schedules WHERE id = 'every2'")
        await conn.execute(  # task rows first: nothing cascades from a run (V028)
            "DELETE FROM task_instances t USING workflow_runs r"
            " WHERE t.run_id = r.id AND r.schedule_id = 'every2'"
        )
        await conn.execute("DELETE FROM workflow_runs WHERE schedule_id = 'every2'")
    await Workflows(pool).create(validate_definition(WORKFLOW), deploy=True)
    engine = Engine(pool)
    spec = ScheduleSpec(id="every2", every_seconds=EVERY, overlap="allow_all")
    created = await engine.schedules.create("poll-partner", spec)
    first = created.next_fire_at
    env = service_env(database_url, redis_url, COMPOSER_REDIS_PREFIX="sched-e2e")
    proc = await start_timer(env)
    try:
        for _ in range(2):  # two outages
            seen = len(await fire_times(pool))

            async def fired_more(seen: int = seen) -> bool:
                return len(await fire_times(pool)) >= seen + 2

            await until(fired_more, timeout=30, what="two more fires from the running timer")
            proc.kill()  # SIGKILL: no drain, a claim may be left to run out
            await proc.wait()
            # stay down across at least one fire time: the restart must catch it up
            await asyncio.sleep(EVERY + 0.5)
            proc = await start_timer(env)
            back = dt.datetime.now(dt.UTC)

        async def caught_up() -> bool:
            times = await fire_times(pool)
            return bool(times) and times[-1] >= back + dt.timedelta(seconds=EVERY)

        await until(caught_up, timeout=30, what="fires after the second restart")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        await engine.aclose()
    times = await fire_times(pool)
    expected = [first + dt.timedelta(seconds=EVERY * i) for i in range(len(times))]
    assert times == expected, "a fire time doubled or missing"  # consecutive, each once
    assert len(times) >= 6  # two before each kill, the outages caught up, one after
    assert proc.returncode == 0, stderr.decode()
