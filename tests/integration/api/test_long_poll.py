"""GET /v1/runs/{id}/result: woken by the run-finished hint, one subscription for all."""

from __future__ import annotations

import asyncio
import time

import uuid6

import composer_queue as cq
from composer_api_gateway.state import REDIS, WAITERS
from tests.integration.api.conftest import Gateway, Live, deploy, open_gateway, waiting_workflow
from tests.integration.e2e.conftest import eventually


async def test_answers_promptly_when_the_run_finishes(gateway: Gateway) -> None:
    # the fallback poll is 5 s here: only the hint can answer within a fraction of that
    await deploy(gateway, waiting_workflow("lp-prompt"))
    started = await gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": "lp-prompt"}
    )
    run_id = started.body["run_id"]
    waiter = asyncio.create_task(
        # operator: a viewer would see the output redacted (test_callers.py)
        gateway.call("GET", f"/v1/runs/{run_id}/result", role="operator", params={"timeout": "30"})
    )
    waiters = gateway.app[WAITERS]
    await eventually(lambda: waiters.waiting == 1, what="the long-poll registered")
    assert not waiter.done()
    signalled = await gateway.call(
        "POST", f"/v1/runs/{run_id}/signals/go", role="operator", json={"ok": True}
    )
    finished_at = time.monotonic()
    assert signalled.body == {"delivered": True}
    answer = await waiter
    latency = time.monotonic() - finished_at
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "SUCCEEDED" and answer.body["output"] == {"got": {"ok": True}}
    assert latency < 0.5, f"long-poll answered {latency:.3f}s after the run finished"


async def test_timeout_answers_202_with_the_run_as_it_is(gateway: Gateway) -> None:
    await deploy(gateway, waiting_workflow("lp-timeout"))
    started = await gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": "lp-timeout"}
    )
    run_id = started.body["run_id"]
    t0 = time.monotonic()
    answer = await gateway.call(
        "GET", f"/v1/runs/{run_id}/result", role="viewer", params={"timeout": "0.3"}
    )
    assert 0.25 < time.monotonic() - t0 < 3
    assert answer.status == 202
    assert answer.body["status"] == "RUNNING" and answer.body["tasks"][0]["state"] == "WAITING"
    immediate = await gateway.call(
        "GET", f"/v1/runs/{run_id}/result", role="viewer", params={"timeout": "0"}
    )
    assert immediate.status == 202
    for bad in ("-1", "soon", "inf", "nan"):
        answer = await gateway.call(
            "GET", f"/v1/runs/{run_id}/result", role="viewer", params={"timeout": bad}
        )
        assert answer.status == 400, bad
    missing = await gateway.call("GET", f"/v1/runs/{uuid6.uuid7()}/result", role="viewer")
    assert missing.status == 404


async def test_many_waiters_share_one_subscription(gateway: Gateway) -> None:
    await deploy(gateway, waiting_workflow("lp-many"))
    run_ids = [
        (
            await gateway.call("POST", "/v1/runs", role="operator", json={"workflow_id": "lp-many"})
        ).body["run_id"]
        for _ in range(5)
    ]
    polls = [
        asyncio.create_task(
            gateway.call(
                "GET", f"/v1/runs/{run_ids[i % 5]}/result", role="viewer", params={"timeout": "20"}
            )
        )
        for i in range(40)
    ]
    waiters = gateway.app[WAITERS]
    await eventually(lambda: waiters.waiting == 40, what="40 long-polls registered")
    redis = gateway.app[REDIS]
    assert await redis.subscribers(cq.channel(gateway.prefix, cq.RUN_FINISHED)) == 1
    t0 = time.monotonic()
    for run_id in run_ids:
        await gateway.call("POST", f"/v1/runs/{run_id}/signals/go", role="operator")
    answers = await asyncio.gather(*polls)
    assert time.monotonic() - t0 < 2.0
    assert {a.status for a in answers} == {200}
    assert waiters.waiting == 0


async def test_a_run_finished_by_workers_wakes_the_waiter(live: Live) -> None:
    """The hint comes from another engine (the coordinator's), as in production."""
    await deploy(
        live.gateway,
        {
            "id": "lp-python",
            "output": "{{tasks.calc.output}}",
            "nodes": [
                {
                    "id": "calc",
                    "type": "PYTHON",
                    "spec": {
                        "code": "def main(input):\n    return input['n'] * 2\n",
                        "input": {"n": "{{input.n}}"},
                    },
                }
            ],
        },
    )
    await live.stack.builtin_workers()
    started = await live.gateway.call(
        "POST", "/v1/runs", role="operator", json={"workflow_id": "lp-python", "input": {"n": 21}}
    )
    answer = await live.gateway.call(
        "GET",
        f"/v1/runs/{started.body['run_id']}/result",
        role="operator",
        params={"timeout": "20"},
    )
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "SUCCEEDED" and answer.body["output"] == 42
    assert live.gateway.app[WAITERS].hints_received >= 1


async def test_without_redis_long_polls_fall_back_to_polling(database_url: str) -> None:
    """Hints are an optimisation: with Redis down, a waiter still sees the finish by polling."""
    async with open_gateway(database_url, "redis://127.0.0.1:9/0", result_poll_seconds=0.2) as gw:
        ready = await gw.admin("/readyz")
        assert ready.status == 503 and ready.body["checks"]["redis"].startswith("failed")
        await deploy(gw, waiting_workflow("lp-no-redis"))
        started = await gw.call(
            "POST", "/v1/runs", role="operator", json={"workflow_id": "lp-no-redis"}
        )
        run_id = started.body["run_id"]
        waiter = asyncio.create_task(
            gw.call("GET", f"/v1/runs/{run_id}/result", role="viewer", params={"timeout": "10"})
        )
        await eventually(lambda: gw.app[WAITERS].waiting == 1, what="the long-poll registered")
        await gw.call("POST", f"/v1/runs/{run_id}/signals/go", role="operator")
        finished_at = time.monotonic()
        answer = await waiter
        assert answer.status == 200 and answer.body["status"] == "SUCCEEDED"
        assert time.monotonic() - finished_at < 2.0
