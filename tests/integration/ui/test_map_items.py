"""A MAP node shows its progress on the graph ("60 / 60 items") and its items are one
click away, paged, in the node panel (a real Chromium)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from composer_sdk import PermanentError, TaskContext
from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui

MAPPED: dict[str, Any] = {
    "id": "ui-map",
    "nodes": [
        {
            "id": "lines",
            "type": "MAP",
            "spec": {
                "items": "{{ input.lines }}",
                "max_parallel": 5,
                "on_failure": "continue",
                "node": {"type": "TASK", "queue": "ui-map", "spec": {"n": "{{ item }}"}},
            },
        }
    ],
}


async def line(ctx: TaskContext, input: Any) -> Any:
    if input["n"] == 3:
        raise PermanentError("out of stock")
    return input["n"]


async def test_the_map_node_shows_its_progress_and_its_items_one_click_away(ui: Ui) -> None:
    await deploy(ui.gateway, MAPPED)
    ui.stack.worker({"ui-map": line})
    started = await ui.gateway.call(
        "POST", "/v1/runs", json={"workflow_id": "ui-map", "input": {"lines": list(range(60))}}
    )
    run_id: str = started.body["run_id"]
    assert (await ui.stack.wait_run(run_id)).status == "SUCCEEDED"
    await ui.sign_in("operator", f"#/runs/{run_id}")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")
    node = ui.page.locator('#graph g.node[data-node="lines"]')
    await expect(node).to_contain_text("60 / 60 items")

    await node.click()
    await expect(ui.page.locator("#node-details dd.items-progress")).to_contain_text("60 / 60")
    rows = ui.page.locator("#items-table tbody tr")
    await expect(rows).to_have_count(50)
    await expect(rows.nth(3)).to_contain_text("failed")
    await expect(rows.nth(3)).to_contain_text("out of stock")
    await ui.screenshot("map-items", page=True)
    await ui.page.click("#items-next")
    await expect(rows).to_have_count(10)
    await expect(rows.nth(0).locator("td").first).to_have_text("50")
