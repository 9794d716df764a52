"""The node panel shows what each attempt of the node logged (a real Chromium)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from composer_sdk import TaskContext, TaskFailed
from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui

LOGGING: dict[str, Any] = {
    "id": "ui-logs",
    "nodes": [
        {
            "id": "talk",
            "type": "TASK",
            "queue": "ui-logs",
            "retry": {"max_attempts": 2, "initial_seconds": 0.1},
        },
        {
            "id": "script",
            "type": "PYTHON",
            "spec": {"code": "def main(input):\n    print('printed by the script')\n"},
        },
    ],
    "edges": [{"from": "talk", "to": "script"}],
}


async def talk(ctx: TaskContext, input: Any) -> dict[str, Any]:
    ctx.logger.info("talking, attempt %d", ctx.attempt)
    if ctx.attempt == 0:
        raise TaskFailed("not yet")
    return {}


async def logged_run(ui: Ui) -> str:
    await deploy(ui.gateway, LOGGING)
    ui.stack.worker({"ui-logs": talk})
    await ui.stack.builtin_workers()
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-logs"})
    run_id: str = started.body["run_id"]
    assert (await ui.stack.wait_run(run_id)).status == "SUCCEEDED"
    return run_id


async def test_the_node_panel_shows_each_attempt_s_lines(ui: Ui) -> None:
    run_id = await logged_run(ui)
    await ui.sign_in("operator", f"#/runs/{run_id}")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")

    await ui.page.click('#graph g.node[data-node="talk"]')
    logs = ui.page.locator("#node-logs .task-log")
    await expect(logs.locator("h3")).to_have_text(["Log · attempt 1", "Log · attempt 2"])
    await expect(logs.nth(0).locator("pre")).to_contain_text("INFO talking, attempt 0")
    await expect(logs.nth(1).locator("pre")).to_contain_text("INFO talking, attempt 1")
    await ui.screenshot("node-logs", page=True)

    await ui.page.click('#graph g.node[data-node="script"]')
    await expect(ui.page.locator("#node-title")).to_contain_text("script")
    await expect(ui.page.locator("#node-logs pre")).to_have_text("printed by the script")


async def test_a_viewer_sees_that_the_lines_are_redacted(ui: Ui) -> None:
    run_id = await logged_run(ui)
    await ui.sign_in("viewer", f"#/runs/{run_id}")

    await ui.page.click('#graph g.node[data-node="script"]')

    await expect(ui.page.locator("#node-logs .redacted")).to_have_text("redacted")
    assert await ui.page.locator("#node-logs pre").count() == 0
