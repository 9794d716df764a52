"""MAP nodes end to end: the engine, the coordinator's gRPC, SDK workers, real
PostgreSQL and Redis. One worker task per item, at most max_parallel at once (checked
from the items' own lease times), the output in item order, an item's retry,
fail_fast against continue, an empty list (docs/architecture.md §2, "MAP")."""

from __future__ import annotations

import asyncio
from typing import Any

import composer_repo as repo
from composer_core.model import RunStatus, TaskState
from composer_sdk import PermanentError, TaskContext
from tests.integration.e2e.conftest import Stack
from tests.integration.waits import until


def mapped(
    workflow_id: str, *, max_parallel: int = 3, on_failure: str = "fail_fast", attempts: int = 1
) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "nodes": [
            {
                "id": "lines",
                "type": "MAP",
                "spec": {
                    "items": "{{ input.lines }}",
                    "max_parallel": max_parallel,
                    "on_failure": on_failure,
                    "node": {
                        "type": "TASK",
                        "queue": "lines",
                        "spec": {"sku": "{{ item.sku }}", "at": "{{ index }}"},
                        "retry": {"max_attempts": attempts, "initial_seconds": 0.1},
                    },
                },
            },
            {
                "id": "total",
                "type": "TASK",
                "queue": "total",
                "spec": {"all": "{{ tasks.lines.output }}"},
            },
        ],
        "edges": [{"from": "lines", "to": "total"}],
        "output": {"lines": "{{ tasks.lines.output }}"},
    }


async def items_of(stack: Stack, run_id: str) -> list[repo.TaskRecord]:
    async with repo.transaction(stack.pool) as conn:
        return await repo.get_map_items(conn, run_id, "lines", limit=1000)


async def echo_total(ctx: TaskContext, input: dict[str, Any]) -> Any:
    return input


async def test_items_run_at_most_max_parallel_at_once_and_the_output_keeps_item_order(
    stack: Stack,
) -> None:
    await stack.deploy(mapped("map-order", max_parallel=3))
    running = 0
    most = 0

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.02 * (5 - input["at"] % 5))  # later items finish first
        running -= 1
        return {"sku": input["sku"], "at": input["at"]}

    stack.worker({"lines": line, "total": echo_total}, concurrency=8)
    lines = [{"sku": f"s{i}"} for i in range(12)]
    started = await stack.engine.start("map-order", input={"lines": lines})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"lines": [{"sku": f"s{i}", "at": i} for i in range(12)]}
    assert most <= 3
    items = await items_of(stack, started.run_id)
    assert [t.item for t in items] == list(range(12))
    assert all(t.state is TaskState.COMPLETED and t.node_type.value == "TASK" for t in items)
    # never more than 3 leased at once, by the items' own recorded times
    spans = sorted((t.started_at, t.finished_at) for t in items if t.started_at and t.finished_at)
    for start, _ in spans:
        assert sum(1 for s, f in spans if s <= start < f) <= 3
    tasks = await stack.tasks_of(started.run_id)
    assert set(tasks) == {"lines", "total"}  # the run's own tasks; items listed apart
    assert tasks["lines"].items_total == 12
    assert tasks["lines"].item_counts == {"COMPLETED": 12}
    assert tasks["total"].input == {"all": run.output["lines"]}


async def test_an_item_that_fails_once_is_retried_on_its_own(stack: Stack) -> None:
    await stack.deploy(mapped("map-retry", attempts=2))
    failed: set[int] = set()

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["at"] == 2 and ctx.attempt == 0:
            failed.add(input["at"])
            raise RuntimeError("flaky line")
        return [input["at"], input["sku"]]

    stack.worker({"lines": line, "total": echo_total})
    started = await stack.engine.start("map-retry", input={"lines": [{"sku": "a"}] * 5})
    # max_parallel 3: items 0-2 go together, so their reports may share a group commit
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    # list outputs, reported together: each kept whole
    assert run.output == {"lines": [[i, "a"] for i in range(5)]}
    items = await items_of(stack, started.run_id)
    assert [t.attempt for t in items] == [0, 0, 1, 0, 0]
    async with repo.transaction(stack.pool) as conn:
        history = await repo.run_history(conn, started.run_id, limit=1000)
    retried = [h for h in history if h.kind == "task.retry_scheduled"]
    assert [h.task_id for h in retried] == [items[2].task_id]


async def test_fail_fast_cancels_the_other_items_and_fails_the_run(stack: Stack) -> None:
    await stack.deploy(mapped("map-fail-fast", max_parallel=2))

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["at"] == 1:
            raise PermanentError("no such sku")
        await asyncio.sleep(0.3 if input["at"] == 0 else 0)
        return input["at"]

    stack.worker({"lines": line, "total": echo_total})
    started = await stack.engine.start("map-fail-fast", input={"lines": [{"sku": "a"}] * 6})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.FAILED
    assert "item 1 failed: no such sku" in (run.error or "")
    items = await items_of(stack, started.run_id)
    assert items[1].state is TaskState.FAILED
    assert {t.state for t in items[2:]} == {TaskState.CANCELLED}  # never sent
    tasks = await stack.tasks_of(started.run_id)
    assert tasks["lines"].state is TaskState.FAILED
    assert "total" not in tasks


async def test_continue_lets_the_others_finish_with_null_for_the_failed_item(stack: Stack) -> None:
    await stack.deploy(mapped("map-continue", on_failure="continue"))

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["at"] == 3:
            raise PermanentError("out of stock")
        return input["sku"]

    stack.worker({"lines": line, "total": echo_total})
    lines = [{"sku": f"s{i}"} for i in range(5)]
    started = await stack.engine.start("map-continue", input={"lines": lines})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"lines": ["s0", "s1", "s2", None, "s4"]}
    items = await items_of(stack, started.run_id)
    assert items[3].state is TaskState.FAILED and items[3].error == "out of stock"
    tasks = await stack.tasks_of(started.run_id)
    assert tasks["lines"].item_counts == {"COMPLETED": 4, "FAILED": 1}


async def test_an_empty_list_completes_the_map_at_once(stack: Stack) -> None:
    await stack.deploy(mapped("map-empty"))
    stack.worker({"total": echo_total})
    started = await stack.engine.start("map-empty", input={"lines": []})
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"lines": []}
    assert await items_of(stack, started.run_id) == []


async def test_a_paused_map_sends_no_waiting_item_and_keeps_max_parallel_at_its_resume(
    stack: Stack,
) -> None:
    await stack.deploy(mapped("map-paused", max_parallel=2))
    gate = asyncio.Event()
    running = 0
    most = 0

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return input["at"]

    stack.worker({"lines": line, "total": echo_total}, concurrency=8)
    started = await stack.engine.start("map-paused", input={"lines": [{"sku": "a"}] * 6})
    await until(lambda: asyncio.sleep(0, running == 2), what="two items running")
    assert await stack.engine.pauses.pause(started.run_id, "look")
    gate.set()  # the two running finish while the run is paused; nothing new goes

    async def two_done() -> bool:
        items = await items_of(stack, started.run_id)
        return sum(t.state is TaskState.COMPLETED for t in items) == 2

    await until(two_done, what="the running items finished while paused")
    items = await items_of(stack, started.run_id)
    assert all(t.started_at is None for t in items[2:])  # none of the waiting ones went
    assert await stack.engine.pauses.resume(started.run_id)
    run = await stack.wait_run(started.run_id)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == {"lines": [0, 1, 2, 3, 4, 5]}
    assert most <= 2
