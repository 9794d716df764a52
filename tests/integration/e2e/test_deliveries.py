"""Deliveries count only when a worker is gone: real PostgreSQL, real Redis, SDK workers
and the lease-sweeper with a short lease TTL.

The sweeper fails an attempt for good once it was delivered ``max_deliveries``
times, to stop a task that kills every worker that takes it. A healthy worker
busy with long tasks must never get there: it reads no more entries than it has
free slots, and an entry held by a worker that is still alive is not a delivery
lost to a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import composer_queue as cq
from composer_core.model import RunStatus, TaskState
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import TOKEN, eventually, open_stack
from tests.integration.waits import until

#: Short enough that a task runs for several TTLs; the worker renews every ttl/3.
TTL = 0.5
HANGING_WORKER = Path(__file__).with_name("hanging_worker.py")


def one_task(workflow_id: str, queue: str) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "nodes": [{"id": "work", "type": "TASK", "queue": queue, "spec": {}}],
    }


async def test_a_busy_worker_with_long_tasks_and_a_backlog_gets_no_delivery_counted(
    database_url: str, redis_url: str
) -> None:
    options = {"lease_ttl": TTL, "max_deliveries": 2, "interval_seconds": 0.1}
    async with open_stack(database_url, redis_url, sweeper=options) as s:
        await s.deploy(one_task("long", "long"))
        runs = [(await s.engine.start("long")).run_id for _ in range(4)]
        ran: list[tuple[str, int]] = []
        deliveries: list[int] = []

        async def long_task(ctx: TaskContext, input: Any) -> dict[str, Any]:
            ran.append((ctx.task_id, ctx.attempt))
            # the task's own work: three lease TTLs, while the others wait their turn
            await asyncio.sleep(3 * TTL)
            return {}

        names = cq.queue_streams(s.prefix, "long", cq.DEFAULT_SHARDS)
        worker = s.worker({"long": long_task}, concurrency=1, lease_ttl=TTL)
        for run_id in runs:
            run = await s.wait_run(run_id, timeout=30)
            assert run.status is RunStatus.SUCCEEDED, (await s.tasks_of(run_id))["work"].error
            for stream in names:
                deliveries.extend(e.deliveries for e in await s.redis.entries(stream))

        assert s.sweeper is not None
        assert (s.sweeper.totals.redelivered, s.sweeper.totals.given_up) == (0, 0)
        assert sorted(attempt for _, attempt in ran) == [0, 0, 0, 0]  # each ran once
        assert len({task for task, _ in ran}) == 4
        assert set(deliveries) <= {1}
        assert worker.completed == 4


async def test_a_live_worker_that_cannot_lease_costs_no_delivery_and_a_stopped_one_does(
    database_url: str, redis_url: str
) -> None:
    """A worker whose coordinator is unreachable takes the entry, gives up on the lease
    and leaves it pending (for the sweeper), again and again: while it is alive, none of
    that counts. Once it is gone (stopped: its heartbeat runs out), its entry does."""
    options = {"lease_ttl": TTL, "max_deliveries": 2, "interval_seconds": 0.1}
    async with open_stack(database_url, redis_url, sweeper=options) as s:
        await s.deploy(one_task("unleased", "unleased"))
        run_id = (await s.engine.start("unleased")).run_id

        async def done(ctx: TaskContext, input: Any) -> dict[str, Any]:
            return {"by": ctx.attempt}

        cut_off = s.worker(
            {"unleased": done},
            lease_ttl=TTL,
            coordinator="127.0.0.1:1",  # nothing listens there
            coordinator_attempts=1,
        )
        sweeper = s.sweeper
        assert sweeper is not None
        await eventually(
            lambda: cut_off.abandoned >= 3 and sweeper.totals.returned >= 2,
            timeout=20,
            what="the entry put back uncounted again and again",
        )
        assert (sweeper.totals.redelivered, sweeper.totals.given_up) == (0, 0)
        assert (await s.tasks_of(run_id))["work"].state is not TaskState.FAILED

        cut_off.stop()
        s.worker({"unleased": done}, lease_ttl=TTL)
        run = await s.wait_run(run_id, timeout=20)

        assert run.status is RunStatus.SUCCEEDED
        # the entry the stopped worker held counted, if it held one; never past the limit
        assert sweeper.totals.given_up == 0 and sweeper.totals.redelivered <= 1


async def test_a_killed_workers_entry_is_counted_once_its_heartbeat_runs_out(
    database_url: str, redis_url: str
) -> None:
    """An SDK worker process takes the entry and is killed before it could lease it
    (its coordinator is unreachable, so it is still trying): it is gone, and the entry
    it held is delivered again with the delivery counted."""
    options = {"lease_ttl": TTL, "max_deliveries": 3, "interval_seconds": 0.1}
    async with open_stack(database_url, redis_url, sweeper=options) as s:
        await s.deploy(one_task("killed", "killed"))
        names = cq.queue_streams(s.prefix, "killed", cq.DEFAULT_SHARDS)
        await s.redis.ensure_groups(names)
        run_id = (await s.engine.start("killed")).run_id
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HANGING_WORKER),
            s.redis_url,
            s.prefix,
            "127.0.0.1:1",  # nothing listens there: it retries the lease until killed
            TOKEN,
            "killed",
            str(TTL),
            env={k: v for k, v in os.environ.items() if not k.startswith("COMPOSER_")},
        )
        try:

            async def held() -> bool:
                return any([await s.redis.pending(n) for n in names])

            await until(held, timeout=30, what="the worker process took the entry")
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await proc.wait()
        sweeper = s.sweeper
        assert sweeper is not None
        await eventually(
            lambda: sweeper.totals.redelivered == 1, timeout=20, what="the delivery counted"
        )
        [entry] = [e for n in names for e in await s.redis.entries(n)]
        assert entry.deliveries == 2 and sweeper.totals.returned == 0

        async def done(ctx: TaskContext, input: Any) -> dict[str, Any]:
            return {}

        s.worker({"killed": done}, lease_ttl=TTL)
        assert (await s.wait_run(run_id, timeout=20)).status is RunStatus.SUCCEEDED
