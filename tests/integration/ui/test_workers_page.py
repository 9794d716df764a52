"""The Workers page and the run page's hint, in a real Chromium: a live SDK worker listed
with its queues and load, and a run stuck on a queue nobody serves that says so."""

from __future__ import annotations

import uuid

from playwright.async_api import expect

from composer_sdk import TaskContext
from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui


async def test_the_workers_page_lists_a_live_worker_and_its_queues(ui: Ui) -> None:
    queue = f"ui-pay-{uuid.uuid4().hex[:6]}"

    async def pay(ctx: TaskContext, input: object) -> None:
        return None

    worker = ui.stack.worker({queue: pay}, concurrency=5, presence_seconds=0.1)
    await ui.sign_in("viewer", "#/workers")
    await expect(ui.page.locator("nav a.active")).to_have_text("Workers")

    row = ui.page.locator(f'#workers tr[data-worker="{worker.owner}"]')
    await expect(row).to_be_visible()
    await expect(row.locator(".queue")).to_have_text(queue)
    await expect(row.locator(".badge")).to_have_text("serving")
    await expect(row.locator(".busy")).to_have_text("0 / 5")
    await ui.screenshot("workers", page=True)


async def test_a_run_waiting_on_a_queue_nobody_serves_says_so(ui: Ui) -> None:
    queue = f"ui-nobody-{uuid.uuid4().hex[:6]}"
    await deploy(
        ui.gateway,
        {"id": "ui-unserved", "nodes": [{"id": "charge", "type": "TASK", "queue": queue}]},
    )
    started = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-unserved"})
    run_id = started.body["run_id"]

    await ui.sign_in("viewer", f"#/runs/{run_id}")

    hint = ui.page.locator('#waiting-hints .waiting-hint[data-node="charge"]')
    await expect(hint).to_contain_text(f"no worker has ever served queue '{queue}'")
    await expect(hint.locator("a")).to_have_attribute("href", "#/workers")
    # the selected node (the one waiting) says it too
    await expect(ui.page.locator("#node-details .waiting-hint-text")).to_contain_text(queue)
    await ui.screenshot("waiting-hint", page=True)

    async def charge(ctx: TaskContext, input: object) -> None:
        return None

    ui.stack.worker({queue: charge}, presence_seconds=0.1)
    await ui.stack.wait_run(run_id)
    await expect(ui.page.locator("#waiting-hints .waiting-hint")).to_have_count(0)
