"""The run page's Pause and Resume buttons: an operator pauses a run, sees it PAUSED
with a Resume button, sends a signal that is kept, and resumes it to its end."""

from __future__ import annotations

from playwright.async_api import expect

from tests.integration.api.conftest import deploy, waiting_workflow
from tests.integration.ui.conftest import Ui


async def test_an_operator_pauses_and_resumes_a_run_from_its_page(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-pause", event="approve"))
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-pause"})
    run_id = started.body["run_id"]
    await ui.sign_in("operator", f"#/runs/{run_id}")

    await expect(ui.page.locator("#run-status")).to_have_text("running")
    await ui.page.fill("#pause-reason", "checking")
    await ui.page.click("#pause")
    await expect(ui.page.locator("#message")).to_contain_text("Run paused.")
    await expect(ui.page.locator("#run-status")).to_have_text("paused")
    await expect(ui.page.locator("#pause")).to_have_count(0)
    await expect(ui.page.locator("#cancel")).to_have_count(1)  # a paused run can be cancelled
    hint = ui.page.locator(".run-waiting-hint")
    await expect(hint).to_contain_text("This run waits: paused: nothing new goes to a worker")
    await expect(hint.locator("a")).to_have_count(0)  # Resume is the way on, no other page

    await ui.page.click("#signal")
    await expect(ui.page.locator("#message")).to_contain_text("buffered")
    wait = ui.page.locator('#graph g.node[data-node="wait"]')
    await expect(wait).to_have_attribute("data-state", "WAITING")  # kept for the resume

    await ui.page.click("#resume")
    await expect(ui.page.locator("#run-status")).to_have_text("succeeded")
    await expect(wait).to_have_attribute("data-state", "COMPLETED")
    run = (await ui.gateway.call("GET", f"/v1/runs/{run_id}/history")).body["entries"]
    kinds = [e["kind"] for e in run]
    assert kinds.index("run.paused") < kinds.index("run.resumed") < kinds.index("run.finished")
