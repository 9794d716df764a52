"""WAIT_FOR_EVENT ``on_timeout: continue`` through the API, with the timer service's
loop firing the timeout: the run goes on down the branch a SWITCH picks on
``timed_out``, and a signal in time takes the other branch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.api.conftest import Live, deploy, open_gateway
from tests.integration.e2e.conftest import open_stack


@pytest.fixture
async def timed(database_url: str, redis_url: str) -> AsyncIterator[Live]:
    """The gateway beside the stack with its timer loop running."""
    async with (
        open_stack(database_url, redis_url, timer=True) as stack,
        open_gateway(database_url, redis_url, prefix=stack.prefix) as gw,
    ):
        yield Live(gw, stack)


def reminder(on_timeout: str | None) -> dict[str, Any]:
    """Wait a second for ``paid``; a SWITCH then sends a reminder if nobody paid."""
    spec: dict[str, Any] = {"event": "paid", "timeout_seconds": 1}
    if on_timeout is not None:
        spec["on_timeout"] = on_timeout
    return {
        "id": f"remind-{on_timeout or 'default'}",
        "output": {"waited": "{{tasks.w.output}}"},
        "nodes": [
            {"id": "w", "type": "WAIT_FOR_EVENT", "spec": spec},
            {"id": "s", "type": "SWITCH"},
            {"id": "remind", "type": "WAIT", "spec": {"duration_seconds": 0}},
            {"id": "ship", "type": "WAIT", "spec": {"duration_seconds": 0}},
        ],
        "edges": [
            {"from": "w", "to": "s"},
            {"from": "s", "to": "remind", "condition": "{{has(tasks.w.output.timed_out)}}"},
            {"from": "s", "to": "ship", "condition": "{{!has(tasks.w.output.timed_out)}}"},
        ],
    }


async def finished(live: Live, run_id: str) -> dict[str, Any]:
    answer = await live.gateway.call(
        "GET", f"/v1/runs/{run_id}/result", role="operator", params={"timeout": "15"}
    )
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


def states(run: dict[str, Any]) -> dict[str, str]:
    return {t["node_id"]: t["state"] for t in run["tasks"]}


async def start(live: Live, workflow_id: str) -> str:
    answer = await live.gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": workflow_id}
    )
    assert answer.status == 201, answer.body
    run_id: str = answer.body["run_id"]
    return run_id


async def test_continue_goes_on_down_the_timed_out_branch(timed: Live) -> None:
    await deploy(timed.gateway, reminder("continue"))
    run_id = await start(timed, "remind-continue")

    result = await finished(timed, run_id)
    assert result["status"] == "SUCCEEDED", result
    assert result["output"] == {"waited": {"timed_out": True}}
    run = await timed.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert states(run.body) == {
        "w": "COMPLETED",
        "s": "COMPLETED",
        "remind": "COMPLETED",
        "ship": "SKIPPED",
    }
    # the run is over: a late payment is refused, not buffered
    late = await timed.gateway.call("POST", f"/v1/runs/{run_id}/signals/paid", role="operator")
    assert late.status == 409


async def test_a_signal_in_time_takes_the_other_branch(timed: Live) -> None:
    await deploy(timed.gateway, reminder("continue"))
    run_id = await start(timed, "remind-continue")
    sent = await timed.gateway.call(
        "POST", f"/v1/runs/{run_id}/signals/paid", role="operator", json={"amount": 5}
    )
    assert sent.body == {"delivered": True}

    result = await finished(timed, run_id)
    assert result["status"] == "SUCCEEDED", result
    assert result["output"] == {"waited": {"amount": 5}}
    run = await timed.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert states(run.body)["remind"] == "SKIPPED"
    assert states(run.body)["ship"] == "COMPLETED"


async def test_the_default_still_fails_the_run(timed: Live) -> None:
    await deploy(timed.gateway, reminder(None))
    run_id = await start(timed, "remind-default")

    result = await finished(timed, run_id)
    assert result["status"] == "FAILED", result
    assert "timed out waiting for event 'paid'" in result["error"]
    assert "s" not in states(result)


async def test_a_bad_on_timeout_is_refused_at_publish(timed: Live) -> None:
    answer = await timed.gateway.call(
        "POST", "/v1/workflows", json=reminder("retry"), params={"deploy": "true"}
    )
    # 422, as for every problem of a definition (the API's definition-invalid)
    assert answer.status == 422, answer.body
    assert "nodes[0].spec.on_timeout: must be one of 'fail', 'continue', got 'retry'" in str(
        answer.body
    )
