"""What a run's detail says about its tasks: a cancelled wait is CANCELLED, an
attempt is counted the same way everywhere, and a task that completed shows no
error from an attempt before."""

from __future__ import annotations

from typing import Any

from composer_sdk import TaskContext
from tests.integration.api.conftest import Gateway, Live, deploy, waiting_workflow
from tests.integration.api.test_cli import composer


async def test_a_cancelled_wait_is_cancelled_not_failed(gateway: Gateway) -> None:
    await deploy(gateway, waiting_workflow("cancel-signal"))
    await deploy(
        gateway,
        {
            "id": "cancel-timer",
            "nodes": [{"id": "wait", "type": "WAIT", "spec": {"duration_seconds": 3600}}],
        },
    )
    for workflow in ("cancel-signal", "cancel-timer"):
        started = await gateway.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": workflow}
        )
        run_id = started.body["run_id"]
        cancelled = await gateway.call(
            "POST", f"/v1/runs/{run_id}/cancel", role="operator", json={"reason": "not needed"}
        )
        assert cancelled.status == 200, cancelled.body
        run = (await gateway.call("GET", f"/v1/runs/{run_id}", role="operator")).body
        assert run["status"] == "CANCELLED"
        [task] = run["tasks"]
        assert (task["node_id"], task["state"], task["error"]) == (
            "wait",
            "CANCELLED",
            "not needed",
        ), workflow
        assert task["finished_at"] is not None and task["wake_at"] is None


async def test_a_task_that_completed_on_a_later_attempt_shows_no_earlier_error(
    live: Live,
) -> None:
    async def flaky(ctx: TaskContext, input: dict[str, Any]) -> dict[str, Any]:
        if ctx.attempt == 0:
            raise RuntimeError("the bank timed out")  # retryable
        return {"charged": input["amount"], "attempt": ctx.attempt}

    live.stack.worker({"flaky-bank": flaky})
    await deploy(
        live.gateway,
        {
            "id": "flaky-charge",
            "nodes": [
                {
                    "id": "charge",
                    "type": "TASK",
                    "queue": "flaky-bank",
                    "spec": {"amount": "{{input.amount}}"},
                    "retry": {"max_attempts": 3, "initial_seconds": 0},
                }
            ],
        },
    )
    started = await live.gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": "flaky-charge", "input": {"amount": 4}},
    )
    run_id = started.body["run_id"]
    assert (await live.stack.wait_run(run_id)).status == "SUCCEEDED"

    run = (await live.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")).body
    [task] = run["tasks"]
    assert task["state"] == "COMPLETED"
    assert task["output"] == {"charged": 4, "attempt": 1}
    assert (task["error"], task["error_code"]) == (None, None)
    # attempt counts from 0 in the API (as the worker's ctx.attempt); max_attempts beside it
    assert (task["attempt"], task["max_attempts"]) == (1, 3)

    shown = await composer(live, "get", run_id)
    assert shown.exit_code == 0, shown.output
    assert "2 of 3" in shown.output  # the second attempt, counted from 1 as in the UI
    assert "timed out" not in shown.output
