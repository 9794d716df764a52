"""A MAP node's progress through the API and the CLI, with the real services: the
MAP's task in GET /v1/runs/{id} counts its items by state while they run (37 / 100
in `composer get`), and its items are one request away, paged, redacted for a
viewer as the run's tasks are (docs/architecture.md §2, "MAP")."""

from __future__ import annotations

import asyncio
from typing import Any

from composer_sdk import TaskContext
from tests.integration.api.conftest import Live, deploy
from tests.integration.api.test_cli import composer
from tests.integration.waits import until

MAP_WORKFLOW: dict[str, Any] = {
    "id": "map-progress",
    "nodes": [
        {
            "id": "lines",
            "type": "MAP",
            "spec": {
                "items": "{{ input.lines }}",
                "max_parallel": 4,
                "node": {"type": "TASK", "queue": "map-lines", "spec": {"n": "{{ item }}"}},
            },
        }
    ],
    "output": {"lines": "{{ tasks.lines.output }}"},
}


async def test_progress_counts_and_items_one_request_away(live: Live) -> None:
    await deploy(live.gateway, MAP_WORKFLOW)
    gate = asyncio.Event()

    async def line(ctx: TaskContext, input: dict[str, Any]) -> Any:
        if input["n"] >= 37:
            await gate.wait()  # the first 37 finish; the rest wait for the test
        return input["n"] * 2

    live.stack.worker({"map-lines": line}, concurrency=4)
    started = await live.gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": "map-progress", "input": {"lines": list(range(100))}},
    )
    assert started.status == 201, started.body
    run_id = started.body["run_id"]

    async def progress() -> dict[str, Any] | None:
        run = await live.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
        items: dict[str, Any] | None = run.body["tasks"][0]["items"]
        return items if items and items["finished"] == 37 else None

    await until(progress, timeout=20, what="37 of 100 items finished")
    run = await live.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    (task,) = run.body["tasks"]  # the run's own task only: its items are listed apart
    assert task["state"] == "WAITING" and task["type"] == "MAP"
    items = task["items"]
    assert items["total"] == 100
    assert items["counts"]["COMPLETED"] == 37
    assert sum(items["counts"].values()) == 100
    assert items["counts"].get("RUNNING", 0) + items["counts"].get("QUEUED", 0) <= 4

    shown = await composer(live, "get", run_id, columns=160)
    assert shown.exit_code == 0, shown.output
    assert "37 / 100" in shown.output

    page = await live.gateway.call(
        "GET",
        f"/v1/runs/{run_id}/tasks/lines/items",
        role="operator",
        params={"start": "30", "limit": "20"},
    )
    assert page.status == 200, page.body
    assert [t["item"] for t in page.body["items"]] == list(range(30, 50))
    assert page.body["next_start"] == 50
    assert page.body["items"][0]["output"] == 60
    assert page.body["items"][0]["input"] == {"n": 30}
    waiting = page.body["items"][-1]  # 37-40 run (held by the test), 41 on wait
    assert waiting["state"] == "PENDING" and "max_parallel" in (waiting["waiting_hint"] or "")

    viewer = await live.gateway.call(
        "GET", f"/v1/runs/{run_id}/tasks/lines/items", role="viewer", params={"limit": "2"}
    )
    assert viewer.body["redacted"] is True
    assert [t["output"] for t in viewer.body["items"]] == [None, None]

    listed = await composer(live, "items", run_id, "lines", "--start", "95", columns=120)
    assert listed.exit_code == 0, listed.output
    assert "PENDING" in listed.output and "99" in listed.output

    gate.set()
    result = await live.gateway.call(
        "GET", f"/v1/runs/{run_id}/result", role="operator", params={"timeout": "20"}
    )
    assert result.body["status"] == "SUCCEEDED", result.body
    assert result.body["output"] == {"lines": [n * 2 for n in range(100)]}
    done = await live.gateway.call("GET", f"/v1/runs/{run_id}", role="operator")
    assert done.body["tasks"][0]["items"] == {
        "total": 100,
        "finished": 100,
        "counts": {"COMPLETED": 100},
    }


async def test_items_of_a_node_that_is_no_map_answer_404(live: Live) -> None:
    await deploy(live.gateway, MAP_WORKFLOW)
    started = await live.gateway.call(
        "POST",
        "/v1/runs",
        role="operator",
        json={"workflow_id": "map-progress", "input": {"lines": []}},
    )
    run_id = started.body["run_id"]
    missing = await live.gateway.call("GET", f"/v1/runs/{run_id}/tasks/nope/items", role="operator")
    assert missing.status == 404, missing.body
    assert "nope" in missing.body["detail"]
