"""The run page links a SUB_WORKFLOW's parent and child both ways: the parent lists
its child with its status, one click opens the child, whose page links back."""

from __future__ import annotations

from playwright.async_api import expect

from tests.integration.api.conftest import deploy, waiting_workflow
from tests.integration.ui.conftest import Ui


async def test_a_parent_and_its_child_link_to_each_other(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-child", event="approve"))
    parent = {
        "id": "ui-parent",
        "nodes": [{"id": "call", "type": "SUB_WORKFLOW", "spec": {"workflow": "ui-child"}}],
    }
    await deploy(ui.gateway, parent)
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-parent"})
    run_id = started.body["run_id"]
    await ui.sign_in("operator", f"#/runs/{run_id}")

    children = ui.page.locator("#run-children li")
    await expect(children).to_have_count(1)
    await expect(children).to_contain_text("ui-child v1 (call, attempt 1)")
    await children.locator("a").click()

    back = ui.page.locator("#run-parent")
    await expect(back).to_contain_text(f"{run_id} (call, attempt 1)")
    await back.click()
    await expect(ui.page.locator("#run-id")).to_have_text(run_id)
