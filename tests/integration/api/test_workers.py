"""Who serves which queue: a real SDK worker's heartbeats in GET /v1/workers and
`composer workers`, and the hint on a task whose queue no live worker serves
(GET /v1/runs/{id}, `composer get`)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from composer_sdk import TaskContext
from tests.integration.api.conftest import Live, deploy
from tests.integration.api.test_cli import composer


def one_task(workflow_id: str, queue: str) -> dict[str, Any]:
    return {"id": workflow_id, "nodes": [{"id": "work", "type": "TASK", "queue": queue}]}


async def worker_row(live: Live, worker_id: str) -> dict[str, Any] | None:
    answer = await live.gateway.call("GET", "/v1/workers", role="viewer")
    assert answer.status == 200, answer.body
    rows = [w for w in answer.body["workers"] if w["worker_id"] == worker_id]
    return rows[0] if rows else None


async def until_row(
    live: Live, worker_id: str, holds: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The worker's row once ``holds`` is true of it; fails the test after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        row = await worker_row(live, worker_id)
        if row is not None and holds(row):
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker_id}: {what} did not hold within 10s: {row}")
        await asyncio.sleep(0.05)


async def start_run(live: Live, workflow_id: str) -> str:
    answer = await live.gateway.call("POST", "/v1/runs", json={"workflow_id": workflow_id})
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def task_of(live: Live, run_id: str) -> dict[str, Any]:
    answer = await live.gateway.call("GET", f"/v1/runs/{run_id}")
    assert answer.status == 200, answer.body
    task: dict[str, Any] = answer.body["tasks"][0]
    return task


async def until_task(
    live: Live, run_id: str, holds: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        task = await task_of(live, run_id)
        if holds(task):
            return task
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id}: {what} did not hold within 10s: {task}")
        await asyncio.sleep(0.05)


async def test_a_worker_is_listed_with_its_queues_and_load_until_it_stops(live: Live) -> None:
    queue = f"payments-{uuid.uuid4().hex[:6]}"
    release = asyncio.Event()

    async def charge(ctx: TaskContext, input: object) -> dict[str, bool]:
        await release.wait()
        return {"charged": True}

    worker = live.stack.worker({queue: charge}, concurrency=3, presence_seconds=0.1)
    serving = live.stack.tasks[-1]  # the worker's run()
    row = await until_row(live, worker.owner, lambda w: w["status"] == "SERVING", "serving")
    assert row["queues"] == [queue] and row["concurrency"] == 3 and row["live"] is True
    assert row["in_flight"] == 0 and row["host"] and row["sdk_version"]

    await deploy(live.gateway, one_task("charges", queue))
    run_id = await start_run(live, "charges")
    await until_row(live, worker.owner, lambda w: w["in_flight"] == 1, "one task in flight")
    assert (await task_of(live, run_id))["waiting_hint"] is None

    listed = await composer(live, "workers")
    assert listed.exit_code == 0, listed.output
    line = next(ln for ln in listed.output.splitlines() if worker.owner in ln)
    assert queue in line and "SERVING" in line and "1/3" in line
    as_json = await composer(live, "workers", "--json")
    assert as_json.exit_code == 0, as_json.output
    mine = [w for w in json.loads(as_json.output)["workers"] if w["worker_id"] == worker.owner]
    assert mine[0]["queues"] == [queue]

    release.set()
    await live.stack.wait_run(run_id)
    await until_row(live, worker.owner, lambda w: w["in_flight"] == 0, "nothing in flight")

    worker.stop()
    await serving  # drained, and said it stopped
    row = await until_row(live, worker.owner, lambda w: w["status"] == "STOPPED", "stopped")
    assert row["live"] is False and row["stopped_at"] is not None


async def test_a_task_on_a_queue_nobody_serves_says_so(live: Live) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    await deploy(live.gateway, one_task("unserved", queue))
    run_id = await start_run(live, "unserved")

    task = await until_task(live, run_id, lambda t: t["waiting_hint"] is not None, "a hint")
    assert task["state"] in ("PENDING", "QUEUED")
    assert task["waiting_hint"].startswith(f"no worker has ever served queue '{queue}'")
    assert "start a worker" in task["waiting_hint"]

    shown = await composer(live, "get", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"work waits: no worker has ever served queue '{queue}'" in shown.output

    # a worker that served the queue and stopped: the hint says when it was last seen
    async def take(ctx: TaskContext, input: object) -> None:
        return None

    worker = live.stack.worker({queue: take}, presence_seconds=0.1)
    serving = live.stack.tasks[-1]  # the worker's run()
    await live.stack.wait_run(run_id)
    worker.stop()
    await serving
    await until_row(live, worker.owner, lambda w: w["status"] == "STOPPED", "stopped")

    second = await start_run(live, "unserved")
    task = await until_task(live, second, lambda t: t["waiting_hint"] is not None, "a hint")
    assert task["waiting_hint"].startswith(f"no worker has served queue '{queue}' for ")
    assert "(last seen " in task["waiting_hint"]


async def test_finished_tasks_carry_no_hint(live: Live) -> None:
    queue = f"quick-{uuid.uuid4().hex[:6]}"

    async def quick(ctx: TaskContext, input: object) -> dict[str, int]:
        return {"ok": 1}

    live.stack.worker({queue: quick}, presence_seconds=0.1)
    await deploy(live.gateway, one_task("quick", queue))
    run_id = await start_run(live, "quick")
    await live.stack.wait_run(run_id)

    assert (await task_of(live, run_id))["waiting_hint"] is None
