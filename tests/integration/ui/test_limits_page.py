"""The Limits page and a waiting run's hint, in a real Chromium: a run over its key's
limit says why it waits, and the Limits page lists its key with the slots in use and
the runs waiting (docs/architecture.md §4.13)."""

from __future__ import annotations

import uuid

from playwright.async_api import expect

from tests.integration.api.conftest import deploy
from tests.integration.ui.conftest import Ui


async def test_a_waiting_run_says_why_and_the_limits_page_lists_its_key(ui: Ui) -> None:
    queue = f"ui-limited-{uuid.uuid4().hex[:6]}"  # nobody serves it: the first keeps its slot
    workflow_id = f"ui-limited-{queue}"
    await deploy(
        ui.gateway,
        {
            "id": workflow_id,
            "concurrency": {"key": "{{input.customer}}", "max_runs": 1},
            "nodes": [{"id": "charge", "type": "TASK", "queue": queue}],
        },
    )
    runs = []
    for _ in range(3):
        started = await ui.gateway.call(
            "POST", "/v1/runs", json={"workflow_id": workflow_id, "input": {"customer": "acme"}}
        )
        runs.append(started.body["run_id"])

    await ui.sign_in("operator", f"#/runs/{runs[2]}")
    hint = ui.page.locator("#waiting-hints .run-waiting-hint")
    await expect(hint).to_contain_text("waiting for a slot of key 'acme': 1 of 1 running")
    await expect(hint).to_contain_text("1 run(s) ahead of it")
    await expect(hint.locator("a")).to_have_attribute("href", "#/limits")
    await ui.screenshot("run-waiting-for-a-slot", page=True)

    await hint.locator("a").click()
    await expect(ui.page.locator("nav a.active")).to_have_text("Limits")
    row = ui.page.locator(f'#limits tr[data-workflow="{workflow_id}"]')
    await expect(row).to_have_attribute("data-key", "acme")
    await expect(row.locator(".in-use")).to_have_text("1 / 1")
    await expect(row.locator(".waiting")).to_have_text("2")
    await ui.screenshot("limits", page=True)

    # a viewer does not see the key: it is rendered from run inputs
    await ui.page.click("#signout")
    await ui.sign_in("viewer", "#/limits")
    row = ui.page.locator(f'#limits tr[data-workflow="{workflow_id}"]')
    await expect(row.locator("td").nth(1)).to_have_text("hidden")
