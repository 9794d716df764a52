"""Labels in the web UI, in a real Chromium: the runs page filters by labels (every one
must match) beside workflow and status, shows each run's labels as links to the runs
that carry them, and the run page shows them too, to a viewer as well."""

from __future__ import annotations

from playwright.async_api import expect

from tests.integration.api.conftest import deploy, waiting_workflow
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
