"""Labels and bulk actions in the web UI, in a real Chromium: the runs page filters by
labels (every one must match) beside workflow and status, shows each run's labels as
links to the runs that carry them (the run page too, to a viewer as well), and lets an
operator cancel the runs a filter matches, following the operation to its end."""

from __future__ import annotations

from playwright.async_api import expect

from tests.integration.api.conftest import deploy, waiting_workflow
from tests.integration.api.test_bulk_actions import lease_sweeper
from tests.integration.ui.conftest import Ui


async def test_the_runs_page_filters_by_label_and_links_each_label(ui: Ui) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-labels"))

    async def start(labels: dict[str, str]) -> str:
        answer = await ui.gateway.call(
            "POST", "/v1/runs", json={"workflow_id": "ui-labels", "labels": labels}
        )
        assert answer.status == 201, answer.body
        run_id: str = answer.body["run_id"]
        return run_id

    prod = await start({"shopper": "ui-acme", "env": "prod"})
    staging = await start({"shopper": "ui-acme", "env": "staging"})
    await start({"shopper": "ui-globex", "env": "prod"})

    await ui.sign_in("viewer", "#/runs?workflow_id=ui-labels")
    rows = ui.page.locator("#runs tbody tr")
    await expect(rows).to_have_count(3)
    await ui.page.fill("#filter-labels", "shopper:ui-acme, env:prod")
    await ui.page.click("#run-filters button[type=submit]")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-run", prod)
    await expect(rows.first.locator(".label-chip")).to_have_text(["env=prod", "shopper=ui-acme"])

    # a label links to every run that carries it
    await rows.first.locator(".label-chip", has_text="shopper=ui-acme").click()
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_have_attribute("data-run", staging)
    await expect(ui.page.locator("#filter-labels")).to_have_value("shopper:ui-acme")

    await rows.first.locator(f'a[href="#/runs/{staging}"]').click()
    await expect(ui.page.locator("dd.labels .label-chip")).to_have_text(
        ["env=staging", "shopper=ui-acme"]
    )


async def test_an_operator_cancels_the_runs_a_filter_matches(
    ui: Ui, database_url: str, redis_url: str
) -> None:
    await deploy(ui.gateway, waiting_workflow("ui-bulk"))
    runs = []
    for _ in range(3):
        answer = await ui.gateway.call(
            "POST", "/v1/runs", json={"workflow_id": "ui-bulk", "labels": {"lot": "ui-7"}}
        )
        runs.append(answer.body["run_id"])
    other = await ui.gateway.call("POST", "/v1/runs", json={"workflow_id": "ui-bulk"})

    await ui.sign_in("operator", "#/runs")
    await expect(ui.page.locator("#bulk-cancel")).to_be_disabled()  # no filter: every run
    await ui.page.fill("#filter-labels", "lot:ui-7")
    await ui.page.click("#run-filters button[type=submit]")
    await expect(ui.page.locator("#runs tbody tr")).to_have_count(3)
    await ui.page.click("#bulk-cancel")
    await expect(ui.page.locator("#bulk-question")).to_have_text(
        "Cancel the 3 run(s) these filters match?"
    )
    async with lease_sweeper(ui.gateway, database_url, redis_url):
        await ui.page.click("#bulk-yes")
        progress = ui.page.locator('#bulk-progress[data-state="DONE"]')
        # the lease-sweeper carries it out on its own ticks (1 s): a loaded box takes longer
        await expect(progress).to_contain_text(
            "3 / 3 — 3 cancelled, 0 skipped, 0 failed", timeout=30_000
        )
    await expect(ui.page.locator("#runs tbody .badge")).to_have_text(["cancelled"] * 3)
    shown = await ui.gateway.call("GET", f"/v1/runs/{other.body['run_id']}")
    assert shown.body["status"] == "RUNNING"


async def test_a_viewer_gets_no_bulk_buttons(ui: Ui) -> None:
    await ui.sign_in("viewer", "#/runs?status=RUNNING")
    await expect(ui.page.locator("#runs")).to_be_visible()
    await expect(ui.page.locator("#bulk button")).to_have_count(0)
