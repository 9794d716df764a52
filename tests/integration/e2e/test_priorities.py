"""Priority at dispatch through the real services (docs/architecture.md §4.16): runs
started through the engine, their tasks published to Redis by the engine after the
commit, executed by an SDK worker through the coordinator. A late priority-1 run's
task is taken before a backlog of priority-5 tasks that waited for a worker."""

from __future__ import annotations

from typing import Any

import composer_queue as cq
import composer_repo as repo
from composer_sdk import TaskContext
from tests.integration.e2e.conftest import Stack, eventually
from tests.integration.waits import until


def ranked(queue: str) -> dict[str, Any]:
    return {
        "id": f"ranked-{queue}",
        "priority": "{{input.priority}}",
        "nodes": [{"id": "work", "type": "TASK", "queue": queue, "spec": {"n": "{{input.n}}"}}],
    }


async def _all_queued(pool: repo.Pool, run_ids: list[str]) -> bool:
    """Every run's task is in Redis: published, its outbox row gone."""
    async with repo.connection(pool) as conn:
        queued = await conn.fetchval(
            "SELECT count(*) FROM task_instances WHERE run_id = ANY($1::text[]) "
            "AND state = 'QUEUED'",
            run_ids,
        )
    return int(queued) == len(run_ids)


async def test_a_late_priority_1_run_is_taken_before_a_priority_5_backlog(stack: Stack) -> None:
    queue = f"ranked-{stack.prefix}"
    await stack.deploy(ranked(queue))
    backlog = [
        (await stack.engine.start(f"ranked-{queue}", input={"priority": 5, "n": f"low{i}"})).run_id
        for i in range(12)
    ]
    default = (
        await stack.engine.start(f"ranked-{queue}", input={"priority": 3, "n": "mid"})
    ).run_id
    await until(lambda: _all_queued(stack.pool, [*backlog, default]), what="the backlog in Redis")
    high = (await stack.engine.start(f"ranked-{queue}", input={"priority": 1, "n": "high"})).run_id
    await until(lambda: _all_queued(stack.pool, [high]), what="the late run's task in Redis")
    shard = cq.task_stream(stack.prefix, queue, (await stack.tasks_of(high))["work"].task_id, 4)
    assert await stack.redis.length(cq.band_stream(shard, 1)) == 1  # in its band's stream

    taken: list[str] = []

    async def handler(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        taken.append(input["n"])
        return {}

    stack.worker({queue: handler}, concurrency=1)  # the worker comes: one task at a time
    await eventually(lambda: len(taken) == 14, timeout=30, what="every task taken")

    assert taken[:2] == ["high", "mid"]  # then band 5, first come first
    assert taken[2:] == [f"low{i}" for i in range(12)]
    async with repo.connection(stack.pool) as conn:
        leased = {
            r["run_id"]: r["started_at"]
            for r in await conn.fetch(
                "SELECT run_id, started_at FROM task_instances WHERE run_id = ANY($1::text[])",
                [*backlog, default, high],
            )
        }
    assert leased[high] < leased[default] < min(leased[r] for r in backlog)
