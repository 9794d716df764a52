"""Pause and resume through the API, with the real services (docs/architecture.md §4.14):
a paused run sends nothing to a worker, lets its running attempt finish and records it,
keeps its timers and signals for the resume, can be cancelled, and finishes once resumed.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import composer_repo as repo
from composer_sdk import TaskContext
from tests.integration.api.conftest import Gateway, Live, deploy, open_gateway, waiting_workflow
from tests.integration.api.test_cli import composer
from tests.integration.e2e.conftest import open_stack
from tests.integration.waits import until


@pytest.fixture
async def timed(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    """The gateway beside the stack, with the timer loop running."""
    async with (
        open_stack(database_url, redis_url, timer=True) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        yield Live(gw, stack)


async def call(gw: Gateway, method: str, path: str, **kw: Any) -> Any:
    answer = await gw.call(method, path, **kw)
    assert answer.status < 300, (answer.status, answer.body)
    return answer.body


async def run_of(gw: Gateway, run_id: str) -> dict[str, Any]:
    body: dict[str, Any] = await call(gw, "GET", f"/v1/runs/{run_id}")
    return body


async def task_of(gw: Gateway, run_id: str, node_id: str) -> dict[str, Any] | None:
    tasks = (await run_of(gw, run_id))["tasks"]
    return next((t for t in tasks if t["node_id"] == node_id), None)


async def kinds(gw: Gateway, run_id: str) -> list[tuple[str, str | None]]:
    body = await call(gw, "GET", f"/v1/runs/{run_id}/history")
    return [(e["kind"], e["node_id"]) for e in body["entries"]]


async def outbox_rows(pool: repo.Pool, run_id: str) -> int:
    count: int = await pool.fetchval(
        "SELECT count(*) FROM outbox WHERE kind = 'dispatch' AND run_id = $1", run_id
    )
    return count


async def start(gw: Gateway, workflow_id: str) -> str:
    body = await call(gw, "POST", "/v1/runs", json={"workflow_id": workflow_id})
    run_id: str = body["run_id"]
    return run_id


async def test_a_paused_run_finishes_its_running_attempt_sends_nothing_and_goes_on_at_resume(
    live: Live,
) -> None:
    gw, stack = live.gateway, live.stack
    queue = f"steps-{uuid.uuid4().hex[:6]}"
    await deploy(
        gw,
        {
            "id": "two-steps",
            "nodes": [
                {"id": "first", "type": "TASK", "queue": queue, "spec": {}},
                {"id": "second", "type": "TASK", "queue": queue, "spec": {}},
            ],
            "edges": [{"from": "first", "to": "second"}],
            "output": {"second": "{{tasks.second.output}}"},
        },
    )
    seen: list[str] = []
    gate = asyncio.Event()

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        seen.append(ctx.node_id)
        if ctx.node_id == "first":
            await gate.wait()
        return {"node": ctx.node_id}

    stack.worker({queue: handler})
    run_id = await start(gw, "two-steps")

    async def first_running() -> bool:
        task = await task_of(gw, run_id, "first")
        return task is not None and task["state"] == "RUNNING"

    await until(first_running, what="the first attempt leased")
    paused = await call(gw, "POST", f"/v1/runs/{run_id}/pause", json={"reason": "looking"})
    assert paused["status"] == "PAUSED"
    assert paused["waiting_hint"].startswith("paused: nothing new goes to a worker")
    gate.set()  # the running attempt finishes while the run is paused

    async def second_held() -> bool:
        task = await task_of(gw, run_id, "second")
        return task is not None and task["waiting_hint"] == repo.PAUSED_HOLD

    await until(second_held, what="the second task held by the pause")
    run = await run_of(gw, run_id)
    first = next(t for t in run["tasks"] if t["node_id"] == "first")
    second = next(t for t in run["tasks"] if t["node_id"] == "second")
    assert run["status"] == "PAUSED"
    assert first["state"] == "COMPLETED" and first["output"] == {"node": "first"}
    assert second["state"] == "PENDING"
    assert await outbox_rows(stack.pool, run_id) == 0  # nothing on its way to a worker
    assert seen == ["first"]
    # a long-poll of the run's end does not take PAUSED for an end
    waited = await gw.call("GET", f"/v1/runs/{run_id}/result", params={"timeout": "0.3"})
    assert (waited.status, waited.body["status"]) == (202, "PAUSED")

    resumed = await call(gw, "POST", f"/v1/runs/{run_id}/resume")
    assert resumed["status"] in ("RUNNING", "SUCCEEDED")
    done = await call(gw, "GET", f"/v1/runs/{run_id}/result", params={"timeout": "30"})
    assert done["status"] == "SUCCEEDED", done
    assert done["output"] == {"second": {"node": "second"}}
    assert seen == ["first", "second"]
    history = await kinds(gw, run_id)
    paused_at = history.index(("run.paused", None))
    assert ("task.completed", "first") in history[paused_at:]
    assert history.index(("task.held", "second")) < history.index(("run.resumed", None))
    assert history.index(("run.resumed", None)) < history.index(("task.released", "second"))
    assert history[-1] == ("run.finished", None)


async def test_a_task_on_its_way_to_a_worker_when_paused_is_leased_only_after_resume(
    live: Live,
) -> None:
    gw, stack = live.gateway, live.stack
    queue = f"later-{uuid.uuid4().hex[:6]}"
    await deploy(gw, {"id": "one-step", "nodes": [{"id": "work", "type": "TASK", "queue": queue}]})
    run_id = await start(gw, "one-step")

    async def queued() -> bool:
        task = await task_of(gw, run_id, "work")
        return task is not None and task["state"] == "QUEUED"

    await until(queued, what="the task published to its stream")
    await call(gw, "POST", f"/v1/runs/{run_id}/pause")
    task = await task_of(gw, run_id, "work")
    assert task is not None and (task["state"], task["waiting_hint"]) == (
        "PENDING",
        repo.PAUSED_HOLD,
    )
    # its stream entry is still there: a worker that reads it is refused the lease
    grant = await stack.engine.acquire_lease(run_id, task["task_id"], 0, owner="w-1", ttl=5.0)
    assert not grant.granted
    assert (await task_of(gw, run_id, "work") or {})["state"] == "PENDING"

    calls: list[str] = []

    async def handler(ctx: TaskContext, input: Any) -> dict[str, Any]:
        calls.append(ctx.task_id)
        return {"done": True}

    stack.worker({queue: handler})
    await call(gw, "POST", f"/v1/runs/{run_id}/resume")
    done = await call(gw, "GET", f"/v1/runs/{run_id}/result", params={"timeout": "30"})
    assert done["status"] == "SUCCEEDED", done
    assert calls == [task["task_id"]]


async def test_a_timer_that_comes_due_while_paused_fires_only_after_resume(timed: Live) -> None:
    gw = timed.gateway
    await deploy(
        gw,
        {
            "id": "short-nap",
            "nodes": [{"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.5}}],
        },
    )
    paused = await start(gw, "short-nap")
    await call(gw, "POST", f"/v1/runs/{paused}/pause")
    other = await start(gw, "short-nap")  # due after the paused one's timer
    done = await call(gw, "GET", f"/v1/runs/{other}/result", params={"timeout": "30"})
    assert done["status"] == "SUCCEEDED"  # the timer fired the later wait: it passed ours

    run = await run_of(gw, paused)
    nap = run["tasks"][0]
    assert (run["status"], nap["state"]) == ("PAUSED", "WAITING")
    assert ("timer.fired", "nap") not in await kinds(gw, paused)

    await call(gw, "POST", f"/v1/runs/{paused}/resume")
    done = await call(gw, "GET", f"/v1/runs/{paused}/result", params={"timeout": "30"})
    assert done["status"] == "SUCCEEDED", done
    history = await kinds(gw, paused)
    assert history.index(("run.resumed", None)) < history.index(("timer.fired", "nap"))


async def test_a_signal_sent_while_paused_is_kept_and_applied_at_resume(live: Live) -> None:
    gw = live.gateway
    await deploy(gw, waiting_workflow("waits-paused", "go"))
    run_id = await start(gw, "waits-paused")
    await call(gw, "POST", f"/v1/runs/{run_id}/pause")

    sent = await call(gw, "POST", f"/v1/runs/{run_id}/signals/go", json={"n": 7})
    assert sent == {"delivered": False}  # kept for the resume
    run = await run_of(gw, run_id)
    assert (run["status"], run["tasks"][0]["state"]) == ("PAUSED", "WAITING")

    resumed = await call(gw, "POST", f"/v1/runs/{run_id}/resume")
    assert resumed["status"] == "SUCCEEDED"  # the kept signal was its last step
    assert resumed["output"] == {"got": {"n": 7}}
    history = await kinds(gw, run_id)
    assert history.index(("run.resumed", None)) < history.index(("signal.consumed", "wait"))


async def test_a_paused_run_can_be_cancelled(live: Live) -> None:
    gw = live.gateway
    await deploy(
        gw, {"id": "nobody-serves", "nodes": [{"id": "work", "type": "TASK", "queue": "nobody"}]}
    )
    run_id = await start(gw, "nobody-serves")
    await call(gw, "POST", f"/v1/runs/{run_id}/pause")
    cancelled = await call(gw, "POST", f"/v1/runs/{run_id}/cancel", json={"reason": "stop"})
    assert cancelled["status"] == "CANCELLED"
    assert cancelled["tasks"][0]["state"] == "CANCELLED"
    done = await call(gw, "GET", f"/v1/runs/{run_id}/result", params={"timeout": "1"})
    assert done["status"] == "CANCELLED"


async def test_pause_and_resume_answer_bad_states_clearly(live: Live) -> None:
    gw = live.gateway
    await deploy(gw, waiting_workflow("waits-states", "go"))
    run_id = await start(gw, "waits-states")

    # a resume of a run that is not paused, and a pause sent twice, change nothing
    assert (await call(gw, "POST", f"/v1/runs/{run_id}/resume"))["status"] == "RUNNING"
    for _ in range(2):
        assert (await call(gw, "POST", f"/v1/runs/{run_id}/pause"))["status"] == "PAUSED"
    history = await kinds(gw, run_id)
    assert history.count(("run.paused", None)) == 1
    assert ("run.resumed", None) not in history

    retried = await gw.call("POST", f"/v1/runs/{run_id}/retry", json={"from_node": "wait"})
    assert retried.status == 409
    assert "PAUSED" in retried.body["detail"] and "resume it" in retried.body["detail"]

    await call(gw, "POST", f"/v1/runs/{run_id}/cancel")
    for action in ("pause", "resume"):
        answer = await gw.call("POST", f"/v1/runs/{run_id}/{action}")
        assert answer.status == 409, answer.body
        assert answer.body["type"] == "urn:composer:problem:conflict"
        assert answer.body["run_status"] == "CANCELLED"
        assert (
            f"is CANCELLED: only a run still going (RUNNING or PAUSED) can be {action}d"
            in (answer.body["detail"])
        )

    viewer = await gw.call("POST", f"/v1/runs/{run_id}/pause", role="viewer")
    assert viewer.status == 403


async def test_the_cli_pauses_and_resumes_a_run_and_its_history_says_so(live: Live) -> None:
    gw = live.gateway
    await deploy(gw, waiting_workflow("waits-cli", "go"))
    run_id = await start(gw, "waits-cli")

    paused = await composer(live, "pause", run_id, "--reason", "checking the charge")
    assert paused.exit_code == 0 and f"run {run_id} PAUSED" in paused.output, paused.output
    shown = await composer(live, "get", run_id, columns=200)
    assert "PAUSED" in shown.output
    assert "run waits: paused: nothing new goes to a worker" in shown.output, shown.output
    await call(gw, "POST", f"/v1/runs/{run_id}/signals/go", json={"n": 1})
    resumed = await composer(live, "resume", run_id)
    assert resumed.exit_code == 0 and f"run {run_id} SUCCEEDED" in resumed.output
    history = await composer(live, "history", run_id, columns=200)
    assert re.search(r"run paused by admin\S*: checking the charge", history.output), history.output
    assert "signal go received by admin" in history.output
    assert "(kept: the run is paused)" in history.output
    assert re.search(r"run resumed by admin\S*\s", history.output)
    assert "wait  took signal go" in history.output
    finished = await composer(live, "pause", run_id)
    assert finished.exit_code == 1 and "HTTP 409" in finished.output
    assert "is SUCCEEDED: only a run still going" in finished.output
