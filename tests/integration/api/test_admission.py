"""A task the admission step holds says why in the API: its waiting_hint names the
queue's limit and the setting (docs/architecture.md §4.12)."""

from __future__ import annotations

import uuid

from tests.integration.api.conftest import deploy, open_gateway


async def test_a_held_task_says_why_it_waits(database_url: str, redis_url: str) -> None:
    queue = f"payments-{uuid.uuid4().hex[:6]}"
    async with open_gateway(database_url, redis_url, queue_concurrency=f"{queue}=1") as gw:
        workflow = {
            "id": f"charge-{queue}",
            "nodes": [{"id": "charge", "type": "TASK", "queue": queue, "spec": {}}],
        }
        await deploy(gw, workflow)
        runs = []
        for _ in range(2):
            answer = await gw.call("POST", "/v1/runs", json={"workflow_id": workflow["id"]})
            assert answer.status == 201, answer.body
            runs.append(answer.body["run_id"])
        first, second = [(await gw.call("GET", f"/v1/runs/{run}")).body["tasks"][0] for run in runs]
    assert first["state"] in ("PENDING", "QUEUED")
    assert "at its limit" not in (first["waiting_hint"] or "")
    assert second["state"] == "PENDING"
    assert second["waiting_hint"].startswith(f"queue '{queue}' is at its limit of 1 task(s)")
    assert "COMPOSER_QUEUE_CONCURRENCY" in second["waiting_hint"]
