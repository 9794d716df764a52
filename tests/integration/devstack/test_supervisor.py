"""`make run`'s supervisor as a user runs it: every service up on tokens it made itself
(kept in the state folder and printed), a workflow through the REST API to SUCCEEDED,
counters moved on /metrics, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import aiohttp

from tests.integration.devstack.conftest import SERVICES, Stack, ready, saved_tokens


async def test_stack_runs_a_workflow_and_stops_cleanly(running_stack: Stack) -> None:
    stack = running_stack
    async with aiohttp.ClientSession() as session:
        await ready(session, f"{stack.api}/healthz")
        # the tokens it made on this first start, as `make demo` reads them
        token = saved_tokens(stack.state)["COMPOSER_API_TOKEN"]
        assert len(token) >= 32
        assert any(token in line for line in stack.output), "the banner does not show the token"
        auth = {"Authorization": f"Bearer {token}"}
        for port in stack.admin_ports:
            await ready(session, f"http://127.0.0.1:{port}/readyz")
        definition = {
            "id": "stack-smoke",
            "nodes": [
                {
                    "id": "double",
                    "type": "PYTHON",
                    "spec": {
                        "code": "def main(input):\n    return {'n': input['n'] * 2}\n",
                        "input": {"n": "{{input.n}}"},
                    },
                },
                {"id": "nap", "type": "WAIT", "spec": {"duration_seconds": 0.5}},
            ],
            "edges": [{"from": "double", "to": "nap"}],
            "output": {"n": "{{tasks.double.output.n}}"},
        }
        async with session.post(
            f"{stack.api}/v1/workflows?deploy=true", json=definition, headers=auth
        ) as r:
            assert r.status == 201, await r.text()
        async with session.post(
            f"{stack.api}/v1/runs",
            json={"workflow_id": "stack-smoke", "input": {"n": 21}},
            headers=auth,
        ) as r:
            assert r.status == 201, await r.text()
            run_id = (await r.json())["run_id"]
        async with session.get(
            f"{stack.api}/v1/runs/{run_id}/result?timeout=30", headers=auth
        ) as r:
            run = await r.json()
        assert run["status"] == "SUCCEEDED", run
        assert run["output"] == {"n": 42}
        coordinator_admin = (
            f"http://127.0.0.1:{stack.admin_ports[SERVICES.index('coordinator')]}/metrics"
        )
        async with session.get(coordinator_admin) as r:
            metrics = await r.text()
        completed = [
            line
            for line in metrics.splitlines()
            if line.startswith("composer_tasks_completed_total")
        ]
        assert completed and sum(float(line.rsplit(" ", 1)[1]) for line in completed) >= 1, metrics[
            :2000
        ]
        gateway_admin = (
            f"http://127.0.0.1:{stack.admin_ports[SERVICES.index('api-gateway')]}/metrics"
        )
        async with session.get(gateway_admin) as r:
            metrics = await r.text()
        # the gateway's request metrics are on its admin port with every other metric
        assert 'route="/v1/runs"' in metrics and "composer_api_requests_total" in metrics, metrics[
            :2000
        ]

    stack.process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(stack.process.wait(), 30)
    assert stack.process.returncode == 0, "\n".join(stack.output[-40:])
    output = "\n".join(stack.output)
    assert "every service stopped" in output
    assert "did not stop" not in output  # none needed a SIGKILL
    for name in SERVICES:
        assert f"{name:<17} |" in output or f"{name} |" in output, f"no output from {name}"
